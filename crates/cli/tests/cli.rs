//! The `krabka` command run as a user runs it: a real process, real files, exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .output()
        .expect("run krabka")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn produce(dir: &Path, records: u64, segment_bytes: &str) {
    let out = krabka(&[
        "produce",
        dir.to_str().unwrap(),
        "--generate",
        &records.to_string(),
        "--segment-bytes",
        segment_bytes,
    ]);
    assert!(
        out.status.success(),
        "produce failed: {}",
        text(&out.stderr)
    );
}

#[test]
fn bad_arguments_are_a_usage_error_with_exit_code_2() {
    for args in [
        &["no-such-command"][..],
        &["demo", "--records", "zero"],
        &["demo", "--records", "0"],
        &["read"],
        &["dump"],
        &["verify", "a", "b"],
        &["bench", "--sync", "sometimes"],
    ] {
        let out = krabka(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).starts_with("error:"), "{args:?}");
    }
    assert_eq!(krabka(&["--help"]).status.code(), Some(0));
}

#[test]
fn dump_prints_every_batch_with_its_crc_status_and_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 500, "64MiB");
    let seg = log.join("00000000000000000001.log");
    let out = krabka(&["dump", seg.to_str().unwrap(), "--values", "30"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\nLog starting offset: 1\n"), "{stdout}");
    // Batches follow each other: each starts where the previous one ended, at the seq after
    // its last; each is intact.
    let batches: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("baseOffset: "))
        .collect();
    assert!(!batches.is_empty(), "{stdout}");
    let field = |line: &str, name: &str| -> u64 {
        line.split(&format!(" {name}: "))
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    let (mut next_seq, mut next_pos) = (1, 0);
    for line in &batches {
        assert!(
            line.starts_with(&format!("baseOffset: {next_seq} lastOffset: ")),
            "{line}"
        );
        assert_eq!(field(line, "position"), next_pos, "{line}");
        for f in [" magic: 2 ", " compresscodec: none ", " CreateTime: 17"] {
            assert!(line.contains(f), "{f} missing in {line}");
        }
        assert!(line.ends_with(" isvalid: true"), "{line}");
        next_seq = field(line, "lastOffset") + 1;
        next_pos += field(line, "size");
    }
    assert_eq!(next_seq, 501);
    assert_eq!(next_pos, std::fs::metadata(&seg).unwrap().len());
    let records: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(records.len(), 500);
    for (i, line) in records.iter().enumerate() {
        assert!(
            line.starts_with(&format!("| offset: {} CreateTime: 17", i + 1)),
            "{line}"
        );
        for f in [
            "keySize: 11 ",
            "valueSize: ",
            "key: user-",
            "payload: {\"event\":",
        ] {
            assert!(line.contains(f), "{f} missing in {line}");
        }
    }
    assert!(
        stdout.contains(&format!(
            "500 records in {} batch(es), 0 bad batch(es)",
            batches.len()
        )),
        "{stdout}"
    );
}

#[test]
fn verify_names_the_corrupt_file_and_byte_position() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 3000, "256KiB");
    let ok = krabka(&["verify", log.to_str().unwrap()]);
    assert!(
        ok.status.success(),
        "{}{}",
        text(&ok.stdout),
        text(&ok.stderr)
    );
    assert!(text(&ok.stdout).contains("verify: OK"));

    // Where does the frame holding byte 5000 of the second segment start?
    let mut segs: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segs.sort();
    let victim = &segs[1];
    let dump = text(&krabka(&["dump", victim.to_str().unwrap()]).stdout);
    let frame_start = dump
        .lines()
        .filter_map(|l| l.split("position: ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse::<u64>().ok())
        .filter(|p| *p <= 5000)
        .max()
        .unwrap();
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[5000] ^= 0x5a;
    std::fs::write(victim, bytes).unwrap();

    let out = krabka(&["verify", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let report = text(&out.stdout) + &text(&out.stderr);
    let name = victim.file_name().unwrap().to_str().unwrap();
    let expected = format!("{name} at byte {frame_start}");
    assert!(report.contains(&expected), "`{expected}` not in:\n{report}");
    assert!(report.contains("CRC"), "{report}");
    let last = text(&out.stderr);
    assert_eq!(last.lines().count(), 1, "one error line: {last}");
    assert!(last.starts_with("error: 1 problem(s)"), "{last}");
    // The advice never says to delete segments (that loses their records and later ones).
    assert!(!last.contains("delete"), "{last}");
    assert!(last.contains("copy the directory aside"), "{last}");
}

#[test]
fn produce_syncs_before_it_reports() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let out = krabka(&["produce", log.to_str().unwrap(), "--generate", "100"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("appended 100 records"), "{stdout}");
    assert!(stdout.contains("synced to disk"), "{stdout}");
}

#[test]
fn a_log_in_use_is_refused_by_tier_and_read_remote_but_readable_locally() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    produce(&log, 500, "64KiB");
    let log_s = log.to_str().unwrap();
    // Another process (here: this one) holds the log open.
    let held = krabka_storage::Log::open(&log, krabka_storage::Options::default()).unwrap();
    for args in [
        &["tier", log_s, "--remote", &remote][..],
        &["tier", log_s, "--remote", &remote, "--watch"],
        &["read", log_s, "--remote", &remote, "--max", "1"],
        &["produce", log_s, "--generate", "1"],
    ] {
        let out = krabka(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("{log_s} is in use by another krabka process")),
            "{args:?}: {stderr}"
        );
    }
    // Without --remote, read takes no lock.
    let out = krabka(&["read", log_s, "--from", "1", "--max", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3);
    drop(held);
    let out = krabka(&["tier", log_s, "--remote", &remote]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn read_prints_records_from_a_seq_and_stops_at_max() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 2000, "64KiB");
    let out = krabka(&[
        "read",
        log.to_str().unwrap(),
        "--from",
        "1500",
        "--max",
        "10",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let seqs: Vec<u64> = stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs, (1500..1510).collect::<Vec<_>>());
}

#[test]
fn a_missing_directory_is_one_error_line_with_the_path_and_exit_code_1() {
    let out = krabka(&["verify", "/nonexistent/krabka-log"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("/nonexistent/krabka-log"), "{stderr}");
}

#[test]
fn demo_verifies_every_record_across_both_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let out = krabka(&["demo", "--records", "20000", "--dir", run.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("verified        all 20,000 records match"),
        "{stdout}"
    );
    for field in [
        "append ",
        "MB/s",
        "remote requests",
        "hit rate",
        "read-back",
        "remote only",
    ] {
        assert!(stdout.contains(field), "{field} missing in {stdout}");
    }
    // Most of the data went remote-only, and the log left behind verifies clean.
    let local_segments = std::fs::read_dir(run.join("log"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(local_segments <= 6, "{local_segments} local segments left");
    let verify = krabka(&["verify", run.join("log").to_str().unwrap()]);
    assert!(verify.status.success(), "{}", text(&verify.stdout));

    // The directory is refused a second time: the demo wants a fresh one.
    let again = krabka(&["demo", "--records", "10", "--dir", run.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("not empty"));
}

#[test]
fn tier_moves_old_segments_remote_and_read_spans_both_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    produce(&log, 3000, "64KiB");
    let log_s = log.to_str().unwrap();
    let out = krabka(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "128KiB",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("remote only"),
        "{}",
        text(&out.stdout)
    );

    // The local files alone no longer start at seq 1 ...
    let local = krabka(&["read", log_s, "--from", "1", "--max", "1"]);
    assert_eq!(local.status.code(), Some(1));
    assert!(
        text(&local.stderr).contains("--remote"),
        "{}",
        text(&local.stderr)
    );
    // ... but a read through the remote tier returns every record, in order, in a new process.
    let all = krabka(&["read", log_s, "--remote", &remote, "--from", "1"]);
    assert!(all.status.success(), "{}", text(&all.stderr));
    let seqs: Vec<u64> = text(&all.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs, (1..=3000).collect::<Vec<_>>());
}

#[cfg(not(feature = "s3"))]
#[test]
fn an_s3_remote_without_the_s3_feature_says_to_rebuild_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 100, "64MiB");
    let log_s = log.to_str().unwrap();
    let run = dir.path().join("run");
    for args in [
        &[
            "demo",
            "--records",
            "10",
            "--remote",
            "s3://bucket/p",
            "--dir",
            run.to_str().unwrap(),
        ][..],
        &["tier", log_s, "--remote", "s3://bucket/p"],
        &[
            "read",
            log_s,
            "--remote",
            "s3://bucket/p",
            "--endpoint",
            "http://127.0.0.1:9",
        ],
    ] {
        let out = krabka(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("s3://bucket/p"), "{args:?}: {stderr}");
        assert!(stderr.contains("--features s3"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_read_the_timeout_cuts_short_says_where_it_stopped_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce(&log, 100, "1MiB");
    let log_s = log.to_str().unwrap();
    // A zero timeout ends the read before its first record: never a silent, empty success.
    let out = krabka(&["read", log_s, "--timeout", "0s"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("--timeout ended it before seq 1"),
        "{}",
        text(&out.stderr)
    );
    // A timeout that does not cut the read changes nothing.
    let out = krabka(&["read", log_s, "--timeout", "1h"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 100);
    // Durations that would overflow or spin are usage errors, not panics.
    for args in [
        &["read", log_s, "--timeout", "18446744073709551615s"][..],
        &[
            "tier",
            log_s,
            "--remote",
            "fs://r",
            "--watch",
            "--interval",
            "0s",
        ],
        &[
            "tier",
            log_s,
            "--remote",
            "fs://r",
            "--watch",
            "--interval",
            "18446744073709551615s",
        ],
    ] {
        let out = krabka(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).contains("panicked"));
    }
}
