//! Tiering under injected remote failures and stalls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit::{FaultInjecting, Faults, Method};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::{TieredLog, TieringConfig};

#[test]
fn thirty_percent_remote_failures_lose_nothing_and_leave_no_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsRemoteStorage::new(dir.path().join("remote")).unwrap();
    let rsm = Arc::new(FaultInjecting::new(fs, Faults::fail_fraction(0x5eed, 0.3)));
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let config = TieringConfig {
        local_retention_bytes: Some(0),
        chunk_bytes: 256,
        cache_bytes: 16 << 10,
        ..TieringConfig::default()
    };
    let log = TieredLog::open(
        dir.path().join("local"),
        options(1024),
        rsm.clone(),
        rlmm.clone(),
        tp(),
        config,
    )
    .unwrap();
    let started = Instant::now();
    let mut failures = 0;
    for round in 1..=500u64 {
        append(&log, 10);
        let report = log.run_once().unwrap();
        failures += report.failures.len();
        // No local segment is ever gone before its copy is finished.
        assert_below_local_is_remote(&log, rlmm.as_ref());
        // Every round: the records just appended and a sample below the local first seq are
        // readable (with fetch faults off: they test tiering, not reads).
        rsm.set_enabled(false);
        let last = log.last_seq();
        check_range(&log, last - 9, 10);
        let local_first = log.local_first_seq();
        if local_first > 1 {
            let sample = 1 + (round * 7919) % (local_first - 1);
            check_range(&log, sample, 3);
        }
        if round % 100 == 0 {
            assert_eq!(read_all_and_check(&log, 1), log.last_seq());
        }
        rsm.set_enabled(true);
        // A generous bound: a loaded CI machine is slow, a hang is not.
        assert!(started.elapsed() < Duration::from_secs(300), "too slow");
    }
    assert!(failures > 50, "only {failures} failures were seen");
    assert!(rsm.injected(Method::CopyLogSegmentData) > 0);
    assert!(rsm.injected(Method::DeleteLogSegmentData) > 0);
    assert!(log.local_first_seq() > 1, "nothing was ever tiered");

    rsm.set_enabled(false);
    for _ in 0..3 {
        let report = log.run_once().unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
    }
    assert_eq!(read_all_and_check(&log, 1), 5000);
    let (stray, unfinished) = orphans(rsm.inner(), rlmm.as_ref());
    assert!(stray.is_empty(), "orphaned remote files: {stray:?}");
    assert_eq!(unfinished, 0, "attempts left unfinished");
    assert_eq!(log.stats().copy_lag_segments, 0);
}

/// Reads `n` records from `from` and checks each one's seq and value.
fn check_range(log: &TieredLog, from: u64, n: usize) {
    let records = log.read(from, n).unwrap();
    assert_eq!(records.len(), n, "short read from {from}");
    for (seq, r) in (from..).zip(&records) {
        assert_eq!(r.seq, seq);
        assert_eq!(r.message.value, message(seq).value, "wrong value at {seq}");
    }
}

#[test]
fn a_copy_past_its_deadline_is_abandoned_retried_under_a_new_id_and_cleaned_up() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fs = FsRemoteStorage::new(dir.path().join("remote")).unwrap();
    // Only the first round's copies stall (2 s, far past the 500 ms deadline); later copies
    // run at full speed, however loaded the machine.
    let stall = Faults::stall(Duration::from_secs(2)).on(&[Method::CopyLogSegmentData]);
    let rsm = Arc::new(FaultInjecting::new(fs, stall));
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let config = TieringConfig {
        local_retention_bytes: Some(0),
        copy_deadline: Duration::from_millis(500),
        copy_concurrency: 3,
        ..TieringConfig::default()
    };
    let log = Arc::new(
        TieredLog::open(
            dir.path().join("local"),
            options(1024),
            rsm.clone(),
            rlmm.clone(),
            tp(),
            config,
        )
        .unwrap(),
    );
    append(&log, 200);
    rt.block_on(async {
        let report = log.run_round().await.unwrap();
        assert_eq!(report.segments_copied, 0);
        assert!(
            report
                .failures
                .iter()
                .any(|e| matches!(e, krabka_tiering::Error::CopyDeadlineExceeded { .. }))
        );
        assert_eq!(
            log.local_first_seq(),
            1,
            "nothing may go before it is remote"
        );
        rsm.set_faults(Faults::none());
        let handle = log.clone().spawn(Duration::from_millis(20));
        let until = Instant::now() + Duration::from_secs(60);
        // Copies finish before their round does (retention runs after them): wait for both.
        while (log.stats().copy_lag_segments > 0 || handle.rounds() == 0) && Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(handle.rounds() >= 1);
        handle.shutdown().await.unwrap();
        // The abandoned copies return (after their stall) and are cleaned up; rounds clean
        // any attempt whose call has returned since.
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            log.run_round().await.unwrap();
            let (stray, unfinished) = orphans(rsm.inner(), rlmm.as_ref());
            if (stray.is_empty() && unfinished == 0) || Instant::now() > until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!(log.stats().copy_lag_segments, 0);
    assert!(log.stats().copy_failures > 0);
    assert_eq!(read_all_and_check(&log, 1), 200);
    let (stray, unfinished) = orphans(rsm.inner(), rlmm.as_ref());
    assert!(stray.is_empty(), "orphaned remote files: {stray:?}");
    assert_eq!(unfinished, 0);
}
