//! The background flusher of `SyncPolicy::Interval`: an idle log's tail is synced within about
//! the interval, a failed background fsync poisons the log, and the thread is stopped and
//! joined promptly by `close()` and on drop (no thread outlives its `Log`).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};
use parking_lot::{Mutex, MutexGuard};

/// The flusher's thread name (as `/proc` shows it).
const FLUSHER: &str = "krabka-flusher";

/// Tests counting flusher threads run one at a time (they share the process).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
}

fn flusher_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == FLUSHER)
        .count()
}

/// Waits (up to a generous deadline, for loaded machines) until `n` flusher threads exist.
fn assert_flusher_threads(n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while flusher_threads() != n {
        assert!(
            Instant::now() < deadline,
            "{} flusher threads, expected {n}",
            flusher_threads()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}")).with_timestamp(seq as i64)
}

fn open(dir: &Path, sync: SyncPolicy) -> Log {
    Log::open(
        dir,
        Options {
            sync,
            ..Options::default()
        },
    )
    .unwrap()
}

#[test]
fn only_interval_starts_a_flusher_thread() {
    let _g = serial();
    for sync in [
        SyncPolicy::Never,
        SyncPolicy::EveryAppend,
        SyncPolicy::EveryN(10),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), sync);
        log.append(&msg(1)).unwrap();
        assert_eq!(flusher_threads(), 0, "{sync:?}");
        log.close().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), SyncPolicy::Interval(Duration::from_millis(10)));
    assert_flusher_threads(1);
    log.close().unwrap();
    assert_flusher_threads(0);
}

#[test]
fn close_stops_and_joins_the_flusher_promptly() {
    let _g = serial();
    // A long interval (the thread sleeps with a far deadline or with none at all) must not
    // delay close.
    for d in [
        Duration::from_secs(3600),
        Duration::MAX,
        Duration::from_millis(1),
        Duration::ZERO,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), SyncPolicy::Interval(d));
        log.append_batch(&[msg(1), msg(2)]).unwrap();
        assert_flusher_threads(1);
        let t = Instant::now();
        log.close().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "close took {:?} with interval {d:?}",
            t.elapsed()
        );
        // Joined: the thread is gone (its task may linger for a moment after the join).
        assert_flusher_threads(0);
        let log = open(dir.path(), SyncPolicy::Never);
        assert_eq!(log.last_seq(), 2);
    }
}

#[test]
fn drop_without_close_does_not_hang_and_leaves_no_thread() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (tx, rx) = mpsc::channel();
    // Dropped on another thread so a hang fails the test instead of blocking it forever.
    std::thread::spawn(move || {
        let log = open(&path, SyncPolicy::Interval(Duration::from_secs(3600)));
        log.append(&msg(1)).unwrap();
        let t = Instant::now();
        drop(log);
        tx.send(t.elapsed()).unwrap();
    });
    let took = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("dropping a Log with a flusher hung");
    assert!(took < Duration::from_secs(5), "drop took {took:?}");
    assert_flusher_threads(0);
    // The directory lock went with the `Log`; the record is in the file (a process crash
    // loses nothing acknowledged).
    let log = open(dir.path(), SyncPolicy::Never);
    assert_eq!(log.last_seq(), 1);
}

#[test]
fn concurrent_appenders_with_the_flusher_keep_every_record() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(
        dir.path(),
        SyncPolicy::Interval(Duration::from_millis(2)),
    ));
    std::thread::scope(|s| {
        for _ in 0..2 {
            let log = Arc::clone(&log);
            s.spawn(move || {
                for i in 0..300 {
                    log.append(&msg(i)).unwrap();
                    if i % 50 == 0 {
                        std::thread::sleep(Duration::from_millis(3));
                    }
                }
            });
        }
    });
    Arc::into_inner(log).unwrap().close().unwrap();
    assert_flusher_threads(0);
    let log = open(dir.path(), SyncPolicy::Never);
    assert_eq!(log.last_seq(), 600);
    assert_eq!(log.read(1, usize::MAX).unwrap().len(), 600);
}

#[cfg(feature = "fault-injection")]
mod synced {
    use krabka_storage::Error;

    use super::*;

    /// Appends until an append returns with its record not yet synced (the on-append check
    /// syncs when the previous fsync is at least an interval old, which a slow machine can
    /// hit); returns the last seq.
    fn append_unsynced(log: &Log) -> u64 {
        for i in 1..=50 {
            let seq = log.append(&msg(i)).unwrap();
            if log.synced_seq() < seq {
                return seq;
            }
        }
        panic!("every append was synced before it returned");
    }

    /// Polls `cond` until it holds or `within` passes.
    fn wait_for(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn an_idle_tail_is_synced_by_the_flusher() {
        let _g = serial();
        let d = Duration::from_millis(100);
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), SyncPolicy::Interval(d));
        for round in 0..3 {
            let last = append_unsynced(&log);
            let fsyncs = log.faults().fsync_count();
            // Idle for more than twice the interval; nothing here syncs, only the flusher can.
            std::thread::sleep(2 * d + d / 2);
            // Generous deadline for a loaded machine; normally it is already synced.
            wait_for(Duration::from_secs(10), "the background sync", || {
                log.synced_seq() >= last
            });
            assert!(log.faults().fsync_count() > fsyncs, "round {round}");
            // Nothing more to sync: the flusher sleeps instead of fsyncing again.
            let settled = log.faults().fsync_count();
            std::thread::sleep(2 * d);
            assert_eq!(log.faults().fsync_count(), settled, "round {round}");
        }
        log.close().unwrap();
    }

    #[test]
    fn a_failed_background_fsync_poisons_the_log() {
        let _g = serial();
        let d = Duration::from_millis(50);
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), SyncPolicy::Interval(d));
        let mut last = append_unsynced(&log);
        let fsyncs = log.faults().fsync_count();
        log.faults().fail_nth_fsync(1);
        // The flusher may have synced between the append and arming the fault.
        for _ in 0..10_000 {
            if log.synced_seq() < last {
                break;
            }
            last = log.append(&msg(last + 1)).unwrap();
        }
        assert!(
            log.synced_seq() < last,
            "every append of 10,000 was synced at once"
        );
        wait_for(Duration::from_secs(10), "the background fsync", || {
            log.faults().fsync_count() > fsyncs
        });
        wait_for(Duration::from_secs(10), "poisoning", || {
            // An empty batch writes nothing but reports poisoning.
            matches!(log.append_batch(&[]), Err(Error::Poisoned { .. }))
        });
        assert!(matches!(log.sync(), Err(Error::Poisoned { .. })));
        // Reads keep working; close does not hang on the stopped thread.
        assert_eq!(log.read(1, usize::MAX).unwrap().len() as u64, last);
        let t = Instant::now();
        let closed = log.close();
        assert!(
            matches!(&closed, Err(Error::Poisoned { dir: d, .. }) if d == dir.path()),
            "{closed:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_flusher_threads(0);
        let log = open(dir.path(), SyncPolicy::Never);
        assert_eq!(log.last_seq(), last);
    }
}
