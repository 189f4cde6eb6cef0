//! `krabka recover` as the README walks through it: run the demo with `--dir`, delete
//! everything but the remote directory, recover, read every record of the remote range back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn krabka(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .output()
        .expect("run krabka");
    assert!(
        out.status.success(),
        "krabka {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs krabka without asserting its exit status.
fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .output()
        .expect("run krabka")
}

/// The `(A, B)` of every `hole  seqs A..=B are lost` line of a recover report, in order.
fn holes(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("hole "))
        .map(|l| {
            let (a, b) = l
                .split("seqs ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|r| r.split_once("..="))
                .unwrap_or_else(|| panic!("a hole line without seqs: {l}"));
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

#[test]
fn demo_wipe_recover_read() {
    let work = tempfile::tempdir().unwrap();
    let demo = work.path().join("demo");
    let demo_s = demo.to_str().unwrap();
    krabka(&["demo", "--records", "5000", "--dir", demo_s]);
    // Lose the disk: everything but the remote directory.
    std::fs::remove_dir_all(demo.join("log")).unwrap();
    let log = format!("{demo_s}/log");
    let remote = format!("fs://{demo_s}/remote");
    let out = krabka(&["recover", &log, "--remote", &remote]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("recovered"))
        .unwrap_or_default()
        .to_owned();
    let end: u64 = line
        .split("..=")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no seq range in {stdout}"));
    assert!(line.contains("seq 1..="), "{stdout}");
    assert!(stdout.contains("ignored         nothing"), "{stdout}");
    // The demo's active segment never reached the remote: its seqs, up to the last of the
    // 5,000 written, are a named hole, and the log continues after them.
    assert_eq!(holes(&stdout), [(end + 1, 5000)], "{stdout}");
    assert!(stdout.contains("continues at seq 5001"), "{stdout}");
    let read = run(&["read", &log, "--remote", &remote]);
    let stderr = String::from_utf8_lossy(&read.stderr);
    assert_eq!(read.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("seqs {}..=5000 are lost", end + 1)),
        "{stderr}"
    );
    let lines: Vec<String> = String::from_utf8_lossy(&read.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len() as u64, end);
    for (i, l) in lines.iter().enumerate() {
        assert!(l.starts_with(&format!("{}\t", i + 1)), "{l}");
    }
    // Twice: the same range, nothing new.
    let again = krabka(&["recover", &log, "--remote", &remote]);
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(again.contains(&format!("seq 1..={end}")), "{again}");
    assert!(again.contains("already recorded"), "{again}");
    let reread = run(&["read", &log, "--remote", &remote]);
    assert_eq!(reread.status.code(), Some(1));
    assert_eq!(reread.stdout, read.stdout);
}

#[test]
fn recover_without_remote_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["recover", "/nonexistent-krabka-dir"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--remote"));
}

#[test]
fn one_damaged_remote_segment_costs_only_its_own_seqs_and_every_read_says_so() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("a").join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let log_s = log.to_str().unwrap();
    krabka(&[
        "produce",
        log_s,
        "--generate",
        "3000",
        "--segment-bytes",
        "32KiB",
    ]);
    let acknowledged = String::from_utf8_lossy(&krabka(&["read", log_s]).stdout).into_owned();
    krabka(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
    ]);
    // Truncate the `.log` object of one segment in the middle of the remote range.
    let part = std::fs::read_dir(&remote_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    assert!(logs.len() > 10, "{} segments", logs.len());
    let victim = &logs[logs.len() / 2];
    let bytes = std::fs::read(victim).unwrap();
    std::fs::write(victim, &bytes[..bytes.len() - 5]).unwrap();
    // Lose the disk, recover: the segments on both sides of the damaged one come back.
    let lost = work.path().join("b").join("orders");
    let lost_s = lost.to_str().unwrap();
    let out = krabka(&["recover", lost_s, "--remote", &remote]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let hole_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("hole"))
        .unwrap_or_else(|| panic!("no hole reported: {stdout}"));
    let (from, to) = hole_line
        .split("seqs ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|r| r.split_once("..="))
        .map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
        .unwrap();
    assert!(
        stdout.contains("recovered") && stdout.contains("seq 1..="),
        "{stdout}"
    );
    // A read prints every other record, names the lost seqs, and exits 1.
    let read = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["read", lost_s, "--remote", &remote])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&read.stderr);
    assert_eq!(read.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("seqs {from}..={to} are lost")),
        "{stderr}"
    );
    let printed = String::from_utf8_lossy(&read.stdout);
    let expected: Vec<&str> = acknowledged
        .lines()
        .filter(|l| {
            let seq: u64 = l.split('\t').next().unwrap().parse().unwrap();
            !(from..=to).contains(&seq)
        })
        .take(printed.lines().count())
        .collect();
    assert_eq!(printed.lines().collect::<Vec<_>>(), expected);
    assert!(
        printed.lines().count() as u64 >= to,
        "records after the hole were read"
    );
}

