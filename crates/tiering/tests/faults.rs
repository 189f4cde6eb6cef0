//! Tiering under injected remote failures and stalls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::metadata::InMemoryRemoteLogMetadataManager;
use krabka_remote_storage::testkit::{FaultInjecting, Faults, Method};
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
    for round in 1..=500u32 {
        append(&log, 10);
        let report = log.run_once().unwrap();
        failures += report.failures.len();
        // No local segment is ever gone before its copy is finished.
        assert_below_local_is_remote(&log, rlmm.as_ref());
        if round % 100 == 0 {
            rsm.set_enabled(false);
            assert_eq!(read_all_and_check(&log, 1), log.last_seq());
            rsm.set_enabled(true);
        }
        assert!(started.elapsed() < Duration::from_secs(60), "too slow");
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

#[test]
fn a_copy_past_its_deadline_is_abandoned_retried_under_a_new_id_and_cleaned_up() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fs = FsRemoteStorage::new(dir.path().join("remote")).unwrap();
    let stall = Faults::stall(Duration::from_millis(400)).on(&[Method::CopyLogSegmentData]);
    let rsm = Arc::new(FaultInjecting::new(fs, stall));
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let config = TieringConfig {
        local_retention_bytes: Some(0),
        copy_deadline: Duration::from_millis(50),
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
        let until = Instant::now() + Duration::from_secs(20);
        while log.stats().copy_lag_segments > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Let the abandoned copies return and be cleaned, then stop.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = handle.rounds();
        assert!(after > 1);
        handle.shutdown().await.unwrap();
        // Stale attempts whose call has returned are cleaned by the next round.
        log.run_round().await.unwrap();
    });
    assert_eq!(log.stats().copy_lag_segments, 0);
    assert!(log.stats().copy_failures > 0);
    assert_eq!(read_all_and_check(&log, 1), 200);
    let (stray, unfinished) = orphans(rsm.inner(), rlmm.as_ref());
    assert!(stray.is_empty(), "orphaned remote files: {stray:?}");
    assert_eq!(unfinished, 0);
}
