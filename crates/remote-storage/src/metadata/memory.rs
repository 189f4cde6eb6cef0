//! The in-memory metadata manager.

use parking_lot::RwLock;

use super::{MetadataState, RemoteLogMetadataManager};
use crate::error::RemoteStorageError;
use crate::model::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, TopicIdPartition,
};

/// Dropped ids an [`InMemoryRemoteLogMetadataManager`] remembers beyond twice its live segments.
pub const DROPPED_IDS_SLACK: usize = 1024;

/// A [`RemoteLogMetadataManager`] that keeps everything in memory (lost on exit). For tests
/// and for setups where the remote metadata is rebuilt some other way.
///
/// Memory is bounded by the live segments: the ids of dropped (`DeleteSegmentFinished`)
/// segments, remembered to reject their re-adding, are forgotten once they outnumber twice the
/// live segments plus [`DROPPED_IDS_SLACK`] (as the durable manager's compaction does).
#[derive(Debug, Default)]
pub struct InMemoryRemoteLogMetadataManager {
    state: RwLock<MetadataState>,
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

    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().find(tp, offset))
    }

    fn segment_for_offset_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.state.read().find_ready(tp, offset)
    }

    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().list(tp))
    }

    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        Ok(self.state.read().highest_offset(tp))
    }

    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        Ok(self.state.read().size(tp))
    }

    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().get(id).cloned())
    }
}
