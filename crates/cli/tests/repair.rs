//! `repair`, accepted holes and `dump` under a hostile operator, through the built binary:
//! a repair keeps every intact record after the damage (and its dry run says the same), a
//! SIGKILL at any moment of a repair loses nothing, a hole accepted with `--accept-hole` lets
//! tiering and retention go on while every read still names it, and `dump` streams any file
//! with a fixed memory ceiling and says what a transformed remote object is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Batch, batches};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::segment::encode_batch_of_one;

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

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout (tail)\n{}\n--- stderr\n{}",
        out.status.code(),
        text(&out.stdout)
            .lines()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .join("\n"),
        text(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ok(args: &[&str]) -> Output {
    let out = krabka(args);
    assert!(out.status.success(), "{args:?}: {}", show(&out));
    out
}

/// The one `error:` line of a failed command, which must have exited 1.
fn error_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", show(out));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{}", show(out));
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{}", show(out));
    lines[0].to_owned()
}

fn produce(dir: &Path, records: u64, segment_bytes: &str) {
    ok(&[
        "produce",
        s(dir),
        "--generate",
        &records.to_string(),
        "--segment-bytes",
        segment_bytes,
    ]);
}

/// `seq → line` of a `krabka read` output.
fn records(out: &Output) -> BTreeMap<u64, String> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| Some((l.split('\t').next()?.parse().ok()?, l.to_owned())))
        .collect()
}

/// Every record of the local log at `dir`, read before anything is damaged.
fn reference(dir: &Path) -> BTreeMap<u64, String> {
    records(&ok(&["read", s(dir), "--max", "1000000"]))
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

/// Flips a byte in the middle of the records of the batch holding `seq` in `seg` (past its
/// 61-byte header); returns that batch.
fn damage(seg: &Path, seq: u64) -> Batch {
    let b = batches(seg)
        .into_iter()
        .find(|b| (b.first..=b.last).contains(&seq))
        .unwrap();
    let at = b.position + 61 + (b.size - 61) / 2;
    krabka_storage::testkit::xor_byte(seg, at, 0x5a).unwrap();
    b
}

/// The records of `reference` but those of the `lost` batches.
fn without(reference: &BTreeMap<u64, String>, lost: &[Batch]) -> BTreeMap<u64, String> {
    reference
        .iter()
        .filter(|(k, _)| !lost.iter().any(|b| (b.first..=b.last).contains(*k)))
        .map(|(k, v)| (*k, v.clone()))
        .collect()
}

/// Writes `records` records to a new log at `dir` in `segment_bytes` segments as a program on
/// the library does, `per_batch` records per append (`produce` appends 1000 at a time).
fn write_log(dir: &Path, records: u64, segment_bytes: u64, per_batch: usize) {
    let options = krabka_storage::Options {
        max_bytes: segment_bytes,
        ..krabka_storage::Options::default()
    };
    let log = krabka_storage::Log::open(dir, options).unwrap();
    let msgs: Vec<Message> = (1..=records)
        .map(|i| {
            let pad = "x".repeat(32 + (i * 7919 % 700) as usize);
            Message::new(format!("{{\"n\":{i},\"pad\":\"{pad}\"}}"))
                .with_key(format!("user-{:06}", i * 31 % 1000))
                .with_timestamp(1_704_067_200_000 + i as i64 * 3)
        })
        .collect();
    for batch in msgs.chunks(per_batch) {
        log.append_batch(batch).unwrap();
    }
    log.close().unwrap();
}

/// Waits for `child` at most `limit`, killing it after that; its exit code.
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

// ---- repair keeps every intact batch ----

#[test]
fn a_damaged_batch_in_the_middle_costs_only_its_own_seqs_and_the_dry_run_says_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    // Batches of three records: 1..=3, 4..=6, 7..=9, ...; a byte of seq 8's batch is damaged.
    write_log(&log, 18, 64 << 20, 3);
    let reference = reference(&log);
    assert_eq!(reference.len(), 18);
    let seg = segments(&log).pop().unwrap();
    let bad = damage(&seg, 8);
    assert_eq!(bad.range(), "7..=9");
    let damaged = std::fs::read(&seg).unwrap();

    let dry = ok(&["repair", s(&log), "--dry-run"]);
    let said = text(&dry.stdout);
    assert!(said.contains("seqs 7..=9 would become a hole"), "{said}");
    assert!(said.contains("keep seqs 10..=18"), "{said}");
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        damaged,
        "a dry run changes nothing"
    );
    assert!(!log.join("quarantine").exists());

    let out = ok(&["repair", s(&log)]);
    let did = text(&out.stdout);
    assert!(did.contains("seqs 7..=9 are now a hole"), "{did}");
    assert!(did.contains("kept seqs 10..=18"), "{did}");
    assert!(did.contains("--accept-hole 7..=9"), "{did}");
    // The kept file is named in both, the same.
    let kept = log.join("00000000000000000010.log");
    assert!(
        said.contains(s(&kept)) && did.contains(s(&kept)),
        "{said}\n{did}"
    );

    // 15 records read back exactly; the read into the hole names it.
    let read = krabka(&["read", s(&log)]);
    assert!(error_line(&read).contains("7..=9"), "{}", show(&read));
    let after = krabka(&["read", s(&log), "--from", "10"]);
    let mut got = records(&read);
    got.extend(records(&after));
    assert!(after.status.success(), "{}", show(&after));
    assert_eq!(got, without(&reference, &[bad]));
    let verify = ok(&["verify", s(&log)]);
    assert!(
        text(&verify.stdout).contains("15 records"),
        "{}",
        show(&verify)
    );
    assert!(
        text(&verify.stdout).contains("hole    seq 7..=9"),
        "{}",
        show(&verify)
    );
    let again = ok(&["repair", s(&log), "--dry-run"]);
    assert!(
        text(&again.stdout).contains("nothing to repair"),
        "{}",
        show(&again)
    );
}

