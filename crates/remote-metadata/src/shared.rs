//! The read half of [`RemoteLogMetadataManager`], written once for every manager that keeps a
//! [`SharedMetadataState`].

use super::{RemoteLogMetadataManager, SharedMetadataState};
use crate::error::RemoteStorageError;
use crate::model::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, TopicIdPartition,
};

/// A metadata manager that keeps its segments in a [`SharedMetadataState`] and supplies only
/// how changes are written: every such type is a [`RemoteLogMetadataManager`] whose reads are
/// answered from the shared state (one implementation of them for the in-memory manager, the
/// durable one and any other).
///
/// Its methods are the write half; callers use the [`RemoteLogMetadataManager`] methods.
pub trait StateBackedManager: Send + Sync {
    /// The state reads are answered from.
    fn shared_state(&self) -> &SharedMetadataState;

    /// Validates, records and makes visible a new segment: the whole of
    /// [`RemoteLogMetadataManager::add_remote_log_segment_metadata`].
    ///
    /// # Errors
    /// As [`RemoteLogMetadataManager::add_remote_log_segment_metadata`].
    fn write_add(&self, metadata: &RemoteLogSegmentMetadata) -> Result<(), RemoteStorageError>;

    /// Validates, records and makes visible a state change: the whole of
    /// [`RemoteLogMetadataManager::update_remote_log_segment_metadata`].
    ///
    /// # Errors
    /// As [`RemoteLogMetadataManager::update_remote_log_segment_metadata`].
    fn write_update(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError>;
}

impl<T: StateBackedManager> RemoteLogMetadataManager for T {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.write_add(metadata)
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        self.write_update(update)
    }

    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.shared_state().find(tp, offset))
    }

    fn segment_for_offset_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.shared_state().find_ready(tp, offset)
    }

    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.shared_state().list(tp))
    }

    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        Ok(self.shared_state().highest_offset(tp))
    }

    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        Ok(self.shared_state().size(tp))
    }

    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.shared_state().get(id))
    }
}
