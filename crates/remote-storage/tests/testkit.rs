#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The conformance kit against the in-memory reference backend, `FaultInjecting`, and
//! `Counting` (counters, per-method delays and the hook).

use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::testkit::{
    self, CallCounts, Counting, FaultInjecting, Faults, InMemoryRemoteStorage, Method,
};
use krabka_remote_storage::*;
use parking_lot::Mutex;

/// The in-memory reference backend runs every check but the 100 MiB one, which the disk
/// backends run (it would hold the segment in memory several times over).
fn run(name: &'static str, check: testkit::Check) {
    if name != "large_segment_100_mib" {
        check(&InMemoryRemoteStorage::new());
    }
}

krabka_remote_storage::conformance_tests!(run);

#[test]
fn every_check_is_listed_once() {
    let names: std::collections::BTreeSet<_> = testkit::CHECKS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names.len(), testkit::CHECKS.len());
    assert!(names.contains("large_segment_100_mib"));
}

/// A backend that loses data: the kit must notice.
struct Forgetful(InMemoryRemoteStorage);

impl RemoteStorageManager for Forgetful {
    fn copy_log_segment_data(
        &self,
        m: &RemoteLogSegmentMetadata,
        d: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        self.0.copy_log_segment_data(m, d)
    }
    fn fetch_log_segment(
        &self,
        m: &RemoteLogSegmentMetadata,
        s: u32,
        e: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        // Off by one at the inclusive end.
        let mut v = self.0.fetch_log_segment(m, s, e)?;
        if e.is_some() {
            v.pop();
        }
        Ok(v)
    }
    fn fetch_index(
        &self,
        m: &RemoteLogSegmentMetadata,
        t: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.0.fetch_index(m, t)
    }
    fn delete_log_segment_data(
        &self,
        _: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        Ok(()) // never deletes
    }
}

#[test]
fn the_kit_catches_an_exclusive_end_and_a_delete_that_keeps_data() {
    let bad = Forgetful(InMemoryRemoteStorage::new());
    let range = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        testkit::copy_then_fetch_whole_segment_and_ranges(&bad)
    }));
    assert!(range.is_err());
    let delete = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        testkit::delete_then_fetch_is_segment_not_found(&bad)
    }));
    assert!(delete.is_err());
}

fn small_segment(dir: &std::path::Path) -> (RemoteLogSegmentMetadata, LogSegmentData) {
    for n in ["s.log", "s.index", "s.timeindex"] {
        std::fs::write(dir.join(n), b"0123456789").unwrap();
    }
    let tp = TopicIdPartition::new(Uuid::new_v4(), "faults", 0);
    let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9)
        .segment_size_in_bytes(10)
        .build()
        .unwrap();
    (
        m,
        LogSegmentData::new(
            dir.join("s.log"),
            dir.join("s.index"),
            dir.join("s.timeindex"),
        ),
    )
}

/// Asserts `r` is the fault `FaultInjecting` injects by default into `method`: retriable,
/// naming the method and the segment.
fn assert_injected<T: std::fmt::Debug>(
    r: Result<T, RemoteStorageError>,
    method: Method,
    m: &RemoteLogSegmentMetadata,
) {
    assert!(
        matches!(&r, Err(RemoteStorageError::Retriable { operation, location, message, .. })
            if operation == method.name()
                && *location == m.remote_log_segment_id().to_string()
                && message == "injected fault"),
        "{r:?}"
    );
}

#[test]
fn fail_nth_fails_exactly_that_call_and_counts_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let rsm = FaultInjecting::new(InMemoryRemoteStorage::new(), Faults::fail_nth(3));
    rsm.copy_log_segment_data(&m, &d).unwrap();
    rsm.fetch_log_segment(&m, 0, None).unwrap();
    let err = rsm.fetch_index(&m, IndexType::Offset).unwrap_err();
    assert!(err.is_retriable(), "{err:?}");
    rsm.fetch_index(&m, IndexType::Offset).unwrap();
    rsm.delete_log_segment_data(&m).unwrap();
    let stats = rsm.stats();
    assert_eq!(stats.calls, [1, 1, 2, 1]);
    assert_eq!(stats.injected, [0, 0, 1, 0]);
    assert_eq!(rsm.calls(Method::FetchIndex), 2);
}

