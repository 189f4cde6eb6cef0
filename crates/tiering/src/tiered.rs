//! [`TieredLog`]: the local log, the remote tier and the policy joining them.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use krabka_protocol::Message;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{
    CustomMetadata, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState, RemoteStorageManager, TopicIdPartition,
    layout, now_ms,
};
use krabka_storage::{Log, Options, Record, SegmentInfo};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::cache::ByteLru;
use crate::checkpoint;
use crate::config::{TieringConfig, validate_log_options};
use crate::error::Error;
use crate::policy::{self, Continuity, LocalLimits, LocalSegment, RemoteSegment, RetentionLimits};
use crate::stats::{Counters, TieringReport, TieringStats, bump};
use crate::verify::verify_for_copy;

/// `commit_seq` value meaning "no bound set: everything appended is committed".
const NO_COMMIT_BOUND: u64 = u64::MAX;
/// `blocked_at` value meaning "no damaged segment or hole blocks copying".
const NOT_BLOCKED: u64 = u64::MAX;

/// One log across the local and the remote tier.
///
/// Writes go to the local [`Log`]; tiering rounds ([`run_once`](Self::run_once) or the
/// background task of [`spawn`](Self::spawn)) copy closed segments to the remote tier, delete
/// local segments once safely remote, and apply whole-log retention. [`read`](Self::read) spans
/// both tiers transparently.
pub struct TieredLog {
    pub(crate) log: Log,
    pub(crate) rsm: Arc<dyn RemoteStorageManager>,
    pub(crate) rlmm: Arc<dyn RemoteLogMetadataManager>,
    pub(crate) tp: TopicIdPartition,
    pub(crate) config: TieringConfig,
    commit_seq: AtomicU64,
    /// Whole-log retention watermark: records below it are gone (or going) from both tiers.
    /// Mirrors the checkpoint file (see [`checkpoint`]); raised only after the file is.
    log_start: AtomicU64,
    /// Serializes checkpoint writes.
    log_start_write: Mutex<()>,
    /// Leader epoch history: `(epoch, start seq)`, epochs and start seqs increasing.
    epochs: Mutex<Vec<(i32, u64)>>,
    pub(crate) cache: ByteLru,
    pub(crate) counters: Counters,
    round_running: AtomicBool,
    /// First seq of the damaged local segment or uncovered hole the latest round stopped
    /// copying at ([`NOT_BLOCKED`]: none). Whole-log and local retention never pass it.
    blocked_at: AtomicU64,
    /// Attempts whose copy call outlived its deadline and is still running: not stale yet.
    pub(crate) abandoned: Mutex<HashSet<Uuid>>,
    pub(crate) abandoned_tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for TieredLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredLog")
            .field("dir", &self.log.dir())
            .field("topic_id_partition", &self.tp)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Clears the round flag when a round ends, however it ends.
pub(crate) struct RoundGuard<'a>(&'a AtomicBool);

impl Drop for RoundGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl TieredLog {
    /// Joins an open local log with a remote tier.
    ///
    /// The whole-log retention point is read from the checkpoint file in the log's directory
    /// ([`LOG_START_FILE`](crate::LOG_START_FILE)), so `first_seq()` never moves backwards
    /// across restarts. It is checked against the tiers before anything else uses it: local
    /// retention drops local segments below it whether or not they were copied.
    ///
    /// The local log must continue the seqs the metadata records as remote, so that no seq is
    /// used twice (see [`policy::continuity`]): a local log holding no record (a wiped or new
    /// directory) is started after the remote end (`Log::start_at`, like Kafka's log start
    /// offset); a local log that ends before the remote end, starts after it with a gap, or
    /// whose segments disagree with the remote ones is refused.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a config below a minimum, a topic name that could not
    /// name remote objects, or log options allowing segments over
    /// [`MAX_SEGMENT_BYTES`](crate::MAX_SEGMENT_BYTES); [`Error::Checkpoint`] when the
    /// retention checkpoint cannot be read, or records a point whole-log retention cannot have
    /// written (past the remote end + 1 while anything is remote, past the local first seq
    /// when nothing is, past the local next seq), naming the file and both seqs — nothing is
    /// changed then; [`Error::Metadata`] when the remote segments
    /// cannot be listed; [`Error::LocalLogMismatch`] when the local log does not continue the
    /// remote tier; [`Error::Storage`] when starting an empty local log fails.
    pub fn new(
        log: Log,
        rsm: Arc<dyn RemoteStorageManager>,
        rlmm: Arc<dyn RemoteLogMetadataManager>,
        topic_id_partition: TopicIdPartition,
        config: TieringConfig,
    ) -> Result<Self, Error> {
        validate_all(log.options(), &topic_id_partition, &config)?;
        let log_start = checkpoint::read(log.dir())?;
        validate_log_start(&log, rlmm.as_ref(), &topic_id_partition, log_start)?;
        let this = Self {
            epochs: Mutex::new(vec![(config.leader_epoch, 0)]),
            cache: ByteLru::new(config.cache_bytes),
            log,
            rsm,
            rlmm,
            tp: topic_id_partition,
            config,
            commit_seq: AtomicU64::new(NO_COMMIT_BOUND),
            log_start: AtomicU64::new(log_start),
            log_start_write: Mutex::new(()),
            counters: Counters::default(),
            round_running: AtomicBool::new(false),
            blocked_at: AtomicU64::new(NOT_BLOCKED),
            abandoned: Mutex::new(HashSet::new()),
            abandoned_tasks: Mutex::new(Vec::new()),
        };
        this.join_remote()?;
        Ok(this)
    }

