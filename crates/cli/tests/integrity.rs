//! Regression tests of the integrity issue, at the level a user meets each item: the built
//! `krabka` binary on real files. Named after the scenario.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Batch, batches};

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
}

fn krabka(args: &[&str]) -> Output {
    bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn both(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn produce(dir: &Path, records: u64, segment_bytes: &str) {
    let out = krabka(&[
        "produce",
        s(dir),
        "--generate",
        &records.to_string(),
        "--segment-bytes",
        segment_bytes,
    ]);
    assert!(out.status.success(), "{}", both(&out));
}

/// The `.log` files of `dir`, in seq order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segs.sort();
    segs
}

/// A byte in the middle of the records of `b` (past its 61-byte header).
fn inside(b: &Batch) -> u64 {
    b.position + 61 + (b.size - 61) / 2
}

/// Writes `records` records to a new log at `dir` in `segment_bytes` segments as a program on
/// the library does, four records per append: closed segments of many batches each (`produce`
/// appends 1000 records at a time, a batch as large as the segment leaves room for).
fn write_log(dir: &Path, records: u64, segment_bytes: u64) {
    let options = krabka_storage::Options {
        max_bytes: segment_bytes,
        sync: krabka_storage::SyncPolicy::Never,
        ..krabka_storage::Options::default()
    };
    let log = krabka_storage::Log::open(dir, options).unwrap();
    let msgs: Vec<krabka_protocol::Message> = (1..=records)
        .map(|i| {
            let pad = "x".repeat(32 + (i * 7919 % 700) as usize);
            krabka_protocol::Message::new(format!(
                "{{\"event\":\"click\",\"n\":{i},\"pad\":\"{pad}\"}}"
            ))
            .with_key(format!("user-{:06}", i * 31 % 1000))
            .with_timestamp(1_704_067_200_000 + i as i64 * 3)
        })
        .collect();
    for four in msgs.chunks(4) {
        log.append_batch(four).unwrap();
    }
    log.sync().unwrap();
    log.close().unwrap();
}

/// The first 20 bytes of a record batch of seq `base` whose length field claims 200 bytes:
/// what a write cut short leaves.
fn torn_batch(base: u64) -> Vec<u8> {
    let mut torn = base.to_be_bytes().to_vec();
    torn.extend_from_slice(&188u32.to_be_bytes());
    torn.extend_from_slice(&(-1i32).to_be_bytes());
    torn.push(2);
    torn.extend_from_slice(&[7u8; 3]);
    torn
}

/// The seqs printed by `krabka read` (first column of stdout).
fn printed_seqs(out: &Output) -> Vec<u64> {
    text(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect()
}

fn base_of(seg: &Path) -> u64 {
    seg.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// Asserts `out` failed with exit 1 and one error line on stderr holding every one of `words`.
fn assert_one_line_failure(out: &Output, words: &[&str]) {
    assert_eq!(out.status.code(), Some(1), "{}", both(out));
    let stderr = text(&out.stderr);
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error.len(), 1, "{}", both(out));
    for w in words {
        assert!(
            error[0].contains(w),
            "`{w}` not in the error line:\n{}",
            both(out)
        );
    }
    assert!(!stderr.contains("panicked"), "{}", both(out));
}

// ---- item 1: recovery never deletes intact records silently; the CLI shows what it did ----

/// Flips a byte inside the records of batch `k` of `seg`; returns that batch.
fn flip_batch(seg: &Path, k: usize) -> Batch {
    let b = batches(seg)[k];
    let mut bytes = std::fs::read(seg).unwrap();
    bytes[usize::try_from(inside(&b)).unwrap()] ^= 0x5a;
    std::fs::write(seg, bytes).unwrap();
    b
}

/// A log of 3000 records in one (active) segment, as `produce` writes them (batches of 1000),
/// whose second batch (seqs 1001..=2000) is damaged, a valid batch following it; returns the
/// segment and the bad batch.
fn log_with_damage_before_valid_records(dir: &Path) -> (PathBuf, Batch) {
    produce(dir, 3000, "64MiB");
    let seg = segments(dir).pop().unwrap();
    let bad = flip_batch(&seg, 1);
    assert_eq!((bad.first, bad.last), (1001, 2000));
    (seg, bad)
}

fn sizes(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.path(), e.metadata().unwrap().len()))
        .filter(|(p, _)| !p.ends_with(".lock"))
        .collect();
    all.sort();
    all
}

