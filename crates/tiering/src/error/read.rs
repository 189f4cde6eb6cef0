//! Why a read across the tiers (or a read replica's) failed: a seq out of range, remote bytes that
//! do not prove their records, a hole no tier holds, a read deadline or queue.

use std::time::Duration;

use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError};

use super::describe::at_byte;

/// Why a read across the tiers (or a read replica's) failed: a seq out of range, remote bytes that
/// do not prove their records, a hole no tier holds, a read deadline or queue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A read started outside `first_seq()..=last_seq() + 1` (the same rule as
    /// `krabka_storage::Log::read`, over both tiers).
    #[error("seq {seq} is out of range: the log holds {first}..={last}")]
    OutOfRange {
        /// The requested seq.
        seq: u64,
        /// The log's first seq (either tier) at the time.
        first: u64,
        /// The log's last seq at the time.
        last: u64,
    },
    /// Bytes fetched from the remote tier do not decode, or do not hold the seqs the metadata
    /// says.
    #[error(
        "corrupt remote object {object}{} (segment {segment}) while reading seq {seq}: {reason}",
        at_byte(*.position)
    )]
    CorruptRemote {
        /// The remote segment attempt (boxed to keep the error small).
        segment: Box<RemoteLogSegmentId>,
        /// The object holding the bad bytes (its key in the shared layout: the `.log`, the
        /// `.index` or the `.timeindex`).
        object: String,
        /// Byte position of the problem in that object, when known.
        position: Option<u64>,
        /// The seq being read.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A valid batch of a finished remote segment holds a record a `Message` cannot represent
    /// exactly (a null value, a header with a null value, a control or transactional batch, as
    /// a producer's batch appended with `krabka_storage::Log::append_raw_batch` may hold): the
    /// bytes are not damaged, but a decoded read cannot return them, and stops there as the
    /// local log's read does (`krabka_storage::Error::NotAMessage`). Records before it are
    /// returned first (a short read).
    #[error(
        "the record of seq {record_seq} in remote object {object} (segment {segment}, batch at \
         byte {position}) cannot be read as a Message while reading seq {seq}: {reason}"
    )]
    RemoteNotAMessage {
        /// The remote segment attempt (boxed to keep the error small).
        segment: Box<RemoteLogSegmentId>,
        /// The segment's `.log` object (its key in the shared layout).
        object: String,
        /// Byte position of the batch in that object.
        position: u64,
        /// The record's seq (the batch's first record at or after the read's start, for a
        /// batch-wide reason).
        record_seq: u64,
        /// The seq being read.
        seq: u64,
        /// What the record or batch holds.
        reason: String,
    },
    /// A read found the remote object it needs being fetched by another thread (a reader or
    /// the read-ahead) and waited for that fetch past
    /// [`TieringConfig::fetch_deadline`](crate::TieringConfig::fetch_deadline); the read is cut
    /// short with this error, and the other fetch is left to finish (its result is cached).
    #[error(
        "reading seq {seq}: waited {waited:?} for another fetch of remote object {object} \
         (segment {segment}) and it had not ended"
    )]
    FetchWaitExceeded {
        /// The remote segment attempt (boxed to keep the error small).
        segment: Box<RemoteLogSegmentId>,
        /// The object being fetched: its key in the shared layout.
        object: String,
        /// The seq being read.
        seq: u64,
        /// How long the read waited.
        waited: Duration,
    },
    /// A read met seqs that no segment of either tier holds: a hole a recovery reported (a
    /// damaged or lost remote segment), or, for a read replica, seqs the bucket's own records
    /// (the partition head, an epoch record, the listing) show finished whose segment cannot
    /// be served (`reason` says which record and what is wrong with which of `objects`). The
    /// records on both sides are readable; read again from `to + 1`.
    #[error(
        "seqs {from}..={to} of partition {partition} are lost: {}; the records after them are \
         readable from seq {}",
        reason.as_deref().unwrap_or("no segment of either tier holds them (a hole recovery \
         reported)"),
        to.saturating_add(1)
    )]
    RemoteHole {
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// The first lost seq.
        from: u64,
        /// The last lost seq.
        to: u64,
        /// The keys of the objects of the lost segment(s) that are missing or damaged, when
        /// known (a read replica's view names them; empty otherwise).
        objects: Vec<String>,
        /// Why the seqs are lost, when more is known than that no segment holds them.
        reason: Option<String>,
    },
    /// A read replica could not refresh its view from the bucket (reading the partition's
    /// head object, an epoch record, a manifest, or listing the partition): the view it had is
    /// kept and served.
    #[error("refreshing the read replica of partition {partition} ({key}): {source}")]
    ReplicaRefresh {
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// The object (or the partition directory, for a listing) involved.
        key: String,
        /// The backend's or decoder's error.
        #[source]
        source: Box<RemoteStorageError>,
    },
    /// The [`TieringService`](crate::TieringService)'s remote reader queue is full: `limit`
    /// reads (running and waiting) are already in it. Retry later or raise
    /// [`ServiceConfig::read_queue`](crate::ServiceConfig::read_queue).
    #[error("the remote reader queue is full ({limit} reads running or waiting)")]
    ReaderQueueFull {
        /// Reads the service accepts at once (`read_threads + read_queue`).
        limit: usize,
    },
    /// A remote read through the [`TieringService`](crate::TieringService) ran past
    /// [`ServiceConfig::fetch_deadline`](crate::ServiceConfig::fetch_deadline); it keeps its
    /// reader thread until the backend returns, and its result is dropped.
    #[error("read of {partition} from seq {seq} exceeded its deadline of {deadline:?}")]
    FetchDeadlineExceeded {
        /// The partition read.
        partition: krabka_remote_storage::TopicIdPartition,
        /// The seq the read started at.
        seq: u64,
        /// The deadline.
        deadline: Duration,
    },
}
