//! Failure handling, driven by the `fault-injection` feature: a failed fsync or write poisons the
//! log, acknowledged records stay readable, and reopening recovers; a failed roll never loses
//! acknowledged records.
#![cfg(feature = "fault-injection")]
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use krabka_protocol::Message;
use krabka_storage::{Error, Log, Options, SyncPolicy};

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}"))
        .with_key(format!("k{seq}"))
        .with_timestamp(seq as i64)
}

fn open(dir: &Path, max_bytes: u64, sync: SyncPolicy) -> Log {
    Log::open(
        dir,
        Options {
            max_bytes,
            sync,
            ..Options::default()
        },
    )
    .unwrap()
}

/// Every seq in `acked` is present and intact, and the log's seqs are contiguous from 1.
fn check_acked(log: &Log, acked: &[u64]) {
    let records = log.read(1, usize::MAX).unwrap();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1);
        assert_eq!(r.message, msg(r.seq));
    }
    let last = records.last().map_or(0, |r| r.seq);
    for &seq in acked {
        assert!(
            seq <= last,
            "acknowledged seq {seq} lost (log ends at {last})"
        );
    }
}

fn assert_poisoned<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::Poisoned { .. })), "{r:?}");
}

#[test]
fn poisoned_error_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1 << 20, SyncPolicy::EveryAppend);
    log.faults().fail_nth_fsync(1);
    let first = log.append(&msg(1));
    assert!(
        matches!(&first, Err(Error::Io { path, .. })
            if *path == dir.path().join("00000000000000000001.log")),
        "{first:?}"
    );
    match log.append(&msg(2)) {
        Err(e @ Error::Poisoned { .. }) => {
            let Error::Poisoned { dir: d, .. } = &e else {
                unreachable!()
            };
            assert_eq!(d, dir.path());
            assert!(e.to_string().contains(&dir.path().display().to_string()));
        }
        other => panic!("{other:?}"),
    }
}

/// The path of the file whose fsync fails when the `n`th fsync of `sync()` is made to fail, on
/// a `Never` log with one rolled segment (1..=3) and an active one (4).
fn nth_fsync_of_sync_under_never(n: u64) -> std::path::PathBuf {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1 << 20, SyncPolicy::Never);
    for s in 1..=3 {
        log.append(&msg(s)).unwrap();
    }
    log.roll().unwrap();
    log.append(&msg(4)).unwrap();
    log.faults().fail_nth_fsync(n);
    match log.sync() {
        Err(Error::Io { path, .. }) => path.strip_prefix(dir.path()).unwrap().to_path_buf(),
        other => panic!("fsync {n}: {other:?}"),
    }
}

#[test]
fn sync_under_never_fsyncs_rolled_segments_and_their_indexes_then_the_active_one() {
    let names: Vec<String> = (1..=4)
        .map(|n| nth_fsync_of_sync_under_never(n).display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "00000000000000000001.log",
            "00000000000000000001.index",
            "00000000000000000001.timeindex",
            "00000000000000000004.log",
        ]
    );
}

#[test]
fn sync_under_never_does_not_fsync_again_what_it_synced() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1 << 20, SyncPolicy::Never);
    log.append(&msg(1)).unwrap();
    log.roll().unwrap();
    log.append(&msg(2)).unwrap();
    log.roll().unwrap();
    log.sync().unwrap();
    // Nothing appended or rolled since: no fsync at all.
    log.faults().fail_nth_fsync(1);
    log.sync().unwrap();
    log.faults().clear();
    log.append(&msg(3)).unwrap();
    log.close().unwrap();
}

#[test]
fn close_syncs_under_never() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1 << 20, SyncPolicy::Never);
    log.append(&msg(1)).unwrap();
    log.roll().unwrap();
    log.append(&msg(2)).unwrap();
    log.faults().fail_nth_fsync(1);
    assert!(matches!(log.close(), Err(Error::Io { .. })));
    // A failed close still releases the directory.
    let log = open(dir.path(), 1 << 20, SyncPolicy::Never);
    check_acked(&log, &[1, 2]);
}

