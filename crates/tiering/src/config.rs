//! [`TieringConfig`]: every knob of a [`TieredLog`](crate::TieredLog), with its default and minimum.

use std::time::Duration;

use krabka_remote_storage::DEFAULT_CUSTOM_METADATA_MAX_BYTES;
use krabka_storage::Options;
use krabka_storage::segment::{BATCH_HEADER_LEN, MAX_BATCH_RECORD_BYTES};

use crate::error::Error;

/// Default [`TieringConfig::local_retention_bytes`]: 1 GiB.
pub const DEFAULT_LOCAL_RETENTION_BYTES: u64 = 1 << 30;
/// Default [`TieringConfig::retention_ms`]: 7 days.
pub const DEFAULT_RETENTION_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// Default [`TieringConfig::copy_concurrency`].
pub const DEFAULT_COPY_CONCURRENCY: usize = 8;
/// Default [`TieringConfig::copy_deadline`]: 5 minutes.
pub const DEFAULT_COPY_DEADLINE: Duration = Duration::from_secs(300);
/// Largest accepted [`TieringConfig::fetch_deadline`]: one day.
pub const MAX_FETCH_DEADLINE: Duration = Duration::from_secs(24 * 3600);
/// Default [`TieringConfig::cache_bytes`]: 64 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;
/// Default [`TieringConfig::chunk_bytes`]: 1 MiB.
pub const DEFAULT_CHUNK_BYTES: u32 = 1 << 20;
/// Smallest accepted [`TieringConfig::chunk_bytes`].
pub const MIN_CHUNK_BYTES: u32 = 64;

/// Largest segment (bytes of its `.log` file) a [`TieredLog`](crate::TieredLog) can tier: the
/// remote storage interface addresses bytes of a segment with `u32` positions, so a larger
/// segment could never be read back (or, past the first 4 GiB, even fetched).
pub const MAX_SEGMENT_BYTES: u64 = u32::MAX as u64;

/// Checks that the local log's `options` keep every segment within [`MAX_SEGMENT_BYTES`].
///
/// A segment grows to at most `max_bytes` (0 means the storage default), except that a batch
/// larger than that gets a segment of its own: a batch of one record is at most
/// `max_message_bytes` bytes (the limit is measured on it), one of several at most
/// [`MAX_BATCH_RECORD_BYTES`] of records after its header. Both bounds must fit.
///
/// # Errors
/// [`Error::InvalidConfig`] naming the option that allows larger segments.
pub fn validate_log_options(options: &Options) -> Result<(), Error> {
    let max_bytes = match options.max_bytes {
        0 => krabka_storage::DEFAULT_MAX_BYTES,
        n => n,
    };
    if max_bytes > MAX_SEGMENT_BYTES {
        return Err(Error::InvalidConfig(format!(
            "the local log's max_bytes ({max_bytes}) exceeds {MAX_SEGMENT_BYTES}, the largest \
             segment the remote tier can address"
        )));
    }
    let largest_batch = options
        .max_message_bytes
        .max((BATCH_HEADER_LEN + MAX_BATCH_RECORD_BYTES) as u64);
    if largest_batch > MAX_SEGMENT_BYTES {
        return Err(Error::InvalidConfig(format!(
            "the local log's max_message_bytes ({}) allows a {largest_batch}-byte segment, over \
             {MAX_SEGMENT_BYTES}, the largest the remote tier can address; use at most \
             {MAX_SEGMENT_BYTES}",
            options.max_message_bytes,
        )));
    }
    Ok(())
}