/// `krabka produce LOG --generate RECORDS` in 32 KiB segments, then one `tier` to the
/// filesystem remote `remote_dir` keeping nothing locally: the partition's directory there.
fn produce_and_tier(
    log: &std::path::Path,
    records: &str,
    remote_dir: &std::path::Path,
) -> std::path::PathBuf {
    let log_s = log.to_str().unwrap();
    let remote = format!("fs://{}", remote_dir.display());
    krabka(&[
        "produce",
        log_s,
        "--generate",
        records,
        "--segment-bytes",
        "32KiB",
    ]);
    krabka(&[
        "tier",
        log_s,
        "--remote",
        &remote,
        "--local-retention-bytes",
        "0",
    ]);
    std::fs::read_dir(remote_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap()
}

#[test]
fn a_damaged_last_remote_segment_is_a_hole_and_its_seqs_are_never_given_again() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("a").join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let part = produce_and_tier(&log, "2000", &remote_dir);
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let newest = logs.last().unwrap();
    let bytes = std::fs::read(newest).unwrap();
    std::fs::write(newest, &bytes[..bytes.len() - 5]).unwrap();
    let lost = work.path().join("b").join("orders");
    let lost_s = lost.to_str().unwrap();
    let out = krabka(&["recover", lost_s, "--remote", &remote]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let hole_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("hole"))
        .unwrap_or_else(|| panic!("no hole reported: {stdout}"));
    let (from, to) = hole_line
        .split("seqs ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|r| r.split_once("..="))
        .map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
        .unwrap();
    // The newest segment held the last seqs the writer acknowledged.
    let tiered_end = std::fs::read_dir(&log)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse::<u64>().ok()
        })
        .max()
        .unwrap();
    assert_eq!(to + 1, tiered_end, "{stdout}");
    assert!(from <= to && from > 1, "{stdout}");
    // The seqs after it up to the last acknowledged (the active segment, never tiered) are
    // lost with the disk too: one hole from the damaged segment's first seq to seq 2000.
    let written = 2000;
    assert_eq!(holes(&stdout), [(from, to), (from, written)], "{stdout}");
    assert!(
        stdout.contains(&format!("continues at seq {}", written + 1)),
        "{stdout}"
    );
    // A record appended to the recovered log gets the seq after the lost ones: never reused.
    let mut produce = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["produce", lost_s])
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
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let read = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["read", lost_s, "--remote", &remote])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&read.stderr);
    assert_eq!(read.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("seqs {from}..={written} are lost")),
        "{stderr}"
    );
    let printed = String::from_utf8_lossy(&read.stdout);
    let last = printed.lines().last().unwrap();
    assert!(last.starts_with(&format!("{}\t", written + 1)), "{last}");
    assert!(last.ends_with("\tafter"), "{last}");
    assert_eq!(printed.lines().count() as u64, from, "{printed}");
}

