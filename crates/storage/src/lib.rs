//! Crash-safe append-only segment log with sparse offset and time indexes, recovery and retention.
//!
//! A [`Log`] is a directory of segments, each named by the seq of its first record
//! (`00000000000000000001.log`, with `.index` and `.timeindex` written when it is closed).
//! Records get contiguous seqs starting at 1. The newest segment is the *active* one; it rolls
//! before an append would take it past [`Options::max_bytes`]. Retention drops whole old
//! segments ([`Log::delete_before`], [`Log::trim_over_bytes`], [`Log::delete_older_than`]).
//!
//! ```
//! use krabka_protocol::Message;
//! use krabka_storage::{Log, Options, SyncPolicy};
//!
//! let dir = tempfile::tempdir()?;
//! let log = Log::open(dir.path(), Options { max_bytes: 1 << 20, sync: SyncPolicy::Never, ..Options::default() })?;
//! assert_eq!(log.append(&Message::new("hello").with_timestamp(10))?, 1);
//! assert_eq!(log.append_batch(&[Message::new("a"), Message::new("b")])?, 2..=3);
//! let records = log.read(2, 10)?;
//! assert_eq!(records.len(), 2);
//! assert_eq!(records[0].message.value, "a");
//! assert!(log.read(4, 10)?.is_empty()); // caught up
//! log.close()?;
//!
//! let log = Log::open(dir.path(), Options::default())?;
//! assert_eq!((log.first_seq(), log.last_seq()), (1, 3));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Durability is chosen per log with [`SyncPolicy`]; recovery on [`Log::open`] follows
//! [`Options::recovery`] ([`RecoveryMode`]): it cuts a torn tail (saving the bytes) and refuses
//! any other damage, naming the file, byte and seqs at stake; what it did is in
//! [`RecoveryReport`]. The byte formats are in `docs/format.md`; the
//! [`segment`] module decodes them from plain bytes (for segments fetched from a remote tier).

mod bufs;
#[doc(hidden)]
pub mod fault;
pub mod fsutil;
pub mod index;
mod log;
mod recovery;
pub mod segment;
#[cfg(feature = "testkit")]
pub mod testkit;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use krabka_protocol::Message;

pub use crate::log::{
    FsyncObserver, LOCK_RETRY_FOR, Log, LogStats, create_and_lock, try_lock_exclusive,
};
pub use crate::recovery::{
    ACCEPTED_HOLES_FILE_NAME, AcceptedHole, KeptRun, QuarantinedPiece, RecoveryReport, RepairStep,
    SegmentRepair, TruncatedTail, plan_segment_repair, read_accepted_holes, read_recovery_point,
};

/// Default [`Options::max_bytes`]: 64 MiB per segment.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default [`Options::index_interval_bytes`].
pub const DEFAULT_INDEX_INTERVAL_BYTES: u64 = 4096;
/// Default [`Options::max_message_bytes`]: 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 16 << 20;
/// Default [`Options::max_open_segments`].
pub const DEFAULT_MAX_OPEN_SEGMENTS: usize = 128;
/// Name of the lock file [`Log::open`] creates in the log directory and holds an exclusive
/// lock on for the `Log`'s lifetime.
pub const LOCK_FILE_NAME: &str = ".lock";

/// Name of the file in which a log records durably the highest seq it is known to hold
/// (written by [`Log::close`], by a synced roll and by [`Log::start_at`]; Kafka's recovery-point
/// checkpoint plays the same part). An open that finds fewer records than it names fails with
/// [`Error::Damaged`], so a deleted or emptied active segment is never taken for a short log.
pub const RECOVERY_POINT_FILE_NAME: &str = "recovery-point";

/// Name of the file in which [`Log::close`] records durably that the log was shut down
/// cleanly, with the exact length, last seq and file identity of its active segment and the
/// seqs, lengths and largest timestamps of every closed one, and the modification time the
/// close gave the directory: the next [`Log::open`] then builds the log from it, scanning
/// nothing, reading no index file, and listing the directory only if an entry changed (each segment's index entries load
/// at first use, and are rebuilt by a scan when they do not describe what the marker recorded)
/// ([`RecoveryReport::clean_shutdown`]). Open trusts it only when it is intact and describes the
/// segment files exactly as they are (a damaged or stale marker means the full recovery, never
/// an error), never under [`RecoveryMode::Repair`]; the first append, roll or
/// [`Log::start_at`] after open removes it before writing.
pub const CLEAN_SHUTDOWN_FILE_NAME: &str = "clean-shutdown";

