//! The one error type of the remote tier.

use std::error::Error as StdError;

use crate::model::{RemoteLogSegmentId, RemoteLogSegmentState};

/// A boxed error source from a backend (an SDK error, a decode error, ...).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong in the remote tier, and where.
///
/// Callers act on the variant: [`SegmentNotFound`](Self::SegmentNotFound) means "nothing there",
/// [`Retriable`](Self::Retriable) means "try again later" (see [`is_retriable`](Self::is_retriable)),
/// [`MetadataNotReady`](Self::MetadataNotReady) means "it may exist but its metadata is not usable
/// yet", [`InvalidArgument`](Self::InvalidArgument) is a caller bug.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteStorageError {
    /// The segment, or the requested file of it, is not in the remote store.
    #[error("remote segment {segment} not found ({what})")]
    SegmentNotFound {
        /// The segment asked for.
        segment: RemoteLogSegmentId,
        /// What was missing: `"log"`, an index name, or a key/path.
        what: String,
    },
    /// A local or remote I/O operation failed.
    #[error("I/O error at {location}: {source}")]
    Io {
        /// The path or key the operation touched.
        location: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A transient failure — throttling (503 SlowDown), a 5xx, a timeout, a dropped connection —
    /// that survived the backend's own retries. The same call may succeed later.
    #[error("retriable remote failure during {operation} of {location}: {message}")]
    Retriable {
        /// The operation (e.g. `"PutObject"`, `"fetch"`).
        operation: String,
        /// The path or key involved.
        location: String,
        /// What the store said.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The store refused the credentials or the operation (HTTP 403 and the like).
    #[error("access denied by {endpoint} for bucket/root `{bucket}`: {message}")]
    AccessDenied {
        /// Bucket name or root directory.
        bucket: String,
        /// Endpoint URL or path of the store.
        endpoint: String,
        /// What the store said.
        message: String,
    },
    /// The configured bucket or root does not exist or cannot be used.
    #[error("remote store `{bucket}` at {endpoint} is not usable: {message}")]
    StoreUnavailable {
        /// Bucket name or root directory.
        bucket: String,
        /// Endpoint URL or path of the store.
        endpoint: String,
        /// Why.
        message: String,
    },
    /// A caller error: a byte range outside the segment, a hostile topic name, a bad field.
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
    },
    /// The segment is known but its metadata is not usable yet (e.g. the metadata manager has
    /// not caught up, or the copy has not finished). Distinct from "nothing there".
    #[error("remote metadata not ready for {what}: {message}")]
    MetadataNotReady {
        /// The partition or segment asked about.
        what: String,
        /// Why.
        message: String,
    },
    /// A state change the segment lifecycle does not allow.
    #[error("invalid state transition for {segment}: {from:?} -> {to:?}")]
    InvalidStateTransition {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// Its current state.
        from: RemoteLogSegmentState,
        /// The state asked for.
        to: RemoteLogSegmentState,
    },
    /// Metadata failed validation (end before start, no leader epochs, size over `u32`, ...).
    #[error("invalid remote segment metadata: {reason}")]
    InvalidMetadata {
        /// What is wrong.
        reason: String,
    },
    /// The partition's copies are in a segment format this build does not read (its identity
    /// record says which); nothing of it was read or written.
    #[error(
        "{location}: the partition's segments are in {format}; this build reads and writes Kafka v2 record batches (format 2) only"
    )]
    UnsupportedFormat {
        /// The identity record's key.
        location: String,
        /// The format it names.
        format: String,
    },
    /// Stored remote metadata or data is corrupt.
    #[error("corrupt remote data at {location}: {reason}")]
    Corrupt {
        /// Where.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// Any other failure of the store that retrying will not fix.
    #[error("remote store failure during {operation} of {location}: {message}")]
    Backend {
        /// The operation.
        operation: String,
        /// The path or key involved.
        location: String,
        /// What the store said.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl RemoteStorageError {
    /// Whether the same call may succeed if tried again later.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Retriable { .. } | Self::MetadataNotReady { .. })
            || matches!(self, Self::Io { source, .. } if matches!(
                source.kind(),
                std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::Interrupted
                    | std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
            ))
    }

    /// Whether this is [`SegmentNotFound`](Self::SegmentNotFound).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::SegmentNotFound { .. })
    }

    /// Shorthand for an [`Io`](Self::Io) error at `location`.
    pub fn io(location: impl std::fmt::Display, source: std::io::Error) -> Self {
        Self::Io {
            location: location.to_string(),
            source,
        }
    }

    /// Adds the segment to the message of an [`InvalidArgument`](Self::InvalidArgument) or
    /// [`InvalidMetadata`](Self::InvalidMetadata) error raised where it was not known (e.g. by
    /// [`checked_range`](crate::checked_range)); other variants, and messages already naming
    /// it, are returned unchanged.
    #[must_use]
    pub fn for_segment(self, segment: &RemoteLogSegmentId) -> Self {
        let name = segment.to_string();
        match self {
            Self::InvalidArgument { message } if !message.contains(&name) => {
                Self::InvalidArgument {
                    message: format!("segment {name}: {message}"),
                }
            }
            Self::InvalidMetadata { reason } if !reason.contains(&name) => Self::InvalidMetadata {
                reason: format!("segment {name}: {reason}"),
            },
            other => other,
        }
    }

    /// Shorthand for an [`InvalidArgument`](Self::InvalidArgument) error.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            message: message.into(),
        }
    }
}
