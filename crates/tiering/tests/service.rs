//! TieringService: many partitions with faults, fairness, add/remove, quota, shutdown, reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod service_util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::RemoteStorageManager;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::testkit::{FaultInjecting, Faults, Method};
use krabka_tiering::{Error, ServiceConfig, TieredLog, TieringService};
use service_util::{World, append, check_all, tp, wait_until};

fn service(config: ServiceConfig) -> TieringService {
    TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        ..config
    })
    .unwrap()
}

fn all_copied(logs: &[Arc<TieredLog>]) -> bool {
    logs.iter().all(|l| l.stats().copy_lag_segments == 0)
}

#[test]
fn many_partitions_with_remote_faults_lose_nothing_and_leave_no_orphans() {
    let world = World::new();
    let faults = Faults::fail_fraction(11, 0.25)
        .partial_copies(0.5)
        .on(&[Method::CopyLogSegmentData, Method::DeleteLogSegmentData]);
    let faulty = Arc::new(FaultInjecting::new(world.fs.clone(), faults));
    let svc = service(ServiceConfig {
        copy_threads: 3,
        ..ServiceConfig::default()
    });
    let rsm: Arc<dyn RemoteStorageManager> = Arc::new(svc.instrument(faulty.clone()));
    let n = 24;
    let logs: Vec<_> = (0..n)
        .map(|i| world.partition(i, rsm.clone(), 600, 120))
        .collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    assert!(wait_until(Duration::from_secs(60), || all_copied(&logs)));
    assert!(
        faulty.injected(Method::CopyLogSegmentData) > 0,
        "faults were injected"
    );
    // Faults off: the rounds that follow clean every failed attempt up.
    faulty.set_enabled(false);
    let clean = wait_until(Duration::from_secs(30), || {
        let (stray, unfinished) = world.orphans(n);
        stray.is_empty() && unfinished == 0
    });
    let report = svc.shutdown(Duration::from_secs(5));
    assert!(report.clean, "{report:?}");
    assert!(clean, "orphans left: {:?}", world.orphans(n));
    for (i, log) in (0..n).zip(&logs) {
        assert!(
            log.local_first_seq() > 1,
            "partition {i} tiered nothing locally away"
        );
        check_all(log, i);
    }
}

#[test]
fn a_partition_with_a_large_backlog_does_not_starve_the_others() {
    let world = World::new();
    let stalled = FaultInjecting::new(
        world.fs.clone(),
        Faults::stall(Duration::from_millis(4)).on(&[Method::CopyLogSegmentData]),
    );
    let rsm: Arc<dyn RemoteStorageManager> = Arc::new(stalled);
    let svc = service(ServiceConfig {
        copy_threads: 1,
        ..ServiceConfig::default()
    });
    // ~150 segments for partition 0, one or two for the others.
    let big = world.partition(0, rsm.clone(), 300, 1500);
    svc.add(big.clone()).unwrap();
    let small: Vec<_> = (1..=10)
        .map(|i| world.partition(i, rsm.clone(), 300, 12))
        .collect();
    for log in &small {
        svc.add(log.clone()).unwrap();
    }
    assert!(wait_until(Duration::from_secs(30), || {
        small.iter().all(|l| l.stats().segments_copied > 0)
    }));
    let big_copied = big.stats().segments_copied;
    let big_total = big.log().segments().len() as u64 + big_copied;
    assert!(
        big_copied < big_total / 2,
        "every small partition had a copy after only {big_copied} of ~{big_total} big ones"
    );
    svc.shutdown(Duration::from_secs(5));
}

