//! The tail in the bucket over real S3 servers: the in-process server (SigV4 and
//! `If-None-Match: *` checked over HTTP on 127.0.0.1), and Ceph RGW when `.ci/run` started it
//! (`KRABKA_TEST_CEPH_*`; skipped otherwise, a failure under `CI=true`). A lost disk loses no
//! record acknowledged in the bucket; a takeover serves every record the old writer
//! acknowledged and fences it; the tail metrics move with what the writer does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[allow(dead_code)]
#[path = "tail/store.rs"]
mod store;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_s3::{S3Config, S3RemoteStorage};
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::{TopicIdPartition, Uuid, now_ms};
use krabka_remote_transform::TransformConfig;
use krabka_storage::Options;
use krabka_tiering::metrics as m;
use krabka_tiering::partition::{OpenOptions, PartitionQuery, RecoverOptions};
use krabka_tiering::{
    Access, Durability, Error, OwnershipError, PartitionDir, RemoteTier, TailConfig, TailError,
    TailWriter, TieringConfig,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use store::seqs_in_tail;

/// A bucket and prefix, connected once.
struct Bucket {
    store: Arc<S3RemoteStorage>,
    location: String,
}

impl Bucket {
    fn new(config: S3Config) -> Self {
        let location = format!("s3://{}/{}", config.bucket, config.prefix);
        Self {
            store: Arc::new(S3RemoteStorage::new(config).unwrap()),
            location,
        }
    }

    fn tier(&self) -> RemoteTier {
        RemoteTier::new(
            self.store.clone(),
            self.location.clone(),
            TransformConfig::default(),
        )
    }

    fn ownership(&self) -> &dyn OwnershipStore {
        self.store.as_ref()
    }
}

fn tail() -> TailConfig {
    TailConfig {
        interval: Duration::from_millis(20),
        grace: Duration::from_secs(1),
        ack_deadline: Duration::from_secs(5),
        ..TailConfig::default()
    }
}

fn options(durability: Durability, tail: TailConfig) -> OpenOptions {
    OpenOptions {
        log: Options {
            max_bytes: 1 << 20,
            ..Options::default()
        },
        config: TieringConfig {
            retention_ms: None,
            tail: Some(tail),
            durability,
            ..TieringConfig::default()
        },
        ..OpenOptions::new(Access::Owner)
    }
}

fn value(tag: &str, i: u64) -> String {
    format!("{tag} record {i:05} {}", "v".repeat(30))
}

fn recover_into(dir: &Path, tier: &RemoteTier, tp: &TopicIdPartition) {
    let options = RecoverOptions {
        partition: PartitionQuery {
            topic: Some(tp.topic().to_owned()),
            partition: Some(tp.partition()),
            topic_id: Some(tp.topic_id()),
        },
        ..RecoverOptions::default()
    };
    PartitionDir::recover(dir, tier, &options).expect("recover");
}

/// What a fenced writer's append may fail with.
fn is_fenced(e: &Error) -> bool {
    matches!(
        e,
        Error::Ownership(OwnershipError::Fenced { .. })
            | Error::Tail(TailError::NotAcknowledged { .. })
    )
}

/// Records acknowledged by a bucket-durable writer come back from the bucket alone after its
/// directory is deleted, with their bytes, and the next append continues after them.
fn a_lost_disk_loses_no_acknowledged_record(bucket: &Bucket, tmp: &Path) {
    const N: u64 = 30;
    let a = tmp.join("a");
    let part = PartitionDir::open(&a, &bucket.tier(), options(Durability::Bucket, tail())).unwrap();
    let tp = part.topic().clone();
    for i in 1..=N {
        assert_eq!(part.log().append(&Message::new(value("a", i))).unwrap(), i);
    }
    // Acknowledged: the bucket's tail objects hold every one of them.
    assert_eq!(
        seqs_in_tail(bucket.ownership(), &tp),
        (1..=N).collect::<Vec<_>>()
    );
    // The disk is lost: the directory is gone, its active segment never copied.
    drop(part);
    std::fs::remove_dir_all(&a).unwrap();
    let b = tmp.join("b");
    recover_into(&b, &bucket.tier(), &tp);
    let part = PartitionDir::open(&b, &bucket.tier(), options(Durability::Bucket, tail())).unwrap();
    let records = part.log().read(1, 100).unwrap();
    assert_eq!(records.len(), N as usize);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1);
        assert_eq!(r.message.value.as_ref(), value("a", r.seq).as_bytes());
    }
    // No seq is handed out twice.
    assert_eq!(part.log().append(&Message::new("next")).unwrap(), N + 1);
}