/// `--topic-id` alone, or `--topic` and `--partition`, recover a partition into a directory of
/// any name (a renamed directory, a rehearsal elsewhere), and read it back record for record.
#[test]
fn recover_into_a_directory_of_any_name_by_topic_or_topic_id() {
    let work = tempfile::tempdir().unwrap();
    let demo = work.path().join("demo");
    let demo_s = demo.to_str().unwrap();
    krabka(&["demo", "--records", "3000", "--dir", demo_s]);
    let remote = format!("fs://{demo_s}/remote");
    let topic_file = std::fs::read_to_string(demo.join("log").join("topic")).unwrap();
    let id = topic_file
        .lines()
        .find_map(|l| l.strip_prefix("id "))
        .unwrap()
        .to_owned();
    let reference = krabka(&["read", &format!("{demo_s}/log"), "--remote", &remote]);
    let reference = String::from_utf8_lossy(&reference.stdout).into_owned();
    // The name gives no topic of the remote: refused, naming the ways to say which.
    let nameless = work.path().join("rehearsal-a");
    let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["recover", nameless.to_str().unwrap(), "--remote", &remote])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no partition 0 of topic `rehearsal-a`"),
        "{err}"
    );
    assert!(err.contains("--topic-id"), "{err}");
    for (name, extra) in [
        ("rehearsal-b", vec!["--topic-id", id.as_str()]),
        ("rehearsal-c", vec!["--topic", "log", "--partition", "0"]),
    ] {
        let dir = work.path().join(name);
        let dir_s = dir.to_str().unwrap();
        let mut args = vec!["recover", dir_s, "--remote", &remote];
        args.extend(extra);
        let out = krabka(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!("topic id {id}")), "{stdout}");
        let read = run(&["read", dir_s, "--remote", &remote]);
        let stderr = String::from_utf8_lossy(&read.stderr);
        let read = String::from_utf8_lossy(&read.stdout);
        // The local active segment of the demo never reached the remote: the recovered log
        // holds the remote range, a prefix of what the original reads, and the read names
        // the rest (up to the last of the 3,000 written) as lost, exiting 1.
        assert!(!read.is_empty() && reference.starts_with(&*read), "{name}");
        let next = read.lines().count() + 1;
        assert!(
            stderr.contains(&format!("seqs {next}..=3000 are lost")),
            "{name}: {stderr}"
        );
        assert!(stderr.contains("the log is incomplete"), "{name}: {stderr}");
        // The directory now records the partition: asking for another is refused.
        let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
            .args(["recover", dir_s, "--remote", &remote, "--topic", "other"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("records partition"), "{err}");
    }
}

/// A log whose recovery cost it seqs keeps `tiering-lost-seqs`: opening it never reports that
/// file as one storage ignored.
#[test]
fn tiering_files_are_never_reported_as_ignored() {
    let work = tempfile::tempdir().unwrap();
    let demo = work.path().join("demo");
    let demo_s = demo.to_str().unwrap();
    krabka(&["demo", "--records", "2000", "--dir", demo_s]);
    let log = demo.join("log");
    for f in ["tiering-lost-seqs", "tiering-log-start"] {
        // Present or not, such files are tiering's: write a stray temporary of each.
        std::fs::write(log.join(format!("{f}.tmp")), b"partial").unwrap();
    }
    let out = krabka(&[
        "read",
        log.to_str().unwrap(),
        "--remote",
        &format!("fs://{demo_s}/remote"),
        "--max",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("ignored"), "{err}");
}

/// A log of 3,000 records tiered in 32 KiB segments by `tier` (which keeps the partition
/// head): the remote directory, the partition directory, and the segment stems in seq order.
struct Bucket {
    _work: tempfile::TempDir,
    root: std::path::PathBuf,
    remote: String,
    part: std::path::PathBuf,
    stems: Vec<String>,
    /// The last seq tiered (the newest segment's end).
    end: u64,
    /// The last seq written (the partition head's `writer_last_seq`): the seqs above `end`
    /// were in the local active segment only.
    written: u64,
}

fn tiered_bucket() -> Bucket {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().to_path_buf();
    let log = root.join("a").join("t1");
    let remote_dir = root.join("R");
    let remote = format!("fs://{}", remote_dir.display());
    let part = produce_and_tier(&log, "3000", &remote_dir);
    let mut stems: Vec<String> = std::fs::read_dir(&part)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".manifest").map(str::to_owned))
        .collect();
    stems.sort();
    assert!(stems.len() > 10, "{stems:?}");
    // The local log's active segment starts right after the last tiered seq.
    let end = std::fs::read_dir(&log)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse::<u64>().ok()
        })
        .max()
        .unwrap()
        - 1;
    Bucket {
        _work: work,
        root,
        remote,
        part,
        stems,
        end,
        written: 3000,
    }
}

impl Bucket {
    /// The newest segment's first seq.
    fn newest_start(&self) -> u64 {
        self.stems.last().unwrap()[..20].parse().unwrap()
    }

    fn newest(&self) -> std::path::PathBuf {
        self.part.join(self.stems.last().unwrap())
    }