#[test]
fn a_repair_killed_at_any_moment_loses_nothing_and_runs_again_to_the_same_log() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    produce(&base, 20_000, "64MiB");
    let reference = reference(&base);
    let seg = segments(&base).pop().unwrap();
    // produce appends 1000 records a batch: each damaged byte costs its batch of 1000.
    let lost: Vec<Batch> = [3_000u64, 9_000, 15_000]
        .into_iter()
        .map(|seq| damage(&seg, seq))
        .collect();
    assert!(lost.iter().all(|b| b.last - b.first == 999), "{lost:?}");
    let copy = |name: &str| {
        let to = tmp.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for e in std::fs::read_dir(&base).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
        to
    };
    let timed = copy("timed");
    let started = Instant::now();
    ok(&["repair", s(&timed)]);
    let took = started.elapsed();
    let expected = without(&reference, &lost);
    let check = |dir: &Path, what: &str| {
        let mut got = BTreeMap::new();
        let mut from = 1;
        // One read per hole and one after the last: bounded.
        for _ in 0..=lost.len() {
            let out = krabka(&[
                "read",
                s(dir),
                "--from",
                &from.to_string(),
                "--max",
                "1000000",
            ]);
            got.extend(records(&out));
            if out.status.success() {
                break;
            }
            let hole = lost.iter().find(|b| b.last >= from).copied();
            let line = error_line(&out);
            assert!(
                hole.is_some_and(|h| line.contains(&h.range())),
                "{what}: {line}"
            );
            from = hole.unwrap().last + 1;
        }
        assert_eq!(got, expected, "{what}");
    };
    check(&timed, "uninterrupted");
    // Killed at 12 moments spread over a repair's run, then run again.
    for k in 0..12u32 {
        let dir = copy(&format!("killed-{k}"));
        let mut child = bin()
            .args(["repair", s(&dir)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(took * k / 10);
        let _ = child.kill();
        child.wait().unwrap();
        let out = krabka(&["repair", s(&dir)]);
        assert!(out.status.success(), "killed at {k}: {}", show(&out));
        check(&dir, &format!("killed at step {k}"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

// ---- an accepted hole ----

#[test]
fn an_accepted_hole_lets_tier_and_retention_go_on_and_every_read_still_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let url = format!("fs://{}", tmp.path().join("remote").display());
    // Two records a batch: a hole in the middle of a segment, intact batches on both sides.
    write_log(&log, 400, 32 << 10, 2);
    let reference = reference(&log);
    let segs = segments(&log);
    assert!(segs.len() >= 6, "{}", segs.len());
    let victim = &segs[3];
    let in_victim = batches(victim);
    assert!(in_victim.len() >= 3, "{in_victim:?}");
    let hole = damage(victim, in_victim[in_victim.len() / 2].first);
    let range = hole.range();
    ok(&["repair", s(&log)]);

    // Tier copies up to the hole, then refuses: the error names the hole and the accept command.
    let accept = format!("krabka repair {} --accept-hole {range}", s(&log));
    let tier = [
        "tier",
        s(&log),
        "--remote",
        &url,
        "--local-retention-bytes",
        "0",
    ];
    let refused = krabka(&tier);
    let line = error_line(&refused);
    assert!(
        line.contains(&range) && line.contains(&accept),
        "{}",
        show(&refused)
    );
    let hint = text(&refused.stderr);
    assert!(hint.contains("accept their loss"), "{}", show(&refused));
    assert!(segments(&log).len() > 2, "retention passed the hole");

    let a = ok(&["repair", s(&log), "--accept-hole", &range]);
    assert!(
        text(&a.stdout).contains(&format!("accepted hole seq {range}")),
        "{}",
        show(&a)
    );
    let record = std::fs::read_to_string(log.join("accepted-holes")).unwrap();
    assert!(
        record.contains(&format!("{} {} ", hole.first, hole.last)),
        "{record}"
    );
    // Not a hole: refused, nothing recorded.
    let wrong = krabka(&["repair", s(&log), "--accept-hole", "1"]);
    assert!(
        error_line(&wrong).contains("not in a hole"),
        "{}",
        show(&wrong)
    );

    // Tier goes on past it, says so, and local retention removes every closed segment.
    let out = ok(&tier);
    assert!(
        text(&out.stdout).contains(&format!("accepted hole seq {range}")),
        "{}",
        show(&out)
    );
    assert_eq!(segments(&log).len(), 1, "{}", show(&out));
    let verify = ok(&["verify", s(&log)]);
    assert!(
        text(&verify.stdout).contains(&format!("accepted hole seq {range}")),
        "{}",
        show(&verify)
    );
    // A read across it prints every other record exactly and fails naming it.
    let read = krabka(&["read", s(&log), "--remote", &url, "--max", "1000000"]);
    let line = error_line(&read);
    assert!(
        line.contains("the log is incomplete") && line.contains(&range),
        "{}",
        show(&read)
    );
    assert_eq!(records(&read), without(&reference, &[hole]));
    // Appends and tiering go on.
    produce(&log, 50, "32KiB");
    ok(&tier);
}

// ---- dump ----

#[test]
fn dump_streams_a_300_mib_segment_under_a_256_mib_address_space_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("00000000000000000001.log");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let value = vec![b'v'; 1 << 20];
    let mut batch = Vec::with_capacity(value.len() + 64);
    for seq in 1..=300u64 {
        batch.clear();
        encode_batch_of_one(seq, &Message::new(value.clone()), &mut batch).unwrap();
        std::io::Write::write_all(&mut file, &batch).unwrap();
    }
    drop(file);
    let out = support::dump_in_256_mib(&path);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("300 records in 300 batch(es), 0 bad batch(es)"),
        "{}",
        show(&out)
    );
}

#[test]
fn dump_of_a_device_a_pipe_or_an_absurd_length_ends_at_once_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for (path, kind) in [
        (Path::new("/dev/zero"), "a character device"),
        (fifo.as_path(), "a pipe"),
        (tmp.path(), "a directory"),
    ] {
        let mut child = bin()
            .args(["dump", s(path)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert_eq!(
            wait_at_most(&mut child, Duration::from_secs(20)),
            Some(1),
            "dump {path:?} did not end"
        );
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(
            err.contains(kind) && err.contains("not a regular file"),
            "{err}"
        );
    }
    // A batch length field of 2 GiB: reported at its byte, never allocated.
    let path = tmp.path().join("00000000000000000001.log");
    let mut bytes = Vec::new();
    encode_batch_of_one(1, &Message::new("a"), &mut bytes).unwrap();
    let at = bytes.len();
    encode_batch_of_one(2, &Message::new("b"), &mut bytes).unwrap();
    bytes[at + 8..at + 12].copy_from_slice(&i32::MAX.to_be_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let out = krabka(&["dump", s(&path)]);
    let line = error_line(&out);
    assert!(
        line.contains(&format!("at byte {at}")) && line.contains("length field"),
        "{}",
        show(&out)
    );
}

#[test]
fn dump_of_a_transformed_remote_object_says_what_it_is_and_how_to_read_it() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("master.key");
    std::fs::write(&key, "11".repeat(32)).unwrap();
    for (name, flags, kind) in [
        (
            "encrypted",
            vec!["--encryption-key-file", s(&key)],
            "(encrypted)",
        ),
        ("zstd", vec!["--compression", "zstd"], "(compressed)"),
    ] {
        let log = tmp.path().join(name).join("log");
        let remote = tmp.path().join(name).join("remote");
        produce(&log, 300, "16KiB");
        let url = format!("fs://{}", remote.display());
        let mut tier = vec!["tier", s(&log), "--remote", &url];
        tier.extend(flags.iter().copied());
        ok(&tier);
        let mut stack = vec![remote.clone()];
        let mut object = None;
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "log") {
                    object = Some(p);
                }
            }
        }
        let object = object.expect("a remote .log object");
        let out = krabka(&["dump", s(&object)]);
        let line = error_line(&out);
        assert!(
            line.contains("transformed remote object") && line.contains(kind),
            "{name}: {}",
            show(&out)
        );
        let stderr = text(&out.stderr);
        assert!(stderr.contains("--encryption-key-file"), "{stderr}");
        assert!(!stderr.contains("repair"), "{stderr}");
    }
}
