//! [`ReplicaGroup`]: many read replicas in one process, sharing one read cache, one request
//! budget and a bounded number of refreshes at once (so of refresh requests in flight).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::{RemoteStorageManager, TopicIdPartition};
use parking_lot::{Mutex, RwLock};

use super::{ReadReplica, ReplicaConfig};
use crate::cache::RemoteReadCache;
use crate::config::{DEFAULT_CACHE_BYTES, TieringConfig};
use crate::error::Error;
use crate::quota::ByteRateQuota;

/// Default [`ReplicaGroupConfig::refresh_threads`].
pub const DEFAULT_REFRESH_THREADS: usize = 4;

/// How a [`ReplicaGroup`] shares its limits.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReplicaGroupConfig {
    /// Threads refreshing due replicas, and the most refreshes of the group's replicas that run
    /// at once, whoever calls them (1..=64): refresh requests in flight are at most this many
    /// times [`ReplicaConfig::scan_concurrency`] (one per refresh while heads are current).
    /// Default [`DEFAULT_REFRESH_THREADS`].
    pub refresh_threads: usize,
    /// Requests per second the group's replicas may send, refreshes and read fetches together
    /// (a token bucket with 100 ms of burst); `None`: unlimited. Default `None`.
    pub requests_per_second: Option<u64>,
    /// Bytes of the read cache every replica of the group shares. Default
    /// [`DEFAULT_CACHE_BYTES`].
    pub cache_bytes: u64,
}

impl Default for ReplicaGroupConfig {
    fn default() -> Self {
        Self {
            refresh_threads: DEFAULT_REFRESH_THREADS,
            requests_per_second: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// What one [`ReplicaGroup::refresh_due`] pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupRefresh {
    /// Replicas whose view was due and refreshed.
    pub refreshed: usize,
    /// Replicas whose refresh failed (their previous view is kept).
    pub failed: usize,
}

/// Many partitions' read replicas with shared limits, refreshed in the background once
/// [`start`](Self::start)ed (or by [`refresh_due`](Self::refresh_due) calls).
pub struct ReplicaGroup {
    config: ReplicaGroupConfig,
    cache: RemoteReadCache,
    budget: Option<Arc<ByteRateQuota>>,
    permits: Arc<RefreshPermits>,
    replicas: RwLock<HashMap<TopicIdPartition, Arc<ReadReplica>>>,
    stop: Arc<AtomicBool>,
    /// The refresher's and the sampler's threads, once started.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for ReplicaGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaGroup")
            .field("config", &self.config)
            .field("replicas", &self.replicas.read().len())
            .finish_non_exhaustive()
    }
}

impl ReplicaGroup {
    /// An empty group.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a field out of range.
    pub fn new(config: ReplicaGroupConfig) -> Result<Arc<Self>, Error> {
        if !(1..=64).contains(&config.refresh_threads) {
            return Err(Error::InvalidConfig(format!(
                "refresh_threads {} is outside 1..=64",
                config.refresh_threads
            )));
        }
        if config.requests_per_second == Some(0) {
            return Err(Error::InvalidConfig(
                "requests_per_second must be at least 1".into(),
            ));
        }
        Ok(Arc::new(Self {
            cache: RemoteReadCache::new(config.cache_bytes),
            budget: config
                .requests_per_second
                .map(|r| Arc::new(ByteRateQuota::new(r))),
            permits: Arc::new(RefreshPermits::new(config.refresh_threads)),
            config,
            replicas: RwLock::new(HashMap::new()),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
        }))
    }

    /// Opens a replica of `tp` in the group (its first view a full listing), reading through
    /// the group's cache and budget.
    ///
    /// # Errors
    /// [`ServiceError::PartitionExists`](crate::ServiceError::PartitionExists) when the group serves `tp` already; as
    /// [`ReadReplica::open`].
    pub fn open(
        &self,
        rsm: Arc<dyn RemoteStorageManager>,
        store: Arc<dyn OwnershipStore>,
        tp: TopicIdPartition,
        config: TieringConfig,
        replica: ReplicaConfig,
    ) -> Result<Arc<ReadReplica>, Error> {
        if self.replicas.read().contains_key(&tp) {
            return Err(Error::Service(crate::error::ServiceError::PartitionExists(
                tp,
            )));
        }
        let mut builder = ReadReplica::builder(rsm, store, tp.clone(), config, replica)?
            .cache(self.cache.clone());
        if let Some(budget) = &self.budget {
            builder = builder.request_budget(budget.clone());
        }
        builder.inner.permits = Some(self.permits.clone());
        let replica = Arc::new(builder.open()?);
        let mut replicas = self.replicas.write();
        if replicas.contains_key(&tp) {
            return Err(Error::Service(crate::error::ServiceError::PartitionExists(
                tp,
            )));
        }
        replicas.insert(tp, replica.clone());
        Ok(replica)
    }

    /// The replica of `tp`, when the group serves it.
    pub fn get(&self, tp: &TopicIdPartition) -> Option<Arc<ReadReplica>> {
        self.replicas.read().get(tp).cloned()
    }

