//! Logs in krabka's old per-record frame format and batches past a closed segment's end, as a
//! user meets them: the built `krabka` binary on real files. An old log is refused by `verify`,
//! `repair`, `dump` and `produce` (naming both formats, changing nothing) even when a field of
//! its first frame is damaged, and `krabka read OLD | cut -f3- | krabka produce NEW --escaped
//! --key-separator TAB` brings its keys and values over; a forged batch appended to a closed
//! segment under the next segment's seqs is never printed, `verify` names it as the closed
//! segment's problem and `repair` moves only it aside, keeping the next segment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use krabka_protocol::Message;
use krabka_storage::segment;

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka")
}

fn both(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The message of old record `seq`: a key (none on every fifth), a value with a tab, a
/// newline and a non-UTF-8 byte on every seventh.
fn old_message(seq: u64) -> Message {
    let mut value = format!("old value {seq}").into_bytes();
    if seq.is_multiple_of(7) {
        value.extend_from_slice(b"\tand\na \xff byte");
    }
    let m = Message::new(value).with_timestamp(1_000 * seq as i64);
    if seq.is_multiple_of(5) {
        m
    } else {
        m.with_key(format!("key-{seq}"))
    }
}

/// Writes segment `seqs` of an old-format log into `dir` (one frame per record: little-endian
/// `u32` length of what follows the CRC, CRC-32 of it, `u64` seq, the message).
fn old_segment(dir: &Path, seqs: std::ops::RangeInclusive<u64>) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(segment::segment_file_name(*seqs.start(), "log"));
    let mut bytes = Vec::new();
    for seq in seqs {
        let mut body = seq.to_le_bytes().to_vec();
        old_message(seq).encode(&mut body);
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
    }
    fs::write(&path, bytes).unwrap();
    path
}

