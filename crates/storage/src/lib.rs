//! Crash-safe append-only segment log with sparse offset and time indexes, recovery and retention.
//!
//! A [`Log`] is a directory of segments, each named by the seq of its first record
//! (`00000000000000000001.log`, with `.index` and `.timeindex` written when it is closed).
//! Records get contiguous seqs starting at 1. The newest segment is the *active* one; it rolls
//! before an append would take it past [`Options::max_bytes`], or (with [`Options::roll_after`])
//! at an append that finds its first record older than that; [`Log::roll_if_older`] rolls a quiet
//! log by age. Retention drops whole old
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
//! The [`view`] module reads a log directory without opening it (no lock, no recovery, nothing
//! changed), following a log another process writes.

mod bufs;
mod error;
#[doc(hidden)]
pub mod fault;
pub mod fsutil;
pub mod index;
pub mod kvfile;
mod layout;
pub mod lockholder;
mod log;
mod recovery;
pub mod segment;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod view;

use std::path::PathBuf;
use std::time::Duration;

use krabka_protocol::Message;

pub use crate::error::{Error, PoisonCause};
pub use crate::layout::accepted::{ACCEPTED_HOLES_FILE_NAME, AcceptedHole, read_accepted_holes};
pub use crate::layout::hole::{Hole, holes_cover};
pub use crate::layout::recovery_point::read_recovery_point;
pub use crate::log::{FsyncObserver, Log, LogStats, PREALLOCATE_STEP, create_and_lock};
pub use crate::recovery::{
    KeptRun, QuarantinedPiece, RecoveryReport, RepairStep, SegmentRepair, TruncatedTail,
    plan_segment_repair,
};
pub use krabka_protocol::batch::Compression;

