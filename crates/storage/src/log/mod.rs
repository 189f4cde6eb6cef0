//! The [`Log`]: the public facade and the state its concept modules share.
//!
//! - [`open`]: locking the directory and building the log from what recovery found;
//! - [`append`]: appends, rolls and the index files of closed segments;
//! - [`age`]: the active segment's age and the rolls it drives;
//! - [`sync`]: group commit, poisoning and the background flusher;
//! - [`read`]: reads, the descriptor cache of closed segments and timestamp lookups;
//! - [`retention`]: dropping whole old segments;
//! - [`stats`]: the counters behind [`Log::stats`].

mod age;
mod append;
mod clean;
mod holes;
mod lock;
mod open;
mod prealloc;
pub use prealloc::PREALLOCATE_STEP;
mod raw;
mod read;
mod retention;
mod segment_age;
mod start;
mod stats;
mod sync;

use std::fs::File;
use std::io;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use krabka_protocol::Message;
use parking_lot::{Condvar, Mutex, RwLock};

use self::append::Appender;
pub use self::lock::create_and_lock;
use self::read::FdCache;
use self::stats::Counters;
pub use self::stats::{FsyncObserver, LogStats};
use self::sync::{Flusher, SyncState};
use crate::bufs::ReadBufs;
use crate::fault::FaultInjector;
use crate::layout::{LazyIndex, Seg, SegFile};
use crate::{Error, Hole, Options, Record, RecoveryReport, SegmentInfo, SyncPolicy};

/// What readers see: the segments (and holes), oldest first, the active one last.
#[derive(Debug)]
struct State {
    segs: Vec<Seg>,
}

impl State {
    fn active(&self) -> Option<&Seg> {
        self.segs.last()
    }

    fn last_seq(&self) -> u64 {
        self.active().map_or(0, |s| s.last_seq)
    }

    fn first_seq(&self) -> u64 {
        if self.last_seq() == 0 {
            0
        } else {
            self.segs.first().map_or(0, |s| s.base_seq)
        }
    }

    fn bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.size + s.index_bytes).sum()
    }

    /// The real segments (holes left out) as [`Log::segments`] lists them.
    fn segments(&self) -> Vec<SegmentInfo> {
        let n = self.segs.len();
        self.segs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.hole.is_none())
            .map(|(i, s)| SegmentInfo {
                base_seq: s.base_seq,
                last_seq: s.last_seq,
                max_timestamp: s.max_timestamp,
                size: s.size,
                log_path: s.file.log_path.clone(),
                index_path: s.file.index_path.clone(),
                time_index_path: s.file.time_index_path.clone(),
                active: i + 1 == n,
            })
            .collect()
    }

    /// The explicit holes (not marked accepted).
    fn holes(&self) -> Vec<Hole> {
        self.segs
            .iter()
            .filter_map(|s| {
                s.hole
                    .as_ref()
                    .map(|p| Hole::new(s.base_seq, s.last_seq, p.clone()))
            })
            .collect()
    }
}

/// An append-only log of [`Message`]s stored in segment files in one directory.
///
/// `Log` is `Send + Sync`: share it in an `Arc`. Appends are serialized by an internal lock;
/// fsyncs happen outside it (so concurrent `EveryAppend` appenders share them), and readers take
/// only a short-lived lock on the published state, so they never wait on an fsync.
///
/// Under [`SyncPolicy::Interval`] the `Log` owns one background thread (named
/// `krabka-flusher`) that syncs an idle tail; [`Log::close`] and dropping the `Log` stop and
/// join it. No other policy starts a thread.
///
/// Records become visible to readers as soon as they are written to the file, which may be
/// before they are synced.
///
/// A `Log` holds an exclusive lock on the lock file `.lock` in its directory
/// ([`LOCK_FILE_NAME`](crate::LOCK_FILE_NAME)) from [`Log::open`] until it is closed or
/// dropped, so a second `Log` on the same directory, in this process or another, fails with
/// [`Error::Locked`] instead of interleaving writes with the first.
///
/// File descriptors: the active segment's file is always open; closed segments' files are
/// opened when read and kept in a cache of at most [`Options::max_open_segments`].
#[derive(Debug)]
pub struct Log {
    inner: Arc<Inner>,
    /// The background flusher of [`SyncPolicy::Interval`]; `None` under other policies and
    /// once stopped.
    flusher: Option<Flusher>,
}

