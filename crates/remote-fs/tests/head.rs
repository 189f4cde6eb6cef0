//! The partition head on the filesystem backend: whole-file overwrites, conditional reads by
//! `fstat`, the bound on what is read, and listings that leave the head alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::head::{
    self, ConditionalRead, HeadRead, HeadSegment, MAX_HEAD_LEN, PartitionHead,
};
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{self, RemoteSegmentLister};
use krabka_remote_storage::*;

fn changed(read: ConditionalRead) -> (Vec<u8>, String) {
    match read {
        ConditionalRead::Changed { bytes, version } => (bytes, version),
        other => panic!("expected Changed, got {other:?}"),
    }
}

fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn head_of(tp: &TopicIdPartition, segments: Vec<HeadSegment>) -> PartitionHead {
    PartitionHead {
        partition: tp.clone(),
        writer_epoch: 1,
        incarnation: Uuid::new_v4(),
        serial: 1,
        written_ms: now_ms(),
        writer_last_seq: segments.last().map_or(0, |s| s.end_seq),
        retention_point: 0,
        segments,
        tail: Vec::new(),
    }
}

#[test]
fn put_then_read_unchanged_changed_and_absent() {
    let root = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(root.path()).unwrap();
    let key = layout::head_key("p-0-x");
    assert_eq!(
        store.read_if_changed(&key, None, 1024).unwrap(),
        ConditionalRead::Absent
    );
    assert_eq!(
        store.read_if_changed(&key, Some("1:2:3:4"), 1024).unwrap(),
        ConditionalRead::Absent
    );
    store.put_object(&key, b"one").unwrap();
    let (bytes, v1) = changed(store.read_if_changed(&key, None, 1024).unwrap());
    assert_eq!(bytes, b"one");
    assert_eq!(
        store.read_if_changed(&key, Some(&v1), 1024).unwrap(),
        ConditionalRead::Unchanged
    );
    // An unrelated version reads the object.
    let (bytes, again) = changed(store.read_if_changed(&key, Some("x"), 1024).unwrap());
    assert_eq!(
        (bytes.as_slice(), again.as_str()),
        (&b"one"[..], v1.as_str())
    );
    // Overwritten with other bytes of the same size at once: a new version.
    store.put_object(&key, b"two").unwrap();
    let (bytes, v2) = changed(store.read_if_changed(&key, Some(&v1), 1024).unwrap());
    assert_eq!(bytes, b"two");
    assert_ne!(v2, v1);
    // The version is the content's (as S3's ETag of a plain PutObject is): the same bytes
    // written again read as unchanged, and a new inode or mtime alone never hides a change.
    store.put_object(&key, b"two").unwrap();
    assert_eq!(
        store.read_if_changed(&key, Some(&v2), 1024).unwrap(),
        ConditionalRead::Unchanged
    );
    store.put_object(&key, b"one").unwrap();
    let (bytes, v3) = changed(store.read_if_changed(&key, Some(&v2), 1024).unwrap());
    assert_eq!((bytes.as_slice(), v3.as_str()), (&b"one"[..], v1.as_str()));
    // Whole replacement left nothing beside it, and the store's listing sees it.
    assert_eq!(names_in(&root.path().join("p-0-x")), vec!["_head"]);
    assert_eq!(store.read_object(&key).unwrap(), b"one");
    store.delete_object(&key).unwrap();
    assert_eq!(
        store.read_if_changed(&key, Some(&v3), 1024).unwrap(),
        ConditionalRead::Absent
    );
}

#[test]
fn an_object_over_the_limit_is_corrupt_and_the_limit_itself_is_fine() {
    let root = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(root.path()).unwrap();
    let key = layout::head_key("p-0-x");
    store.put_object(&key, &[7u8; 100]).unwrap();
    let err = store.read_if_changed(&key, None, 99).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Corrupt { location, .. } if location.ends_with(&key)),
        "{err:?}"
    );
    let (bytes, _) = changed(store.read_if_changed(&key, None, 100).unwrap());
    assert_eq!(bytes.len(), 100);
    // Through read_head: a head over the limit is damaged, never read.
    let big = root.path().join("big-0-x");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::File::create(big.join("_head"))
        .unwrap()
        .set_len(MAX_HEAD_LEN as u64 + 1)
        .unwrap();
    assert!(matches!(
        head::read_head(&store, "big-0-x", None).unwrap(),
        HeadRead::Damaged {
            error: RemoteStorageError::Corrupt { .. },
            ..
        }
    ));
}

