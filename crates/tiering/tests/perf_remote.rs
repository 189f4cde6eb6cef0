//! Behaviour behind the remote-tier performance work (request counts and ordering, not
//! timing): a cold point read is one request, read-ahead survives across read calls,
//! concurrent copies finish in order and stop at a damaged segment, and logs share a cache.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::setup::*;
use common::*;
use krabka_protocol::Message;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::RemoteStorageError;
use krabka_remote_storage::testkit::{Counting, Method};
use krabka_tiering::metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_tiering::{RemoteReadCache, TieredLog, TieringConfig};
use parking_lot::Mutex;

struct Bed {
    _dir: tempfile::TempDir,
    /// The thread making each ranged fetch: the reader or a read-ahead thread.
    fetches: Arc<Mutex<Vec<String>>>,
    log: TieredLog,
}

fn bed(max_bytes: u64, config: TieringConfig, records: u64) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let fetches = Arc::new(Mutex::new(Vec::new()));
    let by_thread = fetches.clone();
    let rsm = Counting::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap())
        .with_hook(move |call| {
            if call.method == Method::FetchLogSegment {
                let name = std::thread::current().name().unwrap_or("").to_string();
                by_thread.lock().push(name);
            }
            Ok(())
        })
        // A remote request takes a while: the reader decodes faster than it fetches.
        .with_delay(&[Method::FetchLogSegment], Duration::from_millis(1));
    let log = TieredLog::open(
        dir.path().join("local"),
        options(max_bytes),
        Arc::new(rsm),
        Arc::new(InMemoryRemoteLogMetadataManager::new()),
        tp(),
        config,
    )
    .unwrap();
    append(&log, records);
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    Bed {
        _dir: dir,
        fetches,
        log,
    }
}

/// Reads `seq` alone, asserting that it took one data fetch and no index fetch.
fn read_in_one_fetch(log: &TieredLog, seq: u64) -> krabka_storage::Record {
    let before = log.stats().requests;
    let mut got = log.read(seq, 1).unwrap();
    let after = log.stats().requests;
    assert_eq!(
        after.fetch_index, before.fetch_index,
        "seq {seq}: no index fetch"
    );
    assert_eq!(
        after.fetch_log,
        before.fetch_log + 1,
        "seq {seq}: one data fetch"
    );
    assert_eq!(got.len(), 1, "seq {seq}");
    got.remove(0)
}

#[test]
fn a_cold_point_read_is_one_remote_request() {
    let config = TieringConfig {
        cache_bytes: 0,
        ..keep_nothing_locally()
    };
    let b = bed(1024, config, 300);
    assert!(b.log.local_first_seq() > 100);
    for seq in [1, 17, 50, 99] {
        assert_eq!(
            read_in_one_fetch(&b.log, seq).message.value,
            message(seq).value
        );
    }
    // Chunks smaller than a segment: the chunk map still spares the index fetch.
    let small = TieringConfig {
        cache_bytes: 0,
        chunk_bytes: 256,
        ..keep_nothing_locally()
    };
    let b = bed(1024, small, 300);
    let before = b.log.stats().requests;
    for seq in 1..=99 {
        assert_eq!(b.log.read(seq, 1).unwrap()[0].seq, seq);
    }
    let after = b.log.stats().requests;
    assert_eq!(after.fetch_index, before.fetch_index);
    // Some records straddle two chunks: the first fetch runs on into the next chunk, so each
    // read is still one request.
    let fetches = after.fetch_log - before.fetch_log;
    assert_eq!(fetches, 99, "{fetches} fetches for 99 reads");
    // And the chunks cached with their run-on serve every later read, point or range, exactly.
    let config = TieringConfig {
        chunk_bytes: 256,
        ..keep_nothing_locally()
    };
    let b = bed(1024, config, 300);
    for seq in (1..=99).rev().step_by(3) {
        assert_eq!(
            b.log.read(seq, 1).unwrap()[0].message.value,
            message(seq).value
        );
    }
    scan_in_small_reads(&b.log, 99);
    let all = b.log.read(1, 99).unwrap();
    assert_eq!(all.len(), 99);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(
            (r.seq, &r.message.value),
            (i as u64 + 1, &message(i as u64 + 1).value)
        );
    }
}

