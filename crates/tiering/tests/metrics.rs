//! Metrics through the facade: a service over an instrumented backend reports copies, fetches,
//! deletes, lags, sizes, the reader queue, rounds and the cache, labelled by partition.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod service_util;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use krabka_remote_storage::RemoteStorageManager;
use krabka_storage::SyncPolicy;
use krabka_tiering::metrics as m;
use krabka_tiering::{ServiceConfig, TieredLog, TieringConfig, TieringService};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use service_util::{World, append, tp, wait_until};

/// Metric name and `(topic, partition)` labels → value: counters and histogram sample counts
/// summed over snapshots (a snapshot consumes them), gauges as the last non-zero value.
fn collect(
    s: &metrics_util::debugging::Snapshotter,
    into: &RefCell<HashMap<(String, String), f64>>,
) {
    let mut out = into.borrow_mut();
    for (key, _, _, value) in s.snapshot().into_vec() {
        let labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let entry = out
            .entry((key.key().name().to_owned(), labels.join(",")))
            .or_insert(0.0);
        match value {
            DebugValue::Counter(c) => *entry += c as f64,
            // A snapshot resets gauges to 0 too: keep the last value set.
            DebugValue::Gauge(g) if g.into_inner() != 0.0 => *entry = g.into_inner(),
            DebugValue::Gauge(_) => {}
            DebugValue::Histogram(h) => *entry += h.len() as f64,
        }
    }
}

#[test]
fn a_service_reports_every_kafka_equivalent_metric() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    m::describe();

    let world = World::new();
    let svc = TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        cache_bytes: 1 << 20,
        ..ServiceConfig::default()
    })
    .unwrap();
    let rsm: Arc<dyn RemoteStorageManager> = Arc::new(svc.instrument(world.fs.clone()));
    let mut logs = Vec::new();
    for i in 0..3 {
        // Whole-log retention by size makes the rounds delete remote segments too.
        let log = TieredLog::open(
            world.dir.path().join(format!("p{i}")),
            service_util::options(400),
            rsm.clone(),
            world.rlmm.clone(),
            tp(i),
            TieringConfig {
                retention_bytes: Some(6000),
                ..service_util::config()
            },
        )
        .unwrap()
        .with_cache(svc.cache().clone());
        append(&log, i, 300);
        let log = Arc::new(log);
        svc.add(log.clone()).unwrap();
        logs.push(log);
    }
    let labels = "topic=t,partition=1".to_owned();
    let seen = RefCell::new(HashMap::new());
    let get = |name: &str| {
        collect(&snapshotter, &seen);
        seen.borrow()
            .get(&(name.to_owned(), labels.clone()))
            .copied()
            .unwrap_or(0.0)
    };
    let remote_start = || {
        let first = logs[1].first_seq().unwrap();
        (first < logs[1].local_first_seq()).then_some(first)
    };
    assert!(wait_until(Duration::from_secs(20), || get(
        m::DELETE_REQUESTS
    ) > 0.0
        && logs[1].stats().copy_lag_segments == 0
        && remote_start().is_some()));
    let first = remote_start().unwrap();
    assert!(!svc.read(&tp(1), first, 10).unwrap().is_empty());
    // A read from inside the segment that continues none: it fetches the offset index.
    assert_eq!(svc.read(&tp(1), first + 3, 2).unwrap().len(), 2);
    assert!(
        logs[1].stats().requests.fetch_log > 0,
        "{:?}",
        logs[1].stats()
    );
    assert!(wait_until(Duration::from_secs(5), || get(m::ROUNDS) >= 2.0));

    for name in [
        m::COPY_BYTES,
        m::COPY_REQUESTS,
        m::COPY_SECONDS,
        m::FETCH_BYTES,
        m::FETCH_REQUESTS,
        m::FETCH_INDEX_REQUESTS,
        m::FETCH_SECONDS,
        m::DELETE_REQUESTS,
        m::DELETE_SECONDS,
        m::REMOTE_LOG_SIZE_BYTES,
        m::REMOTE_LOG_METADATA_COUNT,
        m::READ_SECONDS,
        m::ROUNDS,
        m::RETENTION_DELETED_SEGMENTS,
        m::LOCAL_LOG_SIZE_BYTES,
        m::LOCAL_LOG_SEGMENTS,
        m::LOCAL_LOG_NEXT_SEQ,
        m::LOCAL_LOG_APPENDS,
        m::LOCAL_LOG_APPENDED_BYTES,
        m::LOCAL_LOG_ROLLS,
        m::LOCAL_LOG_SEGMENTS_DELETED,
    ] {
        assert!(get(name) > 0.0, "{name} did not move");
    }
    collect(&snapshotter, &seen);
    let all = seen.borrow().clone();
    for name in [
        m::COPY_LAG_BYTES,
        m::COPY_LAG_SEGMENTS,
        m::DELETE_LAG_SEGMENTS,
        m::LOCAL_LOG_FSYNCS,
        m::LOCAL_LOG_FSYNC_NANOSECONDS,
        m::LOCAL_LOG_RECOVERY_SCANNED_BYTES,
        m::LOCAL_LOG_RECOVERY_TRUNCATED_BYTES,
        m::LOCAL_LOG_RECOVERY_CLEAN_SHUTDOWN,
    ] {
        assert!(
            all.contains_key(&(name.to_owned(), labels.clone())),
            "{name} missing"
        );
    }
    let global = |name: &str| all.get(&(name.to_owned(), String::new())).copied();
    assert!(global(m::CACHE_MISSES).is_some_and(|v| v > 0.0));
    assert!(global(m::READER_QUEUE_SIZE).is_some());
    assert_eq!(global(m::PARTITIONS), Some(3.0));
    // Copy bytes match what the logs say they copied.
    let copied: u64 = logs[1].stats().bytes_copied;
    assert_eq!(get(m::COPY_BYTES) as u64, copied);
    svc.shutdown(Duration::from_secs(5));
}

