//! Real-process crash test: a child appends with `SyncPolicy::EveryAppend` and prints every
//! acknowledged seq; the parent SIGKILLs it at random moments, reopens the log and checks that
//! every acknowledged record is present, intact and contiguous.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

const CHILD_ENV: &str = "KRABKA_CRASH_CHILD_DIR";

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

#[test]
fn sigkill_at_random_moments_keeps_every_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut acked_total = 0u64;
    let mut rounds = 0;
    while rounds < 25 && started.elapsed() < Duration::from_secs(30) {
        rounds += 1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_appends_until_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
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
}