    /// Makes sure the local log continues the remote tier (see [`new`](Self::new)).
    fn join_remote(&self) -> Result<(), Error> {
        let local: Vec<LocalSegment> = self.log.segments().iter().map(local_segment).collect();
        let holes: Vec<RangeInclusive<u64>> =
            self.log.quarantined().into_iter().map(|(r, _)| r).collect();
        let view = self.remote_view()?;
        let log_start = self.log_start.load(Ordering::Acquire);
        match policy::continuity(&local, &holes, self.log.next_seq(), &view, log_start) {
            Continuity::Consistent => Ok(()),
            Continuity::StartAt(seq) => {
                tracing::info!(partition = %self.tp, dir = %self.log.dir().display(), seq,
                    "the local log holds no record: it continues after the remote tier");
                self.log.start_at(seq).map_err(|e| {
                    Error::storage(format!("starting the empty local log at seq {seq}"), e)
                })
            }
            Continuity::Mismatch { kind, reason } => Err(Error::LocalLogMismatch {
                dir: self.log.dir().to_path_buf(),
                kind,
                reason,
            }),
        }
    }

    /// Opens (or creates) the local log in `dir` with `options` and joins it with a remote tier.
    ///
    /// Everything that can be checked without the local log (the tiering config, the topic
    /// name, the log options' segment size limit) is checked before anything is created.
    ///
    /// # Errors
    /// [`Error::Storage`] when the log cannot be opened; as [`new`](Self::new).
    pub fn open(
        dir: impl AsRef<Path>,
        options: Options,
        rsm: Arc<dyn RemoteStorageManager>,
        rlmm: Arc<dyn RemoteLogMetadataManager>,
        topic_id_partition: TopicIdPartition,
        config: TieringConfig,
    ) -> Result<Self, Error> {
        let dir = dir.as_ref();
        validate_all(&options, &topic_id_partition, &config)?;
        let log = Log::open(dir, options)
            .map_err(|e| Error::storage(format!("opening {}", dir.display()), e))?;
        Self::new(log, rsm, rlmm, topic_id_partition, config)
    }

    /// The local log (for its segments, options, recovery report...). Writing or deleting
    /// through it bypasses the tiering policy.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The partition this log stores.
    pub fn topic_id_partition(&self) -> &TopicIdPartition {
        &self.tp
    }

    /// The configuration.
    pub fn config(&self) -> &TieringConfig {
        &self.config
    }

    /// Appends one message; returns its seq.
    ///
    /// # Errors
    /// [`Error::Storage`] as `Log::append`.
    pub fn append(&self, msg: &Message) -> Result<u64, Error> {
        self.log
            .append(msg)
            .map_err(|e| Error::storage("appending", e))
    }

    /// Appends messages as one batch; returns their seqs.
    ///
    /// # Errors
    /// [`Error::Storage`] as `Log::append_batch`.
    pub fn append_batch(&self, msgs: &[Message]) -> Result<RangeInclusive<u64>, Error> {
        self.log
            .append_batch(msgs)
            .map_err(|e| Error::storage("appending a batch", e))
    }

    /// Forces every appended record to stable storage.
    ///
    /// # Errors
    /// [`Error::Storage`] as `Log::sync`.
    pub fn sync(&self) -> Result<(), Error> {
        self.log.sync().map_err(|e| Error::storage("syncing", e))
    }

    /// Seq of the last record (0 for a log that never held one).
    pub fn last_seq(&self) -> u64 {
        self.log.last_seq()
    }

    /// Seq of the first record still held locally.
    pub fn local_first_seq(&self) -> u64 {
        self.log.first_seq()
    }

    /// Seq of the earliest readable record in either tier: the first finished remote segment's
    /// start or the local first seq, whichever is smaller, never below what retention removed.
    ///
    /// # Errors
    /// [`Error::Metadata`] when the metadata manager cannot list segments.
    pub fn first_seq(&self) -> Result<u64, Error> {
        let view = self.remote_view()?;
        let local_first = self.log.first_seq();
        Ok(policy::first_readable_seq(
            &view,
            Some(local_first),
            self.log_start.load(Ordering::Acquire),
        )
        .unwrap_or(local_first))
    }

    /// Bounds copying: only segments wholly at or below `seq` are copied. Without a call,
    /// everything appended counts as committed.
    pub fn set_commit_seq(&self, seq: u64) {
        self.commit_seq.store(seq, Ordering::Release);
    }

