//! `krabka verify` never reports as damage what the next open repairs by itself: index files a
//! crash during local retention left missing (or stale) are rebuilt from their intact `.log`,
//! and a log `recover` rebuilt starts after the remote end without missing anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
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

fn ok(args: &[&str]) -> Output {
    let out = krabka(args);
    assert!(out.status.success(), "krabka {args:?}: {}", show(&out));
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A log of 3000 records in 64 KiB segments, tiered once to `remote`; with `keep_local`
/// false, local retention keeps none of the closed segments.
fn tiered_log(log: &Path, remote: &str, keep_local: bool) {
    ok(&[
        "produce",
        s(log),
        "--generate",
        "3000",
        "--segment-bytes",
        "64KiB",
    ]);
    let mut tier = vec!["tier", s(log), "--remote", remote];
    if !keep_local {
        tier.extend(["--local-retention-bytes", "0"]);
    }
    ok(&tier);
}

#[test]
fn verify_right_after_a_clean_recover_is_ok_and_says_where_the_older_records_are() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    tiered_log(&log, &remote, false);
    // The disk is lost; the log is rebuilt from the remote tier.
    std::fs::remove_dir_all(&log).unwrap();
    let recovered = ok(&["recover", s(&log), "--remote", &remote]);
    let text = String::from_utf8_lossy(&recovered.stdout).into_owned();
    let start: u64 = text
        .lines()
        .find_map(|l| l.split("continues at seq ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no start in {text}"));
    assert!(start > 1, "{text}");

    let out = krabka(&["verify", s(&log)]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("verify: OK"), "{}", show(&out));
    assert!(!stdout.contains("problem"), "{}", show(&out));
    assert!(
        stdout.contains(&format!(
            "remote  seq 1..={} are not in the local files: this is a tiered log",
            start - 1
        )),
        "{}",
        show(&out)
    );
    // And the records below the local start are indeed there, in the remote tier, but for
    // the never-tiered active segment's: the seqs after the recovered range up to the last
    // of the 3,000 written, which the recovery named lost and the read names too (exit 1).
    let recovered_end: u64 = text
        .lines()
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("recovered")?
                .split("seq 1..=")
                .nth(1)
        })
        .and_then(|r| r.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no recovered range in {text}"));
    assert_eq!(start, 3001, "{text}");
    assert!(recovered_end < 3000, "{text}");
    assert!(
        text.contains(&format!(
            "hole            seqs {}..=3000 are lost",
            recovered_end + 1
        )),
        "{text}"
    );
    let read = krabka(&[
        "read",
        s(&log),
        "--remote",
        &remote,
        "--from",
        "1",
        "--max",
        "5000",
    ]);
    assert_eq!(read.status.code(), Some(1), "{}", show(&read));
    assert!(
        String::from_utf8_lossy(&read.stderr)
            .contains(&format!("seqs {}..=3000 are lost", recovered_end + 1)),
        "{}",
        show(&read)
    );
    let printed = String::from_utf8_lossy(&read.stdout);
    let seqs: Vec<u64> = printed
        .lines()
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs, (1..=recovered_end).collect::<Vec<_>>());
}

/// The closed segment files of `log`, oldest first.
fn closed_segments(log: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop();
    logs
}

#[test]
fn index_files_a_crash_in_local_retention_left_are_rebuilt_at_the_next_open_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    tiered_log(&log, &remote, true);
    let segs = closed_segments(&log);
    let (first, second) = (&segs[0], &segs[1]);
    let index = first.with_extension("index");
    let time_index = first.with_extension("timeindex");
    let original = (
        std::fs::read(&index).unwrap(),
        std::fs::read(&time_index).unwrap(),
    );
    // Local retention removes a segment's `.index`, then its `.timeindex`, then its `.log`: a
    // SIGKILL between two of them leaves the first two states; the third is a stale index
    // (another segment's, which open does not take for this one's).
    let states: [(&str, &dyn Fn(), &Path); 3] = [
        (
            "killed after removing the .index",
            &|| std::fs::remove_file(&index).unwrap(),
            &index,
        ),
        (
            "killed after removing both index files",
            &|| {
                std::fs::remove_file(&index).unwrap();
                std::fs::remove_file(&time_index).unwrap();
            },
            &index,
        ),
        (
            "a stale .timeindex",
            &|| {
                std::fs::copy(second.with_extension("timeindex"), &time_index).unwrap();
            },
            &time_index,
        ),
    ];
    for (what, make, named) in states {
        make();
        let out = krabka(&["verify", s(&log), "--quiet"]);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("note: {}", named.display()))
                && stdout.contains("will be rebuilt at the next open"),
            "{what}: {}",
            show(&out)
        );
        assert!(stdout.contains("verify: OK"), "{what}: {}", show(&out));
        assert!(!stdout.contains("problem"), "{what}: {}", show(&out));

        // The next open (a read of that segment, whether open rebuilds the index or its first
        // read does after a clean close) writes both index files again, as they were.
        let read = ok(&[
            "read",
            s(&log),
            "--remote",
            &remote,
            "--from",
            "1",
            "--max",
            "3",
        ]);
        assert_eq!(
            String::from_utf8_lossy(&read.stdout).lines().count(),
            3,
            "{what}"
        );
        assert_eq!(std::fs::read(&index).unwrap(), original.0, "{what}");
        assert_eq!(std::fs::read(&time_index).unwrap(), original.1, "{what}");
        let again = ok(&["verify", s(&log), "--quiet"]);
        let again_out = String::from_utf8_lossy(&again.stdout);
        assert!(!again_out.contains("note:"), "{what}: {}", show(&again));
    }
}

