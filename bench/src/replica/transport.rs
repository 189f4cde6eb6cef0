//! What the replica rows count: every request the bench's logs and replicas send, at the
//! transport. The ownership store (head, epoch records, manifests, listings) goes through the
//! tiering bench's [`Counting`] decorator, the segment data (copies, ranged and index fetches)
//! through [`CountingRsm`], the SPI's `testkit::Counting`; with the in-process S3 server, what the server received is counted
//! as well.

use std::sync::Arc;

use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::RemoteStorageManager;
use krabka_remote_storage::ownership::OwnershipStore;

use crate::tiering::owned::{Calls, Counting, server_requests};

/// The backend every log and replica of the rows uses, counted by method (the SPI's own
/// counting decorator).
pub type CountingRsm = krabka_remote_storage::testkit::Counting<Arc<dyn RemoteStorageManager>>;

/// Calls of each [`RemoteStorageManager`] method.
pub type RsmCalls = krabka_remote_storage::testkit::CallCounts;

/// Calls of every method of `c`.
fn rsm_total(c: &RsmCalls) -> u64 {
    c.copy + c.fetch_log + c.fetch_index + c.delete
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
                fetch_log: self.rsm.fetch_log - before.rsm.fetch_log,
                fetch_log_bytes: self.rsm.fetch_log_bytes - before.rsm.fetch_log_bytes,
                fetch_index: self.rsm.fetch_index - before.rsm.fetch_index,
                fetch_index_bytes: self.rsm.fetch_index_bytes - before.rsm.fetch_index_bytes,
                delete: self.rsm.delete - before.rsm.delete,
            },
            server: self.server - before.server,
        }
    }

    /// Requests sent: store calls and backend calls. Each is one S3 request, but a segment
    /// copy, which is one PUT per file (three or more); no measured window of these rows
    /// holds a copy.
    pub fn total(&self) -> u64 {
        self.store.total() + rsm_total(&self.rsm)
    }

    /// `"5 conditional reads, 1 fetch"`: the nonzero counts.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.store.total() > 0 {
            parts.push(self.store.describe());
        }
        for (n, one, many) in [
            (self.rsm.copy, "segment copy", "segment copies"),
            (self.rsm.fetch_log, "ranged fetch", "ranged fetches"),
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
            rsm: self.rsm.counts(),
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
