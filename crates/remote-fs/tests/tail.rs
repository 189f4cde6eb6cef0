//! Tail chains (`krabka_remote_storage::tail`) on the filesystem backend: create-only objects
//! through its no-replace links, and a fence closing a chain while its writer still writes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::tail::{
    self, TailEntryHeader, TailKind, TailObject, WriteOutcome, close_chain, write_object,
};
use krabka_remote_storage::{Uuid, layout};

const WRITER: Uuid = Uuid::from_u128(0x1111);
const FENCER: Uuid = Uuid::from_u128(0x2222);

fn object(chain: Uuid, n: u64) -> TailObject {
    let header = TailEntryHeader {
        topic_id: Uuid::from_u128(1),
        partition: 0,
        writer_epoch: 1,
        first_seq: n,
        last_seq: n,
        max_timestamp: 0,
    };
    let bytes = format!("batch {n}");
    TailObject::data_object(chain, n, WRITER, 0, &[(header, bytes.as_bytes())]).unwrap()
}

#[test]
fn a_tail_chain_is_written_read_listed_and_fenced_on_files() {
    let root = tempfile::tempdir().unwrap();
    let store = FsRemoteStorage::new(root.path()).unwrap();
    let chain = Uuid::from_u128(0xc4a1);
    for n in 1..=3 {
        assert!(matches!(
            write_object(&store, &object(chain, n)).unwrap(),
            WriteOutcome::Created
        ));
    }
    assert!(matches!(
        write_object(&store, &object(chain, 3)).unwrap(),
        WriteOutcome::AlreadyIdentical
    ));
    // A temporary file of an interrupted create is no object.
    let dir = root.path().join(layout::tail_chain_dir(chain));
    std::fs::write(dir.join("00000000000000000004.tmp-left-by-a-crash"), b"x").unwrap();
    assert_eq!(tail::list_numbers(&store, chain).unwrap(), [1, 2, 3]);
    assert_eq!(
        tail::read_object(&store, chain, 2).unwrap(),
        Some(object(chain, 2))
    );
    assert_eq!(tail::read_object(&store, chain, 4).unwrap(), None);

    let closed = close_chain(&store, chain, FENCER, 0).unwrap();
    assert_eq!((closed.fence, closed.wrote_fence), (4, true));
    assert_eq!(closed.below, [1, 2, 3]);
    match write_object(&store, &object(chain, 4)).unwrap() {
        WriteOutcome::Taken { found: Some(f) } => assert_eq!(f.kind(), TailKind::Fence),
        other => panic!("expected the fence, got {other:?}"),
    }
}

#[test]
fn a_writer_racing_its_fencer_on_files_creates_nothing_after_the_close() {
    for round in 0..5u128 {
        let root = tempfile::tempdir().unwrap();
        let store = Arc::new(FsRemoteStorage::new(root.path()).unwrap());
        let chain = Uuid::from_u128(0x7000 + round);
        let closed_flag = Arc::new(AtomicBool::new(false));
        let created_up_to = Arc::new(AtomicU64::new(0));
        let writer = {
            let (store, closed_flag, created_up_to) =
                (store.clone(), closed_flag.clone(), created_up_to.clone());
            std::thread::spawn(move || {
                let mut created = Vec::new();
                for n in 1..=10_000u64 {
                    let closed_before = closed_flag.load(Ordering::SeqCst);
                    match write_object(&*store, &object(chain, n)).unwrap() {
                        WriteOutcome::Created => {
                            assert!(!closed_before, "object {n} created after the close");
                            created.push(n);
                            created_up_to.store(n, Ordering::SeqCst);
                        }
                        WriteOutcome::Taken { .. } => return (created, n),
                        other => panic!("{other:?}"),
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                panic!("the writer was never fenced");
            })
        };
        for _ in 0..10_000 {
            if created_up_to.load(Ordering::SeqCst) > u64::try_from(round).unwrap() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let closed = close_chain(&*store, chain, FENCER, 0).unwrap();
        closed_flag.store(true, Ordering::SeqCst);
        let (created, taken_at) = writer.join().unwrap();
        let below: Vec<u64> = (1..closed.fence).collect();
        assert_eq!(taken_at, closed.fence, "round {round}");
        assert_eq!(created, below, "round {round}");
        assert_eq!(closed.below, below, "round {round}");
    }
}