#[test]
fn produce_tier_and_read_remote_refuse_damage_followed_by_valid_records_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let (seg, bad) = log_with_damage_before_valid_records(&log);
    let pos = bad.position;
    let before = std::fs::read(&seg).unwrap();
    let name = seg.file_name().unwrap().to_str().unwrap();
    let repair = format!("krabka repair {}", s(&log));
    let at_stake = format!("{}..=3000", bad.first);
    for args in [
        &["produce", s(&log), "--generate", "10"][..],
        &["tier", s(&log), "--remote", &remote],
        &["read", s(&log), "--remote", &remote, "--max", "1"],
    ] {
        let out = krabka(args);
        assert_one_line_failure(&out, &[name, &format!("byte {pos}"), &at_stake, &repair]);
    }
    // Nothing was cut: the damaged file and every record after the damage are still there.
    assert_eq!(std::fs::read(&seg).unwrap(), before);
    assert!(!log.join("quarantine").exists());
}

#[test]
fn repair_moves_the_damaged_batch_into_quarantine_keeps_the_rest_and_says_what_moved_where() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let (seg, bad) = log_with_damage_before_valid_records(&log);
    let pos = bad.position;
    let hole = format!("{}..={}", bad.first, bad.last);
    let len = std::fs::metadata(&seg).unwrap().len();
    let name = seg.file_name().unwrap().to_str().unwrap();

    let dry = krabka(&["repair", s(&log), "--dry-run"]);
    assert!(dry.status.success(), "{}", both(&dry));
    assert!(
        text(&dry.stdout).contains(&format!("{name} at byte {pos}")),
        "{}",
        both(&dry)
    );
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        len,
        "a dry run moves nothing"
    );
    assert!(!log.join("quarantine").exists(), "{}", both(&dry));

    let out = krabka(&["repair", s(&log)]);
    assert!(out.status.success(), "{}", both(&out));
    let report = text(&out.stdout);
    assert!(report.contains(name), "{}", both(&out));
    assert!(
        report.contains(&format!("from byte {pos}")),
        "{}",
        both(&out)
    );
    assert!(report.contains("quarantine"), "{}", both(&out));
    // Only the damaged batch's seqs are lost: the records after it are kept in a file of their
    // own.
    assert!(report.contains(&hole), "{}", both(&out));
    assert!(
        report.contains(&format!("kept seqs {}..=3000", bad.last + 1)),
        "{}",
        both(&out)
    );
    // The bytes were moved, not deleted: the damaged batch into quarantine, the rest into the
    // new segment file.
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), pos);
    let moved: u64 = std::fs::read_dir(log.join("quarantine"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let kept = krabka_storage::segment::segment_file_name(bad.last + 1, "log");
    let rest = std::fs::metadata(log.join(kept)).unwrap().len();
    assert_eq!(moved + rest, len - pos);

    // Records before the damage read back; reading into the hole names its quarantine file;
    // every record after it reads back too.
    let read = krabka(&["read", s(&log)]);
    assert_one_line_failure(&read, &[&hole, "quarantine"]);
    assert_eq!(printed_seqs(&read), (1..bad.first).collect::<Vec<_>>());
    let after = (bad.last + 1).to_string();
    let read = krabka(&["read", s(&log), "--from", &after]);
    assert!(read.status.success(), "{}", both(&read));
    assert_eq!(
        printed_seqs(&read),
        (bad.last + 1..=3000).collect::<Vec<_>>()
    );

    // Appends go on after every seq that was at stake; the log verifies (the hole is listed),
    // and nothing is left to repair.
    let more = krabka(&["produce", s(&log), "--generate", "5"]);
    assert!(more.status.success(), "{}", both(&more));
    assert!(
        text(&more.stdout).contains("(seq 3001..=3005)"),
        "{}",
        both(&more)
    );
    let verify = krabka(&["verify", s(&log)]);
    assert!(verify.status.success(), "{}", both(&verify));
    assert!(text(&verify.stdout).contains(&hole), "{}", both(&verify));
    let again = krabka(&["repair", s(&log)]);
    assert!(again.status.success(), "{}", both(&again));
    assert!(
        text(&again.stdout).contains("nothing to repair"),
        "{}",
        both(&again)
    );
    let read = krabka(&["read", s(&log), "--from", "3001"]);
    assert_eq!(
        printed_seqs(&read),
        (3001..=3005).collect::<Vec<_>>(),
        "{}",
        both(&read)
    );
}

#[test]
fn repair_also_moves_aside_damage_inside_a_closed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    write_log(&log, 3000, 64 << 10);
    let victim = segments(&log)[1].clone();
    let bad = flip_batch(&victim, 10);
    let (bad_seq, pos) = (bad.first, bad.position);
    let out = krabka(&["repair", s(&log)]);
    assert!(out.status.success(), "{}", both(&out));
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(
        text(&out.stdout).contains(&format!("{name} from byte {pos}")),
        "{}",
        both(&out)
    );
    let read = krabka(&["read", s(&log)]);
    assert_one_line_failure(&read, &[&format!("{bad_seq}..="), "quarantine"]);
    assert_eq!(printed_seqs(&read), (1..bad_seq).collect::<Vec<_>>());
    let verify = krabka(&["verify", s(&log)]);
    assert!(verify.status.success(), "{}", both(&verify));
}

