//! Integrity across the tiers: nothing damaged leaves the local tier, a local log that does not
//! continue the remote tier is continued or refused (never served under reused seqs), reads are
//! exact or an error, and the edges of the tiered read and its settings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use krabka_protocol::Message;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::metadata::{
    DurableRemoteLogMetadataManager, InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager,
};
use krabka_remote_storage::{
    IndexType, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState,
    TopicIdPartition, Uuid, layout,
};
use krabka_storage::segment::{dump_frames, read_segment_file};
use krabka_storage::{Log, Options, RecoveryMode, SegmentInfo};
use krabka_tiering::policy::Mismatch;
use krabka_tiering::{Error, TieredLog, TieringConfig};

/// Keep locally only what is not yet remote; no age-based retention.
fn keep_nothing_locally() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        ..TieringConfig::default()
    }
}

/// Keep everything in both tiers.
fn keep_everything() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: None,
        retention_ms: None,
        ..TieringConfig::default()
    }
}

struct Setup {
    dir: tempfile::TempDir,
    fs: Arc<FsRemoteStorage>,
    rlmm: Arc<InMemoryRemoteLogMetadataManager>,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
        Setup {
            dir,
            fs,
            rlmm: Arc::new(InMemoryRemoteLogMetadataManager::new()),
        }
    }

    fn local(&self) -> PathBuf {
        self.dir.path().join("local")
    }

    fn remote_root(&self) -> PathBuf {
        self.dir.path().join("remote")
    }

    fn open_with(&self, options: Options, config: TieringConfig) -> Result<TieredLog, Error> {
        TieredLog::open(
            self.local(),
            options,
            self.fs.clone(),
            self.rlmm.clone(),
            tp(),
            config,
        )
    }

    fn open(&self, config: TieringConfig) -> TieredLog {
        self.open_with(options(1024), config).unwrap()
    }

    fn finished(&self) -> Vec<RemoteLogSegmentMetadata> {
        finished(self.rlmm.as_ref())
    }
}

fn finished(rlmm: &dyn RemoteLogMetadataManager) -> Vec<RemoteLogSegmentMetadata> {
    let mut list: Vec<_> = rlmm
        .list_remote_log_segments(&tp())
        .unwrap()
        .into_iter()
        .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
        .collect();
    list.sort_by_key(|m| m.start_offset());
    list
}

fn closed_segments(log: &TieredLog) -> Vec<SegmentInfo> {
    log.log()
        .segments()
        .into_iter()
        .filter(|s| !s.active)
        .collect()
}

/// Flips a byte inside the message of the third frame of the `.log` at `path`; returns the
/// seq of that frame and the frame's byte position.
fn flip_third_frame(path: &Path) -> (u64, u64) {
    let frames: Vec<_> = dump_frames(read_segment_file(path).unwrap()).collect();
    assert!(frames.len() >= 4, "{} frames", frames.len());
    let frame = &frames[2];
    let mut bytes = std::fs::read(path).unwrap();
    let at = usize::try_from(frame.position).unwrap() + 20;
    bytes[at] ^= 0x55;
    std::fs::write(path, bytes).unwrap();
    (frame.seq.unwrap(), frame.position)
}

/// Reads `from..` in pages, checking every record against [`message`]; returns the seq the
/// reads stopped at and the error that stopped them, if any. An empty page before the end
/// is a failure of the test (a silently short result).
fn read_until_error(log: &TieredLog, from: u64) -> (u64, Option<Error>) {
    let last = log.last_seq();
    let mut seq = from;
    while seq <= last {
        match log.read(seq, 37) {
            Ok(page) => {
                assert!(!page.is_empty(), "an empty page at seq {seq} of ..={last}");
                for r in &page {
                    assert_eq!(r.seq, seq, "records out of order");
                    assert_eq!(r.message.value, message(seq).value, "wrong value at {seq}");
                    seq += 1;
                }
            }
            Err(e) => return (seq, Some(e)),
        }
    }
    (seq, None)
}

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