/// Everything of a [`Log`] but its flusher thread, shared with that thread.
#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    opts: Options,
    /// The locked lock file; the lock is released when it is closed (with the `Log`).
    _lock: File,
    /// Read descriptors of closed segments.
    fds: FdCache,
    /// Closed segments rolled without an fsync (under [`SyncPolicy::Never`]) whose `.log` and
    /// index files the next [`Log::sync`] must fsync.
    unsynced_closed: Mutex<Vec<Arc<SegFile>>>,
    state: RwLock<State>,
    appender: Mutex<Appender>,
    sync_state: Mutex<SyncState>,
    sync_done: Condvar,
    /// Wakes a gathering sync leader when another caller of `sync_through` arrives.
    sync_arrived: Condvar,
    /// Wakes the flusher thread (on the first unsynced append after a sync, and to stop it).
    flush_wake: Condvar,
    poisoned: AtomicBool,
    /// The failure that set `poisoned` (the first one), shown by every later refusal.
    poison_cause: std::sync::OnceLock<crate::PoisonCause>,
    /// Appenders between entering `append_batch` and publishing their records: a sync leader
    /// gives them a moment to finish so that its fsync covers their records too. Not counted
    /// under `SyncPolicy::Never`, where no append waits for an fsync.
    writers: AtomicUsize,
    report: RecoveryReport,
    /// Read buffers reused once the records sharing them are dropped.
    bufs: ReadBufs,
    /// The I/O seam: every write, fsync and segment creation after open asks it first.
    faults: FaultInjector,
    /// What [`Log::stats`] reports.
    counters: Counters,
    /// The holes the user accepted ([`Log::accept_holes`]), as on disk.
    accepted: Mutex<Vec<crate::AcceptedHole>>,
}

/// The error for an internal invariant that does not hold: the log always has an active
/// segment.
fn no_active_segment(dir: &Path) -> Error {
    Error::io(dir, io::Error::other("the log has no active segment"))
}

impl Inner {
    fn first_seq(&self) -> u64 {
        self.state.read().first_seq()
    }

    fn last_seq(&self) -> u64 {
        self.state.read().last_seq()
    }

    fn next_seq(&self) -> u64 {
        self.state.read().active().map_or(1, |a| a.last_seq + 1)
    }
}

