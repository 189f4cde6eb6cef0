//! The tail in the bucket: an acknowledged record outlives the disk it was written on.
//! Bucket-durable appends, takeovers that serve every acknowledged record and fence the old
//! writer, a bucket that stalls, one object per window for many partitions, and deletion of
//! tail objects once finished segments hold their records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "tail/store.rs"]
mod store;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_storage::Options;
use krabka_tiering::partition::{OpenOptions, PartitionQuery, RecoverOptions};
use krabka_tiering::{
    Access, Durability, Error, PartitionDir, RemoteTier, TailConfig, TailError, TailWriter,
    TieringConfig,
};

use store::{Switchable, fs_tier as tier, seqs_in_tail, tail_entries};

fn tail() -> TailConfig {
    TailConfig {
        interval: Duration::from_millis(20),
        grace: Duration::from_secs(1),
        ack_deadline: Duration::from_secs(5),
        ..TailConfig::default()
    }
}

fn options(durability: Durability) -> OpenOptions {
    OpenOptions {
        log: Options {
            max_bytes: 1 << 20,
            ..Options::default()
        },
        config: TieringConfig {
            retention_ms: None,
            tail: Some(tail()),
            durability,
            ..TieringConfig::default()
        },
        ..OpenOptions::new(Access::Owner)
    }
}

fn value(tag: &str, i: u64) -> String {
    format!("{tag} record {i:05} {}", "v".repeat(30))
}

fn recover_into(dir: &Path, tier: &RemoteTier, tp: &krabka_remote_storage::TopicIdPartition) {
    let options = RecoverOptions {
        partition: PartitionQuery {
            topic: Some(tp.topic().to_owned()),
            partition: Some(tp.partition()),
            topic_id: Some(tp.topic_id()),
        },
        ..RecoverOptions::default()
    };
    PartitionDir::recover(dir, tier, &options).expect("recover");
}

#[test]
fn a_bucket_durable_append_returns_only_once_its_records_are_in_a_tail_object() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let part = PartitionDir::open(
        &tmp.path().join("a"),
        &tier(&backend, &root),
        options(Durability::Bucket),
    )
    .unwrap();
    let tp = part.topic().clone();
    for i in 1..=25_u64 {
        let seq = part.log().append(&Message::new(value("a", i))).unwrap();
        assert_eq!(seq, i);
        // Acknowledged: the bucket holds it now, with every seq before it.
        let held = seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp);
        assert_eq!(
            held,
            (1..=i).collect::<Vec<_>>(),
            "after the ack of seq {i}"
        );
        assert!(part.log().tail_acked_seq().unwrap() >= i);
    }
    let seqs = part
        .log()
        .append_batch(&[Message::new(value("a", 26)), Message::new(value("a", 27))])
        .unwrap();
    assert_eq!(seqs, 26..=27);
    assert_eq!(
        seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp),
        (1..=27).collect::<Vec<_>>()
    );
}

#[test]
fn a_lost_disk_loses_no_record_acknowledged_in_the_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let a = tmp.path().join("a");
    let part = PartitionDir::open(&a, &tier(&backend, &root), options(Durability::Bucket)).unwrap();
    let tp = part.topic().clone();
    for i in 1..=40_u64 {
        part.log().append(&Message::new(value("a", i))).unwrap();
    }
    // The disk is lost: the directory is gone, its active segment never copied.
    drop(part);
    std::fs::remove_dir_all(&a).unwrap();
    let b = tmp.path().join("b");
    recover_into(&b, &tier(&backend, &root), &tp);
    let part = PartitionDir::open(&b, &tier(&backend, &root), options(Durability::Bucket)).unwrap();
    let records = part.log().read(1, 100).unwrap();
    assert_eq!(records.len(), 40);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1);
        assert_eq!(r.message.value.as_ref(), value("a", r.seq).as_bytes());
    }
    // The new writer goes on after them: no seq is handed out twice.
    assert_eq!(part.log().append(&Message::new("next")).unwrap(), 41);
}