    /// The partitions served.
    pub fn partitions(&self) -> Vec<TopicIdPartition> {
        self.replicas.read().keys().cloned().collect()
    }

    /// Stops serving `tp`; readers holding its replica keep it.
    pub fn remove(&self, tp: &TopicIdPartition) -> Option<Arc<ReadReplica>> {
        self.replicas.write().remove(tp)
    }

    /// The shared read cache.
    pub fn cache(&self) -> &RemoteReadCache {
        &self.cache
    }

    /// Refreshes every replica whose view is due, on at most
    /// [`ReplicaGroupConfig::refresh_threads`] threads. A replica whose last refresh failed
    /// is tried again once its refresh interval passed, not at every call.
    pub fn refresh_due(&self) -> GroupRefresh {
        let due: Vec<Arc<ReadReplica>> = self
            .replicas
            .read()
            .values()
            .filter(|r| r.view.read().refreshed_at.elapsed() >= r.replica.refresh_interval)
            .cloned()
            .collect();
        let next = AtomicUsize::new(0);
        let refreshed = AtomicUsize::new(0);
        let failed = AtomicUsize::new(0);
        let threads = self.config.refresh_threads.min(due.len());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    while let Some(r) = due.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if self.stop.load(Ordering::Acquire) {
                            break;
                        }
                        match r.refresh_when_due() {
                            // Refreshed meanwhile (a read did), or failed under an interval ago.
                            None => {}
                            Some(Ok(_)) => {
                                refreshed.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(Err(e)) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(partition = %r.tp, error = %e,
                                    "read replica refresh failed; serving the previous view");
                            }
                        }
                    }
                });
            }
        });
        GroupRefresh {
            refreshed: refreshed.into_inner(),
            failed: failed.into_inner(),
        }
    }

    /// Starts a thread that refreshes due replicas until the group is dropped or
    /// [`stop`](Self::stop)ped: it looks every quarter of the shortest refresh interval
    /// (between 1 ms and 1 s). Another samples the lag gauges ([`publish_metrics`](
    /// Self::publish_metrics)) as often, whatever the refreshes do: one stuck in retries
    /// against a bucket that is down does not stop its staleness being seen to grow.
    pub fn start(self: &Arc<Self>) {
        let mut threads = self.threads.lock();
        if !threads.is_empty() {
            return;
        }
        threads.push(self.spawn_ticks(|g| {
            g.refresh_due();
        }));
        threads.push(self.spawn_ticks(Self::publish_metrics));
    }

    /// A thread running `pass` every [`tick`](Self::tick) until the group is dropped or
    /// stopped.
    fn spawn_ticks(self: &Arc<Self>, pass: fn(&Self)) -> JoinHandle<()> {
        let group = Arc::downgrade(self);
        let stop = self.stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let Some(g) = group.upgrade() else { break };
                let started = Instant::now();
                pass(&g);
                let tick = g.tick();
                drop(g);
                let until = started + tick;
                while !stop.load(Ordering::Acquire) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10).min(tick));
                }
            }
        })
    }

    /// Stops the background refreshes and sampling and waits for their threads.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            // The group may be dropped by one of its own threads.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// Samples every replica's lag gauges (no I/O): a view nobody reads still shows its
    /// staleness growing while its refreshes fail.
    pub fn publish_metrics(&self) {
        let replicas: Vec<Arc<ReadReplica>> = self.replicas.read().values().cloned().collect();
        for r in replicas {
            crate::metrics::publish_replica(&r.tp, &r.stats());
        }
    }

    /// How often the refresher looks for due replicas.
    fn tick(&self) -> Duration {
        self.replicas
            .read()
            .values()
            .map(|r| r.replica.refresh_interval / 4)
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(1), Duration::from_secs(1))
    }
}

impl Drop for ReplicaGroup {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The refreshes a group lets run at once, whichever thread (the refresher, a reader) calls
/// them: a counting semaphore.
#[derive(Debug)]
pub(crate) struct RefreshPermits {
    free: Mutex<usize>,
    freed: parking_lot::Condvar,
}

/// One refresh's permit, given back when dropped.
pub(crate) struct Permit<'a>(&'a RefreshPermits);

impl RefreshPermits {
    pub(crate) fn new(permits: usize) -> Self {
        Self {
            free: Mutex::new(permits.max(1)),
            freed: parking_lot::Condvar::new(),
        }
    }

    /// A free permit, when there is one now.
    pub(crate) fn try_acquire(&self) -> Option<Permit<'_>> {
        let mut free = self.free.lock();
        if *free == 0 {
            return None;
        }
        *free -= 1;
        Some(Permit(self))
    }

    /// Waits for a free permit.
    pub(crate) fn acquire(&self) -> Permit<'_> {
        let mut free = self.free.lock();
        while *free == 0 {
            self.freed.wait(&mut free);
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock() += 1;
        self.0.freed.notify_one();
    }
}
