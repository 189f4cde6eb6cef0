//! The corruption matrix across layers, run as a user runs krabka: every kind of file of a
//! tiered log (local segments and indexes, the recovery point, the durable metadata, the remote
//! objects) × every kind of damage × every entry point of the built `krabka` binary (`read`,
//! `read --remote`, `verify`, `tier`, `produce`). For each case: a command either succeeds with
//! exactly the records that were acknowledged — never fewer, never different bytes, never a
//! reused or skipped seq — or fails with exit 1 and an error line naming a file; nothing panics.
//! The library-level matrices (`Log`, the metadata manager, `TieredLog` reads) live next to
//! their crates; this one proves the promises hold where a user meets them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use krabka_storage::testkit;

const RECORDS: u64 = 300;

fn krabka(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run krabka");
    if let Some(input) = stdin {
        // A command that fails before it reads stdin closes the pipe: not an error here.
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    }
    child.wait_with_output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout (tail)\n{}\n--- stderr\n{}",
        out.status.code(),
        text(&out.stdout)
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .join("\n"),
        text(&out.stderr)
    )
}

/// `seq → line` of a `krabka read` output.
fn records(out: &Output) -> BTreeMap<u64, String> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| Some((l.split('\t').next()?.parse().ok()?, l.to_owned())))
        .collect()
}

struct Case {
    _tmp: tempfile::TempDir,
    log: PathBuf,
    remote: PathBuf,
    url: String,
    /// Every record as `krabka read` printed it before the damage.
    reference: BTreeMap<u64, String>,
}