#[test]
fn a_fenced_writer_acknowledges_nothing_after_a_takeover_and_the_new_writer_serves_all_it_did() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let a_dir = tmp.path().join("a");
    let a = Arc::new(
        PartitionDir::open(&a_dir, &tier(&backend, &root), options(Durability::Bucket)).unwrap(),
    );
    let tp = a.topic().clone();
    // Writer A appends without pause while B takes the partition over.
    let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let a = Arc::clone(&a);
        let progress = Arc::clone(&progress);
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut refused = 0;
            let started = Instant::now();
            for i in 1..=2_000_u64 {
                if started.elapsed() > Duration::from_secs(20) {
                    break;
                }
                match a.log().append(&Message::new(value("a", i))) {
                    Ok(seq) => {
                        acked.push(seq);
                        progress.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        refused += 1;
                        assert!(
                            matches!(
                                e,
                                Error::Ownership(krabka_tiering::OwnershipError::Fenced { .. })
                                    | Error::Tail(TailError::NotAcknowledged { .. })
                            ),
                            "{e}"
                        );
                        if refused >= 3 {
                            break;
                        }
                    }
                }
            }
            acked
        })
    };
    // B takes over once A acknowledged a few records (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(20);
    while progress.load(Ordering::SeqCst) < 10 {
        assert!(
            Instant::now() < deadline,
            "A acknowledged too little in 20 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let b_dir = tmp.path().join("b");
    recover_into(&b_dir, &tier(&backend, &root), &tp);
    let b =
        PartitionDir::open(&b_dir, &tier(&backend, &root), options(Durability::Bucket)).unwrap();
    let acked = writer.join().unwrap();
    assert!(acked.len() >= 10, "A acknowledged {} records", acked.len());
    // Every record A acknowledged is served by B, with its bytes.
    let last = *acked.last().unwrap();
    let records = b.log().read(1, last as usize).unwrap();
    for seq in &acked {
        let r = &records[(*seq - 1) as usize];
        assert_eq!(r.seq, *seq);
        assert_eq!(r.message.value.as_ref(), value("a", *seq).as_bytes());
    }
    // A acknowledges nothing more.
    let e = a.log().append(&Message::new("late")).expect_err("fenced");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::Fenced { .. })
                | Error::Tail(TailError::NotAcknowledged { .. })
        ),
        "{e}"
    );
    // B's own appends go on after every seq A used.
    let next = b.log().append(&Message::new("b")).unwrap();
    assert!(
        next > last,
        "B appended at {next}, A acknowledged up to {last}"
    );
}

#[test]
fn a_stalled_bucket_fails_the_append_after_its_deadline_and_later_appends_recover() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let mut opts = options(Durability::Bucket);
    opts.config.tail = Some(TailConfig {
        ack_deadline: Duration::from_secs(1),
        ..tail()
    });
    let part = PartitionDir::open(&tmp.path().join("a"), &tier(&backend, &root), opts).unwrap();
    let tp = part.topic().clone();
    assert_eq!(part.log().append(&Message::new("one")).unwrap(), 1);
    backend.stalled.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let e = part
        .log()
        .append(&Message::new("two"))
        .expect_err("stalled");
    let waited = started.elapsed();
    assert!(
        matches!(&e, Error::Tail(TailError::NotAcknowledged { seqs, .. }) if *seqs == (2..=2)),
        "{e}"
    );
    assert!(e.is_retriable());
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    assert_eq!(
        seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp),
        vec![1]
    );
    backend.stalled.store(false, Ordering::SeqCst);
    // The bucket answers again: the next append is acknowledged, with the one before it.
    assert_eq!(part.log().append(&Message::new("three")).unwrap(), 3);
    assert_eq!(
        seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp),
        vec![1, 2, 3]
    );
}

