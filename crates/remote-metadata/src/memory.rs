//! The in-memory metadata manager.

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteStorageError,
};

use crate::SharedMetadataState;
use crate::shared::reads_from_shared_state;

/// Dropped ids an [`InMemoryRemoteLogMetadataManager`] remembers beyond twice its live segments.
pub const DROPPED_IDS_SLACK: usize = 1024;

/// A [`RemoteLogMetadataManager`](crate::RemoteLogMetadataManager) that keeps everything in
/// memory (lost on exit). For tests and for setups where the remote metadata is rebuilt some
/// other way.
///
/// Memory is bounded by the live segments: the ids of dropped (`DeleteSegmentFinished`)
/// segments, remembered to reject their re-adding, are forgotten once they outnumber twice the
/// live segments plus [`DROPPED_IDS_SLACK`] (as the durable manager's compaction does).
///
/// A segment is found once its copy has finished:
///
/// ```
/// use krabka_remote_metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
/// use krabka_remote_storage::*;
///
/// let rlmm = InMemoryRemoteLogMetadataManager::new();
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let id = RemoteLogSegmentId::generate(tp.clone());
/// let m = RemoteLogSegmentMetadata::builder(id.clone(), 0, 99).segment_size_in_bytes(10).build()?;
/// rlmm.add_remote_log_segment_metadata(&m)?;
/// assert_eq!(rlmm.remote_log_segment_metadata(&tp, 50)?, None); // not finished yet
/// rlmm.update_remote_log_segment_metadata(&RemoteLogSegmentMetadataUpdate::to_state(
///     id, RemoteLogSegmentState::CopySegmentFinished, 0))?;
/// assert_eq!(rlmm.highest_remote_offset(&tp)?, Some(99));
/// assert_eq!(rlmm.remote_log_size(&tp)?, 10);
/// # Ok::<(), RemoteStorageError>(())
/// ```
///
/// [`segment_for_offset_ready`](RemoteLogMetadataManager::segment_for_offset_ready) tells a
/// copy in flight from nothing there:
///
/// ```
/// use krabka_remote_metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
/// use krabka_remote_storage::*;
///
/// let rlmm = InMemoryRemoteLogMetadataManager::new();
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 99).build()?;
/// rlmm.add_remote_log_segment_metadata(&m)?;
/// let err = rlmm.segment_for_offset_ready(&tp, 50).unwrap_err();
/// assert!(matches!(err, RemoteStorageError::MetadataNotReady { .. }));
/// assert_eq!(rlmm.segment_for_offset_ready(&tp, 100)?, None); // nothing there
/// # Ok::<(), RemoteStorageError>(())
/// ```
#[derive(Debug, Default)]
pub struct InMemoryRemoteLogMetadataManager {
    state: SharedMetadataState,
}

impl InMemoryRemoteLogMetadataManager {
    /// An empty manager.
    pub fn new() -> Self {
        Self::default()
    }
}

impl RemoteLogMetadataManager for InMemoryRemoteLogMetadataManager {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.state.write().add(metadata)
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let mut state = self.state.write();
        let next = state.update(update)?;
        if state.dropped_len()
            > state
                .len()
                .saturating_mul(2)
                .saturating_add(DROPPED_IDS_SLACK)
        {
            state.forget_dropped();
        }
        Ok(next)
    }

    reads_from_shared_state!(state);
}
