//! The tail in the bucket through the built binary: `produce --durability bucket` acknowledges a
//! batch only once the remote holds it, so a writer killed at any moment with its disk lost
//! loses nothing it acknowledged; a writer taken over acknowledges nothing more; `tier` without
//! `--watch` exits 0 only once every record of the active segment is in the bucket.
//!
//! Every process is a real `krabka`, over a filesystem remote in a temporary directory; every
//! wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use krabka_remote_storage::layout;
use krabka_remote_storage::tail::{TailKind, TailObject};

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka")
}

/// Runs `args`, expecting success; its stdout.
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

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn fs_url(root: &Path) -> String {
    format!("fs://{}", root.display())
}

/// A `krabka` process, killed on every exit path of the test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Its stdout's lines, as they come, on a thread of their own (the channel ends with the pipe).
fn lines_of(stdout: ChildStdout) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The seqs of `acknowledged seq A..=B` lines, checked contiguous from 1.
fn acknowledged(lines: &[String]) -> u64 {
    let mut last = 0;
    for l in lines {
        let Some(range) = l.strip_prefix("acknowledged seq ") else {
            continue;
        };
        let (a, b) = range.split_once("..=").unwrap();
        let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
        assert_eq!(a, last + 1, "acknowledged batches not contiguous: {l}");
        assert!(b >= a, "{l}");
        last = b;
    }
    last
}

/// The value of stdin line `i` (from 1) of writer `tag`.
fn line_value(tag: &str, i: u64) -> String {
    format!("{tag} line {i:08} {}", "x".repeat(40))
}

/// Starts `produce DIR --remote R --durability bucket --progress-lines` over `extra` args, with
/// generated records (`seed`) or, with `tag`, lines written to its stdin by a thread until the
/// pipe closes (bounded: 10^7 lines).
fn start_writer(
    dir: &Path,
    remote: &Path,
    seed: u64,
    tag: Option<&str>,
) -> (Running, Receiver<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_krabka"));
    cmd.args([
        "produce",
        path(dir),
        "--remote",
        &fs_url(remote),
        "--durability",
        "bucket",
        "--progress-lines",
        "--tail-interval",
        "20ms",
        "--segment-bytes",
        "256KiB",
    ]);
    match tag {
        None => {
            cmd.args(["--generate", "100000000", "--seed", &seed.to_string()]);
            cmd.stdin(Stdio::null());
        }
        Some(_) => {
            cmd.stdin(Stdio::piped());
        }
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start krabka produce");
    if let Some(tag) = tag {
        let mut stdin = child.stdin.take().unwrap();
        let tag = tag.to_owned();
        std::thread::spawn(move || {
            let mut out = std::io::BufWriter::new(&mut stdin);
            for i in 1..=10_000_000_u64 {
                if writeln!(out, "{}", line_value(&tag, i)).is_err() {
                    return;
                }
            }
            let _ = out.flush();
        });
    }
    let lines = lines_of(child.stdout.take().unwrap());
    (Running(child), lines)
}

/// Kills the writer (SIGKILL) and returns every line it printed.
fn kill(mut writer: Running, lines: &Receiver<String>) -> Vec<String> {
    writer.0.kill().unwrap();
    writer.0.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => out.push(l),
            Err(RecvTimeoutError::Disconnected) => return out,
            Err(RecvTimeoutError::Timeout) => panic!("stdout of a killed writer still open"),
        }
    }
}

/// Waits until the writer printed `n` acknowledged batches (at most 60 s); the lines so far.
fn wait_for_acks(lines: &Receiver<String>, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    while out
        .iter()
        .filter(|l: &&String| l.starts_with("acknowledged"))
        .count()
        < n
    {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => out.push(l),
            Err(e) => panic!("the writer acknowledged fewer than {n} batches: {e:?} after {out:?}"),
        }
    }
    out
}

/// `krabka read DIR` as `seq -> (key, value)`, checked contiguous from seq 1.
fn read_all(dir: &Path) -> BTreeMap<u64, String> {
    let out = ok(&["read", path(dir), "--value-chars", "100000"]);
    let mut records = BTreeMap::new();
    for (i, l) in out.lines().enumerate() {
        let mut cols = l.splitn(4, '\t');
        let seq: u64 = cols.next().unwrap().parse().unwrap();
        assert_eq!(
            seq,
            i as u64 + 1,
            "read {}: a gap before {l}",
            dir.display()
        );
        let _ts = cols.next().unwrap();
        let key = cols.next().unwrap();
        let value = cols.next().unwrap();
        records.insert(seq, format!("{key}\t{value}"));
    }
    records
}