/// Configuration of a [`TieredLog`](crate::TieredLog). Build it with struct update syntax:
/// `TieringConfig { local_retention_bytes: Some(1 << 20), ..TieringConfig::default() }`.
///
/// Ages compare the newest record timestamp of a segment (`Message::timestamp`, ms since the
/// epoch) with the wall clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TieringConfig {
    /// Local bytes (all segment files) above which the oldest segments *with a finished remote
    /// copy* are deleted locally. `None`: no size limit. Default: `Some(1 GiB)`. Minimum: 0 (keep
    /// only the active segment and whatever is not yet safely remote).
    pub local_retention_bytes: Option<u64>,
    /// Age above which local segments *with a finished remote copy* are deleted locally.
    /// `None`: no age limit. Default: `None`. Minimum: 0.
    pub local_retention_ms: Option<u64>,
    /// Bytes of the whole log (finished remote segments plus local segments not yet remote)
    /// above which the oldest remote segments are deleted. `None`: no size limit. Default:
    /// `None`. Minimum: 0.
    pub retention_bytes: Option<u64>,
    /// Age above which remote segments are deleted (and the log's first seq moves past them).
    /// `None`: no age limit. Default: 7 days. Minimum: 0.
    pub retention_ms: Option<u64>,
    /// Copies one round of [`TieredLog::run_once`](crate::TieredLog::run_once) or of the
    /// background task runs at once (a [`TieringService`](crate::TieringService) runs one copy
    /// per partition at a time); every engine still finishes them in seq order. Default: 2.
    /// Minimum: 1.
    pub copy_concurrency: usize,
    /// How long the background task waits for one copy before abandoning it; the segment is
    /// copied again next round under a new id, and the abandoned attempt's objects are deleted
    /// when its call returns. Default: 5 minutes. Minimum: 1 ms. Maximum: 6 hours
    /// ([`COPY_ABANDON_AFTER_MS`](krabka_remote_storage::manifest::COPY_ABANDON_AFTER_MS): a
    /// copy older than that is never recorded as finished, by any engine).
    pub copy_deadline: Duration,
    /// How long a read waits for a fetch of the same remote chunk or index that another thread
    /// (a reader or the read-ahead) started: every remote fetch is single-flight, so a reader
    /// missing an entry being fetched waits for that fetch and takes its result, instead of
    /// sending a second request for the same bytes. Past this the read fails with
    /// [`Error::FetchWaitExceeded`](crate::ReadError::FetchWaitExceeded) (a fetch that failed is
    /// retried by the waiter at once, which then reports its own error). Default: 30 seconds.
    /// Minimum: 1 ms. Maximum: one day.
    pub fetch_deadline: Duration,
    /// Bytes of the LRU cache of remote offset indexes and data chunks. Default: 64 MiB.
    /// Minimum: 0 (no caching: every remote read fetches).
    pub cache_bytes: u64,
    /// Size of the aligned chunks remote data is fetched and cached in. Default: 1 MiB.
    /// Minimum: 64 bytes.
    pub chunk_bytes: u32,
    /// Whether a sequential remote read (one continuing an earlier read, or crossing a chunk
    /// boundary) has the next chunks fetched in the background, across segment boundaries.
    /// Default: `true`.
    pub prefetch: bool,
    /// Broker (process) id recorded on remote metadata. Default: 0.
    pub broker_id: i32,
    /// Leader epoch recorded for copied segments (`{epoch: start seq}`) until the caller records
    /// newer epochs with [`TieredLog::set_leader_epoch`](crate::TieredLog::set_leader_epoch);
    /// there is no leader election in this library. Default: 0. Minimum: 0.
    pub leader_epoch: i32,
    /// Largest custom metadata a backend may return from a copy; a larger one fails the copy.
    /// Default: 128 bytes. Minimum: 0.
    pub custom_metadata_max_bytes: usize,
    /// Uploads of the active segment's records as tail objects (`docs/tiering.md`, "The tail
    /// in the bucket"): with `Some`, a log opened as the owner through
    /// [`PartitionDir::open`](crate::PartitionDir::open) attaches to a
    /// [`TailWriter`](crate::TailWriter). Default: `None` (only closed segments are copied).
    pub tail: Option<crate::TailConfig>,
    /// When an append returns. Default: [`Durability::Local`](crate::Durability::Local);
    /// [`Durability::Bucket`](crate::Durability::Bucket) needs `tail`.
    pub durability: crate::Durability,
    /// Without a tail, the longest a record may stay in the local log only: a round rolls
    /// an active segment whose first record is older, so that it is copied (Kafka's
    /// `remote.copy.lag.ms` bound, reached by rolling). `None`: no bound (a segment is copied
    /// once it fills). Default: `None`. Minimum: 10 ms. With a tail the bound is its
    /// interval.
    pub max_upload_lag: Option<Duration>,
}

/// Smallest [`TieringConfig::max_upload_lag`]: 10 ms.
pub const MIN_MAX_UPLOAD_LAG: Duration = Duration::from_millis(10);

impl Default for TieringConfig {
    fn default() -> Self {
        Self {
            local_retention_bytes: Some(DEFAULT_LOCAL_RETENTION_BYTES),
            local_retention_ms: None,
            retention_bytes: None,
            retention_ms: Some(DEFAULT_RETENTION_MS),
            copy_concurrency: DEFAULT_COPY_CONCURRENCY,
            copy_deadline: DEFAULT_COPY_DEADLINE,
            fetch_deadline: DEFAULT_FETCH_DEADLINE,
            cache_bytes: DEFAULT_CACHE_BYTES,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            prefetch: true,
            broker_id: 0,
            leader_epoch: 0,
            custom_metadata_max_bytes: DEFAULT_CUSTOM_METADATA_MAX_BYTES,
            tail: None,
            durability: crate::Durability::Local,
            max_upload_lag: None,
        }
    }
}

