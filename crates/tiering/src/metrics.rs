//! Metrics through the `metrics` facade: Kafka's tiered-storage metrics
//! (KIP-405 / KIP-963) under `krabka_*` names, labelled with `topic` and `partition`.
//!
//! Nothing is recorded anywhere until the application installs a recorder (for example
//! `metrics-exporter-prometheus`); without one every call is a no-op. Call [`describe`] once
//! after installing it to attach units and help texts.
//!
//! Who records what:
//! - [`Instrumented`](crate::Instrumented), the decorator over any backend: requests, errors,
//!   bytes and latency of every remote call;
//! - the [`TieringService`](crate::TieringService): reader queue, read time, rounds, quota
//!   throttling, and after each partition round the sampled gauges of [`publish_partition`];
//! - [`publish_cache`]: the shared cache's counters; [`publish_read_engine`]: its read
//!   engine's.
//! - each [`TailWriter`](crate::TailWriter), after every window: what its
//!   [`stats`](crate::TailWriter::stats) gained in it, and the latency of its tail object write.
//!
//! Every name is listed in docs/tiering.md ("Metrics").
//!
//! The functions here take plain figures ([`PartitionSample`], [`ReplicaSample`]), never a
//! `TieredLog` or a `ReadReplica`: everything imports this module, so it imports none of them
//! (each converts into its sample where it is defined).

use std::time::Duration;

use ::metrics::{Label, counter, gauge, histogram};
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition};
use krabka_storage::LogStats;

use crate::cache::CacheStats;
use crate::read::engine::ReadEngineStats;
use crate::stats::TieringReport;

