//! The finish order every round engine shares: copies are recorded finished in seq order, so
//! the remote metadata never shows a finished segment above an unfinished one — checked at
//! every metadata event while older copies are slower than younger ones (and one older copy
//! fails), for `run_once`, `spawn` and `TieringService`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{append, options, read_all_and_check, tp};
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition,
};
use krabka_tiering::metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_tiering::{Error, ServiceConfig, TieredLog, TieringConfig, TieringService};
use parking_lot::Mutex;

/// The copy of the oldest segment of every three takes this long, the middle one half of it,
/// the youngest none: in a window of three copies the youngest completes first.
const SLOW: Duration = Duration::from_millis(150);

/// A filesystem remote whose copies take a time chosen by the segment's base seq, and whose
/// copy of one chosen segment fails once (after its delay).
struct Uneven {
    inner: FsRemoteStorage,
    delays: Mutex<HashMap<u64, Duration>>,
    fail_once: Mutex<Option<u64>>,
    /// Base seqs in the order their copy calls returned.
    returned: Mutex<Vec<u64>>,
    /// A segment whose copy waits (at most [`HOLD_LIMIT`]) until this many other copy calls
    /// returned: a stalled oldest copy.
    hold: Mutex<Option<(u64, usize)>>,
    /// Whether the held copy gave up waiting: the other copies did not go on beside it.
    hold_timed_out: std::sync::atomic::AtomicBool,
}

/// How long a held copy waits for the others before it gives up.
const HOLD_LIMIT: Duration = Duration::from_secs(5);

impl Uneven {
    fn new(root: &std::path::Path) -> Self {
        Self {
            inner: FsRemoteStorage::new(root).unwrap(),
            delays: Mutex::new(HashMap::new()),
            fail_once: Mutex::new(None),
            returned: Mutex::new(Vec::new()),
            hold: Mutex::new(None),
            hold_timed_out: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// No delays; the oldest closed segment's copy waits until `others` other copies returned.
    fn hold_oldest(&self, log: &TieredLog, others: usize) {
        self.delays.lock().clear();
        let oldest = log.log().segments().first().map(|s| s.base_seq).unwrap();
        *self.hold.lock() = Some((oldest, others));
    }

    /// Delays the closed segments of `log` by their position in threes (oldest slowest), and
    /// fails the first copy of the `fail`th closed segment.
    fn arm(&self, log: &TieredLog, fail: Option<usize>) {
        let closed: Vec<u64> = log
            .log()
            .segments()
            .iter()
            .filter(|s| !s.active)
            .map(|s| s.base_seq)
            .collect();
        assert!(closed.len() >= 9, "only {} closed segments", closed.len());
        let mut delays = self.delays.lock();
        for (i, base) in closed.iter().enumerate() {
            delays.insert(*base, SLOW * (2 - (i % 3) as u32) / 2);
        }
        *self.fail_once.lock() = fail.and_then(|i| closed.get(i).copied());
    }

    /// Whether some copy call returned before the call of an older segment that started
    /// earlier: younger copies really did complete first.
    fn completed_out_of_order(&self) -> bool {
        let returned = self.returned.lock();
        returned.windows(2).any(|w| w[1] < w[0])
    }
}

impl RemoteStorageManager for Uneven {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let base = metadata.start_offset();
        let delay = self.delays.lock().get(&base).copied();
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        let hold = *self.hold.lock();
        if let Some((held, others)) = hold
            && held == base
            && !wait_until(HOLD_LIMIT, || self.returned.lock().len() >= others)
        {
            self.hold_timed_out.store(true, Ordering::Relaxed);
        }
        let fail = {
            let mut f = self.fail_once.lock();
            let hit = *f == Some(base);
            if hit {
                *f = None;
            }
            hit
        };
        let result = if fail {
            Err(RemoteStorageError::Io {
                location: format!("segment {base}"),
                source: std::io::Error::other("injected copy failure"),
            })
        } else {
            self.inner.copy_log_segment_data(metadata, data)
        };
        self.returned.lock().push(base);
        result
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.inner
            .fetch_log_segment(metadata, start_position, end_position)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.inner.fetch_index(metadata, index_type)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.inner.delete_log_segment_data(metadata)
    }
}

/// An in-memory metadata manager that looks at the partition after every event it records
/// and notes every moment a finished segment lies above an unfinished one.
struct Watching {
    inner: InMemoryRemoteLogMetadataManager,
    violations: Mutex<Vec<String>>,
    /// Moments at which two or more copies were in flight (`CopySegmentStarted`).
    overlapping: AtomicU64,
    events: AtomicU64,
}

impl Watching {
    fn new() -> Self {
        Self {
            inner: InMemoryRemoteLogMetadataManager::new(),
            violations: Mutex::new(Vec::new()),
            overlapping: AtomicU64::new(0),
            events: AtomicU64::new(0),
        }
    }

