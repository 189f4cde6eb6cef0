//! `--compression`, `--encryption-key-file` and `--encryption-key-dir` as a user runs them:
//! tier compressed and encrypted segments to a filesystem remote, read everything back
//! identical, and get a clear error — never garbage — without the key or with the wrong one;
//! rotate keys; recover around a damaged encrypted segment; key files that are no key files;
//! scratch directories of a killed copy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.len();
            }
        }
    }
    total
}

fn read_remote(log: &Path, url: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "read",
        s(log),
        "--remote",
        url,
        "--from",
        "1",
        "--max",
        "100000",
    ];
    args.extend_from_slice(extra);
    krabka(&args)
}

#[test]
fn compressed_and_encrypted_tiers_read_back_identical_and_refuse_a_missing_or_wrong_key() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("master.key");
    std::fs::write(&key, "11".repeat(32)).unwrap();
    let wrong = tmp.path().join("wrong.key");
    std::fs::write(&wrong, [7u8; 32]).unwrap();
    let mut reference = None;
    let mut stored = Vec::new();
    for (name, flags) in [
        ("plain", vec![]),
        ("zstd", vec!["--compression", "zstd:3"]),
        (
            "both",
            vec!["--compression", "zstd", "--encryption-key-file", s(&key)],
        ),
    ] {
        let log = tmp.path().join(name).join("log");
        let remote = tmp.path().join(name).join("remote");
        let url = format!("fs://{}", remote.display());
        let out = krabka(&[
            "produce",
            s(&log),
            "--generate",
            "3000",
            "--segment-bytes",
            "64KiB",
        ]);
        assert!(out.status.success(), "{}", show(&out));
        let mut tier = vec![
            "tier",
            s(&log),
            "--remote",
            &url,
            "--local-retention-bytes",
            "0",
        ];
        tier.extend(flags.iter().copied());
        let out = krabka(&tier);
        assert!(out.status.success(), "{name}: {}", show(&out));
        stored.push(dir_bytes(&remote));
        let key_flags: Vec<&str> = flags
            .iter()
            .copied()
            .skip_while(|f| *f != "--encryption-key-file")
            .collect();
        let out = read_remote(&log, &url, &key_flags);
        assert!(out.status.success(), "{name}: {}", show(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().count(), 3000, "{name}");
        match &reference {
            None => reference = Some(text),
            Some(r) => assert_eq!(&text, r, "{name}: records differ"),
        }
        if name == "both" {
            // Without the key, or with another one: an error naming the segment, no records
            // from the encrypted range.
            for extra in [vec![], vec!["--encryption-key-file", s(&wrong)]] {
                let out = read_remote(&log, &url, &extra);
                assert_eq!(out.status.code(), Some(1), "{}", show(&out));
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("segment"), "{err}");
                assert!(!err.contains(&"11".repeat(32)), "the key leaked: {err}");
                assert!(out.stdout.is_empty(), "records served without the key");
            }
        }
    }
    // The generated records are JSON-like text with random ids: zstd stores them smaller
    // (about 0.7 of the raw bytes here, indexes and manifests included).
    assert!(
        stored[1] * 100 < stored[0] * 85,
        "zstd stored {} of {} bytes",
        stored[1],
        stored[0]
    );
}