/// A record in a large batch that crosses its chunk's end by far more than the usual run-on:
/// the chunk map bounds where the batch ends, so the first fetch reaches there and a cold
/// point read of any record is still one request.
#[test]
fn a_cold_point_read_in_a_batch_crossing_chunks_is_one_remote_request() {
    let dir = tempfile::tempdir().unwrap();
    let rsm = Counting::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let config = TieringConfig {
        cache_bytes: 0,
        chunk_bytes: 16 << 10,
        ..keep_nothing_locally()
    };
    let log = TieredLog::open(
        dir.path().join("local"),
        options(1 << 20),
        Arc::new(rsm),
        Arc::new(InMemoryRemoteLogMetadataManager::new()),
        tp(),
        config,
    )
    .unwrap();
    // Batches of 100 records of 1 KiB: about 103 KB each, so most cross one or more 16 KiB
    // chunk boundaries, many by more than a chunk.
    let value = |seq: u64| vec![(seq % 251) as u8; 1024];
    for b in 0..40u64 {
        let msgs: Vec<Message> = (1..=100)
            .map(|j| {
                Message::new(value(b * 100 + j)).with_timestamp(krabka_remote_storage::now_ms())
            })
            .collect();
        log.append_batch(&msgs).unwrap();
    }
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let remote_below = log.local_first_seq();
    assert!(remote_below > 1_000, "{remote_below}");
    let mut reads = 0;
    for seq in (1..remote_below).step_by(37) {
        let got = read_in_one_fetch(&log, seq);
        assert_eq!((got.seq, got.message.value.to_vec()), (seq, value(seq)));
        reads += 1;
    }
    assert!(reads > 25, "{reads}");
}

fn scan_in_small_reads(log: &TieredLog, upto: u64) {
    let mut seq = 1;
    while seq < upto {
        let page = log.read(seq, 7).unwrap();
        for r in &page {
            assert_eq!(r.seq, seq);
            assert_eq!(r.message.value, message(seq).value);
            seq += 1;
        }
    }
}

#[test]
fn read_ahead_survives_across_read_calls() {
    let config = |prefetch| TieringConfig {
        chunk_bytes: 1024,
        prefetch,
        ..keep_nothing_locally()
    };
    let reader_fetches = |b: &Bed| {
        let all = b.fetches.lock();
        let ahead = all
            .iter()
            .filter(|n| n.starts_with("krabka-read-ahead"))
            .count();
        (all.len() - ahead, ahead)
    };
    let off = bed(64 << 10, config(false), 4000);
    let upto = off.log.local_first_seq();
    off.fetches.lock().clear();
    scan_in_small_reads(&off.log, upto);
    let (alone, none) = reader_fetches(&off);
    assert_eq!(none, 0);

    let on = bed(64 << 10, config(true), 4000);
    assert_eq!(on.log.local_first_seq(), upto);
    on.fetches.lock().clear();
    scan_in_small_reads(&on.log, upto);
    let (reader, ahead) = reader_fetches(&on);
    assert!(ahead > 0, "the read-ahead fetched nothing");
    assert!(
        reader * 2 < alone,
        "the reader still made {reader} of {alone} fetches itself"
    );
    // Each chunk is fetched once: the read-ahead never duplicates the reader.
    assert!(reader + ahead <= alone, "{reader} + {ahead} > {alone}");
}

#[test]
fn concurrent_copies_finish_in_order_and_stop_at_a_damaged_segment() {
    let s = Setup::new();
    let config = TieringConfig {
        copy_concurrency: 4,
        ..keep_nothing_locally()
    };
    let log = s.open(config);
    append(&log, 600);
    let closed = closed_segments(&log);
    assert!(closed.len() >= 12, "{} closed segments", closed.len());
    let damaged = closed[9].clone();
    flip_third_frame(&damaged.log_path);
    let report = log.run_once().unwrap();
    assert_eq!(report.segments_copied, 9, "{report:?}");
    assert_eq!(report.copy_blocked_at, Some(damaged.base_seq));
    let remote = s.finished();
    assert_eq!(remote.len(), 9);
    // Contiguous from the first seq, all below the damaged segment, nothing left half-done.
    let mut next = 1;
    for m in &remote {
        assert_eq!(m.start_offset(), next);
        next = m.end_offset() + 1;
    }
    assert_eq!(next, damaged.base_seq);
    let all = s.rlmm.list_remote_log_segments(&tp()).unwrap();
    assert_eq!(all.len(), 9, "an unfinished attempt was left behind");
    // Everything below the damaged segment reads back (then a short read stops at it).
    let below = log.read(1, 10_000).unwrap();
    assert!(below.len() as u64 >= damaged.base_seq - 1);
    for r in below.iter().take(damaged.base_seq as usize - 1) {
        assert_eq!(r.message.value, message(r.seq).value);
    }
}