#[test]
fn hostile_keys_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(root.path().join("root")).unwrap();
    std::fs::write(root.path().join("secret"), b"s").unwrap();
    for key in ["../secret", "/abs", "", "a/../../secret"] {
        assert!(
            matches!(
                store.put_object(key, b"x"),
                Err(RemoteStorageError::InvalidArgument { .. })
            ),
            "{key}"
        );
        assert!(
            matches!(
                store.read_if_changed(key, None, 10),
                Err(RemoteStorageError::InvalidArgument { .. })
            ),
            "{key}"
        );
    }
    assert_eq!(std::fs::read(root.path().join("secret")).unwrap(), b"s");
}

#[test]
fn write_head_and_read_head_round_trip_on_disk() {
    let root = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(root.path()).unwrap();
    let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 2);
    let dir = layout::partition_dir(&tp).unwrap();
    assert!(matches!(
        head::read_head(&store, &dir, None).unwrap(),
        HeadRead::Absent
    ));
    let first = head_of(
        &tp,
        vec![HeadSegment {
            id: Uuid::new_v4(),
            start_seq: 0,
            end_seq: 9,
            writer_epoch: 1,
        }],
    );
    head::write_head(&store, &dir, &first).unwrap();
    let HeadRead::Fresh { head, version } = head::read_head(&store, &dir, None).unwrap() else {
        panic!("expected a fresh head");
    };
    assert_eq!(head, first);
    assert!(matches!(
        head::read_head(&store, &dir, Some(&version)).unwrap(),
        HeadRead::Unchanged
    ));
    let second = PartitionHead {
        serial: 2,
        ..first.clone()
    };
    head::write_head(&store, &dir, &second).unwrap();
    match head::read_head(&store, &dir, Some(&version)).unwrap() {
        HeadRead::Fresh { head, .. } => assert_eq!(head, second),
        other => panic!("expected a fresh head, got {other:?}"),
    }
    // A torn head (written by hand): damaged, not an error.
    std::fs::write(root.path().join(&dir).join("_head"), b"KHED").unwrap();
    assert!(matches!(
        head::read_head(&store, &dir, None).unwrap(),
        HeadRead::Damaged { .. }
    ));
}

struct Local {
    dir: tempfile::TempDir,
}

impl Local {
    fn new(log: &[u8]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.log"), log).unwrap();
        std::fs::write(dir.path().join("s.index"), b"idx").unwrap();
        std::fs::write(dir.path().join("s.timeindex"), b"tix").unwrap();
        Self { dir }
    }

    fn data(&self) -> LogSegmentData {
        let p = |n: &str| self.dir.path().join(n);
        let mut d = LogSegmentData::new(p("s.log"), p("s.index"), p("s.timeindex"));
        d.leader_epoch_index = bytes::Bytes::from_static(b"0\n1\n0 0\n");
        d
    }
}

#[test]
fn recovery_and_the_orphan_listing_leave_the_head_alone() {
    let root = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(root.path()).unwrap();
    let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
    let local = Local::new(b"hello");
    let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 9)
        .segment_size_in_bytes(5)
        .build()
        .unwrap();
    store.copy_log_segment_data(&m, &local.data()).unwrap();
    let dir = layout::partition_dir(&tp).unwrap();
    let segment = HeadSegment {
        id: m.remote_log_segment_id().id(),
        start_seq: 0,
        end_seq: 9,
        writer_epoch: 0,
    };
    head::write_head(&store, &dir, &head_of(&tp, vec![segment])).unwrap();
    let disk = root.path().join(&dir);
    // A temporary file of an interrupted head write, and one of the segment's (an orphan).
    std::fs::write(disk.join("_head.tmp-1-0"), b"torn").unwrap();
    let stem = layout::segment_stem(&m);
    std::fs::write(disk.join(format!("{stem}.log.tmp-1-0")), b"torn").unwrap();

    let scan = recovery::scan(&store, &tp, 2).unwrap();
    assert_eq!(scan.chosen.len(), 1);
    assert_eq!(
        scan.chosen[0].remote_log_segment_id(),
        m.remote_log_segment_id()
    );
    assert_eq!(
        scan.orphans,
        vec![format!("{dir}/{stem}.log.tmp-1-0")],
        "only the segment's temporary file is an orphan"
    );
    assert!(
        scan.ignored.iter().all(|o| !o.key.contains("_head")),
        "{:?}",
        scan.ignored
    );
    // Deleting the orphans (what a cleanup does) keeps the head, which still reads.
    for key in &scan.orphans {
        store.delete_object(key).unwrap();
    }
    assert!(names_in(&disk).contains(&"_head".to_owned()));
    assert!(matches!(
        head::read_head(&store, &dir, None).unwrap(),
        HeadRead::Fresh { .. }
    ));
    // The cleanup removed the orphan only: everything else the scan listed is still there.
    let mut listed = 0;
    store
        .list_partition(&dir, &mut |_| {
            listed += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(u64::try_from(listed).unwrap(), scan.objects_listed - 1);
}
