//! Every remote fetch is single-flight: a reader that misses an entry another thread is fetching
//! (the read-ahead, or a second reader) waits for that fetch and takes its result, so each
//! remote object is requested once. The races are made deterministic by a backend hook that
//! holds the first fetch until the second caller is seen waiting in the cache (or, were the
//! race still there, sending its own request).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::setup::finished;
use common::*;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit::{Counting, Method};
use krabka_remote_storage::{IndexType, RemoteLogSegmentMetadata, RemoteStorageManager};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::{Error, RemoteReadCache, TieredLog, TieringConfig};

/// How long the hook holds a fetch at most, and how long a test waits for the hook.
const HOLD: Duration = Duration::from_secs(20);

/// What the hook has seen of the fetches of the one index it watches.
#[derive(Default)]
struct Seen {
    /// The index watched: the segment (its start seq) and the index type; `None`: nothing is
    /// held or counted.
    watched: Option<(u64, IndexType)>,
    /// `fetch_index` calls of the watched segment by read-ahead threads.
    ahead: u64,
    /// `fetch_index` calls of the watched segment by any other thread.
    others: u64,
    /// Whether the first call is being held now.
    holding: bool,
    /// The cache's wait count when the second caller began: the held call is released once
    /// the cache counts a wait after it (the second caller waiting on the held fetch).
    second_began_at: Option<u64>,
}

/// The hook's shared state.
#[derive(Default)]
struct Gate {
    seen: Mutex<Seen>,
    changed: Condvar,
}

impl Gate {
    /// Waits (at most [`HOLD`]) until `done` holds of what was seen.
    fn wait_for(&self, done: impl Fn(&Seen) -> bool) -> bool {
        let until = Instant::now() + HOLD;
        let mut seen = self.seen.lock().unwrap();
        while !done(&seen) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            seen = self.changed.wait_timeout(seen, left).unwrap().0;
        }
        true
    }
}

fn is_read_ahead() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("krabka-read-ahead"))
}

/// A filesystem remote whose `fetch_index` calls of the watched index are counted, the first
/// held (by whichever thread `hold` picks) until the cache counts a wait after the second
/// caller began, another thread sends its own request for that index, or [`HOLD`] passes.
fn gated(
    fs: Arc<FsRemoteStorage>,
    gate: Arc<Gate>,
    cache: RemoteReadCache,
    hold: fn() -> bool,
) -> Arc<Counting<Arc<FsRemoteStorage>>> {
    Arc::new(Counting::new(fs).with_hook(move |call| {
        if call.method != Method::FetchIndex {
            return Ok(());
        }
        let mut seen = gate.seen.lock().unwrap();
        let this = call.index.map(|t| (call.metadata.start_offset(), t));
        if this.is_none() || seen.watched != this {
            return Ok(());
        }
        let held = hold();
        if is_read_ahead() {
            seen.ahead += 1;
        } else {
            seen.others += 1;
        }
        let first = seen.ahead + seen.others == 1;
        gate.changed.notify_all();
        if !(first && held) {
            return Ok(());
        }
        seen.holding = true;
        gate.changed.notify_all();
        let until = Instant::now() + HOLD;
        let second_waits = |seen: &Seen| {
            seen.second_began_at
                .is_some_and(|w| cache.stats().waits > w)
        };
        while !second_waits(&seen) && seen.others + seen.ahead == 1 {
            if Instant::now() >= until {
                break;
            }
            seen = gate
                .changed
                .wait_timeout(seen, Duration::from_millis(2))
                .unwrap()
                .0;
        }
        seen.holding = false;
        Ok(())
    }))
}

/// Nothing kept locally, remote data read in 4 KiB chunks.
fn small_chunks() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        chunk_bytes: 4 << 10,
        ..TieringConfig::default()
    }
}

/// A tiered log of 16 KiB segments in `dir/local` over `rsm`, reading through `cache`.
fn open_log(
    dir: &std::path::Path,
    rsm: Arc<dyn RemoteStorageManager>,
    rlmm: &Arc<InMemoryRemoteLogMetadataManager>,
    cache: RemoteReadCache,
    config: TieringConfig,
) -> TieredLog {
    TieredLog::open(
        dir.join("local"),
        options(16 << 10),
        rsm,
        rlmm.clone(),
        tp(),
        config,
    )
    .unwrap()
    .with_cache(cache)
}

struct Fixture {
    _dir: tempfile::TempDir,
    log: TieredLog,
    gate: Arc<Gate>,
    segments: Vec<RemoteLogSegmentMetadata>,
}

/// A log of several 16 KiB segments, all but the active one remote and none kept locally, read
/// in 4 KiB chunks.
fn fixture(hold: fn() -> bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let cache = RemoteReadCache::new(64 << 20);
    let gate = Arc::new(Gate::default());
    let rsm = gated(fs, gate.clone(), cache.clone(), hold);
    let log = open_log(dir.path(), rsm.clone(), &rlmm, cache, small_chunks());
    append(&log, 2000);
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let segments = finished(rlmm.as_ref());
    assert!(segments.len() >= 3, "{} remote segments", segments.len());
    assert_eq!(
        log.local_first_seq(),
        segments.last().unwrap().end_offset() + 1
    );
    Fixture {
        _dir: dir,
        log,
        gate,
        segments,
    }
}

