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
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("charts").join("storage.svg");
    let out = run(&[
        "storage",
        "--quick",
        "--bytes",
        "65536",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(!out.contains("failed"), "{out}");
    for case in [
        "krabka append",
        "commitlog append_msg",
        "okaywal entry commit",
        "raw write + sync_data",
        "okaywal recovery scan",
        "krabka append_raw_batch",
        "krabka append_batch, lz4",
        "krabka append_batch, zstd",
        "raw write of 100 + one CRC-32C of them",
        "krabka read_batches(seq, 1 MiB), bytes counted",
        "krabka read_batches(seq, 1 MiB) + records()",
        "raw read, 1 MiB + CRC-32C per batch, nothing decoded",
        "raw pread of the record's whole batch, position known",
        "raw pread of the record's batch, position known",
        "raw pread of the bare value",
    ] {
        assert!(out.matches(case).count() >= 3, "{case} missing:\n{out}");
    }
    // One krabka and one raw row per group: 9 groups at each of 3 sizes.
    assert!(out.matches("| 1.00x |").count() >= 3 * 9 * 2, "{out}");
    // Every target has a ratio at every size (a failed row would print "failed").
    let targets = out
        .split("## targets")
        .nth(1)
        .expect("targets table")
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| target") && !l.starts_with("| ---"))
        .collect::<Vec<_>>();
    assert!(targets.len() >= 10, "{out}");
    for row in &targets {
        let ratios = row.matches("x |").count() + row.matches("x) |").count();
        assert_eq!(ratios, 3, "{row}");
    }
    for target in [
        "append_batch of 100, no sync / raw write of the 100 values",
        "append of one record, no sync / raw write of its value",
        "sequential read_batches (1 MiB) / raw 1 MiB reads of the same segment files",
        "sequential Log::read (decoded) / commitlog read",
        "random point read, log of single appends / bare pread of the record's batch",
        "random point read p50, log in batches of 100 / bare pread of the whole batch",
        "bytes on disk / value bytes, batches of 100",
        "append + fdatasync, 1 thread, preallocated segment / raw pwrite + fdatasync into a fallocated file",
        "append + fdatasync, 4 threads, preallocated segment / okaywal 4 threads, entry commit each",
    ] {
        assert!(
            targets.iter().any(|l| l.contains(target)),
            "{target} missing:\n{out}"
        );
    }
    let svg = std::fs::read_to_string(&chart).expect("chart written");
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    // Two legend swatches, then a bar per target and size it applies to: 3 sizes for ten
    // targets (the point read and each decoded read against its floor, and the two synced
    // appends among them), 100 B and 1 KiB for the decoded read against commitlog, 1 KiB for
    // the decoded and the point read against commitlog, 100 B for the bytes on disk.
    assert_eq!(
        svg.matches("<rect x=").count(),
        2 + 10 * 3 + 2 + 2 + 1,
        "{svg}"
    );
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

#[test]
fn tail_quick_reports_every_row_with_its_target() {
    let out = run(&[
        "tail",
        "--quick",
        "--partitions",
        "20",
        "--bytes",
        "4194304",
    ]);
    for row in [
        "bucket-durable append on S3 (s3s-fs) (Durability::Bucket, window 50 ms), 1 appender",
        "bucket-durable append on S3 (s3s-fs), 8 appenders",
        "bucket-durable append throughput",
        "20 partitions sharing one TailWriter at a 250 ms window",
        "replica visibility on",
        "request cost on S3 (s3s-fs), classic (segments only)",
        "request cost on S3 (s3s-fs), tail, Durability::Local",
        "request cost on S3 (s3s-fs), tail, Durability::Bucket",
    ] {
        let line = out
            .lines()
            .find(|l| l.contains(row))
            .unwrap_or_else(|| panic!("{row} missing:\n{out}"));
        // Every compared row has a figure (the visibility row may say why it has none).
        assert!(
            line.contains("met") || line.contains("not available") || !line.contains("≤"),
            "{line}"
        );
    }
    // The targets: p99 bounds, the throughput ratio and the PUT rate, each met or not.
    assert!(
        out.matches(": met").count() + out.matches(": not met").count() >= 4,
        "{out}"
    );
}