#[test]
fn two_logs_share_one_cache() {
    let cache = RemoteReadCache::new(1 << 20);
    let a = Setup::new();
    let b = Setup::new();
    let la = a.open(keep_nothing_locally()).with_cache(cache.clone());
    let lb = b.open(keep_nothing_locally()).with_cache(cache.clone());
    assert!(la.cache().ptr_eq(lb.cache()));
    for log in [&la, &lb] {
        append(log, 200);
        log.run_once().unwrap();
        assert_eq!(read_all_and_check(log, 1), 200);
    }
    let stats = cache.stats();
    assert!(stats.entries >= 4, "{stats:?}");
    assert!(stats.bytes > 0 && stats.bytes <= 1 << 20);
    // Same seqs, other partition's segments: both logs read their own records from it.
    assert_eq!(la.read(5, 1).unwrap()[0].message.value, message(5).value);
    assert_eq!(lb.read(5, 1).unwrap()[0].message.value, message(5).value);
    assert!(cache.stats().hits > stats.hits);
    assert_eq!(la.stats().cache_bytes, cache.stats().bytes);
}

struct SlowBed {
    _dir: tempfile::TempDir,
    fs: Arc<FsRemoteStorage>,
    /// The upload (by first seq) that fails.
    fail_at: Arc<Mutex<Option<u64>>>,
    /// The first seq of every upload started.
    started: Arc<Mutex<Vec<u64>>>,
    rlmm: Arc<InMemoryRemoteLogMetadataManager>,
    log: TieredLog,
}

/// Slow uploads over the filesystem backend, one of them (by first seq) failing after a
/// longer while: copies after it are in flight when it fails.
fn slow_bed(records: u64) -> SlowBed {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let fail_at = Arc::new(Mutex::new(None));
    let started = Arc::new(Mutex::new(Vec::new()));
    let (failing, starts) = (fail_at.clone(), started.clone());
    let rsm = Counting::new(fs.clone())
        .with_hook(move |call| {
            if call.method != Method::CopyLogSegmentData {
                return Ok(());
            }
            let seq = call.metadata.start_offset();
            starts.lock().push(seq);
            if *failing.lock() != Some(seq) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(80));
            Err(RemoteStorageError::InvalidArgument {
                message: "injected upload failure".into(),
            })
        })
        .with_delay(&[Method::CopyLogSegmentData], Duration::from_millis(10));
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let config = TieringConfig {
        copy_concurrency: 4,
        ..keep_nothing_locally()
    };
    let log = TieredLog::open(
        dir.path().join("local"),
        options(1024),
        Arc::new(rsm),
        rlmm.clone(),
        tp(),
        config,
    )
    .unwrap();
    append(&log, records);
    SlowBed {
        _dir: dir,
        fs,
        fail_at,
        started,
        rlmm,
        log,
    }
}

/// Only the segments below `stop` are finished remotely, contiguous from seq 1; the remote
/// tier holds no object of anything else and no unfinished attempt; the local log still
/// holds `stop` (retention did not pass it).
fn assert_stopped_at(b: &SlowBed, stop: u64) {
    let remote = finished(b.rlmm.as_ref());
    let mut next = 1;
    for m in &remote {
        assert_eq!(m.start_offset(), next);
        next = m.end_offset() + 1;
    }
    assert_eq!(
        next, stop,
        "finished remotely up to {next}, expected {stop}"
    );
    let (stray, unfinished) = orphans(&b.fs, b.rlmm.as_ref());
    assert!(
        stray.is_empty(),
        "objects of no finished segment: {stray:?}"
    );
    assert_eq!(unfinished, 0, "an unfinished attempt was left behind");
    assert_eq!(
        b.rlmm.list_remote_log_segments(&tp()).unwrap().len(),
        remote.len()
    );
    assert!(
        b.log.local_first_seq() <= stop,
        "local retention passed {stop}"
    );
    assert!(b.log.log().segments().iter().any(|s| s.base_seq == stop));
}

