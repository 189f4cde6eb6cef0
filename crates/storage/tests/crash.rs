//! Real-process crash tests: a child appends with `SyncPolicy::EveryAppend` (one child also
//! closes and reopens the log all the time) and prints every acknowledged seq; the parent
//! SIGKILLs it at random moments, reopens the log and checks that every acknowledged record is
//! present, intact and contiguous.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

const CHILD_ENV: &str = "KRABKA_CRASH_CHILD_DIR";
const CLOSING_CHILD_ENV: &str = "KRABKA_CRASH_CLOSING_CHILD_DIR";

fn message_for(seq: u64) -> Message {
    let len = (seq * 37 % 700) as usize;
    Message::new(vec![(seq % 251) as u8; len])
        .with_key(seq.to_le_bytes().to_vec())
        .with_timestamp(seq as i64)
}

fn options() -> Options {
    Options {
        max_bytes: 16 << 10,
        sync: SyncPolicy::EveryAppend,
        index_interval_bytes: 512,
        ..Options::default()
    }
}

/// The child: runs only when re-executed by the parent with the env var set.
#[test]
fn crash_child_appends_until_killed() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let log = Log::open(&dir, options()).unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0..100_000u64 {
        let next = log.last_seq() + 1;
        if i % 5 == 4 {
            let batch: Vec<Message> = (next..next + 3).map(message_for).collect();
            let r = log.append_batch(&batch).unwrap();
            writeln!(out, "ACK {}", r.end()).unwrap();
        } else {
            let seq = log.append(&message_for(next)).unwrap();
            assert_eq!(seq, next);
            writeln!(out, "ACK {seq}").unwrap();
        }
        out.flush().unwrap();
    }
}

/// The child of the close/reopen test: appends a few records, closes cleanly, reopens (after a
/// clean close: the trusted open, index entries loaded at first use), reads back what it
/// appended, and so on, until killed; it may die inside `close` or right after a trusted open.
#[test]
fn crash_child_closes_and_reopens_until_killed() {
    let Ok(dir) = std::env::var(CLOSING_CHILD_ENV) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    for round in 0..100_000u64 {
        let log = Log::open(&dir, options()).unwrap();
        if log.recovery_report().clean_shutdown {
            writeln!(out, "TRUSTED").unwrap();
        }
        let first = log.last_seq() + 1;
        for _ in 0..(round % 7 + 1) {
            let next = log.last_seq() + 1;
            let seq = log.append(&message_for(next)).unwrap();
            writeln!(out, "ACK {seq}").unwrap();
        }
        out.flush().unwrap();
        let back = log.read(first.saturating_sub(5).max(1), 12).unwrap();
        assert!(back.iter().all(|r| r.message == message_for(r.seq)));
        log.close().unwrap();
    }
}

#[test]
fn sigkill_around_clean_closes_and_trusted_opens_keeps_every_acknowledged_record() {
    run_rounds(
        CLOSING_CHILD_ENV,
        "crash_child_closes_and_reopens_until_killed",
    );
}

#[test]
fn sigkill_at_random_moments_keeps_every_acknowledged_record() {
    run_rounds(CHILD_ENV, "crash_child_appends_until_killed");
}

/// Runs `child` (a test of this binary, told the directory by `env`) and SIGKILLs it at random
/// moments, then checks the log after each kill.
fn run_rounds(env: &str, child_name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut acked_total = 0u64;
    let mut rounds = 0;
    let trusted = std::sync::Arc::new(AtomicU64::new(0));
    while rounds < 25 && started.elapsed() < Duration::from_secs(30) {
        rounds += 1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut child = Command::new(&exe)
            .args(["--exact", child_name, "--nocapture", "--test-threads=1"])
            .env(env, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let seen = std::sync::Arc::clone(&trusted);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line == "TRUSTED" {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(n) = line.strip_prefix("ACK ") {
                    let _ = tx.send(n.trim().parse::<u64>().unwrap());
                }
            }
        });
        // Wait for the child to start acknowledging, then kill it at a random moment.
        let _ = rx.recv_timeout(Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5 + rng % 60));
        child.kill().unwrap(); // SIGKILL on unix
        child.wait().unwrap();
        reader.join().unwrap();
        let acked = rx.try_iter().max().unwrap_or(0).max(acked_total);
        acked_total = acked;

        let log = Log::open(dir.path(), options()).unwrap();
        assert!(
            log.last_seq() >= acked,
            "round {rounds}: acknowledged {acked}, recovered {}",
            log.last_seq()
        );
        let recs = log.read(1, usize::MAX).unwrap();
        assert_eq!(recs.len() as u64, log.last_seq());
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.seq, i as u64 + 1);
            assert_eq!(r.message, message_for(r.seq), "seq {}", r.seq);
        }
        log.close().unwrap();
    }
    assert!(rounds >= 20, "only {rounds} rounds in the time budget");
    assert!(acked_total > 0);
    // The closing child reports its trusted opens: that path was under the kills too.
    assert!(trusted.load(Ordering::Relaxed) > 0 || env == CHILD_ENV);
}
