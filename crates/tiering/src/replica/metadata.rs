//! [`ReplicaMetadata`]: the remote segments a read replica serves, as a read-only
//! [`RemoteLogMetadataManager`], so the replica's reads, and a follower's tiered log, find
//! segments exactly as the writer's own metadata answers.

use std::sync::Arc;

use krabka_remote_metadata::InMemoryRemoteLogMetadataManager;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState, RemoteStorageError, TopicIdPartition,
};
use parking_lot::RwLock;

/// The finished segments a replica serves: replaced whole by each refresh that changes them
/// (readers keep the set they looked up), never written through the trait.
#[derive(Debug, Default)]
pub struct ReplicaMetadata {
    current: RwLock<Arc<InMemoryRemoteLogMetadataManager>>,
}

impl ReplicaMetadata {
    /// The set now served.
    fn now(&self) -> Arc<InMemoryRemoteLogMetadataManager> {
        self.current.read().clone()
    }

    /// Serves exactly `segments` (finished metadata) from now on.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] when two segments share an id.
    pub(crate) fn replace(
        &self,
        segments: &[RemoteLogSegmentMetadata],
    ) -> Result<(), RemoteStorageError> {
        let next = InMemoryRemoteLogMetadataManager::new();
        for m in segments {
            next.add_remote_log_segment_metadata(&as_started(m)?)?;
            next.update_remote_log_segment_metadata(&RemoteLogSegmentMetadataUpdate::new(
                m.remote_log_segment_id().clone(),
                m.event_timestamp_ms(),
                m.custom_metadata().cloned(),
                RemoteLogSegmentState::CopySegmentFinished,
                m.broker_id(),
            ))?;
        }
        *self.current.write() = Arc::new(next);
        Ok(())
    }
}

/// `m` as the `CopySegmentStarted` metadata a manager takes first.
fn as_started(
    m: &RemoteLogSegmentMetadata,
) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
    RemoteLogSegmentMetadata::builder(
        m.remote_log_segment_id().clone(),
        m.start_offset(),
        m.end_offset(),
    )
    .max_timestamp_ms(m.max_timestamp_ms())
    .broker_id(m.broker_id())
    .event_timestamp_ms(m.event_timestamp_ms())
    .segment_leader_epochs(m.segment_leader_epochs().clone())
    .segment_size_in_bytes(m.segment_size_in_bytes())
    .custom_metadata(m.custom_metadata().cloned())
    .writer_epoch(m.writer_epoch())
    .state(RemoteLogSegmentState::CopySegmentStarted)
    .build()
}

/// The error of every write through the trait.
fn read_only() -> RemoteStorageError {
    RemoteStorageError::invalid_argument(
        "a read replica's metadata follows the bucket and is never written by its users",
    )
}

impl RemoteLogMetadataManager for ReplicaMetadata {
    fn add_remote_log_segment_metadata(
        &self,
        _metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        Err(read_only())
    }

    fn update_remote_log_segment_metadata(
        &self,
        _update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        Err(read_only())
    }

    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.now().remote_log_segment_metadata(tp, offset)
    }

    fn segment_for_offset_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.now().segment_for_offset_ready(tp, offset)
    }

    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.now().list_remote_log_segments(tp)
    }

    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        self.now().highest_remote_offset(tp)
    }

    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        self.now().remote_log_size(tp)
    }

    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.now().segment_metadata(id)
    }
}
