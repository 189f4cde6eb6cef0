//! The lag gauges through the metrics facade: after a refresh the lag in seqs is what the head
//! says the writer held minus what the replica serves; with the bucket down, a started group
//! still samples the staleness, which grows.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use krabka_tiering::TieringConfig;
use krabka_tiering::metrics as m;
use krabka_tiering::replica::{RefreshOutcome, ReplicaGroup, ReplicaGroupConfig};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use crate::backend::Backend;
use crate::probe::{open_writer_of, partition};
use crate::util::{append, eventually, replica_config, round};

/// The topic of the partition sampled (its labels are this test's alone).
const TOPIC: &str = "gauges";
const PARTITION: i32 = 3;
/// The group's refresh interval (its refresher looks every quarter of it).
const INTERVAL: Duration = Duration::from_millis(100);

/// The recorder of this test process, installed once.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        m::describe();
        snapshotter
    })
}

/// The next value gauge `name` of the partition is set to (a snapshot resets gauges, so one
/// set since the last snapshot is waited for, up to `limit`), and when it was seen.
fn next_gauge(name: &str, limit: Duration) -> Option<(f64, Instant)> {
    let started = Instant::now();
    let labels = format!("topic={TOPIC},partition={PARTITION}");
    loop {
        for (key, _, _, value) in snapshotter().snapshot().into_vec() {
            let key = key.key();
            let found: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            if key.name() == name
                && found.join(",") == labels
                && let DebugValue::Gauge(g) = value
                && g.into_inner() != 0.0
            {
                return Some((g.into_inner(), Instant::now()));
            }
        }
        if started.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A started group over the in-process S3 server: after a refresh the lag gauge is the
/// writer's last seq minus the last seq served; the server stopped, the staleness gauge keeps
/// being sampled and grows across two samples 250 ms apart while every refresh fails.
pub fn lag_gauges_while_the_bucket_is_down(mut b: Backend) {
    snapshotter();
    let root = tempfile::tempdir().unwrap();
    let tp = partition(TOPIC, PARTITION);
    let w = open_writer_of(&b, &root.path().join("w"), &tp);
    append(&w, "g", 90);
    round(&w);
    let group = ReplicaGroup::new(ReplicaGroupConfig::default()).unwrap();
    let r = group
        .open(
            b.rsm.clone(),
            b.store.clone(),
            tp.clone(),
            TieringConfig::default(),
            replica_config(INTERVAL),
        )
        .unwrap();
    group.start();

    // More records, some copied: the new head names the writer's last seq, past what is
    // served (the records not copied yet).
    append(&w, "g", 45);
    round(&w);
    assert!(matches!(
        r.refresh().unwrap(),
        RefreshOutcome::Applied { .. } | RefreshOutcome::Unchanged
    ));
    let stats = r.stats();
    assert_eq!(stats.writer_last_seq, Some(w.last_seq()));
    assert_eq!(stats.last_seq, w.local_first_seq() - 1);
    let lag = w.last_seq() - stats.last_seq;
    assert!(lag > 0, "nothing left to copy: {stats:?}");
    let (gauge, _) = next_gauge(m::REPLICA_LAG_SEQS, Duration::from_secs(5)).unwrap();
    assert_eq!(gauge, lag as f64, "{stats:?}");
    let (head_age, _) = next_gauge(m::REPLICA_HEAD_AGE_SECONDS, Duration::from_secs(5)).unwrap();
    assert!((0.0..60.0).contains(&head_age), "head age {head_age}");

    drop(w);
    b.server.as_mut().unwrap().stop();
    let failures = r.stats().refresh_failures;
    let (first, at) = next_gauge(m::REPLICA_STALENESS_SECONDS, Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let (second, later) =
        next_gauge(m::REPLICA_STALENESS_SECONDS, Duration::from_secs(10)).unwrap();
    assert!(
        later.duration_since(at) >= Duration::from_millis(200),
        "the samples are not 200 ms apart"
    );
    assert!(
        second > first + 0.05,
        "the staleness went {first} -> {second} while the bucket was down: {:?}",
        r.stats()
    );
    // A refresh fails (after its retries), and the staleness grows on.
    assert!(
        eventually(Duration::from_secs(20), || r.stats().refresh_failures
            > failures),
        "no refresh failed: {:?}",
        r.stats()
    );
    let (third, _) = next_gauge(m::REPLICA_STALENESS_SECONDS, Duration::from_secs(10)).unwrap();
    assert!(third > second, "{second} -> {third}");
    // The lag is still sampled: the view is kept.
    let (gauge, _) = next_gauge(m::REPLICA_LAG_SEQS, Duration::from_secs(10)).unwrap();
    assert_eq!(gauge, lag as f64);
    group.stop();
}
