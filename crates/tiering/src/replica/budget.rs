//! What a read replica reads through: [`Budgeted`], which refuses copies and deletes, and
//! takes one token of the request budget (a [`ByteRateQuota`] counted in requests), when there
//! is one, before every fetch.

use std::sync::Arc;

use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager,
};

use crate::service::ByteRateQuota;

/// A backend that only reads: copies and deletes are refused, and every fetch first takes one
/// token of the shared request budget when there is one.
pub(crate) struct Budgeted {
    pub(crate) inner: Arc<dyn RemoteStorageManager>,
    pub(crate) budget: Option<Arc<ByteRateQuota>>,
}

impl Budgeted {
    fn take(&self) {
        if let Some(b) = &self.budget {
            b.acquire_blocking(1);
        }
    }
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
        self.take();
        self.inner
            .fetch_log_segment(metadata, start_position, end_position)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.take();
        self.inner.fetch_index(metadata, index_type)
    }

    fn delete_log_segment_data(
        &self,
        _metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        Err(refused("deletes from"))
    }
}