    /// Records that leader epoch `epoch` starts at `start_seq` (Kafka's leader-epoch cache):
    /// each copied segment's metadata then carries every epoch overlapping its seqs
    /// (`{epoch: first seq of the segment in that epoch}`), and its uploaded leader-epoch
    /// checkpoint lists the same. Without a call, every segment gets
    /// `{leader_epoch: base seq}` ([`TieringConfig::leader_epoch`]).
    ///
    /// The history lives in memory: after reopening, supply it again before the next round
    /// copies newer segments. Setting the current epoch again is a no-op.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative epoch, an epoch lower than the latest one, or
    /// a start seq before the latest epoch's start.
    pub fn set_leader_epoch(&self, epoch: i32, start_seq: u64) -> Result<(), Error> {
        let mut epochs = self.epochs.lock();
        policy::push_leader_epoch(&mut epochs, epoch, start_seq).map_err(Error::InvalidArgument)
    }

    /// The leader epoch history: `(epoch, start seq)` pairs, oldest first (the first entry is
    /// [`TieringConfig::leader_epoch`] from seq 0 unless replaced).
    pub fn leader_epochs(&self) -> Vec<(i32, u64)> {
        self.epochs.lock().clone()
    }

    /// The current commit bound (`None`: everything appended).
    pub fn commit_seq(&self) -> Option<u64> {
        match self.commit_seq.load(Ordering::Acquire) {
            NO_COMMIT_BOUND => None,
            s => Some(s),
        }
    }

    /// Closes the local log (syncing it as its policy says), then drops this log's handle on
    /// the metadata manager: when it is the last one, the manager closes too (a
    /// `DurableRemoteLogMetadataManager` closes its log when dropped).
    ///
    /// # Errors
    /// [`Error::Storage`] as `Log::close`.
    pub fn close(self) -> Result<(), Error> {
        let Self { log, rlmm, .. } = self;
        let closed = log.close().map_err(|e| Error::storage("closing", e));
        drop(rlmm);
        closed
    }

    /// Counters and sizes. Copy lag and remote bytes are computed from the metadata manager
    /// now; when it cannot answer they read 0.
    pub fn stats(&self) -> TieringStats {
        let segs = self.log.segments();
        let view = self.remote_view().unwrap_or_default();
        let (lag_segments, lag_bytes) = segs
            .iter()
            .map(local_segment)
            .filter(|s| !s.active && !policy::is_safely_remote(s, &view))
            .fold((0, 0), |(n, b), s| (n + 1, b + s.size));
        let remote_bytes = view
            .iter()
            .filter(|r| r.state == RemoteLogSegmentState::CopySegmentFinished)
            .map(|r| r.size)
            .sum();
        TieringStats {
            copy_lag_segments: lag_segments,
            copy_lag_bytes: lag_bytes,
            segments_copied: self.counters.segments_copied.load(Ordering::Relaxed),
            bytes_copied: self.counters.bytes_copied.load(Ordering::Relaxed),
            copy_failures: self.counters.copy_failures.load(Ordering::Relaxed),
            requests: self.counters.requests(),
            cache_hits: self.cache.hits(),
            cache_misses: self.cache.misses(),
            cache_bytes: self.cache.bytes(),
            local_bytes: self.log.bytes(),
            remote_bytes,
            segments_refused: self.counters.segments_refused.load(Ordering::Relaxed),
            copy_blocked_at: match self.blocked_at.load(Ordering::Acquire) {
                NOT_BLOCKED => None,
                seq => Some(seq),
            },
        }
    }

