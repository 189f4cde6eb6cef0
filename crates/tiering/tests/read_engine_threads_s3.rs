//! A service over the S3 backend (the in-process server on 127.0.0.1) stays within
//! `ServiceConfig::max_threads()` with the backend's own runtime counted in it
//! (`backend_threads` = `S3Config::max_threads()`), while 200 partitions are tiered and read
//! from the bucket at once. Alone in its test binary: it counts the process's threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod service_util;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::RemoteStorageManager;
use krabka_tiering::{ServiceConfig, TieredLog, TieringService};
use service_util::{tp, value, wait_until};

/// Threads of this process now, but the in-process S3 server's (a broker's server runs in
/// another process).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            !comm.starts_with("krabka-test-s3")
        })
        .count()
}

const PARTITIONS: i32 = 200;
const RECORDS: u64 = 24;
const READERS: usize = 16;

#[test]
fn two_hundred_partitions_over_s3_stay_within_the_bound_that_counts_the_backends_runtime() {
    let server = TestServer::start().unwrap();
    let world = service_util::World::new();
    // The test's own threads: the harness, this test, and the sampler started below.
    let before = threads();
    let s3 = server.config().with_runtime_threads(2, 2);
    let backend_threads = s3.max_threads();
    let storage = Arc::new(S3RemoteStorage::new(s3).unwrap());
    let svc = TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        backend_threads,
        ..ServiceConfig::default()
    })
    .unwrap();
    assert_eq!(
        svc.config().max_threads(),
        ServiceConfig::default().max_threads() + 4,
        "the backend's 2 workers and 2 blocking threads are in the bound"
    );
    let bound = before + 1 + READERS + svc.config().max_threads();
    let rsm: Arc<dyn RemoteStorageManager> = storage.clone();
    let logs: Vec<Arc<TieredLog>> = (0..PARTITIONS)
        .map(|i| world.partition_with(i, rsm.clone(), 600, RECORDS, Some(svc.cache())))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, most) = (stop.clone(), most.clone());
        std::thread::spawn(move || {
            // Bounded by the test's own deadlines below (the flag ends it).
            for _ in 0..600_000 {
                most.fetch_max(threads(), Ordering::Relaxed);
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };

    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    let tiered = wait_until(Duration::from_secs(300), || {
        logs.iter()
            .all(|l| l.stats().copy_lag_segments == 0 && l.local_first_seq() > 1)
    });
    assert!(tiered, "the partitions were not tiered in time");
    let during_tiering = most.load(Ordering::Relaxed);

    let svc = Arc::new(svc);
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let svc = svc.clone();
            std::thread::spawn(move || {
                for i in (0..PARTITIONS).filter(|i| *i as usize % READERS == r) {
                    let mut seq = 1;
                    for _ in 0..1_000 {
                        if seq > RECORDS {
                            break;
                        }
                        let page = svc.read(&tp(i), seq, 7).unwrap();
                        assert!(!page.is_empty(), "partition {i}: no progress at {seq}");
                        for rec in page {
                            assert_eq!(rec.seq, seq);
                            assert_eq!(rec.message.value.as_ref(), value(i, seq).as_bytes());
                            seq += 1;
                        }
                    }
                    assert_eq!(seq, RECORDS + 1, "partition {i} not read to its end");
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    let after = threads();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let most = most.load(Ordering::Relaxed);

    let stats = svc.read_engine_stats();
    assert!(
        stats.fetches >= PARTITIONS as u64,
        "the reads went to the bucket: {stats:?}"
    );
    let s3_threads = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .unwrap_or_default()
                .starts_with("krabka-s3")
        })
        .count();
    assert!(
        s3_threads <= backend_threads,
        "the backend's runtime: {s3_threads} threads, bound {backend_threads}"
    );
    assert!(
        during_tiering <= bound && most <= bound && after <= bound,
        "threads: {before} before, {during_tiering} most while tiering, {most} most while \
         reading, {after} after; bound {bound}"
    );
}
