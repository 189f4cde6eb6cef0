//! The one error type of the tiering layer.

use std::path::PathBuf;
use std::time::Duration;

use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError};

/// What went wrong in a [`TieredLog`](crate::TieredLog), with the segment and seq involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    /// The local log failed.
    #[error("local log failed while {context}: {source}")]
    Storage {
        /// What was being done (names the seq or segment).
        context: String,
        /// The storage error.
        #[source]
        source: Box<krabka_storage::Error>,
    },
    /// A call to the remote storage manager failed.
    #[error("remote {operation} failed{}: {source}", describe(.segment.as_ref(), *.seq))]
    Remote {
        /// The SPI call (`"copy"`, `"fetch_log_segment"`, `"fetch_index"`, `"delete"`).
        operation: &'static str,
        /// The remote segment attempt involved, if any.
        segment: Option<RemoteLogSegmentId>,
        /// The seq being read or the first seq of the segment being copied, if any.
        seq: Option<u64>,
        /// The backend's error.
        #[source]
        source: Box<RemoteStorageError>,
    },
    /// A call to the remote log metadata manager failed.
    #[error("remote metadata {operation} failed{}: {source}", describe(.segment.as_ref(), None))]
    Metadata {
        /// The call (`"add"`, `"update"`, `"list"`, `"lookup"`).
        operation: &'static str,
        /// The remote segment attempt involved, if any.
        segment: Option<RemoteLogSegmentId>,
        /// The manager's error.
        #[source]
        source: Box<RemoteStorageError>,
    },
    /// Bytes fetched from the remote tier do not decode.
    #[error("corrupt remote segment {segment} while reading seq {seq}: {reason}")]
    CorruptRemote {
        /// The remote segment attempt.
        segment: RemoteLogSegmentId,
        /// The seq being read.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A copy ran past [`TieringConfig::copy_deadline`](crate::TieringConfig::copy_deadline)
    /// and was abandoned; the segment is copied again next round under a new id.
    #[error(
        "copy of seqs {base_seq}..={last_seq} as {segment} exceeded its deadline of {deadline:?}"
    )]
    CopyDeadlineExceeded {
        /// The abandoned attempt.
        segment: RemoteLogSegmentId,
        /// First seq of the segment.
        base_seq: u64,
        /// Last seq of the segment.
        last_seq: u64,
        /// The deadline.
        deadline: Duration,
    },
    /// A [`TieringConfig`](crate::TieringConfig) field is out of range, or the local log's
    /// options allow segments the remote tier cannot address (over `u32::MAX` bytes).
    #[error("invalid tiering config: {0}")]
    InvalidConfig(String),
    /// An argument of a call is invalid (e.g. a leader epoch lower than the current one).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The checkpoint file of the whole-log retention point could not be read or written.
    #[error("retention checkpoint {}: {reason}", path.display())]
    Checkpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Another tiering round (the background task or a concurrent `run_once`) is running.
    #[error("a tiering round is already running on this log")]
    RoundInProgress,
    /// A blocking task of the background runner panicked or was cancelled.
    #[error("tiering task failed: {0}")]
    Task(String),
}

fn describe(segment: Option<&RemoteLogSegmentId>, seq: Option<u64>) -> String {
    match (segment, seq) {
        (Some(s), Some(q)) => format!(" (segment {s}, seq {q})"),
        (Some(s), None) => format!(" (segment {s})"),
        (None, Some(q)) => format!(" (seq {q})"),
        (None, None) => String::new(),
    }
}

impl Error {
    pub(crate) fn storage(context: impl Into<String>, source: krabka_storage::Error) -> Self {
        Error::Storage {
            context: context.into(),
            source: Box::new(source),
        }
    }

    pub(crate) fn metadata(
        operation: &'static str,
        segment: Option<&RemoteLogSegmentId>,
        source: RemoteStorageError,
    ) -> Self {
        Error::Metadata {
            operation,
            segment: segment.cloned(),
            source: Box::new(source),
        }
    }

    pub(crate) fn remote(
        operation: &'static str,
        segment: &RemoteLogSegmentId,
        seq: Option<u64>,
        source: RemoteStorageError,
    ) -> Self {
        Error::Remote {
            operation,
            segment: Some(segment.clone()),
            seq,
            source: Box::new(source),
        }
    }

    /// Whether this is a remote call that found no object: the segment is gone from the
    /// remote store (for example deleted by retention after its metadata was looked up).
    pub fn is_remote_not_found(&self) -> bool {
        matches!(self, Error::Remote { source, .. } if source.is_not_found())
    }

    /// Whether retrying the same operation later may succeed (a retriable remote failure, a
    /// missed deadline, a busy round).
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Remote { source, .. } | Error::Metadata { source, .. } => source.is_retriable(),
            Error::CopyDeadlineExceeded { .. } | Error::RoundInProgress => true,
            _ => false,
        }
    }
}