#[test]
fn a_damaged_segment_among_concurrent_checks_leaves_nothing_after_it_remotely() {
    let b = slow_bed(600);
    let closed = closed_segments(&b.log);
    assert!(closed.len() >= 14, "{} closed segments", closed.len());
    let damaged = closed[9].clone();
    flip_third_frame(&damaged.log_path);
    for round in 0..2 {
        let report = b.log.run_once().unwrap();
        let copied = if round == 0 { 9 } else { 0 };
        assert_eq!(report.segments_copied, copied, "round {round}: {report:?}");
        assert_eq!(report.copy_blocked_at, Some(damaged.base_seq));
        assert!(!report.failures.is_empty());
        assert_stopped_at(&b, damaged.base_seq);
    }
    // The damaged segment never reached the backend.
    assert!(!b.started.lock().contains(&damaged.base_seq));
    let below = b.log.read(1, 10_000).unwrap();
    assert!(below.len() as u64 >= damaged.base_seq - 1);
    for r in below.iter().take(damaged.base_seq as usize - 1) {
        assert_eq!(r.message.value, message(r.seq).value);
    }
}

#[test]
fn a_failed_upload_discards_the_concurrent_copies_after_it() {
    let b = slow_bed(600);
    let closed = closed_segments(&b.log);
    let failing = closed[5].base_seq;
    *b.fail_at.lock() = Some(failing);
    let report = b.log.run_once().unwrap();
    assert_eq!(report.segments_copied, 5, "{report:?}");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    // Younger copies were uploaded while the failing one ran: they were discarded.
    let started = b.started.lock().clone();
    assert!(
        started.iter().any(|&s| s > failing),
        "no copy after the failing one started: {started:?}"
    );
    assert_stopped_at(&b, failing);
    // Next round everything is copied, still in order and without leftovers.
    *b.fail_at.lock() = None;
    let report = b.log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let (stray, unfinished) = orphans(&b.fs, b.rlmm.as_ref());
    assert!(
        stray.is_empty() && unfinished == 0,
        "{stray:?} {unfinished}"
    );
    assert_eq!(read_all_and_check(&b.log, 1), b.log.last_seq());
}

/// Recovery from manifests alone replays copies by their event time (ties by seq), and a copy
/// overlapping earlier ones starts a newer history. So copies that run at once must carry
/// times in seq order: were a later segment of the new history copied first, the segment before
/// it (overlapping the old history) would be taken for an even newer history and supersede it.
/// Two histories under one topic id, the newer copied 8 at a time: recovery takes the newer
/// one whole.
#[test]
fn a_recovery_after_concurrent_copies_takes_every_segment_of_the_newer_history() {
    let s = Setup::new();
    let incarnation = |dir: &std::path::Path, records: u64| {
        let config = TieringConfig {
            copy_concurrency: 8,
            ..keep_nothing_locally()
        };
        let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
        let log =
            TieredLog::open(dir, options(1024), s.fs.clone(), rlmm.clone(), tp(), config).unwrap();
        append(&log, records);
        let report = log.run_once().unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        log.close().unwrap();
        finished(rlmm.as_ref())
    };
    let old = incarnation(&s.dir.path().join("old"), 900);
    // The newer history begins after the older one's last copy time: copy times run ahead of
    // the clock when many copies are planned in one millisecond (bounded wait).
    let latest = old
        .iter()
        .map(|m| m.event_timestamp_ms())
        .max()
        .unwrap_or(0);
    let waited = std::time::Instant::now();
    // Up to one millisecond per copy planned ahead of the clock, each planned before it
    // finished.
    let ahead = i64::try_from(old.len()).unwrap_or(i64::MAX);
    while krabka_protocol::now_ms() <= latest.saturating_add(ahead).saturating_add(5) {
        assert!(waited.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let new = incarnation(&s.dir.path().join("new"), 600);
    assert!(
        new.len() >= 20 && old.len() > new.len(),
        "{} {}",
        new.len(),
        old.len()
    );
    let end = new.last().map(|m| m.end_offset());
    let work = tempfile::tempdir().unwrap();
    let rlmm =
        krabka_tiering::metadata::DurableRemoteLogMetadataManager::open(work.path().join("meta"))
            .unwrap();
    let report = krabka_tiering::recovery::recover(
        s.fs.as_ref(),
        &tp(),
        &rlmm,
        &krabka_tiering::recovery::RecoveryOptions::default(),
    )
    .unwrap();
    assert_eq!(report.seq_range, end.map(|e| 1..=e), "{:?}", report.ignored);
    assert_eq!(report.segments, new.len());
    assert_eq!(
        report.ignored.len(),
        old.len(),
        "only the old history is ignored"
    );
}
