//! What the replica rows count: every request the bench's logs and replicas send, at the
//! transport. The ownership store (head, epoch records, manifests, listings) goes through the
//! tiering bench's [`Counting`] decorator, the segment data (copies, ranged and index fetches)
//! through [`CountingRsm`]; with the in-process S3 server, what the server received is counted
//! as well.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager,
};

use crate::tiering::owned::{Calls, Counting, server_requests};

/// A [`RemoteStorageManager`] that forwards every call to `inner` and counts it by method.
pub struct CountingRsm {
    inner: Arc<dyn RemoteStorageManager>,
    copy: AtomicU64,
    fetch: AtomicU64,
    fetch_index: AtomicU64,
    delete: AtomicU64,
}

/// Calls of each [`RemoteStorageManager`] method.
#[derive(Clone, Copy, Debug, Default)]
pub struct RsmCalls {
    pub copy: u64,
    pub fetch: u64,
    pub fetch_index: u64,
    pub delete: u64,
}

impl RsmCalls {
    fn total(&self) -> u64 {
        self.copy + self.fetch + self.fetch_index + self.delete
    }
}

impl CountingRsm {
    pub fn new(inner: Arc<dyn RemoteStorageManager>) -> Self {
        Self {
            inner,
            copy: AtomicU64::new(0),
            fetch: AtomicU64::new(0),
            fetch_index: AtomicU64::new(0),
            delete: AtomicU64::new(0),
        }
    }

    fn calls(&self) -> RsmCalls {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RsmCalls {
            copy: get(&self.copy),
            fetch: get(&self.fetch),
            fetch_index: get(&self.fetch_index),
            delete: get(&self.delete),
        }
    }
}

impl RemoteStorageManager for CountingRsm {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        self.copy.fetch_add(1, Ordering::Relaxed);
        self.inner.copy_log_segment_data(metadata, data)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.fetch.fetch_add(1, Ordering::Relaxed);
        self.inner
            .fetch_log_segment(metadata, start_position, end_position)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.fetch_index.fetch_add(1, Ordering::Relaxed);
        self.inner.fetch_index(metadata, index_type)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.delete.fetch_add(1, Ordering::Relaxed);
        self.inner.delete_log_segment_data(metadata)
    }
}

/// The counted store and backend every log and replica of the rows uses, the bare store
/// (for baselines), and the in-process server when there is one.
pub struct Transport<'a> {
    pub store: Arc<Counting>,
    pub rsm: Arc<CountingRsm>,
    /// The same store, uncounted.
    pub bare_store: Arc<dyn OwnershipStore>,
    pub server: Option<&'a TestServer>,
    /// The remote's location as a binding records it (`s3://bucket/prefix`).
    pub location: String,
}

/// Counts of everything sent, at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent {
    pub store: Calls,
    pub rsm: RsmCalls,
    /// Requests the in-process server received (0 without one).
    pub server: u64,
}

impl Sent {
    /// What was sent between `before` and `self`.
    pub fn since(&self, before: &Sent) -> Sent {
        Sent {
            store: self.store.since(&before.store),
            rsm: RsmCalls {
                copy: self.rsm.copy - before.rsm.copy,
                fetch: self.rsm.fetch - before.rsm.fetch,
                fetch_index: self.rsm.fetch_index - before.rsm.fetch_index,
                delete: self.rsm.delete - before.rsm.delete,
            },
            server: self.server - before.server,
        }
    }

    /// Requests sent: store calls and backend calls. Each is one S3 request, but a segment
    /// copy, which is one PUT per file (three or more); no measured window of these rows
    /// holds a copy.
    pub fn total(&self) -> u64 {
        self.store.total() + self.rsm.total()
    }

    /// `"5 conditional reads, 1 fetch"`: the nonzero counts.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.store.total() > 0 {
            parts.push(self.store.describe());
        }
        for (n, one, many) in [
            (self.rsm.copy, "segment copy", "segment copies"),
            (self.rsm.fetch, "ranged fetch", "ranged fetches"),
            (self.rsm.fetch_index, "index fetch", "index fetches"),
            (self.rsm.delete, "segment delete", "segment deletes"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {}", if n == 1 { one } else { many }));
            }
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

impl Transport<'_> {
    /// The counts now.
    pub fn sent(&self) -> Sent {
        Sent {
            store: self.store.calls(),
            rsm: self.rsm.calls(),
            server: server_requests(self.server) as u64,
        }
    }

    /// The counted store, as the tiering API takes it.
    pub fn store(&self) -> Arc<dyn OwnershipStore> {
        self.store.clone()
    }

    /// The counted backend, as the tiering API takes it.
    pub fn rsm(&self) -> Arc<dyn RemoteStorageManager> {
        self.rsm.clone()
    }
}