/// The metrics of partition `tp(9)` that one `publish_partition` of `log` records, through a
/// recorder of this thread only.
fn published(log: &TieredLog) -> HashMap<String, f64> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    ::metrics::with_local_recorder(&recorder, || m::publish_partition(log));
    let seen = RefCell::new(HashMap::new());
    collect(&snapshotter, &seen);
    seen.into_inner()
        .into_iter()
        .filter(|((_, labels), _)| labels == "topic=t,partition=9")
        .map(|((name, _), v)| (name, v))
        .collect()
}

#[test]
fn the_local_log_counters_and_recovery_figures_are_published() {
    let world = World::new();
    let open = || {
        TieredLog::open(
            world.dir.path().join("p9"),
            krabka_storage::Options {
                sync: SyncPolicy::EveryAppend,
                ..service_util::options(400)
            },
            world.fs.clone(),
            world.rlmm.clone(),
            tp(9),
            service_util::config(),
        )
        .unwrap()
    };
    let log = open();
    for _ in 0..10 {
        append(&log, 9, 5);
    }
    log.roll().unwrap();
    let stats = log.log().stats();
    assert!(stats.fsyncs > 0 && stats.rolls > 0, "{stats:?}");
    let got = published(&log);
    let value = |name: &str| got.get(name).copied();
    assert_eq!(value(m::LOCAL_LOG_APPENDS), Some(50.0));
    assert_eq!(
        value(m::LOCAL_LOG_APPENDED_BYTES),
        Some(stats.appended_bytes as f64)
    );
    assert_eq!(value(m::LOCAL_LOG_FSYNCS), Some(stats.fsyncs as f64));
    assert_eq!(
        value(m::LOCAL_LOG_FSYNC_NANOSECONDS),
        Some(stats.fsync_time.as_nanos() as f64)
    );
    assert_eq!(value(m::LOCAL_LOG_ROLLS), Some(stats.rolls as f64));
    assert_eq!(value(m::LOCAL_LOG_SEGMENTS_DELETED), Some(0.0));
    assert_eq!(value(m::LOCAL_LOG_RECOVERY_SCANNED_BYTES), Some(0.0));
    assert_eq!(value(m::LOCAL_LOG_RECOVERY_CLEAN_SHUTDOWN), Some(0.0));

    // A crash: the next open scans the active segment.
    append(&log, 9, 5);
    drop(log);
    let log = open();
    let scanned = log.log().stats().recovery_scanned_bytes;
    assert!(scanned > 0);
    let got = published(&log);
    assert_eq!(
        got.get(m::LOCAL_LOG_RECOVERY_SCANNED_BYTES),
        Some(&(scanned as f64))
    );
    assert_eq!(got.get(m::LOCAL_LOG_APPENDS), Some(&0.0));
    assert_eq!(got.get(m::LOCAL_LOG_RECOVERY_CLEAN_SHUTDOWN), Some(&0.0));

    // A clean close: the next open trusts it.
    append(&log, 9, 5);
    log.close().unwrap();
    let log = open();
    let got = published(&log);
    assert_eq!(got.get(m::LOCAL_LOG_RECOVERY_CLEAN_SHUTDOWN), Some(&1.0));
    assert_eq!(got.get(m::LOCAL_LOG_RECOVERY_SCANNED_BYTES), Some(&0.0));
}

#[test]
fn every_local_fsync_is_recorded_in_the_fsync_latency_histogram() {
    let world = World::new();
    let log = TieredLog::open(
        world.dir.path().join("p9"),
        krabka_storage::Options {
            sync: SyncPolicy::EveryAppend,
            ..service_util::options(400)
        },
        world.fs.clone(),
        world.rlmm.clone(),
        tp(9),
        service_util::config(),
    )
    .unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let before = log.log().stats().fsyncs;
    ::metrics::with_local_recorder(&recorder, || {
        for _ in 0..4 {
            append(&log, 9, 1);
        }
        log.roll().unwrap();
    });
    let fsyncs = log.log().stats().fsyncs - before;
    let seen = RefCell::new(HashMap::new());
    collect(&snapshotter, &seen);
    let samples = seen
        .into_inner()
        .get(&(
            m::LOCAL_LOG_FSYNC_SECONDS.to_owned(),
            "topic=t,partition=9".to_owned(),
        ))
        .copied();
    // Every fsync ran on this thread (EveryAppend commits in the appender; a roll syncs in
    // the caller), so every one of them was recorded, with the partition's labels.
    assert!(fsyncs >= 5, "{fsyncs}");
    assert_eq!(samples, Some(fsyncs as f64));
}