/// Writer A appends without pause while B recovers and opens the partition: every record A
/// acknowledged is served by B with its bytes, A acknowledges nothing after, and B appends
/// after every seq A used.
fn a_takeover_serves_all_the_fenced_writer_acknowledged(bucket: &Bucket, tmp: &Path) {
    let a = Arc::new(
        PartitionDir::open(
            &tmp.join("a"),
            &bucket.tier(),
            options(Durability::Bucket, tail()),
        )
        .unwrap(),
    );
    let tp = a.topic().clone();
    let acked_count = Arc::new(AtomicU64::new(0));
    let writer = {
        let (a, acked_count) = (Arc::clone(&a), Arc::clone(&acked_count));
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut refused = 0;
            let started = Instant::now();
            for i in 1..=5_000_u64 {
                if started.elapsed() > Duration::from_secs(20) {
                    break;
                }
                match a.log().append(&Message::new(value("a", i))) {
                    Ok(seq) => {
                        acked.push(seq);
                        acked_count.store(acked.len() as u64, Ordering::SeqCst);
                    }
                    Err(e) => {
                        assert!(is_fenced(&e), "{e}");
                        refused += 1;
                        if refused >= 3 {
                            break;
                        }
                    }
                }
            }
            acked
        })
    };
    // B takes over once A is well under way.
    let waited = Instant::now();
    while acked_count.load(Ordering::SeqCst) < 10 {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "A acknowledged {} records in 10 s",
            acked_count.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let b_dir = tmp.join("b");
    recover_into(&b_dir, &bucket.tier(), &tp);
    let b =
        PartitionDir::open(&b_dir, &bucket.tier(), options(Durability::Bucket, tail())).unwrap();
    let acked = writer.join().unwrap();
    assert!(acked.len() >= 10, "A acknowledged {} records", acked.len());
    // Every record A acknowledged is served by B, with its bytes.
    let last = *acked.last().unwrap();
    let records = b.log().read(1, last as usize).unwrap();
    assert!(
        records.len() as u64 >= last,
        "B serves {} records, A acknowledged up to seq {last}",
        records.len()
    );
    for seq in &acked {
        let r = &records[(*seq - 1) as usize];
        assert_eq!(r.seq, *seq);
        assert_eq!(r.message.value.as_ref(), value("a", *seq).as_bytes());
    }
    // A acknowledges nothing more.
    let e = a
        .log()
        .append(&Message::new("late"))
        .expect_err("A is fenced");
    assert!(is_fenced(&e), "{e}");
    // B's own appends go on after every seq A used.
    let next = b.log().append(&Message::new("b")).unwrap();
    assert!(
        next > last,
        "B appended at {next}, A acknowledged up to {last}"
    );
}

fn on_s3(scenario: fn(&Bucket, &Path)) {
    let server = TestServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    scenario(&Bucket::new(server.config().with_prefix("t")), tmp.path());
}

fn on_ceph(scenario: fn(&Bucket, &Path)) {
    if let Some(config) = common::ceph_config("tail") {
        let tmp = tempfile::tempdir().unwrap();
        scenario(&Bucket::new(config), tmp.path());
    }
}

#[test]
fn s3_a_lost_disk_loses_no_record_acknowledged_in_the_bucket() {
    on_s3(a_lost_disk_loses_no_acknowledged_record);
}

#[test]
fn ceph_a_lost_disk_loses_no_record_acknowledged_in_the_bucket() {
    on_ceph(a_lost_disk_loses_no_acknowledged_record);
}

#[test]
fn s3_a_takeover_serves_every_record_the_fenced_writer_acknowledged() {
    on_s3(a_takeover_serves_all_the_fenced_writer_acknowledged);
}

#[test]
fn ceph_a_takeover_serves_every_record_the_fenced_writer_acknowledged() {
    on_ceph(a_takeover_serves_all_the_fenced_writer_acknowledged);
}

/// Adds a snapshot's tail counters and histogram sample counts to `totals` (a snapshot
/// consumes them).
fn take(snapshotter: &Snapshotter, totals: &mut HashMap<String, f64>) {
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let name = key.key().name();
        if !name.starts_with("krabka_tail_") {
            continue;
        }
        let entry = totals.entry(name.to_owned()).or_insert(0.0);
        match value {
            DebugValue::Counter(c) => *entry += c as f64,
            DebugValue::Histogram(h) => *entry += h.len() as f64,
            DebugValue::Gauge(g) => panic!("{name} is a gauge: {g:?}"),
        }
    }
}

