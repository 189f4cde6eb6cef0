//! [`ReadReplica`]: a partition served from the remote tier alone, by a process that holds no
//! local log and writes nothing to the bucket (Redpanda's remote read replicas; Kafka's
//! followers reading `OFFSET_MOVED_TO_TIERED_STORAGE` ranges).
//!
//! What it serves is decided by the bucket's own records (`docs/tiering.md`, "Read replicas"):
//! - at open, and whenever the partition's head object is missing, damaged or older than one
//!   already applied, a full listing: the recovery scan of
//!   [`krabka_remote_storage::recovery::scan`] (complete manifests only, one lineage, fenced-out
//!   and superseded copies dropped);
//! - otherwise the head object ([`krabka_remote_storage::head`]), which the writer rewrites
//!   whenever its finished segments change: an idle refresh is one conditional read of it, a
//!   changed head costs one read of the next epoch record and one manifest read per segment
//!   the replica has not seen (`refresh.rs`).
//!
//! Reads go through the same reader as the writer's tiered log (`crate::read`): the chunk
//! cache, single-flight fetches, the read-ahead, and every record's seq checked (`read.rs`).
//! A view is served until it is [`ReplicaConfig::refresh_interval`] old; the next call
//! refreshes it first. [`ReplicaGroup`] follows many partitions with shared limits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteStorageError, RemoteStorageManager, TopicIdPartition, layout,
};
use parking_lot::{Mutex, RwLock};

use crate::cache::RemoteReadCache;
use crate::config::TieringConfig;
use crate::error::Error;
use crate::quota::ByteRateQuota;
use crate::read::readahead::ReadAhead;
use crate::stats::Counters;

mod budget;
mod group;
mod judge;
mod metadata;
mod refresh;
mod sample;
mod serve;
pub(crate) mod tail;

pub use group::{DEFAULT_REFRESH_THREADS, GroupRefresh, ReplicaGroup, ReplicaGroupConfig};
pub use metadata::ReplicaMetadata;
pub use refresh::RefreshOutcome;

/// Default [`ReplicaConfig::refresh_interval`]: 30 s, as Redpanda's read replicas.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// Longest accepted [`ReplicaConfig::refresh_interval`]: one day.
pub const MAX_REFRESH_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// Default [`ReplicaConfig::scan_concurrency`].
pub const DEFAULT_SCAN_CONCURRENCY: usize = 8;

/// Turns a segment's metadata, as its manifest holds it, into what readers need (a decorator
/// over the backend restoring its own metadata, e.g. `krabka_remote_transform`), or says why
/// the segment cannot be read: its seqs are then a hole.
pub type SegmentMap = Arc<
    dyn Fn(&RemoteLogSegmentMetadata) -> Result<RemoteLogSegmentMetadata, RemoteStorageError>
        + Send
        + Sync,
>;

/// How a [`ReadReplica`] follows the bucket.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReplicaConfig {
    /// How long a view is served before the next call refreshes it: the bound on how stale a
    /// replica is (plus the writer's own copy lag). Default [`DEFAULT_REFRESH_INTERVAL`];
    /// 1 ms..=[`MAX_REFRESH_INTERVAL`].
    pub refresh_interval: Duration,
    /// Manifests a full listing reads at once (1..=256). Default [`DEFAULT_SCAN_CONCURRENCY`].
    pub scan_concurrency: usize,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            scan_concurrency: DEFAULT_SCAN_CONCURRENCY,
        }
    }
}

impl ReplicaConfig {
    /// Checks every field's range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        if self.refresh_interval < Duration::from_millis(1)
            || self.refresh_interval > MAX_REFRESH_INTERVAL
        {
            return Err(Error::InvalidConfig(format!(
                "refresh_interval {:?} is outside 1 ms..={MAX_REFRESH_INTERVAL:?}",
                self.refresh_interval
            )));
        }
        if !(1..=256).contains(&self.scan_concurrency) {
            return Err(Error::InvalidConfig(format!(
                "scan_concurrency {} is outside 1..=256",
                self.scan_concurrency
            )));
        }
        Ok(())
    }
}

