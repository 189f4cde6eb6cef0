//! Create-only writes of the ownership records on the filesystem backend.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::ownership::{
    self, EpochCheck, EpochRecord, OwnershipStore, ProbeOutcome,
};
use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_remote_storage::{RemoteStorageError, Uuid, layout};

#[test]
fn a_key_is_created_once_and_the_second_create_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(dir.path()).unwrap();
    let key = layout::epoch_key("p-0-x", 1);
    assert!(store.create_if_absent(&key, b"first").unwrap());
    assert!(!store.create_if_absent(&key, b"second").unwrap());
    assert_eq!(store.read_object(&key).unwrap(), b"first");
    // Nothing else is left in the directory: no temporary file of either attempt.
    let names: Vec<_> = std::fs::read_dir(dir.path().join("p-0-x"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn of_eight_threads_racing_to_create_one_key_exactly_one_wins() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FsRemoteStorage::new(dir.path()).unwrap());
        let barrier = Arc::new(Barrier::new(8));
        let key = layout::epoch_key("p-0-x", 7);
        let threads: Vec<_> = (0..8u8)
            .map(|i| {
                let (store, barrier, key) = (store.clone(), barrier.clone(), key.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    store.create_if_absent(&key, &[i]).unwrap().then_some(i)
                })
            })
            .collect();
        let winners: Vec<u8> = threads
            .into_iter()
            .filter_map(|t| t.join().unwrap())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(store.read_object(&key).unwrap(), vec![winners[0]]);
    }
}

#[test]
fn the_probe_finds_create_only_writes_enforced_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(dir.path()).unwrap();
    assert_eq!(
        ownership::probe(&store, "p-0-x").unwrap(),
        ProbeOutcome::Enforced
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("p-0-x")).unwrap().count(),
        0
    );
}

#[test]
fn hostile_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(dir.path().join("root")).unwrap();
    for key in ["../escape", "/abs", "", "a/../../b"] {
        assert!(
            matches!(
                store.create_if_absent(key, b"x"),
                Err(RemoteStorageError::InvalidArgument { .. })
            ),
            "{key}"
        );
    }
    assert!(!dir.path().join("escape").exists());
}

#[test]
fn the_epoch_check_sees_a_later_epoch_a_foreign_record_and_a_lost_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(dir.path()).unwrap();
    let me = Uuid::new_v4();
    let d = "p-0-x";
    assert_eq!(
        ownership::check_epoch(&store, d, 1, me).unwrap(),
        EpochCheck::OwnRecordMissing
    );
    let mine = EpochRecord::new(1, 1, me, 0, "me");
    assert!(
        store
            .create_if_absent(&layout::epoch_key(d, 1), &mine.encode())
            .unwrap()
    );
    assert_eq!(
        ownership::check_epoch(&store, d, 1, me).unwrap(),
        EpochCheck::Current
    );
    // Someone else holding epoch 1 under my number: fenced.
    assert!(matches!(
        ownership::check_epoch(&store, d, 1, Uuid::new_v4()).unwrap(),
        EpochCheck::Fenced(r) if r.incarnation == me
    ));
    let theirs = EpochRecord::new(2, 500, Uuid::new_v4(), 0, "them");
    assert!(
        store
            .create_if_absent(&layout::epoch_key(d, 2), &theirs.encode())
            .unwrap()
    );
    assert_eq!(
        ownership::check_epoch(&store, d, 1, me).unwrap(),
        EpochCheck::Fenced(theirs.clone())
    );
    // A damaged record of the next epoch is an error naming it, never "current".
    std::fs::write(dir.path().join(layout::epoch_key(d, 3)), b"garbage").unwrap();
    match ownership::check_epoch(&store, d, 2, theirs.incarnation) {
        Err(RemoteStorageError::Corrupt { location, .. }) => {
            assert!(
                location.ends_with("_epoch-00000000000000000003"),
                "{location}"
            );
        }
        other => panic!("{other:?}"),
    }
    let (records, unreadable) = ownership::list_epochs(&store, d, false).unwrap();
    assert_eq!(records.iter().map(|r| r.epoch).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(unreadable, [3]);
    assert!(matches!(
        ownership::list_epochs(&store, d, true),
        Err(RemoteStorageError::Corrupt { .. })
    ));
}
