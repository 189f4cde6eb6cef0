//! `krabka tier` through the built binary: remotes it refuses, how a fenced `--watch` ends, and
//! whole-log retention (`--retention-bytes`, `--retention-ms`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
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

/// Runs `args`, expecting exit code `code` and stderr holding each of `words`; the stderr.
fn fails_with(args: &[&str], code: i32, words: &[&str]) -> String {
    let out = krabka(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "krabka {args:?}: {stderr}");
    for w in words {
        assert!(stderr.contains(w), "krabka {args:?}: no `{w}` in: {stderr}");
    }
    stderr
}

/// Kills the child on every exit path of the test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The names in `/`, sorted.
fn root_entries() -> Vec<OsString> {
    let mut names: Vec<_> = std::fs::read_dir("/")
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    names
}

fn produce(dir: &str, records: &str) {
    ok(&[
        "produce",
        dir,
        "--generate",
        records,
        "--segment-bytes",
        "32KiB",
    ]);
}

/// `--remote fs:///` would put the partition's `_identity`, `_epoch` and `_head` (and its
/// segment directory) in `/`: every command that opens a filesystem remote refuses it before
/// writing anything, as it refuses a regular file.
#[test]
fn the_filesystem_root_or_a_file_as_remote_is_refused_and_nothing_lands_in_it() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let log_s = log.to_str().unwrap();
    produce(log_s, "500");
    let before = root_entries();
    for remote in ["fs:///", "fs:////", "fs:///.."] {
        fails_with(
            &["tier", log_s, "--remote", remote],
            1,
            &["it is the filesystem root (/)"],
        );
        let elsewhere = work.path().join("rebuilt");
        fails_with(
            &["recover", elsewhere.to_str().unwrap(), "--remote", remote],
            1,
            &["filesystem root"],
        );
    }
    assert_eq!(root_entries(), before, "something was created in /");
    assert!(
        !log.join("remote-binding").exists(),
        "the log was bound to the refused remote"
    );
    let file = work.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let remote = format!("fs://{}", file.display());
    fails_with(
        &["tier", log_s, "--remote", &remote],
        1,
        &["it exists and is not a directory (a regular file)"],
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
    // The log is untouched: it tiers to a real directory afterwards.
    let good = format!("fs://{}", work.path().join("remote").display());
    ok(&["tier", log_s, "--remote", &good]);
}

