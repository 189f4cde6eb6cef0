//! What a read replica reads through: [`Budgeted`], which refuses copies and deletes, and
//! takes one token of the request budget (a [`ByteRateQuota`] counted in requests), when there
//! is one, before every fetch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition,
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

/// The store a replica's refreshes read through: it counts every call (what
/// [`ReplicaStats::refresh_requests`](super::ReplicaStats) reports) and takes one token of the
/// request budget, when there is one, before each is sent. It only reads: every write is
/// refused.
pub(crate) struct BudgetedStore {
    pub(crate) inner: Arc<dyn OwnershipStore>,
    pub(crate) budget: Option<Arc<ByteRateQuota>>,
    pub(crate) requests: AtomicU64,
    pub(crate) tp: TopicIdPartition,
}

impl BudgetedStore {
    /// Counts `n` requests, after waiting for their tokens.
    pub(crate) fn take(&self, n: u64) {
        if let Some(b) = &self.budget {
            b.acquire_blocking(n);
        }
        self.requests.fetch_add(n, Ordering::Relaxed);
        crate::metrics::add(crate::metrics::REPLICA_REFRESH_REQUESTS, &self.tp, n);
    }
}

impl RemoteSegmentLister for BudgetedStore {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        // The first page; the pages after it are counted (and charged) by the caller, which
        // knows how many objects were listed.
        self.take(1);
        self.inner.list_partition(partition_dir, visit)
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.take(1);
        self.inner.list_partition_dirs(visit)
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        self.take(1);
        self.inner.read_object(key)
    }

    fn read_object_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.take(1);
        self.inner.read_object_bounded(key, max_len)
    }

    fn delete_object(&self, _key: &str) -> Result<(), RemoteStorageError> {
        Err(refused("deletes from"))
    }
}

impl OwnershipStore for BudgetedStore {
    fn create_if_absent(&self, _key: &str, _bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        Err(refused("writes to"))
    }

    fn put_object(&self, _key: &str, _bytes: &[u8]) -> Result<(), RemoteStorageError> {
        Err(refused("writes to"))
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        self.take(1);
        self.inner.read_if_changed(key, known, max_len)
    }
}