/// One stored message and its sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's sequence number (the first record of a log has seq 1).
    pub seq: u64,
    /// The stored message.
    pub message: Message,
}

/// When appended records are forced to stable storage (`fdatasync`).
///
/// Every policy writes each append to the file (the OS page cache) before it returns, so **a
/// process crash never loses an acknowledged record** under any policy. The policies differ in
/// what survives a **power loss or kernel crash**, which only synced bytes survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Never fsync record data on append (the OS writes it back when it chooses, typically
    /// within ~30 s). Process crash: nothing acknowledged is lost. Power loss: any suffix of the
    /// records written since the OS last flushed may be lost (recovery cuts it cleanly). Closed
    /// segments are not synced at roll either; the log remembers them, and [`Log::sync`] and
    /// [`Log::close`] fsync them (with their index files) as well as the active segment, so
    /// after either returns every appended record is on stable storage.
    Never,
    /// Fsync before `append` returns; concurrent appenders share one fsync (group commit).
    /// Process crash and power loss: every acknowledged record survives.
    EveryAppend,
    /// Fsync after every `n` appended records (an `n` of 0 or 1 behaves like
    /// [`SyncPolicy::EveryAppend`]). Process crash: nothing acknowledged is lost. Power loss:
    /// up to the last `n - 1` acknowledged records may be lost.
    EveryN(u64),
    /// Time-based flush: every appended record is fsynced within about `d` of its append,
    /// whether or not more appends follow.
    ///
    /// Two mechanisms: an append that comes at least `d` after the previous fsync syncs before
    /// it returns (sharing the fsync with concurrent appenders), and a background thread owned
    /// by the `Log` (started by [`Log::open`] for this policy only) wakes when the oldest
    /// unsynced append is `d` old and syncs everything written so far, so an idle log's tail
    /// does not stay unsynced. The thread never holds the append lock while it fsyncs (appends
    /// and reads go on meanwhile); it is stopped and joined by [`Log::close`] and when the `Log`
    /// is dropped.
    ///
    /// - Process crash: nothing acknowledged is lost (records are in the OS page cache as soon
    ///   as `append` returns).
    /// - Power loss or OS crash: records acknowledged in roughly the last `d` (plus the time an
    ///   fsync takes, and any delay in scheduling the thread) may be lost; every record appended
    ///   earlier than that survives. Recovery cuts a lost or torn tail cleanly, so what remains
    ///   is a prefix of the acknowledged records.
    /// - A failed background fsync poisons the log like any other failed sync: later appends
    ///   and syncs return [`Error::Poisoned`], and records after the last successful sync are
    ///   not guaranteed to survive a power loss.
    /// - Dropping the `Log` without [`Log::close`] stops the thread without a final sync: the
    ///   unsynced tail is then written back whenever the OS chooses.
    ///
    /// An interval of zero syncs on every append, like [`SyncPolicy::EveryAppend`].
    Interval(Duration),
}

/// What [`Log::open`] does when it finds damaged or missing data, in the manner of
/// raft-engine's recovery modes. Whatever the mode, recovery never deletes a byte: what it cuts
/// from a segment is first saved into the log's quarantine directory
/// ([`segment::QUARANTINE_DIR`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// The default. A damaged tail of the active segment is cut (after saving it into the
    /// quarantine directory) when no valid frame follows the damage: that is what a torn write
    /// or a power loss leaves, and it holds no record anyone could read. Any other damage — a
    /// bad frame followed by valid ones, a damaged or missing closed segment, a gap or overlap
    /// between segment files — fails the open with [`Error::Damaged`], [`Error::SeqGap`] or
    /// [`Error::SeqOverlap`], naming the file, the byte and the seqs at stake.
    #[default]
    TolerateTornTail,
    /// Any damage fails the open, a torn tail included ([`Error::TornTail`]).
    Strict,
    /// Never fails for damage: the damaged bytes of every segment are moved aside into the
    /// quarantine directory and every intact frame after them is kept (each run of them in a
    /// segment file of its own, under a journal that the next open finishes after a crash;
    /// [`plan_segment_repair`] shows the plan), stray and overlapping segment files are moved
    /// there whole, and the seqs that are now missing become an explicit hole (a marker file
    /// named by [`segment::hole_file_name`]); reads into a hole fail with
    /// [`Error::Quarantined`]. Appends continue after the highest seq at stake, so no seq is
    /// ever reused. What moved is in [`RecoveryReport::quarantined`], what was kept in
    /// [`RecoveryReport::kept`]. Use it as a repair the user asked for (`krabka repair DIR`).
    Repair,
}