#[test]
fn a_bad_compression_spec_or_key_file_is_one_clear_line() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let out = krabka(&["produce", s(&log), "--generate", "10"]);
    assert!(out.status.success(), "{}", show(&out));
    let url = format!("fs://{}", tmp.path().join("remote").display());
    // A usage error (exit 2), checked when the arguments are parsed.
    let out = krabka(&["tier", s(&log), "--remote", &url, "--compression", "lz4"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lz4"));
    let short = tmp.path().join("short.key");
    std::fs::write(&short, b"too short").unwrap();
    let out = krabka(&[
        "tier",
        s(&log),
        "--remote",
        &url,
        "--encryption-key-file",
        s(&short),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("short.key"), "{err}");
    assert!(!err.contains("too short"), "key bytes echoed: {err}");
    // The advice is about key files, not about --compression.
    assert!(err.contains("32 raw bytes or 64 hex"), "{err}");
    assert!(!err.contains("--compression"), "{err}");
}

#[test]
fn a_compressed_and_encrypted_log_is_recovered_from_the_bucket_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("master.key");
    std::fs::write(&key, [9u8; 32]).unwrap();
    let log = tmp.path().join("log");
    let remote = tmp.path().join("remote");
    let url = format!("fs://{}", remote.display());
    let out = krabka(&[
        "produce",
        s(&log),
        "--generate",
        "3000",
        "--segment-bytes",
        "64KiB",
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let flags = ["--compression", "zstd", "--encryption-key-file", s(&key)];
    let mut tier = vec!["tier", s(&log), "--remote", &url];
    tier.extend(flags);
    let out = krabka(&tier);
    assert!(out.status.success(), "{}", show(&out));
    let before = read_remote(&log, &url, &flags[2..]);
    assert!(before.status.success(), "{}", show(&before));
    // Lose the whole local directory: only the bucket is left.
    std::fs::remove_dir_all(&log).unwrap();
    let out = krabka(&[
        "recover",
        s(&log),
        "--remote",
        &url,
        "--encryption-key-file",
        s(&key),
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let after = read_remote(&log, &url, &flags[2..]);
    let (b, a) = (
        String::from_utf8(before.stdout).unwrap(),
        String::from_utf8(after.stdout.clone()).unwrap(),
    );
    // Everything the remote held comes back identical; the last, active segment was local
    // only: its seqs, up to the last of the 3,000 written, are named lost and the read exits 1.
    assert!(a.lines().count() > 2500, "{} records", a.lines().count());
    assert!(b.starts_with(&a), "recovered records differ");
    assert_eq!(after.status.code(), Some(1), "{}", show(&after));
    let err = String::from_utf8_lossy(&after.stderr);
    assert!(
        err.contains(&format!("seqs {}..=3000 are lost", a.lines().count() + 1)),
        "{err}"
    );
}

/// Runs `krabka ARGS` with at most `limit_kib` KiB of address space and at most `wait`
/// (bounded: killed after it), through `sh -c 'ulimit -v ...; exec krabka ...'`.
fn krabka_limited(args: &[&str], limit_kib: u64, wait: Duration) -> Output {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {limit_kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + wait;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "krabka {args:?} still ran after {wait:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_key_file_that_is_a_device_a_directory_a_fifo_or_too_large_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let out = krabka(&["produce", s(&log), "--generate", "10"]);
    assert!(out.status.success(), "{}", show(&out));
    let url = format!("fs://{}", tmp.path().join("remote").display());
    let big = tmp.path().join("big.key");
    std::fs::write(&big, vec![b'a'; 8 << 20]).unwrap();
    let fifo = tmp.path().join("fifo.key");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let key_dir = tmp.path().join("keys");
    std::fs::create_dir(&key_dir).unwrap();
    std::fs::write(key_dir.join("a.key"), [1u8; 32]).unwrap();
    std::fs::write(key_dir.join("b.key"), vec![b'a'; 4096]).unwrap();
    for (flag, path, why) in [
        ("--encryption-key-file", "/dev/zero", "is a device"),
        (
            "--encryption-key-file",
            s(&big),
            "is 8388608 bytes, too large",
        ),
        ("--encryption-key-file", s(&fifo), "is a FIFO"),
        ("--encryption-key-file", s(tmp.path()), "is a directory"),
        ("--encryption-key-dir", s(&big), "not a directory"),
        ("--encryption-key-dir", s(&key_dir), "too large"),
    ] {
        for command in ["read", "tier"] {
            // 2 GiB of address space: reading /dev/zero unbounded would exhaust it.
            let out = krabka_limited(
                &[command, s(&log), "--remote", &url, flag, path],
                2 << 20,
                Duration::from_secs(120),
            );
            assert_eq!(out.status.code(), Some(1), "{path}: {}", show(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(why), "{path}: {err}");
            assert!(
                err.contains(path) || err.contains("b.key"),
                "the error names the file: {err}"
            );
            assert!(!err.contains("--compression"), "{err}");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
        }
    }
}

/// `LOG` produced with `n` generated records (seed `seed`) in 64 KiB segments.
fn produce(log: &Path, n: u64, seed: u64) {
    let (n, seed) = (n.to_string(), seed.to_string());
    let out = krabka(&[
        "produce",
        s(log),
        "--generate",
        &n,
        "--seed",
        &seed,
        "--segment-bytes",
        "64KiB",
    ]);
    assert!(out.status.success(), "{}", show(&out));
}

/// The id `krabka` gives the master key `bytes`.
fn key_id(bytes: [u8; 32]) -> String {
    krabka_remote_transform::KeyId::fingerprint(&bytes).to_string()
}

#[test]
fn rotated_keys_warn_read_with_every_key_and_recover_names_what_it_cannot_open() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = ([0xa1u8; 32], [0xb2u8; 32], [0xc3u8; 32]);
    let keys = tmp.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    let (a_file, b_file, c_file) = (keys.join("a.key"), keys.join("b.key"), tmp.path().join("c"));
    std::fs::write(&a_file, a).unwrap();
    std::fs::write(&b_file, hex(&b)).unwrap();
    std::fs::write(&c_file, c).unwrap();
    let log = tmp.path().join("log");
    let remote = tmp.path().join("remote");
    let url = format!("fs://{}", remote.display());
    let tier = |key: &Path| {
        krabka(&[
            "tier",
            s(&log),
            "--remote",
            &url,
            "--local-retention-bytes",
            "0",
            "--encryption-key-file",
            s(key),
        ])
    };
    produce(&log, 1500, 1);
    let out = tier(&a_file);
    assert!(out.status.success(), "{}", show(&out));
    assert!(out.stderr.is_empty(), "{}", show(&out));
    produce(&log, 1500, 2);
    // Key B is new to the remote: a warning naming the key id it holds, and that A was not
    // given; the round itself succeeds.
    let out = tier(&b_file);
    assert!(out.status.success(), "{}", show(&out));
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(warning.starts_with("warning: "), "{warning}");
    assert!(warning.contains(&key_id(b)), "{warning}");
    assert!(
        warning.contains(&format!("key id {} (", key_id(a))),
        "{warning}"
    );
    assert!(warning.contains("not given here"), "{warning}");
    // Again with B: the remote holds it now, no warning.
    let out = tier(&b_file);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        show(&out)
    );
    // A and B (as two files, or as a directory) read everything.
    let all = read_remote(
        &log,
        &url,
        &[
            "--encryption-key-file",
            s(&b_file),
            "--encryption-key-file",
            s(&a_file),
        ],
    );
    assert!(all.status.success(), "{}", show(&all));
    let all = String::from_utf8(all.stdout).unwrap();
    assert!(
        all.lines().count() > 2900,
        "{} records",
        all.lines().count()
    );
    let by_dir = read_remote(&log, &url, &["--encryption-key-dir", s(&keys)]);
    assert!(by_dir.status.success(), "{}", show(&by_dir));
    assert_eq!(String::from_utf8(by_dir.stdout).unwrap(), all);
    // B alone: the first segment, encrypted with A, is refused naming it and A's key id.
    let only_b = read_remote(&log, &url, &["--encryption-key-file", s(&b_file)]);
    assert_eq!(only_b.status.code(), Some(1), "{}", show(&only_b));
    let err = String::from_utf8_lossy(&only_b.stderr);
    assert!(err.contains("segment "), "{err}");
    assert!(err.contains(&format!("key id {}", key_id(a))), "{err}");
    assert!(err.contains("pass the master key of key id"), "{err}");
    assert!(!err.contains("reachable"), "{err}");
    // Recover with key C only: nothing can be opened; every segment is reported by object and
    // key id, and recover fails.
    let lost = tmp.path().join("lost").join("log");
    let out = krabka(&[
        "recover",
        s(&lost),
        "--remote",
        &url,
        "--encryption-key-file",
        s(&c_file),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs = log_objects(&remote).len();
    for id in [key_id(a), key_id(b)] {
        let reason =
            format!(".log: cannot be opened: encrypted with key id {id}, which was not given");
        assert!(stdout.contains(&reason), "{stdout}");
    }
    // One ignored line per segment (the hole's causes name them again, under the hole).
    assert_eq!(
        stdout
            .matches(".log: cannot be opened: encrypted with key id")
            .count(),
        logs,
        "{stdout}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{logs} segment(s) of {url} are encrypted with key id"
        )),
        "{err}"
    );
    assert!(
        err.contains(&key_id(a)) && err.contains(&key_id(b)),
        "{err}"
    );
    // With both keys, into a new directory: everything, nothing ignored.
    let again = tmp.path().join("again").join("log");
    let out = krabka(&[
        "recover",
        s(&again),
        "--remote",
        &url,
        "--encryption-key-dir",
        s(&keys),
    ]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ignored         nothing"));
    let read = read_remote(&again, &url, &["--encryption-key-dir", s(&keys)]);
    // Every remote record; the last, active segment was local only: its seqs, up to the last
    // of the 3,000 written, are named lost and the read exits 1.
    let back = String::from_utf8(read.stdout.clone()).unwrap();
    assert!(
        back.lines().count() > 2900,
        "{} records",
        back.lines().count()
    );
    assert!(all.starts_with(&back), "recovered records differ");
    assert_eq!(read.status.code(), Some(1), "{}", show(&read));
    let err = String::from_utf8_lossy(&read.stderr);
    assert!(
        err.contains(&format!(
            "seqs {}..=3000 are lost",
            back.lines().count() + 1
        )),
        "{err}"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n"
}

/// The `.log` objects under the remote's partition directories, sorted.
fn log_objects(remote: &Path) -> Vec<std::path::PathBuf> {
    let mut logs: Vec<_> = std::fs::read_dir(remote)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

#[test]
fn a_damaged_encrypted_segment_header_costs_only_its_own_seqs_in_recover() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("master.key");
    std::fs::write(&key, [5u8; 32]).unwrap();
    let log = tmp.path().join("log");
    let remote = tmp.path().join("remote");
    let url = format!("fs://{}", remote.display());
    produce(&log, 3000, 7);
    let acknowledged = String::from_utf8(krabka(&["read", s(&log)]).stdout).unwrap();
    let flags = ["--encryption-key-file", s(&key)];
    let mut tier = vec![
        "tier",
        s(&log),
        "--remote",
        &url,
        "--local-retention-bytes",
        "0",
    ];
    tier.extend(flags);
    let out = krabka(&tier);
    assert!(out.status.success(), "{}", show(&out));
    // One byte of one segment's transform header (its chunk table, past the identity), and
    // the magic of another: both are damage, never an untransformed segment.
    let logs = log_objects(&remote);
    assert!(logs.len() > 10, "{} segments", logs.len());
    let (flipped, magic) = (&logs[3], &logs[7]);
    for (path, at) in [(flipped, 150), (magic, 0)] {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[at] ^= 0x01;
        std::fs::write(path, bytes).unwrap();
    }
    let lost = tmp.path().join("b").join("log");
    let mut recover = vec!["recover", s(&lost), "--remote", &url];
    recover.extend(flags);
    let out = krabka(&recover);
    // Holes are reported; recover succeeds, as for any damaged segment.
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    for (path, why) in [(flipped, "checksum mismatch"), (magic, "bad magic")] {
        let line = stdout
            .lines()
            .find(|l| l.contains(&name(path)))
            .unwrap_or_else(|| panic!("{} not reported: {stdout}", name(path)));
        assert!(line.contains("cannot be opened"), "{line}");
        assert!(line.contains("transform header is corrupt"), "{line}");
        assert!(line.contains(why), "{line}");
    }
    let holes: Vec<(u64, u64)> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("hole"))
        .filter_map(|l| {
            l.split("seqs ")
                .nth(1)?
                .split(' ')
                .next()?
                .split_once("..=")
        })
        .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()))
        .collect();
    // The two damaged segments, then the active segment's seqs, never tiered, up to the last
    // of the 3,000 written.
    assert_eq!(holes.len(), 3, "{stdout}");
    assert_eq!(holes[2].1, 3000, "{stdout}");
    assert!(holes[1].1 < holes[2].0, "{stdout}");
    for ((from, _), path) in holes.iter().zip([flipped, magic]) {
        assert!(
            name(path).starts_with(&format!("{from:020}-")),
            "{from}: {}",
            name(path)
        );
    }
    // Every other record reads back as acknowledged; the read names the holes and exits 1.
    let read = read_remote(&lost, &url, &flags);
    assert_eq!(read.status.code(), Some(1), "{}", show(&read));
    let err = String::from_utf8_lossy(&read.stderr);
    for (from, to) in &holes {
        assert!(
            err.contains(&format!("seqs {from}..={to} are lost")),
            "{err}"
        );
    }
    let lost_seq = |seq: u64| holes.iter().any(|(a, b)| (*a..=*b).contains(&seq));
    let expected: Vec<&str> = acknowledged
        .lines()
        .filter(|l| !lost_seq(l.split('\t').next().unwrap().parse().unwrap()))
        .collect();
    let printed = String::from_utf8(read.stdout).unwrap();
    let printed: Vec<&str> = printed.lines().collect();
    assert!(printed.len() > 2500, "{} records", printed.len());
    assert_eq!(printed[..], expected[..printed.len()]);
    // The original log still reads the damaged-header segments (their indexes carry intact
    // copies of the header, and the chunks are whole). A damaged chunk is named damage, with
    // advice about damage, not about reaching the remote.
    let direct = read_remote(&log, &url, &flags);
    assert!(direct.status.success(), "{}", show(&direct));
    let chunk = &logs[9];
    let mut bytes = std::fs::read(chunk).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0x01;
    std::fs::write(chunk, bytes).unwrap();
    let direct = read_remote(&log, &url, &flags);
    assert_eq!(direct.status.code(), Some(1), "{}", show(&direct));
    let err = String::from_utf8_lossy(&direct.stderr);
    assert!(
        err.contains("log chunk") && err.contains("is corrupt"),
        "{err}"
    );
    assert!(err.contains("damaged or was tampered with"), "{err}");
    assert!(!err.contains("reachable"), "{err}");
}

/// The `krabka-transform-*` directories in `dir`.
fn scratch_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("krabka-transform-")
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[test]
fn a_killed_copy_leaves_no_scratch_directory_behind_for_good() {
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let key = tmp.path().join("master.key");
    std::fs::write(&key, [6u8; 32]).unwrap();
    let log = tmp.path().join("log");
    let url = format!("fs://{}", tmp.path().join("remote").display());
    let out = krabka(&[
        "produce",
        s(&log),
        "--generate",
        "20000",
        "--segment-bytes",
        "512KiB",
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let tier = |watch: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_krabka"));
        c.args([
            "tier",
            s(&log),
            "--remote",
            &url,
            "--encryption-key-file",
            s(&key),
        ])
        .env("TMPDIR", &scratch)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if watch {
            c.args(["--watch", "--interval", "1s"]);
        }
        c
    };
    // SIGKILL `tier --watch` while a copy has its scratch directory (bounded: a few runs, each
    // watched for at most a minute).
    let mut stale = Vec::new();
    for _ in 0..5 {
        let mut child = tier(true).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
            // Mid-copy: its scratch directory holds the transformed `.log` being written.
            if scratch_dirs(&scratch)
                .iter()
                .any(|d| d.join("segment.log").exists())
            {
                child.kill().unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill();
        child.wait().unwrap();
        stale = scratch_dirs(&scratch);
        if !stale.is_empty() {
            break;
        }
    }
    // The directories of copies killed mid-write hold their lock file. (A second copy in
    // flight may have been killed between creating its directory and its lock file: such a
    // directory is swept only once it is ten minutes old, and is left out here.)
    let (stale, unlocked): (Vec<PathBuf>, Vec<PathBuf>) = stale
        .into_iter()
        .partition(|d| d.join("owner.lock").exists());
    assert!(
        stale.iter().any(|d| d.join("segment.log").exists()),
        "no copy killed mid-write left its scratch directory with its lock file: {stale:?} \
         {unlocked:?}"
    );
    // A live one of another process (this test, holding its lock), and a fresh one without a
    // lock file (a process between creating it and its lock): both kept.
    let live = scratch.join("krabka-transform-live");
    std::fs::create_dir(&live).unwrap();
    let lock = std::fs::File::create(live.join("owner.lock")).unwrap();
    lock.lock().unwrap();
    let fresh = scratch.join("krabka-transform-fresh");
    std::fs::create_dir(&fresh).unwrap();
    // The next run's first copy (the killed one is copied again) removes the stale one only.
    let out = tier(false).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    for dir in &stale {
        assert!(!dir.exists(), "{} was left", dir.display());
    }
    let mut kept = unlocked;
    kept.extend([fresh, live]);
    kept.sort();
    assert_eq!(scratch_dirs(&scratch), kept);
    drop(lock);
}
