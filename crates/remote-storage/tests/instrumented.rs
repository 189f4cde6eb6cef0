#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `testkit::Instrumented`: counters, per-method delays and the hook.

use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::testkit::{
    self, CallCounts, InMemoryRemoteStorage, Instrumented, Method,
};
use krabka_remote_storage::*;
use parking_lot::Mutex;

fn small_segment(dir: &std::path::Path) -> (RemoteLogSegmentMetadata, LogSegmentData) {
    for n in ["s.log", "s.index", "s.timeindex"] {
        std::fs::write(dir.join(n), b"0123456789").unwrap();
    }
    let tp = TopicIdPartition::new(Uuid::new_v4(), "instrumented", 0);
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

#[test]
fn counts_every_call_and_the_bytes_fetched_and_take_resets() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let rsm = Instrumented::new(InMemoryRemoteStorage::new());
    rsm.copy_log_segment_data(&m, &d).unwrap();
    assert_eq!(rsm.fetch_log_segment(&m, 2, Some(5)).unwrap().len(), 4);
    rsm.fetch_log_segment(&m, 0, None).unwrap();
    assert!(rsm.fetch_log_segment(&m, 0, Some(99)).is_err());
    rsm.fetch_index(&m, IndexType::Offset).unwrap();
    assert!(rsm.fetch_index(&m, IndexType::Transaction).is_err());
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
    let rsm = Instrumented::new(InMemoryRemoteStorage::new())
        .with_delay(&[Method::FetchLogSegment], Duration::from_millis(30));
    let t = Instant::now();
    rsm.copy_log_segment_data(&m, &d).unwrap();
    rsm.fetch_index(&m, IndexType::Offset).unwrap();
    assert!(t.elapsed() < Duration::from_millis(30));
    let t = Instant::now();
    rsm.fetch_log_segment(&m, 0, None).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(30));
}

#[test]
fn the_hook_sees_each_call_and_its_error_fails_the_call_before_the_inner_store() {
    let dir = tempfile::tempdir().unwrap();
    let (m, d) = small_segment(dir.path());
    let inner = Arc::new(InMemoryRemoteStorage::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let rsm = Instrumented::new(inner.clone())
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
    let rsm = Instrumented::new(InMemoryRemoteStorage::new());
    testkit::each_index_type_round_trips(&rsm);
    let c = rsm.counts();
    assert!(
        c.copy >= 1 && c.fetch_index >= 5 && c.fetch_index_bytes > 0,
        "{c:?}"
    );
}