/// Bytes of segments copied to the remote tier (counter).
pub const COPY_BYTES: &str = "krabka_remote_copy_bytes_total";
/// Segment copy calls (counter).
pub const COPY_REQUESTS: &str = "krabka_remote_copy_requests_total";
/// Segment copy calls that failed (counter).
pub const COPY_ERRORS: &str = "krabka_remote_copy_errors_total";
/// Latency of a segment copy call, seconds (histogram).
pub const COPY_SECONDS: &str = "krabka_remote_copy_seconds";
/// Bytes of closed local segments not yet safely remote (gauge).
pub const COPY_LAG_BYTES: &str = "krabka_remote_copy_lag_bytes";
/// Closed local segments not yet safely remote (gauge).
pub const COPY_LAG_SEGMENTS: &str = "krabka_remote_copy_lag_segments";
/// Time a copy waited for the copy quota, seconds (histogram; only waits are recorded).
pub const COPY_THROTTLE_SECONDS: &str = "krabka_remote_copy_throttle_seconds";
/// Bytes fetched from the remote tier, data and indexes (counter).
pub const FETCH_BYTES: &str = "krabka_remote_fetch_bytes_total";
/// Ranged data fetch calls (counter).
pub const FETCH_REQUESTS: &str = "krabka_remote_fetch_requests_total";
/// Index fetch calls (counter).
pub const FETCH_INDEX_REQUESTS: &str = "krabka_remote_fetch_index_requests_total";
/// Data and index fetch calls that failed (counter).
pub const FETCH_ERRORS: &str = "krabka_remote_fetch_errors_total";
/// Latency of a data or index fetch call, seconds (histogram).
pub const FETCH_SECONDS: &str = "krabka_remote_fetch_seconds";
/// Time a fetch waited for the fetch quota, seconds (histogram; only waits are recorded).
pub const FETCH_THROTTLE_SECONDS: &str = "krabka_remote_fetch_throttle_seconds";
/// Segment delete calls (counter).
pub const DELETE_REQUESTS: &str = "krabka_remote_delete_requests_total";
/// Segment delete calls that failed (counter).
pub const DELETE_ERRORS: &str = "krabka_remote_delete_errors_total";
/// Latency of a segment delete call, seconds (histogram).
pub const DELETE_SECONDS: &str = "krabka_remote_delete_seconds";
/// Remote segments whose delete started and has not finished (gauge).
pub const DELETE_LAG_SEGMENTS: &str = "krabka_remote_delete_lag_segments";
/// Bytes of those segments (gauge).
pub const DELETE_LAG_BYTES: &str = "krabka_remote_delete_lag_bytes";
/// Bytes of finished remote segments (gauge).
pub const REMOTE_LOG_SIZE_BYTES: &str = "krabka_remote_log_size_bytes";
/// Remote segment metadata entries not yet deleted, in any state (gauge).
pub const REMOTE_LOG_METADATA_COUNT: &str = "krabka_remote_log_metadata_count";
/// Reads running or waiting in the service's remote reader pool (gauge, no labels).
pub const READER_QUEUE_SIZE: &str = "krabka_remote_reader_queue_size";
/// Reads refused because the reader queue was full (counter, no labels).
pub const READER_REJECTED: &str = "krabka_remote_reader_rejected_total";
/// Time of a read through the service, queue wait included, seconds (histogram).
pub const READ_SECONDS: &str = "krabka_remote_read_seconds";
/// Reads through the service that failed or missed their deadline (counter).
pub const READ_ERRORS: &str = "krabka_remote_read_errors_total";
/// Tiering rounds finished per partition (counter).
pub const ROUNDS: &str = "krabka_tiering_rounds_total";
/// Failures reported by tiering rounds (counter).
pub const ROUND_FAILURES: &str = "krabka_tiering_round_failures_total";
/// Partitions in the service (gauge, no labels).
pub const PARTITIONS: &str = "krabka_tiering_partitions";
/// Remote segments deleted by retention (counter).
pub const RETENTION_DELETED_SEGMENTS: &str = "krabka_remote_retention_deleted_segments_total";
/// Cache lookups that found their entry (counter, no labels: the cache is shared).
pub const CACHE_HITS: &str = "krabka_remote_cache_hits_total";
/// Cache lookups that did not (counter).
pub const CACHE_MISSES: &str = "krabka_remote_cache_misses_total";
/// Cache misses that waited for another thread's fetch of the same entry instead of sending
/// their own request (counter).
pub const CACHE_WAITS: &str = "krabka_remote_cache_waits_total";
/// Cache entries evicted to stay within the byte bound (counter).
pub const CACHE_EVICTIONS: &str = "krabka_remote_cache_evictions_total";
/// Bytes held by the cache (gauge).
pub const CACHE_BYTES: &str = "krabka_remote_cache_bytes";
/// Fetch slots the read engine gave (readers' own fetches and read-ahead) (counter, no
/// labels: the engine is shared).
pub const READ_ENGINE_FETCHES: &str = "krabka_remote_read_engine_fetches_total";
/// Bytes of data ranges the read engine has in flight (gauge, no labels).
pub const READ_ENGINE_BYTES_IN_FLIGHT: &str = "krabka_remote_read_engine_bytes_in_flight";
/// Most bytes of data ranges the read engine had in flight at once (gauge, no labels).
pub const READ_ENGINE_BYTES_IN_FLIGHT_HIGH_WATER: &str =
    "krabka_remote_read_engine_bytes_in_flight_high_water";