#[test]
fn seeded_fraction_is_reproducible_and_near_the_rate() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let outcomes = |seed| {
        let rsm = FaultInjecting::new(
            InMemoryRemoteStorage::new(),
            Faults::fail_fraction(seed, 0.3)
                .retriable(false)
                .on(&[Method::FetchLogSegment]),
        );
        rsm.copy_log_segment_data(&m, &d).unwrap();
        let v: Vec<bool> = (0..400)
            .map(|_| rsm.fetch_log_segment(&m, 0, None).is_ok())
            .collect();
        let err = (0..50)
            .find_map(|_| rsm.fetch_log_segment(&m, 0, None).err())
            .unwrap();
        assert!(!err.is_retriable());
        (v, rsm.injected(Method::FetchLogSegment))
    };
    let (a, _) = outcomes(7);
    let (b, _) = outcomes(7);
    let (c, _) = outcomes(8);
    assert_eq!(a, b);
    assert_ne!(a, c);
    let failures = a.iter().filter(|ok| !**ok).count();
    assert!(
        (80..=160).contains(&failures),
        "{failures} of 400 failed at rate 0.3"
    );
}

#[test]
fn disabled_faults_pass_every_call_and_stalls_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let rsm = FaultInjecting::new(
        InMemoryRemoteStorage::new(),
        Faults::fail_fraction(1, 1.0).with_stall(Duration::from_millis(20)),
    );
    let t = Instant::now();
    assert_injected(
        rsm.copy_log_segment_data(&m, &d),
        Method::CopyLogSegmentData,
        &m,
    );
    assert!(t.elapsed() >= Duration::from_millis(20));
    rsm.set_enabled(false);
    assert!(!rsm.is_enabled());
    // Disabled: the 20 calls below all succeed (an injected failure would fail the unwrap)
    // and none is counted as injected.
    for _ in 0..20 {
        rsm.copy_log_segment_data(&m, &d).unwrap();
        rsm.fetch_log_segment(&m, 0, None).unwrap();
    }
    assert_eq!(rsm.calls(Method::CopyLogSegmentData), 21);
    assert_eq!(rsm.injected(Method::CopyLogSegmentData), 1);
}

#[test]
fn a_failed_copy_can_leave_partial_data_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let inner = Arc::new(InMemoryRemoteStorage::new());
    let rsm = FaultInjecting::new(
        inner.clone(),
        Faults::fail_fraction(3, 1.0)
            .partial_copies(1.0)
            .on(&[Method::CopyLogSegmentData]),
    );
    assert_injected(
        rsm.copy_log_segment_data(&m, &d),
        Method::CopyLogSegmentData,
        &m,
    );
    assert!(
        !inner.keys().is_empty(),
        "the failed copy left nothing behind"
    );
    rsm.delete_log_segment_data(&m).unwrap();
    assert!(inner.keys().is_empty());
    rsm.set_faults(Faults::fail_fraction(3, 1.0).partial_copies(0.0));
    assert_injected(
        rsm.copy_log_segment_data(&m, &d),
        Method::CopyLogSegmentData,
        &m,
    );
    assert!(inner.keys().is_empty());
}

#[test]
fn the_kit_passes_through_a_disabled_fault_injector() {
    let rsm = FaultInjecting::new(InMemoryRemoteStorage::new(), Faults::fail_fraction(5, 0.5));
    rsm.set_enabled(false);
    testkit::each_index_type_round_trips(&rsm);
    assert!(rsm.calls(Method::FetchIndex) >= 5);
}