/// Configuration of a [`Log`]. Build it with struct update syntax:
/// `Options { max_bytes: 1 << 20, ..Options::default() }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Maximum bytes of a segment's `.log` file before the log rolls to a new segment.
    /// Default and `0`: 64 MiB ([`DEFAULT_MAX_BYTES`]). Minimum: 1 (any value works; a record
    /// larger than it gets a segment of its own).
    pub max_bytes: u64,
    /// Bytes of records between two entries of the sparse offset and time indexes: a read seeks
    /// to an entry and scans at most this many bytes. Default: 4096. Minimum: 1 (`0` is
    /// [`Error::InvalidOptions`]).
    ///
    /// `1` gives an entry per record (a dense index, as Kafka's `index.interval.bytes = 1`): a
    /// point read then reads just its record's frame (at least 64 bytes; the last record of a
    /// segment, which has no next entry, reads as with a sparse index), 1.1–1.4× the point
    /// reads per second of the default at 100 B–1 KiB records (docs/benchmarks.md), at the
    /// cost of 32 bytes of memory and of index files per record (an offset and a time entry)
    /// against 32 per 4 KiB.
    pub index_interval_bytes: u64,
    /// When records are synced to stable storage. Default: [`SyncPolicy::EveryAppend`].
    pub sync: SyncPolicy,
    /// Largest encoded message accepted by `append`; larger ones are [`Error::MessageTooLarge`].
    /// Default: 16 MiB ([`DEFAULT_MAX_MESSAGE_BYTES`]). Minimum: 18 (the smallest encoded
    /// message); maximum: `u32::MAX - 8` (the frame length field).
    pub max_message_bytes: u64,
    /// Most read file descriptors of closed segments kept open at once (a small LRU cache):
    /// reads of a closed segment whose file is not cached open it again, evicting the least
    /// recently used one. The active segment's file is always open, in addition. A read in
    /// progress keeps its descriptor until it finishes, so briefly there may be one more per
    /// concurrent reader. Default: 128 ([`DEFAULT_MAX_OPEN_SEGMENTS`]). Minimum: 1 (`0` is
    /// [`Error::InvalidOptions`]).
    pub max_open_segments: usize,
    /// What open does with damaged or missing data. Default:
    /// [`RecoveryMode::TolerateTornTail`].
    pub recovery: RecoveryMode,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            sync: SyncPolicy::EveryAppend,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_open_segments: DEFAULT_MAX_OPEN_SEGMENTS,
            recovery: RecoveryMode::TolerateTornTail,
        }
    }
}

impl Options {
    /// Checks the options and resolves defaults (`max_bytes == 0` becomes 64 MiB).
    pub(crate) fn resolve(mut self) -> Result<Options, Error> {
        if self.max_bytes == 0 {
            self.max_bytes = DEFAULT_MAX_BYTES;
        }
        if self.index_interval_bytes == 0 {
            return Err(Error::InvalidOptions {
                field: "index_interval_bytes",
                reason: "must be at least 1".into(),
            });
        }
        let max_frame_body = u64::from(u32::MAX) - 8;
        if self.max_message_bytes < segment::MIN_MESSAGE_LEN as u64
            || self.max_message_bytes > max_frame_body
        {
            return Err(Error::InvalidOptions {
                field: "max_message_bytes",
                reason: format!(
                    "must be in {}..={max_frame_body}, got {}",
                    segment::MIN_MESSAGE_LEN,
                    self.max_message_bytes
                ),
            });
        }
        if self.max_open_segments == 0 {
            return Err(Error::InvalidOptions {
                field: "max_open_segments",
                reason: "must be at least 1".into(),
            });
        }
        Ok(self)
    }
}

