//! Power-loss model (after redb's crash-consistency tests): the fault seam records, for every
//! file the log fsyncs, the length the last successful fsync made durable. A "power loss"
//! drops every write made after that — segment files are only appended to, so that is a
//! truncation to the durable length, optionally keeping a random prefix of the unsynced bytes
//! (pages the OS happened to write back, the last one torn) — and deletes index files that were
//! never synced. Reopening must keep every record acknowledged under `SyncPolicy::EveryAppend`,
//! and what it recovers must be a prefix of what was appended.
#![cfg(feature = "fault-injection")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

/// A seeded PRNG, so a failing round can be replayed by its seed.
struct Rng(fastrand::Rng);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n.max(1))
    }
}

fn message(seq: u64, rng: &mut Rng) -> Message {
    let len = rng.below(300) as usize;
    Message::new(vec![(seq % 251) as u8; len])
        .with_key(seq.to_le_bytes().to_vec())
        .with_timestamp(seq as i64)
}

fn options(sync: SyncPolicy) -> Options {
    Options {
        max_bytes: 2048,
        sync,
        index_interval_bytes: 256,
        ..Options::default()
    }
}

/// Applies the power loss to every file of `dir`: `.log` files keep their durable length plus,
/// when `torn`, a random part of what was written after it; index files never synced vanish.
fn pull_the_plug(dir: &Path, durable: &HashMap<PathBuf, u64>, torn: bool, rng: &mut Rng) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        let len = fs::metadata(&path).unwrap().len();
        let synced = durable.get(&path).copied();
        match ext {
            "log" => {
                let keep_from = synced.unwrap_or(0).min(len);
                let keep = if torn {
                    keep_from + rng.below(len - keep_from + 1)
                } else {
                    keep_from
                };
                let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(keep).unwrap();
            }
            "index" | "timeindex" if synced.is_none() => fs::remove_file(&path).unwrap(),
            _ => {}
        }
    }
}

/// One round of three cycles; with `close_some`, some cycles end in a clean close instead of a
/// power loss, so the next cycle opens trusting the clean-shutdown marker, appends, and loses
/// power.
fn run_round(seed: u64, torn: bool, close_some: bool) -> (u64, u64) {
    let mut rng = Rng(fastrand::Rng::with_seed(seed));
    let dir = tempfile::tempdir().unwrap();
    let mut appended: Vec<Message> = Vec::new();
    let mut acked = 0u64;
    let mut closed = false;
    // A few open/append/lose cycles on the same directory.
    for cycle in 0..3 {
        // EveryAppend acknowledges only synced records; EveryN(7) leaves unsynced ones behind
        // for the model to drop (what survives is then bounded by `synced_seq`).
        let policy = if (seed + cycle).is_multiple_of(2) {
            SyncPolicy::EveryAppend
        } else {
            SyncPolicy::EveryN(7)
        };
        // What is on disk now survived the previous loss: durable from the start.
        let mut baseline: HashMap<PathBuf, u64> = HashMap::new();
        let log = Log::open(dir.path(), options(policy)).unwrap();
        // Only an open right after a clean close skips the scan of the active segment.
        assert_eq!(log.recovery_report().clean_shutdown, closed, "seed {seed}");
        for entry in fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                baseline.insert(path.clone(), fs::metadata(&path).unwrap().len());
            }
        }
        // What survived the previous loss is a prefix of what was appended, holding every
        // acknowledged record.
        let last = log.last_seq();
        assert!(
            last >= acked,
            "seed {seed}: acknowledged {acked}, recovered {last}"
        );
        let got = log.read(1, usize::MAX).unwrap();
        assert_eq!(got.len() as u64, last, "seed {seed}");
        for r in &got {
            assert_eq!(
                &r.message,
                &appended[(r.seq - 1) as usize],
                "seed {seed} seq {}",
                r.seq
            );
        }
        appended.truncate(last as usize);
        acked = last;
        let ops = 20 + rng.below(120);
        for _ in 0..ops {
            let n = 1 + rng.below(4);
            let batch: Vec<Message> = (0..n)
                .map(|i| message(appended.len() as u64 + 1 + i, &mut rng))
                .collect();
            let range = log.append_batch(&batch).unwrap();
            assert_eq!(*range.start(), appended.len() as u64 + 1);
            appended.extend(batch);
            if policy == SyncPolicy::EveryAppend {
                acked = *range.end();
            }
        }
        // Durable whatever the policy: everything the log reports synced.
        acked = acked.max(log.synced_seq());
        let mut durable = log.faults().durable_lengths();
        for (path, len) in baseline {
            let e = durable.entry(path).or_insert(0);
            *e = (*e).max(len);
        }
        if close_some && rng.below(2) == 0 {
            let last = log.last_seq();
            log.close().unwrap();
            acked = last;
            closed = true;
            continue;
        }
        // The plug is pulled: no close, no final sync.
        closed = false;
        drop(log);
        pull_the_plug(dir.path(), &durable, torn, &mut rng);
    }
    let log = Log::open(dir.path(), options(SyncPolicy::EveryAppend)).unwrap();
    assert!(log.last_seq() >= acked, "seed {seed}");
    let got = log.read(1, usize::MAX).unwrap();
    for r in &got {
        assert_eq!(&r.message, &appended[(r.seq - 1) as usize], "seed {seed}");
    }
    (acked, log.last_seq())
}

#[test]
fn power_loss_after_every_append_keeps_every_acknowledged_record() {
    let mut rounds = 0;
    for seed in 1..=40 {
        run_round(seed, false, false);
        rounds += 1;
    }
    println!("power-loss model: {rounds} rounds of 3 losses each, unsynced writes dropped");
}

#[test]
fn power_loss_with_torn_unsynced_writes_recovers_a_prefix() {
    let mut extra = 0;
    for seed in 100..140 {
        let (acked, recovered) = run_round(seed, true, false);
        extra += recovered - acked;
    }
    println!(
        "power-loss model (torn): 40 rounds, {extra} unacknowledged records survived as a prefix"
    );
}

#[test]
fn power_loss_after_a_clean_close_and_more_appends_keeps_every_acknowledged_record() {
    let mut clean_opens = 0;
    for seed in 200..260 {
        run_round(seed, seed % 2 == 0, true);
        clean_opens += 1;
    }
    println!("power-loss model with clean closes: {clean_opens} rounds");
}
