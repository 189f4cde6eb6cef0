//! End to end over the filesystem backend: tier, read back across tiers, retention.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use krabka_remote_fs::FsRemoteStorage;
use krabka_tiering::metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_tiering::{Error, TieredLog, TieringConfig};

const SEGMENT: u64 = 64 << 10;

#[test]
fn hundred_thousand_records_read_back_across_tiers_and_retention_moves_first_seq() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    // Local retention of about two segments (the active one plus two closed ones).
    let config = TieringConfig {
        local_retention_bytes: Some(2 * SEGMENT + SEGMENT / 2),
        chunk_bytes: 16 << 10,
        ..TieringConfig::default()
    };
    let log = TieredLog::open(
        dir.path().join("local"),
        options(SEGMENT),
        fs.clone(),
        rlmm.clone(),
        tp(),
        config.clone(),
    )
    .unwrap();
    for _ in 0..100 {
        append(&log, 1000);
    }
    assert_eq!(log.last_seq(), 100_000);
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.segments_copied > 50, "{report:?}");
    let local_segments = log.log().segments().len();
    assert!(local_segments <= 3, "{local_segments} local segments kept");
    assert_eq!(log.first_seq().unwrap(), 1);
    assert!(log.local_first_seq() > 90_000);

    let before = log.stats();
    assert_eq!(read_all_and_check(&log, 1), 100_000);
    let after = log.stats();
    // A sequential scan fetches about size / chunk ranges (halved by read-ahead), never
    // whole segments per record, and no offset index: each read starts at a segment's first
    // batch or where the read before it stopped.
    let remote_bytes = after.remote_bytes;
    let fetches = after.requests.fetch_log - before.requests.fetch_log;
    let chunks = remote_bytes / u64::from(config.chunk_bytes) + report.segments_copied;
    assert!(
        fetches <= chunks,
        "{fetches} range fetches for {chunks} chunks"
    );
    assert_eq!(after.requests.fetch_index - before.requests.fetch_index, 0);
    let before_first = log.read(0, 1);
    assert!(
        matches!(
            before_first,
            Err(Error::Read(krabka_tiering::ReadError::OutOfRange {
                seq: 0,
                first: 1,
                last: 100_000
            }))
        ),
        "{before_first:?}"
    );
    assert!(log.read(100_001, 10).unwrap().is_empty());
    assert!(matches!(
        log.read(100_002, 10),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));
    log.close().unwrap();

    // Reopen with whole-log retention of about 1 MiB: old remote segments go, first_seq moves.
    let retained = TieringConfig {
        retention_bytes: Some(1 << 20),
        ..config
    };
    let log = TieredLog::open(
        dir.path().join("local"),
        options(SEGMENT),
        fs.clone(),
        rlmm.clone(),
        tp(),
        retained,
    )
    .unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    // About 65 segments of 64 KiB, of which about 1 MiB (16) is kept.
    assert!(report.remote_segments_deleted > 40, "{report:?}");
    let first = log.first_seq().unwrap();
    assert!(first > 50_000, "first seq {first}");
    match log.read(first - 1, 1) {
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { seq, first: f, .. })) => {
            assert_eq!((seq, f), (first - 1, first))
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    assert!(matches!(
        log.read(1, 1),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));
    assert_eq!(read_all_and_check(&log, first), 100_001 - first);
    assert!(log.stats().remote_bytes + log.stats().local_bytes <= (1 << 20) + 3 * SEGMENT);
    let (stray, unfinished) = orphans(&fs, rlmm.as_ref());
    assert!(stray.is_empty(), "orphaned remote files: {stray:?}");
    assert_eq!(unfinished, 0);
}

#[test]
fn cold_point_read_costs_one_request_and_a_repeated_read_none() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let config = TieringConfig {
        local_retention_bytes: Some(0),
        ..TieringConfig::default()
    };
    let log = TieredLog::open(
        dir.path().join("local"),
        options(32 << 10),
        fs,
        rlmm.clone(),
        tp(),
        config,
    )
    .unwrap();
    for _ in 0..10 {
        append(&log, 1000);
    }
    log.run_once().unwrap();
    assert!(log.local_first_seq() > 9000);
    // One seq inside each of four remote segments: every one is a cold read.
    let mut segs = rlmm.list_remote_log_segments(&tp()).unwrap();
    segs.sort_by_key(|m| m.start_offset());
    assert!(segs.len() >= 8, "{} remote segments", segs.len());
    let picks = [0, 2, segs.len() / 2, segs.len() - 1].map(|i| {
        let m = &segs[i];
        m.start_offset() + (m.end_offset() - m.start_offset()) * 2 / 3
    });
    for seq in picks {
        let before = log.stats().requests;
        let r = log.read(seq, 1).unwrap();
        assert_eq!(r[0].message.value, message(seq).value);
        let cold = log.stats().requests.total() - before.total();
        assert_eq!(cold, 1, "cold point read of {seq} cost {cold} requests");
        let before = log.stats();
        assert_eq!(log.read(seq, 1).unwrap(), r);
        let after = log.stats();
        assert_eq!(after.requests.total(), before.requests.total());
        assert!(after.cache_hits > before.cache_hits);
    }
    let stats = log.stats();
    assert!(stats.cache_bytes > 0);
    assert_eq!(stats.copy_lag_segments, 0);
}
