//! The in-memory metadata manager.

use super::{SharedMetadataState, StateBackedManager};
use crate::error::RemoteStorageError;
use crate::model::{RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate};

/// Dropped ids an [`InMemoryRemoteLogMetadataManager`] remembers beyond twice its live segments.
pub const DROPPED_IDS_SLACK: usize = 1024;

/// A [`RemoteLogMetadataManager`](super::RemoteLogMetadataManager) that keeps everything in
/// memory (lost on exit). For tests and for setups where the remote metadata is rebuilt some
/// other way.
///
/// Memory is bounded by the live segments: the ids of dropped (`DeleteSegmentFinished`)
/// segments, remembered to reject their re-adding, are forgotten once they outnumber twice the
/// live segments plus [`DROPPED_IDS_SLACK`] (as the durable manager's compaction does).
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

impl StateBackedManager for InMemoryRemoteLogMetadataManager {
    fn shared_state(&self) -> &SharedMetadataState {
        &self.state
    }

    fn write_add(&self, metadata: &RemoteLogSegmentMetadata) -> Result<(), RemoteStorageError> {
        self.state.write().add(metadata)
    }

    fn write_update(
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
}
