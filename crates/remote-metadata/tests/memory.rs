#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The lifecycle rules of `InMemoryRemoteLogMetadataManager` (shared with the durable one).

use RemoteLogSegmentState::*;
use krabka_remote_metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_remote_storage::*;

fn tp(p: i32) -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(7), "orders", p)
}

fn seg(
    tp: &TopicIdPartition,
    start: u64,
    end: u64,
    size: u64,
    ts: i64,
) -> RemoteLogSegmentMetadata {
    RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), start, end)
        .segment_size_in_bytes(size)
        .event_timestamp_ms(ts)
        .build()
        .unwrap()
}

fn to(
    m: &RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
) -> RemoteLogSegmentMetadataUpdate {
    RemoteLogSegmentMetadataUpdate::new(m.remote_log_segment_id().clone(), 100, None, state, 1)
}

#[test]
fn only_finished_segments_are_readable_and_counted() {
    let rlmm = InMemoryRemoteLogMetadataManager::new();
    let p = tp(0);
    let a = seg(&p, 0, 99, 1000, 1);
    let b = seg(&p, 100, 199, 2000, 2);
    rlmm.add_remote_log_segment_metadata(&a).unwrap();
    rlmm.add_remote_log_segment_metadata(&b).unwrap();
    assert_eq!(rlmm.highest_remote_offset(&p).unwrap(), None);
    assert_eq!(rlmm.remote_log_size(&p).unwrap(), 0);
    assert_eq!(rlmm.remote_log_segment_metadata(&p, 50).unwrap(), None);
    let a_fin = rlmm
        .update_remote_log_segment_metadata(&to(&a, CopySegmentFinished))
        .unwrap();
    assert_eq!(a_fin.state(), CopySegmentFinished);
    assert_eq!(
        rlmm.remote_log_segment_metadata(&p, 50).unwrap(),
        Some(a_fin.clone())
    );
    assert_eq!(rlmm.remote_log_segment_metadata(&p, 150).unwrap(), None);
    assert_eq!(rlmm.highest_remote_offset(&p).unwrap(), Some(99));
    assert_eq!(rlmm.remote_log_size(&p).unwrap(), 1000);
    rlmm.update_remote_log_segment_metadata(&to(&b, CopySegmentFinished))
        .unwrap();
    assert_eq!(rlmm.highest_remote_offset(&p).unwrap(), Some(199));
    assert_eq!(rlmm.remote_log_size(&p).unwrap(), 3000);
    // Another partition sees none of it.
    assert_eq!(rlmm.remote_log_size(&tp(1)).unwrap(), 0);
    assert!(rlmm.list_remote_log_segments(&tp(1)).unwrap().is_empty());
}

#[test]
fn delete_finished_drops_the_segment_everywhere() {
    let rlmm = InMemoryRemoteLogMetadataManager::new();
    let p = tp(0);
    let a = seg(&p, 0, 99, 1000, 1);
    rlmm.add_remote_log_segment_metadata(&a).unwrap();
    rlmm.update_remote_log_segment_metadata(&to(&a, CopySegmentFinished))
        .unwrap();
    let started = rlmm
        .update_remote_log_segment_metadata(&to(&a, DeleteSegmentStarted))
        .unwrap();
    // Delete started: listed, not readable, not counted.
    assert_eq!(rlmm.list_remote_log_segments(&p).unwrap(), vec![started]);
    assert_eq!(rlmm.remote_log_segment_metadata(&p, 5).unwrap(), None);
    assert_eq!(rlmm.remote_log_size(&p).unwrap(), 0);
    rlmm.update_remote_log_segment_metadata(&to(&a, DeleteSegmentFinished))
        .unwrap();
    assert!(rlmm.list_remote_log_segments(&p).unwrap().is_empty());
    assert_eq!(
        rlmm.segment_metadata(a.remote_log_segment_id()).unwrap(),
        None
    );
    let again = rlmm.update_remote_log_segment_metadata(&to(&a, DeleteSegmentFinished));
    assert!(again.unwrap_err().is_not_found());
    // A dropped id cannot come back.
    assert!(matches!(
        rlmm.add_remote_log_segment_metadata(&a),
        Err(RemoteStorageError::InvalidArgument { .. })
    ));
}

