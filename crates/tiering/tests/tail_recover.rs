//! Recovery rebuilds the tail in the bucket: a lost disk's acknowledged records come back from
//! the tail objects, the next append continues after every seq the writer used, seqs no tier
//! holds (never acknowledged, or in a damaged tail object) are named holes, and a second run
//! changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "tail/store.rs"]
mod store;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use krabka_protocol::Message;
use krabka_remote_storage::TopicIdPartition;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_storage::Options;
use krabka_tiering::partition::{OpenOptions, PartitionQuery, RecoverOptions, Recovered};
use krabka_tiering::{
    Access, Durability, Error, PartitionDir, RemoteTier, TailConfig, TailError, TieringConfig,
};

// The logs recovered with holes are opened without a tail writer: the writer does not step
// over a hole in its local log yet.

use krabka_remote_storage::tail::TailKind;
use store::{Switchable, fs_tier as tier, tail_entries};

fn options(durability: Durability, tail: bool) -> OpenOptions {
    OpenOptions {
        log: Options {
            max_bytes: 1 << 20,
            ..Options::default()
        },
        config: TieringConfig {
            retention_ms: None,
            tail: tail.then(|| TailConfig {
                interval: Duration::from_millis(20),
                grace: Duration::from_secs(1),
                ack_deadline: Duration::from_millis(300),
                ..TailConfig::default()
            }),
            durability,
            ..TieringConfig::default()
        },
        ..OpenOptions::new(Access::Owner)
    }
}

fn value(i: u64) -> String {
    format!("recovered record {i:05} {}", "v".repeat(30))
}

fn recover(dir: &Path, tier: &RemoteTier, tp: &TopicIdPartition) -> Recovered {
    let options = RecoverOptions {
        partition: PartitionQuery {
            topic: Some(tp.topic().to_owned()),
            partition: Some(tp.partition()),
            topic_id: Some(tp.topic_id()),
        },
        ..RecoverOptions::default()
    };
    PartitionDir::recover(dir, tier, &options).expect("recover")
}

/// Appends `batches` acknowledged batches of 10 (each in its own tail object), then loses the
/// directory.
fn write_and_lose(tmp: &Path, backend: &Arc<Switchable>, batches: u64) -> TopicIdPartition {
    let root = tmp.join("remote");
    let a = tmp.join("a");
    let part =
        PartitionDir::open(&a, &tier(backend, &root), options(Durability::Bucket, true)).unwrap();
    let tp = part.topic().clone();
    for b in 0..batches {
        let batch: Vec<Message> = (1..=10).map(|k| Message::new(value(b * 10 + k))).collect();
        assert_eq!(
            part.log().append_batch(&batch).unwrap(),
            b * 10 + 1..=b * 10 + 10
        );
    }
    drop(part);
    std::fs::remove_dir_all(&a).unwrap();
    tp
}

fn assert_reads(part: &PartitionDir, seqs: impl Iterator<Item = u64>) {
    for seq in seqs {
        let r = part.log().read(seq, 1).unwrap();
        assert_eq!(r[0].seq, seq);
        assert_eq!(r[0].message.value.as_ref(), value(seq).as_bytes());
    }
}

#[test]
fn recover_restores_every_acknowledged_record_from_the_tail_and_continues_after_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let tp = write_and_lose(tmp.path(), &backend, 5);
    let b = tmp.path().join("b");
    let recovered = recover(&b, &tier(&backend, &root), &tp);
    assert_eq!(recovered.tail.records, 50, "{:?}", recovered.tail);
    assert_eq!(recovered.tail.restored, Some(1..=50));
    assert!(
        recovered.tail.holes.is_empty(),
        "{:?}",
        recovered.tail.holes
    );
    assert_eq!(recovered.tail.chains.len(), 1);
    let part = PartitionDir::open(
        &b,
        &tier(&backend, &root),
        options(Durability::Bucket, true),
    )
    .unwrap();
    assert_reads(&part, 1..=50);
    assert_eq!(part.log().append(&Message::new(value(51))).unwrap(), 51);
}

#[test]
fn recover_closes_the_chains_the_head_lists_with_a_fence() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let a = tmp.path().join("a");
    let part = PartitionDir::open(
        &a,
        &tier(&backend, &root),
        options(Durability::Bucket, true),
    )
    .unwrap();
    let tp = part.topic().clone();
    for i in 1..=5 {
        part.log().append(&Message::new(value(i))).unwrap();
    }
    let chain = tail_entries(backend.as_ref() as &dyn OwnershipStore, &tp)[0]
        .0
        .clone();
    // The old writer still runs while its partition is recovered elsewhere: its chain is
    // closed under it, so nothing more is acknowledged in that chain.
    let recovered = recover(&tmp.path().join("b"), &tier(&backend, &root), &tp);
    assert_eq!(recovered.tail.records, 5);
    let listed = tail_entries(backend.as_ref() as &dyn OwnershipStore, &tp);
    let last_of_chain = listed.iter().rfind(|(c, ..)| c == &chain).unwrap();
    assert_eq!(last_of_chain.2, TailKind::Fence, "{listed:?}");
    drop(part);
}