/// Every file under `dir` with its bytes, sorted; the empty lock file an open creates aside
/// (it locks the directory before anything is read).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if !p.ends_with(krabka_storage::LOCK_FILE_NAME) {
                out.push((p.clone(), fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn assert_names_both_formats(out: &Output, path: &Path, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what}: {}", both(out));
    for word in [
        segment::OLD_FORMAT_NAME,
        segment::FORMAT_NAME,
        &path.display().to_string(),
    ] {
        assert!(err.contains(word), "{what}: no `{word}` in {}", both(out));
    }
}

#[test]
fn an_old_log_is_read_out_and_produced_into_a_new_log_with_the_same_keys_and_values() {
    let tmp = tempfile::tempdir().unwrap();
    let old = tmp.path().join("old");
    old_segment(&old, 1..=30);
    old_segment(&old, 31..=45);
    let new = tmp.path().join("new");
    let before = snapshot(&old);
    // Through a shell pipeline, as the docs give it.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "set -e; '{k}' read '{old}' --value-chars 1000000000 | cut -f3- | '{k}' produce '{new}' --escaped --key-separator \"$(printf '\\t')\"",
            k = env!("CARGO_BIN_EXE_krabka"),
            old = s(&old),
            new = s(&new),
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(snapshot(&old), before, "reading the old log changed it");
    let log = krabka_storage::Log::open(&new, krabka_storage::Options::default()).unwrap();
    let records = log.read(1, 100).unwrap();
    assert_eq!(records.len(), 45);
    for r in &records {
        let want = old_message(r.seq);
        assert_eq!(r.message.key, want.key, "seq {}", r.seq);
        assert_eq!(r.message.value, want.value, "seq {}", r.seq);
    }
    drop(log);
    let verified = krabka(&["verify", s(&new)]);
    assert!(verified.status.success(), "{}", both(&verified));
}

#[test]
fn an_old_log_with_a_bit_flipped_in_a_field_of_its_first_frame_is_refused_by_every_command() {
    // Byte offsets in the first frame: length, CRC, seq, version, flags, timestamp, key length,
    // value byte.
    for (field, at) in [
        ("length", 1u64),
        ("CRC", 6),
        ("seq", 8),
        ("version", 16),
        ("flags", 17),
        ("timestamp", 19),
        ("key length", 26),
        ("value", 40),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("old");
        let path = old_segment(&dir, 1..=20);
        let mut bytes = fs::read(&path).unwrap();
        bytes[at as usize] ^= 0x10;
        fs::write(&path, bytes).unwrap();
        let before = snapshot(&dir);

        let verify = krabka(&["verify", s(&dir)]);
        assert_eq!(verify.status.code(), Some(1), "{field}: {}", both(&verify));
        assert_names_both_formats(&verify, &path, &format!("{field}: verify"));
        assert!(
            String::from_utf8_lossy(&verify.stderr).contains("krabka read"),
            "{field}: verify names no way forward: {}",
            both(&verify)
        );

        let mut child = Command::new(env!("CARGO_BIN_EXE_krabka"))
            .args(["produce", s(&dir)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // `produce` may refuse (and exit) before it reads its input: a closed pipe is fine.
        let _ = child
            .stdin
            .take()
            .unwrap()
            .write_all(b"new 1\nnew 2\nnew 3\n");
        let produce = child.wait_with_output().unwrap();
        assert_eq!(
            produce.status.code(),
            Some(1),
            "{field}: {}",
            both(&produce)
        );
        assert_names_both_formats(&produce, &path, &format!("{field}: produce"));

        for args in [
            vec!["repair", s(&dir)],
            vec!["repair", s(&dir), "--dry-run"],
        ] {
            let out = krabka(&args);
            assert_names_both_formats(&out, &path, &format!("{field}: {args:?}"));
        }
        let dump = krabka(&["dump", s(&path)]);
        assert_names_both_formats(&dump, &path, &format!("{field}: dump"));

        // `read` prints no record under a wrong seq: what it prints is the old records, in
        // order from seq 1, and it fails at the damaged frame naming both formats.
        let read = krabka(&["read", s(&dir)]);
        assert_names_both_formats(&read, &path, &format!("{field}: read"));
        assert!(
            !String::from_utf8_lossy(&read.stderr).contains("krabka repair"),
            "{field}: read advises a repair that refuses: {}",
            both(&read)
        );

        assert!(
            snapshot(&dir) == before,
            "{field}: a command changed the directory"
        );
        assert!(!dir.join(segment::QUARANTINE_DIR).exists(), "{field}");
    }
}

#[test]
fn a_forged_batch_appended_to_a_closed_segment_is_never_printed_and_read_names_its_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = krabka_storage::Log::open(&dir, krabka_storage::Options::default()).unwrap();
    log.append_batch(
        &(1..=40)
            .map(|i| Message::new(format!("true {i}")))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    log.roll().unwrap();
    log.append_batch(
        &(41..=60)
            .map(|i| Message::new(format!("true {i}")))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    log.close().unwrap();
    let first = dir.join(segment::segment_file_name(1, "log"));
    let end = fs::metadata(&first).unwrap().len();
    // A CRC-valid batch whose baseOffset (outside the CRC) is the next segment's base.
    let mut forged = Vec::new();
    for i in 0..3 {
        segment::encode_batch_of_one(41 + i, &Message::new(format!("FORGED {i}")), &mut forged)
            .unwrap();
    }
    fs::OpenOptions::new()
        .append(true)
        .open(&first)
        .unwrap()
        .write_all(&forged)
        .unwrap();

    for from in ["1", "41"] {
        let out = krabka(&["read", s(&dir), "--from", from]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("FORGED"), "from {from}: {}", both(&out));
        assert_eq!(out.status.code(), Some(1), "from {from}: {}", both(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&first.display().to_string())
                && err.contains(&format!("at byte {end}"))
                && err.contains("beyond the end of the closed segment"),
            "from {from}: {}",
            both(&out)
        );
        if from == "1" {
            let seqs: Vec<u64> = stdout
                .lines()
                .map(|l| l.split('\t').next().unwrap().parse().unwrap())
                .collect();
            assert_eq!(seqs, (1..=40).collect::<Vec<_>>(), "{}", both(&out));
        }
    }
}

#[test]
fn a_forged_batch_is_damage_of_the_closed_segment_to_verify_and_repair_and_the_next_one_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = krabka_storage::Log::open(&dir, krabka_storage::Options::default()).unwrap();
    let true_value = |i: u64| format!("true {i}");
    for (i, seqs) in [1..=40u64, 41..=60].into_iter().enumerate() {
        if i > 0 {
            log.roll().unwrap();
        }
        log.append_batch(
            &seqs
                .map(|i| Message::new(true_value(i)))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    }
    log.close().unwrap();
    let first = dir.join(segment::segment_file_name(1, "log"));
    let next = dir.join(segment::segment_file_name(41, "log"));
    let end = fs::metadata(&first).unwrap().len();
    // A CRC-valid batch whose baseOffset (outside the CRC) is the next segment's base.
    let mut forged = Vec::new();
    for i in 0..3 {
        segment::encode_batch_of_one(41 + i, &Message::new(format!("FORGED {i}")), &mut forged)
            .unwrap();
    }
    fs::OpenOptions::new()
        .append(true)
        .open(&first)
        .unwrap()
        .write_all(&forged)
        .unwrap();
    let next_bytes = fs::read(&next).unwrap();
    let first_bytes = fs::read(&first).unwrap();
    let text = |out: &Output| String::from_utf8_lossy(&out.stdout).into_owned();

    let at = format!("{} at byte {end}", first.display());
    let beyond = "beyond the end of the closed segment";

    // verify: the closed segment's bytes past its end, at their byte; the next segment is
    // intact (no seq overlap blamed on it).
    let out = krabka(&["verify", s(&dir)]);
    assert_eq!(out.status.code(), Some(1), "verify before: {}", both(&out));
    let problems: Vec<String> = text(&out)
        .lines()
        .filter(|l| l.starts_with("problem:"))
        .map(str::to_owned)
        .collect();
    assert_eq!(problems.len(), 1, "verify before: {}", both(&out));
    assert!(
        problems[0].contains(&at) && problems[0].contains(beyond),
        "verify before: {}",
        both(&out)
    );
    assert!(
        !text(&out).contains("overlap")
            && text(&out)
                .lines()
                .any(|l| l.starts_with("ok") && l.contains(s(&next))),
        "verify before: {}",
        both(&out)
    );

    // repair --dry-run: the forged bytes moved aside, the next segment not named, nothing
    // changed.
    let before = snapshot(&dir);
    let dry = krabka(&["repair", s(&dir), "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "dry run: {}", both(&dry));
    let plan = text(&dry);
    assert!(
        plan.contains(&format!(
            "move {} bytes of {} from byte {end} into",
            forged.len(),
            first.display()
        )) && !plan.contains(s(&next))
            && !plan.contains("hole"),
        "dry run: {}",
        both(&dry)
    );
    assert!(
        snapshot(&dir) == before,
        "the dry run changed the directory"
    );

    // repair: only the forged bytes move, copied into quarantine; both segments keep every
    // acknowledged record.
    let rep = krabka(&["repair", s(&dir)]);
    assert_eq!(rep.status.code(), Some(0), "repair: {}", both(&rep));
    assert!(
        text(&rep).contains("it spans seq 1..=60") && !text(&rep).contains("hole"),
        "repair: {}",
        both(&rep)
    );
    assert_eq!(
        fs::read(&next).unwrap(),
        next_bytes,
        "the next segment changed"
    );
    assert_eq!(fs::read(&first).unwrap(), first_bytes[..end as usize]);
    let quarantined: Vec<Vec<u8>> = fs::read_dir(dir.join(segment::QUARANTINE_DIR))
        .unwrap()
        .map(|e| fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(quarantined, [forged.clone()], "repair: {}", both(&rep));

    // After: verify is clean and read prints every original record, none forged.
    let after = krabka(&["verify", s(&dir)]);
    assert_eq!(
        after.status.code(),
        Some(0),
        "verify after: {}",
        both(&after)
    );
    assert!(!text(&after).contains("problem"), "{}", both(&after));
    let read = krabka(&["read", s(&dir)]);
    assert_eq!(read.status.code(), Some(0), "read: {}", both(&read));
    let lines: Vec<(u64, String)> = text(&read)
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            let seq = f.next().unwrap().parse().unwrap();
            (seq, f.nth(2).unwrap().to_owned())
        })
        .collect();
    let want: Vec<(u64, String)> = (1..=60).map(|i| (i, true_value(i))).collect();
    assert_eq!(lines, want, "read: {}", both(&read));
}