#[test]
fn failed_fsync_poisons_appends_and_syncs_but_not_reads_and_reopen_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1 << 20, SyncPolicy::EveryAppend);
    let acked: Vec<u64> = (1..=10).map(|s| log.append(&msg(s)).unwrap()).collect();
    log.faults().fail_nth_fsync(1);
    assert!(matches!(log.append(&msg(11)), Err(Error::Io { .. })));
    // The injected fault fired once; every later append/sync is refused by the poison alone.
    assert_poisoned(log.append(&msg(12)));
    assert_poisoned(log.append_batch(&[msg(12), msg(13)]));
    assert_poisoned(log.sync());
    assert_poisoned(log.roll());
    check_acked(&log, &acked);
    assert_eq!(log.read(3, 2).unwrap()[1].message, msg(4));
    assert_poisoned(log.close());

    let log = open(dir.path(), 1 << 20, SyncPolicy::EveryAppend);
    check_acked(&log, &acked);
    let next = log.last_seq() + 1;
    assert_eq!(log.append(&msg(next)).unwrap(), next);
    log.sync().unwrap();
    check_acked(&log, &[next]);
}

#[test]
fn failed_shared_fsync_fails_every_waiting_appender_and_poisons() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(dir.path(), 1 << 20, SyncPolicy::EveryAppend));
    log.faults().fail_nth_fsync(15);
    // Per thread: the result of each append and the message it carried.
    let results: Vec<Vec<(Result<u64, String>, Message)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let log = Arc::clone(&log);
                s.spawn(move || {
                    (0..25u64)
                        .map(|i| {
                            let m = msg(t * 1000 + i);
                            (log.append(&m).map_err(|e| e.to_string()), m)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut acked = Vec::new();
    for per_thread in &results {
        if let Some(i) = per_thread.iter().position(|(r, _)| r.is_err()) {
            // After its first error a thread only ever sees the poison.
            for (r, _) in &per_thread[i + 1..] {
                assert!(r.as_ref().is_err_and(|e| e.contains("poisoned")), "{r:?}");
            }
        }
        acked.extend(
            per_thread
                .iter()
                .filter_map(|(r, m)| r.as_ref().ok().map(|&seq| (seq, m.clone()))),
        );
    }
    assert!(
        results.iter().flatten().any(|(r, _)| r
            .as_ref()
            .is_err_and(|e| e.ends_with(": injected Fsync fault"))),
        "no append saw the injected fsync fault"
    );
    let check = |log: &Log| {
        for (seq, m) in &acked {
            assert_eq!(&log.read(*seq, 1).unwrap()[0].message, m);
        }
    };
    check(&log);
    drop(log);
    let log = open(dir.path(), 1 << 20, SyncPolicy::EveryAppend);
    check(&log);
}

#[test]
fn failed_write_poisons_and_its_torn_half_never_surfaces() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 1 << 20, SyncPolicy::Never);
    let acked: Vec<u64> = (1..=5).map(|s| log.append(&msg(s)).unwrap()).collect();
    log.faults().fail_nth_write(1);
    assert!(matches!(
        log.append_batch(&[msg(6), msg(7), msg(8)]),
        Err(Error::Io { .. })
    ));
    assert_poisoned(log.append(&msg(6)));
    assert_eq!(log.last_seq(), 5);
    check_acked(&log, &acked);
    drop(log);

    let log = open(dir.path(), 1 << 20, SyncPolicy::Never);
    assert_eq!(log.last_seq(), 5);
    check_acked(&log, &acked);
    assert_eq!(log.append(&msg(6)).unwrap(), 6);
}

/// A roll (with `EveryAppend`) does: fsync of the segment (1), of its `.index` (2) and
/// `.timeindex` (3), creation of the new segment file, fsync of the directory (4). Fail each in
/// turn: the append reports the error, acknowledged records stay readable, and the log either
/// keeps working or is poisoned; reopening finds every acknowledged record.
#[test]
fn failed_roll_never_loses_acknowledged_records() {
    let batch = {
        let mut buf = Vec::new();
        krabka_storage::segment::encode_batch_of_one(1, &msg(1), &mut buf).unwrap()
    } as u64;
    // Four records per segment.
    let max_bytes = batch * 4 + 2;
    for (fault, n) in [
        ("create", 1),
        ("fsync", 1),
        ("fsync", 2),
        ("fsync", 3),
        ("fsync", 4),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), max_bytes, SyncPolicy::EveryAppend);
        let mut acked: Vec<u64> = (1..=4).map(|s| log.append(&msg(s)).unwrap()).collect();
        assert_eq!(log.segments().len(), 1);
        match fault {
            "create" => log.faults().fail_nth_create(n),
            _ => log.faults().fail_nth_fsync(n),
        }
        let failed = log.append(&msg(5));
        assert!(
            matches!(failed, Err(Error::Io { .. })),
            "{fault} {n}: {failed:?}"
        );
        check_acked(&log, &acked);
        assert_eq!(log.last_seq(), 4, "{fault} {n}");
        // Erroring or poisoned, never pretending: a later append either works or is refused.
        match log.append(&msg(5)) {
            Ok(seq) => {
                assert_eq!(seq, 5, "{fault} {n}");
                acked.push(seq);
            }
            Err(Error::Poisoned { .. }) => {}
            Err(e) => panic!("{fault} {n}: {e}"),
        }
        check_acked(&log, &acked);
        drop(log);

        let log = open(dir.path(), max_bytes, SyncPolicy::EveryAppend);
        check_acked(&log, &acked);
        let next = log.last_seq() + 1;
        assert_eq!(log.append(&msg(next)).unwrap(), next, "{fault} {n}");
        check_acked(&log, &[next]);
    }
}

