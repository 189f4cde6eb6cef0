//! The one error type of the transforming layer.

use std::error::Error as StdError;
use std::path::PathBuf;

use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError};

use crate::key_id::KeyId;

/// What went wrong while transforming a segment, or while building a configuration.
///
/// Errors about a stored segment name the segment and the object (`log`, `log chunk 3`,
/// `offset index`, `transform header`, ...). No variant ever carries key material.
///
/// Through the [`RemoteStorageManager`](krabka_remote_storage::RemoteStorageManager) SPI these
/// arrive as [`RemoteStorageError::Backend`] with this error as its source (operation
/// `"transform"`); [`TransformError::find`] digs it out again:
///
/// ```
/// use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError, TopicIdPartition, Uuid};
/// use krabka_remote_transform::TransformError;
///
/// let segment = RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 0));
/// let e: RemoteStorageError = TransformError::Authentication {
///     segment: segment.clone(),
///     object: "log chunk 3".into(),
/// }
/// .into();
/// assert!(!e.is_retriable());
/// let found = TransformError::find(&e).unwrap();
/// assert!(matches!(found, TransformError::Authentication { .. }));
/// assert_eq!(found.segment(), Some(&segment));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransformError {
    /// Stored bytes fail a checksum, a length or a structural check: bit rot, truncation, a
    /// chunk swapped or replaced, or a header that is not the one recorded at copy time.
    #[error("segment {segment}: {object} is corrupt: {reason}")]
    Corrupt {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// The object or part of it (`log chunk 3`, `offset index`, `transform header`, ...).
        object: String,
        /// What is wrong.
        reason: String,
    },
    /// Authenticated decryption failed: the bytes were forged, swapped from another position or
    /// segment, or replayed from another copy.
    #[error(
        "segment {segment}: {object} failed authentication (tampered with, swapped, replayed \
         or truncated)"
    )]
    Authentication {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// The object or part of it.
        object: String,
    },
    /// The segment is encrypted under a master key the key provider does not have (a wrong
    /// key file, or a rotated-out key that is no longer supplied).
    #[error(
        "segment {segment} is encrypted with the master key of key id {key_id}, which the key \
         provider does not have{}",
        if *configured { "" } else { " (no encryption key is configured)" }
    )]
    MissingKey {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// The id of the master key the segment's data key is wrapped with.
        key_id: KeyId,
        /// Whether a key provider was configured at all.
        configured: bool,
    },
    /// The provider has a key under the segment's key id, but it does not unwrap the segment's
    /// data key: a different key registered under that id, or a tampered header.
    #[error(
        "segment {segment}: the master key of key id {key_id} does not unwrap the segment's \
         data key (a different key under that id, or a tampered header)"
    )]
    WrongKey {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// The key id recorded in the segment.
        key_id: KeyId,
    },
    /// The segment was written with a transform this build does not include, or by a newer
    /// format version.
    #[error("segment {segment}: {what}")]
    Unsupported {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// What is not supported and how to get it.
        what: String,
    },
    /// A transformed object, or the custom metadata describing it, does not fit its limit.
    #[error("segment {segment}: {object} is too large: {reason}")]
    TooLarge {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// The object (`log`, `custom metadata`, ...).
        object: String,
        /// The size and the limit.
        reason: String,
    },
    /// The cryptographic library failed (the system random generator, or sealing).
    #[error("segment {segment}: {operation} failed in the crypto library")]
    Crypto {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// What was being done.
        operation: &'static str,
    },
    /// A local file of the segment could not be read, or a scratch file written.
    #[error("segment {segment}: I/O error on {}: {source}", path.display())]
    Io {
        /// The segment.
        segment: RemoteLogSegmentId,
        /// The local path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A compression spec that does not parse (`none`, `zstd` or `zstd:LEVEL`).
    #[error("invalid compression {spec:?}: {reason}")]
    InvalidCompression {
        /// The spec as given.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// A master key that cannot be loaded. Names the file or variable, never the key.
    #[error("master key from {origin}: {reason}")]
    InvalidKey {
        /// The file path or environment variable the key was read from.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// A configuration value out of range, or a transform this build does not include.
    #[error("invalid transform configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
}

impl TransformError {
    /// The segment this error is about, if it is about one.
    pub fn segment(&self) -> Option<&RemoteLogSegmentId> {
        match self {
            Self::Corrupt { segment, .. }
            | Self::Authentication { segment, .. }
            | Self::MissingKey { segment, .. }
            | Self::WrongKey { segment, .. }
            | Self::Unsupported { segment, .. }
            | Self::TooLarge { segment, .. }
            | Self::Crypto { segment, .. }
            | Self::Io { segment, .. } => Some(segment),
            Self::InvalidCompression { .. }
            | Self::InvalidKey { .. }
            | Self::InvalidConfig { .. } => None,
        }
    }

    /// The first [`TransformError`] in `error` or its chain of sources: how a caller of the
    /// SPI finds out that a fetch failed because of a wrong key or a tampered chunk.
    pub fn find<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a TransformError> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(found) = e.downcast_ref::<TransformError>() {
                return Some(found);
            }
            next = e.source();
        }
        None
    }

    pub(crate) fn corrupt(
        segment: &RemoteLogSegmentId,
        object: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::Corrupt {
            segment: segment.clone(),
            object: object.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn unsupported(segment: &RemoteLogSegmentId, what: impl Into<String>) -> Self {
        Self::Unsupported {
            segment: segment.clone(),
            what: what.into(),
        }
    }

    pub(crate) fn io(segment: &RemoteLogSegmentId, path: PathBuf, source: std::io::Error) -> Self {
        Self::Io {
            segment: segment.clone(),
            path,
            source,
        }
    }
}

impl From<TransformError> for RemoteStorageError {
    /// A [`RemoteStorageError::Backend`] (operation `"transform"`, location the segment when
    /// there is one) with the [`TransformError`] as its source, so callers can still match on it
    /// through [`TransformError::find`]. Never retriable: retrying reads the same bytes.
    fn from(e: TransformError) -> Self {
        RemoteStorageError::Backend {
            operation: "transform".to_owned(),
            location: e.segment().map(ToString::to_string).unwrap_or_default(),
            message: e.to_string(),
            source: Some(Box::new(e)),
        }
    }
}