impl TieringConfig {
    /// Checks every minimum.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.copy_concurrency == 0 {
            return bad("copy_concurrency must be at least 1".into());
        }
        let abandon = Duration::from_millis(
            krabka_remote_storage::manifest::COPY_ABANDON_AFTER_MS.unsigned_abs(),
        );
        if self.copy_deadline < Duration::from_millis(1) || self.copy_deadline > abandon {
            return bad(format!(
                "copy_deadline must be between 1 ms and {abandon:?} (after which a copy counts \
                 as abandoned in the remote tier), got {:?}",
                self.copy_deadline
            ));
        }
        if self.fetch_deadline < Duration::from_millis(1)
            || self.fetch_deadline > MAX_FETCH_DEADLINE
        {
            return bad(format!(
                "fetch_deadline must be between 1 ms and {MAX_FETCH_DEADLINE:?}, got {:?}",
                self.fetch_deadline
            ));
        }
        if self.chunk_bytes < MIN_CHUNK_BYTES {
            return bad(format!(
                "chunk_bytes must be at least {MIN_CHUNK_BYTES}, got {}",
                self.chunk_bytes
            ));
        }
        if self.leader_epoch < 0 {
            return bad(format!(
                "leader_epoch must not be negative, got {}",
                self.leader_epoch
            ));
        }
        if let Some(tail) = &self.tail {
            tail.validate()?;
        }
        if self.durability == crate::Durability::Bucket && self.tail.is_none() {
            return bad("durability Bucket needs a tail config (`tail: Some(..)`)".into());
        }
        if let Some(lag) = self.max_upload_lag
            && !(MIN_MAX_UPLOAD_LAG..=crate::tail::config::MAX_TAIL_DURATION.saturating_mul(365))
                .contains(&lag)
        {
            return bad(format!(
                "max_upload_lag must be between {MIN_MAX_UPLOAD_LAG:?} and 365 days, got {lag:?}"
            ));
        }
        Ok(())
    }
}

/// Default [`ServiceConfig::copy_threads`].
pub const DEFAULT_COPY_THREADS: usize = 2;
/// Default [`ServiceConfig::read_threads`].
pub const DEFAULT_READ_THREADS: usize = 2;
/// Default [`ServiceConfig::read_queue`].
pub const DEFAULT_READ_QUEUE: usize = 64;
/// Default [`ServiceConfig::worker_threads`].
pub const DEFAULT_WORKER_THREADS: usize = 1;
/// Default [`ServiceConfig::round_interval`]: 30 seconds.
pub const DEFAULT_ROUND_INTERVAL: Duration = Duration::from_secs(30);
/// Default [`ServiceConfig::delete_deadline`]: 2 minutes.
pub const DEFAULT_DELETE_DEADLINE: Duration = Duration::from_secs(120);
/// Default [`ServiceConfig::fetch_deadline`] and [`TieringConfig::fetch_deadline`]: 30 seconds.
pub const DEFAULT_FETCH_DEADLINE: Duration = Duration::from_secs(30);
/// Blocking threads a [`TieringService`](crate::TieringService) allows beyond its two pools:
/// copies abandoned at their deadline keep their thread until the backend returns, and their
/// cleanup needs one.
pub const SPARE_BLOCKING_THREADS: usize = 4;