#[test]
fn read_remote_prints_the_records_before_a_bad_batch_in_a_closed_segment_then_fails() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    write_log(&log, 3000, 64 << 10);
    let victim = segments(&log)[1].clone();
    let bad = flip_batch(&victim, 10);
    let (bad_seq, pos) = (bad.first, bad.position);
    let name = victim.file_name().unwrap().to_str().unwrap();
    let out = krabka(&["read", s(&log), "--remote", &remote]);
    assert_one_line_failure(&out, &[name, &format!("byte {pos}")]);
    assert_eq!(printed_seqs(&out), (1..bad_seq).collect::<Vec<_>>());
}

#[test]
fn tier_refuses_to_copy_a_damaged_closed_segment_and_names_file_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    write_log(&log, 3000, 64 << 10);
    let victim = segments(&log)[1].clone();
    let pos = flip_batch(&victim, 10).position;
    let before = sizes(&log);
    let out = krabka(&[
        "tier",
        s(&log),
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
    ]);
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert_one_line_failure(&out, &[name, &format!("byte {pos}")]);
    // The damaged segment and everything after it stay local.
    let after = sizes(&log);
    for (path, _) in before.iter().filter(|(p, _)| p >= &victim) {
        assert!(after.iter().any(|(q, _)| q == path), "{path:?} was deleted");
    }
}

#[test]
fn produce_prints_the_recovery_report_when_it_moves_a_torn_tail_aside() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 100, "64MiB");
    let seg = segments(&log).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    // A torn write: the first 20 bytes of a batch that claims 200.
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&torn_batch(101)).unwrap();
    drop(f);
    let out = krabka(&["produce", s(&log), "--generate", "1"]);
    assert!(out.status.success(), "{}", both(&out));
    let stderr = text(&out.stderr);
    let name = seg.file_name().unwrap().to_str().unwrap();
    assert!(stderr.contains(name), "{}", both(&out));
    assert!(stderr.contains(&format!("{len}")), "{}", both(&out));
    assert!(
        text(&out.stdout).contains("(seq 101..=101)"),
        "{}",
        both(&out)
    );
}

// ---- item 3/5: gaps, overlaps and stray segment-named files ----

#[test]
fn a_stray_empty_future_segment_file_makes_read_verify_produce_and_tier_fail_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    produce(&log, 300, "64MiB");
    let stray = log.join("00000000000000000400.log");
    std::fs::write(&stray, b"").unwrap();
    let name = "00000000000000000400.log";
    for args in [
        &["read", s(&log)][..],
        &["verify", s(&log)],
        &["produce", s(&log), "--generate", "1"],
        &["tier", s(&log), "--remote", &remote],
    ] {
        let out = krabka(args);
        assert_one_line_failure(&out, &[name]);
        assert!(
            text(&out.stderr).contains("301"),
            "{args:?}: {}",
            both(&out)
        );
    }
    // read delivered the 300 records before it failed at the seam.
    let out = krabka(&["read", s(&log)]);
    assert_eq!(printed_seqs(&out), (1..=300).collect::<Vec<_>>());
}