/// `krabka tier LOG --remote REMOTE --watch --interval INTERVAL`, stdout and stderr piped.
fn spawn_watch(log: &str, remote: &str, interval: &str) -> Running {
    Running(
        Command::new(env!("CARGO_BIN_EXE_krabka"))
            .args(["tier", log, "--remote", remote, "--watch"])
            .args(["--interval", interval])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Every line the child writes to stdout, as it comes.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (at most 30 s) for a stdout line starting with `prefix`.
fn wait_for_line(lines: &Receiver<String>, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.starts_with(prefix) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no line starting with `{prefix}` within 30 s");
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits (at most 30 s) for the child to exit; its exit code and stderr.
fn exit_of(child: &mut Running) -> (Option<i32>, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "tier --watch kept running"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .0
        .stderr
        .as_mut()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

/// A log `a` tiered to `remote`, and a fresh `b` recovered from it that takes the partition
/// over (its `tier` claims the next writer epoch), while `watch` (A's `tier --watch`) runs.
fn take_over(work: &Path, remote: &str) {
    let b = work.join("b").join("orders");
    ok(&["recover", b.to_str().unwrap(), "--remote", remote]);
    ok(&["tier", b.to_str().unwrap(), "--remote", remote]);
}

/// A takeover while the watch sleeps between rounds, then SIGTERM before its next round: the
/// watch has not seen the takeover in a round, yet it must not end as if all were well. It
/// checks its epoch once more before claiming success, and exits 1 naming the fence.
#[test]
fn a_watch_taken_over_while_it_sleeps_exits_1_on_sigterm() {
    let work = tempfile::tempdir().unwrap();
    let a = work.path().join("a").join("orders");
    let a_s = a.to_str().unwrap();
    let remote = format!("fs://{}", work.path().join("remote").display());
    produce(a_s, "3000");
    ok(&["tier", a_s, "--remote", &remote]);
    let mut watch = spawn_watch(a_s, &remote, "1h");
    let lines = lines_of(&mut watch.0);
    // The first round ran (its `--watch` line), and the watch sleeps for an hour.
    wait_for_line(&lines, "copy lag ");
    take_over(work.path(), &remote);
    sigterm(&watch.0);
    let (code, stderr) = exit_of(&mut watch);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
    assert!(
        stderr.contains("is fenced") && stderr.contains("epoch 2"),
        "{stderr}"
    );
}

/// A takeover while the watch runs rounds every 20 ms, and SIGTERM right after it: whether the
/// watch finds the fence at a round's start, inside a round (a failure of the round), or at its
/// stop, it exits 1.
#[test]
fn a_watch_fenced_in_any_round_exits_1_however_it_stops() {
    let work = tempfile::tempdir().unwrap();
    let a = work.path().join("a").join("orders");
    let a_s = a.to_str().unwrap();
    let remote = format!("fs://{}", work.path().join("remote").display());
    produce(a_s, "3000");
    ok(&["tier", a_s, "--remote", &remote]);
    let mut watch = spawn_watch(a_s, &remote, "20ms");
    let lines = lines_of(&mut watch.0);
    wait_for_line(&lines, "copy lag ");
    take_over(work.path(), &remote);
    // The watch may already have exited at its next round: a signal to it then finds no
    // process (or a zombie), which is fine.
    let _ = Command::new("kill")
        .args(["-TERM", &watch.0.id().to_string()])
        .status();
    let (code, stderr) = exit_of(&mut watch);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is fenced"), "{stderr}");
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

/// Local `.log` files of the log in `dir`, as the seqs they start at.
fn local_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    bases
}

/// The seq `read` says the log starts at, from `seq 1 is out of range: the log holds F..=L`.
fn first_seq_said(log: &str, remote: &str) -> u64 {
    let stderr = fails_with(
        &["read", log, "--remote", remote, "--from", "1", "--max", "1"],
        1,
        &["seq 1 is out of range: the log holds "],
    );
    let (_, rest) = stderr.split_once("the log holds ").unwrap();
    rest.split("..=").next().unwrap().parse().unwrap()
}

/// `--retention-bytes`: the oldest remote segments go once the whole log is over the size, from
/// both tiers; `read` says where the log starts now, and reads from there whole.
#[test]
fn retention_bytes_deletes_the_oldest_segments_from_both_tiers_and_read_says_where_the_log_starts()
{
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let log_s = log.to_str().unwrap();
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    produce(log_s, "5000");
    ok(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
    ]);
    let all = count_objects(&remote_dir, ".log");
    assert!(all > 20, "{all} segments copied");
    let out = ok(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
        "--retention-bytes",
        "200KiB",
    ]);
    assert!(
        out.contains("remote segment(s) by retention"),
        "the round does not say it deleted remote segments: {out}"
    );
    let kept = count_objects(&remote_dir, ".log");
    assert!(kept > 0 && kept < all / 2, "{kept} of {all} segments kept");
    // Each remote segment is whole and at most 32 KiB: 200 KiB holds at most 7 of them.
    assert!(kept <= 7, "{kept} segments kept for 200 KiB");
    let first = first_seq_said(log_s, &remote);
    assert!(first > 1 && first < 5000, "{first}");
    // Nothing below the new start is left in either tier.
    assert!(
        local_bases(&log).iter().all(|&b| b >= first),
        "{:?} below {first}",
        local_bases(&log)
    );
    assert!(
        std::fs::read_dir(&remote_dir)
            .unwrap()
            .flatten()
            .filter_map(|d| std::fs::read_dir(d.path()).ok())
            .flat_map(|entries| entries.flatten())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".log")?
                    .split('-')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .all(|base| base >= first),
        "a remote segment below {first} is left"
    );
    // From the new start every record reads, in order.
    let read = ok(&[
        "read",
        log_s,
        "--remote",
        &remote,
        "--from",
        &first.to_string(),
    ]);
    assert_eq!(read.lines().count() as u64, 5000 - first + 1);
}

/// `--retention-ms`: the generated records carry 2024 timestamps, so a retention of a day
/// deletes every copied segment; the log then starts at its local, not yet copied, records.
#[test]
fn retention_ms_deletes_segments_older_than_the_age_from_both_tiers() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let log_s = log.to_str().unwrap();
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    produce(log_s, "2000");
    // 100 years keeps the 2024 records; a day expires every copied one.
    ok(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--retention-ms",
        "100years",
    ]);
    assert!(count_objects(&remote_dir, ".log") > 5);
    ok(&["tier", log_s, "--remote", &remote, "--retention-ms", "1day"]);
    assert_eq!(count_objects(&remote_dir, ".log"), 0);
    let first = first_seq_said(log_s, &remote);
    assert_eq!(
        local_bases(&log),
        vec![first],
        "only the active segment is left"
    );
}

/// Retention values that mean nothing are usage errors naming the rule, before anything runs.
#[test]
fn absurd_retention_values_are_refused_with_a_clear_error() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let log_s = log.to_str().unwrap();
    produce(log_s, "100");
    let remote = format!("fs://{}", work.path().join("remote").display());
    for (flag, value, says) in [
        (
            "--retention-bytes",
            "0",
            "would delete every segment of the remote tier",
        ),
        ("--retention-bytes", "-1", "is not a size"),
        ("--retention-bytes", "lots", "is not a size"),
        ("--retention-bytes", "99999999999EiB", "too large"),
        ("--retention-ms", "0s", "from 1ms to 100 years"),
        ("--retention-ms", "101years", "from 1ms to 100 years"),
        ("--retention-ms", "soon", "is not a duration"),
    ] {
        // `--flag=VALUE`, so that `-1` is taken as the value.
        let arg = format!("{flag}={value}");
        fails_with(
            &["tier", log_s, "--remote", &remote, &arg],
            2,
            &[flag, says],
        );
    }
    assert!(
        !work.path().join("remote").exists(),
        "a refused command touched the remote"
    );
    let help = ok(&["tier", "--help"]);
    for flag in ["--retention-bytes <SIZE>", "--retention-ms <DURATION>"] {
        assert!(help.contains(flag), "no {flag} in tier --help:\n{help}");
    }
}
