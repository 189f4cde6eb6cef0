//! Tail chains (`krabka_remote_storage::tail`) on S3 over HTTP on 127.0.0.1: create-only
//! objects through `PutObject` with `If-None-Match: *`, and a fence closing a chain while its
//! writer still writes. Against the in-process server, and against the Ceph RGW cluster started
//! by `scripts/ceph-rgw` when `KRABKA_TEST_CEPH_*` is set (see `support::ceph_config`: skipped
//! without it, except under `CI=true`, where it fails).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_storage::Uuid;
use krabka_remote_storage::tail::{
    self, TailEntryHeader, TailKind, TailObject, WriteOutcome, close_chain, write_object,
};

const WRITER: Uuid = Uuid::from_u128(0x1111);
const OTHER_WRITER: Uuid = Uuid::from_u128(0x3333);
const FENCER: Uuid = Uuid::from_u128(0x2222);

/// The racing writer's pause between two creates.
const WRITER_PAUSE: Duration = Duration::from_millis(2);

/// Data object `n` of `chain` written by `incarnation`, holding `payload` as seq `n`.
fn object_with(chain: Uuid, n: u64, incarnation: Uuid, payload: &str) -> TailObject {
    let header = TailEntryHeader {
        topic_id: Uuid::from_u128(1),
        partition: 0,
        writer_epoch: 1,
        first_seq: n,
        last_seq: n,
        max_timestamp: 0,
    };
    TailObject::data_object(chain, n, incarnation, 0, &[(header, payload.as_bytes())]).unwrap()
}

fn object(chain: Uuid, n: u64) -> TailObject {
    object_with(chain, n, WRITER, &format!("batch {n}"))
}

/// Creates, the identical retry, another writer's create of a taken number, listing, reads,
/// and a fence that closes the chain to the next create.
fn create_only_objects_and_a_fence(store: &S3RemoteStorage) {
    let chain = Uuid::new_v4();
    for n in 1..=3 {
        assert_eq!(
            write_object(store, &object(chain, n)).unwrap(),
            WriteOutcome::Created,
            "object {n}"
        );
    }
    // A retry of ours after a lost answer: the same bytes are found, as good as created.
    assert_eq!(
        write_object(store, &object(chain, 3)).unwrap(),
        WriteOutcome::AlreadyIdentical
    );
    // Another writer's object under a taken number: not written, and what is there is named.
    let theirs = object_with(chain, 2, OTHER_WRITER, "other bytes");
    match write_object(store, &theirs).unwrap() {
        WriteOutcome::Taken { found: Some(found) } => assert_eq!(found, object(chain, 2)),
        other => panic!("expected Taken with object 2, got {other:?}"),
    }
    assert_eq!(
        tail::read_object(store, chain, 2).unwrap(),
        Some(object(chain, 2)),
        "the refused create left the object as it was"
    );
    assert_eq!(tail::list_numbers(store, chain).unwrap(), [1, 2, 3]);
    assert_eq!(tail::read_object(store, chain, 4).unwrap(), None);

    let closed = close_chain(store, chain, FENCER, 0).unwrap();
    assert_eq!((closed.fence, closed.wrote_fence), (4, true));
    assert_eq!(closed.fenced_by, FENCER);
    assert_eq!(closed.below, [1, 2, 3]);
    match write_object(store, &object(chain, 4)).unwrap() {
        WriteOutcome::Taken { found: Some(f) } => assert_eq!(f.kind(), TailKind::Fence),
        other => panic!("expected the fence, got {other:?}"),
    }
    // Closing again finds the fence and writes none.
    let again = close_chain(store, chain, Uuid::new_v4(), 0).unwrap();
    assert_eq!(
        (again.fence, again.wrote_fence, again.fenced_by),
        (4, false, FENCER)
    );
    assert_eq!(tail::list_numbers(store, chain).unwrap(), [1, 2, 3, 4]);
}