#[test]
fn add_rejects_duplicates_and_non_started_states() {
    let rlmm = InMemoryRemoteLogMetadataManager::new();
    let p = tp(0);
    let a = seg(&p, 0, 9, 1, 1);
    rlmm.add_remote_log_segment_metadata(&a).unwrap();
    assert!(matches!(
        rlmm.add_remote_log_segment_metadata(&a),
        Err(RemoteStorageError::InvalidArgument { .. })
    ));
    let finished = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(p.clone()), 0, 9)
        .state(CopySegmentFinished)
        .build()
        .unwrap();
    assert!(matches!(
        rlmm.add_remote_log_segment_metadata(&finished),
        Err(RemoteStorageError::InvalidStateTransition { .. })
    ));
    assert_eq!(
        rlmm.segment_metadata(finished.remote_log_segment_id())
            .unwrap(),
        None
    );
}

#[test]
fn invalid_transitions_and_unknown_segments_change_nothing() {
    let rlmm = InMemoryRemoteLogMetadataManager::new();
    let p = tp(0);
    let a = seg(&p, 0, 9, 1, 1);
    rlmm.add_remote_log_segment_metadata(&a).unwrap();
    assert!(matches!(
        rlmm.update_remote_log_segment_metadata(&to(&a, DeleteSegmentFinished)),
        Err(RemoteStorageError::InvalidStateTransition { .. })
    ));
    assert_eq!(
        rlmm.segment_metadata(a.remote_log_segment_id()).unwrap(),
        Some(a.clone())
    );
    let unknown = seg(&p, 0, 9, 1, 1);
    assert!(
        rlmm.update_remote_log_segment_metadata(&to(&unknown, CopySegmentFinished))
            .unwrap_err()
            .is_not_found()
    );
    // The same state again is an idempotent retry.
    rlmm.update_remote_log_segment_metadata(&to(&a, CopySegmentStarted))
        .unwrap();
}

#[test]
fn listing_orders_by_start_offset_then_event_time() {
    let rlmm = InMemoryRemoteLogMetadataManager::new();
    let p = tp(0);
    let late = seg(&p, 100, 199, 1, 50);
    let early = seg(&p, 100, 149, 1, 10);
    let first = seg(&p, 0, 99, 1, 99);
    for m in [&late, &early, &first] {
        rlmm.add_remote_log_segment_metadata(m).unwrap();
    }
    let ids: Vec<_> = rlmm
        .list_remote_log_segments(&p)
        .unwrap()
        .into_iter()
        .map(|m| m.remote_log_segment_id().clone())
        .collect();
    assert_eq!(
        ids,
        [first, early, late].map(|m| m.remote_log_segment_id().clone())
    );
}

#[test]
fn overlapping_finished_segments_resolve_to_the_latest_start() {
    let rlmm = InMemoryRemoteLogMetadataManager::new();
    let p = tp(0);
    let wide = seg(&p, 0, 199, 1, 1);
    let newer = seg(&p, 100, 249, 1, 2);
    for m in [&wide, &newer] {
        rlmm.add_remote_log_segment_metadata(m).unwrap();
        rlmm.update_remote_log_segment_metadata(&to(m, CopySegmentFinished))
            .unwrap();
    }
    let at = |o| {
        rlmm.remote_log_segment_metadata(&p, o)
            .unwrap()
            .map(|m| m.remote_log_segment_id().clone())
    };
    assert_eq!(at(50), Some(wide.remote_log_segment_id().clone()));
    assert_eq!(at(150), Some(newer.remote_log_segment_id().clone()));
    assert_eq!(at(250), None);
}

