//! Read replicas serve the tail in the bucket: records a writer put in tail objects are
//! readable on a replica within one refresh, in order, each batch checked; tail objects the
//! writer deletes under a following replica never cut its reads short; a damaged entry is a
//! named gap of exactly its seqs; stray files in a chain directory are ignored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "tail/store.rs"]
mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::{TopicIdPartition, layout};
use krabka_storage::Options;
use krabka_tiering::partition::OpenOptions;
use krabka_tiering::replica::{ReadReplica, ReplicaConfig};
use krabka_tiering::{
    Access, Durability, Error, PartitionDir, ReadError, TailConfig, TieringConfig,
};

use store::{Switchable, fs_tier as tier, seqs_in_tail, tail_entries};

fn tail(grace: Duration) -> TailConfig {
    TailConfig {
        interval: Duration::from_millis(20),
        grace,
        ack_deadline: Duration::from_secs(5),
        ..TailConfig::default()
    }
}

fn options(durability: Durability, grace: Duration) -> OpenOptions {
    OpenOptions {
        log: Options {
            max_bytes: 1 << 20,
            ..Options::default()
        },
        config: TieringConfig {
            retention_ms: None,
            tail: Some(tail(grace)),
            durability,
            ..TieringConfig::default()
        },
        ..OpenOptions::new(Access::Owner)
    }
}

fn value(i: u64) -> String {
    format!("tail record {i:06} {}", "v".repeat(24))
}

fn replica(backend: &Arc<Switchable>, tp: &TopicIdPartition) -> ReadReplica {
    ReadReplica::open(
        backend.clone(),
        backend.clone(),
        tp.clone(),
        TieringConfig::default(),
        {
            let mut c = ReplicaConfig::default();
            c.refresh_interval = Duration::from_millis(1);
            c
        },
    )
    .unwrap()
}

/// Follows `writer_done`'s writer from seq 1 until it reached `last` once the writer stopped:
/// every record in order with its value, no read failing, no gap named. Returns how many
/// reads it made.
fn follow(replica: &ReadReplica, done: &AtomicBool, last: &AtomicU64) -> u64 {
    let mut next = 1_u64;
    let mut reads = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "the replica reached only seq {next}"
        );
        let finished = done.load(Ordering::SeqCst);
        let target = last.load(Ordering::SeqCst);
        if finished && next > target {
            return reads;
        }
        replica.refresh().unwrap();
        let end = replica.last_seq().unwrap();
        if end >= next {
            let records = replica
                .read(next, 500)
                .unwrap_or_else(|e| panic!("read from {next}: {e}"));
            reads += 1;
            assert!(
                !records.is_empty(),
                "nothing read from {next}, last_seq {end}"
            );
            for r in &records {
                assert_eq!(r.seq, next, "out of order");
                assert_eq!(r.message.value.as_ref(), value(r.seq).as_bytes());
                next += 1;
            }
            // A read returns everything up to the view's end (or `max`): never cut short.
            assert!(
                records.len() == 500 || next > end,
                "a read from {} returned {} records, the view ends at {end}",
                records[0].seq,
                records.len()
            );
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(replica.missing().is_empty(), "{:?}", replica.missing());
    }
}

#[test]
fn a_replica_following_a_writer_sees_every_tail_record_in_order_within_a_refresh() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let part = Arc::new(
        PartitionDir::open(
            &tmp.path().join("a"),
            &tier(&backend, &root),
            options(Durability::Local, Duration::from_secs(60)),
        )
        .unwrap(),
    );
    let tp = part.topic().clone();
    let replica = replica(&backend, &tp);
    assert_eq!(replica.last_seq().unwrap(), 0);
    let done = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    // About 1,000 records a second for 3 s, 10 every 10 ms.
    let writer = {
        let (part, done, last) = (part.clone(), done.clone(), last.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut i = 0;
            while started.elapsed() < Duration::from_secs(3) {
                let batch: Vec<Message> = (1..=10).map(|k| Message::new(value(i + k))).collect();
                let seqs = part.log().append_batch(&batch).unwrap();
                i = *seqs.end();
                last.store(i, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(10));
            }
            // Everything appended is in the bucket before the replica is told to stop.
            let deadline = Instant::now() + Duration::from_secs(10);
            while part.log().tail_acked_seq() < Some(i) {
                assert!(Instant::now() < deadline, "not in the bucket in time");
                std::thread::sleep(Duration::from_millis(10));
            }
            done.store(true, Ordering::SeqCst);
            i
        })
    };
    let reads = follow(&replica, &done, &last);
    let appended = writer.join().unwrap();
    assert!(appended >= 1_000, "appended only {appended}");
    assert!(reads > 10, "{reads} reads: the replica did not follow");
    // No finished segment: every record came from the tail.
    let stats = replica.stats();
    assert_eq!(stats.segments, 0);
    assert_eq!(stats.last_seq, appended);
    assert_eq!(stats.tail, Some(1..=appended));
    // The writer's head holds its position as of its last head write; the replica is ahead.
    assert_eq!(stats.lag_seqs, 0);
    // Visible within one refresh: one more record, one refresh, and it reads.
    let seq = part
        .log()
        .append(&Message::new(value(appended + 1)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while part.log().tail_acked_seq() < Some(seq) {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    replica.refresh().unwrap();
    let r = replica.read(seq, 1).unwrap();
    assert_eq!(r[0].seq, seq);
}

#[test]
fn tail_objects_deleted_under_a_following_replica_never_cut_its_reads_short() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let part = Arc::new(
        PartitionDir::open(
            &tmp.path().join("a"),
            &tier(&backend, &root),
            options(Durability::Bucket, Duration::from_secs(1)),
        )
        .unwrap(),
    );
    let tp = part.topic().clone();
    let replica = replica(&backend, &tp);
    let done = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let writer = {
        let (part, done, last) = (part.clone(), done.clone(), last.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut i = 0;
            let mut rounds = 0;
            while started.elapsed() < Duration::from_secs(5) {
                let batch: Vec<Message> = (1..=20).map(|k| Message::new(value(i + k))).collect();
                i = *part.log().append_batch(&batch).unwrap().end();
                last.store(i, Ordering::SeqCst);
                if i % 200 == 0 {
                    // Segments finish: the tail objects holding them go once the grace passed.
                    part.log().roll().unwrap();
                    rounds += part.log().run_once().unwrap().segments_copied;
                }
            }
            done.store(true, Ordering::SeqCst);
            (i, rounds)
        })
    };
    follow(&replica, &done, &last);
    let (appended, copied) = writer.join().unwrap();
    assert!(copied >= 3, "{copied} segments copied");
    // The writer deleted tail objects while the replica followed.
    let held = seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp);
    assert!(
        held.first().is_some_and(|s| *s > 1),
        "the first seqs are still in the tail: {:?}",
        held.first()
    );
    // Everything is still read, from the segments and the tail.
    let all = replica.read_over_holes(1, appended as usize).unwrap();
    assert!(all.lost.is_empty(), "{:?}", all.lost);
    assert_eq!(all.records.len() as u64, appended);
}