/// `krabka read DIR` of generated records: every line (seq, timestamp, key, value).
fn read_lines(dir: &Path) -> Vec<String> {
    ok(&["read", path(dir), "--value-chars", "100000"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Rebuilds the partition `topic` from the remote into `dir` (whose name is the topic) and
/// opens it as the writer (`tier`, one round), which takes back what the bucket's tail holds
/// above the recovered segments.
fn recover_and_take_back(dir: &Path, remote: &Path) {
    ok(&["recover", path(dir), "--remote", &fs_url(remote)]);
    ok(&["tier", path(dir), "--remote", &fs_url(remote)]);
}

#[test]
fn every_acknowledged_record_of_a_writer_killed_at_a_random_moment_is_taken_back_after_its_disk_is_lost()
 {
    let seed = std::env::var("KRABKA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("seed {seed} (KRABKA_TEST_SEED={seed} repeats this run)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut acknowledged_rounds = 0;
    for round in 0..20_u64 {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote");
        let a = tmp.path().join("a").join("clicks");
        // Generated records in even rounds, lines piped to stdin in odd ones.
        let tag = (round % 2 == 1).then(|| format!("round{round}"));
        let (writer, lines) = start_writer(&a, &remote, round, tag.as_deref());
        // A random moment: after 0 to 3 acknowledged batches (so that a loaded machine's slow
        // start does not leave every round with nothing acknowledged), then 0 to 500 ms more.
        let mut printed = wait_for_acks(&lines, rng.usize(0..=3));
        std::thread::sleep(Duration::from_millis(rng.u64(0..500)));
        printed.extend(kill(writer, &lines));
        let acked = acknowledged(&printed);
        if acked > 0 {
            acknowledged_rounds += 1;
        }
        if !remote.exists() {
            // Killed before its first write to either tier (a slow start on a loaded
            // machine): nothing was acknowledged, and there is nothing to take back.
            assert_eq!(acked, 0, "acknowledged without a remote tier");
            continue;
        }
        // The disk is lost (a writer killed before its first write may not have made it).
        match std::fs::remove_dir_all(tmp.path().join("a")) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => assert_eq!(acked, 0),
            r => r.unwrap(),
        }
        let b = tmp.path().join("b").join("clicks");
        recover_and_take_back(&b, &remote);
        match &tag {
            Some(tag) => {
                let records = read_all(&b);
                assert!(
                    records.len() as u64 >= acked,
                    "round {round}: {} records back, {acked} acknowledged",
                    records.len()
                );
                // Every record back (acknowledged or not) is the line appended at its seq.
                for (seq, kv) in &records {
                    assert_eq!(
                        kv,
                        &format!("-\t{}", line_value(tag, *seq)),
                        "round {round}"
                    );
                }
            }
            None => {
                let back = read_lines(&b);
                assert!(
                    back.len() as u64 >= acked,
                    "round {round}: {} records back, {acked} acknowledged",
                    back.len()
                );
                // The same records, generated again into a plain local log.
                let reference = tmp.path().join("reference");
                ok(&[
                    "produce",
                    path(&reference),
                    "--generate",
                    &back.len().to_string(),
                    "--seed",
                    &round.to_string(),
                ]);
                assert_eq!(back, read_lines(&reference), "round {round}");
            }
        }
    }
    // A run in which no writer lived to acknowledge anything would prove nothing.
    assert!(
        acknowledged_rounds >= 10,
        "only {acknowledged_rounds} of 20 writers acknowledged a batch before being killed"
    );
}

#[test]
fn a_taken_over_writer_acknowledges_nothing_more_and_its_successor_serves_all_it_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    let a = tmp.path().join("a").join("orders");
    let (writer, lines) = start_writer(&a, &remote, 0, Some("a"));
    let mut printed = wait_for_acks(&lines, 3);
    printed.extend(kill(writer, &lines));
    let acked = acknowledged(&printed);
    assert!(acked >= 3, "A acknowledged {acked} records in 3 batches");

    // B rebuilds the partition elsewhere and takes it over with its own appends.
    let b = tmp.path().join("b").join("orders");
    ok(&["recover", path(&b), "--remote", &fs_url(&remote)]);
    let out = ok(&[
        "produce",
        path(&b),
        "--remote",
        &fs_url(&remote),
        "--durability",
        "bucket",
        "--progress-lines",
        "--generate",
        "10",
    ]);
    let b_first: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("acknowledged seq "))
        .and_then(|r| r.split_once("..=").map(|(a, _)| a.parse().unwrap()))
        .unwrap_or_else(|| panic!("B acknowledged nothing: {out}"));
    assert!(
        b_first > acked,
        "B appended from seq {b_first}, A acknowledged up to {acked}"
    );
    let served = read_all(&b);
    for seq in 1..=acked {
        assert_eq!(
            served.get(&seq),
            Some(&format!("-\t{}", line_value("a", seq))),
            "seq {seq} A acknowledged"
        );
    }

    // A comes back on its old directory: it acknowledges nothing.
    let mut comeback = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args([
            "produce",
            path(&a),
            "--remote",
            &fs_url(&remote),
            "--durability",
            "bucket",
            "--progress-lines",
            "--tail-interval",
            "20ms",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = comeback.stdin.take().unwrap();
        // The refusal may come before the input is read: a closed pipe is expected.
        for i in 1..=2000 {
            if writeln!(stdin, "{}", line_value("late", i)).is_err() {
                break;
            }
        }
    }
    let out = comeback.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("acknowledged"), "{stdout}");
    assert!(stderr.contains("fenced"), "{stderr}");
    // B's log is unchanged by it.
    assert_eq!(read_all(&b), served);
    assert!(served.len() as u64 >= acked + 10);
}

/// The seqs the tail objects under `remote` hold, from their entries' headers; every entry's
/// data checked against its CRC.
fn seqs_in_tail(remote: &Path) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    for chain_dir in std::fs::read_dir(remote).unwrap() {
        let chain_dir = chain_dir.unwrap();
        let name = chain_dir.file_name().into_string().unwrap();
        let Some(chain) = layout::parse_tail_chain_dir(&name) else {
            continue;
        };
        for object in std::fs::read_dir(chain_dir.path()).unwrap() {
            let object = object.unwrap();
            let file = object.file_name().into_string().unwrap();
            let Some(n) = layout::parse_tail_object_name(&file) else {
                continue;
            };
            let key = layout::tail_object_key(chain, n);
            let bytes = std::fs::read(object.path()).unwrap();
            let object = TailObject::decode(&bytes, &key).unwrap();
            assert_eq!(object.chain(), chain);
            if object.kind() != TailKind::Data {
                continue;
            }
            for (i, e) in object.entries().iter().enumerate() {
                object.entry_data(i).unwrap();
                ranges.push((e.first_seq, e.last_seq));
            }
        }
    }
    ranges.sort_unstable();
    ranges
}