#[test]
fn the_manager_is_shareable_as_a_trait_object() {
    let rlmm: std::sync::Arc<dyn RemoteLogMetadataManager> =
        std::sync::Arc::new(InMemoryRemoteLogMetadataManager::new());
    let p = tp(3);
    std::thread::scope(|s| {
        for i in 0..4u64 {
            let rlmm = rlmm.clone();
            let p = p.clone();
            s.spawn(move || {
                let m = seg(&p, i * 10, i * 10 + 9, 5, 1);
                rlmm.add_remote_log_segment_metadata(&m).unwrap();
                rlmm.update_remote_log_segment_metadata(&to(&m, CopySegmentFinished))
                    .unwrap();
            });
        }
    });
    assert_eq!(rlmm.remote_log_size(&p).unwrap(), 20);
    assert_eq!(rlmm.highest_remote_offset(&p).unwrap(), Some(39));
}

/// Forwards every required method and leaves `segment_for_offset_ready` to the trait's default.
struct DefaultOnly(InMemoryRemoteLogMetadataManager);

impl RemoteLogMetadataManager for DefaultOnly {
    fn add_remote_log_segment_metadata(
        &self,
        m: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.0.add_remote_log_segment_metadata(m)
    }
    fn update_remote_log_segment_metadata(
        &self,
        u: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        self.0.update_remote_log_segment_metadata(u)
    }
    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.0.remote_log_segment_metadata(tp, offset)
    }
    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.0.list_remote_log_segments(tp)
    }
    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        self.0.highest_remote_offset(tp)
    }
    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        self.0.remote_log_size(tp)
    }
    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.0.segment_metadata(id)
    }
}

/// "A copy is in flight" (`MetadataNotReady`) is not "nothing there" (`Ok(None)`), and the
/// old lookup keeps answering `Ok(None)` for both.
fn not_ready_is_distinct_from_nothing_there(rlmm: &dyn RemoteLogMetadataManager) {
    let p = tp(5);
    let a = seg(&p, 0, 99, 10, 1);
    rlmm.add_remote_log_segment_metadata(&a).unwrap();
    let err = rlmm.segment_for_offset_ready(&p, 50).unwrap_err();
    assert!(
        matches!(err, RemoteStorageError::MetadataNotReady { .. }),
        "{err:?}"
    );
    assert!(err.is_retriable());
    assert!(
        err.to_string()
            .contains(&a.remote_log_segment_id().to_string()),
        "{err}"
    );
    assert_eq!(rlmm.remote_log_segment_metadata(&p, 50).unwrap(), None);
    // Nothing there: past the in-flight segment, another partition.
    assert_eq!(rlmm.segment_for_offset_ready(&p, 100).unwrap(), None);
    assert_eq!(rlmm.segment_for_offset_ready(&tp(6), 50).unwrap(), None);
    // Finished: ready, even with a newer in-flight re-copy over the same offsets.
    let finished = rlmm
        .update_remote_log_segment_metadata(&to(&a, CopySegmentFinished))
        .unwrap();
    let recopy = seg(&p, 0, 99, 10, 2);
    rlmm.add_remote_log_segment_metadata(&recopy).unwrap();
    assert_eq!(
        rlmm.segment_for_offset_ready(&p, 50).unwrap(),
        Some(finished)
    );
    // Being deleted, with the re-copy still in flight: not ready, naming the re-copy.
    rlmm.update_remote_log_segment_metadata(&to(&a, DeleteSegmentStarted))
        .unwrap();
    let deleting = rlmm.segment_for_offset_ready(&p, 50);
    assert!(
        matches!(&deleting, Err(RemoteStorageError::MetadataNotReady { message, .. })
            if message.contains(&recopy.remote_log_segment_id().to_string())),
        "{deleting:?}"
    );
    // Being deleted, with no copy in flight: nothing there.
    rlmm.update_remote_log_segment_metadata(&to(&recopy, CopySegmentFinished))
        .unwrap();
    rlmm.update_remote_log_segment_metadata(&to(&recopy, DeleteSegmentStarted))
        .unwrap();
    assert_eq!(rlmm.segment_for_offset_ready(&p, 50).unwrap(), None);
}

#[test]
fn in_memory_tells_not_ready_from_nothing_there() {
    not_ready_is_distinct_from_nothing_there(&InMemoryRemoteLogMetadataManager::new());
}

#[test]
fn the_trait_default_tells_not_ready_from_nothing_there() {
    not_ready_is_distinct_from_nothing_there(&DefaultOnly(InMemoryRemoteLogMetadataManager::new()));
}
