//! Unit tests of the durable manager's crash handling (simulated crashes at each compaction
//! step) and of its directory layout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use krabka_protocol::Message;
use krabka_remote_storage::RemoteLogSegmentState::{self, *};
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::metadata::event::MetadataEvent;
use krabka_remote_storage::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteStorageError, TopicIdPartition,
};
use krabka_storage::{Log, RecoveryMode};
use uuid::Uuid;

use super::compact::Step;
use super::generation::{CURRENT, CURRENT_TMP, GEN_PREFIX, entry_names, gen_dir};
use super::replay::log_options;
use super::{DurableOptions, DurableRemoteLogMetadataManager};
use crate::MetadataError;
use krabka_storage::segment::is_segment_file_name;

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(9), "meta", 1)
}

fn to(m: &RemoteLogSegmentMetadata, s: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate {
    RemoteLogSegmentMetadataUpdate::to_state(m.remote_log_segment_id().clone(), s, 3)
}

/// Fills a manager with live segments in every live state and some dropped ones; returns
/// the listing and a dropped segment.
fn fill(
    rlmm: &DurableRemoteLogMetadataManager,
) -> (Vec<RemoteLogSegmentMetadata>, RemoteLogSegmentMetadata) {
    let mut dropped = None;
    for i in 0..12u64 {
        let m = RemoteLogSegmentMetadata::builder(
            RemoteLogSegmentId::generate(tp()),
            i * 10,
            i * 10 + 9,
        )
        .segment_size_in_bytes(5)
        .build()
        .unwrap();
        rlmm.add_remote_log_segment_metadata(&m).unwrap();
        let steps: &[RemoteLogSegmentState] = match i % 4 {
            0 => &[],
            1 => &[CopySegmentFinished],
            2 => &[CopySegmentFinished, DeleteSegmentStarted],
            _ => &[
                CopySegmentFinished,
                DeleteSegmentStarted,
                DeleteSegmentFinished,
            ],
        };
        for s in steps {
            rlmm.update_remote_log_segment_metadata(&to(&m, *s))
                .unwrap();
        }
        if i % 4 == 3 {
            dropped = Some(m);
        }
    }
    (
        rlmm.list_remote_log_segments(&tp()).unwrap(),
        dropped.unwrap(),
    )
}

fn generations(dir: &Path) -> Vec<String> {
    let mut g: Vec<_> = entry_names(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(GEN_PREFIX))
        .collect();
    g.sort();
    g
}

fn manual() -> DurableOptions {
    DurableOptions::default().compact_min_events(None)
}

#[test]
fn a_crash_at_any_compaction_step_leaves_one_complete_generation() {
    for step in [
        Step::PartialSnapshot,
        Step::GenerationWritten,
        Step::PointerWritten,
        Step::Switched,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (expected, _) = {
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            let filled = fill(&rlmm);
            let mut w = rlmm.writer.lock();
            let err = rlmm.compact_locked(&mut w, Some(step)).unwrap_err();
            assert!(err.to_string().contains("simulated crash"), "{err}");
            filled
        };
        // The "crashed" process left two generation directories behind.
        assert_eq!(generations(dir.path()).len(), 2, "{step:?}");
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(
            rlmm.list_remote_log_segments(&tp()).unwrap(),
            expected,
            "{step:?}"
        );
        // A written pointer is a decided switch: the open finishes it.
        let want_gen = if matches!(step, Step::Switched | Step::PointerWritten) {
            2
        } else {
            1
        };
        assert_eq!(rlmm.generation(), want_gen, "{step:?}");
        assert_eq!(
            generations(dir.path()).len(),
            1,
            "open removes the other: {step:?}"
        );
        assert!(!dir.path().join(CURRENT_TMP).exists());
        // It keeps working, and compacts cleanly afterwards.
        let (more, _) = fill(&rlmm);
        rlmm.compact().unwrap();
        assert_eq!(rlmm.generation(), want_gen + 1);
        assert_eq!(generations(dir.path()).len(), 1);
        drop(rlmm);
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), more);
        assert_eq!(rlmm.events_in_generation(), more.len() as u64);
    }
}