    /// Up to `max` records from `from_seq`, from whichever tier holds them, in order: records
    /// below [`local_first_seq`](Self::local_first_seq) come from the remote tier, and a read
    /// continues across remote segments and into the local log.
    ///
    /// `from_seq` is checked exactly as `Log::read` checks it, over both tiers, whatever `max`
    /// (also 0): `from_seq == last_seq() + 1` returns an empty `Vec`. Every read is exact or an
    /// error: records decoded before a bad frame (local or remote) are returned first, as a
    /// short read, and a read starting at the bad frame returns the error. A local segment
    /// that fails (damaged, or a hole left by a repair) is read from its finished remote copy
    /// when there is one.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when `from_seq < first_seq()` or `from_seq > last_seq() + 1`;
    /// [`Error::Remote`] / [`Error::Metadata`] when the remote tier fails;
    /// [`Error::CorruptRemote`] / [`Error::Storage`] for bad bytes.
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        let last = self.log.last_seq();
        // Only failures list the remote segments (for the error's first seq): a read never
        // clones every segment's metadata.
        if from_seq > last.saturating_add(1) || from_seq < self.log_start.load(Ordering::Acquire) {
            return Err(self.out_of_range(from_seq, last));
        }
        if max == 0 {
            return self.check_readable(from_seq, last).map(|()| Vec::new());
        }
        let mut out: Vec<Record> = Vec::new();
        let mut seq = from_seq;
        // Retention may move either tier's start while we read; a few retries settle it.
        let mut misses = 0;
        while out.len() < max && seq <= last {
            match self.read_step(seq, max - out.len(), last, &mut misses) {
                Ok(Some(records)) => {
                    let Some(next) = records.last().map(|r| r.seq + 1) else {
                        break;
                    };
                    out.extend(records);
                    seq = next;
                }
                Ok(None) => {}
                // What was read before the failure is delivered; the next read from `seq`
                // meets the failure again and returns it.
                Err(e) if !out.is_empty() => {
                    tracing::debug!(partition = %self.tp, seq, error = %e,
                        "short read: the records before the failure are returned");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// One step of [`read`](Self::read) at `seq` (`<= last`): records from the local log or
    /// from one remote segment; `None` to try again (a tier's start moved).
    fn read_step(
        &self,
        seq: u64,
        want: usize,
        last: u64,
        misses: &mut u32,
    ) -> Result<Option<Vec<Record>>, Error> {
        let mut local_failure = None;
        if seq >= self.log.first_seq() {
            match self.log.read(seq, want) {
                Ok(records) => return Ok(Some(records)),
                Err(krabka_storage::Error::OutOfRange { .. })
                    if seq < self.log.first_seq() && *misses < 3 =>
                {
                    *misses += 1;
                    return Ok(None);
                }
                // A damaged local segment or a repaired hole: its remote copy may hold it.
                Err(
                    e @ (krabka_storage::Error::Corrupt { .. }
                    | krabka_storage::Error::Quarantined { .. }),
                ) => local_failure = Some(Error::storage(format!("reading from seq {seq}"), e)),
                Err(e) => return Err(Error::storage(format!("reading from seq {seq}"), e)),
            }
        }
        let found = self
            .rlmm
            .remote_log_segment_metadata(&self.tp, seq)
            .map_err(|e| Error::metadata("lookup", None, e))?;
        if let Some(failure) = local_failure {
            return match found {
                Some(meta) => {
                    tracing::warn!(partition = %self.tp, seq, error = %failure,
                        "local read failed; reading the finished remote copy instead");
                    self.read_remote(&meta, seq, want).map(Some)
                }
                None => Err(failure),
            };
        }
        // `None`: not remote (any more). A fetch finding no object: retention deleted the
        // segment between the lookup and the fetch. Either way, re-check the start.
        let gone = match found {
            Some(meta) => match self.read_remote(&meta, seq, want) {
                Ok(records) => return Ok(Some(records)),
                Err(e) if e.is_remote_not_found() => Some(e),
                Err(e) => return Err(e),
            },
            None => None,
        };
        *misses += 1;
        let first = self.first_seq()?;
        if seq < first || *misses > 3 {
            // Still within the log, yet the remote object is missing: not retention.
            return Err(match gone {
                Some(e) if seq >= first => e,
                _ => Error::OutOfRange { seq, first, last },
            });
        }
        Ok(None)
    }

    /// Whether a read of one record at `seq` would find it (`read(seq, 0)`): `Ok` for a seq in
    /// the local log (or `last + 1`) or in a finished remote segment, else `OutOfRange`.
    fn check_readable(&self, seq: u64, last: u64) -> Result<(), Error> {
        if seq >= self.log.first_seq() {
            return Ok(());
        }
        let found = self
            .rlmm
            .remote_log_segment_metadata(&self.tp, seq)
            .map_err(|e| Error::metadata("lookup", None, e))?;
        if found.is_some() || seq >= self.log.first_seq() {
            return Ok(());
        }
        Err(self.out_of_range(seq, last))
    }

    /// The seq of the first record (in seq order) whose timestamp is `>= ts`, over both
    /// tiers; `None` when no record has such a timestamp.
    ///
    /// Finished remote segments below the local first seq are looked at oldest first: the
    /// first whose newest timestamp is `>= ts` is searched through its time index (fetched
    /// once, validated and cached like the offset index) and the records from the seq it
    /// gives. When no remote segment has such a record, the local log answers
    /// (`Log::seq_for_timestamp`). Remote costs: one listing of the remote segments, then for
    /// the segment searched one time-index fetch and the reads of one index interval (cached).
    ///
    /// # Errors
    /// [`Error::Metadata`] when the remote segments cannot be listed; [`Error::Remote`] /
    /// [`Error::CorruptRemote`] from the remote segment searched; [`Error::Storage`] from the
    /// local log.
    pub fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, Error> {
        let local_first = self.log.first_seq();
        let log_start = self.log_start.load(Ordering::Acquire);
        let mut remote: Vec<RemoteLogSegmentMetadata> = self
            .remote_list()?
            .into_iter()
            .filter(|m| {
                m.state() == RemoteLogSegmentState::CopySegmentFinished
                    && m.end_offset() >= log_start
                    && m.start_offset() < local_first
            })
            .collect();
        remote.sort_by_key(RemoteLogSegmentMetadata::start_offset);
        for meta in remote.iter().filter(|m| m.max_timestamp_ms() >= ts) {
            let found = match self.search_remote_time(meta, ts, log_start, local_first) {
                Err(e) if e.is_remote_not_found() && meta.end_offset() < self.first_seq()? => {
                    continue; // deleted by retention meanwhile
                }
                other => other?,
            };
            if found.is_some() {
                return Ok(found);
            }
        }
        self.log
            .seq_for_timestamp(ts)
            .map_err(|e| Error::storage(format!("looking up timestamp {ts}"), e))
    }

    /// The first record with a timestamp `>= ts` in one remote segment, at or after
    /// `log_start` and below `local_first`.
    fn search_remote_time(
        &self,
        meta: &RemoteLogSegmentMetadata,
        ts: i64,
        log_start: u64,
        local_first: u64,
    ) -> Result<Option<u64>, Error> {
        let Some(floor) = self.remote_time_floor(meta, ts)? else {
            return Ok(None);
        };
        let mut seq = floor.max(log_start);
        let end = meta.end_offset().min(local_first.saturating_sub(1));
        while seq <= end {
            let want = usize::try_from(end - seq + 1)
                .unwrap_or(usize::MAX)
                .min(256);
            let batch = self.read_remote(meta, seq, want)?;
            if let Some(r) = batch.iter().find(|r| r.message.timestamp >= ts) {
                return Ok(Some(r.seq));
            }
            let Some(next) = batch.last().map(|r| r.seq + 1) else {
                break;
            };
            seq = next;
        }
        Ok(None)
    }

    /// The [`Error::OutOfRange`] for a read of `seq` (lists the remote segments).
    fn out_of_range(&self, seq: u64, last: u64) -> Error {
        match self.first_seq() {
            Ok(first) => Error::OutOfRange { seq, first, last },
            Err(e) => e,
        }
    }

    /// One deterministic round: clean stale attempts, copy eligible segments one at a time
    /// (stopping at the first failure), apply whole-log retention to the remote tier, then
    /// local retention.
    ///
    /// Failures of individual copies and deletes are in [`TieringReport::failures`] and are
    /// retried next round.
    ///
    /// # Errors
    /// [`Error::RoundInProgress`] when another round runs; [`Error::Metadata`] when the
    /// metadata manager cannot list segments; [`Error::Storage`] when local retention fails.
    pub fn run_once(&self) -> Result<TieringReport, Error> {
        let _guard = self.begin_round()?;
        let mut report = TieringReport::default();
        self.clean_stale(&mut report)?;
        for seg in self.copy_plan(&mut report)? {
            if let Err(e) = self.check_before_copy(&seg, &mut report) {
                report.failures.push(e);
                break;
            }
            match self.copy_segment(&seg) {
                Ok(bytes) => {
                    report.segments_copied += 1;
                    report.bytes_copied += bytes;
                }
                Err(e) => {
                    report.failures.push(e);
                    break;
                }
            }
        }
        self.apply_retention(&mut report)?;
        Ok(report)
    }

    pub(crate) fn begin_round(&self) -> Result<RoundGuard<'_>, Error> {
        self.round_running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| Error::RoundInProgress)?;
        Ok(RoundGuard(&self.round_running))
    }

    /// The partition's live remote segments (not yet `DeleteSegmentFinished`) as policy input.
    pub(crate) fn remote_list(&self) -> Result<Vec<RemoteLogSegmentMetadata>, Error> {
        self.rlmm
            .list_remote_log_segments(&self.tp)
            .map_err(|e| Error::metadata("list", None, e))
    }

    fn remote_view(&self) -> Result<Vec<RemoteSegment<RemoteLogSegmentId>>, Error> {
        Ok(self.remote_list()?.iter().map(remote_segment).collect())
    }

    /// Cleans attempts a crashed process, a failed copy or an abandoned copy left behind.
    pub(crate) fn clean_stale(&self, report: &mut TieringReport) -> Result<(), Error> {
        let list = self.remote_list()?;
        let view: Vec<_> = list.iter().map(remote_segment).collect();
        let abandoned = self.abandoned.lock().clone();
        for i in policy::stale_attempts(&view, |id| abandoned.contains(&id.id())) {
            let Some(meta) = list.get(i) else { continue };
            match self.discard_attempt(meta) {
                Ok(()) => report.stale_cleaned += 1,
                Err(e) => report.failures.push(e),
            }
        }
        Ok(())
    }

    /// Deletes an attempt's objects: DeleteSegmentStarted → delete → DeleteSegmentFinished.
    pub(crate) fn discard_attempt(&self, meta: &RemoteLogSegmentMetadata) -> Result<(), Error> {
        let id = meta.remote_log_segment_id();
        if meta.state() != RemoteLogSegmentState::DeleteSegmentStarted {
            self.update_state(id, RemoteLogSegmentState::DeleteSegmentStarted, None)?;
        }
        bump(&self.counters.delete, 1);
        self.rsm
            .delete_log_segment_data(meta)
            .map_err(|e| Error::remote("delete", id, Some(meta.start_offset()), e))?;
        self.update_state(id, RemoteLogSegmentState::DeleteSegmentFinished, None)?;
        self.cache.remove_segment(id.id());
        Ok(())
    }

    fn update_state(
        &self,
        id: &RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        custom: Option<CustomMetadata>,
    ) -> Result<RemoteLogSegmentMetadata, Error> {
        let update = RemoteLogSegmentMetadataUpdate::new(
            id.clone(),
            now_ms(),
            custom,
            state,
            self.config.broker_id,
        );
        self.rlmm
            .update_remote_log_segment_metadata(&update)
            .map_err(|e| Error::metadata("update", Some(id), e))
    }

    /// The closed, committed local segments without a finished copy, oldest first, up to the
    /// first hole a repair left that no finished remote segment covers (reported in `report`,
    /// which also gets the round's [`TieringReport::copy_blocked_at`]).
    pub(crate) fn copy_plan(&self, report: &mut TieringReport) -> Result<Vec<SegmentInfo>, Error> {
        let segs = self.log.segments();
        let local: Vec<LocalSegment> = segs.iter().map(local_segment).collect();
        let view = self.remote_view()?;
        let last = self.log.last_seq();
        let commit = Some(self.commit_seq().map_or(last, |c| c.min(last)));
        let picked = policy::segments_to_copy(
            &local,
            &view,
            self.log_start.load(Ordering::Acquire),
            commit,
        );
        let quarantined = self.log.quarantined();
        let holes: Vec<RangeInclusive<u64>> = quarantined.iter().map(|(r, _)| r.clone()).collect();
        let barrier = policy::hole_barrier(&holes, &view);
        self.blocked_at
            .store(barrier.unwrap_or(NOT_BLOCKED), Ordering::Release);
        report.copy_blocked_at = barrier;
        if let Some(at) = barrier
            && let Some((range, path)) = quarantined.iter().find(|(r, _)| *r.start() == at)
        {
            let e = Error::DamagedSegment {
                path: path.clone(),
                position: 0,
                reason: "a repair moved these seqs aside and no remote segment holds them".into(),
                first_seq: *range.start(),
                last_seq: *range.end(),
            };
            tracing::warn!(partition = %self.tp, error = %e, "tiering stops before a hole");
            report.failures.push(e);
        }
        Ok(picked
            .into_iter()
            .filter_map(|i| segs.get(i).cloned())
            .filter(|s| barrier.is_none_or(|b| s.last_seq < b))
            .collect())
    }

    /// Verifies `seg` before its copy ([`verify_for_copy`]). A damaged segment becomes the
    /// round's [`TieringReport::copy_blocked_at`] (copying stops there and retention never
    /// passes it) and is logged with `tracing::warn!`.
    pub(crate) fn check_before_copy(
        &self,
        seg: &SegmentInfo,
        report: &mut TieringReport,
    ) -> Result<(), Error> {
        verify_for_copy(seg).inspect_err(|e| {
            self.block_at(seg.base_seq);
            report.block_at(seg.base_seq);
            bump(&self.counters.segments_refused, 1);
            tracing::warn!(partition = %self.tp, error = %e,
                "a local segment failed its check before the copy; it is not copied");
        })
    }

    /// Lowers the seq retention must not pass to `seq`.
    fn block_at(&self, seq: u64) {
        self.blocked_at.fetch_min(seq, Ordering::AcqRel);
    }

    /// Records a new attempt (CopySegmentStarted) for `seg` under a fresh id.
    pub(crate) fn begin_copy(&self, seg: &SegmentInfo) -> Result<RemoteLogSegmentMetadata, Error> {
        let id = RemoteLogSegmentId::generate(self.tp.clone());
        let epochs = policy::segment_leader_epochs(&self.epochs.lock(), seg.base_seq, seg.last_seq);
        let meta = RemoteLogSegmentMetadata::builder(id.clone(), seg.base_seq, seg.last_seq)
            .max_timestamp_ms(seg.max_timestamp)
            .broker_id(self.config.broker_id)
            .segment_leader_epochs(epochs)
            .segment_size_in_bytes(seg.size)
            .build()
            .map_err(|e| Error::metadata("add", Some(&id), e))?;
        self.rlmm
            .add_remote_log_segment_metadata(&meta)
            .map_err(|e| Error::metadata("add", Some(&id), e))?;
        Ok(meta)
    }

    /// Uploads `seg` under `meta`'s id (the blocking SPI call).
    pub(crate) fn upload(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seg: &SegmentInfo,
    ) -> Result<Option<CustomMetadata>, Error> {
        let id = meta.remote_log_segment_id();
        let mut data = LogSegmentData::new(&seg.log_path, &seg.index_path, &seg.time_index_path);
        // Kafka's leader-epoch checkpoint text: version, entry count, then "epoch start" lines.
        let epochs = meta.segment_leader_epochs();
        let mut text = format!("0\n{}\n", epochs.len());
        for (epoch, start) in epochs {
            text.push_str(&format!("{epoch} {start}\n"));
        }
        data.leader_epoch_index = Bytes::from(text);
        bump(&self.counters.copy, 1);
        let custom = self
            .rsm
            .copy_log_segment_data(meta, &data)
            .map_err(|e| Error::remote("copy", id, Some(seg.base_seq), e))?;
        if let Some(cm) = &custom {
            cm.check_size(self.config.custom_metadata_max_bytes)
                .map_err(|e| Error::remote("copy", id, Some(seg.base_seq), e))?;
        }
        Ok(custom)
    }

    /// Records CopySegmentFinished: the segment is now readable and safely remote.
    pub(crate) fn finish_copy(
        &self,
        meta: &RemoteLogSegmentMetadata,
        custom: Option<CustomMetadata>,
    ) -> Result<u64, Error> {
        self.update_state(
            meta.remote_log_segment_id(),
            RemoteLogSegmentState::CopySegmentFinished,
            custom,
        )?;
        bump(&self.counters.segments_copied, 1);
        bump(&self.counters.bytes_copied, meta.segment_size_in_bytes());
        Ok(meta.segment_size_in_bytes())
    }

    /// A whole attempt, synchronously; on failure the attempt's objects are removed (or left
    /// for the next round's stale cleanup when even that fails).
    pub(crate) fn copy_segment(&self, seg: &SegmentInfo) -> Result<u64, Error> {
        let meta = self.begin_copy(seg).inspect_err(|_| {
            bump(&self.counters.copy_failures, 1);
        })?;
        let result = self
            .upload(&meta, seg)
            .and_then(|custom| self.finish_copy(&meta, custom));
        if result.is_err() {
            bump(&self.counters.copy_failures, 1);
            self.discard_after_failure(&meta);
        }
        result
    }

    /// Best-effort removal of a failed attempt; on failure the next round's stale cleanup
    /// finds it in CopySegmentStarted or DeleteSegmentStarted.
    pub(crate) fn discard_after_failure(&self, meta: &RemoteLogSegmentMetadata) {
        let current = self
            .rlmm
            .segment_metadata(meta.remote_log_segment_id())
            .ok()
            .flatten()
            .unwrap_or_else(|| meta.clone());
        if current.state() == RemoteLogSegmentState::CopySegmentFinished {
            return;
        }
        if let Err(e) = self.discard_attempt(&current) {
            tracing::debug!(segment = %meta.remote_log_segment_id(), error = %e,
                "could not remove a failed copy attempt now; the next round will");
        }
    }

    /// Whole-log retention over the remote tier, then local retention. Neither passes the
    /// round's [`TieringReport::copy_blocked_at`] (a damaged segment or an uncovered hole).
    pub(crate) fn apply_retention(&self, report: &mut TieringReport) -> Result<(), Error> {
        let now = now_ms();
        let segs = self.log.segments();
        let holes: Vec<RangeInclusive<u64>> =
            self.log.quarantined().into_iter().map(|(r, _)| r).collect();
        let mut local: Vec<LocalSegment> = segs.iter().map(local_segment_on_disk).collect();
        local.extend(hole_segments(&holes));
        let list = self.remote_list()?;
        let view: Vec<_> = list.iter().map(remote_segment).collect();
        let local_only: u64 = local
            .iter()
            .filter(|s| !policy::is_safely_remote(s, &view))
            .map(|s| s.size)
            .sum();
        let limits = RetentionLimits {
            bytes: self.config.retention_bytes,
            ms: self.config.retention_ms,
        };
        let blocked_at = self.blocked_at.load(Ordering::Acquire);
        let mut doomed = policy::remote_to_delete(
            &view,
            local_only,
            limits,
            now,
            self.log_start.load(Ordering::Acquire),
        );
        // Whole-log retention never moves the start past damaged data it could not copy: the
        // segments to delete are an oldest prefix, so cutting at the first one reaching the
        // blocked seq keeps a prefix.
        if let Some(cut) = doomed
            .iter()
            .position(|&i| list.get(i).is_none_or(|m| m.end_offset() >= blocked_at))
        {
            doomed.truncate(cut);
        }
        // The new start is durable before any segment becomes unreadable or any data goes, so
        // first_seq() never moves backwards, even across a crash.
        let new_start = doomed
            .iter()
            .filter_map(|&i| list.get(i))
            .map(|m| m.end_offset().saturating_add(1))
            .max();
        let persisted = match new_start {
            Some(start) => self.raise_log_start(start),
            None => Ok(()),
        };
        if let Err(e) = persisted {
            report.failures.push(e);
        } else {
            self.delete_remote(&list, &doomed, report);
        }

        let list = self.remote_list()?;
        let view: Vec<_> = list.iter().map(remote_segment).collect();
        let limits = LocalLimits {
            bytes: self.config.local_retention_bytes,
            ms: self.config.local_retention_ms,
        };
        let log_start = self.log_start.load(Ordering::Acquire);
        if let Some(keep_from) = policy::local_keep_from(&local, &view, log_start, limits, now)
            .map(|k| k.min(blocked_at))
        {
            let before = segs.len();
            self.log.delete_before(keep_from).map_err(|e| {
                Error::storage(format!("deleting local segments below {keep_from}"), e)
            })?;
            let after = self.log.segments().len();
            report.local_segments_deleted += before.saturating_sub(after) as u64;
        }
        Ok(())
    }

    /// Raises the whole-log retention point to `start`: the checkpoint file first, then the
    /// in-memory value.
    fn raise_log_start(&self, start: u64) -> Result<(), Error> {
        let _write = self.log_start_write.lock();
        if start <= self.log_start.load(Ordering::Acquire) {
            return Ok(());
        }
        checkpoint::write(self.log.dir(), start)?;
        self.log_start.store(start, Ordering::Release);
        Ok(())
    }

    /// Deletes the remote segments `doomed` (indexes into `list`), oldest first, stopping at
    /// the first failure.
    fn delete_remote(
        &self,
        list: &[RemoteLogSegmentMetadata],
        doomed: &[usize],
        report: &mut TieringReport,
    ) {
        for &i in doomed {
            let Some(meta) = list.get(i) else { break };
            let id = meta.remote_log_segment_id();
            // Unreadable first (for readers without the new start), then the data goes.
            if let Err(e) = self.update_state(id, RemoteLogSegmentState::DeleteSegmentStarted, None)
            {
                report.failures.push(e);
                break;
            }
            let started = meta.apply(&RemoteLogSegmentMetadataUpdate::to_state(
                id.clone(),
                RemoteLogSegmentState::DeleteSegmentStarted,
                self.config.broker_id,
            ));
            let started = started.unwrap_or_else(|_| meta.clone());
            match self.discard_attempt(&started) {
                Ok(()) => report.remote_segments_deleted += 1,
                Err(e) => {
                    report.failures.push(e);
                    break;
                }
            }
        }
    }
}

/// Checks the retention point `log_start` read from `log`'s directory against the local log
/// and the partition's remote segments ([`checkpoint::validate`]) before anything uses it.
fn validate_log_start(
    log: &Log,
    rlmm: &dyn RemoteLogMetadataManager,
    tp: &TopicIdPartition,
    log_start: u64,
) -> Result<(), Error> {
    if log_start == 0 {
        return Ok(());
    }
    let remote = rlmm
        .list_remote_log_segments(tp)
        .map_err(|e| Error::metadata("list", None, e))?;
    // Whole-log retention only deletes finished segments: the point is the seq after one that
    // was finished, and is finished or being deleted now (or gone).
    let remote_end = remote
        .iter()
        .filter(|m| {
            matches!(
                m.state(),
                RemoteLogSegmentState::CopySegmentFinished
                    | RemoteLogSegmentState::DeleteSegmentStarted
            )
        })
        .map(RemoteLogSegmentMetadata::end_offset)
        .max();
    let local_first = log
        .segments()
        .iter()
        .filter(|s| s.last_seq >= s.base_seq)
        .map(|s| s.base_seq)
        .chain(log.quarantined().iter().map(|(r, _)| *r.start()))
        .min();
    checkpoint::validate(
        log.dir(),
        log_start,
        checkpoint::Bounds {
            remote_end,
            local_first,
            local_next: log.next_seq(),
        },
    )
}

/// Every check of [`TieredLog::new`] that needs no I/O: the config's minimums, the local
/// log options' segment size limit, and the topic name (it must name remote objects).
fn validate_all(
    options: &Options,
    tp: &TopicIdPartition,
    config: &TieringConfig,
) -> Result<(), Error> {
    config.validate()?;
    validate_log_options(options)?;
    layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    Ok(())
}

/// A local segment as the policy sees it, without I/O: [`LocalSegment::disk_bytes`] counts
/// only the `.log` (see [`local_segment_on_disk`]).
pub(crate) fn local_segment(s: &SegmentInfo) -> LocalSegment {
    LocalSegment {
        base_seq: s.base_seq,
        last_seq: s.last_seq,
        size: s.size,
        disk_bytes: s.size,
        max_timestamp: s.max_timestamp,
        active: s.active,
    }
}

/// [`local_segment`] whose [`LocalSegment::disk_bytes`] also counts whichever index files
/// exist (the active segment may have none on disk yet): what local retention limits.
fn local_segment_on_disk(s: &SegmentInfo) -> LocalSegment {
    let file_len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    LocalSegment {
        disk_bytes: s
            .size
            .saturating_add(file_len(&s.index_path))
            .saturating_add(file_len(&s.time_index_path)),
        ..local_segment(s)
    }
}

/// The holes of a repaired local log as policy segments: closed, empty, never copied, and
/// (unless a finished copy covers them) a stop for local retention.
fn hole_segments(holes: &[RangeInclusive<u64>]) -> impl Iterator<Item = LocalSegment> + '_ {
    holes.iter().map(|h| LocalSegment {
        base_seq: *h.start(),
        last_seq: *h.end(),
        size: 0,
        disk_bytes: 0,
        max_timestamp: i64::MIN,
        active: false,
    })
}

pub(crate) fn remote_segment(m: &RemoteLogSegmentMetadata) -> RemoteSegment<RemoteLogSegmentId> {
    RemoteSegment {
        id: m.remote_log_segment_id().clone(),
        start: m.start_offset(),
        end: m.end_offset(),
        size: m.segment_size_in_bytes(),
        max_timestamp: m.max_timestamp_ms(),
        state: m.state(),
    }
}
