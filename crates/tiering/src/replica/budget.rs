//! The request budget of read replicas: a token bucket ([`ByteRateQuota`], counted in
//! requests) every fetch a replica's read sends takes one token of, through [`Budgeted`].

use std::sync::Arc;

use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager,
};

use crate::service::ByteRateQuota;

/// A backend whose every fetch first takes one token of a shared request budget. A replica
/// never copies or deletes: those calls are refused.
pub(crate) struct Budgeted {
    pub(crate) inner: Arc<dyn RemoteStorageManager>,
    pub(crate) budget: Arc<ByteRateQuota>,
}

fn refused(what: &str) -> RemoteStorageError {
    RemoteStorageError::invalid_argument(format!("a read replica never {what} the remote tier"))
}

impl RemoteStorageManager for Budgeted {
    fn copy_log_segment_data(
        &self,
        _metadata: &RemoteLogSegmentMetadata,
        _data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        Err(refused("copies to"))
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.budget.acquire_blocking(1);
        self.inner
            .fetch_log_segment(metadata, start_position, end_position)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.budget.acquire_blocking(1);
        self.inner.fetch_index(metadata, index_type)
    }

    fn delete_log_segment_data(
        &self,
        _metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        Err(refused("deletes from"))
    }
}