#[test]
fn an_unfinished_compaction_is_removed_only_when_it_holds_nothing_but_known_snapshots() {
    for stray in ["unknown snapshot", "stray file"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            fill(&rlmm);
            let mut w = rlmm.writer.lock();
            rlmm.compact_locked(&mut w, Some(Step::GenerationWritten))
                .unwrap_err();
        }
        let leftover = gen_dir(dir.path(), 2);
        if stray == "stray file" {
            fs::write(leftover.join("notes"), b"mine").unwrap();
        } else {
            let log = Log::open(&leftover, log_options(RecoveryMode::Strict)).unwrap();
            let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), 0, 1)
                .build()
                .unwrap();
            log.append(&Message::new(MetadataEvent::Snapshot(m).encode()))
                .unwrap();
        }
        let err = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap_err();
        assert!(
            matches!(MetadataError::find(&err), Some(MetadataError::Generation { path, .. }) if *path == leftover),
            "{stray}: {err:?}"
        );
        assert!(leftover.is_dir(), "{stray}");
        assert_eq!(generations(dir.path()).len(), 2, "{stray}");
    }
}

#[test]
fn a_crashed_migration_of_a_pre_generation_directory_is_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), log_options(RecoveryMode::Strict)).unwrap();
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), 0, 9)
            .build()
            .unwrap();
        log.append(&Message::new(MetadataEvent::Add(m).encode()))
            .unwrap();
    }
    let expected = {
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        let mut w = rlmm.writer.lock();
        rlmm.compact_locked(&mut w, Some(Step::GenerationWritten))
            .unwrap_err();
        drop(w);
        rlmm.list_remote_log_segments(&tp()).unwrap()
    };
    assert_eq!(generations(dir.path()).len(), 1);
    let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
    assert_eq!(rlmm.generation(), 0);
    assert!(
        generations(dir.path()).is_empty(),
        "the unfinished gen-1 is removed"
    );
    assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
    rlmm.compact().unwrap();
    assert_eq!(rlmm.generation(), 1);
}

#[test]
fn compaction_keeps_every_live_state_and_forgets_dropped_ids() {
    let dir = tempfile::tempdir().unwrap();
    let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
    let (expected, dropped) = fill(&rlmm);
    let readd = rlmm.add_remote_log_segment_metadata(&dropped);
    assert!(
        matches!(&readd, Err(RemoteStorageError::InvalidArgument { message })
            if message.contains("already known")),
        "dropped id re-added before compaction: {readd:?}"
    );
    assert_eq!(rlmm.dropped_ids_remembered(), 3);
    rlmm.compact().unwrap();
    assert_eq!(rlmm.dropped_ids_remembered(), 0);
    assert_eq!(rlmm.events_in_generation(), 9);
    assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
    drop(rlmm);
    let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
    assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
    assert_eq!(rlmm.events_in_generation(), 9);
    assert_eq!(rlmm.remote_log_size(&tp()).unwrap(), 5 * 3);
    // The documented trade-off: after a compaction a dropped id may be added again.
    rlmm.add_remote_log_segment_metadata(&dropped).unwrap();
}

#[test]
fn a_pre_generation_directory_is_read_and_migrated_by_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), 0, 9)
        .build()
        .unwrap();
    {
        let log = Log::open(dir.path(), log_options(RecoveryMode::Strict)).unwrap();
        log.append(&Message::new(MetadataEvent::Add(m.clone()).encode()))
            .unwrap();
        log.append(&Message::new(
            MetadataEvent::Update(to(&m, CopySegmentFinished)).encode(),
        ))
        .unwrap();
    }
    let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
    assert_eq!(rlmm.generation(), 0);
    let expected = rlmm.list_remote_log_segments(&tp()).unwrap();
    assert_eq!(expected.len(), 1);
    rlmm.compact().unwrap();
    assert_eq!(rlmm.generation(), 1);
    assert!(
        !entry_names(dir.path())
            .unwrap()
            .iter()
            .any(|n| is_segment_file_name(n))
    );
    drop(rlmm);
    let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
    assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
}

#[test]
fn a_second_manager_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
    let err = DurableRemoteLogMetadataManager::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("another metadata manager"),
        "{err}"
    );
}

#[test]
fn a_malformed_pointer_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    drop(DurableRemoteLogMetadataManager::open(dir.path()).unwrap());
    for text in ["7\n", "7 v2\n", "0 v2\n", "+1 v2\n", "1 v3\n", "1 v2", ""] {
        fs::write(dir.path().join(CURRENT), text).unwrap();
        let err = DurableRemoteLogMetadataManager::open(dir.path()).unwrap_err();
        assert!(
            matches!(MetadataError::find(&err), Some(MetadataError::Pointer { path, .. }) if path.ends_with(CURRENT)),
            "{text:?}: {err:?}"
        );
        assert_eq!(generations(dir.path()).len(), 1, "{text:?}");
    }
    // The pointer of an older version (no " v2") is still read.
    fs::write(dir.path().join(CURRENT), "1\n").unwrap();
    DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
}

