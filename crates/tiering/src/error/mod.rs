//! The one error type of the tiering layer: [`Error`], whose reads, ownership and service
//! failures nest as [`ReadError`], [`OwnershipError`] and [`ServiceError`].

use std::path::PathBuf;
use std::time::Duration;

use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError};

mod describe;
mod ownership;
mod read;
mod service;
mod tail;

pub use ownership::OwnershipError;
pub use read::ReadError;
pub use service::ServiceError;
pub use tail::TailError;

use crate::fd_limit::{emfile, is_fd_exhaustion, open_files_limit};
use crate::policy::Mismatch;
use describe::describe;

/// What went wrong in a [`TieredLog`](crate::TieredLog), with the segment and seq involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    /// A local segment failed the check made before its copy (bad frame, seqs other than the
    /// log lists, size or index disagreeing with the `.log`), or a repair left a hole
    /// (`krabka_storage::Log::quarantined`) that no remote segment covers. It is not copied,
    /// no later segment is copied, and local retention never deletes it or anything after it;
    /// every round checks it again.
    #[error(
        "local seqs {first_seq}..={last_seq} are damaged ({} at byte {position}: {reason}); \
         they are not copied and are kept locally, and tiering does not copy past them \
         (inspect the directory with `krabka verify`)",
        path.display()
    )]
    DamagedSegment {
        /// The file with the problem (the `.log`, one of its index files, or the quarantine
        /// marker of a hole).
        path: PathBuf,
        /// Byte position of the problem in that file (0 for a hole or a missing file).
        position: u64,
        /// What is wrong.
        reason: String,
        /// First seq of the segment (or hole).
        first_seq: u64,
        /// Last seq of the segment (or hole), as the local log lists it.
        last_seq: u64,
    },
    /// The local log does not continue the seqs the remote metadata records, so joining them
    /// could reuse seqs or serve another incarnation's records. Nothing was changed.
    #[error(
        "the local log in {} does not continue the remote tier: {reason}. Restore the local log \
         that belongs to this remote tier and metadata, or move the directory aside: a tiered \
         log opened on an empty directory continues after the remote end",
        dir.display()
    )]
    LocalLogMismatch {
        /// The local log's directory.
        dir: PathBuf,
        /// How it differs.
        kind: Mismatch,
        /// What was found (the seqs involved).
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
    /// The process ran out of file descriptors (`EMFILE`, or `ENFILE` for the whole system).
    /// Nothing was half written: the operation failed before it changed a file. Raise the
    /// limit (`ulimit -n`) or lower the descriptors each partition keeps open
    /// (`krabka_storage::Options::max_open_segments`; see docs/tiering.md).
    #[error(
        "out of file descriptors while {context}: the limit is {} (RLIMIT_NOFILE); raise it \
         (ulimit -n) or open fewer partitions: {source}",
        limit.map_or_else(|| "unknown".to_owned(), |l| l.to_string())
    )]
    TooManyOpenFiles {
        /// What was being done.
        context: String,
        /// The process's soft limit of open files, when it could be read.
        limit: Option<u64>,
        /// The I/O error (`EMFILE` or `ENFILE`).
        #[source]
        source: std::io::Error,
    },
    /// A read failed ([`ReadError`]).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The partition directory or its ownership refused or failed ([`OwnershipError`]).
    #[error(transparent)]
    Ownership(#[from] OwnershipError),
    /// The service or a round's driver refused ([`ServiceError`]).
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The tail in the bucket refused or failed ([`TailError`]).
    #[error(transparent)]
    Tail(#[from] TailError),
}

impl Error {
    /// An I/O error on one of tiering's small checkpoint files at `path` while doing `what`:
    /// [`Error::TooManyOpenFiles`] when it is descriptor exhaustion, else
    /// [`Error::Checkpoint`].
    pub(crate) fn checkpoint_io(path: &std::path::Path, what: &str, io: std::io::Error) -> Self {
        if is_fd_exhaustion(&io) {
            return Error::TooManyOpenFiles {
                context: format!("{what} {}", path.display()),
                limit: open_files_limit(),
                source: io,
            };
        }
        Error::Checkpoint {
            path: path.to_path_buf(),
            reason: format!("cannot {what}: {io}"),
        }
    }

    pub(crate) fn storage(context: impl Into<String>, source: krabka_storage::Error) -> Self {
        if let krabka_storage::Error::Io { source: io, path } = source {
            if is_fd_exhaustion(&io) {
                return Error::TooManyOpenFiles {
                    context: format!("{} ({})", context.into(), path.display()),
                    limit: open_files_limit(),
                    source: io,
                };
            }
            return Error::Storage {
                context: context.into(),
                source: Box::new(krabka_storage::Error::Io { path, source: io }),
            };
        }
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
        if let RemoteStorageError::Io {
            source: io,
            location,
        } = &source
            && is_fd_exhaustion(io)
        {
            return Error::TooManyOpenFiles {
                context: format!("remote {operation} of {segment} at {location}"),
                limit: open_files_limit(),
                source: io
                    .raw_os_error()
                    .map_or_else(emfile, std::io::Error::from_raw_os_error),
            };
        }
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
            Error::Remote { source, .. }
            | Error::Metadata { source, .. }
            | Error::Ownership(OwnershipError::Record { source, .. })
            | Error::Read(ReadError::ReplicaRefresh { source, .. })
            | Error::Tail(TailError::Object { source, .. }) => source.is_retriable(),
            Error::CopyDeadlineExceeded { .. }
            | Error::Service(ServiceError::RoundInProgress)
            | Error::Read(ReadError::ReaderQueueFull { .. })
            | Error::Read(ReadError::FetchDeadlineExceeded { .. })
            | Error::Read(ReadError::FetchWaitExceeded { .. })
            | Error::Service(ServiceError::DeleteDeadlineExceeded { .. })
            | Error::Tail(TailError::NotAcknowledged { .. })
            | Error::TooManyOpenFiles { .. } => true,
            _ => false,
        }
    }
}
