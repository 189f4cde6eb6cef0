//! A second actor on the bucket: `recover --clean-orphans` run again and again (a
//! disaster-recovery drill in another directory) while the live log's `tier --watch` copies to
//! the same remote and keeps nothing locally. Cleanup must never take a copy in flight for an
//! orphan: every acknowledged record reads back afterwards, exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .output()
        .expect("run krabka")
}

fn ok(args: &[&str]) -> String {
    let out = krabka(args);
    assert!(
        out.status.success(),
        "krabka {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Objects under the remote's partition directories whose name ends with `suffix`.
fn count_objects(remote: &Path, suffix: &str) -> usize {
    let Ok(dirs) = std::fs::read_dir(remote) else {
        return 0;
    };
    dirs.flatten()
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
        .count()
}

#[test]
fn clean_orphans_in_a_loop_beside_a_live_tier_watch_loses_nothing() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("live").join("orders");
    let drill = work.path().join("drill").join("orders");
    let remote_dir = work.path().join("remote");
    let (log_s, drill_s) = (log.to_str().unwrap(), drill.to_str().unwrap());
    let remote = format!("fs://{}", remote_dir.display());
    // 40,000 acknowledged records in about 125 segments of 32 KiB.
    ok(&[
        "produce",
        log_s,
        "--generate",
        "40000",
        "--segment-bytes",
        "32KiB",
    ]);
    let acknowledged = ok(&["read", log_s]);
    assert_eq!(acknowledged.lines().count(), 40_000);
    let closed = std::fs::read_dir(&log)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .count()
        - 1;
    assert!(closed > 100, "{closed} closed segments");

    // The live writer: copies every closed segment and deletes it locally once remote.
    let mut tier = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args([
            "tier",
            log_s,
            "--remote",
            &remote,
            "--watch",
            "--interval",
            "20ms",
            "--local-retention-bytes",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The drill beside it, bounded in count and time, until every closed segment is remote.
    let started = Instant::now();
    while count_objects(&remote_dir, ".manifest") == 0
        && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut runs = 0;
    let mut saw_in_progress = 0;
    let mut deleted = 0;
    while runs < 200 && started.elapsed() < Duration::from_secs(60) {
        if let Some(status) = tier.try_wait().unwrap() {
            panic!("tier --watch exited early: {status}");
        }
        let _ = std::fs::remove_dir_all(work.path().join("drill"));
        let out = krabka(&["recover", drill_s, "--remote", &remote, "--clean-orphans"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "recover: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        saw_in_progress += usize::from(stdout.contains("a copy in progress"));
        deleted += stdout.matches("deleted").count();
        runs += 1;
        // Every closed segment is remote (the active one stays local).
        if count_objects(&remote_dir, ".manifest") >= closed && saw_in_progress > 0 && runs >= 20 {
            break;
        }
    }
    tier.kill().unwrap();
    let killed = tier.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&killed.stderr);
    assert!(
        !stderr.contains("error"),
        "tier --watch reported an error: {stderr}"
    );
    // How often a drill met a copy in flight (timing-dependent, so reported, not asserted:
    // the old cleanup lost a segment in this test on this machine).
    eprintln!("{runs} drills, {saw_in_progress} saw a copy in progress, {deleted} deleted");
    // One more round copies whatever the kill cut short, then every acknowledged record reads
    // back across both tiers.
    ok(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
    ]);
    let read = ok(&["read", log_s, "--remote", &remote]);
    assert!(
        read == acknowledged,
        "read back {} lines of {}; {runs} drills, {deleted} deletions reported",
        read.lines().count(),
        acknowledged.lines().count()
    );
}

#[test]
fn an_empty_directory_over_a_remote_that_holds_its_partition_is_refused_and_names_recover() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("a").join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let log_s = log.to_str().unwrap();
    ok(&[
        "produce",
        log_s,
        "--generate",
        "3000",
        "--segment-bytes",
        "32KiB",
    ]);
    ok(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
    ]);
    // The disk is lost; an operator points a fresh directory of the same name at the remote.
    let lost = work.path().join("b").join("orders");
    std::fs::create_dir_all(&lost).unwrap();
    let lost_s = lost.to_str().unwrap();
    for args in [
        &["read", lost_s, "--remote", &remote][..],
        &["tier", lost_s, "--remote", &remote],
    ] {
        let out = krabka(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed records");
        assert!(stderr.contains("holds no log"), "{stderr}");
        assert!(
            stderr.contains(&format!("krabka recover {lost_s} --remote {remote}")),
            "{stderr}"
        );
        // No new identity was written for it.
        assert!(!lost.join("topic").exists());
    }
    // recover then finds the partition by the name, and every remote record reads back (the
    // original's active segment was never tiered: it lives only on the lost disk).
    ok(&["recover", lost_s, "--remote", &remote]);
    let read = ok(&["read", lost_s, "--remote", &remote]);
    let original = ok(&["read", log_s, "--remote", &remote]);
    assert!(
        read.lines().count() > 2000,
        "{} records",
        read.lines().count()
    );
    assert!(original.starts_with(&read));
}
