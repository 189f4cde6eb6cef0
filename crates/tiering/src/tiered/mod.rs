//! [`TieredLog`]: the local log, the remote tier and the policy joining them.
//!
//! The facade (state, appends, accessors, stats) is here; the rest by concept: `open` (the
//! checks when a log is joined with the remote tier), `local` (the read-only view of the local
//! log and `roll`), `read` (reads across both tiers), `copy` (the steps the round engine,
//! `crate::round`, takes on the log: plan, record, upload, finish), `retention` (whole-log and
//! local retention) and `remote` (the remote segments' listing, states and deletes).

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use krabka_protocol::Message;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{RemoteLogSegmentState, RemoteStorageManager, TopicIdPartition};
use krabka_storage::{Log, SegmentInfo};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::cache::RemoteReadCache;
use crate::config::TieringConfig;
use crate::error::Error;
use crate::policy::{self, LocalSegment};
use crate::read::readahead;
use crate::stats::{Counters, TieringStats};

mod across;
mod copy;
mod follower;
mod head;
mod local;
mod open;
mod remote;
mod retention;
mod sample;

pub use local::LocalLogView;

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
    pub(crate) log: Arc<Log>,
    pub(crate) rsm: Arc<dyn RemoteStorageManager>,
    pub(crate) rlmm: Arc<dyn RemoteLogMetadataManager>,
    pub(crate) tp: TopicIdPartition,
    pub(crate) config: TieringConfig,
    commit_seq: AtomicU64,
    /// The retention point: records below it are gone (or going) from both tiers. Mirrors
    /// its file (see [`retention_point`](crate::retention_point)); raised only after the file
    /// is. (Kafka calls it the log start offset; the file's body keeps that word, `log_start`.)
    retention_point: AtomicU64,
    /// Serializes writes of the retention point's file.
    retention_point_write: Mutex<()>,
    /// Leader epoch history: `(epoch, start seq)`, epochs and start seqs increasing.
    epochs: Mutex<Vec<(i32, u64)>>,
    pub(crate) cache: RemoteReadCache,
    pub(crate) counters: Counters,
    /// Readers' positions and the threads fetching ahead of sequential ones.
    pub(crate) readahead: readahead::ReadAhead,
    round_running: AtomicBool,
    /// The event time of the newest copy attempt begun: attempts get non-decreasing times in
    /// the order their segments were planned, whatever order their threads run in, so a
    /// recovery from manifests alone replays one incarnation's copies in seq order.
    copy_clock: std::sync::atomic::AtomicI64,
    /// First seq of the damaged local segment or uncovered hole the latest round stopped
    /// copying at ([`NOT_BLOCKED`]: none). Whole-log and local retention never pass it.
    blocked_at: AtomicU64,
    /// Attempts whose copy call outlived its deadline and is still running: not stale yet.
    pub(crate) abandoned: Mutex<HashSet<Uuid>>,
    pub(crate) abandoned_tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The writer epoch this log holds ([`open_owned`](Self::open_owned)); `None` for a log
    /// opened without ownership, which nothing fences.
    pub(crate) owner: Option<Arc<crate::ownership::Owner>>,
    /// Its place in a tail writer ([`attach_tail`](Self::attach_tail)); empty without one.
    pub(crate) tail: std::sync::OnceLock<crate::tail::TailSlot>,
    /// The chains a previous writer's tail was in, taken over at open (until a tail writer
    /// of this log takes them on).
    pub(crate) inherited: Mutex<Vec<crate::tail::Inherited>>,
    /// What this log last wrote as the partition head (`head.rs`).
    head: Mutex<head::Published>,
    /// The replica a follower learns the remote tier from (`None`: this log copies).
    pub(crate) follower: Option<Arc<crate::replica::ReadReplica>>,
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

impl TieredLog {
    /// The writer epoch this log holds in the remote tier, when it was opened with
    /// [`open_owned`](Self::open_owned).
    pub fn writer_epoch(&self) -> Option<u64> {
        self.owner.as_ref().map(|o| o.epoch())
    }

    /// Whether the remote store was found to enforce create-only writes (`None` without
    /// ownership); see `docs/tiering.md`, "Ownership".
    pub fn conditional_writes_enforced(&self) -> Option<bool> {
        self.owner.as_ref().map(|o| o.enforced())
    }

    /// Checks in the remote tier that this log still holds the newest writer epoch (two small
    /// reads; none once it was found fenced). Every round and every copy does this itself.
    ///
    /// # Errors
    /// [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) when a later writer took the partition over; [`OwnershipError::Record`](crate::OwnershipError::Record)
    /// when the epoch records cannot be read or do not decode.
    pub fn check_owner(&self) -> Result<(), Error> {
        match &self.owner {
            Some(owner) => owner.check(),
            None => Ok(()),
        }
    }

    /// Fails with [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) when an earlier check found this log fenced (no I/O).
    fn ensure_writable(&self) -> Result<(), Error> {
        match &self.owner {
            Some(owner) => owner.ensure_not_fenced_only(),
            None => Ok(()),
        }
    }

    /// Fails with [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) when an earlier check found this log fenced, or
    /// [`OwnershipError::ReadOnly`](crate::OwnershipError::ReadOnly) when it was opened to read only (no I/O).
    pub(crate) fn ensure_not_fenced(&self) -> Result<(), Error> {
        match &self.owner {
            Some(owner) => owner.ensure_not_fenced(),
            None => Ok(()),
        }
    }

