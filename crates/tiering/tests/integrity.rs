//! Integrity across the tiers, at the local edge: nothing damaged leaves the local tier, and a
//! local log that does not continue the remote tier is continued or refused (never served under
//! reused seqs). Remote reads are in `integrity_reads.rs`, the retention point in
//! `integrity_retention_point.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::setup::*;
use common::*;
use krabka_protocol::Message;
use krabka_storage::{Log, Options, RecoveryMode, SegmentInfo};
use krabka_tiering::policy::Mismatch;
use krabka_tiering::{Error, TieredLog, TieringConfig};

// ---- I4: nothing leaves the local tier unverified ----

#[test]
fn damaged_segment_is_never_copied_or_deleted() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    append(&log, 300);
    let closed = closed_segments(&log);
    assert!(closed.len() >= 5, "{} closed segments", closed.len());
    let damaged = closed[2].clone();
    let (bad_seq, bad_pos) = flip_third_frame(&damaged.log_path);

    for round in 0..2 {
        let report = log.run_once().unwrap();
        assert_eq!(report.segments_copied, if round == 0 { 2 } else { 0 });
        assert_eq!(report.copy_blocked_at, Some(damaged.base_seq), "{report:?}");
        let refused = report
            .failures
            .iter()
            .find_map(|e| match e {
                Error::DamagedSegment {
                    path,
                    position,
                    first_seq,
                    ..
                } => Some((path.clone(), *position, *first_seq)),
                _ => None,
            })
            .expect("the damaged segment is reported");
        assert_eq!(
            refused,
            (damaged.log_path.clone(), bad_pos, damaged.base_seq)
        );
        // Nothing at or after the damaged segment is remote, and it stays local.
        let remote = s.finished();
        assert_eq!(remote.len(), 2);
        assert!(remote.iter().all(|m| m.end_offset() < damaged.base_seq));
        assert!(damaged.log_path.exists(), "the damaged segment was deleted");
        assert_eq!(log.local_first_seq(), damaged.base_seq);
        assert_eq!(log.stats().copy_blocked_at, Some(damaged.base_seq));
    }
    assert!(log.stats().segments_refused >= 2);

    // Records before the bad frame are readable across the tiers; the bad one is an error.
    let (stopped, err) = read_until_error(&log, 1);
    assert_eq!(stopped, bad_seq);
    let err = err.expect("the bad frame is an error");
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    let all = log.read(1, 1000).unwrap();
    assert_eq!(
        all.len() as u64,
        bad_seq - 1,
        "a short read up to the bad frame"
    );
}

#[test]
fn background_rounds_stop_before_a_damaged_segment() {
    let s = Setup::new();
    let log = Arc::new(s.open(TieringConfig {
        copy_concurrency: 3,
        ..keep_nothing_locally()
    }));
    append(&log, 300);
    let closed = closed_segments(&log);
    let damaged = closed[3].clone();
    flip_third_frame(&damaged.log_path);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(log.run_round()).unwrap();
    assert_eq!(report.segments_copied, 3);
    assert_eq!(report.copy_blocked_at, Some(damaged.base_seq));
    assert!(
        s.finished()
            .iter()
            .all(|m| m.end_offset() < damaged.base_seq)
    );
    assert!(damaged.log_path.exists());
    assert_eq!(log.local_first_seq(), damaged.base_seq);
}