/// Read-ahead threads the read engine runs (gauge, no labels).
pub const READ_ENGINE_THREADS: &str = "krabka_remote_read_engine_threads";
/// Time fetches waited for the GET budget, nanoseconds (counter, no labels).
pub const GET_BUDGET_WAIT_NANOSECONDS: &str = "krabka_remote_get_budget_wait_nanoseconds_total";
/// Bytes of the local log's segment files (gauge).
pub const LOCAL_LOG_SIZE_BYTES: &str = "krabka_local_log_size_bytes";
/// Segments of the local log, the active one included (gauge).
pub const LOCAL_LOG_SEGMENTS: &str = "krabka_local_log_segments";
/// Seq the next append to the local log gets (gauge; its rate is the append rate).
pub const LOCAL_LOG_NEXT_SEQ: &str = "krabka_local_log_next_seq";
/// Records appended to the local log since it was opened (counter).
pub const LOCAL_LOG_APPENDS: &str = "krabka_local_log_appends_total";
/// Frame bytes appended to the local log since it was opened (counter).
pub const LOCAL_LOG_APPENDED_BYTES: &str = "krabka_local_log_appended_bytes_total";
/// Fsyncs of the local log's segment files since it was opened (counter).
pub const LOCAL_LOG_FSYNCS: &str = "krabka_local_log_fsyncs_total";
/// Time spent in those fsyncs, nanoseconds (counter; divided by the rate of
/// [`LOCAL_LOG_FSYNCS`] it is the mean fsync latency).
pub const LOCAL_LOG_FSYNC_NANOSECONDS: &str = "krabka_local_log_fsync_nanoseconds_total";
/// Segments the local log rolled since it was opened (counter).
pub const LOCAL_LOG_ROLLS: &str = "krabka_local_log_rolls_total";
/// Histogram: seconds of each local log segment fsync (group commit, flusher, `sync`, roll,
/// close), per partition; recorded as the fsync returns, for logs a `TieredLog` owns.
pub const LOCAL_LOG_FSYNC_SECONDS: &str = "krabka_local_log_fsync_seconds";
/// Local segments deleted by retention since the log was opened (counter).
pub const LOCAL_LOG_SEGMENTS_DELETED: &str = "krabka_local_log_segments_deleted_total";
/// Bytes of `.log` files the local log's recovery scanned when it was opened (gauge).
pub const LOCAL_LOG_RECOVERY_SCANNED_BYTES: &str = "krabka_local_log_recovery_scanned_bytes";
/// Bytes of the torn tail the local log's recovery cut when it was opened (gauge).
pub const LOCAL_LOG_RECOVERY_TRUNCATED_BYTES: &str = "krabka_local_log_recovery_truncated_bytes";
/// 1 when the local log was opened after a clean shutdown (no scan), else 0 (gauge).
pub const LOCAL_LOG_RECOVERY_CLEAN_SHUTDOWN: &str = "krabka_local_log_recovery_clean_shutdown";
/// Seqs the writer held (as of the head a read replica applied) that the replica does not
/// serve yet (gauge).
pub const REPLICA_LAG_SEQS: &str = "krabka_replica_lag_seqs";
/// Seconds since a read replica's view was last refreshed successfully (gauge, sampled after
/// each refresh, failed ones included, and by a started `ReplicaGroup` at every tick for every
/// replica).
pub const REPLICA_STALENESS_SECONDS: &str = "krabka_replica_staleness_seconds";
/// Age of the head a read replica applied, by the writer's clock (gauge, sampled with
/// [`REPLICA_STALENESS_SECONDS`]): how old the writer's newest published state is.
pub const REPLICA_HEAD_AGE_SECONDS: &str = "krabka_replica_head_age_seconds";
/// Requests a read replica's refreshes sent (counter).
pub const REPLICA_REFRESH_REQUESTS: &str = "krabka_replica_refresh_requests_total";
/// Tail objects written: create-only PUTs that succeeded (counter, no labels: one object holds
/// every partition of its writer; summed over the process's tail writers).
pub const TAIL_OBJECTS_WRITTEN: &str = "krabka_tail_objects_written_total";
/// Bytes of record batches in the tail objects written (counter, no labels).
pub const TAIL_BYTES_WRITTEN: &str = "krabka_tail_bytes_written_total";
/// Tail object writes that failed and wait to be retried with the same bytes (counter, no
/// labels).
pub const TAIL_WRITE_FAILURES: &str = "krabka_tail_write_failures_total";
/// Tail chains closed under their writer by another one: a takeover or a restart elsewhere
/// (counter, no labels).
pub const TAIL_CHAINS_CLOSED: &str = "krabka_tail_chains_closed_total";
/// Tail objects deleted once no head needed them for the grace (counter, no labels).
pub const TAIL_OBJECTS_DELETED: &str = "krabka_tail_objects_deleted_total";
/// Latency of one tail object write (the create-only PUT, and the read back a refused create
/// costs), failed ones included, seconds (histogram, no labels).
pub const TAIL_PUT_SECONDS: &str = "krabka_tail_put_seconds";

