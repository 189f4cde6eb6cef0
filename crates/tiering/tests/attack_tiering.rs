//! Hostile tests of concurrent copies, the chunk map and the service: damaged remote objects
//! read through cold point reads, re-reads and scans under another chunk size; segments copied
//! with and without a map; a process killed with SIGKILL during `run_once` with four copies in
//! flight; a partition removed during its copy and a service shut down with a zero deadline
//! while the backend stalls. Every read must be exact or an error naming the object; the next
//! round must leave no orphans and every seq readable.
//!
//! The kill test re-executes this binary, running only the ignored child test with
//! `KRABKA_ATTACK_TIERING_DIR` set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod service_util;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::setup::{Setup, finished};
use common::{append, message, options, orphans, tp};
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit::{FaultInjecting, Faults, Method};
use krabka_remote_storage::{RemoteStorageManager, layout};
use krabka_storage::testkit::{Damage, damage};
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::{ServiceConfig, TieredLog, TieringConfig, TieringService};

const DIR_VAR: &str = "KRABKA_ATTACK_TIERING_DIR";

fn config(chunk_bytes: u32, concurrency: usize) -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        chunk_bytes,
        copy_concurrency: concurrency,
        ..TieringConfig::default()
    }
}

/// Checks every way of reading `first..=last` of `log`: cold point reads of every seq, re-reads
/// and paged scans. A read is exact or fails; a failure must name `object` when given (the
/// damaged object), and must be for a seq of the damaged segment `bad`. Returns the problems.
fn check_reads(
    log: &TieredLog,
    first: u64,
    last: u64,
    object: Option<&str>,
    bad: Option<(u64, u64)>,
    what: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let judge = |seq: u64, e: &krabka_tiering::Error, problems: &mut Vec<String>| {
        let text = e.to_string();
        match (object, bad) {
            (Some(obj), Some((lo, hi))) => {
                // The object's key, or (the documented range error of a truncated object) its
                // segment id, which names the object as well.
                let id = obj.split_once('-').map_or(obj, |(_, rest)| {
                    rest.trim_end_matches(".log").trim_end_matches(".index")
                });
                if !text.contains(obj) && !text.contains(id) {
                    problems.push(format!(
                        "{what}: read at {seq} failed without naming {obj}: {text}"
                    ));
                } else if seq > hi || (seq < lo && seq + 200 < lo) {
                    problems.push(format!("{what}: read at {seq} failed outside the damaged segment {lo}..={hi}: {text}"));
                }
            }
            _ => problems.push(format!(
                "{what}: read at {seq} failed with nothing damaged: {text}"
            )),
        }
    };
    for pass in 0..2 {
        for seq in first..=last {
            match log.read(seq, 1) {
                Ok(recs) => {
                    if recs.len() != 1
                        || recs[0].seq != seq
                        || recs[0].message.value != message(seq).value
                    {
                        problems.push(format!(
                            "{what}: point read (pass {pass}) of {seq} served {:?}",
                            recs.first().map(|r| r.seq)
                        ));
                        return problems;
                    }
                }
                Err(e) => judge(seq, &e, &mut problems),
            }
            if problems.len() > 20 {
                return problems;
            }
        }
    }
    for page in [1usize, 7, 64, usize::MAX] {
        let mut seq = first;
        let mut steps = 0;
        while seq <= last && steps < 100_000 {
            steps += 1;
            match log.read(seq, page) {
                Ok(recs) if recs.is_empty() => {
                    problems.push(format!("{what}: empty page of {page} at {seq}"));
                    break;
                }
                Ok(recs) => {
                    for r in &recs {
                        if r.seq != seq || r.message.value != message(seq).value {
                            problems
                                .push(format!("{what}: scan by {page} served {} at {seq}", r.seq));
                            return problems;
                        }
                        seq += 1;
                    }
                }
                Err(e) => {
                    judge(seq, &e, &mut problems);
                    // Skip past the damaged segment, as a consumer told of the damage would.
                    seq = bad.map_or(last + 1, |(_, hi)| (hi + 1).max(seq + 1));
                }
            }
        }
    }
    problems
}