#[test]
fn a_recovery_install_killed_at_any_step_reopens_and_installs_again() {
    // What `krabka recover` killed mid-install leaves: a generation of segments the current one
    // does not know, with or without its pointer (CURRENT.tmp). Every rerun used to fail on it
    // ("cannot be accounted for").
    let segments: Vec<RemoteLogSegmentMetadata> = (0..5u64)
        .map(|i| {
            RemoteLogSegmentMetadata::builder(
                RemoteLogSegmentId::generate(tp()),
                i * 10,
                i * 10 + 9,
            )
            .segment_size_in_bytes(5)
            .state(RemoteLogSegmentState::CopySegmentFinished)
            .build()
            .unwrap()
        })
        .collect();
    for step in [
        Step::PartialSnapshot,
        Step::GenerationWritten,
        Step::PointerWritten,
        Step::Switched,
    ] {
        let dir = tempfile::tempdir().unwrap();
        {
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            let err = rlmm
                .install_recovered_with(&segments, Some(step))
                .unwrap_err();
            assert!(err.to_string().contains("simulated crash"), "{err}");
        }
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        let mut listed = rlmm.list_remote_log_segments(&tp()).unwrap();
        listed.sort_by_key(RemoteLogSegmentMetadata::start_offset);
        // A written pointer is a decided switch; before it the install never happened.
        let committed = matches!(step, Step::PointerWritten | Step::Switched);
        let expected = if committed {
            segments.clone()
        } else {
            Vec::new()
        };
        assert_eq!(listed, expected, "{step:?}");
        assert!(!dir.path().join(CURRENT_TMP).exists(), "{step:?}");
        assert_eq!(generations(dir.path()).len(), 1, "{step:?}");
        // Recover run again: the same result, whatever the crash left.
        let installed = rlmm.install_recovered(&segments).unwrap();
        assert_eq!(installed, if committed { 0 } else { 5 }, "{step:?}");
        drop(rlmm);
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        let mut listed = rlmm.list_remote_log_segments(&tp()).unwrap();
        listed.sort_by_key(RemoteLogSegmentMetadata::start_offset);
        assert_eq!(listed, segments, "{step:?}");
    }
}

#[test]
fn a_generation_written_in_multi_record_batches_is_replayed_and_judged_whole() {
    use super::replay::REPLAY_BATCH;
    use krabka_storage::segment::{
        LOG_EXTENSION, dump_batches, read_segment_file, segment_file_name,
    };
    // More snapshot events than one append takes: several batches of many records each.
    let n = REPLAY_BATCH as u64 + 100;
    for step in [Step::PointerWritten, Step::GenerationWritten] {
        let dir = tempfile::tempdir().unwrap();
        let expected = {
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            for i in 0..n {
                let m = RemoteLogSegmentMetadata::builder(
                    RemoteLogSegmentId::generate(tp()),
                    i * 10,
                    i * 10 + 9,
                )
                .build()
                .unwrap();
                rlmm.add_remote_log_segment_metadata(&m).unwrap();
            }
            let mut w = rlmm.writer.lock();
            rlmm.compact_locked(&mut w, Some(step)).unwrap_err();
            drop(w);
            rlmm.list_remote_log_segments(&tp()).unwrap()
        };
        let log = gen_dir(dir.path(), 2).join(segment_file_name(1, LOG_EXTENSION));
        let frames: Vec<_> = dump_batches(read_segment_file(&log).unwrap()).collect();
        let sizes: Vec<u64> = frames
            .iter()
            .map(|f| f.last_seq.unwrap() - f.seq.unwrap() + 1)
            .collect();
        // The generation record alone, then the snapshot in batches of many records.
        assert_eq!(sizes.iter().sum::<u64>(), n + 1, "{step:?}");
        assert_eq!(sizes[0], 1, "{step:?}");
        assert!(
            sizes.len() >= 3 && sizes[1..].iter().all(|&k| k > 1),
            "{step:?}: {sizes:?}"
        );
        let committed = matches!(step, Step::PointerWritten);
        if !committed {
            // Cut inside its last batch: an unfinished generation short of some snapshot
            // events is still this manager's own, and removed.
            let last = frames.last().unwrap();
            let cut = last.position + last.batch_len / 2;
            fs::OpenOptions::new()
                .write(true)
                .open(&log)
                .unwrap()
                .set_len(cut)
                .unwrap();
        }
        for _ in 0..2 {
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            assert_eq!(rlmm.generation(), if committed { 2 } else { 1 }, "{step:?}");
            assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
            assert_eq!(rlmm.events_in_generation(), n, "{step:?}");
            assert_eq!(generations(dir.path()).len(), 1, "{step:?}");
        }
    }
}
