//! Every hint names the right cause: a log held by a running `krabka` names that process (its
//! pid and command), never advising to move a healthy directory aside; a full disk or a file
//! size limit is named in every refusal after it, not only "an earlier append failed".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka")
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Kills the child on every exit path of the test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every line the child writes to stdout, as it comes.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line of `lines` containing `needle`, waiting at most `limit`.
fn wait_for_line(lines: &mpsc::Receiver<String>, needle: &str, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let line = lines.recv_timeout(left).ok()?;
        if line.contains(needle) {
            return Some(line);
        }
    }
    None
}

#[test]
fn a_log_held_by_a_running_tier_is_in_use_by_its_pid_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let out = krabka(&["produce", s(&log), "--generate", "500"]);
    assert!(out.status.success(), "{}", show(&out));
    let child = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["tier", s(&log), "--remote", &remote, "--watch"])
        .args(["--interval", "100ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut tier = Running(child);
    let lines = lines_of(&mut tier.0);
    assert!(
        wait_for_line(&lines, "tiering ", Duration::from_secs(20)).is_some(),
        "tier --watch did not start"
    );
    let pid = tier.0.id();
    let in_use = format!(
        "{} is in use by another krabka process, pid {pid} (`krabka tier {}",
        log.display(),
        log.display()
    );
    let commands: [&[&str]; 5] = [
        &["recover", s(&log), "--remote", &remote],
        &["tier", s(&log), "--remote", &remote],
        &["produce", s(&log), "--generate", "1"],
        &["repair", s(&log)],
        &["read", s(&log), "--remote", &remote],
    ];
    for args in commands {
        let out = krabka(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", show(&out));
        assert!(stderr.contains(&in_use), "{args:?}: {}", show(&out));
        assert!(
            stderr.contains(&format!("{}/.lock", log.display())),
            "{args:?}: {}",
            show(&out)
        );
        assert!(!stderr.contains("aside"), "{args:?}: {}", show(&out));
    }
    assert!(tier.0.try_wait().unwrap().is_none(), "tier exited");
}

/// `recover` into a directory whose remote metadata another process holds (here `flock`,
/// standing for any holder) names it, instead of calling the directory damaged.
#[test]
fn recover_beside_a_process_holding_the_remote_metadata_names_it_and_calls_nothing_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    for args in [
        &[
            "produce",
            s(&log),
            "--generate",
            "500",
            "--segment-bytes",
            "8KiB",
        ][..],
        &[
            "tier",
            s(&log),
            "--remote",
            &remote,
            "--local-retention-bytes",
            "0",
        ],
    ] {
        let out = krabka(args);
        assert!(out.status.success(), "{args:?}: {}", show(&out));
    }
    std::fs::remove_dir_all(&log).unwrap();
    let out = krabka(&["recover", s(&log), "--remote", &remote]);
    assert!(out.status.success(), "{}", show(&out));
    let lock = log.join("remote-metadata").join("rlmm.lock");
    assert!(lock.is_file(), "{}", lock.display());
    let holder = Command::new("flock")
        .args([s(&lock), "sleep", "60"])
        .spawn()
        .unwrap();
    let holder = Running(holder);
    // `flock` takes the lock right after it starts: wait for it, at most 10 s.
    let start = Instant::now();
    let out = loop {
        let out = krabka(&["recover", s(&log), "--remote", &remote]);
        if !out.status.success() || start.elapsed() > Duration::from_secs(10) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stderr.contains(&format!(
            "{} is in use by another krabka process, pid {} (`flock ",
            log.display(),
            holder.0.id()
        )) && stderr.contains(&lock.display().to_string()),
        "{}",
        show(&out)
    );
    assert!(!stderr.contains("damaged"), "{}", show(&out));
    assert!(!stderr.contains("aside;"), "{}", show(&out));
}

/// The remote-metadata log's appends fail once it passes the file size limit (EFBIG, as a
/// full disk fails them with ENOSPC): the first failure poisons it, and every later round's
/// refusal still names that cause.
#[test]
fn after_a_failed_metadata_append_every_later_round_names_the_first_failure() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    // Small segments: each is far below the limit, but their events fill the metadata log.
    let out = krabka(&[
        "produce",
        s(&log),
        "--generate",
        "2000",
        "--segment-bytes",
        "4KiB",
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let child = Command::new("sh")
        .args([
            "-c",
            "trap '' XFSZ; ulimit -S -f 32 && exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_krabka"),
        ])
        .args(["tier", s(&log), "--remote", &remote, "--watch"])
        .args(["--interval", "100ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut tier = Running(child);
    let lines = lines_of(&mut tier.0);
    let first = wait_for_line(&lines, "File too large", Duration::from_secs(30))
        .expect("no round failed at the file size limit");
    let later = wait_for_line(
        &lines,
        "an earlier append or compaction failed",
        Duration::from_secs(30),
    )
    .unwrap_or_else(|| panic!("no later refusal after: {first}"));
    assert!(
        later.contains("an earlier append or compaction failed (")
            && later.contains("File too large (os error 27)"),
        "{later}"
    );
}

/// Mounts a 1 MiB tmpfs at `at` (root only); unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", s(at)])
            .output()
            .ok()?;
        out.status.success().then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A full disk is named as one: the append that hit it, the refusals of the poisoned log after
/// it, and the next run. Needs a small filesystem to fill: a tmpfs, which only root may mount;
/// elsewhere the test says so and checks nothing (the library test
/// `krabka-storage/tests/poison_cause.rs` covers the cause with injected faults).
#[test]
fn a_full_disk_is_named_by_produce_and_by_every_refusal_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&dir.path().join("small")) else {
        eprintln!("skipped: cannot mount a tmpfs here (not root)");
        return;
    };
    let log = fs.0.join("log");
    let out = krabka(&[
        "produce",
        s(&log),
        "--generate",
        "30000",
        "--segment-bytes",
        "64KiB",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(stderr.contains("No space left on device"), "{}", show(&out));
    assert!(stderr.contains("the filesystem is full"), "{}", show(&out));
    // The poisoned log's refusal (the sync after the failed append) names the cause too.
    if stderr.contains("is poisoned") {
        let poisoned = stderr.split("is poisoned").nth(1).unwrap_or_default();
        assert!(
            poisoned.contains("No space left on device"),
            "{}",
            show(&out)
        );
    }
    let again = krabka(&["produce", s(&log), "--generate", "2000"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{}", show(&again));
    assert!(
        stderr.contains("No space left on device"),
        "{}",
        show(&again)
    );
    assert!(
        !stderr.contains("check that the path exists"),
        "{}",
        show(&again)
    );
    drop(fs);
}