/// Configuration of a [`TieringService`](crate::TieringService): its pools, queue, deadlines,
/// quotas and shared cache. Build it with struct update syntax.
///
/// Thread budget: `worker_threads` async workers (the scheduler and timers; they never block)
/// plus at most `copy_threads + read_threads +` [`SPARE_BLOCKING_THREADS`] blocking threads,
/// plus at most `read_fetch_threads` read-ahead threads of the read engine of
/// [`TieringService::cache`](crate::TieringService::cache), plus the `backend_threads` the
/// remote backend runs of its own (the S3 backend's runtime: `S3Config::max_threads()`),
/// whatever the number of partitions ([`max_threads`](Self::max_threads)). Each local log may
/// add one `krabka-flusher` thread under `SyncPolicy::Interval`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Copies, stale cleanups and retention deletes running at once, over all partitions.
    /// Default: 2. Minimum: 1.
    pub copy_threads: usize,
    /// Remote reads running at once. Default: 2. Minimum: 1.
    pub read_threads: usize,
    /// Reads waiting for a reader thread; one more is refused with
    /// [`ReadError::ReaderQueueFull`](crate::ReadError::ReaderQueueFull). Default: 64. Minimum: 0.
    pub read_queue: usize,
    /// Async worker threads of the service's runtime. Default: 1. Minimum: 1.
    pub worker_threads: usize,
    /// Pause between the end of a partition's round and the start of its next one. Default:
    /// 30 s. Minimum: 1 ms.
    pub round_interval: Duration,
    /// How long one segment copy may run before it is abandoned (its objects are deleted when
    /// the call returns, and the segment is copied again under a new id). Default: 5 minutes.
    /// Minimum: 1 ms. Maximum: 6 hours (as [`TieringConfig::copy_deadline`]).
    pub copy_deadline: Duration,
    /// How long one partition's retention (its remote deletes) may run. Default: 2 minutes.
    /// Minimum: 1 ms.
    pub delete_deadline: Duration,
    /// How long a read through the service may take, queue wait included. Default: 30 s.
    /// Minimum: 1 ms.
    pub fetch_deadline: Duration,
    /// Copy quota in bytes per second over all partitions, charged per segment before its copy
    /// (Kafka's `remote.log.manager.copy.max.bytes.per.second`). `None`: unlimited. Default:
    /// `None`. Minimum: 1.
    pub copy_bytes_per_second: Option<u64>,
    /// Fetch quota in bytes per second over all partitions, charged per byte fetched (Kafka's
    /// `remote.log.manager.fetch.max.bytes.per.second`); applies to backends built with
    /// [`TieringService::instrument`](crate::TieringService::instrument). `None`: unlimited.
    /// Default: `None`. Minimum: 1.
    pub fetch_bytes_per_second: Option<u64>,
    /// Bytes of the remote read cache shared by every partition opened with
    /// [`TieringService::cache`](crate::TieringService::cache). Default: 64 MiB. Minimum: 0.
    pub cache_bytes: u64,
    /// Remote fetches of cold reads in flight at once over every partition opened with
    /// [`TieringService::cache`](crate::TieringService::cache) (readers' own fetches and
    /// read-ahead), and the most read-ahead threads the service's read engine starts
    /// ([`ReadLimits::threads`](crate::ReadLimits::threads)). Default: 6. Minimum: 1.
    pub read_fetch_threads: usize,
    /// Bytes of data ranges those fetches have in flight at once (a single fetch larger than
    /// this runs alone; [`ReadLimits::bytes_in_flight`](crate::ReadLimits::bytes_in_flight)).
    /// Default: 16 MiB. Minimum: 1.
    pub read_bytes_in_flight: u64,
    /// GETs (data and index fetches of cold reads) per second over the same partitions, a token
    /// bucket taken one fetch at a time; the time fetches wait for it is
    /// [`ReadEngineStats::get_budget_wait`](crate::ReadEngineStats::get_budget_wait). `None`:
    /// unlimited. Default: `None`. Minimum: 1.
    pub max_gets_per_sec: Option<u32>,
    /// Threads the partitions' remote backend runs of its own, outside the service's pools,
    /// counted in [`max_threads`](Self::max_threads): for the S3 backend with its own runtime
    /// (`S3RemoteStorage::new`), its `S3Config::max_threads()` (workers plus its bounded
    /// blocking pool; 4 by default); 0 for a backend that runs on its caller's thread (the fs
    /// backend) or on a runtime already counted. The service does not start them: this only
    /// states the bound the backend's own configuration enforces. Default: 0.
    pub backend_threads: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            copy_threads: DEFAULT_COPY_THREADS,
            read_threads: DEFAULT_READ_THREADS,
            read_queue: DEFAULT_READ_QUEUE,
            worker_threads: DEFAULT_WORKER_THREADS,
            round_interval: DEFAULT_ROUND_INTERVAL,
            copy_deadline: DEFAULT_COPY_DEADLINE,
            delete_deadline: DEFAULT_DELETE_DEADLINE,
            fetch_deadline: DEFAULT_FETCH_DEADLINE,
            copy_bytes_per_second: None,
            fetch_bytes_per_second: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            read_fetch_threads: crate::read::engine::DEFAULT_READ_FETCH_THREADS,
            read_bytes_in_flight: crate::read::engine::DEFAULT_READ_BYTES_IN_FLIGHT,
            max_gets_per_sec: None,
            backend_threads: 0,
        }
    }
}