#[test]
fn tier_without_watch_exits_0_only_once_the_bucket_holds_every_record_of_the_active_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    let dir = tmp.path().join("a").join("events");
    ok(&["produce", path(&dir), "--generate", "20000"]);
    let before = read_lines(&dir);
    assert_eq!(before.len(), 20_000);
    let out = ok(&[
        "tier",
        path(&dir),
        "--remote",
        &fs_url(&remote),
        "--tail-interval",
        "200ms",
    ]);
    assert!(out.contains("tail: seqs 1..=20000 in the bucket"), "{out}");
    // No segment was finished (the one segment is active): the tail objects hold every seq.
    let ranges = seqs_in_tail(&remote);
    let mut next = 1;
    for (first, last) in &ranges {
        assert!(
            *first <= next,
            "seqs {next}..{first} in no tail object: {ranges:?}"
        );
        next = next.max(last + 1);
    }
    assert_eq!(next, 20_001, "{ranges:?}");

    // The disk is lost: everything comes back from the bucket.
    std::fs::remove_dir_all(tmp.path().join("a")).unwrap();
    recover_and_take_back(&dir, &remote);
    assert_eq!(read_lines(&dir), before);
}

#[test]
fn bucket_durability_needs_a_remote_and_tail_values_out_of_bounds_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let url = fs_url(&tmp.path().join("remote"));
    for (args, says) in [
        (
            vec!["produce", path(&dir), "--durability", "bucket"],
            "--remote <URL>",
        ),
        (
            vec!["produce", path(&dir), "--tail-interval", "200ms"],
            "--remote <URL>",
        ),
        (
            vec![
                "tier",
                path(&dir),
                "--remote",
                &url,
                "--tail-interval",
                "5ms",
            ],
            "a tail interval must be from 10ms to 60s, got 5ms",
        ),
        (
            vec![
                "tier",
                path(&dir),
                "--remote",
                &url,
                "--tail-bytes",
                "64MiB",
            ],
            "a tail object must hold from 4KiB to 32MiB",
        ),
        (
            vec![
                "tier",
                path(&dir),
                "--remote",
                &url,
                "--tail-grace",
                "500ms",
            ],
            "a tail grace must be from 1s to 1 day",
        ),
        (
            vec![
                "produce",
                path(&dir),
                "--remote",
                &url,
                "--ack-deadline",
                "2d",
            ],
            "an acknowledgement deadline must be from 10ms to 1 day",
        ),
        (
            vec!["produce", path(&dir), "--durability", "sometimes"],
            "invalid value 'sometimes'",
        ),
    ] {
        let out = krabka(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: no `{says}` in {stderr}");
    }
    assert!(!dir.exists(), "a refused command created {}", dir.display());
}

