//! Smoke test: every harness runs end to end on tiny sizes and prints complete tables.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_krabka-bench"))
        .args(args)
        .output()
        .expect("run krabka-bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn storage_quick_prints_every_case_for_every_value_size() {
    let out = run(&["storage", "--quick", "--bytes", "65536"]);
    assert!(!out.contains("failed"), "{out}");
    for case in [
        "krabka append",
        "commitlog append_msg",
        "okaywal entry commit",
        "raw write + sync_data",
        "okaywal recovery scan",
        "raw pread",
    ] {
        assert!(out.matches(case).count() >= 3, "{case} missing:\n{out}");
    }
    assert!(out.matches("| 1.00x |").count() >= 3 * 7, "{out}");
}

#[test]
fn tiering_quick_measures_both_backends() {
    let out = run(&["tiering", "--quick", "--bytes", "4194304"]);
    for line in [
        "upload to remote-fs",
        "upload to S3 (s3s-fs)",
        "cold point read from remote-fs",
        "cached re-read from S3 (s3s-fs)",
        "scan of the remote-only range (S3 (s3s-fs))",
        "bare aws-sdk-s3 PutObject",
        "8 files in flight",
        "one file at a time",
        "one bare ranged GET of the same 1 MiB chunk",
        "local Log::read of the same seq",
        "8 concurrent 1 MiB ranged GETs",
        "one stream of 1 MiB ranged GETs",
        "ownership: store requests per copied segment of an owned upload to remote-fs",
        "ownership: store requests of an owned first open on S3 (s3s-fs)",
        "ownership: requests the S3 server received per copied segment",
        "ownership: upload to remote-fs, owned (open_owned) against unowned",
        "ownership: upload to S3 (s3s-fs), owned (open_owned) against unowned",
    ] {
        assert!(out.contains(line), "{line} missing:\n{out}");
    }
}

#[test]
fn transform_quick_measures_every_transform_on_both_backends() {
    let out = run(&["transform", "--quick", "--bytes", "4194304"]);
    for data in ["text-like", "random 1 KiB"] {
        for backend in ["remote-fs", "S3 (s3s-fs)"] {
            for variant in [
                "untransformed",
                "zstd:3",
                "AES-256-GCM",
                "zstd:3 + AES-256-GCM",
            ] {
                let row = format!("| {backend} | {variant} |");
                assert!(
                    out.lines().any(|l| l.contains(data) && l.contains(&row)),
                    "{data} {row} missing:\n{out}"
                );
            }
        }
    }
}

#[test]
fn scale_quick_tiers_every_partition_and_reports_every_figure() {
    let out = run(&["scale", "--quick"]);
    for line in [
        "500 partitions",
        "| tier everything",
        "| peak RSS",
        "| RSS per idle partition (opened)",
        "| threads (peak)",
        "| open fds (peak)",
        "| read p99 idle / storm",
        "| first copy: last partition / mean",
    ] {
        assert!(out.contains(line), "{line} missing:\n{out}");
    }
}

#[test]
fn replica_quick_reports_every_row() {
    let out = run(&["replica", "--quick", "--partitions", "20"]);
    assert!(!out.contains("failed"), "{out}");
    for row in [
        "scan of the remote range by a ReadReplica",
        "visibility on",
        "idle refresh on",
        "nothing changing: requests/s one replica process sends",
        "nothing changing, requests_per_second",
    ] {
        assert!(out.contains(row), "{row} missing:\n{out}");
    }
}