/// What a replica knows of the partition's head object.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeadStatus {
    /// The head was read and applied (or is unchanged since).
    Current,
    /// No head object: the writer holds no epoch (it was opened without ownership) or has not
    /// written one yet. Every refresh is a full listing.
    Missing,
    /// The head does not decode or names another partition: every refresh is a full listing
    /// until the writer rewrites it. What is wrong.
    Damaged(String),
    /// The head is older than one already applied (a fenced writer wrote it late, or an old
    /// head was put back): the view came from a full listing.
    Stale,
    /// The head is older than what the bucket holds: the listing shows `unlisted` complete
    /// copies after the last seq it lists (`listed_to`, `None` when it lists none), up to seq
    /// `bucket_to`, or segments it lists were deleted since. An old head put back, or one its
    /// writer has not rewritten yet after a copy. The view serves what the head lists (the
    /// writer may still discard a copy it has not recorded): seqs past `listed_to` up to
    /// `bucket_to` may exist that it does not serve.
    Behind {
        /// The last seq the head lists (`None`: it lists no segment).
        listed_to: Option<u64>,
        /// The last seq of the complete copies the listing shows.
        bucket_to: u64,
        /// Complete copies after `listed_to` that the head does not list.
        unlisted: usize,
        /// Segments the head lists whose objects are all gone (deleted since it was written).
        deleted: usize,
    },
}

/// Seqs the bucket's own records (the partition head, an epoch record, the listing) show
/// finished that a replica cannot serve: an object of their segment is missing or damaged.
/// A read of them fails with [`ReadError::RemoteHole`](crate::ReadError::RemoteHole) naming the objects and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingSeqs {
    /// The first seq missing.
    pub from: u64,
    /// The last seq missing.
    pub to: u64,
    /// Keys of the objects missing or damaged (the manifest's when none of the segment's
    /// objects is left).
    pub objects: Vec<String>,
    /// Which record shows the seqs finished, and what is wrong with which object.
    pub reason: String,
}

/// A replica's view and how fresh it is: what [`ReadReplica::stats`] reports.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReplicaStats {
    /// The first seq served.
    pub first_seq: u64,
    /// The last seq the view holds (`first_seq - 1` when none is): the end of the last
    /// segment served, of the records served from the tail objects the head lists, or of seqs
    /// shown finished or written that cannot be served ([`missing`](Self::missing)), whichever
    /// is later.
    pub last_seq: u64,
    /// Seq ranges the bucket's records show finished, or its tail objects show written, that
    /// cannot be served (reads of them fail naming the objects), by seq.
    pub missing: Vec<MissingSeqs>,
    /// The seqs served from tail objects above the finished segments (named gaps among them
    /// included), `None` when none is.
    pub tail: Option<std::ops::RangeInclusive<u64>>,
    /// The whole-log retention point the view was built with: seqs below it are gone.
    pub retention_point: u64,
    /// The writer's last appended seq when it wrote the head applied (`None` without a head).
    pub writer_last_seq: Option<u64>,
    /// `writer_last_seq - last_seq`: seqs the writer held that the replica cannot serve yet
    /// (not copied yet, or copied after the view): the lag in seqs.
    pub lag_seqs: u64,
    /// Time since the last refresh that succeeded: the view is at most this stale.
    pub since_refresh: Duration,
    /// Age of the head applied, by the writer's clock (`None` without a head).
    pub head_age: Option<Duration>,
    /// What the replica knows of the head object.
    pub head: HeadStatus,
    /// Remote segments served.
    pub segments: usize,
    /// Refreshes run, of them the idle ones (head unchanged) and the full listings.
    pub refreshes: u64,
    /// Refreshes that found the head unchanged: one request each.
    pub idle_refreshes: u64,
    /// Refreshes that listed the partition in full.
    pub full_listings: u64,
    /// Refreshes that failed (the previous view was kept).
    pub refresh_failures: u64,
    /// Requests the refreshes sent: head reads, epoch record reads, manifest reads, and for a
    /// full listing its listing pages and manifest reads.
    pub refresh_requests: u64,
    /// Ranged and index fetches the reads sent (read-ahead included).
    pub fetch_requests: u64,
}

