//! Create-only writes (`OwnershipStore::create_if_absent`, PutObject with `If-None-Match: *`)
//! over HTTP on 127.0.0.1: against the in-process server that enforces the header, against
//! one that ignores it (the probe must notice), and against the Ceph RGW cluster started by
//! `scripts/ceph-rgw` when `KRABKA_TEST_CEPH_*` is set (see `support::ceph_config`: skipped
//! without it, except under `CI=true`, where it fails).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Barrier;

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_s3::test_server::{ConditionalWrites, TestServer};
use krabka_remote_storage::RemoteStorageError;
use krabka_remote_storage::layout;
use krabka_remote_storage::ownership::{self, OwnershipStore, ProbeOutcome};
use krabka_remote_storage::recovery::RemoteSegmentLister;

/// Threads racing to create one key.
const RACERS: usize = 8;

/// A fresh partition directory name (as `layout::partition_dir` makes them).
fn partition_dir() -> String {
    let tp = krabka_remote_storage::TopicIdPartition::new(uuid::Uuid::new_v4(), "own", 0);
    layout::partition_dir(&tp).unwrap()
}

fn storage_on(server: &TestServer, prefix: &str) -> S3RemoteStorage {
    S3RemoteStorage::new(server.config().with_prefix(prefix)).unwrap()
}

/// Creates a key, then again with other bytes: refused, the first bytes kept.
fn creates_once(store: &S3RemoteStorage) {
    let key = layout::epoch_key(&partition_dir(), 1);
    assert!(store.create_if_absent(&key, b"first").unwrap());
    assert!(!store.create_if_absent(&key, b"second").unwrap());
    assert_eq!(store.read_object(&key).unwrap(), b"first");
    assert_eq!(
        ownership::read_record(store, &key).unwrap().as_deref(),
        Some(b"first".as_slice())
    );
    store.delete_object(&key).unwrap();
    // Gone: it can be created again.
    assert!(store.create_if_absent(&key, b"third").unwrap());
    assert_eq!(store.read_object(&key).unwrap(), b"third");
    store.delete_object(&key).unwrap();
}

/// [`RACERS`] threads create one key at once: exactly one wins, and its bytes are stored.
fn one_racer_wins(store: &S3RemoteStorage) {
    let key = layout::epoch_key(&partition_dir(), 7);
    let barrier = Barrier::new(RACERS);
    let results: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..RACERS)
            .map(|i| {
                let (key, barrier) = (&key, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    store
                        .create_if_absent(key, format!("racer {i}").as_bytes())
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<usize> = (0..RACERS).filter(|&i| results[i]).collect();
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let stored = store.read_object(&key).unwrap();
    assert_eq!(stored, format!("racer {}", winners[0]).into_bytes());
    store.delete_object(&key).unwrap();
}

/// A missing key reads as absent, not as an error.
fn missing_record_is_absent(store: &S3RemoteStorage) {
    let dir = partition_dir();
    let key = layout::identity_key(&dir);
    assert_eq!(ownership::read_record(store, &key).unwrap(), None);
    let err = store.read_object(&key).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(!err.is_retriable());
}

#[test]
fn create_if_absent_creates_once_and_refuses_the_second_time() {
    let server = support::start_server();
    assert_eq!(server.conditional_writes(), ConditionalWrites::Enforce);
    creates_once(&storage_on(&server, "once"));
}

#[test]
fn eight_racing_creators_of_one_key_one_wins() {
    let server = support::start_server();
    let store = storage_on(&server, "race");
    // A few rounds, each on a fresh key.
    for _ in 0..5 {
        one_racer_wins(&store);
    }
}

#[test]
fn probe_is_enforced_on_the_enforcing_server() {
    let server = support::start_server();
    let store = storage_on(&server, "probe");
    let dir = partition_dir();
    assert_eq!(
        ownership::probe(&store, &dir).unwrap(),
        ProbeOutcome::Enforced
    );
    // The probe removed its key.
    let mut left = Vec::new();
    store
        .list_partition(&dir, &mut |o| {
            left.push(o.key);
            Ok(())
        })
        .unwrap();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn probe_is_ignored_on_a_server_that_ignores_the_header() {
    let server = TestServer::start_ignoring_conditional_writes().unwrap();
    assert_eq!(server.conditional_writes(), ConditionalWrites::Ignore);
    let store = storage_on(&server, "probe");
    assert_eq!(
        ownership::probe(&store, &partition_dir()).unwrap(),
        ProbeOutcome::Ignored
    );
    // What the probe guards against: the second create overwrites.
    let key = layout::epoch_key(&partition_dir(), 1);
    assert!(store.create_if_absent(&key, b"first").unwrap());
    assert!(store.create_if_absent(&key, b"second").unwrap());
    assert_eq!(store.read_object(&key).unwrap(), b"second");
}

#[test]
fn the_conditional_mode_survives_a_restart() {
    let mut server = TestServer::start_ignoring_conditional_writes().unwrap();
    server.restart().unwrap();
    assert_eq!(server.conditional_writes(), ConditionalWrites::Ignore);
    let store = storage_on(&server, "restart");
    assert_eq!(
        ownership::probe(&store, &partition_dir()).unwrap(),
        ProbeOutcome::Ignored
    );
    let mut server = support::start_server();
    server.restart().unwrap();
    let store = storage_on(&server, "restart");
    assert_eq!(
        ownership::probe(&store, &partition_dir()).unwrap(),
        ProbeOutcome::Enforced
    );
}

#[test]
fn read_record_of_a_missing_key_is_none() {
    let server = support::start_server();
    missing_record_is_absent(&storage_on(&server, "missing"));
}

#[test]
fn create_if_absent_on_a_stopped_server_is_retriable() {
    let mut server = support::start_server();
    let config = server.config().with_prefix("down").with_max_attempts(1);
    let store = S3RemoteStorage::new(config).unwrap();
    server.stop();
    let key = layout::epoch_key(&partition_dir(), 1);
    let err = store.create_if_absent(&key, b"x").unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Retriable { operation, location, .. }
            if operation == "PutObject" && location.ends_with(&key)),
        "{err:?}"
    );
}

mod ceph {
    //! The same checks against Ceph RGW (16.2.15 in CI): it enforces `If-None-Match: *`.
    use std::sync::OnceLock;

    use super::*;

    fn store() -> Option<&'static S3RemoteStorage> {
        static STORE: OnceLock<Option<S3RemoteStorage>> = OnceLock::new();
        STORE
            .get_or_init(|| support::ceph_config().map(|c| S3RemoteStorage::new(c).unwrap()))
            .as_ref()
    }

    #[test]
    fn ceph_create_if_absent_creates_once_and_refuses_the_second_time() {
        if let Some(store) = store() {
            creates_once(store);
        }
    }

    #[test]
    fn ceph_eight_racing_creators_of_one_key_one_wins() {
        if let Some(store) = store() {
            for _ in 0..3 {
                one_racer_wins(store);
            }
        }
    }

    #[test]
    fn ceph_probe_is_enforced() {
        if let Some(store) = store() {
            assert_eq!(
                ownership::probe(store, &partition_dir()).unwrap(),
                ProbeOutcome::Enforced
            );
        }
    }

    #[test]
    fn ceph_read_record_of_a_missing_key_is_none() {
        if let Some(store) = store() {
            missing_record_is_absent(store);
        }
    }
}