#[test]
fn many_partitions_share_one_tail_object_per_window() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let writer = TailWriter::start(
        backend.clone(),
        TailConfig {
            interval: Duration::from_secs(2),
            ..tail()
        },
    )
    .unwrap();
    let parts: Vec<PartitionDir> = (0..40)
        .map(|i| {
            let mut opts = options(Durability::Local);
            opts.tail_writer = Some(writer.clone());
            PartitionDir::open(
                &tmp.path().join(format!("p{i}")),
                &tier(&backend, &root),
                opts,
            )
            .unwrap()
        })
        .collect();
    assert_eq!(writer.partitions(), 40);
    let before = writer.stats().objects_written;
    for p in &parts {
        for i in 1..=5 {
            p.log().append(&Message::new(value("m", i))).unwrap();
        }
    }
    // Every partition's records reach the bucket within a few windows...
    let deadline = Instant::now() + Duration::from_secs(10);
    while parts.iter().any(|p| p.log().tail_acked_seq() < Some(5)) {
        assert!(Instant::now() < deadline, "not in the bucket in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...in one object per window, not one per partition: the 200 appends take far less
    // than the 2 s window, so one or two windows hold them all.
    let objects = writer.stats().objects_written - before;
    assert!(objects <= 2, "{objects} objects for 40 partitions");
    let entries = tail_entries(backend.as_ref() as &dyn OwnershipStore, parts[0].topic());
    assert!(entries.iter().any(|(_, _, _, e)| e == &vec![(1, 5)]));
}

#[test]
fn tail_objects_are_deleted_once_finished_segments_hold_their_records_and_the_grace_passed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let part = PartitionDir::open(
        &tmp.path().join("a"),
        &tier(&backend, &root),
        options(Durability::Bucket),
    )
    .unwrap();
    let tp = part.topic().clone();
    for i in 1..=10 {
        part.log().append(&Message::new(value("a", i))).unwrap();
    }
    assert_eq!(
        seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp).len(),
        10
    );
    part.log().roll().unwrap();
    let report = part.log().run_once().unwrap();
    assert_eq!(report.segments_copied, 1, "{report:?}");
    // A record appended after the copy keeps the newest object in place meanwhile.
    part.log().append(&Message::new(value("a", 11))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = seqs_in_tail(backend.as_ref() as &dyn OwnershipStore, &tp);
        if held == vec![11] {
            break;
        }
        assert!(
            held.iter().all(|s| *s <= 11) && held.contains(&11),
            "{held:?}"
        );
        assert!(Instant::now() < deadline, "still held: {held:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Everything still reads, from the segment and the local log.
    assert_eq!(part.log().read(1, 100).unwrap().len(), 11);
}

#[test]
fn without_a_tail_a_quiet_partition_is_in_the_bucket_within_max_upload_lag() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let mut opts = options(Durability::Local);
    opts.config.tail = None;
    opts.config.max_upload_lag = Some(Duration::from_millis(200));
    let part = PartitionDir::open(&tmp.path().join("a"), &tier(&backend, &root), opts).unwrap();
    for i in 1..=5 {
        part.log().append(&Message::new(value("q", i))).unwrap();
    }
    // Younger than the bound: nothing is rolled, nothing copied.
    let report = part.log().run_once().unwrap();
    assert_eq!(report.segments_copied, 0, "{report:?}");
    std::thread::sleep(Duration::from_millis(250));
    // Older: the round rolls the active segment and copies it.
    let report = part.log().run_once().unwrap();
    assert_eq!(report.segments_copied, 1, "{report:?}");
    assert_eq!(part.log().stats().copy_lag_segments, 0);
    assert!(part.log().stats().remote_bytes > 0);
}

#[test]
fn a_takeover_finds_the_tail_by_searching_the_chains_when_the_head_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let a = tmp.path().join("a");
    let part = PartitionDir::open(&a, &tier(&backend, &root), options(Durability::Bucket)).unwrap();
    let tp = part.topic().clone();
    for i in 1..=20_u64 {
        part.log().append(&Message::new(value("a", i))).unwrap();
    }
    drop(part);
    std::fs::remove_dir_all(&a).unwrap();
    // The head is deleted by hand, and a damaged one is no better.
    let head = root
        .join(krabka_remote_storage::layout::partition_dir(&tp).unwrap())
        .join("_head");
    std::fs::write(&head, b"not a head").unwrap();
    let b = tmp.path().join("b");
    recover_into(&b, &tier(&backend, &root), &tp);
    std::fs::remove_file(&head).unwrap();
    let part = PartitionDir::open(&b, &tier(&backend, &root), options(Durability::Bucket)).unwrap();
    let records = part.log().read(1, 100).unwrap();
    assert_eq!(records.len(), 20);
    assert_eq!(
        records[19].message.value.as_ref(),
        value("a", 20).as_bytes()
    );
}

#[test]
fn a_damaged_tail_entry_the_takeover_needs_is_named_never_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let a = tmp.path().join("a");
    let part = PartitionDir::open(&a, &tier(&backend, &root), options(Durability::Bucket)).unwrap();
    let tp = part.topic().clone();
    part.log()
        .append_batch(
            &(1..=10)
                .map(|i| Message::new(value("a", i)))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    drop(part);
    // The local log loses what it held (a disk that lost unsynced data): its segment files are
    // emptied, the directory and its binding stay.
    for e in std::fs::read_dir(&a).unwrap() {
        let p = e.unwrap().path();
        if p.extension()
            .is_some_and(|x| x == "log" || x == "index" || x == "timeindex")
        {
            std::fs::write(&p, b"").unwrap();
        }
    }
    // Flip the last byte of the object holding the records: their entry's data.
    let (chain_dir, number, _, _) = tail_entries(backend.as_ref() as &dyn OwnershipStore, &tp)
        .into_iter()
        .find(|(_, _, _, e)| !e.is_empty())
        .unwrap();
    let file = root.join(&chain_dir).join(format!("{number:020}"));
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    // The writer's next open needs those seqs from the tail and cannot read them: named.
    let e = PartitionDir::open(&a, &tier(&backend, &root), options(Durability::Bucket))
        .expect_err("damaged");
    assert!(
        matches!(&e, Error::Tail(TailError::Damaged { seqs, .. }) if *seqs == (1..=10)),
        "{e}"
    );
}