    /// The invariant: the finished segments are one contiguous run from seq 1 (nothing is
    /// deleted remotely in these tests), and no copy in flight lies below the highest finished
    /// seq.
    fn look(&self, tp: &TopicIdPartition) {
        self.events.fetch_add(1, Ordering::Relaxed);
        let list = self.inner.list_remote_log_segments(tp).unwrap();
        let mut finished: Vec<(u64, u64)> = list
            .iter()
            .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
            .map(|m| (m.start_offset(), m.end_offset()))
            .collect();
        finished.sort_unstable();
        let in_flight: Vec<u64> = list
            .iter()
            .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentStarted)
            .map(|m| m.start_offset())
            .collect();
        if in_flight.len() >= 2 {
            self.overlapping.fetch_add(1, Ordering::Relaxed);
        }
        let mut next = 1;
        for (start, end) in &finished {
            if *start != next {
                self.violations.lock().push(format!(
                    "finished {start}..={end} while seq {next} is not finished: {finished:?}"
                ));
            }
            next = end + 1;
        }
        if let Some(&(_, top)) = finished.last()
            && let Some(low) = in_flight.iter().find(|s| **s <= top)
        {
            self.violations.lock().push(format!(
                "a copy from {low} is in flight below the finished seq {top}: {finished:?}"
            ));
        }
    }

    fn check(&self) {
        let v = self.violations.lock();
        assert!(v.is_empty(), "{} violations, first: {}", v.len(), v[0]);
        assert!(self.events.load(Ordering::Relaxed) > 0, "nothing observed");
    }
}

impl RemoteLogMetadataManager for Watching {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.inner.add_remote_log_segment_metadata(metadata)?;
        self.look(metadata.topic_id_partition());
        Ok(())
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let m = self.inner.update_remote_log_segment_metadata(update)?;
        self.look(m.topic_id_partition());
        Ok(m)
    }

    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.inner.remote_log_segment_metadata(tp, offset)
    }

    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.inner.list_remote_log_segments(tp)
    }

    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        self.inner.highest_remote_offset(tp)
    }

    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        self.inner.remote_log_size(tp)
    }

    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.inner.segment_metadata(id)
    }
}

/// A log of 12+ closed segments on an [`Uneven`] remote watched by [`Watching`], copying up
/// to three segments at a time and keeping locally only what is not remote yet.
struct World {
    /// Holds the directories until the test ends.
    _dir: tempfile::TempDir,
    rsm: Arc<Uneven>,
    rlmm: Arc<Watching>,
    log: Arc<TieredLog>,
}

impl World {
    fn new(fail: Option<usize>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let rsm = Arc::new(Uneven::new(&dir.path().join("remote")));
        let rlmm = Arc::new(Watching::new());
        let config = TieringConfig {
            local_retention_bytes: Some(0),
            retention_ms: None,
            copy_concurrency: 3,
            ..TieringConfig::default()
        };
        let log = TieredLog::open(
            dir.path().join("local"),
            options(1024),
            rsm.clone(),
            rlmm.clone(),
            tp(),
            config,
        )
        .unwrap();
        append(&log, 300);
        rsm.arm(&log, fail);
        Self {
            _dir: dir,
            rsm,
            rlmm,
            log: Arc::new(log),
        }
    }

    fn lag(&self) -> u64 {
        self.log.stats().copy_lag_segments
    }

    /// Everything copied, nothing seen out of order, every record readable.
    fn check_done(&self) {
        assert_eq!(self.lag(), 0, "copies left");
        self.rlmm.check();
        assert_eq!(read_all_and_check(&self.log, 1), 300);
    }
}

/// Polls `cond` every 20 ms for at most `limit`; whether it held.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