fn durable_open(dir: &Path, config: TieringConfig) -> Result<TieredLog, Error> {
    let fs = Arc::new(FsRemoteStorage::new(dir.join("remote")).unwrap());
    let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap());
    TieredLog::open(dir.join("local"), options(1024), fs, rlmm, tp(), config)
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

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() && entry.file_name() != ".lock" {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
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

// ---- I2 and the corruption matrix: remote reads are exact or an error ----

fn object_path(root: &Path, meta: &RemoteLogSegmentMetadata, index: Option<IndexType>) -> PathBuf {
    root.join(match index {
        None => layout::log_key(meta).unwrap(),
        Some(t) => layout::index_key(meta, t).unwrap(),
    })
}

#[test]
fn records_before_a_bad_remote_frame_are_delivered_first() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    append(&log, 300);
    log.run_once().unwrap();
    let remote = s.finished();
    assert!(remote.len() >= 4);
    let target = &remote[2];
    let path = object_path(&s.remote_root(), target, None);
    let (bad_seq, bad_pos) = flip_third_frame(&path);
    // One read from the segment before: its records, then the bad segment's up to the frame.
    let from = remote[1].start_offset();
    let got = log.read(from, 1000).unwrap();
    assert_eq!(got.len() as u64, bad_seq - from);
    for (r, seq) in got.iter().zip(from..) {
        assert_eq!((r.seq, &r.message.value), (seq, &message(seq).value));
    }
    match log.read(bad_seq, 10) {
        Err(Error::CorruptRemote {
            object, position, ..
        }) => {
            assert_eq!(object, layout::log_key(target).unwrap());
            assert_eq!(position, Some(bad_pos));
        }
        other => panic!("expected CorruptRemote, got {other:?}"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Flip,
    Truncate,
    Delete,
}

#[test]
fn remote_corruption_matrix_gives_exact_records_or_typed_errors() {
    for object in [None, Some(IndexType::Offset), Some(IndexType::Timestamp)] {
        for damage in [Damage::Flip, Damage::Truncate, Damage::Delete] {
            let s = Setup::new();
            let log = s.open(keep_nothing_locally());
            // Increasing timestamps, so a lookup of the target's newest one reaches it.
            let msgs: Vec<Message> = (1..=300u64)
                .map(|seq| message(seq).with_timestamp(1_600_000_000_000 + seq as i64))
                .collect();
            log.append_batch(&msgs).unwrap();
            log.run_once().unwrap();
            let remote = s.finished();
            let target = remote[2].clone();
            let path = object_path(&s.remote_root(), &target, object);
            let bytes = std::fs::read(&path).unwrap();
            match damage {
                Damage::Flip => {
                    let mut b = bytes.clone();
                    let at = b.len() / 2;
                    b[at] ^= 0x55;
                    std::fs::write(&path, b).unwrap();
                }
                Damage::Truncate => std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap(),
                Damage::Delete => std::fs::remove_file(&path).unwrap(),
            }
            let case = format!("{object:?} {damage:?}");
            let (stopped, err) = read_until_error(&log, 1);
            let ts = target.max_timestamp_ms();
            match object {
                Some(IndexType::Timestamp) => {
                    // Reads do not use the time index; the timestamp lookup does.
                    assert!(err.is_none(), "{case}: {err:?}");
                    assert_eq!(stopped, log.last_seq() + 1);
                    let r = log.seq_for_timestamp(ts);
                    assert!(
                        matches!(r, Err(Error::CorruptRemote { .. } | Error::Remote { .. })),
                        "{case}: {r:?}"
                    );
                }
                _ => {
                    let err = err.unwrap_or_else(|| panic!("{case}: no error"));
                    assert!(
                        stopped >= target.start_offset() && stopped <= target.end_offset(),
                        "{case}: stopped at {stopped}"
                    );
                    match &err {
                        Error::CorruptRemote {
                            segment, object: o, ..
                        } => {
                            assert_eq!(&**segment, target.remote_log_segment_id(), "{case}");
                            let key = match object {
                                None => layout::log_key(&target).unwrap(),
                                Some(t) => layout::index_key(&target, t).unwrap(),
                            };
                            assert_eq!(o, &key, "{case}");
                        }
                        Error::Remote { segment, .. } => {
                            assert_eq!(segment.as_ref(), Some(target.remote_log_segment_id()));
                        }
                        other => panic!("{case}: untyped error {other}"),
                    }
                }
            }
        }
    }
}

// ---- the edges of the tiered read and its settings ----

#[test]
fn read_zero_is_out_of_range_like_log_read() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    append(&log, 300);
    assert!(matches!(
        log.log().read(0, 0),
        Err(krabka_storage::Error::OutOfRange { .. })
    ));
    assert!(matches!(log.read(0, 0), Err(Error::OutOfRange { .. })));
    log.run_once().unwrap();
    assert!(log.local_first_seq() > 100);
    // Seq 1 is remote: a read of none of it is fine, as a read of one is.
    assert_eq!(log.read(1, 0).unwrap(), []);
    assert_eq!(log.read(1, 1).unwrap().len(), 1);
    assert!(matches!(log.read(0, 0), Err(Error::OutOfRange { .. })));
    assert_eq!(log.read(log.last_seq() + 1, 0).unwrap(), []);
    assert!(matches!(
        log.read(log.last_seq() + 2, 0),
        Err(Error::OutOfRange { .. })
    ));

    // The first remote segment disappears from the metadata (another process's retention,
    // no checkpoint here): seq 1 is in neither tier, for a read of 0 as for a read of 1.
    let first = s.finished().remove(0);
    for state in [
        RemoteLogSegmentState::DeleteSegmentStarted,
        RemoteLogSegmentState::DeleteSegmentFinished,
    ] {
        s.rlmm
            .update_remote_log_segment_metadata(&RemoteLogSegmentMetadataUpdate::to_state(
                first.remote_log_segment_id().clone(),
                state,
                0,
            ))
            .unwrap();
    }
    assert!(matches!(log.read(1, 1), Err(Error::OutOfRange { .. })));
    assert!(matches!(log.read(1, 0), Err(Error::OutOfRange { .. })));
    let next = first.end_offset() + 1;
    assert_eq!(log.read(next, 0).unwrap(), []);
}

#[test]
fn local_retention_bytes_counts_every_segment_file() {
    let s = Setup::new();
    let limit = 8 << 10;
    let log = s.open(TieringConfig {
        local_retention_bytes: Some(limit),
        ..keep_everything()
    });
    append(&log, 500);
    log.run_once().unwrap();
    let log_bytes: u64 = log.log().segments().iter().map(|s| s.size).sum();
    let all_bytes = log.log().bytes();
    assert!(all_bytes > log_bytes, "index files count too");
    assert!(
        all_bytes <= limit,
        "{all_bytes} bytes kept locally (.log only: {log_bytes}) over a {limit}-byte limit"
    );
    // And no more than needed went: one more segment would not have fit.
    let first = &closed_segments(&log)[0];
    assert!(log.local_first_seq() == first.base_seq);
}

#[test]
fn open_rejects_a_bad_topic_before_creating_files() {
    let s = Setup::new();
    for bad in ["a/b", "..", "", &"x".repeat(250)] {
        let tp = TopicIdPartition::new(Uuid::from_u128(1), bad, 0);
        let e = TieredLog::open(
            s.local(),
            options(1024),
            s.fs.clone(),
            s.rlmm.clone(),
            tp,
            keep_everything(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidConfig(_)), "{bad:?}: {e}");
        assert!(
            !s.local().exists(),
            "{bad:?}: the local directory was created"
        );
    }
    let e = s
        .open_with(
            options(1024),
            TieringConfig {
                copy_concurrency: 0,
                ..keep_everything()
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    assert!(!s.local().exists());
}

#[test]
fn long_topic_name_tiers_on_fs() {
    let s = Setup::new();
    let topic = format!("{}-{}", "t".repeat(200), "u".repeat(48));
    assert_eq!(topic.len(), 249);
    let tp = TopicIdPartition::new(Uuid::from_u128(9), topic, 17);
    let log = TieredLog::open(
        s.local(),
        options(1024),
        s.fs.clone(),
        s.rlmm.clone(),
        tp.clone(),
        keep_nothing_locally(),
    )
    .unwrap();
    let msgs: Vec<Message> = (1..=300u64).map(message).collect();
    log.append_batch(&msgs).unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.segments_copied > 5);
    assert!(log.local_first_seq() > 100);
    let all = log.read(1, 1000).unwrap();
    assert_eq!(all.len(), 300);
    assert!(
        all.iter()
            .zip(1..)
            .all(|(r, seq)| r.seq == seq && r.message.value == message(seq).value)
    );
}

#[test]
fn default_config_keeps_fresh_records() {
    let s = Setup::new();
    let log = s.open(TieringConfig::default());
    // Messages as a user builds them: `Message::new` stamps the current time.
    let msgs: Vec<Message> = (0..300)
        .map(|i| Message::new(format!("fresh {i}")))
        .collect();
    log.append_batch(&msgs).unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.segments_copied > 5);
    assert_eq!(report.remote_segments_deleted, 0, "{report:?}");
    assert_eq!(report.local_segments_deleted, 0, "{report:?}");
    assert_eq!(log.first_seq().unwrap(), 1);
    let all = log.read(1, 1000).unwrap();
    assert_eq!(all.len(), 300);
    assert_eq!(all[299].message.value, "fresh 299");
}

#[test]
fn seq_for_timestamp_spans_both_tiers() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    let ts = |seq: u64| 1_600_000_000_000 + 10 * seq as i64;
    let msgs: Vec<Message> = (1..=400u64)
        .map(|seq| message(seq).with_timestamp(ts(seq)))
        .collect();
    log.append_batch(&msgs).unwrap();
    log.run_once().unwrap();
    let local_first = log.local_first_seq();
    assert!(local_first > 300);
    // The local log alone answers from local data: wrong once the prefix is remote.
    assert_eq!(
        log.log().seq_for_timestamp(ts(1)).unwrap(),
        Some(local_first)
    );

    assert_eq!(log.seq_for_timestamp(i64::MIN).unwrap(), Some(1));
    for seq in [1, 2, 57, 100, 250, local_first - 1, local_first, 399, 400] {
        assert_eq!(
            log.seq_for_timestamp(ts(seq)).unwrap(),
            Some(seq),
            "ts of {seq}"
        );
        assert_eq!(log.seq_for_timestamp(ts(seq) - 5).unwrap(), Some(seq));
    }
    assert_eq!(log.seq_for_timestamp(ts(400) + 1).unwrap(), None);
    // A repeated lookup fetches nothing: the time index and chunks are cached.
    let before = log.stats().requests.total();
    assert_eq!(log.seq_for_timestamp(ts(57)).unwrap(), Some(57));
    assert_eq!(log.stats().requests.total(), before);
}