#[test]
fn concurrent_every_append_appenders_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(dir.path(), 1 << 30, SyncPolicy::EveryAppend));
    let before = log.faults().fsync_count();
    let t0 = std::time::Instant::now();
    let (threads, per) = (4u64, 500u64);
    std::thread::scope(|s| {
        for t in 0..threads {
            let log = Arc::clone(&log);
            s.spawn(move || {
                for i in 0..per {
                    let seq = log.append(&msg(t * per + i)).unwrap();
                    // Acknowledged means synced.
                    assert!(log.synced_seq() >= seq);
                }
            });
        }
    });
    let fsyncs = log.faults().fsync_count() - before;
    let records = threads * per;
    eprintln!("{records} records, {fsyncs} fsyncs in {:?}", t0.elapsed());
    // Every append needs its record synced, but appenders that wait while another's fsync runs
    // share the next one: strictly fewer fsyncs than records (typically about one per three
    // or four records on a disk whose fsync takes longer than an append).
    assert!(fsyncs < records, "{fsyncs} fsyncs for {records} records");
    assert_eq!(log.last_seq(), records);
}

/// The same with values large enough to be written from where they lie (a vectored write of
/// several batches, beside small ones copied into the buffer): the torn half never surfaces.
#[test]
fn failed_vectored_write_poisons_and_its_torn_half_never_surfaces() {
    let big = |seq: u64, len: usize| {
        Message::new(vec![seq as u8; len])
            .with_key(format!("k{seq}"))
            .with_timestamp(seq as i64)
    };
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 64 << 20, SyncPolicy::Never);
    let first: Vec<Message> = (1..=40).map(|s| big(s, 40_000 + s as usize)).collect();
    assert_eq!(log.append_batch(&first).unwrap(), 1..=40);
    log.faults().fail_nth_write(1);
    // 3 MB of values: three batches in one write, small values between the large ones.
    let second: Vec<Message> = (41..=140)
        .map(|s| big(s, if s % 3 == 0 { 10 } else { 45_000 }))
        .collect();
    assert!(matches!(log.append_batch(&second), Err(Error::Io { .. })));
    assert_poisoned(log.append(&msg(141)));
    let check = |log: &Log| {
        assert_eq!(log.last_seq(), 40);
        let back: Vec<Message> = log
            .read(1, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|r| r.message)
            .collect();
        assert_eq!(back, first);
    };
    check(&log);
    drop(log);
    let log = open(dir.path(), 64 << 20, SyncPolicy::Never);
    check(&log);
    assert_eq!(log.append_batch(&second).unwrap(), 41..=140);
    let back = log.read(41, usize::MAX).unwrap();
    assert_eq!(back.len(), 100);
    assert!(back.iter().zip(&second).all(|(r, m)| &r.message == m));
}
