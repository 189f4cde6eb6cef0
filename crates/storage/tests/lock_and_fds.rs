//! The single-writer lock on a log directory, and the bound on open segment files.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use krabka_protocol::Message;
use krabka_storage::{Error, LOCK_FILE_NAME, Log, Options, SyncPolicy};

const CHILD_ENV: &str = "KRABKA_LOCK_CHILD_DIR";

fn opts() -> Options {
    Options {
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}")).with_timestamp(seq as i64)
}

#[test]
fn second_open_in_the_same_process_is_locked_until_the_first_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let first = Log::open(dir.path(), opts()).unwrap();
    first.append(&msg(1)).unwrap();
    match Log::open(dir.path(), opts()) {
        Err(Error::Locked { dir: d }) => assert_eq!(d, dir.path()),
        other => panic!("{other:?}"),
    }
    // The failed open altered nothing.
    assert_eq!(first.append(&msg(2)).unwrap(), 2);
    first.close().unwrap();
    let second = Log::open(dir.path(), opts()).unwrap();
    assert_eq!(second.last_seq(), 2);
    drop(second);
    // Dropping releases the lock too.
    Log::open(dir.path(), opts()).unwrap();
}

#[test]
fn lock_file_is_not_a_stray_file() {
    let dir = tempfile::tempdir().unwrap();
    Log::open(dir.path(), opts()).unwrap().close().unwrap();
    assert!(dir.path().join(LOCK_FILE_NAME).exists());
    std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
    let log = Log::open(dir.path(), opts()).unwrap();
    assert_eq!(
        log.recovery_report().ignored_files,
        vec![dir.path().join("notes.txt")]
    );
    assert!(log.recovery_report().is_clean());
}

/// The child: runs only when re-executed by the parent with the env var set. Holds the log
/// open until its stdin closes.
#[test]
fn lock_child_holds_the_log_open() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let log = Log::open(&dir, opts()).unwrap();
    log.append(&msg(1)).unwrap();
    println!("OPEN");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(log);
}

#[test]
fn open_is_locked_while_another_process_holds_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_child_holds_the_log_open",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let opened = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("OPEN"));
    assert!(opened, "the child did not open the log");
    let r = Log::open(dir.path(), opts());
    let locked = matches!(&r, Err(Error::Locked { .. }));
    // Kill the child before asserting, so a failure does not leave it waiting.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(locked, "{r:?}");
    // The lock died with the process.
    let log = Log::open(dir.path(), opts()).unwrap();
    assert_eq!(log.last_seq(), 1);
}

/// Open file descriptors of this process whose target is inside `dir`.
fn open_fds_in(dir: &Path) -> usize {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(&dir))
        .count()
}

#[test]
fn closed_segments_hold_at_most_max_open_segments_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        max_open_segments: 4,
        ..opts()
    };
    let log = Log::open(dir.path(), o.clone()).unwrap();
    for s in 1..=50 {
        log.append(&msg(s)).unwrap();
        log.roll().unwrap();
    }
    log.append(&msg(51)).unwrap();
    assert_eq!(log.segments().len(), 51);
    // Lock file + active segment + at most 4 closed segments.
    let limit = 2 + 4;
    assert!(
        open_fds_in(dir.path()) <= limit,
        "{}",
        open_fds_in(dir.path())
    );
    // Reads across every segment, in an order that defeats the cache.
    for round in 0..3u64 {
        for i in 0..51u64 {
            let seq = (i * 7 + round) % 51 + 1;
            let r = log.read(seq, 2).unwrap();
            assert_eq!(r[0].seq, seq);
            assert_eq!(r[0].message, msg(seq));
        }
        assert!(
            open_fds_in(dir.path()) <= limit,
            "{}",
            open_fds_in(dir.path())
        );
    }
    let all = log.read(1, usize::MAX).unwrap();
    assert_eq!(all.len(), 51);
    assert!(open_fds_in(dir.path()) <= limit);
    log.close().unwrap();
    // Reopening does not keep closed segments open either.
    let log = Log::open(dir.path(), o).unwrap();
    assert!(open_fds_in(dir.path()) <= 2, "{}", open_fds_in(dir.path()));
    assert_eq!(log.read(1, usize::MAX).unwrap().len(), 51);
    // Retention closes the files of dropped segments.
    log.delete_before(51).unwrap();
    assert!(open_fds_in(dir.path()) <= 2, "{}", open_fds_in(dir.path()));
}

#[test]
fn max_open_segments_of_zero_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        max_open_segments: 0,
        ..opts()
    };
    match Log::open(dir.path(), o) {
        Err(e @ Error::InvalidOptions { .. }) => {
            assert!(e.to_string().contains("max_open_segments"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}