/// A log of `RECORDS` generated records in several 4 KiB segments, tiered once to a filesystem
/// remote; with `remote_only`, local retention keeps none of the closed segments.
fn setup(remote_only: bool) -> Case {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let remote = tmp.path().join("remote");
    let url = format!("fs://{}", remote.display());
    let out = krabka(
        &[
            "produce",
            s(&log),
            "--generate",
            &RECORDS.to_string(),
            "--segment-bytes",
            "4KiB",
        ],
        None,
    );
    assert!(out.status.success(), "{}", show(&out));
    let mut tier = vec!["tier", s(&log), "--remote", &url];
    if remote_only {
        tier.extend(["--local-retention-bytes", "0"]);
    }
    let out = krabka(&tier, None);
    assert!(out.status.success(), "{}", show(&out));
    let out = krabka(
        &[
            "read",
            s(&log),
            "--remote",
            &url,
            "--from",
            "1",
            "--max",
            "100000",
        ],
        None,
    );
    assert!(out.status.success(), "{}", show(&out));
    let reference = records(&out);
    assert_eq!(reference.len() as u64, RECORDS);
    Case {
        _tmp: tmp,
        log,
        remote,
        url,
        reference,
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    ClosedLog,
    ActiveLog,
    Index,
    TimeIndex,
    RecoveryPoint,
    MetadataLog,
    MetadataCurrent,
    RemoteLog,
    RemoteIndex,
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    FlipStart,
    FlipMiddle,
    FlipEnd,
    /// A byte of the first record batch's `batchLength` (bytes 8..12), which its CRC does not
    /// cover (for other files, a byte of their header).
    FlipBatchLength,
    /// A byte of the first record batch's `partitionLeaderEpoch` (bytes 12..16), which its CRC
    /// does not cover either: -1 becomes a negative epoch no leader writes.
    FlipLeaderEpoch,
    TruncateMidBatch,
    TruncateToZero,
    Delete,
    ReplaceWithDirectory,
    StraySegmentFile,
}

const KINDS: [Kind; 9] = [
    Kind::ClosedLog,
    Kind::ActiveLog,
    Kind::Index,
    Kind::TimeIndex,
    Kind::RecoveryPoint,
    Kind::MetadataLog,
    Kind::MetadataCurrent,
    Kind::RemoteLog,
    Kind::RemoteIndex,
];
const DAMAGES: [Damage; 10] = [
    Damage::FlipStart,
    Damage::FlipMiddle,
    Damage::FlipEnd,
    Damage::FlipBatchLength,
    Damage::FlipLeaderEpoch,
    Damage::TruncateMidBatch,
    Damage::TruncateToZero,
    Damage::Delete,
    Damage::ReplaceWithDirectory,
    Damage::StraySegmentFile,
];

fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "quarantine") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|e| e == ext) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The file of `kind` in `case` (the local segments of the log directory itself, not of the
/// metadata manager's own log).
fn target(kind: Kind, case: &Case) -> PathBuf {
    let local = |ext| -> Vec<PathBuf> {
        fs::read_dir(&case.log)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    match kind {
        Kind::ClosedLog => local("log")[1].clone(),
        Kind::ActiveLog => local("log").last().unwrap().clone(),
        Kind::Index => local("index")[1].clone(),
        Kind::TimeIndex => local("timeindex")[1].clone(),
        Kind::RecoveryPoint => case.log.join(krabka_storage::RECOVERY_POINT_FILE_NAME),
        Kind::MetadataLog => files_with(&case.log.join("remote-metadata"), "log")[0].clone(),
        Kind::MetadataCurrent => case.log.join("remote-metadata").join("CURRENT"),
        Kind::RemoteLog => files_with(&case.remote, "log")[1].clone(),
        Kind::RemoteIndex => files_with(&case.remote, "index")[1].clone(),
    }
}

fn flip(path: &Path, at: usize) {
    testkit::xor_byte(path, at as u64, 0x5a).unwrap();
}

fn set_len(path: &Path, len: u64) {
    testkit::set_len(path, len).unwrap();
}

/// Applies `damage`; false when it means nothing for this file.
fn apply(damage: Damage, kind: Kind, path: &Path, case: &Case) -> bool {
    let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    match damage {
        Damage::FlipStart | Damage::FlipMiddle | Damage::FlipEnd | Damage::TruncateMidBatch
            if len < 8 =>
        {
            return false;
        }
        Damage::FlipBatchLength | Damage::FlipLeaderEpoch if len < 16 => return false,
        Damage::FlipStart => flip(path, 0),
        Damage::FlipMiddle => flip(path, (len / 2) as usize),
        Damage::FlipEnd => flip(path, len as usize - 1),
        Damage::FlipBatchLength => flip(path, 10),
        Damage::FlipLeaderEpoch => flip(path, 13),
        Damage::TruncateMidBatch => set_len(path, len - 7),
        Damage::TruncateToZero => set_len(path, 0),
        Damage::Delete => fs::remove_file(path).unwrap(),
        Damage::ReplaceWithDirectory => {
            fs::remove_file(path).unwrap();
            fs::create_dir(path).unwrap();
        }
        Damage::StraySegmentFile => {
            if !matches!(kind, Kind::ActiveLog) {
                return false;
            }
            fs::write(
                case.log.join(krabka_storage::segment::segment_file_name(
                    RECORDS + 100,
                    "log",
                )),
                b"",
            )
            .unwrap();
        }
    }
    true
}

#[derive(Default)]
struct Tally {
    cases: u64,
    runs: u64,
    ok: u64,
    refused: u64,
}

/// Checks one command's outcome: no panic; exit 0 or 1; on 1 an error line naming a path.
fn check_outcome(out: &Output, what: &str, tally: &mut Tally) -> bool {
    tally.runs += 1;
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: {}", show(out));
    match out.status.code() {
        Some(0) => {
            tally.ok += 1;
            true
        }
        Some(1) => {
            tally.refused += 1;
            let error = stderr
                .lines()
                .find(|l| l.starts_with("error:"))
                .unwrap_or_default();
            assert!(
                error.contains('/'),
                "{what}: the error names no file: {}",
                show(out)
            );
            false
        }
        other => panic!("{what}: exit {other:?}: {}", show(out)),
    }
}

/// Checks a `read` output: every printed record is byte-for-byte the acknowledged one, in seq
/// order from `from`; when the command succeeded, nothing up to the end is missing.
fn check_read(out: &Output, case: &Case, from: u64, what: &str, tally: &mut Tally) {
    let ok = check_outcome(out, what, tally);
    let got = records(out);
    let mut expect = from;
    for (seq, line) in &got {
        assert_eq!(*seq, expect, "{what}: seq {seq} printed, {expect} expected");
        if let Some(reference) = case.reference.get(seq) {
            assert_eq!(line, reference, "{what}: record {seq} differs");
        }
        expect += 1;
    }
    if ok {
        assert!(
            expect > RECORDS,
            "{what}: exit 0 but printed only up to seq {}",
            expect - 1
        );
    }
}

fn run_case(kind: Kind, damage: Damage, tally: &mut Tally) {
    let remote_only = matches!(kind, Kind::RemoteLog | Kind::RemoteIndex);
    let case = setup(remote_only);
    let path = target(kind, &case);
    if !apply(damage, kind, &path, &case) {
        return;
    }
    tally.cases += 1;
    let what = |cmd: &str| format!("{kind:?} × {damage:?} × {cmd}");
    let (log, url) = (s(&case.log), case.url.as_str());
    // verify first: the commands that open the log rebuild damaged index files (derived
    // data) before it would see them.
    let out = krabka(&["verify", log], None);
    let verified = check_outcome(&out, &what("verify"), tally);
    if matches!(
        kind,
        Kind::ClosedLog | Kind::ActiveLog | Kind::Index | Kind::TimeIndex | Kind::RecoveryPoint
    ) && !matches!(damage, Damage::Delete if matches!(kind, Kind::RecoveryPoint))
    {
        // Damage to the local segments, their indexes or the recovery point is always found
        // by verify (a deleted recovery point only loses a safeguard). Index files the next
        // open rebuilds from their intact .log are named as such, with exit 0.
        let rebuilt = matches!(kind, Kind::Index | Kind::TimeIndex)
            && text(&out.stdout).contains("will be rebuilt at the next open");
        assert!(
            !verified || rebuilt,
            "{}: verify passed damaged data",
            what("verify")
        );
    }
    // Local reads see only what is on local disk.
    if !remote_only {
        let out = krabka(&["read", log, "--from", "1", "--max", "100000"], None);
        check_read(&out, &case, 1, &what("read"), tally);
    }
    let out = krabka(
        &[
            "read", log, "--remote", url, "--from", "1", "--max", "100000",
        ],
        None,
    );
    check_read(&out, &case, 1, &what("read --remote"), tally);
    let out = krabka(&["tier", log, "--remote", url], None);
    check_outcome(&out, &what("tier"), tally);
    let out = krabka(&["produce", log], Some("one more\n"));
    if check_outcome(&out, &what("produce"), tally) {
        // A record was appended: it must have taken the next seq, never a reused one.
        let after = krabka(
            &[
                "read",
                log,
                "--remote",
                url,
                "--from",
                &(RECORDS + 1).to_string(),
                "--max",
                "10",
            ],
            None,
        );
        if after.status.success() {
            let got = records(&after);
            assert_eq!(
                got.keys().copied().collect::<Vec<_>>(),
                vec![RECORDS + 1],
                "{}: {}",
                what("produce"),
                show(&after)
            );
        }
    }
    // After tier and produce ran, whatever reads is still exact.
    let out = krabka(
        &[
            "read", log, "--remote", url, "--from", "1", "--max", "100000",
        ],
        None,
    );
    check_read(&out, &case, 1, &what("read --remote after"), tally);
}

#[test]
fn cross_layer_corruption_matrix_through_the_binary() {
    let mut tally = Tally::default();
    for kind in KINDS {
        for damage in DAMAGES {
            run_case(kind, damage, &mut tally);
        }
    }
    println!(
        "cross-layer corruption matrix: {} cases × entry points = {} runs ({} exact, {} refused naming a file)",
        tally.cases, tally.runs, tally.ok, tally.refused
    );
    assert!(tally.cases >= 50, "{}", tally.cases);
}