/// A segment as seen by [`Log::segments`] (for tiering and tools).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Seq of the segment's first record (its file name).
    pub base_seq: u64,
    /// Seq of its last record; `base_seq - 1` for an empty (active) segment.
    pub last_seq: u64,
    /// Largest record timestamp in it (`i64::MIN` when empty).
    pub max_timestamp: i64,
    /// Size of its `.log` file in bytes.
    pub size: u64,
    /// Path of the `.log` file.
    pub log_path: PathBuf,
    /// Path of the `.index` file (present on disk for closed segments).
    pub index_path: PathBuf,
    /// Path of the `.timeindex` file (present on disk for closed segments).
    pub time_index_path: PathBuf,
    /// Whether this is the active (newest, still written) segment.
    pub active: bool,
}

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A read started outside `first_seq()..=last_seq() + 1`.
    #[error("seq {seq} is out of range: the log holds {first}..={last}")]
    OutOfRange {
        /// The requested seq.
        seq: u64,
        /// The log's first seq at the time.
        first: u64,
        /// The log's last seq at the time.
        last: u64,
    },
    /// Stored bytes are invalid (bad length, CRC, seq, message or index).
    #[error("corrupt data in {}: at byte {position}: {reason}", path.display())]
    Corrupt {
        /// The file (empty for the pure functions of [`segment`], which see only bytes).
        path: PathBuf,
        /// Byte position of the problem in that file (or buffer).
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// An I/O operation failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A message's encoding is larger than [`Options::max_message_bytes`].
    #[error("message of {size} bytes exceeds max_message_bytes ({max})")]
    MessageTooLarge {
        /// Encoded size of the message.
        size: u64,
        /// The configured limit.
        max: u64,
    },
    /// An fsync or write failed earlier; the log refuses appends and syncs because the OS may
    /// have dropped unsynced data. Close and reopen it (recovery finds what is really on disk).
    /// `cause` is that first failure (a full disk says "No space left on device").
    #[error(
        "the log in {} is poisoned by an earlier failed write or fsync ({}); reopen it",
        dir.display(),
        cause.message
    )]
    Poisoned {
        /// The log's directory.
        dir: PathBuf,
        /// The failure that poisoned the log.
        cause: Box<PoisonCause>,
    },
    /// The [`Options`] are invalid.
    #[error("invalid options: {field} {reason}")]
    InvalidOptions {
        /// The name of the offending [`Options`] field.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// Another `Log` (in this or another process) has the log directory open: it holds the
    /// exclusive lock on the directory's lock file ([`LOCK_FILE_NAME`]). Only one writer may
    /// open a log at a time; close the other one first.
    #[error(
        "the log in {} is already open (its lock file {LOCK_FILE_NAME} is held by another Log or process)",
        dir.display()
    )]
    Locked {
        /// The log's directory.
        dir: PathBuf,
    },
    /// Open found a bad frame that is not a torn tail: valid records follow it, or it is in a
    /// closed segment. Nothing was changed. Records `first_seq..=last_seq` are at stake (they
    /// follow the damage or are missing); open with [`RecoveryMode::Repair`]
    /// (`krabka repair DIR`) to move the damaged bytes aside and record the hole.
    #[error(
        "damaged segment {}: bad frame at byte {position} ({reason}); records {first_seq}..={last_seq} are at stake; nothing was changed (an open with RecoveryMode::Repair moves the damaged bytes aside)",
        path.display()
    )]
    Damaged {
        /// The damaged `.log` file.
        path: PathBuf,
        /// Byte position of the first bad frame.
        position: u64,
        /// What is wrong there.
        reason: String,
        /// First seq at stake.
        first_seq: u64,
        /// Last seq at stake.
        last_seq: u64,
    },
    /// Under [`RecoveryMode::Strict`]: the active segment ends in a damaged tail that no valid
    /// frame follows (what a torn write leaves). Nothing was changed.
    #[error(
        "torn tail in {}: {bytes_after} bytes from byte {position} do not hold a valid frame ({reason}); strict recovery refuses to cut them",
        path.display()
    )]
    TornTail {
        /// The active segment's `.log` file.
        path: PathBuf,
        /// Byte position of the first bad frame.
        position: u64,
        /// Bytes from `position` to the end of the file.
        bytes_after: u64,
        /// Whether the file ends inside that frame (its length runs past the end of the file):
        /// a write cut short, as opposed to complete bytes that fail their CRC.
        incomplete: bool,
        /// What is wrong there.
        reason: String,
    },
    /// Seqs `expected..found` are missing between two segment files: a segment was deleted or
    /// truncated, or `path` is a stray file. Nothing was changed.
    #[error(
        "seqs {expected}..={} are missing: {} ends at seq {} and {} starts at seq {found} (segment file {expected:020}.log was deleted or truncated, or the later file is stray); nothing was changed (an open with RecoveryMode::Repair records the hole)",
        found.saturating_sub(1), previous.display(), expected.saturating_sub(1), path.display()
    )]
    SeqGap {
        /// The segment file before the gap.
        previous: PathBuf,
        /// The segment file after the gap.
        path: PathBuf,
        /// The seq the next segment should start at.
        expected: u64,
        /// The seq it starts at.
        found: u64,
    },
    /// A segment file starts at a seq the previous segment already holds (a stray or copied
    /// file). Nothing was changed.
    #[error(
        "{} starts at seq {found} but {} already holds seqs up to {}; nothing was changed (an open with RecoveryMode::Repair moves the overlapping file aside)",
        path.display(), previous.display(), expected.saturating_sub(1)
    )]
    SeqOverlap {
        /// The segment file before.
        previous: PathBuf,
        /// The overlapping segment file.
        path: PathBuf,
        /// The seq it should start at.
        expected: u64,
        /// The seq it starts at.
        found: u64,
    },
    /// A read reached seqs that a repair moved aside (or found missing): an explicit hole.
    #[error(
        "seqs {first_seq}..={last_seq} are not in the log: a repair moved them aside (see {})",
        path.display()
    )]
    Quarantined {
        /// First seq of the hole.
        first_seq: u64,
        /// Last seq of the hole.
        last_seq: u64,
        /// The hole's marker file in the quarantine directory.
        path: PathBuf,
    },
    /// [`Log::accept_holes`] named a seq that no explicit hole of the log holds.
    #[error("seq {seq} of the log in {} is not in a hole a repair recorded: {reason}", dir.display())]
    NotAHole {
        /// The log's directory.
        dir: PathBuf,
        /// The seq.
        seq: u64,
        /// The holes the log has.
        reason: String,
    },
    /// [`Log::start_at`] on a log that holds records.
    #[error(
        "the log in {} holds records up to seq {last_seq}; only an empty log can start at a new seq",
        dir.display()
    )]
    NotEmpty {
        /// The log's directory.
        dir: PathBuf,
        /// Its last seq.
        last_seq: u64,
    },
    /// [`Log::start_at`] with a seq below the next one the log would assign (seqs never go
    /// back).
    #[error("cannot start the log at seq {seq}: its next seq is already {next_seq}")]
    InvalidStart {
        /// The requested seq.
        seq: u64,
        /// The log's next seq.
        next_seq: u64,
    },
    /// The log path exists and is not a directory.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The path given to [`Log::open`].
        path: PathBuf,
    },
}

/// The failure that poisoned a log ([`Error::Poisoned`]): the first failed write or fsync, as it
/// was reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoisonCause {
    /// The kind of that I/O error (for example [`io::ErrorKind::StorageFull`] for a full
    /// disk); [`io::ErrorKind::Other`] when the failure was not an I/O error.
    pub kind: io::ErrorKind,
    /// The failure's message, naming the file and the operating system's error.
    pub message: String,
}

impl PoisonCause {
    /// The cause recorded for `e`.
    pub(crate) fn of(e: &Error) -> PoisonCause {
        let kind = match e {
            Error::Io { source, .. } => source.kind(),
            Error::Poisoned { cause, .. } => cause.kind,
            _ => io::ErrorKind::Other,
        };
        PoisonCause {
            kind,
            message: match e {
                Error::Poisoned { cause, .. } => cause.message.clone(),
                other => other.to_string(),
            },
        }
    }
}

impl Error {
    pub(crate) fn io(path: &Path, source: io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
