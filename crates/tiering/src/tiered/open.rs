//! Opening a tiered log: the checks before anything is created, the retention point read
//! back, and the continuity of the local log with the remote tier.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteLogSegmentState, RemoteStorageManager, TopicIdPartition, layout,
};
use krabka_storage::{Log, Options};
use parking_lot::Mutex;

use super::{NO_COMMIT_BOUND, NOT_BLOCKED, TieredLog, local_segment};
use crate::cache::RemoteReadCache;
use crate::config::{TieringConfig, validate_log_options};
use crate::error::Error;
use crate::policy::{self, Continuity, LocalSegment};
use crate::retention_point;
use crate::stats::Counters;

impl TieredLog {
    /// Joins an open local log with a remote tier.
    ///
    /// The whole-log retention point is read from its file in the log's directory
    /// ([`RETENTION_POINT_FILE`](crate::RETENTION_POINT_FILE)), so `first_seq()` never moves backwards
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
    /// retention point's file cannot be read, or records a point whole-log retention cannot have
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
        Self::new_joined(log, rsm, rlmm, topic_id_partition, config, false)
    }

    /// [`new`](Self::new); `read_only` refuses to move the start of an empty local log
    /// ([`OwnershipError::ReadOnly`](crate::OwnershipError::ReadOnly)) instead of writing it.
    fn new_joined(
        log: Log,
        rsm: Arc<dyn RemoteStorageManager>,
        rlmm: Arc<dyn RemoteLogMetadataManager>,
        topic_id_partition: TopicIdPartition,
        config: TieringConfig,
        read_only: bool,
    ) -> Result<Self, Error> {
        validate_all(log.options(), &topic_id_partition, &config)?;
        // Every batch appended from now on carries the leader epoch, as a Kafka leader stamps it.
        log.set_partition_leader_epoch(config.leader_epoch)
            .map_err(|e| Error::storage("stamping the leader epoch", e))?;
        let retention_point = retention_point::read(log.dir())?;
        validate_retention_point(&log, rlmm.as_ref(), &topic_id_partition, retention_point)?;
        let this = Self {
            epochs: Mutex::new(vec![(config.leader_epoch, 0)]),
            cache: RemoteReadCache::new(config.cache_bytes),
            log: Arc::new(log),
            rsm,
            rlmm,
            tp: topic_id_partition,
            config,
            commit_seq: AtomicU64::new(NO_COMMIT_BOUND),
            retention_point: AtomicU64::new(retention_point),
            retention_point_write: Mutex::new(()),
            counters: Counters::default(),
            readahead: Default::default(),
            round_running: AtomicBool::new(false),
            copy_clock: std::sync::atomic::AtomicI64::new(0),
            blocked_at: AtomicU64::new(NOT_BLOCKED),
            abandoned: Mutex::new(HashSet::new()),
            abandoned_tasks: Mutex::new(Vec::new()),
            owner: None,
            tail: std::sync::OnceLock::new(),
            inherited: Mutex::new(Vec::new()),
            head: Mutex::default(),
            follower: None,
        };
        this.join_remote(read_only)?;
        // Fsync latency of the local log as a histogram. A log that came with an observer of
        // its own keeps it (`set_fsync_observer` then returns false).
        let tp = this.tp.clone();
        this.log.set_fsync_observer(Box::new(move |took| {
            crate::metrics::time(crate::metrics::LOCAL_LOG_FSYNC_SECONDS, &tp, took);
        }));
        Ok(this)
    }

    /// Makes sure the local log continues the remote tier (see [`new`](Self::new)).
    fn join_remote(&self, read_only: bool) -> Result<(), Error> {
        let local: Vec<LocalSegment> = self.log.segments().iter().map(local_segment).collect();
        let mut holes: Vec<RangeInclusive<u64>> =
            self.log.quarantined().into_iter().map(|(r, _)| r).collect();
        // Seqs a recovery found used but could not recover: the gap they leave between the
        // tiers is known, not a mismatch (reads of them fail naming them). Only while they
        // bridge that gap, right below the local log's first seq: a gap anywhere else is a
        // loss no recovery recorded, and is refused as ever.
        let local_first = local
            .iter()
            .filter(|s| s.last_seq >= s.base_seq)
            .map(|s| s.base_seq)
            .chain(holes.iter().map(|h| *h.start()))
            .min()
            .unwrap_or_else(|| self.log.next_seq());
        holes.extend(
            crate::lost::read(self.log.dir())?
                .filter(|lost| lost.end().saturating_add(1) == local_first),
        );
        holes.sort_by_key(|h| *h.start());
        let view = self.remote_view()?;
        let retention_point = self.retention_point.load(Ordering::Acquire);
        match policy::continuity(&local, &holes, self.log.next_seq(), &view, retention_point) {
            Continuity::Consistent => Ok(()),
            Continuity::StartAt(_) if read_only => {
                Err(Error::Ownership(crate::error::OwnershipError::ReadOnly {
                    dir: self.log.dir().to_path_buf(),
                }))
            }
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
        let log = open_local(dir.as_ref(), options, &topic_id_partition, &config)?;
        Self::new(log, rsm, rlmm, topic_id_partition, config)
    }
}