/// Removes a closed segment's three files, as the reproduction does.
fn delete_segment_files(seg: &SegmentInfo) {
    for p in [&seg.log_path, &seg.index_path, &seg.time_index_path] {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn a_deleted_middle_segment_is_refused_at_open_and_tiering_stops_at_the_repaired_hole() {
    let s = Setup::new();
    let log = s.open(keep_everything());
    append(&log, 300);
    let closed = closed_segments(&log);
    let gone = closed[2].clone();
    log.close().unwrap();
    delete_segment_files(&gone);

    // Open refuses (the local log's own check); nothing is copied or deleted.
    let e = s
        .open_with(options(1024), keep_nothing_locally())
        .unwrap_err();
    match &e {
        Error::Storage { source, .. } => {
            assert!(
                matches!(**source, krabka_storage::Error::SeqGap { .. }),
                "{e}"
            );
        }
        other => panic!("expected the storage SeqGap, got {other}"),
    }
    assert!(s.finished().is_empty());

    // After a repair the missing seqs are an explicit hole: copying stops before it and local
    // retention never passes it.
    let repair = Options {
        recovery: RecoveryMode::Repair,
        ..options(1024)
    };
    let log = s.open_with(repair, keep_nothing_locally()).unwrap();
    assert_eq!(
        log.log()
            .quarantined()
            .into_iter()
            .map(|(r, _)| r)
            .collect::<Vec<_>>(),
        [gone.base_seq..=gone.last_seq]
    );
    let report = log.run_once().unwrap();
    assert_eq!(report.segments_copied, 2);
    assert_eq!(report.copy_blocked_at, Some(gone.base_seq));
    assert!(report.failures.iter().any(
        |e| matches!(e, Error::DamagedSegment { first_seq, .. } if *first_seq == gone.base_seq)
    ));
    assert!(s.finished().iter().all(|m| m.end_offset() < gone.base_seq));
    assert_eq!(log.local_first_seq(), gone.base_seq);
    assert!(
        closed[3].log_path.exists(),
        "a segment past the hole was deleted"
    );
    let (stopped, err) = read_until_error(&log, 1);
    assert_eq!(stopped, gone.base_seq);
    match err {
        Some(Error::Storage { source, .. }) => {
            assert!(matches!(*source, krabka_storage::Error::Quarantined { .. }));
        }
        other => panic!("expected Quarantined, got {other:?}"),
    }
}

#[test]
fn a_hole_the_remote_tier_covers_is_read_from_there_and_blocks_nothing() {
    let s = Setup::new();
    let log = s.open(keep_everything());
    append(&log, 300);
    log.run_once().unwrap();
    let closed = closed_segments(&log);
    let gone = closed[2].clone();
    log.close().unwrap();
    delete_segment_files(&gone);
    let repair = Options {
        recovery: RecoveryMode::Repair,
        ..options(1024)
    };
    let log = s.open_with(repair, keep_everything()).unwrap();
    assert_eq!(log.log().quarantined().len(), 1);
    // The hole's seqs come from the remote copy.
    assert_eq!(read_all_and_check(&log, 1), 300);
    append(&log, 100);
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.copy_blocked_at, None);
    assert!(report.segments_copied > 0);
}

// ---- I3: seqs are contiguous and never reused ----

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() && entry.file_name() != ".lock" {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn wiped_local_log_continues_after_remote_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = durable_open(dir.path(), keep_nothing_locally()).unwrap();
    append(&log, 300);
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let old: Vec<_> = log.read(1, 3).unwrap();
    let remote_end = log.local_first_seq() - 1;
    assert!(remote_end > 200, "remote end {remote_end}");
    log.close().unwrap();

    // The local directory is lost; the remote tier and the durable metadata are kept.
    std::fs::remove_dir_all(dir.path().join("local")).unwrap();
    let log = durable_open(dir.path(), keep_nothing_locally()).unwrap();
    assert_eq!(log.log().next_seq(), remote_end + 1);
    assert_eq!(log.first_seq().unwrap(), 1);
    let new = Message::new("after the wipe");
    assert_eq!(
        log.append(&new).unwrap(),
        remote_end + 1,
        "a seq was reused"
    );
    append(&log, 200);
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);

    // Old seqs still serve the old records; new records have new seqs only.
    assert_eq!(log.read(1, 3).unwrap(), old);
    let after = log.read(remote_end + 1, 1).unwrap();
    assert_eq!(after[0].message.value, new.value);
    let mut seq = 1;
    while seq <= log.last_seq() {
        let page = log.read(seq, 100).unwrap();
        for r in &page {
            assert_eq!(r.seq, seq);
            if seq != remote_end + 1 {
                assert_eq!(r.message.value, message(seq).value, "seq {seq}");
            }
            seq += 1;
        }
    }
    assert_eq!(seq, remote_end + 202);
}