#[test]
fn counts_every_call_and_the_bytes_fetched_and_take_resets() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let rsm = Counting::new(InMemoryRemoteStorage::new());
    rsm.copy_log_segment_data(&m, &d).unwrap();
    assert_eq!(rsm.fetch_log_segment(&m, 2, Some(5)).unwrap().len(), 4);
    rsm.fetch_log_segment(&m, 0, None).unwrap();
    let past_end = rsm.fetch_log_segment(&m, 10, Some(99));
    assert!(
        matches!(&past_end, Err(RemoteStorageError::InvalidArgument { message })
            if message.contains("start position 10 of the inclusive range 10..=99 is past the \
                                 last byte of a 10-byte")),
        "{past_end:?}"
    );
    rsm.fetch_index(&m, IndexType::Offset).unwrap();
    let missing = rsm.fetch_index(&m, IndexType::Transaction);
    assert!(
        matches!(&missing, Err(RemoteStorageError::SegmentNotFound { segment, .. })
            if segment == m.remote_log_segment_id()),
        "{missing:?}"
    );
    rsm.delete_log_segment_data(&m).unwrap();
    let want = CallCounts {
        copy: 1,
        fetch_log: 3,
        fetch_log_bytes: 14,
        fetch_index: 2,
        fetch_index_bytes: 10,
        delete: 1,
    };
    assert_eq!(rsm.counts(), want);
    assert_eq!(rsm.calls(Method::FetchLogSegment), 3);
    assert_eq!(want.calls(Method::FetchIndex), 2);
    assert_eq!(rsm.take(), want);
    assert_eq!(rsm.counts(), CallCounts::default());
}

#[test]
fn delays_only_the_chosen_methods() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let rsm = Counting::new(InMemoryRemoteStorage::new())
        .with_delay(&[Method::FetchLogSegment], Duration::from_secs(2));
    // The undelayed calls take far less than the delay (a loaded machine still finishes two
    // in-memory calls well inside 2 s); the delayed one takes at least the delay.
    let t = Instant::now();
    rsm.copy_log_segment_data(&m, &d).unwrap();
    rsm.fetch_index(&m, IndexType::Offset).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let t = Instant::now();
    rsm.fetch_log_segment(&m, 0, None).unwrap();
    assert!(t.elapsed() >= Duration::from_secs(2));
}

#[test]
fn the_hook_sees_each_call_and_its_error_fails_the_call_before_the_inner_store() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let inner = Arc::new(InMemoryRemoteStorage::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let rsm = Counting::new(inner.clone())
        .with_delay(&[Method::DeleteLogSegmentData], Duration::from_secs(10))
        .with_hook(move |call| {
            log.lock().push((call.method, call.metadata.start_offset()));
            if call.method == Method::DeleteLogSegmentData {
                return Err(RemoteStorageError::InvalidArgument {
                    message: "no deletes".into(),
                });
            }
            Ok(())
        });
    rsm.copy_log_segment_data(&m, &d).unwrap();
    let t = Instant::now();
    let err = rsm.delete_log_segment_data(&m).unwrap_err();
    assert!(matches!(err, RemoteStorageError::InvalidArgument { .. }));
    assert!(t.elapsed() < Duration::from_secs(5), "the delay ran");
    assert!(
        !inner.keys().is_empty(),
        "the failed delete reached the store"
    );
    assert_eq!(
        *seen.lock(),
        [
            (Method::CopyLogSegmentData, 0),
            (Method::DeleteLogSegmentData, 0)
        ]
    );
    assert_eq!(rsm.calls(Method::DeleteLogSegmentData), 1);
    rsm.inner().delete_log_segment_data(&m).unwrap();
    assert!(inner.keys().is_empty());
}

#[test]
fn the_kit_passes_through_it() {
    let rsm = Counting::new(InMemoryRemoteStorage::new());
    testkit::each_index_type_round_trips(&rsm);
    let c = rsm.counts();
    assert!(
        c.copy >= 1 && c.fetch_index >= 5 && c.fetch_index_bytes > 0,
        "{c:?}"
    );
}
