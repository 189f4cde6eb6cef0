//! The partition head on S3 (`OwnershipStore::put_object`, and `read_if_changed`: GetObject
//! with `If-None-Match: <etag>`) over HTTP on 127.0.0.1: against the in-process server, and
//! against the Ceph RGW cluster started by `scripts/ceph-rgw` when `KRABKA_TEST_CEPH_*` is set
//! (see `support::ceph_config`: skipped without it, except under `CI=true`, where it fails).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::head::{
    self, ConditionalRead, HeadRead, HeadSegment, MAX_HEAD_LEN, PartitionHead,
};
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{self, RemoteSegmentLister};
use krabka_remote_storage::{
    LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition, Uuid, layout,
};

fn fresh_tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::new_v4(), "head", 0)
}

fn storage_on(server: &TestServer, prefix: &str) -> S3RemoteStorage {
    S3RemoteStorage::new(server.config().with_prefix(prefix)).unwrap()
}

fn changed(read: ConditionalRead) -> (Vec<u8>, String) {
    match read {
        ConditionalRead::Changed { bytes, version } => (bytes, version),
        other => panic!("expected Changed, got {other:?}"),
    }
}

fn head_of(tp: &TopicIdPartition, serial: u64, segments: Vec<HeadSegment>) -> PartitionHead {
    PartitionHead {
        partition: tp.clone(),
        writer_epoch: 1,
        incarnation: Uuid::new_v4(),
        serial,
        written_ms: krabka_remote_storage::now_ms(),
        writer_last_seq: segments.last().map_or(0, |s| s.end_seq),
        retention_point: 0,
        segments,
        tail: Vec::new(),
    }
}

/// Absent, put, read, unchanged, overwritten, changed, deleted, absent again.
fn put_and_read_conditionally(store: &S3RemoteStorage) {
    let key = layout::head_key(&layout::partition_dir(&fresh_tp()).unwrap());
    assert_eq!(
        store.read_if_changed(&key, None, 1024).unwrap(),
        ConditionalRead::Absent
    );
    assert_eq!(
        store.read_if_changed(&key, Some("\"abc\""), 1024).unwrap(),
        ConditionalRead::Absent
    );
    store.put_object(&key, b"one").unwrap();
    let (bytes, v1) = changed(store.read_if_changed(&key, None, 1024).unwrap());
    assert_eq!(bytes, b"one");
    assert!(!v1.is_empty(), "the store returned no ETag");
    assert_eq!(
        store.read_if_changed(&key, Some(&v1), 1024).unwrap(),
        ConditionalRead::Unchanged
    );
    // Another ETag: the object is read.
    let (bytes, again) = changed(
        store
            .read_if_changed(&key, Some("\"0123456789abcdef0123456789abcdef\""), 1024)
            .unwrap(),
    );
    assert_eq!(
        (bytes.as_slice(), again.as_str()),
        (&b"one"[..], v1.as_str())
    );
    // Overwritten whole.
    store.put_object(&key, b"second").unwrap();
    let (bytes, v2) = changed(store.read_if_changed(&key, Some(&v1), 1024).unwrap());
    assert_eq!(bytes, b"second");
    assert_ne!(v2, v1);
    assert_eq!(store.read_object(&key).unwrap(), b"second");
    store.delete_object(&key).unwrap();
    assert_eq!(
        store.read_if_changed(&key, Some(&v2), 1024).unwrap(),
        ConditionalRead::Absent
    );
}

/// An object over `max_len` is `Corrupt` naming the key; exactly `max_len` is read.
fn bounded(store: &S3RemoteStorage) {
    let key = layout::head_key(&layout::partition_dir(&fresh_tp()).unwrap());
    store.put_object(&key, &[7u8; 100]).unwrap();
    let err = store.read_if_changed(&key, None, 99).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Corrupt { location, .. } if location.ends_with(&key)),
        "{err:?}"
    );
    let (bytes, _) = changed(store.read_if_changed(&key, None, 100).unwrap());
    assert_eq!(bytes.len(), 100);
    store.delete_object(&key).unwrap();
}

/// `write_head` and `read_head`: fresh, unchanged, fresh again, damaged.
fn heads_round_trip(store: &S3RemoteStorage) {
    let tp = fresh_tp();
    let dir = layout::partition_dir(&tp).unwrap();
    assert!(matches!(
        head::read_head(store, &dir, None).unwrap(),
        HeadRead::Absent
    ));
    let segment = HeadSegment {
        id: Uuid::new_v4(),
        start_seq: 0,
        end_seq: 99,
        writer_epoch: 1,
    };
    let first = head_of(&tp, 1, vec![segment.clone()]);
    head::write_head(store, &dir, &first).unwrap();
    let HeadRead::Fresh { head, version } = head::read_head(store, &dir, None).unwrap() else {
        panic!("expected a fresh head");
    };
    assert_eq!(head, first);
    assert!(matches!(
        head::read_head(store, &dir, Some(&version)).unwrap(),
        HeadRead::Unchanged
    ));
    let second = head_of(&tp, 2, vec![segment]);
    head::write_head(store, &dir, &second).unwrap();
    match head::read_head(store, &dir, Some(&version)).unwrap() {
        HeadRead::Fresh { head, .. } => assert_eq!(head, second),
        other => panic!("expected a fresh head, got {other:?}"),
    }
    store
        .put_object(&layout::head_key(&dir), b"KHED torn")
        .unwrap();
    assert!(matches!(
        head::read_head(store, &dir, None).unwrap(),
        HeadRead::Damaged {
            error: RemoteStorageError::Corrupt { .. },
            ..
        }
    ));
    store.delete_object(&layout::head_key(&dir)).unwrap();
}