// ---- the whole-log retention point is trusted only when retention could have written it ----

fn checkpoint_path(s: &Setup) -> PathBuf {
    s.local().join(krabka_tiering::LOG_START_FILE)
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
        Error::Checkpoint { path, .. } => assert_eq!(path, &checkpoint_path(s)),
        other => panic!("point {point}: expected Error::Checkpoint, got {other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(&checkpoint_path(s).display().to_string())
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
        std::fs::write(checkpoint_path(&s), format!("log_start {point}\n")).unwrap();
        assert_refused_point(&s, keep_nothing_locally(), point, 1);
    }
    assert!(s.finished().is_empty(), "nothing was copied");

    // Without the file, tiering starts from seq 1 and every record stays readable.
    std::fs::remove_file(checkpoint_path(&s)).unwrap();
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
        std::fs::write(checkpoint_path(&s), format!("log_start {point}\n")).unwrap();
        assert_refused_point(&s, keep_nothing_locally(), point, remote_end);
    }
    assert!(s.finished().iter().all(|m| m.start_offset() >= 1));
    assert_eq!(s.finished().first().unwrap().start_offset(), 1);

    std::fs::write(
        checkpoint_path(&s),
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
    let text = std::fs::read_to_string(checkpoint_path(&s)).unwrap();
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

    let mut bytes = std::fs::read(checkpoint_path(&s)).unwrap();
    bytes[10] ^= 0x01; // a digit of the seq
    std::fs::write(checkpoint_path(&s), bytes).unwrap();
    let e = s.open_with(options(1024), keep_everything()).unwrap_err();
    assert!(
        matches!(&e, Error::Checkpoint { path, .. } if *path == checkpoint_path(&s)),
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
    let gen_log = generation.join(krabka_storage::segment::segment_file_name(1, "log"));
    let len = std::fs::metadata(&gen_log).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&gen_log)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let e = DurableRemoteLogMetadataManager::open(&metadata).unwrap_err();
    assert!(
        matches!(&e, krabka_remote_storage::RemoteStorageError::MetadataLog { path, .. } if *path == gen_log),
        "{e:?}"
    );
}