/// A writer thread creates objects one after another while the chain is closed under it:
/// every object it created is below the fence, and nothing it tried after the close returned
/// was created. `rounds` races, the close coming after a growing number of objects.
fn a_writer_racing_its_fencer_creates_nothing_after_the_close(
    store: &Arc<S3RemoteStorage>,
    rounds: u64,
) {
    for round in 0..rounds {
        let chain = Uuid::new_v4();
        let closed_flag = Arc::new(AtomicBool::new(false));
        let created_up_to = Arc::new(AtomicU64::new(0));
        let writer = {
            let (store, closed_flag, created_up_to) =
                (store.clone(), closed_flag.clone(), created_up_to.clone());
            std::thread::spawn(move || {
                let mut created = Vec::new();
                let started = Instant::now();
                for n in 1..=5_000u64 {
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "the writer was not fenced within 30 s"
                    );
                    let closed_before = closed_flag.load(Ordering::SeqCst);
                    match write_object(&*store, &object(chain, n)).unwrap() {
                        WriteOutcome::Created => {
                            assert!(!closed_before, "object {n} created after the close");
                            created.push(n);
                            created_up_to.store(n, Ordering::SeqCst);
                        }
                        WriteOutcome::Taken { found } => {
                            let kind = found.map(|f| f.kind());
                            assert_eq!(kind, Some(TailKind::Fence), "object {n}");
                            return (created, n);
                        }
                        other => panic!("object {n}: {other:?} on a first create"),
                    }
                    // A tail writer creates at most one object per window (10 ms at least):
                    // one creating back to back outruns a fencer, which spends two requests
                    // on each number it finds taken (and gives up, retriable, after
                    // `MAX_CLOSE_TRIES`).
                    std::thread::sleep(WRITER_PAUSE);
                }
                panic!("the writer was never fenced");
            })
        };
        let waited = Instant::now();
        while created_up_to.load(Ordering::SeqCst) <= round {
            assert!(
                waited.elapsed() < Duration::from_secs(10),
                "round {round}: the writer created nothing in 10 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let closed = close_chain(&**store, chain, FENCER, 0).unwrap();
        closed_flag.store(true, Ordering::SeqCst);
        let (created, taken_at) = writer.join().unwrap();
        let below: Vec<u64> = (1..closed.fence).collect();
        assert!(closed.wrote_fence, "round {round}");
        assert_eq!(taken_at, closed.fence, "round {round}");
        assert_eq!(created, below, "round {round}");
        assert_eq!(closed.below, below, "round {round}");
        // Nothing of the chain is above the fence.
        let mut listed = below.clone();
        listed.push(closed.fence);
        assert_eq!(
            tail::list_numbers(&**store, chain).unwrap(),
            listed,
            "round {round}"
        );
    }
}

fn in_process(prefix: &str) -> (support::TestServer, Arc<S3RemoteStorage>) {
    let server = support::start_server();
    let store = Arc::new(S3RemoteStorage::new(server.config().with_prefix(prefix)).unwrap());
    (server, store)
}

#[test]
fn s3_tail_objects_are_created_once_and_a_fence_closes_the_chain() {
    let (_server, store) = in_process("tail");
    create_only_objects_and_a_fence(&store);
}

#[test]
fn s3_a_writer_racing_its_fencer_creates_nothing_after_the_close() {
    let (_server, store) = in_process("race");
    a_writer_racing_its_fencer_creates_nothing_after_the_close(&store, 5);
}

mod ceph {
    //! The same checks against Ceph RGW: it refuses a second `PutObject` with
    //! `If-None-Match: *` with 412.
    use super::*;

    fn store() -> Option<Arc<S3RemoteStorage>> {
        support::ceph_config().map(|c| Arc::new(S3RemoteStorage::new(c).unwrap()))
    }

    #[test]
    fn ceph_tail_objects_are_created_once_and_a_fence_closes_the_chain() {
        if let Some(store) = store() {
            create_only_objects_and_a_fence(&store);
        }
    }

    #[test]
    fn ceph_a_writer_racing_its_fencer_creates_nothing_after_the_close() {
        if let Some(store) = store() {
            a_writer_racing_its_fencer_creates_nothing_after_the_close(&store, 3);
        }
    }
}