/// Default [`Options::max_bytes`]: 64 MiB per segment.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default [`Options::index_interval_bytes`].
pub const DEFAULT_INDEX_INTERVAL_BYTES: u64 = 4096;
/// Default [`Options::max_message_bytes`]: 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 16 << 20;
/// Default [`Options::max_open_segments`].
pub const DEFAULT_MAX_OPEN_SEGMENTS: usize = 128;
/// Smallest [`Options::roll_after`]: 10 ms (a shorter bound would roll at nearly every append).
pub const MIN_ROLL_AFTER: Duration = Duration::from_millis(10);
/// Largest [`Options::roll_after`]: 100 years (365-day years), far below what time arithmetic
/// on an `Instant` or on milliseconds since the epoch can overflow at.
pub const MAX_ROLL_AFTER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
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
    /// quarantine directory) when no valid batch follows the damage: that is what a torn write
    /// or a power loss leaves, and it holds no record anyone could read. Any other damage — a
    /// bad batch followed by valid ones, a damaged or missing closed segment, a gap or overlap
    /// between segment files — fails the open with [`Error::Damaged`], [`Error::SeqGap`] or
    /// [`Error::SeqOverlap`], naming the file, the byte and the seqs at stake.
    #[default]
    TolerateTornTail,
    /// Any damage fails the open, a torn tail included ([`Error::TornTail`]).
    Strict,
    /// Never fails for damage: the damaged bytes of every segment are moved aside into the
    /// quarantine directory and every intact batch after them is kept (each run of them in a
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
    /// point read then reads just its record's batch (at least 64 bytes; the last record of a
    /// segment, which has no next entry, reads as with a sparse index), 1.1–1.4× the point
    /// reads per second of the default at 100 B–1 KiB records (docs/benchmarks.md), at the
    /// cost of 32 bytes of memory and of index files per record (an offset and a time entry)
    /// against 32 per 4 KiB.
    pub index_interval_bytes: u64,
    /// When records are synced to stable storage. Default: [`SyncPolicy::EveryAppend`].
    pub sync: SyncPolicy,
    /// Largest message accepted by `append`, measured as its batch of one (the 61-byte batch
    /// header and the record, uncompressed); larger ones are [`Error::MessageTooLarge`].
    /// Default: 16 MiB ([`DEFAULT_MAX_MESSAGE_BYTES`]). Minimum: 68 ([`segment::MIN_BATCH_LEN`],
    /// the smallest batch); maximum: 64 MiB ([`segment::MAX_UNCOMPRESSED_BATCH`], the most a
    /// reader decompresses from one batch).
    pub max_message_bytes: u64,
    /// Most read file descriptors of closed segments kept open at once (a small cache): reads
    /// of a closed segment whose file is not open open it again, closing one not used lately
    /// (a clock, or second-chance, choice: one not read since the clock's hand last passed
    /// it). The active segment's file is always open, in addition. A read in
    /// progress keeps its descriptor until it finishes, so briefly there may be one more per
    /// concurrent reader. Default: 128 ([`DEFAULT_MAX_OPEN_SEGMENTS`]). Minimum: 1 (`0` is
    /// [`Error::InvalidOptions`]).
    pub max_open_segments: usize,
    /// What open does with damaged or missing data. Default:
    /// [`RecoveryMode::TolerateTornTail`].
    pub recovery: RecoveryMode,
    /// The codec appends compress each batch with (Kafka's attributes bits 0-2). Default:
    /// [`Compression::None`]. [`Compression::Zstd`] and [`Compression::Lz4`] need the crate's
    /// `zstd` and `lz4` features; a codec this build lacks is [`Error::InvalidOptions`].
    /// Reading needs no option: every batch says its codec, and one written with any of
    /// Kafka's four reads when its feature is on. A point read decompresses one batch.
    pub compression: Compression,
    /// The segment age bound, like Kafka's `segment.ms`: an append that finds the active
    /// segment non-empty and its first record older than this rolls it first, so no record stays
    /// in the active (not yet tierable) segment much longer than this while appends go on
    /// ([`Log::roll_if_older`] bounds it on a quiet log). Default: `None` (segments roll by size
    /// only). Minimum: 10 ms ([`MIN_ROLL_AFTER`]); maximum: 100 years ([`MAX_ROLL_AFTER`]);
    /// outside that is [`Error::InvalidOptions`].
    ///
    /// The age of a segment this `Log` wrote into counts from the (monotonic) time of its first
    /// append. For an active segment found non-empty at open it counts from the earliest of
    /// the evidence the file gives, so that a restart can roll early but never late: its
    /// creation (birth) time where the filesystem records one, the largest timestamp of its
    /// first batch when that is not negative, and its modification time; evidence later than
    /// the wall clock is left out (when nothing is left the age counts from the first look,
    /// at the first append or age query after the open). A first batch stamped long ago (Kafka's
    /// `log.roll.ms` counts from it too) makes the first append after the open roll. The append
    /// path checks the bound with one read of the monotonic clock (no system call).
    pub roll_after: Option<Duration>,
    /// Preallocate the active segment's `.log` ahead of its batches (`fallocate`),
    /// [`PREALLOCATE_STEP`] at a time and never past [`max_bytes`](Self::max_bytes) unless one
    /// batch needs it, as Kafka's `file.preallocate` does with the whole segment: an append then
    /// writes into space the file already has, so a synced append's `fdatasync` commits a change
    /// of the file's size only once per step (ext4, 2026-12-04, whole-segment preallocation: 1.1–1.4× the synced appends per second of a growing file with one
    /// thread, 1.1–1.25× with four, docs/benchmarks.md). Default: `false`: a program other than this
    /// crate reading a live segment file would meet the preallocated zeros after its batches
    /// (the remote metadata manager checks its own generations that way).
    ///
    /// The true end of the segment is what the log holds in memory, never the file's size:
    /// a roll and [`Log::close`] truncate the file to its last batch before it is synced and
    /// indexed (so a closed segment's file, the one tiering copies, holds only its records),
    /// and after a crash recovery takes the zeros after the last valid batch of the newest
    /// segment for the preallocated tail they are, not for damage (a run of zeros followed by
    /// anything else, or in a closed segment, is damage as before). Where the filesystem
    /// cannot preallocate, the file grows with each append as without this option.
    ///
    /// A [`view::LogReader`] following the live log, [`Log::segments`] (`SegmentInfo::size`),
    /// [`Log::bytes`], [`LogView::verify`](view::LogView::verify) and
    /// [`segment::DumpFile`] all take the segment's true end, never its file's length. The
    /// cost: each log holds at most [`PREALLOCATE_STEP`] (4 MiB) of unused disk for its
    /// active segment, and its file's size changes once per step; `false` gives files that
    /// grow at every append.
    pub preallocate: bool,
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
            compression: Compression::None,
            roll_after: None,
            preallocate: fault::preallocate_by_default(),
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
        let (min, max) = (
            segment::MIN_BATCH_LEN as u64,
            segment::MAX_UNCOMPRESSED_BATCH as u64,
        );
        if !(min..=max).contains(&self.max_message_bytes) {
            return Err(Error::InvalidOptions {
                field: "max_message_bytes",
                reason: format!("must be in {min}..={max}, got {}", self.max_message_bytes),
            });
        }
        if !self.compression.is_enabled() {
            return Err(Error::InvalidOptions {
                field: "compression",
                reason: format!(
                    "{} is not built in (enable the crate's `{}` feature)",
                    self.compression,
                    self.compression.name()
                ),
            });
        }
        if self.max_open_segments == 0 {
            return Err(Error::InvalidOptions {
                field: "max_open_segments",
                reason: "must be at least 1".into(),
            });
        }
        if let Some(d) = self.roll_after
            && !(MIN_ROLL_AFTER..=MAX_ROLL_AFTER).contains(&d)
        {
            return Err(Error::InvalidOptions {
                field: "roll_after",
                reason: format!(
                    "must be in {MIN_ROLL_AFTER:?}..={} days, got {d:?}",
                    MAX_ROLL_AFTER.as_secs() / 86_400
                ),
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