/// Every tail counter equals what the writer's `stats()` says it did, and the PUT histogram
/// has one sample per write.
fn assert_published(totals: &HashMap<String, f64>, writer: &TailWriter, step: &str) {
    let s = writer.stats();
    let got = |name: &str| totals.get(name).copied().unwrap_or(0.0);
    for (name, want) in [
        (m::TAIL_OBJECTS_WRITTEN, s.objects_written),
        (m::TAIL_BYTES_WRITTEN, s.bytes_written),
        (m::TAIL_WRITE_FAILURES, s.write_failures),
        (m::TAIL_CHAINS_CLOSED, s.chains_closed),
        (m::TAIL_OBJECTS_DELETED, s.objects_deleted),
    ] {
        assert_eq!(got(name), want as f64, "{name} after {step}: {s:?}");
    }
    let writes = s.objects_written + s.write_failures + s.chains_closed;
    assert_eq!(
        got(m::TAIL_PUT_SECONDS),
        writes as f64,
        "{} after {step}: {s:?}",
        m::TAIL_PUT_SECONDS
    );
}

#[test]
fn the_tail_metrics_move_with_writes_failures_deletions_and_a_closed_chain() {
    let mut server = TestServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // One attempt per request: the write to the stopped server fails at once.
    let bucket = Bucket::new(server.config().with_prefix("t").with_max_attempts(1));
    // Windows only when the test flushes, on its own thread, where its recorder is: the
    // writer's thread waits a whole interval before its first window.
    let config = TailConfig {
        interval: Duration::from_secs(60),
        ..tail()
    };
    let writer = TailWriter::start(bucket.store.clone(), config.clone()).unwrap();
    let mut opts = options(Durability::Local, config);
    opts.tail_writer = Some(writer.clone());
    let part = PartitionDir::open(&tmp.path().join("a"), &bucket.tier(), opts).unwrap();
    let log = part.log();

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let mut totals = HashMap::new();
    ::metrics::with_local_recorder(&recorder, || {
        // A window with new records: one object, its bytes, one PUT timed.
        for i in 1..=5 {
            log.append(&Message::new(value("m", i))).unwrap();
        }
        writer.flush().unwrap();
        take(&snapshotter, &mut totals);
        assert_eq!(writer.stats().objects_written, 1);
        assert!(writer.stats().bytes_written > 0);
        assert_published(&totals, &writer, "the first window");

        // A finished segment holds them: once the grace passed, their object is deleted (the
        // newest object stays).
        log.roll().unwrap();
        let report = log.run_once().unwrap();
        assert_eq!(report.segments_copied, 1, "{report:?}");
        log.append(&Message::new(value("m", 6))).unwrap();
        writer.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while writer.stats().objects_deleted == 0 {
            assert!(Instant::now() < deadline, "nothing deleted: {writer:?}");
            std::thread::sleep(Duration::from_millis(100));
            writer.flush().unwrap();
        }
        take(&snapshotter, &mut totals);
        assert_published(&totals, &writer, "the deletion");

        // The bucket is down: the write fails, and is retried once it is back.
        server.stop();
        log.append(&Message::new(value("m", 7))).unwrap();
        let e = writer.flush().expect_err("the server is stopped");
        assert!(matches!(e, Error::Tail(TailError::Object { .. })), "{e}");
        take(&snapshotter, &mut totals);
        assert_eq!(writer.stats().write_failures, 1);
        assert_published(&totals, &writer, "the failed write");
        assert!(
            server.restart().unwrap(),
            "the server came back on another port"
        );
        let written = writer.stats().objects_written;
        writer.flush().unwrap();
        assert_eq!(writer.stats().objects_written, written + 1);
        take(&snapshotter, &mut totals);
        assert_published(&totals, &writer, "the retried write");

        // Another writer closes the chain: the next write meets its fence.
        let closed = krabka_remote_storage::tail::close_chain(
            bucket.ownership(),
            writer.chain(),
            Uuid::new_v4(),
            now_ms(),
        )
        .unwrap();
        assert!(closed.wrote_fence);
        log.append(&Message::new(value("m", 8))).unwrap();
        writer.flush().unwrap();
        take(&snapshotter, &mut totals);
        assert_eq!(writer.stats().chains_closed, 1);
        assert_published(&totals, &writer, "the closed chain");
    });
}
