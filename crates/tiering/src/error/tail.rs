//! Why a record did not reach, or could not be taken from, the tail objects in the bucket.

use std::ops::RangeInclusive;
use std::time::Duration;

use krabka_remote_storage::{RemoteStorageError, TopicIdPartition};

/// Why a record did not reach, or could not be taken from, the tail objects in the bucket
/// (`docs/tiering.md`, "The tail in the bucket").
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TailError {
    /// A bucket-durable append's records were not in a tail object within the deadline: the
    /// bucket failed or stalled. The records are in the local log and go to the bucket with a
    /// later object once it answers; the append was **not** acknowledged. Retriable.
    #[error(
        "seqs {}..={} of {partition} are not in the bucket after {waited:?} ({cause}); \
         they are appended locally but not acknowledged",
        seqs.start(), seqs.end()
    )]
    NotAcknowledged {
        /// The partition.
        partition: Box<TopicIdPartition>,
        /// The seqs the append wrote.
        seqs: RangeInclusive<u64>,
        /// How long it waited.
        waited: Duration,
        /// The last failure of the tail's writer, or why it has not written yet.
        cause: String,
    },
    /// The tail's writer is stopped (its last handle was dropped, or it failed for good).
    #[error("the tail writer of {partition} is stopped: {reason}")]
    Stopped {
        /// The partition.
        partition: Box<TopicIdPartition>,
        /// Why.
        reason: String,
    },
    /// A tail object could not be written, read, listed or deleted.
    #[error("tail object {key}: {source}")]
    Object {
        /// The object's key.
        key: String,
        /// The store's error.
        #[source]
        source: Box<RemoteStorageError>,
    },
    /// Records the bucket's tail holds cannot be put after the local log: the seqs between
    /// are in no tail object the head lists (a tail object lost, or deleted by hand). The log
    /// is not opened for writing: recover the partition (`krabka recover`), which names the
    /// hole.
    #[error(
        "the tail of {partition} in the bucket continues at seq {found} (object {key}), but the \
         local log ends at seq {local_last}: seqs {}..={} are in no tail object",
        local_last + 1, found - 1
    )]
    Gap {
        /// The partition.
        partition: Box<TopicIdPartition>,
        /// The local log's last seq.
        local_last: u64,
        /// The first seq the tail holds above it.
        found: u64,
        /// The object holding it.
        key: String,
    },
    /// A tail object's batch disagrees with the local log or the finished segments (its seqs
    /// straddle a batch boundary, or it is not a valid batch): it is never served.
    #[error("tail object {key} contradicts the log at seq {seq}: {reason}")]
    Contradiction {
        /// The object's key.
        key: String,
        /// The seq involved.
        seq: u64,
        /// What disagrees.
        reason: String,
    },
    /// A tail object's entry of this partition, needed above the local log, is damaged (its
    /// data checksum fails): those seqs cannot be taken over. Recover the partition
    /// (`krabka recover`), which names them as a hole.
    #[error("tail object {key} holds seqs {}..={} damaged ({reason})", seqs.start(), seqs.end())]
    Damaged {
        /// The object's key.
        key: String,
        /// The seqs of the damaged entry.
        seqs: RangeInclusive<u64>,
        /// What is wrong.
        reason: String,
    },
    /// The configuration asks for something tail objects cannot give.
    #[error("tail objects: {0}")]
    Unsupported(String),
}
