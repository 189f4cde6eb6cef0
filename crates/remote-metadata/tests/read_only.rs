#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The read-only open of the durable metadata changes no byte of its directory, in every state
//! an owner's open would change something in (a torn last event, an interrupted compaction, a
//! first open that never finished, no directory at all), answers exactly as the owner's open
//! afterwards does, and refuses every write with a typed error.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use RemoteLogSegmentState::*;
use krabka_protocol::Message;
use krabka_remote_metadata::{
    DurableOptions, DurableRemoteLogMetadataManager, MetadataError,
    ReadOnlyRemoteLogMetadataManager, RemoteLogMetadataManager,
};
use krabka_remote_storage::*;
use krabka_storage::segment::{encode_batch_of_one, segment_file_name};

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(405), "read-only", 0)
}

fn seg(start: u64) -> RemoteLogSegmentMetadata {
    RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), start, start + 9)
        .segment_size_in_bytes(100 + start)
        .build()
        .unwrap()
}

fn to(
    m: &RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
) -> RemoteLogSegmentMetadataUpdate {
    RemoteLogSegmentMetadataUpdate::to_state(m.remote_log_segment_id().clone(), state, 1)
}

fn open(dir: &Path) -> DurableRemoteLogMetadataManager {
    DurableRemoteLogMetadataManager::open_with(
        dir,
        DurableOptions::default().compact_min_events(None),
    )
    .unwrap()
}

fn read_only(dir: &Path) -> ReadOnlyRemoteLogMetadataManager {
    DurableRemoteLogMetadataManager::open_read_only(dir).unwrap()
}

