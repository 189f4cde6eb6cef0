//! What a read replica reads through: [`Budgeted`], which refuses copies and deletes, and
//! takes one token of the request budget (a [`ByteRateQuota`] counted in requests), when there
//! is one, before every fetch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition,
};

use crate::quota::ByteRateQuota;

/// A request budget as replicas take from it: the quota, and the turn its takers wait in.
#[derive(Clone)]
pub(crate) struct Budget {
    quota: Arc<ByteRateQuota>,
    turn: Arc<Mutex<()>>,
}

/// The turn of every quota some replica takes from, by quota (dead quotas dropped as others
/// are added).
#[allow(clippy::type_complexity)]
static TURNS: Mutex<Vec<(Weak<ByteRateQuota>, Arc<Mutex<()>>)>> = Mutex::new(Vec::new());

impl Budget {
    /// The budget of `quota`: replicas given one quota, in a group or built apart, wait in one
    /// turn.
    pub(crate) fn of(quota: Arc<ByteRateQuota>) -> Self {
        let mut turns = TURNS.lock();
        turns.retain(|(q, _)| q.strong_count() > 0);
        let found = turns
            .iter()
            .find(|(q, _)| std::ptr::eq(q.as_ptr(), Arc::as_ptr(&quota)))
            .map(|(_, t)| t.clone());
        let turn = found.unwrap_or_else(|| {
            let t = Arc::new(Mutex::new(()));
            turns.push((Arc::downgrade(&quota), t.clone()));
            t
        });
        Self { quota, turn }
    }

    /// Waits for `n` tokens, one taker at a time. [`ByteRateQuota::acquire_blocking`] checks
    /// the balance and charges it under two locks: takers that all found it out of debt at once
    /// would all be charged, as many requests at once as threads waited (past the burst). In
    /// turn, each waits out the debt the one before it left: by any time `t` at most
    /// `rate × t + burst + n` requests were let through.
    pub(crate) fn take(&self, n: u64) {
        if n == 0 {
            return;
        }
        let _turn = self.turn.lock();
        self.quota.acquire_blocking(n);
    }
}

/// A backend that only reads: copies and deletes are refused, and every fetch first takes one
/// token of the shared request budget when there is one.
pub(crate) struct Budgeted {
    pub(crate) inner: Arc<dyn RemoteStorageManager>,
    pub(crate) budget: Option<Budget>,
}

impl Budgeted {
    fn take(&self) {
        if let Some(b) = &self.budget {
            b.take(1);
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
    pub(crate) budget: Option<Budget>,
    pub(crate) requests: AtomicU64,
    pub(crate) tp: TopicIdPartition,
}

impl BudgetedStore {
    /// Counts `n` requests, after waiting for their tokens.
    pub(crate) fn take(&self, n: u64) {
        if let Some(b) = &self.budget {
            b.take(n);
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
