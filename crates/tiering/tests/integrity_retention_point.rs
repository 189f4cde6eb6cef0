//! Integrity of the whole-log retention point: it is trusted only when retention could have
//! written it, and closing a tiered log closes its durable metadata.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::setup::*;
use common::*;
use krabka_tiering::metadata::{DurableRemoteLogMetadataManager, MetadataError};
use krabka_tiering::{Error, TieringConfig};

// ---- the whole-log retention point is trusted only when retention could have written it ----

fn retention_point_path(s: &Setup) -> PathBuf {
    s.local().join(krabka_tiering::RETENTION_POINT_FILE)
}

/// The local directory's files but the lock, with their sizes.
fn local_listing(s: &Setup) -> Vec<(String, u64)> {
    let mut v = listing(&s.local());
    v.retain(|(n, _)| n != ".lock");
    v
}

/// Opening must fail with `Error::Checkpoint` naming the file and both seqs, changing nothing.
fn assert_refused_point(s: &Setup, config: TieringConfig, point: u64, bound: u64) {
    let before = local_listing(s);
    let e = s.open_with(options(1024), config).unwrap_err();
    match &e {
        Error::Checkpoint { path, .. } => assert_eq!(path, &retention_point_path(s)),
        other => panic!("point {point}: expected Error::Checkpoint, got {other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(&retention_point_path(s).display().to_string())
            && text.contains(&point.to_string())
            && text.contains(&bound.to_string()),
        "{text}"
    );
    assert_eq!(
        local_listing(s),
        before,
        "a refused open changed the local log"
    );
}

/// A hand-written (or another log's) `tiering-log-start` on a log that was never tiered: it
/// would make local retention delete segments no tier holds. Open refuses it, naming the file,
/// the point and the local first seq, and changes nothing.
#[test]
fn a_forged_retention_point_on_a_never_tiered_log_fails_open_and_deletes_nothing() {
    let s = Setup::new();
    let log = s.open(keep_everything());
    append(&log, 300);
    let segments = log.log().segments().len();
    assert!(segments > 5, "{segments} segments");
    log.close().unwrap();

    for point in [2000, 99_999, 2] {
        std::fs::write(retention_point_path(&s), format!("log_start {point}\n")).unwrap();
        assert_refused_point(&s, keep_nothing_locally(), point, 1);
    }
    assert!(s.finished().is_empty(), "nothing was copied");

    // Without the file, tiering starts from seq 1 and every record stays readable.
    std::fs::remove_file(retention_point_path(&s)).unwrap();
    let log = s.open(keep_nothing_locally());
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(log.first_seq().unwrap(), 1);
    assert_eq!(read_all_and_check(&log, 1), 300);
}

/// With segments remote, a point past the remote end + 1 (or past the local next seq) cannot
/// have come from retention: refused. The remote end + 1 itself is accepted.
#[test]
fn a_retention_point_past_the_remote_end_fails_open() {
    let s = Setup::new();
    let log = s.open(keep_everything());
    append(&log, 300);
    log.run_once().unwrap();
    let remote_end = s.finished().last().unwrap().end_offset();
    assert!(remote_end < 300);
    log.close().unwrap();

    for point in [remote_end + 2, 300, 99_999] {
        std::fs::write(retention_point_path(&s), format!("log_start {point}\n")).unwrap();
        assert_refused_point(&s, keep_nothing_locally(), point, remote_end);
    }
    assert!(s.finished().iter().all(|m| m.start_offset() >= 1));
    assert_eq!(s.finished().first().unwrap().start_offset(), 1);

    std::fs::write(
        retention_point_path(&s),
        format!("log_start {}\n", remote_end + 1),
    )
    .unwrap();
    let log = s.open(keep_everything());
    assert_eq!(log.first_seq().unwrap(), remote_end + 1);
}

/// A point whole-log retention wrote is read back (checksummed) and accepted at the next open,
/// also once nothing is left remote; a damaged one fails open naming the file.
#[test]
fn a_retention_point_retention_wrote_survives_reopen_and_damage_is_refused() {
    let s = Setup::new();
    let config = TieringConfig {
        retention_bytes: Some(4 << 10),
        ..keep_nothing_locally()
    };
    let log = s.open(config.clone());
    append(&log, 300);
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.remote_segments_deleted > 0, "{report:?}");
    let first = log.first_seq().unwrap();
    assert!(first > 1);
    log.close().unwrap();
    let text = std::fs::read_to_string(retention_point_path(&s)).unwrap();
    assert!(
        text.starts_with(&format!("log_start {first} crc32 ")),
        "{text:?}"
    );

    let log = s.open(config.clone());
    assert_eq!(log.first_seq().unwrap(), first);
    assert_eq!(read_all_and_check(&log, first), 301 - first);
    log.close().unwrap();

    // Nothing remote any more (every segment went by retention): the point is at most the
    // local first seq, which local retention moved up to it.
    let log = s.open(TieringConfig {
        retention_bytes: Some(1),
        ..keep_nothing_locally()
    });
    log.run_once().unwrap();
    assert!(s.finished().is_empty());
    let first = log.first_seq().unwrap();
    log.close().unwrap();
    let log = s.open(config);
    assert_eq!(log.first_seq().unwrap(), first);
    log.close().unwrap();

    let mut bytes = std::fs::read(retention_point_path(&s)).unwrap();
    bytes[10] ^= 0x01; // a digit of the seq
    std::fs::write(retention_point_path(&s), bytes).unwrap();
    let e = s.open_with(options(1024), keep_everything()).unwrap_err();
    assert!(
        matches!(&e, Error::Checkpoint { path, .. } if *path == retention_point_path(&s)),
        "{e}"
    );
}

/// Closing a tiered log drops its handle on the durable metadata manager, which closes the
/// manager's log: a later loss of its last (acknowledged) event fails the next open naming the
/// file instead of being cut as a torn write.
#[test]
fn closing_a_tiered_log_closes_its_durable_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let log = durable_open(dir.path(), keep_nothing_locally()).unwrap();
    append(&log, 200);
    let report = log.run_once().unwrap();
    assert!(report.segments_copied > 0, "{report:?}");
    log.close().unwrap();

    let metadata = dir.path().join("metadata");
    let generation = std::fs::read_dir(&metadata)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir() && p.file_name().unwrap().to_string_lossy().starts_with("gen-"))
        .unwrap();
    assert!(
        generation
            .join(krabka_storage::RECOVERY_POINT_FILE_NAME)
            .exists()
    );
    let gen_log = generation.join(krabka_storage::segment::segment_file_name(
        1,
        krabka_storage::segment::LOG_EXTENSION,
    ));
    let len = std::fs::metadata(&gen_log).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&gen_log)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let e = DurableRemoteLogMetadataManager::open(&metadata).unwrap_err();
    assert!(
        matches!(MetadataError::find(&e), Some(MetadataError::Log { path, .. }) if *path == gen_log),
        "{e:?}"
    );
}