/// Every file and directory under `dir`, recursively: a file's bytes, `None` for a directory.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.insert(path.clone(), None);
                pending.push(path);
            } else {
                out.insert(path.clone(), Some(fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// Segments in every state, a compaction, then more events; the manager is dropped (closed).
/// Returns every segment ever added.
fn fill(dir: &Path) -> Vec<RemoteLogSegmentMetadata> {
    let rlmm = open(dir);
    let mut added = Vec::new();
    for round in 0..2u64 {
        for (i, states) in [
            &[][..],
            &[CopySegmentFinished],
            &[CopySegmentFinished, DeleteSegmentStarted],
            &[
                CopySegmentFinished,
                DeleteSegmentStarted,
                DeleteSegmentFinished,
            ],
        ]
        .into_iter()
        .enumerate()
        {
            let m = seg(round * 100 + i as u64 * 10);
            rlmm.add_remote_log_segment_metadata(&m).unwrap();
            for s in states {
                rlmm.update_remote_log_segment_metadata(&to(&m, *s))
                    .unwrap();
            }
            added.push(m);
        }
        if round == 0 {
            rlmm.compact().unwrap();
        }
    }
    added
}

/// Every answer of the manager's reads about `added` (the segments ever added), for
/// comparing two managers.
fn answers(m: &dyn RemoteLogMetadataManager, added: &[RemoteLogSegmentMetadata]) -> Vec<String> {
    let tp = tp();
    let mut out = vec![
        format!("{:?}", m.list_remote_log_segments(&tp)),
        format!("{:?}", m.highest_remote_offset(&tp)),
        format!("{:?}", m.remote_log_size(&tp)),
    ];
    for a in added {
        out.push(format!(
            "{:?}",
            m.segment_metadata(a.remote_log_segment_id())
        ));
    }
    for offset in (0..=220).step_by(5) {
        out.push(format!("{:?}", m.remote_log_segment_metadata(&tp, offset)));
        out.push(format!("{:?}", m.segment_for_offset_ready(&tp, offset)));
    }
    out
}

/// Opens `dir` read-only, checks that no byte under `root` changed, then opens it as its owner
/// and checks that both answer alike; returns both.
fn read_only_then_owner(
    root: &Path,
    dir: &Path,
    added: &[RemoteLogSegmentMetadata],
) -> (
    ReadOnlyRemoteLogMetadataManager,
    DurableRemoteLogMetadataManager,
) {
    let before = tree(root);
    let ro = read_only(dir);
    assert_eq!(
        tree(root),
        before,
        "the read-only open changed the directory"
    );
    let owner = open(dir);
    assert_eq!(answers(&ro, added), answers(&owner, added));
    assert_eq!(ro.generation(), Some(owner.generation()));
    assert_eq!(ro.events_in_generation(), owner.events_in_generation());
    (ro, owner)
}

fn current_log(dir: &Path) -> PathBuf {
    let text = fs::read_to_string(dir.join("CURRENT")).unwrap();
    let n: u64 = text.trim_end().trim_end_matches(" v2").parse().unwrap();
    dir.join(format!("gen-{n:020}"))
        .join(segment_file_name(1, "log"))
}

fn append(path: &Path, bytes: &[u8]) {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn a_clean_directory_is_read_without_a_change_and_answers_as_an_open() {
    let tmp = tempfile::tempdir().unwrap();
    let added = fill(tmp.path());
    let (ro, owner) = read_only_then_owner(tmp.path(), tmp.path(), &added);
    assert!(ro.torn_event().is_none());
    assert!(owner.torn_event_cut().is_none());
    assert_eq!(ro.generation(), Some(2));
    assert_eq!(ro.dir(), tmp.path());
    // Six segments are live: the two dropped ones are gone.
    assert_eq!(ro.list_remote_log_segments(&tp()).unwrap().len(), 6);
}

#[test]
fn a_torn_last_event_is_left_in_place_reported_and_cut_by_the_owner_afterwards() {
    // Garbage shorter than a frame header, and the first bytes of a batch that claims more
    // than the file holds: both are what an append cut short leaves.
    let mut torn_batch = Vec::new();
    encode_batch_of_one(99, &Message::new(vec![7u8; 300]), &mut torn_batch).unwrap();
    torn_batch.truncate(40);
    for garbage in [&b"garbage"[..], &torn_batch] {
        let tmp = tempfile::tempdir().unwrap();
        let added = fill(tmp.path());
        let log = current_log(tmp.path());
        let len = fs::metadata(&log).unwrap().len();
        let intact = answers(&open(tmp.path()), &added);
        append(&log, garbage);
        let (ro, owner) = read_only_then_owner(tmp.path(), tmp.path(), &added);
        assert_eq!(answers(&ro, &added), intact);
        let found = ro.torn_event().expect("the torn event is reported");
        assert_eq!(
            (found.path.as_path(), found.position, found.bytes),
            (log.as_path(), len, garbage.len() as u64)
        );
        let cut = owner.torn_event_cut().expect("the owner cuts it");
        assert_eq!((cut.path.as_path(), cut.position), (log.as_path(), len));
        assert_eq!(fs::metadata(&log).unwrap().len(), len);
    }
}

#[test]
fn a_torn_last_event_the_owner_would_refuse_is_refused_read_only_too() {
    // A closed manager's log ends at its recovery point: losing part of its last event is
    // damage, not a torn write; the read-only open fails as the owner's does, naming the file.
    let tmp = tempfile::tempdir().unwrap();
    fill(tmp.path());
    let log = current_log(tmp.path());
    let len = fs::metadata(&log).unwrap().len();
    krabka_storage::testkit::set_len(&log, len - 3).unwrap();
    let before = tree(tmp.path());
    let e = DurableRemoteLogMetadataManager::open_read_only(tmp.path()).unwrap_err();
    assert!(
        matches!(MetadataError::find(&e), Some(MetadataError::Log { path, .. }) if *path == log),
        "{e}"
    );
    assert_eq!(tree(tmp.path()), before);
    let owner = DurableRemoteLogMetadataManager::open(tmp.path()).unwrap_err();
    assert!(
        matches!(MetadataError::find(&owner), Some(MetadataError::Log { path, .. }) if *path == log),
        "{owner}"
    );
}

/// A directory left by a compaction from generation 1 to 2 interrupted at `step`: `"generation"`
/// (generation 2 written, `CURRENT` names 1), `"pointer"` (`CURRENT.tmp` names 2 too) or
/// `"switched"` (`CURRENT` names 2, generation 1 not yet removed).
fn interrupted_compaction(dir: &Path, step: &str) -> Vec<RemoteLogSegmentMetadata> {
    let before = dir.join("before");
    let added = {
        let rlmm = open(&before);
        let mut added = Vec::new();
        for start in [0, 10, 20] {
            let m = seg(start);
            rlmm.add_remote_log_segment_metadata(&m).unwrap();
            rlmm.update_remote_log_segment_metadata(&to(&m, CopySegmentFinished))
                .unwrap();
            added.push(m);
        }
        added
    };
    let after = dir.join("after");
    copy_tree(&before, &after);
    open(&after).compact().unwrap();
    let meta = dir.join("metadata");
    copy_tree(&after, &meta);
    copy_tree(
        &before.join("gen-00000000000000000001"),
        &meta.join("gen-00000000000000000001"),
    );
    // A crash leaves the new generation unclosed: only its segment files and lock file.
    let new = meta.join("gen-00000000000000000002");
    for entry in fs::read_dir(&new).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != ".lock" && krabka_storage::segment::parse_segment_file_name(&name).is_none() {
            fs::remove_file(new.join(name)).unwrap();
        }
    }
    match step {
        "generation" => fs::write(meta.join("CURRENT"), "1 v2\n").unwrap(),
        "pointer" => {
            fs::write(meta.join("CURRENT"), "1 v2\n").unwrap();
            fs::write(meta.join("CURRENT.tmp"), "2 v2\n").unwrap();
        }
        _ => assert_eq!(fs::read_to_string(meta.join("CURRENT")).unwrap(), "2 v2\n"),
    }
    added
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), dest).unwrap();
        }
    }
}