#[test]
fn a_deleted_middle_segment_makes_read_verify_produce_and_tier_fail_naming_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    produce(&log, 3000, "64KiB");
    let segs = segments(&log);
    let gone = &segs[2];
    let gap_first = base_of(gone);
    let gap_last = base_of(&segs[3]) - 1;
    for suffix in ["log", "index", "timeindex"] {
        std::fs::remove_file(gone.with_extension(suffix)).unwrap();
    }
    let next = segs[3].file_name().unwrap().to_str().unwrap();
    for args in [
        &["read", s(&log)][..],
        &["read", s(&log), "--from", &(gap_first + 1).to_string()],
        &["verify", s(&log)],
        &["produce", s(&log), "--generate", "1"],
        &["tier", s(&log), "--remote", &remote],
    ] {
        let out = krabka(args);
        assert_one_line_failure(&out, &[next, &gap_first.to_string()]);
    }
    let out = krabka(&["read", s(&log)]);
    assert_eq!(printed_seqs(&out), (1..gap_first).collect::<Vec<_>>());
    let out = krabka(&[
        "read",
        s(&log),
        "--from",
        &(gap_last + 1).to_string(),
        "--max",
        "3",
    ]);
    assert!(
        out.status.success(),
        "past the gap reads fine: {}",
        both(&out)
    );
}

// ---- item 7: reads that look complete but are not ----

#[test]
fn read_prints_the_records_before_a_bad_batch_then_fails_naming_file_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    write_log(&log, 3000, 64 << 10);
    let victim = segments(&log)[1].clone();
    let bad = batches(&victim)[12];
    let (bad_seq, pos) = (bad.first, bad.position);
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[usize::try_from(inside(&bad)).unwrap()] ^= 0x01;
    std::fs::write(&victim, bytes).unwrap();
    let name = victim.file_name().unwrap().to_str().unwrap();
    for from in [1, bad_seq - 3] {
        let out = krabka(&["read", s(&log), "--from", &from.to_string()]);
        assert_one_line_failure(&out, &[name, &format!("byte {pos}")]);
        assert_eq!(printed_seqs(&out), (from..bad_seq).collect::<Vec<_>>());
    }
    let out = krabka(&["verify", s(&log)]);
    assert_one_line_failure(&out, &[]);
    assert!(
        text(&out.stdout).contains(&format!("{name} at byte {pos}")),
        "{}",
        both(&out)
    );
    let out = krabka(&["dump", s(&victim)]);
    assert_one_line_failure(&out, &[name, &format!("byte {pos}")]);
}

#[test]
fn read_fails_at_a_closed_segment_truncated_inside_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    write_log(&log, 3000, 64 << 10);
    let victim = segments(&log)[1].clone();
    let cut = batches(&victim)[8];
    let (cut_seq, pos) = (cut.first, cut.position);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap();
    f.set_len(pos + 10).unwrap();
    drop(f);
    let name = victim.file_name().unwrap().to_str().unwrap();
    let out = krabka(&["read", s(&log)]);
    assert_one_line_failure(&out, &[name, &format!("byte {pos}")]);
    assert_eq!(printed_seqs(&out), (1..cut_seq).collect::<Vec<_>>());
    let out = krabka(&["verify", s(&log)]);
    assert_one_line_failure(&out, &[]);
    assert!(text(&out.stdout).contains(name), "{}", both(&out));
}

#[test]
fn read_and_verify_fail_at_an_empty_closed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 3000, "64KiB");
    let victim = segments(&log)[1].clone();
    let first = base_of(&victim);
    std::fs::write(&victim, b"").unwrap();
    let name = victim.file_name().unwrap().to_str().unwrap();
    for args in [&["read", s(&log)][..], &["verify", s(&log)]] {
        let out = krabka(args);
        assert_one_line_failure(&out, &[]);
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(
            all.contains(name) && all.contains("empty"),
            "{}",
            both(&out)
        );
    }
    let out = krabka(&["read", s(&log)]);
    assert_eq!(printed_seqs(&out), (1..first).collect::<Vec<_>>());
}

/// Rewrites entry `k` of the `.index` next to `seg` to point at `position`, with a valid CRC.
fn rewrite_index_entry(seg: &Path, k: usize, position: u64) -> u64 {
    let path = seg.with_extension("index");
    let mut idx = std::fs::read(&path).unwrap();
    let n = u32::from_le_bytes(idx[40..44].try_into().unwrap()) as usize;
    assert!(k < n, "index has {n} entries");
    let at = 44 + 16 * k;
    let seq = u64::from_le_bytes(idx[at..at + 8].try_into().unwrap());
    idx[at + 8..at + 16].copy_from_slice(&position.to_le_bytes());
    let end = 44 + 16 * n;
    let crc = crc32fast::hash(&idx[..end]);
    idx[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, idx).unwrap();
    seq
}