#[test]
fn partitions_are_added_and_removed_mid_round() {
    let world = World::new();
    let stalled = FaultInjecting::new(
        world.fs.clone(),
        Faults::stall(Duration::from_millis(30)).on(&[Method::CopyLogSegmentData]),
    );
    let rsm: Arc<dyn RemoteStorageManager> = Arc::new(stalled);
    let svc = service(ServiceConfig {
        copy_threads: 2,
        ..ServiceConfig::default()
    });
    let logs: Vec<_> = (0..6)
        .map(|i| world.partition(i, rsm.clone(), 400, 200))
        .collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    assert!(matches!(
        svc.add(logs[0].clone()),
        Err(Error::Service(
            krabka_tiering::ServiceError::PartitionExists(_)
        ))
    ));
    assert!(wait_until(Duration::from_secs(10), || {
        logs.iter().any(|l| l.stats().segments_copied > 0)
    }));
    // Removed mid-round: in-flight work is finished when remove returns.
    let mut removed = Vec::new();
    for i in 0..3 {
        let log = svc.remove(&tp(i)).unwrap();
        assert!(Arc::ptr_eq(&log, &logs[i as usize]));
        let unfinished = world
            .rlmm
            .list_remote_log_segments(&tp(i))
            .unwrap()
            .iter()
            .filter(|m| {
                m.state() != krabka_remote_storage::RemoteLogSegmentState::CopySegmentFinished
            })
            .count();
        assert_eq!(
            unfinished, 0,
            "partition {i} has an attempt in flight after remove"
        );
        removed.push((i, log.stats().segments_copied));
    }
    assert!(matches!(
        svc.remove(&tp(0)),
        Err(Error::Service(
            krabka_tiering::ServiceError::UnknownPartition(_)
        ))
    ));
    assert_eq!(svc.partitions().len(), 3);
    std::thread::sleep(Duration::from_millis(200));
    for (i, copied) in &removed {
        assert_eq!(
            logs[*i as usize].stats().segments_copied,
            *copied,
            "removed {i} moved"
        );
    }
    // Added back: it continues where it stopped, and new appends are tiered too.
    append(&logs[0], 0, 50);
    svc.add(logs[0].clone()).unwrap();
    assert!(wait_until(Duration::from_secs(30), || all_copied(
        &logs[..1]
    ) && all_copied(
        &logs[3..]
    )));
    assert!(svc.shutdown(Duration::from_secs(5)).clean);
    check_all(&logs[0], 0);
    for i in 3..6 {
        check_all(&logs[i as usize], i);
    }
}

#[test]
fn copy_quota_holds_within_ten_percent() {
    let world = World::new();
    let rate = 400_000u64;
    let svc = service(ServiceConfig {
        copy_threads: 3,
        copy_bytes_per_second: Some(rate),
        ..ServiceConfig::default()
    });
    let rsm: Arc<dyn RemoteStorageManager> = Arc::new(svc.instrument(world.fs.clone()));
    // ~3 MB in ~16 KiB segments: more than the few seconds measured can copy, in segments
    // large enough that the quota, not the per-copy fsyncs of a slow or loaded disk, sets the
    // rate (with 4 KiB segments a loaded 2-core machine copied below the quota).
    let logs: Vec<_> = (0..6)
        .map(|i| world.partition(i, rsm.clone(), 16 << 10, 25_000))
        .collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    let copied = || logs.iter().map(|l| l.stats().bytes_copied).sum::<u64>();
    std::thread::sleep(Duration::from_millis(500));
    let (t0, b0) = (Instant::now(), copied());
    std::thread::sleep(Duration::from_secs(3));
    let (secs, bytes) = (t0.elapsed().as_secs_f64(), copied() - b0);
    assert!(
        logs.iter().any(|l| l.stats().copy_lag_segments > 0),
        "backlog ran out"
    );
    let measured = bytes as f64 / secs;
    assert!(
        (measured - rate as f64).abs() <= rate as f64 * 0.10,
        "copied {measured:.0} B/s under a {rate} B/s quota"
    );
    svc.shutdown(Duration::from_secs(5));
}

#[test]
fn shutdown_mid_round_finishes_or_abandons_within_its_deadline_and_leaves_no_orphans() {
    let world = World::new();
    let stalled = Arc::new(FaultInjecting::new(
        world.fs.clone(),
        Faults::stall(Duration::from_millis(600)).on(&[Method::CopyLogSegmentData]),
    ));
    let rsm: Arc<dyn RemoteStorageManager> = stalled.clone();
    let svc = service(ServiceConfig {
        copy_threads: 4,
        ..ServiceConfig::default()
    });
    let logs: Vec<_> = (0..8)
        .map(|i| world.partition(i, rsm.clone(), 400, 60))
        .collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    assert!(wait_until(Duration::from_secs(5), || stalled
        .calls(Method::CopyLogSegmentData)
        >= 4));
    let start = Instant::now();
    let report = svc.shutdown(Duration::from_millis(300));
    assert!(
        start.elapsed() < Duration::from_millis(800),
        "shutdown took {:?}",
        start.elapsed()
    );
    assert!(report.abandoned_turns > 0, "{report:?}");
    // The abandoned copies' threads clean their attempts up as their calls return.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let (stray, unfinished) = world.orphans(8);
            stray.is_empty() && unfinished == 0
        }),
        "orphans left: {:?}",
        world.orphans(8)
    );
    for (i, log) in (0..8).zip(&logs) {
        check_all(log, i);
    }
}