impl Log {
    /// Opens the log in `dir`, creating the directory and an empty log if needed.
    ///
    /// Recovery: closed segments are loaded from their index files (a segment whose index is
    /// missing or inconsistent is scanned and its index rebuilt); the active segment is scanned
    /// (unless the last [`Log::close`] left it exactly as it is now: see
    /// [`CLEAN_SHUTDOWN_FILE_NAME`](crate::CLEAN_SHUTDOWN_FILE_NAME)), and the first batch with a
    /// bad length, CRC or seq and everything after it is truncated and synced. What was repaired is in [`Log::recovery_report`] and logged with
    /// `tracing::warn!`.
    ///
    /// Open first takes an exclusive lock on `dir/.lock` (creating the file), held until the
    /// `Log` is closed or dropped; the lock file is not a segment file and is not reported as a
    /// stray file.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`], [`Error::NotADirectory`] when `dir` is a file,
    /// [`Error::Locked`] when another `Log` (in this or another process) has `dir` open,
    /// [`Error::Io`], and [`Error::Corrupt`] when the segments' seqs have a gap.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Log, Error> {
        let inner = Arc::new(Inner::open(dir, opts)?);
        let flusher = match inner.opts.sync {
            SyncPolicy::Interval(d) => Some(Flusher::start(&inner, d)?),
            _ => None,
        };
        Ok(Log { inner, flusher })
    }

    /// What [`Log::open`] found and repaired.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.report
    }

    /// A snapshot of what this handle did since it was opened (appends, fsyncs, rolls,
    /// retention deletes) and of what open's recovery found. Cheap: a few atomic loads.
    pub fn stats(&self) -> LogStats {
        self.inner.counters.snapshot(&self.inner.report)
    }

    /// Installs a function told the duration of every fsync of a segment file this handle
    /// makes (the fsyncs [`LogStats::fsyncs`] counts), e.g. to record a latency histogram.
    /// One observer per log: returns `false`, and drops `observer`, when one is installed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use krabka_storage::{Log, Options, SyncPolicy};
    /// # let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options { sync: SyncPolicy::EveryAppend, ..Options::default() })?;
    /// let seen = Arc::new(AtomicU64::new(0));
    /// let counter = seen.clone();
    /// assert!(log.set_fsync_observer(Box::new(move |_took| {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// })));
    /// log.append(&krabka_protocol::Message::new("a"))?;
    /// assert_eq!(seen.load(Ordering::Relaxed), log.stats().fsyncs);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_fsync_observer(&self, observer: FsyncObserver) -> bool {
        self.inner.counters.observe_fsyncs(observer)
    }

    /// The directory holding the log.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The options in effect (with defaults resolved).
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Appends one message and returns its seq.
    ///
    /// # Errors
    /// [`Error::MessageTooLarge`], [`Error::Poisoned`], [`Error::Io`].
    pub fn append(&self, msg: &Message) -> Result<u64, Error> {
        self.inner
            .append_batch(std::slice::from_ref(msg))
            .map(|r| *r.start())
    }

    /// Appends messages with contiguous seqs, writing the batch with one write call per segment
    /// it lands in, and returns their seqs. An empty batch returns an empty range
    /// (`next..=next - 1`). The whole batch is checked against `max_message_bytes` first, so a
    /// too-large message rejects the batch without writing any of it.
    ///
    /// # Errors
    /// [`Error::MessageTooLarge`], [`Error::Poisoned`], [`Error::Io`]. A failed write or fsync
    /// poisons the log. A failed roll (creating the next segment) does not: the log stays as
    /// it was and the next append retries. When a batch spans a roll and the roll fails, the
    /// part written before it stays in the log (readable, but not acknowledged).
    pub fn append_batch(&self, msgs: &[Message]) -> Result<RangeInclusive<u64>, Error> {
        self.inner.append_batch(msgs)
    }

    /// Appends one Kafka v2 record batch as a producer sent it (the records of a produce
    /// request, say) without decoding and encoding its records again, and returns its seqs.
    ///
    /// The batch is checked first: its length (exactly one batch), magic, CRC-32C, a record
    /// count of at least one that agrees with its records and its `lastOffsetDelta`, every
    /// record's lengths, offset deltas `0..n-1`, the create-time `maxTimestamp`, a codec this
    /// build reads (decompressed within [`segment::MAX_UNCOMPRESSED_BATCH`](crate::segment::MAX_UNCOMPRESSED_BATCH)).
    /// Then it is stored byte for byte, but for its `baseOffset`, set to the log's next seq,
    /// and its `partitionLeaderEpoch`, set to the log's
    /// ([`set_partition_leader_epoch`](Self::set_partition_leader_epoch), -1 by default):
    /// both lie outside the CRC, so it stays valid. Its compression, producer id, epoch and sequence, attributes
    /// (transactional and control batches included) and timestamps are kept. A batch larger
    /// than `max_message_bytes` is [`Error::MessageTooLarge`].
    ///
    /// ```
    /// use krabka_protocol::batch::{encode_batch, BatchSpec, RecordSpec};
    /// use krabka_storage::{Log, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options::default())?;
    /// log.append(&krabka_protocol::Message::new("first"))?;
    /// // A producer's batch: base offset 0, a tombstone among its records.
    /// let batch = encode_batch(
    ///     &BatchSpec::new(0),
    ///     &[RecordSpec::new(10, "a").with_key("k"), RecordSpec::tombstone(11).with_key("k")],
    /// )?;
    /// assert_eq!(log.append_raw_batch(&batch)?, 2..=3);
    /// let back = log.read_batches(2, 1 << 20)?;
    /// let mut stored = batch.to_vec();
    /// stored[7] = 2; // the base offset the log wrote: 2
    /// assert_eq!(back.bytes()[..], stored[..]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidBatch`] naming the field and byte (nothing is appended);
    /// [`Error::MessageTooLarge`], [`Error::SeqOutOfRange`], [`Error::Poisoned`],
    /// [`Error::Io`] as [`append_batch`](Self::append_batch).
    pub fn append_raw_batch(&self, batch: &[u8]) -> Result<RangeInclusive<u64>, Error> {
        self.inner.append_raw_batch(batch)
    }

    /// Whole record batches from the one holding `from_seq`, as the segment file holds them,
    /// up to `max_bytes` of them (at least one batch, however long, as a Kafka fetch does),
    /// from one segment: ready to write to a socket, or to read record by record with
    /// [`Batches::records`](crate::segment::Batches::records). Each batch's length, magic,
    /// CRC-32C and seq are checked; the batches before a bad one are returned, and a read
    /// starting at it fails. Empty at the end of the log (`from_seq == last_seq() + 1`);
    /// continue at [`Batches::next_seq`](crate::segment::Batches::next_seq).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] as [`read`](Self::read); [`Error::Corrupt`] naming the file and
    /// byte; [`Error::Quarantined`]; [`Error::Io`].
    pub fn read_batches(
        &self,
        from_seq: u64,
        max_bytes: usize,
    ) -> Result<crate::segment::Batches, Error> {
        self.inner.read_batches(from_seq, max_bytes)
    }

    /// Sets the `partitionLeaderEpoch` every batch appended from now on carries (Kafka's
    /// broker stamps its leader epoch the same way; the tiered log stamps its own). A log
    /// starts at -1 (no epoch) at every open: the epoch is not recovered from the files.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for an epoch below -1.
    pub fn set_partition_leader_epoch(&self, epoch: i32) -> Result<(), Error> {
        if epoch < -1 {
            return Err(Error::InvalidOptions {
                field: "partition_leader_epoch",
                reason: format!("must be -1 or more, got {epoch}"),
            });
        }
        self.inner.appender.lock().leader_epoch = epoch;
        Ok(())
    }

    /// The fault injector of this log (tests of failure handling only).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn faults(&self) -> &crate::fault::FaultInjector {
        &self.inner.faults
    }

    /// The highest seq known to be on stable storage (tests of the sync policies only).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn synced_seq(&self) -> u64 {
        self.inner.sync_state.lock().synced_seq
    }

    /// Closes the active segment now (writing its `.index` and `.timeindex`) so it can be
    /// tiered; the next append goes to a new segment. A no-op when the active segment is empty.
    ///
    /// # Errors
    /// [`Error::Poisoned`], [`Error::Io`].
    pub fn roll(&self) -> Result<(), Error> {
        self.inner.roll()
    }

    /// Up to `max` records starting at `from_seq`.
    ///
    /// `from_seq == last_seq() + 1` returns an empty `Vec` (a caught-up reader).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when `from_seq < first_seq()` or `from_seq > last_seq() + 1`;
    /// [`Error::Corrupt`] when stored bytes are invalid; [`Error::Io`].
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        self.inner.read(from_seq, max)
    }

    /// Seq of the first record (0 for a log that never held a record). After retention it is
    /// the base seq of the oldest kept segment.
    pub fn first_seq(&self) -> u64 {
        self.inner.first_seq()
    }

    /// Seq of the last record (0 for a log that never held a record).
    pub fn last_seq(&self) -> u64 {
        self.inner.last_seq()
    }

    /// The seq the next append gets: `last_seq() + 1`, or the seq an empty log was started at
    /// with [`Log::start_at`].
    pub fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }

    /// The explicit holes in the log's seqs, by first seq, each with its marker file in the
    /// quarantine directory and its acceptance ([`Log::accept_holes`]): seqs a repair
    /// ([`RecoveryMode::Repair`](crate::RecoveryMode::Repair)) moved aside or found missing.
    /// Reads into one fail with [`Error::Quarantined`]. Empty unless the log was repaired.
    pub fn holes(&self) -> Vec<Hole> {
        let holes = self.inner.state.read().holes();
        crate::layout::hole::with_acceptance(holes, &self.inner.accepted.lock())
    }

    /// [`Log::holes`] as `(seqs, marker file)` pairs, without their acceptance.
    pub fn quarantined(&self) -> Vec<(RangeInclusive<u64>, PathBuf)> {
        self.inner
            .state
            .read()
            .holes()
            .into_iter()
            .map(|h| (h.seqs(), h.marker))
            .collect()
    }

    /// Makes `seq` the seq of the next append of a log that holds no records, like Kafka's
    /// log start offset after a full truncation: the tiered layer uses it when the local log
    /// was lost but the remote tier holds seqs up to `seq - 1`, so new records never reuse
    /// them. The empty segment file is replaced by `seq`'s and the directory synced; a crash in
    /// between leaves an empty log that starts at 1.
    ///
    /// ```
    /// use krabka_protocol::Message;
    /// use krabka_storage::{Log, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options::default())?;
    /// log.start_at(301)?;
    /// assert_eq!(log.append(&Message::new("x"))?, 301);
    /// assert!(log.start_at(400).is_err()); // it holds a record now
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotEmpty`] when the log holds a record; [`Error::InvalidStart`] when `seq` is
    /// below [`Log::next_seq`] (a no-op when equal); [`Error::Poisoned`]; [`Error::Io`].
    pub fn start_at(&self, seq: u64) -> Result<(), Error> {
        self.inner.start_at(seq)
    }

    /// Total on-disk size of the log's files (`.log`, `.index` and `.timeindex`), in bytes.
    pub fn bytes(&self) -> u64 {
        self.inner.state.read().bytes()
    }

    /// The segments, ordered by base seq; the last one is the active segment.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.inner.state.read().segments()
    }

    /// Forces every appended record to stable storage (whatever the [`SyncPolicy`]): the active
    /// segment, and under [`SyncPolicy::Never`] also the closed segments (and their index files)
    /// rolled since the last sync. When it returns `Ok`, every record appended before the call
    /// survives a power loss.
    ///
    /// # Errors
    /// [`Error::Poisoned`]; [`Error::Io`] when the fsync fails (the log is then poisoned).
    pub fn sync(&self) -> Result<(), Error> {
        self.inner.sync()
    }

    /// Syncs every appended record to stable storage, whatever the [`SyncPolicy`] (also
    /// [`SyncPolicy::Never`]: closed segments not yet synced are synced too), records that the
    /// log was shut down cleanly ([`CLEAN_SHUTDOWN_FILE_NAME`](crate::CLEAN_SHUTDOWN_FILE_NAME):
    /// the next open does not scan the active segment), then closes the log and releases its
    /// directory lock. Dropping a `Log` instead releases the lock without syncing, and the next
    /// open scans the active segment.
    ///
    /// # Errors
    /// As [`Log::sync`]; the log is closed either way.
    pub fn close(mut self) -> Result<(), Error> {
        self.stop_flusher();
        {
            // The active segment's preallocated space goes before the sync, so that the
            // synced file (and the clean-shutdown marker) holds its batches only.
            let mut ap = self.inner.appender.lock();
            if self.inner.check_poisoned().is_ok() {
                self.inner.trim_active(&mut ap)?;
            }
        }
        self.inner.sync()?;
        let ap = self.inner.appender.lock();
        self.inner.check_poisoned()?;
        let last = self.inner.next_seq() - 1;
        self.inner.write_recovery_point(last)?;
        self.inner.write_clean_shutdown(&ap)
    }

    /// Drops whole segments whose records are all below `keep_from`. A segment partly below
    /// `keep_from` stays, and the active segment is never dropped. Returns the bytes freed.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be removed.
    pub fn delete_before(&self, keep_from: u64) -> Result<u64, Error> {
        self.inner.delete_before(keep_from)
    }

    /// Drops the oldest whole segments until [`Log::bytes`] `<= target`, never the active one;
    /// returns the bytes freed (the log may stay above `target`).
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be removed.
    pub fn trim_over_bytes(&self, target: u64) -> Result<u64, Error> {
        self.inner.trim_over_bytes(target)
    }

    /// Drops the oldest whole closed segments whose max timestamp is `< ts` (stopping at the
    /// first that is not); returns the bytes freed.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be removed.
    pub fn delete_older_than(&self, ts: i64) -> Result<u64, Error> {
        self.inner.delete_older_than(ts)
    }

    /// The seq of the first record whose timestamp is `>= ts`, found through the time indexes;
    /// `None` when no record has such a timestamp.
    ///
    /// # Errors
    /// [`Error::Corrupt`], [`Error::Io`] from reading the segment.
    pub fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, Error> {
        self.inner.seq_for_timestamp(ts)
    }
}

impl Drop for Log {
    /// Stops and joins the flusher thread; unlike [`Log::close`], does not sync.
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_is_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<Log>();
    }
}
