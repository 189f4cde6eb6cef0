//! Group commit under `SyncPolicy::EveryAppend`: how many records each fsync covers when
//! several threads append at once, counted with `Log::stats` (a count, not a time).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Barrier;

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

const THREADS: u64 = 4;

/// `threads` threads each append `per` records of `value_len` bytes to a fresh synced log;
/// returns the log's fsyncs and appends. Every acknowledged append is checked synced.
fn append_concurrently(value_len: usize, per: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: SyncPolicy::EveryAppend,
        preallocate: true,
        ..Options::default()
    };
    let log = Log::open(dir.path(), opts).unwrap();
    let value = vec![7u8; value_len];
    let start = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let (log, value, start) = (&log, &value, &start);
            s.spawn(move || {
                start.wait();
                for _ in 0..per {
                    let seq = log.append(&Message::new(value.clone())).unwrap();
                    // Acknowledged means synced.
                    assert!(log.synced_seq() >= seq);
                }
            });
        }
    });
    let stats = log.stats();
    assert_eq!(stats.appends, THREADS * per);
    assert_eq!(log.last_seq(), THREADS * per);
    (stats.fsyncs, stats.appends)
}

#[test]
fn four_appending_threads_share_each_fsync_among_more_than_three_records() {
    // Large values: an fsync takes long enough (tens of microseconds or more) for the
    // appenders it released to come back within the leader's gathering window. Without the
    // gathering the threads split into two groups taking turns: about 3 records per fsync.
    let per = 150;
    let (fsyncs, records) = append_concurrently(16 << 10, per);
    let per_fsync = records as f64 / fsyncs as f64;
    eprintln!("{records} records, {fsyncs} fsyncs: {per_fsync:.2} records per fsync");
    assert!(
        per_fsync >= 3.4,
        "{fsyncs} fsyncs for {records} records ({per_fsync:.2} per fsync)"
    );
}

#[test]
fn a_lone_appender_makes_one_fsync_per_append() {
    // Nobody to gather: every append is its own group, and no fsync is skipped or repeated.
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: SyncPolicy::EveryAppend,
        ..Options::default()
    };
    let log = Log::open(dir.path(), opts).unwrap();
    for i in 0..50u64 {
        let seq = log.append(&Message::new(format!("v{i}"))).unwrap();
        assert!(log.synced_seq() >= seq);
    }
    assert_eq!(log.stats().fsyncs, 50);
}