/// The view reads answer from, replaced whole by each refresh.
#[derive(Clone, Debug)]
pub(crate) struct View {
    /// Finished segments served, by start seq.
    /// Shared: a reader's copy of the view costs no copy of the segments.
    pub(crate) segments: Arc<Vec<RemoteLogSegmentMetadata>>,
    pub(crate) retention_point: u64,
    pub(crate) writer_last_seq: Option<u64>,
    pub(crate) head_written_ms: Option<i64>,
    pub(crate) head: HeadStatus,
    pub(crate) refreshed_at: Instant,
    /// Seqs shown finished that no served segment holds, by seq: a read of them is a named
    /// hole, and the view ends no earlier than they do (a lost newest segment is not "not
    /// copied yet").
    pub(crate) missing: Arc<Vec<MissingSeqs>>,
    /// The records of the tail chains the head lists above the finished segments (and the
    /// named gaps among them), by seq.
    pub(crate) tail: tail::SharedTail,
}

impl View {
    /// The seq after the last one the view holds: served from a finished segment or the
    /// tail, or shown finished and missing (at least 1, never below the retention point).
    pub(crate) fn next_seq(&self) -> u64 {
        self.segments
            .last()
            .map_or(0, |m| m.end_offset().saturating_add(1))
            .max(self.missing.last().map_or(0, |m| m.to.saturating_add(1)))
            .max(self.tail.last().map_or(0, |t| t.saturating_add(1)))
            .max(self.retention_point)
            .max(1)
    }

    /// The last seq the finished segments hold (or show finished and missing): where the
    /// tail served starts after.
    pub(crate) fn finished_end(&self) -> u64 {
        self.segments
            .last()
            .map_or(0, RemoteLogSegmentMetadata::end_offset)
            .max(self.missing.last().map_or(0, |m| m.to))
    }

    /// The first seq served: the first segment's start (or missing range's, or the tail's,
    /// whichever is lowest; not below the retention point), or [`next_seq`](Self::next_seq)
    /// when none is.
    pub(crate) fn first_seq(&self) -> u64 {
        let served = self
            .segments
            .first()
            .map(|m| m.start_offset())
            .into_iter()
            .chain(self.tail.first())
            .min();
        let missing = self.missing.first().map(|m| m.from);
        match (served, missing) {
            (Some(a), Some(b)) => a.min(b).max(self.retention_point),
            (Some(a), None) | (None, Some(a)) => a.max(self.retention_point),
            (None, None) => self.next_seq(),
        }
    }
}

#[derive(Default)]
pub(crate) struct ReplicaCounters {
    pub(crate) refreshes: AtomicU64,
    pub(crate) idle_refreshes: AtomicU64,
    pub(crate) full_listings: AtomicU64,
    pub(crate) refresh_failures: AtomicU64,
}

/// One partition served from the remote tier alone. `Send + Sync`: share it through an `Arc`;
/// refreshes are serialized, reads run concurrently with them and with each other.
///
/// ```no_run
/// # fn main() -> Result<(), krabka_tiering::Error> {
/// use std::sync::Arc;
/// use krabka_remote_fs::FsRemoteStorage;
/// use krabka_remote_storage::TopicIdPartition;
/// use krabka_tiering::replica::{ReadReplica, ReplicaConfig};
/// use krabka_tiering::TieringConfig;
///
/// let remote = Arc::new(FsRemoteStorage::new("/srv/remote").expect("remote"));
/// # let tp = TopicIdPartition::new(uuid::Uuid::nil(), "orders", 0);
/// // `tp` as the writer's identity record names it (see `find_partitions`).
/// let replica = ReadReplica::open(remote.clone(), remote, tp, TieringConfig::default(),
///     ReplicaConfig::default())?;
/// for record in replica.read(replica.first_seq()?, 100)? {
///     println!("{}: {:?}", record.seq, record.message.value);
/// }
/// # Ok(()) }
/// ```
pub struct ReadReplica {
    /// The backend as reads use it: read-only, through the request budget ([`budget`]).
    pub(crate) rsm: Arc<dyn RemoteStorageManager>,
    /// The backend as given.
    backend: Arc<dyn RemoteStorageManager>,
    /// The store as refreshes read it: counted, budgeted, read-only.
    pub(crate) store: Arc<budget::BudgetedStore>,
    pub(crate) tp: TopicIdPartition,
    pub(crate) dir: String,
    pub(crate) config: TieringConfig,
    pub(crate) replica: ReplicaConfig,
    pub(crate) map: Option<SegmentMap>,
    pub(crate) budget: Option<Arc<ByteRateQuota>>,
    /// A group's refresh permits (`None`: not in a group).
    pub(crate) permits: Option<Arc<group::RefreshPermits>>,
    pub(crate) metadata: Arc<ReplicaMetadata>,
    pub(crate) cache: RemoteReadCache,
    pub(crate) counters: Counters,
    pub(crate) readahead: ReadAhead,
    /// What refreshes remember between runs; its lock serializes them.
    pub(crate) known: Mutex<refresh::Known>,
    pub(crate) view: RwLock<View>,
    pub(crate) stats: ReplicaCounters,
}