#[test]
fn a_tiering_service_gives_its_partitions_one_tail_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let service =
        krabka_tiering::TieringService::new(krabka_tiering::ServiceConfig::default()).unwrap();
    let config = TailConfig {
        interval: Duration::from_millis(500),
        ..tail()
    };
    let writer = service
        .tail_writer(backend.clone(), config.clone())
        .unwrap();
    let logs: Vec<Arc<krabka_tiering::TieredLog>> = (0..10)
        .map(|i| {
            let mut opts = options(Durability::Bucket);
            opts.config.tail = Some(config.clone());
            opts.tail_writer = Some(
                service
                    .tail_writer(backend.clone(), config.clone())
                    .unwrap(),
            );
            let part = PartitionDir::open(
                &tmp.path().join(format!("p{i}")),
                &tier(&backend, &root),
                opts,
            )
            .unwrap();
            Arc::new(part.into_log())
        })
        .collect();
    for log in &logs {
        service.add(Arc::clone(log)).unwrap();
    }
    assert_eq!(writer.partitions(), 10);
    // Ten appenders at once: one group commit holds them all.
    let before = writer.stats().objects_written;
    std::thread::scope(|s| {
        for log in &logs {
            s.spawn(move || log.append(&Message::new("x")).unwrap());
        }
    });
    let objects = writer.stats().objects_written - before;
    assert!(objects <= 2, "{objects} objects for 10 concurrent appends");
    // Another config for the same service is refused.
    let e = service
        .tail_writer(backend.clone(), tail())
        .expect_err("another config");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    drop(logs);
    service.shutdown(Duration::from_secs(5));
}

#[test]
fn a_bucket_wiped_under_a_live_writer_gets_its_head_again_before_more_is_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let mut opts = options(Durability::Bucket);
    opts.config.tail = Some(TailConfig {
        verify_interval: Duration::from_secs(1),
        ..tail()
    });
    let a = tmp.path().join("a");
    let part = PartitionDir::open(&a, &tier(&backend, &root), opts.clone()).unwrap();
    let tp = part.topic().clone();
    for i in 1..=10_u64 {
        part.log().append(&Message::new(value("w", i))).unwrap();
    }
    // Everything in the bucket is deleted (a wrong lifecycle rule, an operator's mistake).
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    // The writer goes on for a few verify intervals; what it acknowledges is found again.
    let started = Instant::now();
    let mut last = 10_u64;
    while started.elapsed() < Duration::from_millis(2_500) {
        last = part
            .log()
            .append(&Message::new(value("w", last + 1)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(part);
    std::fs::remove_dir_all(&a).unwrap();
    let b = tmp.path().join("b");
    recover_into(&b, &tier(&backend, &root), &tp);
    let part = PartitionDir::open(&b, &tier(&backend, &root), opts).unwrap();
    // The records before the wipe are gone with the bucket (and the disk); every one
    // acknowledged after the head was written again reads back, and no seq is handed out
    // twice.
    let next = part.log().append(&Message::new("next")).unwrap();
    assert!(next > last, "appended at {next}, acknowledged up to {last}");
    // The seqs before the wipe are below the recovered log (lost seqs of the recovery).
    let first = part.log().first_seq().unwrap();
    assert!(
        first > 1 && first <= 11,
        "the recovered log starts at {first}"
    );
    let records = part.log().read_over_holes(first, 100_000).unwrap();
    let got: Vec<u64> = records.records.iter().map(|r| r.seq).collect();
    let tail_end = *got.iter().rev().find(|s| **s <= last).unwrap();
    assert_eq!(tail_end, last, "the last acknowledged record is back");
    for r in records.records.iter().filter(|r| r.seq <= last) {
        assert_eq!(r.message.value.as_ref(), value("w", r.seq).as_bytes());
    }
}

#[test]
fn a_full_object_s_worth_of_appends_is_written_before_the_window_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    let backend = Switchable::new(&root);
    let mut opts = options(Durability::Bucket);
    // A window far longer than the deadline: only the bytes can start it in time.
    opts.config.tail = Some(TailConfig {
        interval: Duration::from_secs(60),
        max_bytes: 4096,
        ack_deadline: Duration::from_secs(20),
        ..tail()
    });
    let part = PartitionDir::open(&tmp.path().join("a"), &tier(&backend, &root), opts).unwrap();
    let batch: Vec<Message> = (0..8).map(|i| Message::new(vec![b'x'; 1000 + i])).collect();
    let seqs = part.log().append_batch(&batch).unwrap();
    assert_eq!(seqs, 1..=8);
    assert!(part.log().tail_acked_seq() >= Some(8));
}
