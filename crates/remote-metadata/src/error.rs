//! The one error type of this crate: what is wrong with the durable metadata's files, and the
//! refusal of a write to a read-only view of them.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};

use krabka_remote_storage::RemoteStorageError;

/// Damage the durable metadata manager found in its own files, naming the file; or a write
/// refused by a [read-only view](crate::ReadOnlyRemoteLogMetadataManager) of them.
///
/// The [`RemoteLogMetadataManager`](crate::RemoteLogMetadataManager) trait answers with
/// [`RemoteStorageError`], so these arrive as [`RemoteStorageError::Backend`] (operation
/// `"metadata check"`, or `"metadata write"` for [`ReadOnly`](Self::ReadOnly); location the
/// file) with this error as its source;
/// [`MetadataError::find`] digs it out again:
///
/// ```
/// use krabka_remote_metadata::{DurableRemoteLogMetadataManager, MetadataError};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("CURRENT"), "not a generation\n")?;
/// let e = DurableRemoteLogMetadataManager::open(dir.path()).unwrap_err();
/// assert!(!e.is_retriable());
/// let found = MetadataError::find(&e).unwrap();
/// assert!(matches!(found, MetadataError::Pointer { .. }));
/// assert_eq!(found.path(), dir.path().join("CURRENT"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// The durable metadata's generation pointer (`CURRENT`) cannot be used: it is missing while
    /// generation directories exist, does not parse, is not a regular file, or names a
    /// generation that is not there. Open changed nothing; the manager never guesses which
    /// generation is current.
    #[error("remote metadata pointer {} is unusable: {reason}", path.display())]
    Pointer {
        /// The pointer file.
        path: PathBuf,
        /// What is wrong, naming the generation directories involved.
        reason: String,
    },
    /// A directory entry of the durable metadata that looks like a generation but that the
    /// manager cannot account for: a name it does not write, a generation newer than a
    /// compaction could have left, or an unfinished generation whose events the current one
    /// does not cover. Open changed nothing and never deletes it.
    #[error("remote metadata generation {} cannot be accounted for: {reason}", path.display())]
    Generation {
        /// The generation directory (or stray entry).
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The durable metadata's log is damaged: a bad frame that is not a genuinely torn last
    /// event, an event that does not decode or does not apply, a generation record that is
    /// missing or wrong (the log was truncated, emptied or replaced), or a gap between its
    /// segment files. Open changed nothing.
    #[error(
        "remote metadata log {} is damaged{}: {reason}",
        path.display(),
        position_and_seq(*position, *seq)
    )]
    Log {
        /// The damaged `.log` file (or the generation directory when no file is known).
        path: PathBuf,
        /// Byte position of the damage in `path`, when known.
        position: Option<u64>,
        /// Seq of the damaged event, when known.
        seq: Option<u64>,
        /// What is wrong.
        reason: String,
    },
    /// A write (an add, or an update, deletes included) to a
    /// [`ReadOnlyRemoteLogMetadataManager`](crate::ReadOnlyRemoteLogMetadataManager): it reads
    /// the directory and never writes it. Nothing was changed.
    #[error(
        "remote metadata {} was opened read-only: {operation} of segment {segment} refused; open it as its owner to write",
        path.display()
    )]
    ReadOnly {
        /// The metadata directory.
        path: PathBuf,
        /// The refused write: `"add"` or `"update"`.
        operation: &'static str,
        /// The segment the write was about.
        segment: String,
    },
}

/// ` at byte P (seq S)`, ` at byte P`, ` at seq S` or nothing.
fn position_and_seq(position: Option<u64>, seq: Option<u64>) -> String {
    match (position, seq) {
        (Some(p), Some(s)) => format!(" at byte {p} (seq {s})"),
        (Some(p), None) => format!(" at byte {p}"),
        (None, Some(s)) => format!(" at seq {s}"),
        (None, None) => String::new(),
    }
}

impl MetadataError {
    /// The file or directory this error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Pointer { path, .. }
            | Self::Generation { path, .. }
            | Self::Log { path, .. }
            | Self::ReadOnly { path, .. } => path,
        }
    }

    /// The first [`MetadataError`] in `error` or its chain of sources: how a caller of the
    /// [`RemoteLogMetadataManager`](crate::RemoteLogMetadataManager) API (or of a layer above
    /// it that keeps the source) finds out which file of the durable metadata is damaged.
    pub fn find<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a MetadataError> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(found) = e.downcast_ref::<MetadataError>() {
                return Some(found);
            }
            next = e.source();
        }
        None
    }
}

impl From<MetadataError> for RemoteStorageError {
    /// A [`RemoteStorageError::Backend`] (operation `"metadata check"`, or `"metadata write"`
    /// for [`MetadataError::ReadOnly`]; location the file) with the [`MetadataError`] as its
    /// source, so callers can still match on it through [`MetadataError::find`]. Never
    /// retriable: reading again finds the same bytes, and a read-only view stays read-only.
    fn from(e: MetadataError) -> Self {
        let operation = match e {
            MetadataError::ReadOnly { .. } => "metadata write",
            _ => "metadata check",
        };
        RemoteStorageError::Backend {
            operation: operation.to_owned(),
            location: e.path().display().to_string(),
            message: e.to_string(),
            source: Some(Box::new(e)),
        }
    }
}
