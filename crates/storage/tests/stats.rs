//! `Log::stats`: the counters move exactly with appends, fsyncs, rolls and retention, and the
//! recovery figures reflect what open found.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use krabka_protocol::Message;
use krabka_storage::{Log, LogStats, Options, SyncPolicy};

fn opts(sync: SyncPolicy, max_bytes: u64) -> Options {
    Options {
        max_bytes,
        sync,
        ..Options::default()
    }
}

fn msg(i: u64) -> Message {
    Message::new(format!("value-{i}")).with_timestamp(i as i64)
}

/// Bytes of the `.log` files of the segments still in the log.
fn log_bytes(log: &Log) -> u64 {
    log.segments().iter().map(|s| s.size).sum()
}

#[test]
fn every_append_counts_appends_fsyncs_rolls_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SyncPolicy::EveryAppend, 0)).unwrap();
    assert_eq!(log.stats(), LogStats::default());

    log.append(&msg(1)).unwrap();
    let s = log.stats();
    assert_eq!((s.appends, s.append_batches, s.fsyncs), (1, 1, 1));
    assert_eq!(s.appended_bytes, log_bytes(&log));
    assert!(s.fsync_time > Duration::ZERO);

    log.append_batch(&[msg(2), msg(3), msg(4)]).unwrap();
    log.append_batch(&[]).unwrap();
    let s = log.stats();
    assert_eq!((s.appends, s.append_batches, s.fsyncs), (4, 2, 2));
    assert_eq!(s.appended_bytes, log_bytes(&log));

    // A roll syncs the `.log` and both index files of the segment it closes.
    log.roll().unwrap();
    let s = log.stats();
    assert_eq!((s.rolls, s.fsyncs), (1, 5));
    // Everything is synced already: no fsync.
    log.sync().unwrap();
    assert_eq!(log.stats().fsyncs, 5);

    log.append(&msg(5)).unwrap();
    let bytes = log_bytes(&log);
    assert!(log.delete_before(5).unwrap() > 0);
    let s = log.stats();
    assert_eq!((s.appends, s.append_batches, s.fsyncs), (5, 3, 6));
    assert_eq!(s.appended_bytes, bytes);
    assert_eq!((s.rolls, s.segments_deleted), (1, 1));
    let fsync_time = s.fsync_time;
    assert!(fsync_time > Duration::ZERO);
    assert!(!s.recovery_clean_shutdown);
    log.close().unwrap();
}

/// The append counters are bumped without a locked read-modify-write (under the append
/// lock): appenders racing on every policy, through every append call, lose no count.
#[test]
fn concurrent_appenders_lose_no_count() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 300;
    for sync in [SyncPolicy::Never, SyncPolicy::EveryN(7)] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), opts(sync, 64 << 10)).unwrap();
        let raw = {
            let mut b = Vec::new();
            let msgs = [msg(0), msg(1)];
            krabka_protocol::batch::encode_messages(
                &mut b,
                0,
                &msgs,
                krabka_storage::Compression::None,
                usize::MAX,
            )
            .unwrap();
            b
        };
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (log, raw) = (&log, &raw);
                s.spawn(move || {
                    for i in 0..ROUNDS {
                        match (t + i) % 3 {
                            0 => drop(log.append(&msg(i)).unwrap()),
                            1 => drop(log.append_batch(&[msg(i), msg(i), msg(i)]).unwrap()),
                            _ => drop(log.append_raw_batch(raw).unwrap()),
                        }
                    }
                });
            }
        });
        let s = log.stats();
        assert_eq!(s.append_batches, THREADS * ROUNDS, "{sync:?}");
        assert_eq!(s.appends, log.last_seq(), "{sync:?}");
        assert_eq!(s.appended_bytes, log_bytes(&log), "{sync:?}");
        assert_eq!(log.last_seq(), THREADS * ROUNDS * 2, "{sync:?}");
    }
}

#[test]
fn never_counts_the_fsyncs_of_sync_and_rolls_of_full_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SyncPolicy::Never, 200)).unwrap();
    for i in 1..=20 {
        log.append(&msg(i)).unwrap();
    }
    let s = log.stats();
    let segments = log.segments().len() as u64;
    assert!(segments > 2, "{segments}");
    assert_eq!((s.appends, s.append_batches), (20, 20));
    assert_eq!(s.appended_bytes, log_bytes(&log));
    assert_eq!((s.rolls, s.fsyncs), (segments - 1, 0));
    assert_eq!(s.fsync_time, Duration::ZERO);

    // The closed segments' three files each, and the active `.log`.
    log.sync().unwrap();
    assert_eq!(log.stats().fsyncs, 3 * (segments - 1) + 1);
    log.sync().unwrap();
    assert_eq!(log.stats().fsyncs, 3 * (segments - 1) + 1);

    assert!(log.trim_over_bytes(0).unwrap() > 0);
    assert_eq!(log.stats().segments_deleted, segments - 1);
}

#[test]
fn recovery_figures_come_from_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SyncPolicy::Never, 0)).unwrap();
    for i in 1..=10 {
        log.append(&msg(i)).unwrap();
    }
    let written = log_bytes(&log);
    let path = log.segments()[0].log_path.clone();
    drop(log);
    // Torn bytes right after the last batch (its true end: a preallocated file goes on with
    // zeros, which the cut takes too).
    let garbage = [0xAB_u8; 37];
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&garbage, written)
        .unwrap();
    let file_len = std::fs::metadata(&path).unwrap().len();

    // A crash: the active segment is scanned and the torn tail cut.
    let log = Log::open(dir.path(), opts(SyncPolicy::Never, 0)).unwrap();
    let s = log.stats();
    // The scan counts the valid batches it read.
    assert_eq!(s.recovery_scanned_bytes, written);
    assert_eq!(s.recovery_truncated_bytes, file_len - written);
    assert!(file_len - written >= garbage.len() as u64);
    assert!(!s.recovery_clean_shutdown);
    // Recovery is not counted as appends or fsyncs of this handle.
    assert_eq!(
        (s.appends, s.appended_bytes, s.fsyncs, s.rolls),
        (0, 0, 0, 0)
    );
    log.close().unwrap();

    // After a clean close: no scan, nothing cut.
    let log = Log::open(dir.path(), opts(SyncPolicy::Never, 0)).unwrap();
    let s = log.stats();
    assert!(s.recovery_clean_shutdown);
    assert_eq!(
        (s.recovery_scanned_bytes, s.recovery_truncated_bytes),
        (0, 0)
    );
}