#[test]
fn shutdown_with_time_enough_finishes_in_flight_copies() {
    let world = World::new();
    let stalled = Arc::new(FaultInjecting::new(
        world.fs.clone(),
        Faults::stall(Duration::from_millis(100)).on(&[Method::CopyLogSegmentData]),
    ));
    let rsm: Arc<dyn RemoteStorageManager> = stalled.clone();
    let svc = service(ServiceConfig::default());
    let logs: Vec<_> = (0..4)
        .map(|i| world.partition(i, rsm.clone(), 400, 60))
        .collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    assert!(wait_until(Duration::from_secs(5), || stalled
        .calls(Method::CopyLogSegmentData)
        >= 1));
    let report = svc.shutdown(Duration::from_secs(5));
    assert!(report.clean && report.abandoned_turns == 0, "{report:?}");
    let (stray, unfinished) = world.orphans(4);
    assert!(stray.is_empty() && unfinished == 0);
}

#[test]
fn reads_beyond_the_reader_queue_are_refused_and_slow_reads_time_out() {
    let world = World::new();
    let stalled = Arc::new(FaultInjecting::new(world.fs.clone(), Faults::none()));
    let rsm: Arc<dyn RemoteStorageManager> = stalled.clone();
    let svc = Arc::new(service(ServiceConfig {
        read_threads: 1,
        read_queue: 1,
        fetch_deadline: Duration::from_millis(400),
        ..ServiceConfig::default()
    }));
    let log = world.partition(0, rsm, 400, 100);
    svc.add(log.clone()).unwrap();
    assert!(wait_until(Duration::from_secs(10), || all_copied(
        std::slice::from_ref(&log)
    )));
    assert_eq!(svc.read(&tp(0), 1, 5).unwrap().len(), 5);
    stalled.set_faults(
        Faults::stall(Duration::from_millis(600))
            .on(&[Method::FetchLogSegment, Method::FetchIndex]),
    );
    let readers: Vec<_> = (0..2)
        .map(|k| {
            let svc = svc.clone();
            // Seqs never read before: nothing of them is cached.
            std::thread::spawn(move || svc.read(&tp(0), 30 + k * 30, 5))
        })
        .collect();
    assert!(wait_until(Duration::from_secs(2), || svc
        .reader_queue_size()
        == 2));
    assert!(matches!(
        svc.read(&tp(0), 90, 5),
        Err(Error::Read(krabka_tiering::ReadError::ReaderQueueFull {
            limit: 2
        }))
    ));
    for r in readers {
        assert!(matches!(
            r.join().unwrap(),
            Err(Error::Read(
                krabka_tiering::ReadError::FetchDeadlineExceeded { .. }
            ))
        ));
    }
    assert!(matches!(
        svc.read(&tp(9), 1, 1),
        Err(Error::Service(
            krabka_tiering::ServiceError::UnknownPartition(_)
        ))
    ));
    stalled.set_faults(Faults::none());
    assert!(wait_until(Duration::from_secs(5), || svc
        .reader_queue_size()
        == 0));
    // Reads work again (a read the cache serves may end where the cached bytes do).
    let mut seq = 1;
    for _ in 0..100 {
        if seq > 100 {
            break;
        }
        let page = svc.read(&tp(0), seq, 100).unwrap();
        assert_eq!(page.first().map(|r| r.seq), Some(seq));
        seq += page.len() as u64;
    }
    assert_eq!(seq, 101);
}

#[test]
fn partitions_share_one_byte_bounded_cache() {
    let world = World::new();
    let svc = service(ServiceConfig {
        cache_bytes: 8 << 10,
        ..ServiceConfig::default()
    });
    let logs: Vec<_> = (0..4)
        .map(|i| {
            let log = TieredLog::open(
                world.dir.path().join(format!("c{i}")),
                service_util::options(400),
                world.fs.clone(),
                world.rlmm.clone(),
                tp(i),
                service_util::config(),
            )
            .unwrap()
            .with_cache(svc.cache().clone());
            append(&log, i, 200);
            Arc::new(log)
        })
        .collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    assert!(wait_until(Duration::from_secs(20), || all_copied(&logs)));
    for (i, log) in (0..4).zip(&logs) {
        check_all(log, i);
    }
    let stats = svc.cache().stats();
    assert!(stats.bytes <= 8 << 10, "{stats:?}");
    assert!(stats.misses > 0 && stats.evictions > 0, "{stats:?}");
    svc.shutdown(Duration::from_secs(5));
}

