//! The replica processes of the multi-process scenario: this test binary run again as a child
//! that opens a [`ReadReplica`] over the parent's backend, reads from the first seq to the end
//! again and again until a deadline, and writes what it read to a file; and the parent's side,
//! which starts the children and checks their files.
//!
//! A child's file has one line per event:
//! - `r <seq> <hash>`: a record read (the FNV-1a of its value);
//! - `last <seq>`: the last seq served changed;
//! - `oor <seq> <first>`: retention moved the first seq past the child's position (allowed:
//!   it goes on from `first`);
//! - `bad <what>`: anything else (an error, a gap, an empty page): a failure;
//! - `done <stats>` at the end.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use krabka_tiering::replica::ReadReplica;
use krabka_tiering::{Error, TieringConfig};

use super::backend::Backend;
use super::util::{hash, replica_config, tp};

/// The child test's name (run with `--ignored --exact`).
pub const CHILD_TEST: &str = "replica_process_reads_until_its_deadline";
/// Where a child writes what it read.
pub const OUT_VAR: &str = "KRABKA_REPLICA_TEST_OUT";
/// When a child stops: ms since the Unix epoch.
const UNTIL_VAR: &str = "KRABKA_REPLICA_TEST_UNTIL_MS";
/// The child's refresh interval in ms.
const INTERVAL_VAR: &str = "KRABKA_REPLICA_TEST_INTERVAL_MS";
/// `1`: the child reads without a cache (every read fetches: a segment retention deleted is
/// met by the fetch, not hidden by the cache).
const UNCACHED_VAR: &str = "KRABKA_REPLICA_TEST_UNCACHED";
/// Records a child asks for at once.
const PAGE: usize = 64;
/// The longest a child runs, whatever its deadline says.
const CHILD_LIMIT: Duration = Duration::from_secs(30);

fn unix_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Starts a replica process over `b` that reads until `until` and writes to `out`, with a
/// read cache unless `uncached`.
pub fn spawn(b: &Backend, out: &Path, until: Instant, interval: Duration, uncached: bool) -> Child {
    let left = until.saturating_duration_since(Instant::now());
    let until_ms = unix_ms() + u64::try_from(left.as_millis()).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        CHILD_TEST,
        "--nocapture",
        "--test-threads=1",
    ])
    .envs(b.child_env.iter().map(|(k, v)| (k, v)))
    .env(OUT_VAR, out)
    .env(UNTIL_VAR, until_ms.to_string())
    .env(INTERVAL_VAR, interval.as_millis().to_string())
    .env(UNCACHED_VAR, if uncached { "1" } else { "0" })
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