#[test]
fn seqs_appended_but_never_acknowledged_are_a_named_hole_and_never_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let a = tmp.path().join("a");
    let part = PartitionDir::open(
        &a,
        &tier(&backend, &root),
        options(Durability::Bucket, true),
    )
    .unwrap();
    let tp = part.topic().clone();
    for i in 1..=10 {
        part.log().append(&Message::new(value(i))).unwrap();
    }
    // The bucket stalls: seqs 11..=15 are appended locally, never acknowledged.
    backend.stalled.store(true, Ordering::SeqCst);
    for i in 11..=15 {
        let e = part
            .log()
            .append(&Message::new(value(i)))
            .expect_err("stalled");
        assert!(
            matches!(e, Error::Tail(TailError::NotAcknowledged { .. })),
            "{e}"
        );
    }
    drop(part);
    // The writer's thread ends with its last handle (within a window); until then the bucket
    // stays stalled, so its object holding seq 11, never acknowledged, does not land late
    // (a writer still running would write it once the bucket answers: appended, never
    // acknowledged, and then restored by a recovery like any record the tail holds).
    std::thread::sleep(Duration::from_millis(300));
    backend.stalled.store(false, Ordering::SeqCst);
    // The writer opens once more without a tail of its own: its head records that it
    // appended up to seq 15; then its disk is lost.
    let part = PartitionDir::open(
        &a,
        &tier(&backend, &root),
        options(Durability::Local, false),
    )
    .unwrap();
    assert_eq!(part.log().last_seq(), 15);
    drop(part);
    std::fs::remove_dir_all(&a).unwrap();
    let held: Vec<u64> = store::seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp);
    assert_eq!(held, (1..=10).collect::<Vec<_>>());

    let b = tmp.path().join("b");
    let recovered = recover(&b, &tier(&backend, &root), &tp);
    assert_eq!(recovered.tail.records, 10);
    assert_eq!(recovered.tail.holes.len(), 1, "{:?}", recovered.tail.holes);
    let (seqs, why) = &recovered.tail.holes[0];
    assert_eq!(seqs, &(11..=15));
    assert!(why.contains("writer appended up to seq 15"), "{why}");
    let part = PartitionDir::open(
        &b,
        &tier(&backend, &root),
        options(Durability::Local, false),
    )
    .unwrap();
    assert_reads(&part, 1..=10);
    // A read of the hole names it.
    let over = part.log().read_over_holes(11, 10).unwrap();
    assert_eq!(over.lost.len(), 1);
    assert_eq!(over.lost[0].seqs, 11..=15);
    assert_eq!(part.log().append(&Message::new(value(16))).unwrap(), 16);
}

#[test]
fn a_damaged_tail_object_is_a_named_hole_of_its_seqs_and_recover_twice_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let tp = write_and_lose(tmp.path(), &backend, 3);
    let entries = tail_entries(backend.as_ref() as &dyn OwnershipStore, &tp);
    let (dir, number, _, _) = entries
        .iter()
        .find(|(_, _, _, e)| e == &vec![(11, 20)])
        .expect("an object holding exactly seqs 11..=20")
        .clone();
    let path = root.join(format!("{dir}/{number:020}"));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 0x40;
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    std::fs::write(&path, &bytes).unwrap();

    let b = tmp.path().join("b");
    let first = recover(&b, &tier(&backend, &root), &tp);
    assert_eq!(first.tail.records, 20, "{:?}", first.tail);
    assert_eq!(first.tail.holes.len(), 1, "{:?}", first.tail.holes);
    assert_eq!(first.tail.holes[0].0, 11..=20);
    assert!(
        first.tail.holes[0].1.contains("checksum"),
        "{:?}",
        first.tail.holes
    );
    // Again: the same directory, nothing more restored, the same log.
    let again = recover(&b, &tier(&backend, &root), &tp);
    assert_eq!(again.tail.records, 0, "{:?}", again.tail);
    assert_eq!(again.tail.chains, first.tail.chains);

    let part = PartitionDir::open(
        &b,
        &tier(&backend, &root),
        options(Durability::Local, false),
    )
    .unwrap();
    assert_reads(&part, (1..=10).chain(21..=30));
    let e = part.log().read(15, 1).expect_err("a hole");
    let over = part.log().read_over_holes(11, 100).unwrap();
    assert_eq!(over.lost.len(), 1, "{e}");
    assert_eq!(over.lost[0].seqs, 11..=20);
    assert_eq!(over.records.first().map(|r| r.seq), Some(21));
    assert_eq!(part.log().append(&Message::new(value(31))).unwrap(), 31);
}

#[test]
fn recover_twice_restores_the_same_records_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let tp = write_and_lose(tmp.path(), &backend, 2);
    let b = tmp.path().join("b");
    let first = recover(&b, &tier(&backend, &root), &tp);
    let second = recover(&b, &tier(&backend, &root), &tp);
    assert_eq!(first.tail.records, 20);
    assert_eq!(second.tail.records, 0);
    assert!(second.tail.holes.is_empty(), "{:?}", second.tail.holes);
    let part = PartitionDir::open(
        &b,
        &tier(&backend, &root),
        options(Durability::Bucket, true),
    )
    .unwrap();
    assert_reads(&part, 1..=20);
    assert_eq!(part.log().append(&Message::new(value(21))).unwrap(), 21);
}
