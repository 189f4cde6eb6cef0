//! [`TieringService`]: one service tiering many partitions on bounded pools.
//!
//! The service owns a small multi-thread Tokio runtime (so callers need no runtime of their
//! own): `worker_threads` async workers run the scheduler and timers; every blocking call (SPI,
//! metadata, local files) runs on the runtime's blocking pool, which holds at most
//! [`ServiceConfig::max_threads`] threads. Copies and retention take one of `copy_threads`
//! slots, reads one of `read_threads`; `read_queue` more reads may wait.
//!
//! Fairness: partitions take turns from one queue. A turn does one step of the partition's
//! round (of the round engine `run_once` and `spawn` run too, `crate::round`) — the first turn
//! cleans stale attempts, plans and copies the first segment, each later turn copies one more
//! segment, the last applies retention — and a partition with work left goes to the back of
//! the queue. A partition with a thousand segments to copy therefore delays
//! every other partition's first copy by at most one segment copy per slot.

mod admission;
mod partition;
mod scheduler;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use krabka_remote_storage::{RemoteStorageManager, TopicIdPartition};
use krabka_storage::Record;
use parking_lot::Mutex;
use tokio::runtime::Runtime;
use tokio::sync::{Notify, Semaphore, watch};

use self::partition::Partition;
use self::scheduler::Queues;
use crate::cache::RemoteReadCache;
use crate::config::{SPARE_BLOCKING_THREADS, ServiceConfig};
use crate::error::Error;
use crate::instrumented::Instrumented;
use crate::metrics::{self as m};
use crate::quota::ByteRateQuota;
use crate::tiered::TieredLog;

/// State shared by the service handle, the scheduler and every task.
pub(crate) struct Shared {
    pub(crate) config: ServiceConfig,
    pub(crate) partitions: Mutex<HashMap<TopicIdPartition, Arc<Partition>>>,
    pub(crate) queues: Mutex<Queues>,
    /// Wakes the scheduler: a partition became ready, or the service stops.
    pub(crate) wake: Notify,
    pub(crate) copy_slots: Arc<Semaphore>,
    pub(crate) read_slots: Arc<Semaphore>,
    /// Reads running or waiting.
    pub(crate) reads_pending: AtomicUsize,
    /// Turns running now.
    pub(crate) turns_running: AtomicUsize,
    pub(crate) copy_quota: Option<Arc<ByteRateQuota>>,
    pub(crate) fetch_quota: Option<Arc<ByteRateQuota>>,
    /// True once the service stops scheduling.
    pub(crate) stop: watch::Sender<bool>,
    /// True once in-flight copies must be abandoned (shutdown's deadline is near).
    pub(crate) cancel: watch::Sender<bool>,
    pub(crate) cache: RemoteReadCache,
}

/// What [`TieringService::shutdown`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Turns (copies, retention) still running when the deadline came; their copies were
    /// abandoned and are cleaned up when their calls return, or by the next round or open.
    pub abandoned_turns: usize,
    /// Whether everything, abandoned copies' cleanups included, ended within the deadline.
    pub clean: bool,
}

/// Tiers many partitions on bounded pools, with fair scheduling, per-operation deadlines,
/// byte-rate quotas and one shared cache. See docs/tiering.md ("Many
/// partitions") for the thread budget, scheduling, deadlines and quotas.
///
/// A partition added here must not also be driven by [`TieredLog::run_once`] or
/// [`TieredLog::spawn`]: such a call fails with [`ServiceError::RoundInProgress`](crate::ServiceError::RoundInProgress) while a turn runs,
/// and between turns it would race the service's plan.
pub struct TieringService {
    shared: Arc<Shared>,
    runtime: Option<Runtime>,
    /// The one tail writer of the service's partitions ([`tail_writer`](Self::tail_writer)).
    tail: Mutex<Option<crate::TailWriter>>,
}

impl std::fmt::Debug for TieringService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieringService")
            .field("config", &self.shared.config)
            .field("partitions", &self.shared.partitions.lock().len())
            .finish_non_exhaustive()
    }
}