/// The child's body: returns when the deadline passed (bounded by [`CHILD_LIMIT`]).
pub fn run_child(out: PathBuf) {
    let started = Instant::now();
    let until_ms: u64 = std::env::var(UNTIL_VAR).unwrap().parse().unwrap();
    let interval_ms: u64 = std::env::var(INTERVAL_VAR).unwrap().parse().unwrap();
    let b = Backend::from_env();
    let mut w = BufWriter::new(std::fs::File::create(&out).unwrap());
    let done = || unix_ms() >= until_ms || started.elapsed() > CHILD_LIMIT;
    let config = if std::env::var(UNCACHED_VAR).as_deref() == Ok("1") {
        TieringConfig {
            cache_bytes: 0,
            prefetch: false,
            ..TieringConfig::default()
        }
    } else {
        TieringConfig::default()
    };
    // The writer's head and identity exist before the parent starts the children.
    let replica = ReadReplica::open(
        b.rsm.clone(),
        b.store.clone(),
        tp(),
        config,
        replica_config(Duration::from_millis(interval_ms)),
    )
    .unwrap();
    let mut cursor = replica.first_seq().unwrap();
    let mut last_seen = None;
    let mut passes = 0u64;
    while !done() {
        let last = replica.last_seq().unwrap();
        if last_seen != Some(last) {
            writeln!(w, "last {last}").unwrap();
            last_seen = Some(last);
        }
        if cursor > last {
            // At the end: the next pass starts from the first seq again.
            passes += 1;
            cursor = replica.first_seq().unwrap();
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        match read_step(&replica, cursor, &mut w) {
            Step::Next(seq) => cursor = seq,
            Step::Bad(what) => {
                writeln!(w, "bad {what}").unwrap();
                std::thread::sleep(Duration::from_millis(20));
                cursor = replica.first_seq().unwrap();
            }
        }
    }
    let s = replica.stats();
    writeln!(
        w,
        "done passes={passes} refreshes={} idle={} full={} failures={} requests={} head={:?}",
        s.refreshes,
        s.idle_refreshes,
        s.full_listings,
        s.refresh_failures,
        s.refresh_requests,
        s.head
    )
    .unwrap();
    w.flush().unwrap();
}

enum Step {
    Next(u64),
    Bad(String),
}

/// One read at `cursor`: where the next one starts.
fn read_step(replica: &ReadReplica, cursor: u64, w: &mut impl Write) -> Step {
    match replica.read(cursor, PAGE) {
        Ok(records) if records.is_empty() => Step::Bad(format!("empty page at {cursor}")),
        Ok(records) => {
            let mut next = cursor;
            for r in &records {
                if r.seq != next {
                    return Step::Bad(format!("seq {} where {next} was due", r.seq));
                }
                writeln!(w, "r {} {}", r.seq, hash(&r.message.value)).unwrap();
                next += 1;
            }
            Step::Next(next)
        }
        // Retention deleted what the child was about to read: on from the new first seq.
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { seq, first, .. }))
            if seq < first =>
        {
            writeln!(w, "oor {seq} {first}").unwrap();
            Step::Next(first)
        }
        Err(e) => Step::Bad(format!("at {cursor}: {e:?}").replace('\n', " ")),
    }
}

/// What one child's file says.
#[derive(Debug, Default)]
pub struct ChildReport {
    /// Records read (a seq read in many passes counts each time).
    pub records: u64,
    /// The distinct seqs read, lowest and highest.
    pub lowest: Option<u64>,
    pub highest: Option<u64>,
    /// The last seqs served it saw, first and last.
    pub first_last: Option<u64>,
    pub final_last: Option<u64>,
    /// Out-of-range answers (retention moved past it).
    pub out_of_range: u64,
    pub done: Option<String>,
}

/// Checks a child's file: every record read is the value `expect` gives its seq, at or below
/// `acked` (the writer's last acknowledged seq); no `bad` line. Panics naming the child.
pub fn check(name: &str, path: &Path, acked: u64, expect: &dyn Fn(u64) -> String) -> ChildReport {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rep = ChildReport::default();
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        match parts.next() {
            Some("r") => {
                let seq: u64 = parts.next().unwrap().parse().unwrap();
                let h: u64 = parts.next().unwrap().parse().unwrap();
                assert!(
                    seq <= acked,
                    "{name} read seq {seq}, past the acknowledged {acked}"
                );
                let want = *expected
                    .entry(seq)
                    .or_insert_with(|| hash(expect(seq).as_bytes()));
                assert_eq!(h, want, "{name} read a wrong value at seq {seq}");
                rep.records += 1;
                rep.lowest = Some(rep.lowest.map_or(seq, |l| l.min(seq)));
                rep.highest = Some(rep.highest.map_or(seq, |h| h.max(seq)));
            }
            Some("last") => {
                let last: u64 = parts.next().unwrap().parse().unwrap();
                rep.first_last.get_or_insert(last);
                rep.final_last = Some(last);
            }
            Some("oor") => rep.out_of_range += 1,
            Some("done") => rep.done = Some(line.to_owned()),
            _ => panic!("{name}: {line}"),
        }
    }
    rep
}
