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

/// `krabka tier LOG --remote REMOTE --watch --interval 20ms EXTRA...` in the background, its
/// stderr piped (the caller kills it or waits for it).
fn spawn_watch(log: &str, remote: &str, extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args([
            "tier",
            log,
            "--remote",
            remote,
            "--watch",
            "--interval",
            "20ms",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
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
    let mut tier = spawn_watch(log_s, &remote, &["--local-retention-bytes", "0"]);
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
    // recover then finds the partition by the name, and every remote record reads back. The
    // original's active segment was never tiered (it lives only on the lost disk): its seqs,
    // which the partition head says were used, are a named hole, never handed out again, and
    // the read says so (exit 1).
    ok(&["recover", lost_s, "--remote", &remote]);
    let out = krabka(&["read", lost_s, "--remote", &remote]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("are lost: no tier holds them") && stderr.contains("..=3000"),
        "{stderr}"
    );
    let read = String::from_utf8_lossy(&out.stdout).into_owned();
    let original = ok(&["read", log_s, "--remote", &remote]);
    assert!(
        read.lines().count() > 2000,
        "{} records",
        read.lines().count()
    );
    assert!(original.starts_with(&read));
}

/// Waits (bounded) until `remote_dir` holds at least `n` segment manifests.
fn wait_for_manifests(remote_dir: &Path, n: usize, limit: Duration) {
    let started = Instant::now();
    while count_objects(remote_dir, ".manifest") < n && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        count_objects(remote_dir, ".manifest") >= n,
        "fewer than {n} manifests after {limit:?}"
    );
}

fn fails_with(args: &[&str], words: &[&str]) -> String {
    let out = krabka(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "krabka {args:?}: {stderr}");
    for w in words {
        assert!(stderr.contains(w), "`{w}` not in: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn a_second_writer_on_one_partition_is_refused_before_its_first_copy() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("a").join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let log_s = log.to_str().unwrap();
    ok(&[
        "produce",
        log_s,
        "--generate",
        "6000",
        "--segment-bytes",
        "32KiB",
    ]);
    let mut live = spawn_watch(log_s, &remote, &[]);
    wait_for_manifests(&remote_dir, 1, Duration::from_secs(30));
    // A second process on the same directory: the directory's lock refuses it.
    fails_with(&["tier", log_s, "--remote", &remote], &["in use"]);
    // A copy of the directory (cp -a while the writer runs; its lock file is not a lock).
    let copy = work.path().join("b").join("orders");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    let status = Command::new("cp")
        .args(["-a", log_s, copy.to_str().unwrap()])
        .status();
    if status.is_err() || !status.unwrap().success() {
        copy_tree(&log, &copy);
    }
    let manifests = count_objects(&remote_dir, ".manifest");
    let copy_s = copy.to_str().unwrap();
    fails_with(
        &["tier", copy_s, "--remote", &remote],
        &["is a copy of the directory bound to writer epoch 1"],
    );
    // The live writer was not disturbed and nothing was copied for the copy.
    assert!(
        live.try_wait().unwrap().is_none(),
        "the live writer stopped"
    );
    live.kill().unwrap();
    let out = live.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("error"), "{stderr}");
    assert!(count_objects(&remote_dir, ".manifest") >= manifests);
    let read = ok(&["read", log_s, "--remote", &remote]);
    assert_eq!(read.lines().count(), 6000);
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            let _ = std::fs::copy(e.path(), target);
        }
    }
}

/// `krabka read DIR --remote R`: the lines printed and the lost seq ranges it named (a read
/// over a hole exits 1 and names each one; any other failure fails the test).
fn read_with_holes(dir: &str, remote: &str) -> (Vec<String>, Vec<String>) {
    let out = krabka(&["read", dir, "--remote", remote]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lost: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.split("seqs ").nth(1))
        .filter_map(|rest| rest.split(" are lost").next())
        .filter(|r| r.contains("..=") && !r.contains(' '))
        .map(str::to_owned)
        .collect();
    if lost.is_empty() {
        assert!(out.status.success(), "read {dir}: {stderr}");
    } else {
        assert_eq!(out.status.code(), Some(1), "read {dir}: {stderr}");
        assert!(stderr.contains("the log is incomplete"), "{stderr}");
    }
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    (lines, lost)
}

