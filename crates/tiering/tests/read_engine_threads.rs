//! The service's read engine bounds threads and bytes in flight whatever the number of
//! partitions read from the remote tier at once. Alone in its test binary: it counts the
//! process's threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod service_util;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use krabka_remote_storage::RemoteStorageManager;
use krabka_tiering::{ServiceConfig, TieredLog, TieringService};
use service_util::{tp, value, wait_until};

/// Threads of this process now.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

const PARTITIONS: i32 = 200;
const RECORDS: u64 = 40;
const READERS: usize = 16;

#[test]
fn two_hundred_partitions_read_remotely_at_once_stay_within_the_service_thread_and_byte_bounds() {
    let world = service_util::World::new();
    // The test's own threads: the harness, this test, and the sampler started below.
    let before = threads();
    let svc = TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        copy_threads: 4,
        read_threads: 4,
        read_fetch_threads: 3,
        // Less than three segments: the byte bound, not the slots, limits the fetches.
        read_bytes_in_flight: 1536,
        ..ServiceConfig::default()
    })
    .unwrap();
    let bound = before + 1 + READERS + svc.config().max_threads();
    let rsm: Arc<dyn RemoteStorageManager> = world.fs.clone();
    let logs: Vec<Arc<TieredLog>> = (0..PARTITIONS)
        .map(|i| world.partition_with(i, rsm.clone(), 600, RECORDS, Some(svc.cache())))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, most) = (stop.clone(), most.clone());
        std::thread::spawn(move || {
            // Bounded by the test's own deadline below (the flag ends it).
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
    let tiered = wait_until(Duration::from_secs(120), || {
        logs.iter()
            .all(|l| l.stats().copy_lag_segments == 0 && l.local_first_seq() > 1)
    });
    assert!(tiered, "the partitions were not tiered in time");
    let during_tiering = most.load(Ordering::Relaxed);

    // Every partition read from the start (the remote tier, then the local tail) at once.
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
    let limits = svc.cache().read_limits();
    assert!(
        stats.fetches >= PARTITIONS as u64,
        "the reads went to the remote tier: {stats:?}"
    );
    assert!(stats.threads_high_water >= 1, "read-ahead ran: {stats:?}");
    assert!(
        stats.threads_high_water <= limits.threads,
        "engine threads over the bound: {stats:?}"
    );
    assert!(
        stats.in_flight_high_water <= limits.threads,
        "fetches in flight over the bound: {stats:?}"
    );
    assert!(
        stats.bytes_in_flight_high_water <= limits.bytes_in_flight,
        "bytes in flight over the bound: {stats:?}"
    );
    assert!(
        stats.bytes_in_flight_high_water > 0,
        "data ranges were counted in flight: {stats:?}"
    );
    assert!(
        during_tiering <= bound && most <= bound && after <= bound,
        "threads: {before} before, {during_tiering} most while tiering, {most} most while \
         reading, {after} after; bound {bound}"
    );
    assert!(
        svc.cache().stats().bytes <= svc.config().cache_bytes,
        "the shared cache stays within its bytes"
    );
}