impl std::fmt::Debug for ReadReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadReplica")
            .field("partition", &self.tp)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl ReadReplica {
    /// Opens a replica of `tp` over `rsm` (reads) and `store` (listing, head, manifests and
    /// epoch records: the same bucket and prefix), and builds its first view with a full
    /// listing. `config` gives the reader's settings (chunk size, cache, read-ahead, fetch
    /// deadline); its copy and retention fields are unused.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]; [`Error::Remote`] when the first listing fails.
    pub fn open(
        rsm: Arc<dyn RemoteStorageManager>,
        store: Arc<dyn OwnershipStore>,
        tp: TopicIdPartition,
        config: TieringConfig,
        replica: ReplicaConfig,
    ) -> Result<Self, Error> {
        Self::builder(rsm, store, tp, config, replica)?.open()
    }

    /// A replica to set up further before its first view ([`ReplicaBuilder`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a field out of range or a partition the layout cannot
    /// name.
    pub fn builder(
        rsm: Arc<dyn RemoteStorageManager>,
        store: Arc<dyn OwnershipStore>,
        tp: TopicIdPartition,
        config: TieringConfig,
        replica: ReplicaConfig,
    ) -> Result<ReplicaBuilder, Error> {
        config.validate()?;
        replica.validate()?;
        let dir = layout::partition_dir(&tp)
            .map_err(|e| Error::InvalidConfig(format!("partition {tp}: {e}")))?;
        let cache = RemoteReadCache::new(config.cache_bytes);
        Ok(ReplicaBuilder {
            inner: Self {
                rsm: Arc::new(budget::Budgeted {
                    inner: rsm.clone(),
                    budget: None,
                }),
                backend: rsm,
                store: Arc::new(budget::BudgetedStore {
                    inner: store,
                    budget: None,
                    requests: AtomicU64::new(0),
                    tp: tp.clone(),
                }),
                tp,
                dir,
                config,
                replica,
                map: None,
                budget: None,
                permits: None,
                metadata: Arc::default(),
                cache,
                counters: Counters::default(),
                readahead: ReadAhead::default(),
                known: Mutex::new(refresh::Known::default()),
                view: RwLock::new(View {
                    segments: Arc::default(),
                    retention_point: 0,
                    writer_last_seq: None,
                    head_written_ms: None,
                    head: HeadStatus::Missing,
                    refreshed_at: Instant::now(),
                    missing: Arc::default(),
                    tail: Arc::default(),
                }),
                stats: ReplicaCounters::default(),
            },
        })
    }

    /// The partition served.
    pub fn topic_id_partition(&self) -> &TopicIdPartition {
        &self.tp
    }

    /// The remote segments served, as a read-only metadata manager (what a follower's tiered
    /// log reads from, [`TieredLog::open_follower`](crate::TieredLog::open_follower)).
    pub fn metadata(&self) -> Arc<ReplicaMetadata> {
        self.metadata.clone()
    }

    /// The read cache (shared when given to [`ReplicaBuilder::cache`]).
    pub fn cache(&self) -> &RemoteReadCache {
        &self.cache
    }

    /// The configuration.
    pub fn replica_config(&self) -> &ReplicaConfig {
        &self.replica
    }

    /// The remote segments served now, by start seq.
    pub fn segments(&self) -> Vec<RemoteLogSegmentMetadata> {
        self.view.read().segments.as_ref().clone()
    }

    /// Seq ranges the bucket's own records show finished that the view cannot serve (an
    /// object of their segment is missing or damaged), and the named gaps of the tail (a
    /// damaged tail entry, seqs no tail object holds), by seq.
    pub fn missing(&self) -> Vec<MissingSeqs> {
        all_missing(&self.view.read())
    }

    /// The view's freshness and the counters.
    pub fn stats(&self) -> ReplicaStats {
        let view = self.view.read().clone();
        let first_seq = view.first_seq();
        let last_seq = view.next_seq().saturating_sub(1);
        let since_refresh = view.refreshed_at.elapsed();
        let head_age = view.head_written_ms.map(|w| {
            let age = krabka_remote_storage::now_ms().saturating_sub(w);
            Duration::from_millis(u64::try_from(age).unwrap_or(0))
        });
        let s = &self.stats;
        let requests = self.counters.requests();
        ReplicaStats {
            first_seq,
            last_seq,
            missing: all_missing(&view),
            tail: view.tail.first().zip(view.tail.last()).map(|(a, b)| a..=b),
            retention_point: view.retention_point,
            writer_last_seq: view.writer_last_seq,
            lag_seqs: view
                .writer_last_seq
                .map_or(0, |w| w.saturating_sub(last_seq)),
            since_refresh,
            head_age,
            head: view.head.clone(),
            segments: view.segments.len(),
            refreshes: s.refreshes.load(Ordering::Relaxed),
            idle_refreshes: s.idle_refreshes.load(Ordering::Relaxed),
            full_listings: s.full_listings.load(Ordering::Relaxed),
            refresh_failures: s.refresh_failures.load(Ordering::Relaxed),
            refresh_requests: self.store.requests.load(Ordering::Relaxed),
            fetch_requests: requests.fetch_log
                + requests.fetch_index
                + self.readahead.requests.load(Ordering::Relaxed)
                + self.readahead.index_requests.load(Ordering::Relaxed),
        }
    }
}