    /// The reader of this log's finished remote segments, for one call.
    pub(crate) fn remote(&self) -> crate::read::RemoteReader<'_> {
        self.remote_reader(false, None)
    }

    /// [`remote`](Self::remote), serving only what the cache holds (and what `cold` holds)
    /// when `cached_only`.
    pub(crate) fn remote_reader<'a>(
        &'a self,
        cached_only: bool,
        cold: Option<&'a crate::read::cold::ColdRead>,
    ) -> crate::read::RemoteReader<'a> {
        crate::read::RemoteReader {
            rsm: &self.rsm,
            rlmm: self.rlmm.as_ref(),
            tp: &self.tp,
            config: &self.config,
            cache: &self.cache,
            counters: &self.counters,
            readahead: &self.readahead,
            remote_below: self.log.first_seq(),
            cached_only,
            cold,
        }
    }

    /// The partition this log stores.
    pub fn topic_id_partition(&self) -> &TopicIdPartition {
        &self.tp
    }

    /// The configuration.
    pub fn config(&self) -> &TieringConfig {
        &self.config
    }

    /// Uses `cache` for remote reads from now on instead of this log's own
    /// ([`TieringConfig::cache_bytes`] sized) one: many logs given clones of one
    /// [`RemoteReadCache`] share its byte budget. Entries are keyed by remote segment attempt
    /// ids, unique across partitions.
    #[must_use]
    pub fn with_cache(mut self, cache: RemoteReadCache) -> Self {
        self.cache = cache;
        self
    }

    /// The remote read cache (shared when given with [`with_cache`](Self::with_cache)).
    pub fn cache(&self) -> &RemoteReadCache {
        &self.cache
    }

    /// Appends one message; returns its seq.
    ///
    /// # Errors
    /// [`Error::Storage`] as `Log::append`; [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) once a check found another writer
    /// holding the partition (nothing appended: records it could never tier are not
    /// acknowledged).
    pub fn append(&self, msg: &Message) -> Result<u64, Error> {
        self.ensure_writable()?;
        let seq = self
            .log
            .append(msg)
            .map_err(|e| Error::storage("appending", e))?;
        self.wait_in_bucket(seq..=seq, msg.encoded_len() as u64)?;
        Ok(seq)
    }

    /// Appends messages as one batch; returns their seqs.
    ///
    /// # Errors
    /// [`Error::Storage`] as `Log::append_batch`; [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) as
    /// [`append`](Self::append).
    pub fn append_batch(&self, msgs: &[Message]) -> Result<RangeInclusive<u64>, Error> {
        self.ensure_writable()?;
        let seqs = self
            .log
            .append_batch(msgs)
            .map_err(|e| Error::storage("appending a batch", e))?;
        let bytes = msgs.iter().map(|m| m.encoded_len() as u64).sum();
        self.wait_in_bucket(seqs.clone(), bytes)?;
        Ok(seqs)
    }

    /// Appends one Kafka v2 record batch as a producer sent it (see
    /// `krabka_storage::Log::append_raw_batch`): checked whole, then stored with its base offset
    /// set to the next seq and its `partitionLeaderEpoch` to the current leader epoch
    /// ([`set_leader_epoch`](Self::set_leader_epoch)); returns its seqs.
    ///
    /// # Errors
    /// [`Error::Storage`] as `Log::append_raw_batch` (`InvalidBatch` naming the field);
    /// [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) as [`append`](Self::append).
    pub fn append_raw_batch(&self, batch: &[u8]) -> Result<RangeInclusive<u64>, Error> {
        self.ensure_writable()?;
        let seqs = self
            .log
            .append_raw_batch(batch)
            .map_err(|e| Error::storage("appending a raw batch", e))?;
        self.wait_in_bucket(seqs.clone(), batch.len() as u64)?;
        Ok(seqs)
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
            self.retention_point.load(Ordering::Acquire),
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
    /// copies newer segments. Setting the current epoch again is a no-op. Every batch appended
    /// to the local log from then on carries the epoch in its `partitionLeaderEpoch` (from
    /// open, [`TieringConfig::leader_epoch`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative epoch, an epoch lower than the latest one, or
    /// a start seq before the latest epoch's start.
    pub fn set_leader_epoch(&self, epoch: i32, start_seq: u64) -> Result<(), Error> {
        let mut epochs = self.epochs.lock();
        policy::push_leader_epoch(&mut epochs, epoch, start_seq).map_err(Error::InvalidArgument)?;
        // The batches appended from now on carry it (`partitionLeaderEpoch`).
        self.log
            .set_partition_leader_epoch(epoch)
            .map_err(|e| Error::storage("stamping the leader epoch", e))
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
        let Self {
            log, rlmm, tail, ..
        } = self;
        // Leaving the tail writer drops its hold on the local log.
        drop(tail);
        let closed = match Arc::try_unwrap(log) {
            Ok(log) => log.close().map_err(|e| Error::storage("closing", e)),
            // Still shared (a tail window in flight holds it): synced, and closed when the
            // last holder drops it.
            Err(log) => log.sync().map_err(|e| Error::storage("closing", e)),
        };
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
            requests: {
                let mut r = self.counters.requests();
                r.fetch_log += self.readahead.requests.load(Ordering::Relaxed);
                r.fetch_index += self.readahead.index_requests.load(Ordering::Relaxed);
                r
            },
            cache_hits: self.cache.lru().hits(),
            cache_misses: self.cache.lru().misses(),
            cache_bytes: self.cache.lru().bytes(),
            local_bytes: self.log.bytes(),
            remote_bytes,
            segments_refused: self.counters.segments_refused.load(Ordering::Relaxed),
            copy_blocked_at: match self.blocked_at.load(Ordering::Acquire) {
                NOT_BLOCKED => None,
                seq => Some(seq),
            },
        }
    }
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