    /// Runs `recover` into a new directory `name`; its stdout.
    fn recover(&self, name: &str) -> (std::path::PathBuf, String) {
        let dir = self.root.join(name);
        let out = krabka(&[
            "recover",
            dir.to_str().unwrap(),
            "--remote",
            &self.remote,
            "--topic",
            "t1",
        ]);
        (dir, String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `read DIR --remote`: exit code, stdout, stderr.
    fn read(&self, dir: &std::path::Path) -> (Option<i32>, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
            .args(["read", dir.to_str().unwrap(), "--remote", &self.remote])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// What `recover` must say and leave when the newest segment's seqs `from..=end` are lost,
/// and with them the never-tiered active segment's up to `written`: named holes, the local
/// log after them, reads failing naming them, and appends above them.
fn assert_newest_lost_and_never_reused(b: &Bucket, dir: &std::path::Path, stdout: &str) {
    let (from, end, to) = (b.newest_start(), b.end, b.written);
    assert!(
        stdout.contains(&format!("hole            seqs {from}..={end} are lost")),
        "{stdout}"
    );
    assert_eq!(holes(stdout), [(from, end), (from, to)], "{stdout}");
    assert!(
        stdout.contains(&format!("continues at seq {}", to + 1)),
        "{stdout}"
    );
    let (code, printed, stderr) = b.read(dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("seqs {from}..={to} are lost")),
        "{stderr}"
    );
    assert_eq!(printed.lines().count() as u64, from - 1);
    krabka(&[
        "produce",
        dir.to_str().unwrap(),
        "--generate",
        "3",
        "--seed",
        "7",
    ]);
    let (_, printed, _) = b.read(dir);
    let seqs: Vec<u64> = printed
        .lines()
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs.len() as u64, from - 1 + 3);
    assert_eq!(
        seqs[seqs.len() - 3..],
        [to + 1, to + 2, to + 3],
        "appended above {to}"
    );
}

#[test]
fn a_deleted_newest_segment_the_head_lists_is_a_named_hole_and_produce_appends_above_it() {
    let b = tiered_bucket();
    for e in std::fs::read_dir(&b.part).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if name.starts_with(b.stems.last().unwrap().as_str()) {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let (dir, stdout) = b.recover("n");
    assert!(
        stdout.contains("the partition head lists segment")
            && stdout.contains("no object of it is left"),
        "{stdout}"
    );
    assert_newest_lost_and_never_reused(&b, &dir, &stdout);
}

#[test]
fn a_damaged_newest_manifest_costs_its_whole_segment_never_one_guessed_seq() {
    let b = tiered_bucket();
    let manifest = b.newest().with_extension("manifest");
    let mut bytes = std::fs::read(&manifest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&manifest, &bytes).unwrap();
    let (dir, stdout) = b.recover("n");
    assert!(stdout.contains("corrupt manifest"), "{stdout}");
    assert_newest_lost_and_never_reused(&b, &dir, &stdout);
}

#[test]
fn a_newest_manifest_replaced_by_the_previous_one_is_a_hole_past_which_the_log_continues() {
    let b = tiered_bucket();
    let n = b.stems.len();
    std::fs::copy(
        b.part.join(format!("{}.manifest", b.stems[n - 2])),
        b.part.join(format!("{}.manifest", b.stems[n - 1])),
    )
    .unwrap();
    let (dir, stdout) = b.recover("n");
    assert!(
        stdout.contains("manifest does not match its key"),
        "{stdout}"
    );
    assert_newest_lost_and_never_reused(&b, &dir, &stdout);
}

/// A stray object beyond everything written costs no seq: the only hole is the active
/// segment's, never tiered (up to the partition head's `writer_last_seq`), and the log
/// continues right after it, not after the stray's seqs.
#[test]
fn a_stray_log_object_beyond_everything_written_is_ignored_and_costs_no_seq() {
    let b = tiered_bucket();
    let stray = "00000000000000009999-11111111-2222-4333-8444-555555555555.log";
    std::fs::copy(b.newest().with_extension("log"), b.part.join(stray)).unwrap();
    let (dir, stdout) = b.recover("n");
    assert_eq!(holes(&stdout), [(b.end + 1, b.written)], "{stdout}");
    assert!(
        stdout.contains(&format!(
            "recovered       {} segments, seq 1..={}",
            b.stems.len(),
            b.end
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("continues at seq {}", b.written + 1)),
        "{stdout}"
    );
    let part_name = b.part.file_name().unwrap().to_str().unwrap();
    assert!(
        stdout.contains(&format!("{part_name}/{stray}: a stray object")),
        "{stdout}"
    );
    let (code, printed, stderr) = b.read(&dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("seqs {}..={} are lost", b.end + 1, b.written)),
        "{stderr}"
    );
    assert_eq!(printed.lines().count() as u64, b.end);
}