impl TieredLog {
    /// Opens (or creates) the local log in `dir` like [`open`](Self::open), joins it with the
    /// remote tier, and makes it the partition's **one writer** there (`docs/tiering.md`,
    /// "Ownership"): the log is bound to `ownership.location` and `topic_id_partition`
    /// (`DIR/remote-binding`), holds a writer epoch recorded create-only in the remote tier,
    /// and checks it before every round, copy and delete; a later writer fences it
    /// ([`OwnershipError::Fenced`](crate::OwnershipError::Fenced)). Every copy carries the epoch.
    ///
    /// # Errors
    /// As [`open`](Self::open); and, with nothing changed in the remote tier:
    /// [`OwnershipError::WrongRemote`](crate::OwnershipError::WrongRemote) / [`OwnershipError::WrongPartition`](crate::OwnershipError::WrongPartition) when the log is bound to another
    /// remote or partition; [`OwnershipError::CopiedDirectory`](crate::OwnershipError::CopiedDirectory) when `dir` is a copy of the bound
    /// directory; [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) when a later writer holds the partition;
    /// [`OwnershipError::RemoteHoldsPartition`](crate::OwnershipError::RemoteHoldsPartition) when the local log holds nothing, was never bound and
    /// the remote holds the partition (recover it instead); [`OwnershipError::NotBound`](crate::OwnershipError::NotBound) when a log
    /// that was never bound meets a remote holding the partition written by another log;
    /// [`OwnershipError::Record`](crate::OwnershipError::Record) / [`OwnershipError::Binding`](crate::OwnershipError::Binding) when the records cannot be read or written.
    pub fn open_owned(
        dir: impl AsRef<Path>,
        options: Options,
        rsm: Arc<dyn RemoteStorageManager>,
        rlmm: Arc<dyn RemoteLogMetadataManager>,
        topic_id_partition: TopicIdPartition,
        config: TieringConfig,
        ownership: &crate::ownership::RemoteOwnership,
    ) -> Result<Self, Error> {
        let log = open_local(dir.as_ref(), options, &topic_id_partition, &config)?;
        Self::new_owned(log, rsm, rlmm, topic_id_partition, config, ownership)
    }

    /// [`new`](Self::new) with ownership, over an open local log: see
    /// [`open_owned`](Self::open_owned).
    ///
    /// # Errors
    /// As [`open_owned`](Self::open_owned).
    pub fn new_owned(
        log: Log,
        rsm: Arc<dyn RemoteStorageManager>,
        rlmm: Arc<dyn RemoteLogMetadataManager>,
        topic_id_partition: TopicIdPartition,
        config: TieringConfig,
        ownership: &crate::ownership::RemoteOwnership,
    ) -> Result<Self, Error> {
        let local_empty =
            log.segments().iter().all(|s| s.size == 0) && log.quarantined().is_empty();
        let local_first = log.first_seq();
        let dir = log.dir().to_path_buf();
        let mut this = Self::new_joined(
            log,
            rsm,
            rlmm,
            topic_id_partition,
            config,
            ownership.read_only,
        )?;
        let owner = crate::ownership::bind(
            &dir,
            &this.tp,
            ownership,
            local_empty,
            local_first,
            this.rlmm.as_ref(),
        )?;
        this.owner = Some(Arc::new(owner));
        // Records a previous writer acknowledged in the bucket's tail are this log's before
        // its first head write drops that writer's list of them.
        if !ownership.read_only {
            this.take_over_tail()?;
        }
        // Replicas learn of a new writer epoch at once; a failure here is retried by the next
        // round.
        if let Err(e) = this.publish_head(true) {
            tracing::warn!(partition = %this.tp, error = %e,
                "could not write the partition head; the next round tries again");
        }
        Ok(this)
    }
}

/// Checks everything that needs no local log, then opens (or creates) the local log in `dir`:
/// the first step of [`TieredLog::open`] and [`TieredLog::open_owned`].
fn open_local(
    dir: &Path,
    options: Options,
    tp: &TopicIdPartition,
    config: &TieringConfig,
) -> Result<Log, Error> {
    validate_all(&options, tp, config)?;
    Log::open(dir, options).map_err(|e| Error::storage(format!("opening {}", dir.display()), e))
}

/// Checks the retention point read from `log`'s directory against the local log
/// and the partition's remote segments ([`retention_point::validate`]) before anything uses it.
fn validate_retention_point(
    log: &Log,
    rlmm: &dyn RemoteLogMetadataManager,
    tp: &TopicIdPartition,
    retention_point: u64,
) -> Result<(), Error> {
    if retention_point == 0 {
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
    retention_point::validate(
        log.dir(),
        retention_point,
        retention_point::Bounds {
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