/// Every metric name above, for documentation and tests.
pub const ALL: &[&str] = &[
    COPY_BYTES,
    COPY_REQUESTS,
    COPY_ERRORS,
    COPY_SECONDS,
    COPY_LAG_BYTES,
    COPY_LAG_SEGMENTS,
    COPY_THROTTLE_SECONDS,
    FETCH_BYTES,
    FETCH_REQUESTS,
    FETCH_INDEX_REQUESTS,
    FETCH_ERRORS,
    FETCH_SECONDS,
    FETCH_THROTTLE_SECONDS,
    DELETE_REQUESTS,
    DELETE_ERRORS,
    DELETE_SECONDS,
    DELETE_LAG_SEGMENTS,
    DELETE_LAG_BYTES,
    REMOTE_LOG_SIZE_BYTES,
    REMOTE_LOG_METADATA_COUNT,
    READER_QUEUE_SIZE,
    READER_REJECTED,
    READ_SECONDS,
    READ_ERRORS,
    ROUNDS,
    ROUND_FAILURES,
    PARTITIONS,
    RETENTION_DELETED_SEGMENTS,
    CACHE_HITS,
    CACHE_MISSES,
    CACHE_WAITS,
    CACHE_EVICTIONS,
    CACHE_BYTES,
    READ_ENGINE_FETCHES,
    READ_ENGINE_BYTES_IN_FLIGHT,
    READ_ENGINE_BYTES_IN_FLIGHT_HIGH_WATER,
    READ_ENGINE_THREADS,
    GET_BUDGET_WAIT_NANOSECONDS,
    LOCAL_LOG_SIZE_BYTES,
    LOCAL_LOG_SEGMENTS,
    LOCAL_LOG_NEXT_SEQ,
    LOCAL_LOG_APPENDS,
    LOCAL_LOG_APPENDED_BYTES,
    LOCAL_LOG_FSYNCS,
    LOCAL_LOG_FSYNC_NANOSECONDS,
    LOCAL_LOG_ROLLS,
    LOCAL_LOG_FSYNC_SECONDS,
    LOCAL_LOG_SEGMENTS_DELETED,
    LOCAL_LOG_RECOVERY_SCANNED_BYTES,
    LOCAL_LOG_RECOVERY_TRUNCATED_BYTES,
    LOCAL_LOG_RECOVERY_CLEAN_SHUTDOWN,
    REPLICA_LAG_SEQS,
    REPLICA_STALENESS_SECONDS,
    REPLICA_HEAD_AGE_SECONDS,
    REPLICA_REFRESH_REQUESTS,
    TAIL_OBJECTS_WRITTEN,
    TAIL_BYTES_WRITTEN,
    TAIL_WRITE_FAILURES,
    TAIL_CHAINS_CLOSED,
    TAIL_OBJECTS_DELETED,
    TAIL_PUT_SECONDS,
];

/// The `topic` and `partition` labels of `tp`.
pub(crate) fn labels(tp: &TopicIdPartition) -> [Label; 2] {
    [
        Label::new("topic", tp.topic().to_owned()),
        Label::new("partition", tp.partition().to_string()),
    ]
}

/// What [`publish_replica`] publishes of a read replica: its lag (a `&ReplicaStats` converts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaSample {
    /// Seqs the writer held that the replica cannot serve yet.
    pub lag_seqs: u64,
    /// Time since the replica's last refresh that succeeded.
    pub since_refresh: Duration,
    /// Age of the head applied, by the writer's clock (`None` without a head).
    pub head_age: Option<Duration>,
}

/// Samples a read replica's lag gauges.
pub fn publish_replica(tp: &TopicIdPartition, stats: impl Into<ReplicaSample>) {
    let stats: ReplicaSample = stats.into();
    gauge!(REPLICA_LAG_SEQS, labels(tp).to_vec()).set(stats.lag_seqs as f64);
    gauge!(REPLICA_STALENESS_SECONDS, labels(tp).to_vec()).set(stats.since_refresh.as_secs_f64());
    if let Some(age) = stats.head_age {
        gauge!(REPLICA_HEAD_AGE_SECONDS, labels(tp).to_vec()).set(age.as_secs_f64());
    }
}