#[test]
fn an_interrupted_compaction_is_read_as_the_open_finishes_it_without_touching_it() {
    for (step, read) in [("generation", 1), ("pointer", 2), ("switched", 2)] {
        let tmp = tempfile::tempdir().unwrap();
        let added = interrupted_compaction(tmp.path(), step);
        let meta = tmp.path().join("metadata");
        let (ro, owner) = read_only_then_owner(&meta, &meta, &added);
        assert_eq!(ro.generation(), Some(read), "{step}");
        assert_eq!(ro.list_remote_log_segments(&tp()).unwrap().len(), 3);
        // The owner's open did change what the read-only one left: one generation remains.
        let gens: Vec<_> = fs::read_dir(&meta)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("gen-"))
            .collect();
        assert_eq!(gens, vec![format!("gen-{read:020}")], "{step}");
        assert!(!meta.join("CURRENT.tmp").exists(), "{step}");
        drop(owner);
    }
}

#[test]
fn a_missing_directory_reads_as_no_segment_and_is_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("remote-metadata");
    let before = tree(tmp.path());
    let ro = read_only(&dir);
    assert!(!dir.exists());
    assert_eq!(tree(tmp.path()), before);
    assert_eq!(ro.generation(), None);
    assert_eq!(ro.events_in_generation(), 0);
    assert!(ro.list_remote_log_segments(&tp()).unwrap().is_empty());
    assert_eq!(ro.highest_remote_offset(&tp()).unwrap(), None);
}

#[test]
fn a_first_open_that_never_finished_reads_as_no_segment_and_is_left_alone() {
    // Generation 1 holds its generation record, no CURRENT names it (and no lock file
    // exists: nothing is created to lock).
    let tmp = tempfile::tempdir().unwrap();
    drop(open(tmp.path()));
    fs::remove_file(tmp.path().join("CURRENT")).unwrap();
    fs::remove_file(tmp.path().join("rlmm.lock")).unwrap();
    let before = tree(tmp.path());
    let ro = read_only(tmp.path());
    assert_eq!(tree(tmp.path()), before);
    assert_eq!(ro.generation(), None);
    assert!(ro.list_remote_log_segments(&tp()).unwrap().is_empty());
    let owner = open(tmp.path());
    assert_eq!(owner.generation(), 1);
    assert!(owner.list_remote_log_segments(&tp()).unwrap().is_empty());
}