#[test]
fn a_rewritten_index_entry_with_a_valid_crc_neither_skips_records_nor_passes_verify() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    write_log(&log, 3000, 64 << 10);
    let victim = segments(&log)[1].clone();
    let batches = batches(&victim);
    // Entry 2 now points at the next batch: a valid batch, of other seqs, still before entry 3
    // (the entries stay in order, so open trusts the file).
    let idx = std::fs::read(victim.with_extension("index")).unwrap();
    let entry_at = |k: usize| {
        let at = 44 + 16 * k + 8;
        u64::from_le_bytes(idx[at..at + 8].try_into().unwrap())
    };
    let i = batches
        .iter()
        .position(|b| b.position == entry_at(2))
        .unwrap();
    let target = batches[i + 1].position;
    assert!(target < entry_at(3), "entry 3 is past batch {}", i + 1);
    let seq = rewrite_index_entry(&victim, 2, target);
    let out = krabka(&["read", s(&log), "--from", &seq.to_string(), "--max", "10"]);
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(printed_seqs(&out), (seq..seq + 10).collect::<Vec<_>>());
    let out = krabka(&["verify", s(&log)]);
    assert_one_line_failure(&out, &[]);
    let index_name = victim.with_extension("index");
    let index_name = index_name.file_name().unwrap().to_str().unwrap();
    assert!(text(&out.stdout).contains(index_name), "{}", both(&out));
}

// ---- item 8: failures that say what happened ----

#[test]
fn produce_failing_at_line_2501_syncs_and_reports_the_2500_lines_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut input = Vec::new();
    for i in 1..=3000 {
        if i == 2501 {
            input.extend_from_slice(b"bad \xff line\n");
        } else {
            input.extend_from_slice(format!("line {i}\n").as_bytes());
        }
    }
    let mut child = bin()
        .args(["produce", s(&log)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_one_line_failure(
        &out,
        &[
            "appended 2,500 records (seq 1..=2500) from lines 1..=2500; ",
            "line 2501 is invalid",
            "nothing from line 2501 on",
        ],
    );
    let read = krabka(&["read", s(&log)]);
    assert!(read.status.success(), "{}", both(&read));
    assert_eq!(printed_seqs(&read), (1..=2500).collect::<Vec<_>>());
}

#[test]
fn produce_with_stdout_on_dev_full_fails_with_one_line_instead_of_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = bin()
        .args(["produce", s(&log), "--generate", "10"])
        .stdin(Stdio::null())
        .stdout(full)
        .output()
        .unwrap();
    assert_one_line_failure(
        &out,
        &["appended 10 records (seq 1..=10)", "synced", "stdout"],
    );
}