fn count(meta: &RemoteLogSegmentMetadata) -> usize {
    usize::try_from(meta.end_offset() - meta.start_offset() + 1).unwrap()
}

fn check(records: &[krabka_storage::Record], from: u64, n: usize) {
    assert_eq!(records.len(), n);
    for (i, r) in records.iter().enumerate() {
        let seq = from + i as u64;
        assert_eq!(r.seq, seq);
        assert_eq!(r.message.value, message(seq).value, "wrong value at {seq}");
    }
}

#[test]
fn a_sequential_reader_goes_through_segments_without_their_offset_indexes() {
    let f = fixture(|| false);
    let (a, b) = (&f.segments[0], &f.segments[1]);
    f.gate.seen.lock().unwrap().watched = Some((b.start_offset(), IndexType::Offset));
    // A sequential read of the first segment crosses its chunks, and its read-ahead reaches
    // into the next segment: the chunks only, not the offset index.
    // A segment read in two halves: from its first batch, then from where that read stopped.
    let read_in_halves = |seg| {
        let half = count(seg) / 2;
        let start = seg.start_offset();
        check(&f.log.read(start, half).unwrap(), start, half);
        let (from, rest) = (start + half as u64, count(seg) - half);
        check(&f.log.read(from, rest).unwrap(), from, rest);
    };
    read_in_halves(a);
    // The next segment the same way.
    read_in_halves(b);
    let seen = f.gate.seen.lock().unwrap();
    assert_eq!(
        (seen.ahead, seen.others),
        (0, 0),
        "index fetches of the second segment by the read-ahead and by readers"
    );
    drop(seen);
    // A read from inside it that continues no read needs its index, and fetches it.
    let mid = b.start_offset() + 3;
    check(&f.log.read(mid, 2).unwrap(), mid, 2);
    assert_eq!(f.gate.seen.lock().unwrap().others, 1);
}

#[test]
fn two_readers_of_one_time_index_send_one_request() {
    let f = fixture(|| true);
    let a = f.segments[0].clone();
    // The first record's timestamp is found in the first segment, through its time index.
    let first_ts = f.log.read(a.start_offset(), 1).unwrap()[0]
        .message
        .timestamp;
    f.gate.seen.lock().unwrap().watched = Some((a.start_offset(), IndexType::Timestamp));
    std::thread::scope(|s| {
        // The first lookup's time-index fetch is held in the backend ...
        let first = s.spawn(|| f.log.seq_for_timestamp(first_ts));
        assert!(
            f.gate.wait_for(|s| s.holding),
            "the first lookup never fetched"
        );
        // ... while a second lookup misses the same index.
        let waits = f.log.cache().stats().waits;
        f.gate.seen.lock().unwrap().second_began_at = Some(waits);
        let second = f.log.seq_for_timestamp(first_ts).unwrap();
        assert!(
            f.log.cache().stats().waits > waits,
            "the second lookup never waited"
        );
        let first = first.join().unwrap().unwrap();
        assert_eq!(
            (first, second),
            (Some(a.start_offset()), Some(a.start_offset()))
        );
    });
    let seen = f.gate.seen.lock().unwrap();
    assert_eq!(
        seen.ahead + seen.others,
        1,
        "time-index requests of the first segment"
    );
}

#[test]
fn a_wait_past_the_fetch_deadline_is_a_typed_error_and_sends_no_second_request() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let cache = RemoteReadCache::new(64 << 20);
    // The first reader's index fetch stalls far longer than the second one may wait.
    let stall = Arc::new(Mutex::new(None::<u64>));
    let rsm = Arc::new(Counting::new(fs).with_hook({
        let stall = stall.clone();
        move |call| {
            if call.method == Method::FetchIndex
                && *stall.lock().unwrap() == Some(call.metadata.start_offset())
            {
                std::thread::sleep(Duration::from_millis(600));
            }
            Ok(())
        }
    }));
    let config = TieringConfig {
        fetch_deadline: Duration::from_millis(50),
        prefetch: false,
        ..small_chunks()
    };
    let log = open_log(dir.path(), rsm.clone(), &rlmm, cache, config);
    append(&log, 2000);
    log.run_once().unwrap();
    rsm.take();
    let segment = finished(rlmm.as_ref())[1].clone();
    *stall.lock().unwrap() = Some(segment.start_offset());
    // From inside the segment (a read from its first seq needs no index).
    let from = segment.start_offset() + 1;
    let n = count(&segment) - 1;
    std::thread::scope(|s| {
        let slow = s.spawn(|| log.read(from, n));
        let until = Instant::now() + HOLD;
        while rsm.calls(Method::FetchIndex) == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        match log.read(from, n) {
            Err(Error::Read(krabka_tiering::ReadError::FetchWaitExceeded {
                seq,
                waited,
                object,
                ..
            })) => {
                assert_eq!((seq, waited), (from, Duration::from_millis(50)));
                assert!(object.ends_with(".index"), "{object}");
            }
            other => panic!("expected FetchWaitExceeded, got {other:?}"),
        }
        check(&slow.join().unwrap().unwrap(), from, n);
    });
    assert_eq!(rsm.calls(Method::FetchIndex), 1);
    // The stalled fetch's result was cached: the next read sends no index request.
    check(&log.read(from, n).unwrap(), from, n);
    assert_eq!(rsm.calls(Method::FetchIndex), 1);
}