#[test]
fn failover_a_killed_writer_is_replaced_from_the_bucket_and_fenced_when_it_returns() {
    let work = tempfile::tempdir().unwrap();
    let a = work.path().join("a").join("orders");
    let b = work.path().join("b").join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    ok(&[
        "produce",
        a_s,
        "--generate",
        "20000",
        "--segment-bytes",
        "32KiB",
    ]);
    let acknowledged = ok(&["read", a_s]);
    // A tiers and is killed (SIGKILL) mid-way.
    let mut tier = spawn_watch(a_s, &remote, &["--local-retention-bytes", "0"]);
    // About 52 records a segment: at least 1,500 records remote before the kill.
    wait_for_manifests(&remote_dir, 30, Duration::from_secs(30));
    tier.kill().unwrap();
    tier.wait().unwrap();
    // B takes over from the bucket alone: recover (fences nobody), then its first tier claims
    // writer epoch 2.
    let recovered = ok(&["recover", b_s, "--remote", &remote]);
    assert!(recovered.contains("recovered"), "{recovered}");
    // A writer killed with two copies in flight may leave the younger one complete above the
    // unfinished one: the records of the unfinished one are lost with A's disk (a hole the
    // read names, exit 1); every record read is A's acknowledged record with that seq.
    let (from_bucket, lost) = read_with_holes(b_s, &remote);
    assert!(from_bucket.len() > 1000);
    let by_seq: std::collections::BTreeMap<&str, &str> = acknowledged
        .lines()
        .map(|l| (l.split('\t').next().unwrap(), l))
        .collect();
    for line in &from_bucket {
        assert_eq!(
            Some(&line.as_str()),
            by_seq.get(line.split('\t').next().unwrap())
        );
    }
    ok(&["tier", b_s, "--remote", &remote]);
    ok(&[
        "produce",
        b_s,
        "--generate",
        "3000",
        "--segment-bytes",
        "32KiB",
    ]);
    ok(&[
        "tier",
        b_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
    ]);
    // A comes back (the zombie): refused before it copies or deletes anything.
    let manifests = count_objects(&remote_dir, ".manifest");
    let a_files = std::fs::read_dir(&a).unwrap().count();
    let a_local = ok(&["read", a_s]);
    fails_with(
        &[
            "tier",
            a_s,
            "--remote",
            &remote,
            "--local-retention-bytes",
            "0",
        ],
        &["is fenced", "epoch 1", "epoch 2"],
    );
    assert_eq!(count_objects(&remote_dir, ".manifest"), manifests);
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), a_files);
    // Its local records stay where they are, readable.
    assert_eq!(ok(&["read", a_s]), a_local);
    // A cleanup beside B deletes nothing of B's, and B reads A's records then its own.
    ok(&[
        "recover",
        work.path().join("drill").join("orders").to_str().unwrap(),
        "--remote",
        &remote,
        "--clean-orphans",
    ]);
    let (b_read, b_lost) = read_with_holes(b_s, &remote);
    assert_eq!(b_lost, lost, "the same holes, nothing more");
    assert_eq!(b_read.len(), from_bucket.len() + 3000);
    assert_eq!(&b_read[..from_bucket.len()], &from_bucket[..]);
}

#[test]
fn a_live_writer_is_fenced_when_a_recovered_log_takes_over_and_a_busy_one_is_not_taken_over() {
    let work = tempfile::tempdir().unwrap();
    let a = work.path().join("a").join("orders");
    let b = work.path().join("b").join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    ok(&[
        "produce",
        a_s,
        "--generate",
        "5000",
        "--segment-bytes",
        "32KiB",
    ]);
    ok(&["tier", a_s, "--remote", &remote]);
    // B recovers (a drill): A is not disturbed.
    ok(&["recover", b_s, "--remote", &remote]);
    // A writes on and copies past B's recovered end: B may no longer take over.
    ok(&[
        "produce",
        a_s,
        "--generate",
        "3000",
        "--segment-bytes",
        "32KiB",
    ]);
    ok(&["tier", a_s, "--remote", &remote]);
    fails_with(
        &["tier", b_s, "--remote", &remote],
        &["another writer is still copying"],
    );
    // A fresh recovery (after the operator stopped A) takes over; A's running watch is
    // fenced at its next round and exits.
    let mut live = spawn_watch(a_s, &remote, &[]);
    std::fs::remove_dir_all(work.path().join("b")).unwrap();
    ok(&["recover", b_s, "--remote", &remote]);
    ok(&["tier", b_s, "--remote", &remote]);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = live.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the fenced writer kept running"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(live.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is fenced"), "{stderr}");
}

#[test]
fn a_bound_log_given_another_remote_is_refused_naming_both_and_nothing_is_created() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("a").join("orders");
    let log_s = log.to_str().unwrap();
    let remote = format!("fs://{}", work.path().join("remote").display());
    ok(&[
        "produce",
        log_s,
        "--generate",
        "3000",
        "--segment-bytes",
        "32KiB",
    ]);
    ok(&["tier", log_s, "--remote", &remote]);
    // A typo: a directory that does not exist. Refused, and not created.
    let typo_dir = work.path().join("remtoe");
    let typo = format!("fs://{}", typo_dir.display());
    for args in [
        &["tier", log_s, "--remote", &typo][..],
        &["read", log_s, "--remote", &typo],
    ] {
        let stderr = fails_with(args, &["is bound to the remote fs://", "remtoe"]);
        assert!(stderr.contains(&work.path().join("remote").display().to_string()));
    }
    assert!(!typo_dir.exists(), "the mistyped remote was created");
    // Another remote that exists: refused too; the log's remote is untouched.
    let other = work.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    fails_with(
        &[
            "tier",
            log_s,
            "--remote",
            &format!("fs://{}", other.display()),
        ],
        &["is bound to the remote"],
    );
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 0);
    assert_eq!(
        ok(&["read", log_s, "--remote", &remote]).lines().count(),
        3000
    );
}
