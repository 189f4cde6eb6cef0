//! One writer with retention running, three replica processes reading under load (and, in
//! one process, four threads under background refreshes): every record any of them read is
//! the one the writer acknowledged at that seq.

use std::fs::File;
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use krabka_tiering::replica::{ReadReplica, ReplicaGroup, ReplicaGroupConfig};
use krabka_tiering::{Error, TieringConfig};

use super::backend::Backend;
use super::child;
use super::util::{
    append, assert_values, config, open_replica, open_writer, read_replica, replica_config, round,
    tp, value,
};

/// How long a child may take past the deadline before it is killed (and the test fails).
const CHILD_GRACE: Duration = Duration::from_secs(30);

/// The scenario on `b`: the writer appends and runs rounds for `load`; small segments and a
/// small `retention_bytes` make retention delete segments under the replicas' reads.
pub fn writer_with_retention_and_three_replica_processes(b: &Backend, load: Duration) {
    let root = tempfile::tempdir().unwrap();
    let config = TieringConfig {
        retention_bytes: Some(16 * 1024),
        copy_concurrency: 2,
        ..config()
    };
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config).unwrap();
    append(&w, "v", 100);
    let report = w.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let first_at_start = w.first_seq().unwrap();

    let started = Instant::now();
    let until = started + load;
    let outs: Vec<PathBuf> = (0..3)
        .map(|i| root.path().join(format!("replica-{i}.txt")))
        .collect();
    let spawn = |i: usize| {
        let err = File::create(outs[i].with_extension("err")).unwrap();
        // The second reads without a cache.
        let interval = Duration::from_millis(50 + 50 * i as u64);
        let mut c = child::spawn(b, &outs[i], until, interval, i == 1);
        // Its stderr goes to a file (a full pipe would stall it).
        let mut from = c.stderr.take().unwrap();
        let mut to = err;
        std::thread::spawn(move || std::io::copy(&mut from, &mut to));
        c
    };
    let mut children: Vec<Child> = vec![spawn(0), spawn(1)];
    let mut third = None;
    let mut rounds = 0u64;
    let mut deleted = 0u64;
    // The writer: appends and rounds (copies, retention, the head) until the children stop.
    while Instant::now() < until + Duration::from_millis(200) {
        // The third replica starts in the middle of the load, with copies in flight.
        if third.is_none() && started.elapsed() >= load / 3 {
            third = Some(spawn(2));
        }
        append(&w, "v", 15);
        let report = w.run_once().unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        deleted += report.remote_segments_deleted;
        rounds += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    children.extend(third);
    let acked = w.last_seq();

    for (i, c) in children.iter_mut().enumerate() {
        let limit = Instant::now() + CHILD_GRACE;
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > limit {
                c.kill().unwrap();
                panic!("replica process {i} did not stop");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = std::fs::read_to_string(outs[i].with_extension("err")).unwrap_or_default();
        assert!(status.success(), "replica process {i}: {status}\n{err}");
    }
    let first_at_end = w.first_seq().unwrap();
    assert!(
        deleted > 0 && first_at_end > first_at_start,
        "retention deleted nothing ({rounds} rounds)"
    );
    let mut read_since_deleted = false;
    for (i, out) in outs.iter().enumerate() {
        let name = format!("{} replica process {i}", b.name);
        let rep = child::check(&name, out, acked, &|s| value("v", s));
        assert!(rep.records > 0, "{name} read nothing: {rep:?}");
        assert!(rep.done.is_some(), "{name} did not finish: {rep:?}");
        assert!(
            rep.final_last > rep.first_last,
            "{name} saw no progress: {rep:?}"
        );
        read_since_deleted |= rep.lowest.is_some_and(|l| l < first_at_end);
        eprintln!("{name}: {rep:?}");
    }
    assert!(
        read_since_deleted,
        "no replica read a record retention deleted later"
    );
    // A replica opened now serves exactly the writer's remote range.
    let r = open_replica(b, b.store.clone(), Duration::from_secs(3600));
    assert_values(
        &read_replica(&r, 500),
        first_at_end..=w.local_first_seq() - 1,
        |s| value("v", s),
    );
    eprintln!(
        "{}: {rounds} rounds, {deleted} segments deleted, first seq {first_at_start} -> \
         {first_at_end}, last {acked}",
        b.name
    );
}

/// In one process: four threads reading one replica while a [`ReplicaGroup`] refreshes it in
/// the background and the writer's retention deletes segments under them (views replaced
/// while reads use the previous one).
pub fn readers_and_background_refreshes_in_one_process(b: &Backend, load: Duration) {
    let root = tempfile::tempdir().unwrap();
    let config = TieringConfig {
        retention_bytes: Some(12 * 1024),
        ..config()
    };
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config).unwrap();
    append(&w, "v", 100);
    round(&w);
    let mut group_config = ReplicaGroupConfig::default();
    group_config.cache_bytes = 64 * 1024;
    let group = ReplicaGroup::new(group_config).unwrap();
    let r = group
        .open(
            b.rsm.clone(),
            b.store.clone(),
            tp(),
            TieringConfig::default(),
            replica_config(Duration::from_millis(20)),
        )
        .unwrap();
    group.start();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || read_until(&r, &stop, 17 + 13 * i))
        })
        .collect();
    // For `load`, and until retention deleted a few segments (bounded).
    let started = Instant::now();
    let mut deleted = 0;
    while (started.elapsed() < load || deleted < 3) && started.elapsed() < load * 5 {
        append(&w, "v", 15);
        deleted += round(&w).remote_segments_deleted;
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Release);
    let mut total = 0;
    for t in readers {
        let (records, highest) = t.join().unwrap();
        assert!(records > 0 && highest > 88, "a reader made no progress");
        total += records;
    }
    group.stop();
    assert!(deleted > 0, "retention deleted nothing");
    let s = r.stats();
    assert!(s.refreshes > 10 && s.refresh_failures == 0, "{s:?}");
    // The view may be up to an interval old: refreshed, it serves the writer's remote range.
    r.refresh().unwrap();
    assert_values(
        &read_replica(&r, 100),
        w.first_seq().unwrap()..=w.local_first_seq() - 1,
        |s| value("v", s),
    );
    eprintln!(
        "{}: {total} records read by 4 threads, {deleted} segments deleted, {s:?}",
        b.name
    );
}

/// Reads `r` from its first seq to its end, again and again until `stop`, checking every
/// record; the records read and the highest seq.
fn read_until(r: &ReadReplica, stop: &AtomicBool, page: usize) -> (u64, u64) {
    let mut cursor = r.first_seq().unwrap();
    let (mut records, mut highest) = (0, 0);
    // Bounded by the writer's loop, and by this.
    let limit = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::Acquire) && Instant::now() < limit {
        if cursor > r.last_seq().unwrap() {
            cursor = r.first_seq().unwrap();
            // Leave the writer some CPU.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        match r.read(cursor, page) {
            Ok(got) => {
                assert!(!got.is_empty(), "an empty page at {cursor}");
                for rec in got {
                    assert_eq!(rec.seq, cursor, "records out of order");
                    assert_eq!(
                        rec.message.value,
                        value("v", cursor).as_bytes(),
                        "seq {cursor}"
                    );
                    cursor += 1;
                    records += 1;
                    highest = highest.max(rec.seq);
                }
            }
            Err(Error::Read(krabka_tiering::ReadError::OutOfRange { seq, first, .. }))
                if seq < first =>
            {
                cursor = first
            }
            Err(e) => panic!("reading {cursor}: {e:?}"),
        }
    }
    (records, highest)
}