impl TieringService {
    /// Starts a service: its runtime (threads named `krabka-tiering`) and its scheduler.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a config below a minimum; [`ServiceError::Task`](crate::ServiceError::Task) when the runtime
    /// cannot start (for example, no thread could be spawned).
    pub fn new(config: ServiceConfig) -> Result<Self, Error> {
        config.validate()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads)
            .max_blocking_threads(
                config.copy_threads + config.read_threads + SPARE_BLOCKING_THREADS,
            )
            .thread_name("krabka-tiering")
            .enable_time()
            .build()
            .map_err(|e| {
                Error::Service(crate::error::ServiceError::Task(format!(
                    "starting the tiering runtime: {e}"
                )))
            })?;
        let shared = Arc::new(Shared {
            partitions: Mutex::new(HashMap::new()),
            queues: Mutex::new(Queues::default()),
            wake: Notify::new(),
            copy_slots: Arc::new(Semaphore::new(config.copy_threads)),
            read_slots: Arc::new(Semaphore::new(config.read_threads)),
            reads_pending: AtomicUsize::new(0),
            turns_running: AtomicUsize::new(0),
            copy_quota: config
                .copy_bytes_per_second
                .map(|r| Arc::new(ByteRateQuota::new(r))),
            fetch_quota: config
                .fetch_bytes_per_second
                .map(|r| Arc::new(ByteRateQuota::new(r))),
            stop: watch::channel(false).0,
            cancel: watch::channel(false).0,
            cache: RemoteReadCache::with_read_limits(config.cache_bytes, config.read_limits()),
            config,
        });
        runtime.spawn(scheduler::run(shared.clone()));
        Ok(Self {
            shared,
            runtime: Some(runtime),
            tail: Mutex::new(None),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.shared.config
    }

    /// The remote read cache shared by the service's partitions: open each partition's
    /// [`TieredLog`] with [`TieredLog::with_cache`]`(service.cache().clone())` so that all of
    /// them stay within [`ServiceConfig::cache_bytes`] together, and their cold reads go
    /// through the service's one read engine (within [`ServiceConfig::read_fetch_threads`],
    /// [`ServiceConfig::read_bytes_in_flight`] and [`ServiceConfig::max_gets_per_sec`]).
    pub fn cache(&self) -> &RemoteReadCache {
        &self.shared.cache
    }

    /// Counters of the service's read engine: fetches and bytes in flight (and their high-water
    /// marks), read-ahead threads, time spent waiting for the GET budget.
    pub fn read_engine_stats(&self) -> crate::ReadEngineStats {
        self.shared.cache.read_engine_stats()
    }

    /// The service's one [`TailWriter`](crate::TailWriter) over `store`, started at the first
    /// call: open every partition with it
    /// ([`OpenOptions::tail_writer`](crate::partition::OpenOptions::tail_writer)) so that one
    /// tail object per window holds the new records of all of them, and PUTs per second do not
    /// grow with the number of partitions.
    ///
    /// # Errors
    /// As [`TailWriter::start`](crate::TailWriter::start); [`Error::InvalidArgument`] when the
    /// writer was started with another config.
    pub fn tail_writer(
        &self,
        store: Arc<dyn krabka_remote_storage::ownership::OwnershipStore>,
        config: crate::TailConfig,
    ) -> Result<crate::TailWriter, Error> {
        let mut tail = self.tail.lock();
        if let Some(writer) = &*tail {
            if writer.config() != &config {
                return Err(Error::InvalidArgument(format!(
                    "the service's tail writer runs with {:?}, not {config:?}",
                    writer.config()
                )));
            }
            return Ok(writer.clone());
        }
        let writer = crate::TailWriter::start(store, config)?;
        *tail = Some(writer.clone());
        Ok(writer)
    }

    /// Wraps a backend in [`Instrumented`] bound to the service's fetch quota (when one is
    /// configured): build partitions on it so that every call is measured and fetches obey
    /// [`ServiceConfig::fetch_bytes_per_second`].
    pub fn instrument<R: RemoteStorageManager>(&self, backend: R) -> Instrumented<R> {
        let wrapped = Instrumented::new(backend);
        match &self.shared.fetch_quota {
            Some(q) => wrapped.with_fetch_quota(q.clone()),
            None => wrapped,
        }
    }

    /// Adds a partition: its first round is scheduled right away.
    ///
    /// # Errors
    /// [`ServiceError::PartitionExists`](crate::ServiceError::PartitionExists) when a log of the same partition is in the service;
    /// [`ServiceError::ServiceStopped`](crate::ServiceError::ServiceStopped) after [`shutdown`](Self::shutdown) began.
    pub fn add(&self, log: Arc<TieredLog>) -> Result<(), Error> {
        if *self.shared.stop.borrow() {
            return Err(Error::Service(crate::error::ServiceError::ServiceStopped));
        }
        let tp = log.topic_id_partition().clone();
        let part = {
            let mut parts = self.shared.partitions.lock();
            if parts.contains_key(&tp) {
                return Err(Error::Service(crate::error::ServiceError::PartitionExists(
                    tp,
                )));
            }
            let part = Arc::new(Partition::new(log));
            parts.insert(tp, part.clone());
            ::metrics::gauge!(m::PARTITIONS).set(parts.len() as f64);
            part
        };
        self.shared.queues.lock().push_ready(part);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// The partitions in the service.
    pub fn partitions(&self) -> Vec<TopicIdPartition> {
        self.shared.partitions.lock().keys().cloned().collect()
    }

    /// The log of a partition in the service.
    pub fn get(&self, tp: &TopicIdPartition) -> Option<Arc<TieredLog>> {
        self.shared.partitions.lock().get(tp).map(|p| p.log.clone())
    }

    /// Removes a partition: no new turn or read starts on it, then this waits for its turn and
    /// reads in flight, and for its abandoned copies' cleanups (each at most one copy
    /// deadline), and returns its log.
    ///
    /// # Errors
    /// [`ServiceError::UnknownPartition`](crate::ServiceError::UnknownPartition) when it is not in the service; [`ServiceError::ServiceStopped`](crate::ServiceError::ServiceStopped)
    /// when the runtime is gone.
    pub fn remove(&self, tp: &TopicIdPartition) -> Result<Arc<TieredLog>, Error> {
        let part = {
            let mut parts = self.shared.partitions.lock();
            let part = parts.remove(tp).ok_or_else(|| {
                Error::Service(crate::error::ServiceError::UnknownPartition(tp.clone()))
            })?;
            ::metrics::gauge!(m::PARTITIONS).set(parts.len() as f64);
            part
        };
        self.block_on(async move {
            part.retire().await;
            part.log.clone()
        })
    }

    /// Reads up to `max` records from `from_seq` of partition `tp` ([`TieredLog::read`]) on
    /// the reader pool, blocking the calling thread (which need not belong to a runtime).
    ///
    /// A read whose first records the local log or the shared cache holds is served at once,
    /// without waiting for a reader slot: it then ends where the cached bytes do, with fewer
    /// than `max` records when the rest is not cached yet (the next read, from where it ended,
    /// fetches it). A read that must fetch awaits its fetches on the read engine without a
    /// thread or a slot, and takes a slot only to decode what was fetched.
    ///
    /// # Errors
    /// [`ServiceError::UnknownPartition`](crate::ServiceError::UnknownPartition); [`ReadError::ReaderQueueFull`](crate::ReadError::ReaderQueueFull) when `read_threads +
    /// read_queue` reads are already running or waiting; [`ReadError::FetchDeadlineExceeded`](crate::ReadError::FetchDeadlineExceeded)
    /// after [`ServiceConfig::fetch_deadline`]; [`ServiceError::ServiceStopped`](crate::ServiceError::ServiceStopped); as
    /// [`TieredLog::read`].
    pub fn read(
        &self,
        tp: &TopicIdPartition,
        from_seq: u64,
        max: usize,
    ) -> Result<Vec<Record>, Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit_read(tp, from_seq, max, admission::Reply::Sync(tx))?;
        let deadline = self.shared.config.fetch_deadline;
        match rx.recv_timeout(deadline) {
            Ok(result) => result,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(Error::Read(
                crate::error::ReadError::FetchDeadlineExceeded {
                    partition: tp.clone(),
                    seq: from_seq,
                    deadline,
                },
            )),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(Error::Service(crate::error::ServiceError::ServiceStopped))
            }
        }
    }

