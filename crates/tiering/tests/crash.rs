//! SIGKILL a process that appends and tiers, at random points, and check what survives.
//!
//! The parent re-executes this test binary, running only the ignored child test with
//! `KRABKA_TIERING_CRASH_DIR` set; the child appends, prints each acknowledged seq, and runs
//! tiering rounds with the durable metadata manager until it is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use krabka_remote_fs::FsRemoteStorage;
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::{TieredLog, TieringConfig};

const DIR_VAR: &str = "KRABKA_TIERING_CRASH_DIR";

fn open(
    dir: &Path,
) -> (
    Arc<FsRemoteStorage>,
    Arc<DurableRemoteLogMetadataManager>,
    TieredLog,
) {
    let fs = Arc::new(FsRemoteStorage::new(dir.join("remote")).unwrap());
    let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap());
    let config = TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        ..TieringConfig::default()
    };
    let log = TieredLog::open(
        dir.join("local"),
        options(2048),
        fs.clone(),
        rlmm.clone(),
        tp(),
        config,
    )
    .unwrap();
    (fs, rlmm, log)
}

#[test]
#[ignore = "the child process of sigkill_at_random_points_keeps_acknowledged_records"]
fn crash_child_appends_and_tiers_until_killed() {
    let dir = std::env::var(DIR_VAR).expect("run by the crash test only");
    let (_fs, _rlmm, log) = open(Path::new(&dir));
    let mut out = std::io::stdout().lock();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        append(&log, 25);
        // Records are in the OS page cache once append returns: a process kill keeps them.
        writeln!(out, "ack {}", log.last_seq()).unwrap();
        out.flush().unwrap();
        log.run_once().unwrap();
    }
}

#[test]
fn sigkill_at_random_points_keeps_acknowledged_records() {
    let dir = tempfile::tempdir().unwrap();
    let acked = Arc::new(AtomicU64::new(0));
    // Seeded: a failing schedule of kill times is the same on every run.
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    for round in 0..12 {
        let mut child = common::spawn_child(
            "crash_child_appends_and_tiers_until_killed",
            DIR_VAR,
            dir.path(),
            Stdio::piped(),
        );
        let stdout = child.stdout.take().unwrap();
        let seen = acked.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ack ").and_then(|n| n.parse().ok()) {
                    seen.fetch_max(n, Ordering::AcqRel);
                }
            }
        });
        std::thread::sleep(Duration::from_millis(rng.u64(150..600)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child ended on its own: {status}");
        reader.join().unwrap();
        // After every kill: reopen, one clean round, and check everything acknowledged.
        check_after_crash(dir.path(), acked.load(Ordering::Acquire), round);
    }
    let acked = acked.load(Ordering::Acquire);
    assert!(
        acked > 100,
        "the children acknowledged only {acked} records"
    );
    let (_fs, _rlmm, log) = open(dir.path());
    assert!(log.local_first_seq() > 1, "nothing was tiered");
}

fn check_after_crash(dir: &Path, acked: u64, round: u32) {
    let (fs, rlmm, log) = open(dir);
    assert!(
        log.last_seq() >= acked,
        "round {round}: acknowledged {acked}, found {}",
        log.last_seq()
    );
    let report = log.run_once().unwrap();
    assert!(
        report.failures.is_empty(),
        "round {round}: {:?}",
        report.failures
    );
    let (stray, unfinished) = orphans(&fs, rlmm.as_ref());
    assert_eq!(
        unfinished, 0,
        "round {round}: attempts stuck after one clean round"
    );
    assert!(
        stray.is_empty(),
        "round {round}: orphaned remote files: {stray:?}"
    );
    assert_eq!(log.first_seq().unwrap(), 1);
    assert_eq!(read_all_and_check(&log, 1), log.last_seq(), "round {round}");
    log.close().unwrap();
}