/// Adds `by` to counter `name` of partition `tp`.
pub(crate) fn add(name: &'static str, tp: &TopicIdPartition, by: u64) {
    counter!(name, labels(tp).to_vec()).increment(by);
}

/// Records `elapsed` in histogram `name` of partition `tp`.
pub(crate) fn time(name: &'static str, tp: &TopicIdPartition, elapsed: Duration) {
    histogram!(name, labels(tp).to_vec()).record(elapsed.as_secs_f64());
}

/// Attaches units and help texts to every metric of this crate. Call once after installing a
/// recorder; harmless without one.
pub fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    for name in ALL {
        let unit = if name.ends_with("_seconds") {
            Unit::Seconds
        } else if name.contains("_nanoseconds") {
            Unit::Nanoseconds
        } else if name.contains("bytes") {
            Unit::Bytes
        } else {
            Unit::Count
        };
        let help = help(name);
        if name.ends_with("_seconds") {
            describe_histogram!(*name, unit, help);
        } else if name.ends_with("_total") {
            describe_counter!(*name, unit, help);
        } else {
            describe_gauge!(*name, unit, help);
        }
    }
}

fn help(name: &str) -> &'static str {
    match name {
        COPY_LAG_BYTES | COPY_LAG_SEGMENTS => "closed local segments not yet safely remote",
        DELETE_LAG_BYTES | DELETE_LAG_SEGMENTS => "remote segments awaiting deletion",
        REMOTE_LOG_SIZE_BYTES => "bytes of finished remote segments",
        REMOTE_LOG_METADATA_COUNT => "remote segment metadata entries",
        READER_QUEUE_SIZE => "reads running or waiting in the remote reader pool",
        _ if name.contains("_cache_") => "shared remote read cache",
        _ if name.contains("_read_engine_") || name.contains("_get_budget_") => {
            "shared remote read engine"
        }
        LOCAL_LOG_FSYNC_NANOSECONDS => "time in local log segment fsyncs",
        LOCAL_LOG_FSYNC_SECONDS => "local log segment fsync latency",
        _ if name.starts_with("krabka_local_log_recovery_") => "local log recovery at open",
        _ if name.starts_with("krabka_local_") => "local log",
        TAIL_PUT_SECONDS => "tail object write latency",
        _ if name.starts_with("krabka_tail_") => "tail objects in the bucket",
        _ => "remote tier calls",
    }
}

/// What [`publish_partition`] publishes of one partition, sampled at one moment (a
/// `&TieredLog` converts, listing the partition's remote metadata once, blocking).
#[derive(Clone, Debug)]
pub struct PartitionSample {
    /// The partition.
    pub tp: TopicIdPartition,
    /// Bytes of closed local segments not yet safely remote.
    pub copy_lag_bytes: u64,
    /// Closed local segments not yet safely remote.
    pub copy_lag_segments: u64,
    /// Bytes of finished remote segments.
    pub remote_bytes: u64,
    /// Bytes of the local log.
    pub local_bytes: u64,
    /// Segments of the local log.
    pub local_segments: u64,
    /// The local log's next seq.
    pub next_seq: u64,
    /// The local log's counters and recovery figures.
    pub local_log: LogStats,
    /// The remote metadata (`None` when it could not be listed: those gauges keep their value).
    pub remote: Option<RemoteSample>,
}

/// The remote metadata figures of a [`PartitionSample`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSample {
    /// Remote segment metadata entries.
    pub metadata_count: u64,
    /// Remote segments awaiting deletion.
    pub delete_lag_segments: u64,
    /// Bytes of remote segments awaiting deletion.
    pub delete_lag_bytes: u64,
}

