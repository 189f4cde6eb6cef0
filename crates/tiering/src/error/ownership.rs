//! Why a partition directory or its ownership of the remote refused or failed: the binding, the
//! writer epoch, the topic identity, the choice of partition, a directory in use.

use std::path::PathBuf;

use krabka_remote_storage::RemoteStorageError;

/// Why a partition directory or its ownership of the remote refused or failed: the binding, the
/// writer epoch, the topic identity, the choice of partition, a directory in use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnershipError {
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
    Record {
        /// The record's key.
        key: String,
        /// The partition.
        partition: Box<krabka_remote_storage::TopicIdPartition>,
        /// The backend's or decoder's error.
        #[source]
        source: Box<RemoteStorageError>,
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