/// Runs `krabka args` with its stdout a pipe whose reading end is already closed.
fn with_closed_stdout(args: &[&str]) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn tier_demo_read_and_dump_into_a_closed_pipe_exit_quietly_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    produce(&log, 3000, "64KiB");
    let seg = segments(&log)[0].clone();
    let run = dir.path().join("run");
    for args in [
        &["tier", s(&log), "--remote", &remote][..],
        &["demo", "--records", "2000", "--dir", s(&run)],
        &["read", s(&log), "--remote", &remote],
        &["read", s(&log)],
        &["dump", s(&seg)],
        &["verify", s(&log)],
    ] {
        let out = with_closed_stdout(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", both(&out));
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            !stderr.to_lowercase().contains("broken pipe"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn read_follow_timeout_bounds_the_run_under_a_steady_producer() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 10, "64KiB");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            // Small segments: the reader also follows the writer across rolls.
            let options = krabka_storage::Options {
                max_bytes: 16 << 10,
                sync: krabka_storage::SyncPolicy::Never,
                ..krabka_storage::Options::default()
            };
            let l = krabka_storage::Log::open(&log, options).unwrap();
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < until {
                let batch: Vec<_> = (0..50)
                    .map(|i| krabka_protocol::Message::new(format!("steady {i}")))
                    .collect();
                l.append_batch(&batch).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let started = Instant::now();
    let mut child = bin()
        .args(["read", s(&log), "--follow", "--timeout", "2s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // A reader slower than the writer: `read` never catches up, so only the deadline stops it.
    let drain = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match stdout.read(&mut chunk).unwrap() {
                0 => break,
                n => buf.extend_from_slice(&chunk[..n]),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        text(&buf)
            .lines()
            .map(|l| l.split('\t').next().unwrap().parse::<u64>().unwrap())
            .collect::<Vec<_>>()
    });
    let status = wait_at_most(&mut child, Duration::from_secs(12));
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    producer.join().unwrap();
    let seqs = drain.join().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(
        status,
        Some(0),
        "read --follow ran past its deadline: {stderr}"
    );
    assert!(took < Duration::from_secs(8), "--timeout 2s took {took:?}");
    assert!(
        seqs.len() > 1000,
        "it followed the producer: {} records",
        seqs.len()
    );
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "every record, in order"
    );
    let segments = segments(&log).len();
    assert!(segments > 3, "the writer rolled: {segments} segments");
}

/// Waits for `child` up to `limit`; kills it and returns `None` when it runs longer.
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn demo_removes_its_temporary_directory_on_ctrl_c() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["demo", "--records", "5000000"])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first line names the temporary directory: the demo is under way.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("temporary"), "{first}");
    let work: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(work.len(), 1, "the demo made its directory");
    std::thread::sleep(Duration::from_millis(300));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let code = wait_at_most(&mut child, Duration::from_secs(60));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("Ctrl-C"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_stray_segment_file_inside_the_log_makes_read_fail_from_any_seq() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 300, "64MiB");
    std::fs::write(log.join("00000000000000000100.log"), b"").unwrap();
    for from in ["1", "150"] {
        let out = krabka(&["read", s(&log), "--from", from]);
        assert_one_line_failure(&out, &["00000000000000000100.log"]);
    }
    let out = krabka(&["verify", s(&log)]);
    assert_one_line_failure(&out, &["00000000000000000100.log"]);
}

// ---- the topic identity of a tiered log; a log that lost its remote metadata ----

/// A log of 5000 records in 64 KiB segments tiered to `remote` with no local retention: seqs
/// 1 up to the last seq it returns then live only in the remote tier.
fn tiered_log(log: &Path, remote: &str) -> u64 {
    produce(log, 5000, "64KiB");
    let out = krabka(&[
        "tier",
        s(log),
        "--remote",
        remote,
        "--local-retention-bytes",
        "0",
    ]);
    assert!(out.status.success(), "{}", both(&out));
    let first = base_of(&segments(log)[0]);
    assert!(first > 1, "local retention deleted the oldest segments");
    first - 1
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .args(["-a", s(from), s(to)])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_renamed_log_directory_keeps_its_topic_and_reads_every_record_from_the_remote() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let remote_only = format!("1..={}", tiered_log(&log, &remote));
    let renamed = dir.path().join("renamed");
    std::fs::rename(&log, &renamed).unwrap();
    let out = krabka(&["read", s(&renamed), "--remote", &remote, "--from", "1"]);
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(printed_seqs(&out), (1..=5000).collect::<Vec<_>>());
    assert!(renamed.join("topic").is_file(), "the topic is recorded");
    let out = krabka(&["tier", s(&renamed), "--remote", &remote]);
    assert!(out.status.success(), "{}", both(&out));
    assert!(
        text(&out.stdout)
            .lines()
            .any(|l| l.split_whitespace().take(4).eq([
                "seq",
                remote_only.as_str(),
                "remote",
                "only"
            ])),
        "{}",
        both(&out)
    );
    // A copy (cp -a) reads the same records, but never tiers: two copies would both write
    // the partition.
    let copy = dir.path().join("copy");
    copy_dir(&renamed, &copy);
    let out = krabka(&["read", s(&copy), "--remote", &remote, "--from", "1"]);
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(printed_seqs(&out), (1..=5000).collect::<Vec<_>>());
    let before = sizes(&copy);
    let out = krabka(&["tier", s(&copy), "--remote", &remote]);
    assert_one_line_failure(
        &out,
        &[
            "is a copy of the directory bound to writer epoch 1",
            "recover",
        ],
    );
    assert_eq!(sizes(&copy), before, "the copy was left as it was");
}