    /// [`read`](Self::read) for async callers (any runtime): awaits instead of blocking.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn read_async(
        &self,
        tp: &TopicIdPartition,
        from_seq: u64,
        max: usize,
    ) -> Result<Vec<Record>, Error> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit_read(tp, from_seq, max, admission::Reply::Async(tx))?;
        let deadline = self.shared.config.fetch_deadline;
        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::Service(crate::error::ServiceError::ServiceStopped)),
            Err(_) => Err(Error::Read(
                crate::error::ReadError::FetchDeadlineExceeded {
                    partition: tp.clone(),
                    seq: from_seq,
                    deadline,
                },
            )),
        }
    }

    fn submit_read(
        &self,
        tp: &TopicIdPartition,
        from_seq: u64,
        max: usize,
        reply: admission::Reply,
    ) -> Result<(), Error> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or(Error::Service(crate::error::ServiceError::ServiceStopped))?;
        let part = self
            .shared
            .partitions
            .lock()
            .get(tp)
            .cloned()
            .ok_or_else(|| {
                Error::Service(crate::error::ServiceError::UnknownPartition(tp.clone()))
            })?;
        admission::submit(&self.shared, runtime.handle(), part, from_seq, max, reply)
    }

    /// Reads running or waiting in the reader pool now.
    pub fn reader_queue_size(&self) -> usize {
        self.shared.reads_pending.load(Ordering::Acquire)
    }

    /// Stops the service within `deadline`: no new turn starts; turns in flight get about
    /// three quarters of it to finish, then their copies are abandoned (cleaned up when their
    /// calls return); the rest waits for those cleanups. Partitions stay open (their logs are
    /// the caller's); nothing is left half-done in the metadata that the next round or open
    /// does not clean up.
    pub fn shutdown(mut self, deadline: Duration) -> ShutdownReport {
        let Some(runtime) = self.runtime.take() else {
            return ShutdownReport::default();
        };
        let start = Instant::now();
        let shared = self.shared.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(scheduler::drain(shared, deadline).await);
        });
        let report = rx
            .recv_timeout(deadline + Duration::from_millis(100))
            .unwrap_or_default();
        if tokio::runtime::Handle::try_current().is_ok() {
            // Dropping a runtime may not block inside another one.
            runtime.shutdown_background();
        } else {
            runtime.shutdown_timeout(deadline.saturating_sub(start.elapsed()));
        }
        report
    }

    /// Runs `fut` on the service's runtime and blocks until it ends (from any thread, inside
    /// another runtime too).
    fn block_on<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, Error> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or(Error::Service(crate::error::ServiceError::ServiceStopped))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .map_err(|_| Error::Service(crate::error::ServiceError::ServiceStopped))
    }
}

impl Drop for TieringService {
    fn drop(&mut self) {
        let _ = self.shared.stop.send(true);
        let _ = self.shared.cancel.send(true);
        self.shared.wake.notify_one();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