/// A filesystem remote holding several finished segments, copied with `copy_chunk`; the local
/// log keeps only its active segment. Returns the setup and the last seq.
fn tiered(copy_chunk: u32) -> (Setup, u64) {
    let s = Setup::new();
    let log = s.open_with(options(1024), config(copy_chunk, 4)).unwrap();
    append(&log, 420);
    for _ in 0..3 {
        log.run_once().unwrap();
    }
    let last = log.last_seq();
    assert!(finished(s.rlmm.as_ref()).len() >= 5);
    assert!(log.local_first_seq() > 100);
    drop(log);
    (s, last)
}

#[test]
fn damaged_remote_objects_read_exactly_or_fail_naming_the_object() {
    let started = Instant::now();
    let mut problems = Vec::new();
    for (copy_chunk, read_chunk) in [(256u32, 4096u32), (4096, 100), (1 << 20, 256)] {
        for suffix in [".log", ".index"] {
            for d in [
                Damage::FlipFirst,
                Damage::FlipMiddle,
                Damage::FlipLast,
                Damage::TruncateOne,
                Damage::TruncateHalf,
                Damage::Delete,
            ] {
                assert!(started.elapsed() < Duration::from_secs(240));
                let (s, last) = tiered(copy_chunk);
                let segs = finished(s.rlmm.as_ref());
                let victim = &segs[segs.len() / 2];
                let key = layout::all_keys(victim)
                    .unwrap()
                    .into_iter()
                    .find(|k| k.ends_with(suffix) && !k.ends_with(".timeindex"))
                    .unwrap();
                let path = s.remote_root().join(&key);
                damage(&path, d).unwrap();
                let name = Path::new(&key)
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                let log = s.open_with(options(1024), config(read_chunk, 4)).unwrap();
                let what =
                    format!("copy chunk {copy_chunk}, read chunk {read_chunk}, {suffix} {d:?}");
                problems.extend(check_reads(
                    &log,
                    1,
                    last,
                    Some(&name),
                    Some((victim.start_offset(), victim.end_offset())),
                    &what,
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn segments_with_and_without_a_chunk_map_read_under_any_chunk_size() {
    let s = Setup::new();
    // No room for a map: the first segments are copied without one.
    let no_map = TieringConfig {
        custom_metadata_max_bytes: 0,
        ..config(512, 4)
    };
    let log = s.open_with(options(1024), no_map).unwrap();
    append(&log, 200);
    log.run_once().unwrap();
    drop(log);
    // Then with a tiny chunk (a big map), then with the default.
    for (chunk, n) in [(64u32, 200u64), (1 << 20, 150)] {
        let log = s.open_with(options(1024), config(chunk, 4)).unwrap();
        append(&log, n);
        log.run_once().unwrap();
        log.run_once().unwrap();
        drop(log);
    }
    let segs = finished(s.rlmm.as_ref());
    assert!(segs.len() >= 6, "{}", segs.len());
    let mut problems = Vec::new();
    for chunk in [64u32, 100, 333, 4096, 1 << 20] {
        for prefetch in [false, true] {
            let cfg = TieringConfig {
                prefetch,
                ..config(chunk, 4)
            };
            let log = s.open_with(options(1024), cfg).unwrap();
            let last = log.last_seq();
            problems.extend(check_reads(
                &log,
                1,
                last,
                None,
                None,
                &format!("chunk {chunk} prefetch {prefetch}"),
            ));
            // Reads from the end backwards (the map's floor, hints and the cache out of order).
            for seq in (1..=last).rev().step_by(3) {
                match log.read(seq, 5) {
                    Ok(recs) => {
                        for (i, r) in recs.iter().enumerate() {
                            if r.seq != seq + i as u64 || r.message.value != message(r.seq).value {
                                problems.push(format!(
                                    "chunk {chunk}: backward read at {seq} served {}",
                                    r.seq
                                ));
                            }
                        }
                    }
                    Err(e) => problems.push(format!("chunk {chunk}: backward read at {seq}: {e}")),
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn durable(
    dir: &Path,
) -> (
    Arc<FsRemoteStorage>,
    Arc<DurableRemoteLogMetadataManager>,
    TieredLog,
) {
    let fs = Arc::new(FsRemoteStorage::new(dir.join("remote")).unwrap());
    let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap());
    let log = TieredLog::open(
        dir.join("local"),
        options(1024),
        fs.clone(),
        rlmm.clone(),
        tp(),
        config(512, 4),
    )
    .unwrap();
    (fs, rlmm, log)
}

#[test]
#[ignore = "the child process of sigkill_during_concurrent_copies_leaves_no_orphans"]
fn attack_tiering_child_copies_until_killed() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let (_fs, _rlmm, log) = durable(Path::new(&dir));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        // Several segments at once, so four copies run together.
        append(&log, 150);
        log.run_once().unwrap();
    }
}

#[test]
fn sigkill_during_concurrent_copies_leaves_no_orphans() {
    let started = Instant::now();
    let mut problems = Vec::new();
    for round in 0u64..8 {
        assert!(started.elapsed() < Duration::from_secs(240));
        let dir = tempfile::tempdir().unwrap();
        let mut child = common::spawn_child(
            "attack_tiering_child_copies_until_killed",
            DIR_VAR,
            dir.path(),
            Stdio::null(),
        );
        std::thread::sleep(Duration::from_millis(400 + 211 * round));
        child.kill().unwrap(); // SIGKILL
        assert!(!child.wait().unwrap().success(), "round {round}");
        if !dir.path().join("local").exists() || !dir.path().join("metadata").exists() {
            continue;
        }
        let (fs, rlmm, log) = match std::panic::catch_unwind(|| durable(dir.path())) {
            Ok(x) => x,
            Err(_) => {
                problems.push(format!("round {round}: reopen panicked"));
                continue;
            }
        };
        for _ in 0..2 {
            if let Err(e) = log.run_once() {
                problems.push(format!("round {round}: run_once after the kill: {e}"));
            }
        }
        let (stray, unfinished) = orphans(&fs, rlmm.as_ref());
        if !stray.is_empty() || unfinished != 0 {
            problems.push(format!(
                "round {round}: orphans after the next rounds: {stray:?}, {unfinished} unfinished"
            ));
        }
        let first = log.first_seq().unwrap();
        if first != 1 {
            problems.push(format!("round {round}: first seq {first}"));
        }
        let last = log.last_seq();
        problems.extend(check_reads(
            &log,
            first,
            last,
            None,
            None,
            &format!("round {round}"),
        ));
        // Every seq is in exactly one finished segment or the local log.
        let segs = finished(rlmm.as_ref());
        let mut next = 1;
        for m in &segs {
            if m.start_offset() != next {
                problems.push(format!(
                    "round {round}: finished segments not contiguous at {next}: {}..={}",
                    m.start_offset(),
                    m.end_offset()
                ));
            }
            next = m.end_offset() + 1;
        }
        if next < log.local_first_seq() {
            problems.push(format!(
                "round {round}: seqs {next}.. neither remote nor local"
            ));
        }
        eprintln!(
            "round {round}: last {last}, {} finished segments",
            segs.len()
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn service(copy_threads: usize) -> TieringService {
    TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        copy_threads,
        ..ServiceConfig::default()
    })
    .unwrap()
}

/// Reopens partition `i` of `world` on `rsm`, retrying while an abandoned call still holds
/// its log (bounded).
fn reopen(
    world: &service_util::World,
    i: i32,
    rsm: Arc<dyn RemoteStorageManager>,
) -> Result<TieredLog, String> {
    let started = Instant::now();
    loop {
        match TieredLog::open(
            world.dir.path().join(format!("p{i}")),
            service_util::options(400),
            rsm.clone(),
            world.rlmm.clone(),
            service_util::tp(i),
            service_util::config(),
        ) {
            Ok(log) => return Ok(log),
            Err(e) if started.elapsed() > Duration::from_secs(10) => {
                return Err(format!("partition {i}: reopen failed for 10 s: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn check_partition(log: &TieredLog, i: i32) -> Vec<String> {
    let mut problems = Vec::new();
    let last = log.last_seq();
    match log.first_seq() {
        Ok(1) => {}
        other => problems.push(format!("partition {i}: first seq {other:?}")),
    }
    let mut seq = 1;
    for _ in 0..10_000 {
        if seq > last {
            break;
        }
        match log.read(seq, 300) {
            Ok(page) if page.is_empty() => {
                problems.push(format!("partition {i}: empty page at {seq}"));
                break;
            }
            Ok(page) => {
                for r in page {
                    if r.seq != seq
                        || r.message.value.as_ref() != service_util::value(i, seq).as_bytes()
                    {
                        problems.push(format!("partition {i}: wrong record at {seq}"));
                        return problems;
                    }
                    seq += 1;
                }
            }
            Err(e) => {
                problems.push(format!("partition {i}: read at {seq}: {e}"));
                break;
            }
        }
    }
    problems
}

#[test]
fn remove_during_copy_and_zero_deadline_shutdown_then_reopen_loses_nothing() {
    let world = service_util::World::new();
    let stalled = Arc::new(FaultInjecting::new(
        world.fs.clone(),
        Faults::stall(Duration::from_millis(500)).on(&[Method::CopyLogSegmentData]),
    ));
    let rsm: Arc<dyn RemoteStorageManager> = stalled.clone();
    let svc = service(4);
    let n = 6;
    let logs: Vec<_> = (0..n)
        .map(|i| world.partition(i, rsm.clone(), 400, 80))
        .collect();
    let lasts: Vec<u64> = logs.iter().map(|l| l.last_seq()).collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    assert!(service_util::wait_until(Duration::from_secs(5), || stalled
        .calls(Method::CopyLogSegmentData)
        >= 2));
    // Remove two partitions while their copies stall.
    let removed: Vec<_> = (0..2)
        .map(|i| svc.remove(&service_util::tp(i)).unwrap())
        .collect();
    // Then stop everything else at once.
    let started = Instant::now();
    let report = svc.shutdown(Duration::ZERO);
    let took = started.elapsed();
    drop(removed);
    drop(logs);
    let mut problems = Vec::new();
    if took > Duration::from_secs(2) {
        problems.push(format!("zero-deadline shutdown took {took:?}"));
    }
    eprintln!("shutdown {report:?} in {took:?}");
    // Reopen every partition at once (the abandoned calls may still be stalled) and run rounds.
    let mut reopened = Vec::new();
    for i in 0..n {
        match reopen(&world, i, world.fs.clone()) {
            Ok(log) => reopened.push((i, log)),
            Err(e) => problems.push(e),
        }
    }
    for (i, log) in &reopened {
        if log.last_seq() != lasts[*i as usize] {
            problems.push(format!(
                "partition {i}: last seq {} instead of {}",
                log.last_seq(),
                lasts[*i as usize]
            ));
        }
        for _ in 0..3 {
            if let Err(e) = log.run_once() {
                problems.push(format!("partition {i}: run_once: {e}"));
            }
        }
    }
    // Give abandoned calls time to return and clean up, then one more round each.
    std::thread::sleep(Duration::from_millis(1200));
    for (i, log) in &reopened {
        if let Err(e) = log.run_once() {
            problems.push(format!("partition {i}: late run_once: {e}"));
        }
        problems.extend(check_partition(log, *i));
    }
    let (stray, unfinished) = world.orphans(n);
    if !stray.is_empty() || unfinished != 0 {
        problems.push(format!("orphans: {stray:?}, {unfinished} unfinished"));
    }
    for (i, _) in &reopened {
        let segs = {
            use krabka_remote_storage::metadata::RemoteLogMetadataManager;
            let mut v: Vec<_> = world
                .rlmm
                .list_remote_log_segments(&service_util::tp(*i))
                .unwrap();
            v.sort_by_key(|m| m.start_offset());
            v
        };
        let mut next = 1;
        for m in &segs {
            if m.start_offset() != next {
                problems.push(format!("partition {i}: segments overlap or gap at {next}"));
            }
            next = m.end_offset() + 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