#[test]
fn index_files_open_would_trust_but_that_point_at_wrong_batches_stay_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // 1 MiB segments: each closed one holds more than one of produce's batches (1000 records,
    // about 600 KiB), so its index has an entry past the first (which must point at byte 0).
    ok(&[
        "produce",
        s(&log),
        "--generate",
        "3000",
        "--segment-bytes",
        "1MiB",
    ]);
    let segs = closed_segments(&log);
    // A cut .index does not decode: open rebuilds it (a note). An entry pointing at the wrong
    // byte under a valid checksum decodes and agrees with the .timeindex: open trusts it, so
    // it is a problem (reads fall back to a scan, but the file is wrong).
    let index = segs[0].with_extension("index");
    let bytes = std::fs::read(&index).unwrap();
    let entries = u32::from_le_bytes(bytes[40..44].try_into().unwrap());
    assert!(entries >= 2, "{entries} index entries");
    std::fs::write(&index, &bytes[..bytes.len() - 1]).unwrap();
    let out = krabka(&["verify", s(&log)]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("will be rebuilt at the next open"),
        "{}",
        show(&out)
    );
    std::fs::write(&index, &bytes).unwrap();
    // The last entry pointing one byte past its batch, with a valid checksum: open trusts the
    // file.
    let mut entry = bytes.clone();
    let at = entry.len() - 4 - 8;
    let position = u64::from_le_bytes(entry[at..at + 8].try_into().unwrap());
    entry[at..at + 8].copy_from_slice(&(position + 1).to_le_bytes());
    let body = entry.len() - 4;
    let crc = crc32fast::hash(&entry[..body]);
    entry[body..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&index, &entry).unwrap();
    let out = krabka(&["verify", s(&log)]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("problem: {}", index.display())),
        "{}",
        show(&out)
    );
    assert!(
        !stdout.contains("rebuilt at the next open"),
        "{}",
        show(&out)
    );
}

/// The newest `.log` of `log`.
fn active_segment(log: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(log)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

#[test]
fn a_torn_tail_is_cut_at_the_next_open_not_damage_but_damage_before_intact_batches_is() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    ok(&["produce", s(&log), "--generate", "500"]);
    let active = active_segment(&log);
    let intact = std::fs::read(&active).unwrap();
    // What a write cut short leaves: the first part of a batch (here a copy of the first
    // batch's first 20 bytes, its length field promising more than the file holds).
    let mut torn = intact.clone();
    torn.extend_from_slice(&intact[..20]);
    std::fs::write(&active, &torn).unwrap();
    let out = ok(&["verify", s(&log)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("at byte {}", intact.len())) && stdout.contains("torn tail"),
        "{}",
        show(&out)
    );
    assert!(stdout.contains("verify: OK"), "{}", show(&out));
    // The next open cuts it, saving the bytes, and appends right after the last record.
    let mut produce = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["produce", s(&log)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        produce.stdin.take().unwrap().write_all(b"after\n").unwrap();
    }
    let produced = produce.wait_with_output().unwrap();
    assert!(produced.status.success(), "{}", show(&produced));
    let read = ok(&["read", s(&log), "--from", "501"]);
    assert_eq!(
        String::from_utf8_lossy(&read.stdout)
            .lines()
            .next()
            .map(|l| l.starts_with("501\t")),
        Some(true)
    );
    let saved: Vec<_> = std::fs::read_dir(log.join("quarantine"))
        .unwrap()
        .flatten()
        .collect();
    assert!(!saved.is_empty(), "the cut bytes are kept");
    ok(&["verify", s(&log)]);

    // Damage followed by intact batches is no torn tail: a problem, exit 1. Two produce runs
    // write two batches; the first one is damaged in the middle.
    let log2 = work.path().join("damaged");
    ok(&["produce", s(&log2), "--generate", "500"]);
    ok(&["produce", s(&log2), "--generate", "500"]);
    let active = active_segment(&log2);
    let mut bytes = std::fs::read(&active).unwrap();
    let first = 12 + u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
    assert!(first < bytes.len(), "a second batch follows the first");
    let mid = first / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&active, &bytes).unwrap();
    let out = krabka(&["verify", s(&log2)]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("torn tail"),
        "{}",
        show(&out)
    );
}