#[test]
fn a_directory_without_its_lock_file_is_read_without_creating_it() {
    let tmp = tempfile::tempdir().unwrap();
    let added = fill(tmp.path());
    fs::remove_file(tmp.path().join("rlmm.lock")).unwrap();
    let (ro, _owner) = read_only_then_owner(tmp.path(), tmp.path(), &added);
    assert_eq!(ro.list_remote_log_segments(&tp()).unwrap().len(), 6);
}

#[test]
fn every_write_is_refused_with_the_read_only_error_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let added = fill(tmp.path());
    let before = tree(tmp.path());
    let ro = read_only(tmp.path());
    let live = added.last().unwrap();
    let new = seg(500);
    let adds = ro.add_remote_log_segment_metadata(&new).unwrap_err();
    let update = ro
        .update_remote_log_segment_metadata(&to(live, DeleteSegmentStarted))
        .unwrap_err();
    let delete = ro
        .update_remote_log_segment_metadata(&to(live, DeleteSegmentFinished))
        .unwrap_err();
    for (e, operation, id) in [
        (adds, "add", &new),
        (update, "update", live),
        (delete, "update", live),
    ] {
        assert!(!e.is_retriable());
        match MetadataError::find(&e) {
            Some(MetadataError::ReadOnly {
                path,
                operation: op,
                segment,
            }) => {
                assert_eq!(path, tmp.path());
                assert_eq!(*op, operation);
                assert_eq!(*segment, id.remote_log_segment_id().to_string());
            }
            other => panic!("{e}: {other:?}"),
        }
    }
    assert_eq!(tree(tmp.path()), before);
    assert_eq!(answers(&ro, &added), answers(&open(tmp.path()), &added));
}

#[test]
fn a_manager_holding_the_directory_keeps_a_read_only_open_out() {
    let tmp = tempfile::tempdir().unwrap();
    fill(tmp.path());
    let owner = open(tmp.path());
    let e = DurableRemoteLogMetadataManager::open_read_only(tmp.path()).unwrap_err();
    assert!(
        matches!(&e, RemoteStorageError::Backend { location, .. } if location == &tmp.path().display().to_string()),
        "{e:?}"
    );
    drop(owner);
    assert_eq!(
        read_only(tmp.path())
            .list_remote_log_segments(&tp())
            .unwrap()
            .len(),
        6
    );
}

/// A change to the files of a directory (a damage, or its undoing).
type FileChange<'a> = Box<dyn Fn() + 'a>;

#[test]
fn damage_fails_the_read_only_open_with_the_typed_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    fill(tmp.path());
    let current = tmp.path().join("CURRENT");
    let log = current_log(tmp.path());
    let stray = tmp.path().join("gen-00000000000000000009");
    let text = fs::read_to_string(&current).unwrap();
    let cases: [(&str, FileChange, FileChange); 3] = [
        (
            "pointer",
            Box::new(|| fs::write(&current, "two\n").unwrap()),
            Box::new(|| fs::write(&current, &text).unwrap()),
        ),
        (
            "log",
            Box::new(|| krabka_storage::testkit::xor_byte(&log, 100, 1).unwrap()),
            Box::new(|| krabka_storage::testkit::xor_byte(&log, 100, 1).unwrap()),
        ),
        (
            "generation",
            Box::new(|| fs::create_dir(&stray).unwrap()),
            Box::new(|| fs::remove_dir(&stray).unwrap()),
        ),
    ];
    for (what, damage, undo) in cases {
        damage();
        let before = tree(tmp.path());
        let e = DurableRemoteLogMetadataManager::open_read_only(tmp.path()).unwrap_err();
        let found = MetadataError::find(&e).unwrap_or_else(|| panic!("{what}: untyped {e}"));
        let expected = match what {
            "pointer" => matches!(found, MetadataError::Pointer { path, .. } if *path == current),
            "log" => matches!(found, MetadataError::Log { path, .. } if *path == log),
            _ => matches!(found, MetadataError::Generation { path, .. } if *path == stray),
        };
        assert!(expected, "{what}: {e}");
        assert_eq!(tree(tmp.path()), before, "{what}");
        undo();
    }
    assert_eq!(
        read_only(tmp.path())
            .list_remote_log_segments(&tp())
            .unwrap()
            .len(),
        6
    );
}