impl ServiceConfig {
    /// The most threads the service and its backend run: the service's runtime's workers, both
    /// pools and the spare, its read engine's read-ahead threads, and the backend's own
    /// [`backend_threads`](Self::backend_threads).
    pub fn max_threads(&self) -> usize {
        self.worker_threads
            + self.copy_threads
            + self.read_threads
            + SPARE_BLOCKING_THREADS
            + self.read_fetch_threads
            + self.backend_threads
    }

    /// The bounds of the service's read engine.
    pub fn read_limits(&self) -> crate::ReadLimits {
        crate::ReadLimits {
            threads: self.read_fetch_threads,
            bytes_in_flight: self.read_bytes_in_flight,
            gets_per_second: self.max_gets_per_sec,
            ..crate::ReadLimits::default()
        }
    }

    /// Checks every minimum.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        for (name, v) in [
            ("copy_threads", self.copy_threads),
            ("read_threads", self.read_threads),
            ("worker_threads", self.worker_threads),
            ("read_fetch_threads", self.read_fetch_threads),
        ] {
            if v == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        for (name, d) in [
            ("round_interval", self.round_interval),
            ("copy_deadline", self.copy_deadline),
            ("delete_deadline", self.delete_deadline),
            ("fetch_deadline", self.fetch_deadline),
        ] {
            if d < Duration::from_millis(1) {
                return bad(format!("{name} must be at least 1 ms, got {d:?}"));
            }
        }
        let abandon = Duration::from_millis(
            krabka_remote_storage::manifest::COPY_ABANDON_AFTER_MS.unsigned_abs(),
        );
        if self.copy_deadline > abandon {
            return bad(format!(
                "copy_deadline must be at most {abandon:?} (after which a copy counts as \
                 abandoned in the remote tier), got {:?}",
                self.copy_deadline
            ));
        }
        for (name, q) in [
            ("copy_bytes_per_second", self.copy_bytes_per_second),
            ("fetch_bytes_per_second", self.fetch_bytes_per_second),
        ] {
            if q == Some(0) {
                return bad(format!("{name} must be at least 1 (or None: unlimited)"));
            }
        }
        if self.max_gets_per_sec == Some(0) {
            return bad("max_gets_per_sec must be at least 1 (or None: unlimited)".into());
        }
        if self.read_bytes_in_flight == 0 {
            return bad("read_bytes_in_flight must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_minimums_are_enforced() {
        assert!(TieringConfig::default().validate().is_ok());
        for cfg in [
            TieringConfig {
                copy_concurrency: 0,
                ..TieringConfig::default()
            },
            TieringConfig {
                copy_deadline: Duration::ZERO,
                ..TieringConfig::default()
            },
            TieringConfig {
                chunk_bytes: 63,
                ..TieringConfig::default()
            },
            TieringConfig {
                leader_epoch: -1,
                ..TieringConfig::default()
            },
        ] {
            assert!(matches!(cfg.validate(), Err(Error::InvalidConfig(_))));
        }
    }

    #[test]
    fn log_options_allowing_segments_over_u32_max_are_rejected() {
        assert!(validate_log_options(&Options::default()).is_ok());
        let at_limit = Options {
            max_bytes: MAX_SEGMENT_BYTES,
            ..Options::default()
        };
        assert!(validate_log_options(&at_limit).is_ok());
        for bad in [
            Options {
                max_bytes: MAX_SEGMENT_BYTES + 1,
                ..Options::default()
            },
            Options {
                max_bytes: 8 << 30,
                ..Options::default()
            },
            Options {
                max_message_bytes: MAX_SEGMENT_BYTES + 1,
                ..Options::default()
            },
        ] {
            assert!(
                matches!(validate_log_options(&bad), Err(Error::InvalidConfig(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn service_minimums_are_enforced() {
        assert!(ServiceConfig::default().validate().is_ok());
        for cfg in [
            ServiceConfig {
                copy_threads: 0,
                ..ServiceConfig::default()
            },
            ServiceConfig {
                fetch_deadline: Duration::ZERO,
                ..ServiceConfig::default()
            },
            ServiceConfig {
                copy_bytes_per_second: Some(0),
                ..ServiceConfig::default()
            },
            ServiceConfig {
                read_fetch_threads: 0,
                ..ServiceConfig::default()
            },
            ServiceConfig {
                read_bytes_in_flight: 0,
                ..ServiceConfig::default()
            },
            ServiceConfig {
                max_gets_per_sec: Some(0),
                ..ServiceConfig::default()
            },
        ] {
            assert!(matches!(cfg.validate(), Err(Error::InvalidConfig(_))));
        }
    }
}