#[test]
fn a_log_that_lost_its_remote_metadata_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let remote_only = format!("1..={}", tiered_log(&log, &remote));
    std::fs::remove_dir_all(log.join("remote-metadata")).unwrap();
    let before = sizes(&log);
    for args in [
        &["tier", s(&log), "--remote", &remote][..],
        &["read", s(&log), "--remote", &remote, "--from", "1"],
    ] {
        let out = krabka(args);
        assert_one_line_failure(
            &out,
            &[
                &format!("{}/remote-metadata/ is missing", s(&log)),
                &remote_only,
                "restore",
            ],
        );
        assert!(out.stdout.is_empty(), "{}", both(&out));
        // No new, empty metadata store stands where the restored one must go.
        assert!(!log.join("remote-metadata").exists(), "{}", both(&out));
        assert_eq!(sizes(&log), before);
    }
}

#[test]
fn a_renamed_directory_tiered_before_the_topic_file_existed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let remote_only = format!("1..={}", tiered_log(&log, &remote));
    // A log tiered before the topic file existed: its topic was its directory's name.
    let legacy = dir.path().join("legacy");
    copy_dir(&log, &legacy);
    // Tiered before topic files and bindings existed: neither says which partition it is.
    let _ = std::fs::remove_file(legacy.join("topic"));
    let _ = std::fs::remove_file(legacy.join("remote-binding"));
    let out = krabka(&["tier", s(&legacy), "--remote", &remote]);
    assert_one_line_failure(
        &out,
        &[
            s(&legacy),
            "no remote segment of topic `legacy`",
            "renamed",
            &remote_only,
        ],
    );
    assert!(!legacy.join("topic").exists(), "{}", both(&out));
}

#[test]
fn read_remote_names_the_torn_event_and_tier_cuts_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let _ = tiered_log(&log, &remote);
    let gen_dir = std::fs::read_dir(log.join("remote-metadata"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("gen-"))
        .unwrap();
    let meta_log = segments(&gen_dir).pop().unwrap();
    let len = std::fs::metadata(&meta_log).unwrap().len();
    // A torn append: the first 20 bytes of a batch that claims 200.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&meta_log)
        .unwrap();
    f.write_all(&torn_batch(1 << 20)).unwrap();
    drop(f);
    let torn_len = std::fs::metadata(&meta_log).unwrap().len();
    // A read changes nothing: it names the torn event and leaves it.
    let out = krabka(&["read", s(&log), "--remote", &remote, "--from", "4999"]);
    assert!(out.status.success(), "{}", both(&out));
    let stderr = text(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("torn last event"))
        .unwrap_or_else(|| panic!("no line about the torn event:\n{}", both(&out)));
    assert!(
        line.starts_with("recovery: remote metadata: found"),
        "{line}"
    );
    assert!(line.contains(s(&meta_log)), "{line}");
    assert!(line.contains(&format!("at byte {len}")), "{line}");
    assert!(line.contains("20 bytes"), "{line}");
    assert_eq!(printed_seqs(&out), vec![4999, 5000]);
    assert_eq!(std::fs::metadata(&meta_log).unwrap().len(), torn_len);
    // The writer's open cuts it and says so, once.
    let out = krabka(&["tier", s(&log), "--remote", &remote]);
    assert!(out.status.success(), "{}", both(&out));
    let stderr = text(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("torn last event"))
        .unwrap_or_else(|| panic!("no line about the cut:\n{}", both(&out)));
    assert!(line.starts_with("recovery: remote metadata: cut"), "{line}");
    assert!(line.contains(&format!("at byte {len}")), "{line}");
    assert_eq!(std::fs::metadata(&meta_log).unwrap().len(), len);
    let out = krabka(&["tier", s(&log), "--remote", &remote]);
    assert!(out.status.success(), "{}", both(&out));
    assert!(!text(&out.stderr).contains("torn"), "{}", both(&out));
}

// ---- demo and termination signals ----

#[test]
fn demo_removes_its_temporary_directory_on_sigterm_and_sighup() {
    for (signal, code, name) in [("-TERM", 143, "SIGTERM"), ("-HUP", 129, "SIGHUP")] {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = bin()
            .args(["demo", "--records", "5000000"])
            .env("TMPDIR", tmp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.contains("temporary"), "{first}");
        std::thread::sleep(Duration::from_millis(300));
        let kill = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let exit = wait_at_most(&mut child, Duration::from_secs(60));
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(exit, Some(code), "{signal}: {stderr}");
        assert!(stderr.contains(&format!("stopped by {name}")), "{stderr}");
        assert!(
            stderr.contains("removed the temporary directory"),
            "{stderr}"
        );
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "{signal} left behind: {left:?}");
    }
}