impl RemoteSample {
    /// The figures of a partition's remote metadata list.
    pub fn of(list: &[RemoteLogSegmentMetadata]) -> Self {
        let pending = list
            .iter()
            .filter(|m| m.state() == RemoteLogSegmentState::DeleteSegmentStarted);
        let (n, bytes) = pending.fold((0u64, 0u64), |(n, b), m| {
            (n + 1, b + m.segment_size_in_bytes())
        });
        Self {
            metadata_count: list.len() as u64,
            delete_lag_segments: n,
            delete_lag_bytes: bytes,
        }
    }
}

/// Publishes the sampled metrics of one partition: copy lag, delete lag, remote size, metadata
/// count, and the local log's size, counters (as absolute values) and recovery figures.
pub fn publish_partition(sample: impl Into<PartitionSample>) {
    let sample: PartitionSample = sample.into();
    let labels = labels(&sample.tp);
    let set = |name: &'static str, v: u64| gauge!(name, labels.to_vec()).set(v as f64);
    set(COPY_LAG_BYTES, sample.copy_lag_bytes);
    set(COPY_LAG_SEGMENTS, sample.copy_lag_segments);
    set(REMOTE_LOG_SIZE_BYTES, sample.remote_bytes);
    set(LOCAL_LOG_SIZE_BYTES, sample.local_bytes);
    set(LOCAL_LOG_SEGMENTS, sample.local_segments);
    set(LOCAL_LOG_NEXT_SEQ, sample.next_seq);
    publish_local_log(&sample.local_log, &labels);
    if let Some(remote) = sample.remote {
        set(REMOTE_LOG_METADATA_COUNT, remote.metadata_count);
        set(DELETE_LAG_SEGMENTS, remote.delete_lag_segments);
        set(DELETE_LAG_BYTES, remote.delete_lag_bytes);
    }
}

/// Publishes a local log's counters (absolute) and recovery figures with `labels`.
fn publish_local_log(s: &LogStats, labels: &[Label; 2]) {
    let total = |name: &'static str, v: u64| counter!(name, labels.to_vec()).absolute(v);
    total(LOCAL_LOG_APPENDS, s.appends);
    total(LOCAL_LOG_APPENDED_BYTES, s.appended_bytes);
    total(LOCAL_LOG_FSYNCS, s.fsyncs);
    let nanos = u64::try_from(s.fsync_time.as_nanos()).unwrap_or(u64::MAX);
    total(LOCAL_LOG_FSYNC_NANOSECONDS, nanos);
    total(LOCAL_LOG_ROLLS, s.rolls);
    total(LOCAL_LOG_SEGMENTS_DELETED, s.segments_deleted);
    let set = |name: &'static str, v: u64| gauge!(name, labels.to_vec()).set(v as f64);
    set(LOCAL_LOG_RECOVERY_SCANNED_BYTES, s.recovery_scanned_bytes);
    set(
        LOCAL_LOG_RECOVERY_TRUNCATED_BYTES,
        s.recovery_truncated_bytes,
    );
    set(
        LOCAL_LOG_RECOVERY_CLEAN_SHUTDOWN,
        u64::from(s.recovery_clean_shutdown),
    );
}

/// Records one finished round of `tp` (for callers running their own rounds with
/// [`TieredLog::run_once`](crate::TieredLog::run_once); the service records its rounds itself): rounds, failures, remote
/// segments deleted by retention.
pub fn record_round(tp: &TopicIdPartition, report: &TieringReport) {
    add(ROUNDS, tp, 1);
    add(ROUND_FAILURES, tp, report.failures.len() as u64);
    add(
        RETENTION_DELETED_SEGMENTS,
        tp,
        report.remote_segments_deleted,
    );
}

/// Publishes a cache's counters (hits, misses, waits, evictions as absolute counters; bytes
/// held).
pub fn publish_cache(stats: &CacheStats) {
    counter!(CACHE_HITS).absolute(stats.hits);
    counter!(CACHE_MISSES).absolute(stats.misses);
    counter!(CACHE_WAITS).absolute(stats.waits);
    counter!(CACHE_EVICTIONS).absolute(stats.evictions);
    gauge!(CACHE_BYTES).set(stats.bytes as f64);
}

