//! Counters and the [`TieringStats`] / [`TieringReport`] snapshots.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// Remote storage manager calls made, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteRequests {
    /// `copy_log_segment_data` calls.
    pub copy: u64,
    /// `fetch_log_segment` calls (ranged data reads).
    pub fetch_log: u64,
    /// `fetch_index` calls.
    pub fetch_index: u64,
    /// `delete_log_segment_data` calls.
    pub delete: u64,
}

impl RemoteRequests {
    /// All calls together.
    pub fn total(&self) -> u64 {
        self.copy + self.fetch_log + self.fetch_index + self.delete
    }
}

/// A snapshot of a [`TieredLog`](crate::TieredLog)'s counters and sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TieringStats {
    /// Closed local segments without a finished remote copy.
    pub copy_lag_segments: u64,
    /// Bytes of those segments.
    pub copy_lag_bytes: u64,
    /// Segments copied (finished) since this handle was created.
    pub segments_copied: u64,
    /// Bytes copied (finished) since this handle was created.
    pub bytes_copied: u64,
    /// Copy attempts that failed or missed their deadline.
    pub copy_failures: u64,
    /// Remote storage manager calls, by kind.
    pub requests: RemoteRequests,
    /// Cache lookups that found their entry.
    pub cache_hits: u64,
    /// Cache lookups that did not.
    pub cache_misses: u64,
    /// Bytes held by the cache.
    pub cache_bytes: u64,
    /// Bytes of the local log's files.
    pub local_bytes: u64,
    /// Bytes of finished remote segments.
    pub remote_bytes: u64,
    /// Copies refused since this handle was created because the local segment failed its
    /// check before the copy ([`Error::DamagedSegment`]).
    pub segments_refused: u64,
    /// First seq of the damaged local segment or uncovered hole the latest round stopped
    /// copying at: nothing at or after it is copied, and retention never deletes it locally.
    /// `None` when nothing blocks.
    pub copy_blocked_at: Option<u64>,
}

/// What one tiering round did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct TieringReport {
    /// Segments whose copy finished.
    pub segments_copied: u64,
    /// Their bytes.
    pub bytes_copied: u64,
    /// Stale attempts (a crashed or abandoned copy, an unfinished delete) cleaned up.
    pub stale_cleaned: u64,
    /// Local segments deleted by local (or whole-log) retention.
    pub local_segments_deleted: u64,
    /// Remote segments deleted by retention.
    pub remote_segments_deleted: u64,
    /// First seq of the damaged local segment or uncovered hole (a repair's) copying stopped
    /// at: it and everything after it stay local, and retention does not pass it. The
    /// matching [`Error::DamagedSegment`] is in `failures`.
    pub copy_blocked_at: Option<u64>,
    /// Failures met along the way; each is retried next round. A failed copy or remote delete
    /// ends that phase of the round.
    pub failures: Vec<Error>,
}

impl TieringReport {
    /// Records that copying stopped at `seq` (keeps the lowest).
    pub(crate) fn block_at(&mut self, seq: u64) {
        self.copy_blocked_at = Some(self.copy_blocked_at.map_or(seq, |b| b.min(seq)));
    }

    pub(crate) fn merge(&mut self, other: TieringReport) {
        self.segments_copied += other.segments_copied;
        self.bytes_copied += other.bytes_copied;
        self.stale_cleaned += other.stale_cleaned;
        self.local_segments_deleted += other.local_segments_deleted;
        self.remote_segments_deleted += other.remote_segments_deleted;
        if let Some(seq) = other.copy_blocked_at {
            self.block_at(seq);
        }
        self.failures.extend(other.failures);
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) copy: AtomicU64,
    pub(crate) fetch_log: AtomicU64,
    pub(crate) fetch_index: AtomicU64,
    pub(crate) delete: AtomicU64,
    pub(crate) segments_copied: AtomicU64,
    pub(crate) bytes_copied: AtomicU64,
    pub(crate) copy_failures: AtomicU64,
    pub(crate) segments_refused: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn requests(&self) -> RemoteRequests {
        RemoteRequests {
            copy: self.copy.load(Ordering::Relaxed),
            fetch_log: self.fetch_log.load(Ordering::Relaxed),
            fetch_index: self.fetch_index.load(Ordering::Relaxed),
            delete: self.delete.load(Ordering::Relaxed),
        }
    }
}