fn since(before: &BTreeMap<String, usize>, after: &BTreeMap<String, usize>) -> usize {
    after
        .iter()
        .map(|(op, n)| n - before.get(op).copied().unwrap_or(0))
        .sum()
}

#[test]
fn put_object_and_conditional_reads() {
    let server = support::start_server();
    put_and_read_conditionally(&storage_on(&server, "cond"));
}

#[test]
fn a_read_is_bounded_by_max_len() {
    let server = support::start_server();
    let store = storage_on(&server, "bounded");
    bounded(&store);
    // Through read_head: a head over the limit is damaged, and never read whole.
    let dir = layout::partition_dir(&fresh_tp()).unwrap();
    store
        .put_object(&layout::head_key(&dir), &vec![0u8; MAX_HEAD_LEN + 1])
        .unwrap();
    assert!(matches!(
        head::read_head(&store, &dir, None).unwrap(),
        HeadRead::Damaged {
            error: RemoteStorageError::Corrupt { .. },
            ..
        }
    ));
}

#[test]
fn write_head_and_read_head() {
    let server = support::start_server();
    heads_round_trip(&storage_on(&server, "heads"));
}

#[test]
fn an_unchanged_read_is_one_request() {
    let server = support::start_server();
    let store = storage_on(&server, "count");
    let tp = fresh_tp();
    let dir = layout::partition_dir(&tp).unwrap();
    head::write_head(&store, &dir, &head_of(&tp, 1, Vec::new())).unwrap();
    let HeadRead::Fresh { version, .. } = head::read_head(&store, &dir, None).unwrap() else {
        panic!("expected a fresh head");
    };
    for _ in 0..3 {
        let before = server.requests_received();
        assert!(matches!(
            head::read_head(&store, &dir, Some(&version)).unwrap(),
            HeadRead::Unchanged
        ));
        let after = server.requests_received();
        assert_eq!(since(&before, &after), 1, "{before:?} -> {after:?}");
        assert_eq!(after["GetObject"] - before["GetObject"], 1);
    }
    // A write is one PutObject (its ETag settles the check: no HeadObject).
    let before = server.requests_received();
    head::write_head(&store, &dir, &head_of(&tp, 2, Vec::new())).unwrap();
    let after = server.requests_received();
    assert_eq!(since(&before, &after), 1, "{before:?} -> {after:?}");
}

#[test]
fn conditional_reads_on_a_stopped_server_are_retriable() {
    let mut server = support::start_server();
    let config = server.config().with_prefix("down").with_max_attempts(1);
    let store = S3RemoteStorage::new(config).unwrap();
    server.stop();
    let key = layout::head_key("d-0-x");
    let err = store.read_if_changed(&key, Some("\"x\""), 10).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Retriable { operation, .. } if operation == "GetObject"),
        "{err:?}"
    );
    let err = store.put_object(&key, b"x").unwrap_err();
    assert!(err.is_retriable(), "{err:?}");
}

#[test]
fn recovery_and_the_orphan_listing_leave_the_head_alone() {
    let server = support::start_server();
    let store = storage_on(&server, "scan");
    let tp = fresh_tp();
    let local = tempfile::tempdir().unwrap();
    let p = |n: &str| local.path().join(n);
    std::fs::write(p("s.log"), b"hello").unwrap();
    std::fs::write(p("s.index"), b"idx").unwrap();
    std::fs::write(p("s.timeindex"), b"tix").unwrap();
    let mut data = LogSegmentData::new(p("s.log"), p("s.index"), p("s.timeindex"));
    data.leader_epoch_index = bytes::Bytes::from_static(b"0\n1\n0 0\n");
    let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 9)
        .segment_size_in_bytes(5)
        .build()
        .unwrap();
    store.copy_log_segment_data(&m, &data).unwrap();
    let dir = layout::partition_dir(&tp).unwrap();
    let segment = HeadSegment {
        id: m.remote_log_segment_id().id(),
        start_seq: 0,
        end_seq: 9,
        writer_epoch: 0,
    };
    head::write_head(&store, &dir, &head_of(&tp, 1, vec![segment])).unwrap();
    let scan = recovery::scan(&store, &tp, 2).unwrap();
    assert_eq!(scan.chosen.len(), 1);
    assert!(scan.orphans.is_empty(), "{:?}", scan.orphans);
    assert!(scan.ignored.is_empty(), "{:?}", scan.ignored);
    let mut listed = Vec::new();
    store
        .list_partition(&dir, &mut |o| {
            listed.push(o.key);
            Ok(())
        })
        .unwrap();
    assert!(listed.contains(&layout::head_key(&dir)), "{listed:?}");
    // Deleting the segment (what a retention or a cleanup does) leaves the head.
    store.delete_log_segment_data(&m).unwrap();
    assert!(matches!(
        head::read_head(&store, &dir, None).unwrap(),
        HeadRead::Fresh { .. }
    ));
}

mod ceph {
    //! The same checks against Ceph RGW: it answers `If-None-Match: <etag>` on GetObject with
    //! 304.
    use std::sync::OnceLock;

    use super::*;

    fn store() -> Option<&'static S3RemoteStorage> {
        static STORE: OnceLock<Option<S3RemoteStorage>> = OnceLock::new();
        STORE
            .get_or_init(|| support::ceph_config().map(|c| S3RemoteStorage::new(c).unwrap()))
            .as_ref()
    }

    #[test]
    fn ceph_put_object_and_conditional_reads() {
        if let Some(store) = store() {
            put_and_read_conditionally(store);
        }
    }

    #[test]
    fn ceph_a_read_is_bounded_by_max_len() {
        if let Some(store) = store() {
            bounded(store);
        }
    }

    #[test]
    fn ceph_write_head_and_read_head() {
        if let Some(store) = store() {
            heads_round_trip(store);
        }
    }
}