/// Publishes a read engine's counters (fetches and GET-budget wait as absolute counters;
/// bytes in flight, their high-water mark and threads as gauges).
pub fn publish_read_engine(stats: &ReadEngineStats) {
    counter!(READ_ENGINE_FETCHES).absolute(stats.fetches);
    let nanos = u64::try_from(stats.get_budget_wait.as_nanos()).unwrap_or(u64::MAX);
    counter!(GET_BUDGET_WAIT_NANOSECONDS).absolute(nanos);
    gauge!(READ_ENGINE_BYTES_IN_FLIGHT).set(stats.bytes_in_flight as f64);
    gauge!(READ_ENGINE_BYTES_IN_FLIGHT_HIGH_WATER).set(stats.bytes_in_flight_high_water as f64);
    gauge!(READ_ENGINE_THREADS).set(stats.threads as f64);
}

/// What a tail writer's counters say at one moment (a `TailStats` converts where it is
/// defined).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TailSample {
    pub(crate) objects_written: u64,
    pub(crate) bytes_written: u64,
    pub(crate) write_failures: u64,
    pub(crate) chains_closed: u64,
    pub(crate) objects_deleted: u64,
}

/// Adds what a tail writer's counters gained from `before` to `now` to the tail counters.
/// Increments, not absolute values: a process runs one writer per standalone log and one per
/// service, and the counters sum over all of them.
pub(crate) fn publish_tail(before: TailSample, now: TailSample) {
    let gained = |name: &'static str, b: u64, n: u64| {
        let by = n.saturating_sub(b);
        if by > 0 {
            counter!(name).increment(by);
        }
    };
    gained(
        TAIL_OBJECTS_WRITTEN,
        before.objects_written,
        now.objects_written,
    );
    gained(TAIL_BYTES_WRITTEN, before.bytes_written, now.bytes_written);
    gained(
        TAIL_WRITE_FAILURES,
        before.write_failures,
        now.write_failures,
    );
    gained(TAIL_CHAINS_CLOSED, before.chains_closed, now.chains_closed);
    gained(
        TAIL_OBJECTS_DELETED,
        before.objects_deleted,
        now.objects_deleted,
    );
}

/// Records the latency of one tail object write.
pub(crate) fn time_tail_put(elapsed: Duration) {
    histogram!(TAIL_PUT_SECONDS).record(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    /// The counters and histogram samples one call records, by name.
    fn recorded(f: impl FnOnce()) -> Vec<(String, f64)> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, f);
        let mut out: Vec<(String, f64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let v = match value {
                    DebugValue::Counter(c) => c as f64,
                    DebugValue::Gauge(g) => g.into_inner(),
                    DebugValue::Histogram(h) => h.len() as f64,
                };
                (key.key().name().to_owned(), v)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn the_tail_counters_grow_by_what_a_window_added_and_unchanged_ones_record_nothing() {
        let before = TailSample {
            objects_written: 10,
            bytes_written: 5_000,
            write_failures: 2,
            chains_closed: 1,
            objects_deleted: 4,
        };
        let now = TailSample {
            objects_written: 11,
            bytes_written: 5_700,
            objects_deleted: 6,
            ..before
        };
        let got = recorded(|| {
            publish_tail(before, now);
            time_tail_put(Duration::from_millis(3));
        });
        assert_eq!(
            got,
            [
                (TAIL_BYTES_WRITTEN.to_owned(), 700.0),
                (TAIL_OBJECTS_DELETED.to_owned(), 2.0),
                (TAIL_OBJECTS_WRITTEN.to_owned(), 1.0),
                (TAIL_PUT_SECONDS.to_owned(), 1.0),
            ]
        );
        // Nothing gained, nothing recorded (and never a negative step).
        assert!(recorded(|| publish_tail(now, now)).is_empty());
        assert!(recorded(|| publish_tail(now, TailSample::default())).is_empty());
    }
}