#[test]
fn bucket_durability_with_an_encryption_key_is_refused_naming_why_and_appends_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let key = tmp.path().join("master.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    let out = krabka(&[
        "produce",
        path(&dir),
        "--remote",
        &fs_url(&tmp.path().join("remote")),
        "--durability",
        "bucket",
        "--encryption-key-file",
        path(&key),
        "--generate",
        "10",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tail objects are not encrypted"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("appended"));
}

/// A producer process writing about 1,000 records a second with `--durability bucket`, and a
/// replica process (`read --remote --topic --follow`) of the same partition on the bucket alone:
/// the replica prints every acknowledged record, in order, with its bytes, each within a few
/// tail windows and refreshes of its acknowledgement.
#[test]
fn a_following_replica_process_prints_every_record_a_bucket_durable_producer_acknowledged() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("clicks");
    let remote = work.path().join("remote");
    let mut producer = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args([
            "produce",
            path(&log),
            "--remote",
            &fs_url(&remote),
            "--durability",
            "bucket",
            "--progress-lines",
            "--tail-interval",
            "50ms",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = producer.stdin.take().unwrap();
    let acks = lines_of(producer.stdout.take().unwrap());
    let producer = Running(producer);
    // The first record makes the partition exist in the bucket for the replica to find.
    writeln!(stdin, "{}", line_value("r", 1)).unwrap();
    stdin.flush().unwrap();
    let first = acks.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(first, "acknowledged seq 1..=1");
    let mut follower = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args([
            "read",
            "--remote",
            &fs_url(&remote),
            "--topic",
            "clicks",
            "--follow",
            "--refresh-interval",
            "50ms",
            "--timeout",
            "120s",
            "--value-chars",
            "100000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let printed = lines_of(follower.stdout.take().unwrap());
    let follower = Running(follower);
    // About 1,000 records a second for 3 s: 20 lines every 20 ms.
    const TOTAL: u64 = 3_000;
    let mut acked_at: BTreeMap<u64, Instant> = BTreeMap::from([(1, Instant::now())]);
    let mut seen_at: BTreeMap<u64, (Instant, String)> = BTreeMap::new();
    let mut order: Vec<u64> = Vec::new();
    let mut drain = |acked_at: &mut BTreeMap<u64, Instant>,
                     seen_at: &mut BTreeMap<u64, (Instant, String)>| {
        while let Ok(l) = acks.try_recv() {
            // The closing summary is the one other line.
            let Some((a, b)) = l
                .strip_prefix("acknowledged seq ")
                .and_then(|r| r.split_once("..="))
            else {
                assert!(l.starts_with("appended "), "unexpected producer line {l}");
                continue;
            };
            let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
            for s in a..=b {
                acked_at.insert(s, Instant::now());
            }
        }
        while let Ok(l) = printed.try_recv() {
            let seq: u64 = l.split('\t').next().unwrap().parse().unwrap();
            order.push(seq);
            seen_at.insert(seq, (Instant::now(), l));
        }
    };
    let mut next = 2;
    let started = Instant::now();
    while next <= TOTAL {
        for _ in 0..20 {
            if next > TOTAL {
                break;
            }
            writeln!(stdin, "{}", line_value("r", next)).unwrap();
            next += 1;
        }
        stdin.flush().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drain(&mut acked_at, &mut seen_at);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "producing took too long"
        );
    }
    drop(stdin);
    // Every record acknowledged, then printed by the replica (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked_at.len() < TOTAL as usize || seen_at.len() < TOTAL as usize {
        assert!(
            Instant::now() < deadline,
            "acknowledged {} and printed {} of {TOTAL}",
            acked_at.len(),
            seen_at.len()
        );
        std::thread::sleep(Duration::from_millis(20));
        drain(&mut acked_at, &mut seen_at);
    }
    drop(producer);
    drop(follower);
    assert_eq!(
        order,
        (1..=TOTAL).collect::<Vec<_>>(),
        "printed out of order or twice"
    );
    // In order, each once, with the producer's bytes; and never before its acknowledgement
    // could have been known by more than a window (printed after the record was in the
    // bucket, which its acknowledgement follows by at most the ack's own delivery).
    let seqs: Vec<u64> = seen_at.keys().copied().collect();
    assert_eq!(seqs, (1..=TOTAL).collect::<Vec<_>>());
    let mut late = Vec::new();
    for (seq, (at, line)) in &seen_at {
        let cols: Vec<&str> = line.splitn(4, '\t').collect();
        assert_eq!(
            cols.get(3).copied(),
            Some(line_value("r", *seq).as_str()),
            "{line}"
        );
        let acked = acked_at[seq];
        if at.saturating_duration_since(acked) > Duration::from_secs(5) {
            late.push(*seq);
        }
    }
    assert!(
        late.is_empty(),
        "printed more than 5 s after their ack: {late:?}"
    );
}