#[test]
fn a_read_the_cache_serves_does_not_wait_for_the_reader_slot_a_fetch_holds() {
    let world = World::new();
    let stalled = Arc::new(FaultInjecting::new(world.fs.clone(), Faults::none()));
    let slow: Arc<dyn RemoteStorageManager> = stalled.clone();
    let svc = Arc::new(service(ServiceConfig {
        read_threads: 1,
        read_queue: 4,
        ..ServiceConfig::default()
    }));
    let cached = world.partition(0, world.fs.clone(), 400, 100);
    let fetching = world.partition(1, slow, 400, 100);
    svc.add(cached.clone()).unwrap();
    svc.add(fetching.clone()).unwrap();
    assert!(wait_until(Duration::from_secs(20), || all_copied(&[
        cached.clone(),
        fetching.clone()
    ])));
    // Partition 0's remote range, read once: now in its cache.
    let first = cached.local_first_seq();
    assert!(first > 50, "most of partition 0 is remote only");
    let want = usize::try_from(first - 1).unwrap();
    assert_eq!(svc.read(&tp(0), 1, want).unwrap().len(), want);
    let fetches = cached.stats().requests;

    // Partition 1's read holds the only reader slot while its fetch stalls.
    let stall = Duration::from_secs(5);
    stalled.set_faults(Faults::stall(stall).on(&[Method::FetchLogSegment, Method::FetchIndex]));
    let blocked = {
        let svc = svc.clone();
        std::thread::spawn(move || svc.read(&tp(1), 30, 5))
    };
    assert!(wait_until(Duration::from_secs(2), || svc
        .reader_queue_size()
        == 1));
    std::thread::sleep(Duration::from_millis(200));

    let start = Instant::now();
    let page = svc.read(&tp(0), 1, want).unwrap();
    let took = start.elapsed();
    assert_eq!(page.len(), want);
    for (r, seq) in page.iter().zip(1..) {
        assert_eq!(r.seq, seq);
        assert_eq!(
            r.message.value.as_ref(),
            service_util::value(0, seq).as_bytes()
        );
    }
    assert!(
        took < stall / 2,
        "the cached read took {took:?}, waiting behind the stalled fetch ({stall:?})"
    );
    assert_eq!(
        svc.reader_queue_size(),
        1,
        "the stalled read still holds its slot"
    );
    assert_eq!(cached.stats().requests, fetches, "served without a fetch");
    let slow_page = blocked.join().unwrap().unwrap();
    assert_eq!(slow_page.first().map(|r| r.seq), Some(30));
}

#[test]
fn a_read_that_must_fetch_does_not_wait_behind_the_reader_slot_of_a_stalled_fetch() {
    let world = World::new();
    let stalled = Arc::new(FaultInjecting::new(world.fs.clone(), Faults::none()));
    let slow: Arc<dyn RemoteStorageManager> = stalled.clone();
    // One reader slot: a read holding it while its bytes are in flight would block the other.
    let svc = Arc::new(service(ServiceConfig {
        read_threads: 1,
        read_queue: 4,
        ..ServiceConfig::default()
    }));
    let cold = world.partition(0, world.fs.clone(), 400, 100);
    let fetching = world.partition(1, slow, 400, 100);
    svc.add(cold.clone()).unwrap();
    svc.add(fetching.clone()).unwrap();
    assert!(wait_until(Duration::from_secs(20), || all_copied(&[
        cold.clone(),
        fetching.clone()
    ])));
    let first = cold.local_first_seq();
    assert!(first > 50, "most of partition 0 is remote only");
    let want = usize::try_from(first - 1).unwrap();
    let fetches = cold.stats().requests;

    // Partition 1's read waits for a fetch that stalls.
    let stall = Duration::from_secs(5);
    stalled.set_faults(Faults::stall(stall).on(&[Method::FetchLogSegment, Method::FetchIndex]));
    let blocked = {
        let svc = svc.clone();
        std::thread::spawn(move || svc.read(&tp(1), 30, 5))
    };
    assert!(wait_until(Duration::from_secs(2), || svc
        .reader_queue_size()
        == 1));
    std::thread::sleep(Duration::from_millis(200));

    // Partition 0's records are in no cache: its read fetches them, beside the stalled fetch.
    let start = Instant::now();
    let page = svc.read(&tp(0), 1, want).unwrap();
    let took = start.elapsed();
    assert_eq!(page.len(), want);
    for (r, seq) in page.iter().zip(1..) {
        assert_eq!(r.seq, seq);
        assert_eq!(
            r.message.value.as_ref(),
            service_util::value(0, seq).as_bytes()
        );
    }
    assert!(
        took < stall / 2,
        "the read that fetched took {took:?}, waiting behind the stalled fetch ({stall:?})"
    );
    assert!(
        cold.stats().requests.fetch_log + cold.stats().requests.fetch_index
            > fetches.fetch_log + fetches.fetch_index,
        "partition 0's read fetched"
    );
    let slow_page = blocked.join().unwrap().unwrap();
    assert_eq!(slow_page.first().map(|r| r.seq), Some(30));
    assert_eq!(slow_page.len(), 5);
}