#[test]
fn restored_old_local_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    let log = durable_open(dir.path(), keep_everything()).unwrap();
    append(&log, 150);
    log.run_once().unwrap();
    log.close().unwrap();
    let backup = dir.path().join("backup");
    copy_dir(&local, &backup);

    let log = durable_open(dir.path(), keep_nothing_locally()).unwrap();
    append(&log, 300);
    log.run_once().unwrap();
    log.close().unwrap();

    // The old backup comes back: it ends long before the remote end.
    std::fs::remove_dir_all(&local).unwrap();
    copy_dir(&backup, &local);
    let before = listing(&local);
    let e = durable_open(dir.path(), keep_nothing_locally()).unwrap_err();
    match &e {
        Error::LocalLogMismatch { kind, dir: d, .. } => {
            assert_eq!(*kind, Mismatch::Behind);
            assert_eq!(d, &local);
        }
        other => panic!("expected LocalLogMismatch, got {other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("150") && text.contains("move the directory aside"),
        "{text}"
    );
    let mut after = listing(&local);
    after.retain(|(n, _)| n != ".lock");
    let mut before = before;
    before.retain(|(n, _)| n != ".lock");
    assert_eq!(before, after, "a refused open changed the local log");
}

#[test]
fn a_local_log_starting_past_the_remote_end_is_refused() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    append(&log, 200);
    log.run_once().unwrap();
    let remote_end = s.finished().last().unwrap().end_offset();
    drop(log);

    // Another local log that starts 50 seqs after the remote end.
    let other = s.dir.path().join("other");
    let local = Log::open(&other, options(1024)).unwrap();
    local.start_at(remote_end + 51).unwrap();
    local.append(&message(remote_end + 51)).unwrap();
    let e = TieredLog::new(
        local,
        s.fs.clone(),
        s.rlmm.clone(),
        tp(),
        keep_nothing_locally(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::LocalLogMismatch {
                kind: Mismatch::Gap,
                ..
            }
        ),
        "{e}"
    );

    // An empty one started past the end is refused too (its next seq leaves a gap).
    let empty_dir = s.dir.path().join("empty");
    let empty = Log::open(&empty_dir, options(1024)).unwrap();
    empty.start_at(remote_end + 10).unwrap();
    let e = TieredLog::new(
        empty,
        s.fs.clone(),
        s.rlmm.clone(),
        tp(),
        keep_nothing_locally(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::LocalLogMismatch {
                kind: Mismatch::Gap,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_different_log_over_the_same_seqs_is_refused() {
    let s = Setup::new();
    let log = s.open(keep_everything());
    let stamp = 1_700_000_000_000;
    let msgs: Vec<Message> = (1..=200u64)
        .map(|i| message(i).with_timestamp(stamp + i as i64))
        .collect();
    log.append_batch(&msgs).unwrap();
    log.run_once().unwrap();
    assert!(s.finished().len() > 3);
    drop(log);

    // Same values, other timestamps: same segment boundaries and sizes, other newest
    // timestamps.
    let twin = s.dir.path().join("twin");
    let other = Log::open(&twin, options(1024)).unwrap();
    let msgs: Vec<Message> = (1..=200u64)
        .map(|i| message(i).with_timestamp(stamp + 1000 + i as i64))
        .collect();
    other.append_batch(&msgs).unwrap();
    let e =
        TieredLog::new(other, s.fs.clone(), s.rlmm.clone(), tp(), keep_everything()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::LocalLogMismatch {
                kind: Mismatch::Diverged,
                ..
            }
        ),
        "{e}"
    );

    // Other values: other segment boundaries.
    let stranger = s.dir.path().join("stranger");
    let other = Log::open(&stranger, options(1024)).unwrap();
    let msgs: Vec<Message> = (1..=200u64)
        .map(|i| Message::new(format!("something else entirely {i}")))
        .collect();
    other.append_batch(&msgs).unwrap();
    let e =
        TieredLog::new(other, s.fs.clone(), s.rlmm.clone(), tp(), keep_everything()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::LocalLogMismatch {
                kind: Mismatch::Diverged,
                ..
            }
        ),
        "{e}"
    );

    // The original log reopens fine.
    let log = s.open(keep_everything());
    assert_eq!(read_all_and_check(&log, 1), 200);
}