/// The view's missing seqs and its tail's named gaps, by seq.
fn all_missing(view: &View) -> Vec<MissingSeqs> {
    let mut out = view.missing.as_ref().clone();
    out.extend(view.tail.gaps().cloned());
    out.sort_by_key(|m| m.from);
    out
}

/// A [`ReadReplica`] before its first view: [`ReadReplica::builder`], then the optional
/// settings, then [`open`](Self::open).
#[derive(Debug)]
pub struct ReplicaBuilder {
    pub(crate) inner: ReadReplica,
}

impl ReplicaBuilder {
    /// Passes every segment's metadata through `map` before it is served (a decorator over
    /// the backend restoring its metadata; a segment it refuses is a hole).
    #[must_use]
    pub fn map(mut self, map: SegmentMap) -> Self {
        self.inner.map = Some(map);
        self
    }

    /// Reads through `cache` (shared by many replicas: one byte budget).
    #[must_use]
    pub fn cache(mut self, cache: RemoteReadCache) -> Self {
        self.inner.cache = cache;
        self
    }

    /// Takes one token of `budget` before every request a refresh sends and every fetch a read
    /// sends (shared by many replicas: a request rate for the process). The replicas given one
    /// budget take their tokens one at a time, so their requests never outrun it, even in a
    /// burst of threads.
    #[must_use]
    pub fn request_budget(mut self, budget: Arc<ByteRateQuota>) -> Self {
        let shared = budget::Budget::of(budget.clone());
        self.inner.rsm = Arc::new(budget::Budgeted {
            inner: self.inner.backend.clone(),
            budget: Some(shared.clone()),
        });
        self.inner.store = Arc::new(budget::BudgetedStore {
            inner: self.inner.store.inner.clone(),
            budget: Some(shared),
            requests: AtomicU64::new(0),
            tp: self.inner.tp.clone(),
        });
        self.inner.budget = Some(budget);
        self
    }

    /// Builds the first view with a full listing.
    ///
    /// # Errors
    /// [`Error::Remote`] when the listing fails.
    pub fn open(self) -> Result<ReadReplica, Error> {
        let replica = self.inner;
        replica.refresh_full()?;
        Ok(replica)
    }
}

impl std::fmt::Debug for ReplicaCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaCounters").finish_non_exhaustive()
    }
}