#[test]
fn a_flipped_byte_in_a_tail_entry_is_a_named_gap_of_exactly_its_seqs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let part = PartitionDir::open(
        &tmp.path().join("a"),
        &tier(&backend, &root),
        options(Durability::Bucket, Duration::from_secs(60)),
    )
    .unwrap();
    let tp = part.topic().clone();
    // Three acknowledged batches: three objects (a bucket-durable append returns once its
    // object is written, so the next batch goes to a later one).
    for b in 0..3_u64 {
        let batch: Vec<Message> = (1..=10).map(|k| Message::new(value(b * 10 + k))).collect();
        part.log().append_batch(&batch).unwrap();
    }
    let entries = tail_entries(backend.as_ref() as &dyn OwnershipStore, &tp);
    let (dir, number, _, _) = entries
        .iter()
        .find(|(_, _, _, e)| e == &vec![(11, 20)])
        .expect("an object holding exactly seqs 11..=20")
        .clone();
    let key = format!("{dir}/{number:020}");
    let path = root.join(&key);
    // The last byte of the object is its only entry's data.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 0x40;
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    std::fs::write(&path, &bytes).unwrap();

    let replica = replica(&backend, &tp);
    assert_eq!(replica.last_seq().unwrap(), 30);
    let missing = replica.missing();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!((missing[0].from, missing[0].to), (11, 20));
    assert_eq!(missing[0].objects, vec![key.clone()]);
    // The records before it read, a read stops short of it...
    let before = replica.read(1, 100).unwrap();
    assert_eq!(
        before.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    // ...a read of it names the object and the seqs...
    let e = replica.read(15, 100).expect_err("a named gap");
    match &e {
        Error::Read(ReadError::RemoteHole {
            from,
            to,
            objects,
            reason,
            ..
        }) => {
            assert_eq!((*from, *to), (11, 20));
            assert_eq!(objects, &vec![key.clone()]);
            assert!(reason.as_deref().unwrap_or("").contains("checksum"), "{e}");
        }
        other => panic!("expected RemoteHole, got {other}"),
    }
    // ...and it costs only its own seqs.
    let first = replica.read_over_holes(1, 100).unwrap();
    assert_eq!(first.records.len(), 10);
    assert_eq!(first.next, 11);
    let over = replica.read_over_holes(first.next, 100).unwrap();
    assert_eq!(
        over.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (21..=30).collect::<Vec<_>>()
    );
    assert_eq!(over.lost.len(), 1);
    assert_eq!(over.lost[0].seqs, 11..=20);
    assert_eq!(over.lost[0].objects, vec![key]);
}

#[test]
fn a_stray_file_in_a_chain_directory_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let part = PartitionDir::open(
        &tmp.path().join("a"),
        &tier(&backend, &root),
        options(Durability::Bucket, Duration::from_secs(60)),
    )
    .unwrap();
    let tp = part.topic().clone();
    for i in 1..=5 {
        part.log().append(&Message::new(value(i))).unwrap();
    }
    let entries = tail_entries(backend.as_ref() as &dyn OwnershipStore, &tp);
    let dir = &entries[0].0;
    assert!(layout::parse_tail_chain_dir(dir).is_some());
    std::fs::write(root.join(dir).join("notes.txt"), b"not a tail object").unwrap();
    std::fs::write(root.join(dir).join("0000000000000000000x"), b"junk").unwrap();
    let replica = replica(&backend, &tp);
    for i in 6..=8 {
        part.log().append(&Message::new(value(i))).unwrap();
    }
    replica.refresh().unwrap();
    let records = replica.read(1, 100).unwrap();
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=8).collect::<Vec<_>>()
    );
    assert!(replica.missing().is_empty());
}