#[test]
fn run_once_finishes_copies_in_seq_order_whatever_order_they_complete_in() {
    let w = World::new(None);
    let report = w.log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(
        w.rsm.completed_out_of_order(),
        "no younger copy completed first"
    );
    assert!(
        w.rlmm.overlapping.load(Ordering::Relaxed) > 0,
        "copies never overlapped"
    );
    w.check_done();
}

/// Copies run as a sliding window of `copy_concurrency` (3 here) running copies: the oldest
/// copy stalls until 4 younger ones returned, which only happens when a copy completed behind
/// it frees its slot for the next segment. The finishes are still in seq order.
#[test]
fn run_once_a_stalled_oldest_copy_does_not_idle_the_other_slots() {
    let w = World::new(None);
    w.rsm.hold_oldest(&w.log, 4);
    let report = w.log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(
        !w.rsm.hold_timed_out.load(Ordering::Relaxed),
        "the other slots idled while the oldest copy ran"
    );
    assert!(
        w.rsm.completed_out_of_order(),
        "no younger copy completed first"
    );
    w.check_done();
}

/// As [`run_once_a_stalled_oldest_copy_does_not_idle_the_other_slots`], for the background
/// engine's round.
#[test]
fn run_round_a_stalled_oldest_copy_does_not_idle_the_other_slots() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let w = World::new(None);
    w.rsm.hold_oldest(&w.log, 4);
    let report = rt.block_on(w.log.run_round()).unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(
        !w.rsm.hold_timed_out.load(Ordering::Relaxed),
        "the other slots idled while the oldest copy ran"
    );
    w.check_done();
}

#[test]
fn run_once_after_an_older_copy_fails_finishes_nothing_above_it_and_copies_it_next_round() {
    let w = World::new(Some(3));
    let closed: Vec<u64> = w
        .log
        .log()
        .segments()
        .iter()
        .filter(|s| !s.active)
        .map(|s| s.base_seq)
        .collect();
    let report = w.log.run_once().unwrap();
    // The three oldest finish; the fourth fails; what ran beside it is discarded.
    assert_eq!(report.segments_copied, 3);
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert!(
        matches!(&report.failures[0], Error::Remote { operation: "copy", seq: Some(b), .. } if *b == closed[3]),
        "{}",
        report.failures[0]
    );
    let highest = w.rlmm.highest_remote_offset(&tp()).unwrap();
    assert_eq!(
        highest,
        Some(closed[3] - 1),
        "finished past the failed copy"
    );
    assert_eq!(w.log.local_first_seq(), closed[3]);
    assert!(
        w.rsm.completed_out_of_order(),
        "no younger copy completed first"
    );
    for _ in 0..3 {
        let report = w.log.run_once().unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
    }
    w.check_done();
}

#[test]
fn background_rounds_finish_copies_in_seq_order_and_stop_at_a_failed_older_copy() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let w = World::new(Some(3));
    let closed3 = w
        .log
        .log()
        .segments()
        .iter()
        .filter(|s| !s.active)
        .nth(3)
        .unwrap()
        .base_seq;
    rt.block_on(async {
        let report = w.log.run_round().await.unwrap();
        assert_eq!(report.segments_copied, 3);
        assert!(
            matches!(&report.failures[..], [Error::Remote { operation: "copy", seq: Some(b), .. }] if *b == closed3),
            "{:?}",
            report.failures
        );
        let handle = w.log.clone().spawn(Duration::from_millis(20));
        let until = Instant::now() + Duration::from_secs(60);
        while (w.lag() > 0 || handle.rounds() == 0) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        handle.shutdown().await.unwrap();
    });
    assert!(
        w.rsm.completed_out_of_order(),
        "no younger copy completed first"
    );
    assert!(
        w.rlmm.overlapping.load(Ordering::Relaxed) > 0,
        "copies never overlapped"
    );
    w.check_done();
}

#[test]
fn service_turns_finish_copies_in_seq_order() {
    let w = World::new(Some(3));
    let svc = TieringService::new(ServiceConfig {
        copy_threads: 3,
        round_interval: Duration::from_millis(20),
        ..ServiceConfig::default()
    })
    .unwrap();
    svc.add(w.log.clone()).unwrap();
    assert!(wait_until(Duration::from_secs(60), || w.lag() == 0));
    assert!(svc.shutdown(Duration::from_secs(5)).clean);
    w.check_done();
}
