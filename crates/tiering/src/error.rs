//! The one error type of the tiering layer.

use std::path::PathBuf;
use std::time::Duration;

use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError};

use crate::fd_limit::{emfile, is_fd_exhaustion, open_files_limit};
use crate::policy::Mismatch;

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
    /// A later writer took the partition over: the remote tier holds writer epoch `by_epoch`
    /// (or another incarnation holds this log's epoch), so this log copies and deletes nothing
    /// more, locally or remotely, and every later round fails with this error. What it copied
    /// after the takeover is superseded by the epoch lineage and never read.
    #[error(
        "the log in {} is fenced: it writes as epoch {epoch} of partition {partition}, but \
         epoch {by_epoch} was claimed by {claimant} (it took the partition over from seq \
         {start_seq}); this log copies and deletes nothing more",
        dir.display()
    )]
    Fenced {
        /// The log's directory.
        dir: PathBuf,
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// This log's writer epoch.
        epoch: u64,
        /// The epoch found in the remote tier.
        by_epoch: u64,
        /// Who claimed it (host, process, directory).
        claimant: String,
        /// The first seq of that epoch.
        start_seq: u64,
    },
    /// The log is bound to another remote than the one it was opened with: tiering to both
    /// would split it between them. Nothing was changed.
    #[error(
        "the log in {} is bound to the remote {bound}, not {given}; nothing was changed",
        dir.display()
    )]
    WrongRemote {
        /// The log's directory.
        dir: PathBuf,
        /// The remote recorded in its binding.
        bound: String,
        /// The remote it was opened with.
        given: String,
    },
    /// The log is bound to another partition than the one it was opened with.
    #[error(
        "the log in {} is bound to partition {bound}, not {given}; nothing was changed",
        dir.display()
    )]
    WrongPartition {
        /// The log's directory.
        dir: PathBuf,
        /// The partition recorded in its binding.
        bound: Box<krabka_remote_storage::TopicIdPartition>,
        /// The partition it was opened with.
        given: Box<krabka_remote_storage::TopicIdPartition>,
    },
    /// The directory is not the one the binding was made in (a `cp -a` copy, a restore from a
    /// backup): two copies of one log would both write the partition. Nothing was changed.
    #[error(
        "the log in {} is a copy of the directory bound to writer epoch {epoch} of partition \
         {partition} (bound in directory {bound}, this is {found}); a copy does not tier, \
         nothing was changed",
        dir.display()
    )]
    CopiedDirectory {
        /// The log's directory.
        dir: PathBuf,
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// The epoch in the binding.
        epoch: u64,
        /// The directory identity (`device:inode`) in the binding.
        bound: String,
        /// This directory's identity.
        found: String,
    },
    /// The local log holds nothing and was never bound, but the remote tier holds the
    /// partition: opening it would start a second, empty log and hide the remote records.
    /// Recovery (`krabka_tiering::recovery`) rebuilds it instead. Nothing was changed.
    #[error(
        "{} holds no log, but the remote {location} holds partition {partition} \
         ({what}); opening it here would start a new, empty log beside that one. Recover it \
         from the remote instead; nothing was changed",
        dir.display()
    )]
    RemoteHoldsPartition {
        /// The log's directory.
        dir: PathBuf,
        /// The remote.
        location: String,
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// What the remote holds of it.
        what: String,
    },
    /// The local log is not bound to the remote, which holds the partition written by another
    /// log (a directory copied before it was bound, or a topic id reused). Nothing was changed.
    #[error(
        "the log in {} is not bound to the remote {location}, which holds partition \
         {partition} written by another log ({what}); nothing was changed",
        dir.display()
    )]
    NotBound {
        /// The log's directory.
        dir: PathBuf,
        /// The remote.
        location: String,
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// What the remote holds of it.
        what: String,
    },
    /// A log recovered from the remote tier was opened to write, but the remote holds a segment
    /// starting past the end it was recovered to: another writer is alive and copying, and
    /// taking the partition over would supersede what it copied. Nothing was changed.
    #[error(
        "the log in {} was recovered up to seq {recovered_to}, but the remote holds a copy of \
         partition {partition} from seq {remote_seq} on: another writer is still copying; stop \
         it and recover again before writing here; nothing was changed",
        dir.display()
    )]
    RemoteMovedOn {
        /// The log's directory.
        dir: PathBuf,
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// The last seq it was recovered to.
        recovered_to: u64,
        /// The start of the newest copy beyond it.
        remote_seq: u64,
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
    /// The log was opened to read only: it copies and deletes nothing.
    #[error("the log in {} was opened to read only: it copies and deletes nothing", dir.display())]
    ReadOnly {
        /// The log's directory.
        dir: PathBuf,
    },
    /// The binding file (`DIR/remote-binding`) cannot be read, written, or does not decode.
    #[error("remote binding {}: {reason}", path.display())]
    Binding {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An ownership record of the remote tier (identity or writer epoch) could not be read or
    /// written, or does not decode: a writer that cannot prove its epoch copies nothing.
    #[error("ownership record {key} of partition {partition}: {source}")]
    Ownership {
        /// The record's key.
        key: String,
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// The backend's or decoder's error.
        #[source]
        source: Box<RemoteStorageError>,
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
    /// Another tiering round (`run_once`, the background task, or a `TieringService` turn) is
    /// running.
    #[error("a tiering round is already running on this log")]
    RoundInProgress,
    /// A blocking task of the background runner panicked or was cancelled.
    #[error("tiering task failed: {0}")]
    Task(String),
    /// The [`TieringService`](crate::TieringService)'s remote reader queue is full: `limit`
    /// reads (running and waiting) are already in it. Retry later or raise
    /// [`ServiceConfig::read_queue`](crate::ServiceConfig::read_queue).
    #[error("the remote reader queue is full ({limit} reads running or waiting)")]
    ReaderQueueFull {
        /// Reads the service accepts at once (`read_threads + read_queue`).
        limit: usize,
    },
    /// The partition is not in the [`TieringService`](crate::TieringService).
    #[error("partition {0} is not in the tiering service")]
    UnknownPartition(krabka_remote_storage::TopicIdPartition),
    /// The partition is already in the [`TieringService`](crate::TieringService).
    #[error("partition {0} is already in the tiering service")]
    PartitionExists(krabka_remote_storage::TopicIdPartition),
    /// The [`TieringService`](crate::TieringService) is shut down (or shutting down).
    #[error("the tiering service is shut down")]
    ServiceStopped,
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
    /// Retention of a partition in the [`TieringService`](crate::TieringService) ran past
    /// [`ServiceConfig::delete_deadline`](crate::ServiceConfig::delete_deadline); the partition
    /// is not scheduled again until the deletes return, and the next round finishes them.
    #[error("retention of {partition} exceeded its deadline of {deadline:?}")]
    DeleteDeadlineExceeded {
        /// The partition.
        partition: krabka_remote_storage::TopicIdPartition,
        /// The deadline.
        deadline: Duration,
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
    /// The topic file of a partition directory (`DIR/topic`) cannot be read or written, or is
    /// damaged: it names the partition the log is tiered under.
    #[error("topic file {}: {reason}", path.display())]
    TopicFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The remote tier cannot be used as given (a missing directory, a listing that fails).
    /// Nothing was written to it.
    #[error("remote {remote} cannot be used: {reason}")]
    RemoteUnusable {
        /// The remote, as given.
        remote: String,
        /// Why.
        reason: String,
    },
    /// A local log starts above seq 1 and nothing explains it: no remote segment of its
    /// partition, no retention point, no recorded hole. Tiering on would make the seqs below
    /// the start unreachable. Nothing was changed.
    #[error(
        "cannot open tiered log {}: its local segments start at seq {start}, but {what}, and no \
         retention point explains the start: seqs 1..={} would be unreachable; nothing was changed",
        dir.display(), start.saturating_sub(1)
    )]
    StartUnexplained {
        /// The log's directory.
        dir: PathBuf,
        /// Its first local seq.
        start: u64,
        /// What the directory lacks.
        what: String,
        /// Whether the directory has no topic file and was likely renamed.
        renamed: bool,
    },
    /// A live process holds the directory (its log's or its metadata's lock): a recovery never
    /// runs beside a live log. Nothing was changed.
    #[error(
        "{} is in use by another process, which holds its lock file {}: recovery rebuilds a \
         lost log and never runs beside a live one",
        dir.display(), lock.display()
    )]
    InUse {
        /// The directory.
        dir: PathBuf,
        /// The lock file held.
        lock: PathBuf,
    },
    /// The directory records another partition than the one asked for. Nothing was changed.
    #[error(
        "{} records partition {recorded} (topic id {}), not {asked}",
        dir.display(), recorded.topic_id()
    )]
    TopicMismatch {
        /// The directory.
        dir: PathBuf,
        /// The partition its topic file records.
        recorded: Box<krabka_remote_storage::TopicIdPartition>,
        /// What was asked.
        asked: String,
    },
    /// The remote holds no partition matching what was asked.
    #[error(
        "no partition {asked} on {remote}{}",
        if others.is_empty() { String::new() } else { format!(" (found topic ids {})", others.join(", ")) }
    )]
    PartitionNotFound {
        /// The remote.
        remote: String,
        /// What was looked for.
        asked: String,
        /// The topic ids the remote holds the topic's partition under, when the one asked for
        /// is not among them.
        others: Vec<String>,
        /// Whether the topic name was derived from the directory's name.
        by_name: bool,
    },
    /// The remote holds several partitions matching what was asked.
    #[error(
        "{} partitions {asked} on {remote}, under topic ids {}",
        found.len(), found.join(", ")
    )]
    PartitionAmbiguous {
        /// The remote.
        remote: String,
        /// What was looked for.
        asked: String,
        /// The topic ids found.
        found: Vec<String>,
    },
    /// A recovered log's first seq could not be read back.
    #[error("recovered {}, but a read from seq {seq} returned {returned} records", dir.display())]
    RecoveredUnreadable {
        /// The directory.
        dir: PathBuf,
        /// The seq read.
        seq: u64,
        /// Records returned.
        returned: usize,
    },
}

fn at_byte(position: Option<u64>) -> String {
    position.map_or_else(String::new, |p| format!(" at byte {p}"))
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
            | Error::Ownership { source, .. }
            | Error::ReplicaRefresh { source, .. } => source.is_retriable(),
            Error::CopyDeadlineExceeded { .. }
            | Error::RoundInProgress
            | Error::ReaderQueueFull { .. }
            | Error::FetchDeadlineExceeded { .. }
            | Error::FetchWaitExceeded { .. }
            | Error::DeleteDeadlineExceeded { .. }
            | Error::TooManyOpenFiles { .. } => true,
            _ => false,
        }
    }
}