// ---- messages ----

#[test]
fn read_from_past_the_next_seq_fails_out_of_range_locally_and_remote() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let _ = tiered_log(&log, &remote);
    let first_local = base_of(&segments(&log)[0]).to_string();
    for (remote_args, holds) in [
        (&[][..], format!("{first_local}..=5000")),
        (&["--remote", &remote][..], "1..=5000".to_owned()),
    ] {
        for from in ["5002", "9000"] {
            let mut args = vec!["read", s(&log), "--from", from];
            args.extend_from_slice(remote_args);
            let out = krabka(&args);
            assert_one_line_failure(
                &out,
                &[s(&log), "out of range", &format!("the log holds {holds}")],
            );
        }
        // The seq the next append gets is a clean, empty read.
        let mut args = vec!["read", s(&log), "--from", "5001"];
        args.extend_from_slice(remote_args);
        let out = krabka(&args);
        assert!(out.status.success(), "{}", both(&out));
        assert!(out.stdout.is_empty(), "{}", both(&out));
        // Seq 0 does not exist anywhere: a usage error that says where seqs start.
        let mut args = vec!["read", s(&log), "--from", "0"];
        args.extend_from_slice(remote_args);
        let out = krabka(&args);
        assert_eq!(out.status.code(), Some(2), "{}", both(&out));
        assert!(
            text(&out.stderr).contains("seqs start at 1"),
            "{}",
            both(&out)
        );
        assert!(!text(&out.stderr).contains("remote tier"), "{}", both(&out));
    }
}

#[test]
fn read_names_records_missing_below_the_recovery_point_in_a_clean_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 3000, "64MiB");
    let seg = segments(&log).pop().unwrap();
    // Cut the segment at a batch boundary (produce appends 1000 records a batch): the log held
    // 3000 records when it was closed.
    let cut = batches(&seg)[1];
    let (seq, pos) = (cut.first, cut.position);
    assert_eq!(seq, 1001);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(pos)
        .unwrap();
    let out = krabka(&["read", s(&log)]);
    assert_one_line_failure(&out, &["records 1001..=3000 are missing", "seq 1001"]);
    let stderr = text(&out.stderr);
    let line = stderr.lines().find(|l| l.starts_with("error:")).unwrap();
    assert!(!line.contains("  "), "a run of spaces in: {line}");
    assert!(line.contains("every seq up to 3000"), "{line}");
}

#[test]
fn repair_of_a_deleted_segment_says_it_recorded_a_hole_and_moved_no_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 3000, "64KiB");
    let victim = segments(&log)[1].clone();
    let first = base_of(&victim);
    let last = base_of(&segments(&log)[2]) - 1;
    std::fs::remove_file(&victim).unwrap();
    let out = krabka(&["repair", s(&log)]);
    assert!(out.status.success(), "{}", both(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "recorded seqs {first}..={last} as a hole (missing, no bytes to move"
        )),
        "{}",
        both(&out)
    );
    assert!(!stdout.contains("moved 0 bytes"), "{}", both(&out));
    assert!(!stdout.contains("moved 0 piece"), "{}", both(&out));
}

#[test]
fn a_hand_made_hole_marker_over_records_is_a_problem_not_a_hole() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 300, "4KiB");
    let qdir = log.join("quarantine");
    std::fs::create_dir(&qdir).unwrap();
    let marker = qdir.join("00000000000000000001-00000000000000000020.quarantined");
    std::fs::write(&marker, b"").unwrap();
    // The records are there: the read-only reader serves them.
    let out = krabka(&["read", s(&log), "--from", "1", "--max", "5"]);
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(printed_seqs(&out), vec![1, 2, 3, 4, 5]);
    // verify and open name the marker.
    let out = krabka(&["verify", s(&log)]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(text(&out.stdout).contains("hole marker"), "{}", both(&out));
    let mut child = bin()
        .args(["produce", s(&log)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(b"x\n");
    let out = child.wait_with_output().unwrap();
    assert_one_line_failure(
        &out,
        &["00000000000000000001-00000000000000000020.quarantined"],
    );
}
