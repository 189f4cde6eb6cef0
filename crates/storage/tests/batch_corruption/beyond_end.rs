//! A CRC-valid batch appended to a closed segment, its `baseOffset` (outside Kafka's CRC) the
//! next segment's base: its records would read as the next segment's seqs, values never
//! appended there. No reader hands one of them out: the read-only reader, `Log::read` and
//! `Log::read_batches` stop at that batch, naming the file and the byte, after the records
//! before it; verification names those bytes as the closed segment's problem (the next segment
//! intact), an open refuses the log without changing it, and a repair moves only them aside.

use std::fs;
use std::path::{Path, PathBuf};

use krabka_protocol::Message;
use krabka_storage::segment;
use krabka_storage::view::LogView;
use krabka_storage::{Error, Log, RecoveryMode};

use super::common::{msg, opts, snapshot};

/// Bytes of a value of the forged batch.
const FORGED: &str = "FORGED, never appended";

/// A log of two segments (1..=40, 41..=60), closed cleanly, and a forged batch of three records
/// appended to the closed first one with base 41. Returns the first segment, its length before
/// the forgery and the second segment's base.
fn forged_log(dir: &Path) -> (PathBuf, u64, u64) {
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail)).unwrap();
    log.append_batch(&(1..=40).map(msg).collect::<Vec<_>>())
        .unwrap();
    log.roll().unwrap();
    log.append_batch(&(41..=60).map(msg).collect::<Vec<_>>())
        .unwrap();
    log.close().unwrap();
    let first = dir.join(segment::segment_file_name(1, "log"));
    let len = fs::metadata(&first).unwrap().len();
    let mut forged = Vec::new();
    for i in 0..3 {
        segment::encode_batch_of_one(41 + i, &Message::new(FORGED), &mut forged).unwrap();
    }
    let mut bytes = fs::read(&first).unwrap();
    bytes.extend_from_slice(&forged);
    // Written in place: the directory's entries (and its modification time) stay as the clean
    // close left them.
    fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
        .unwrap();
    (first, len, 41)
}

fn assert_no_forged(records: &[krabka_storage::Record], what: &str) {
    assert!(
        records.iter().all(|r| r.message.value != FORGED),
        "{what}: a forged record was handed out: {:?}",
        records.iter().find(|r| r.message.value == FORGED)
    );
}

#[test]
fn a_batch_appended_to_a_closed_segment_under_the_next_ones_seqs_is_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (first, end, next) = forged_log(dir);
    let before = snapshot(dir);

    // The read-only reader: every record of the first segment, then the forged batch named.
    let mut reader = LogView::new(dir).reader(1);
    let mut got = Vec::new();
    let error = loop {
        match reader.poll(7) {
            Ok(r) if r.is_empty() => panic!("caught up without an error: {got:?}"),
            Ok(r) => got.extend(r),
            Err(e) => break e,
        }
        assert!(got.len() <= 60, "read past the log");
    };
    assert_no_forged(&got, "poll");
    assert_eq!(
        got.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..next).collect::<Vec<_>>()
    );
    match &error {
        Error::BadBatch {
            path,
            position,
            seq,
            reason,
        } => {
            assert_eq!((path, *position, *seq), (&first, end, next), "{error}");
            assert!(
                reason.contains("beyond the end of the closed segment"),
                "{reason}"
            );
        }
        other => panic!("poll: {other:?}"),
    }
    // From a seq inside the forged batch: the same error, nothing handed out.
    match LogView::new(dir).reader(next).poll(100) {
        Err(Error::BadBatch {
            path,
            position,
            seq,
            ..
        }) => {
            assert_eq!((path, position, seq), (first.clone(), end, next));
        }
        other => panic!("poll from the next base: {other:?}"),
    }
    assert_eq!(snapshot(dir), before, "a read changed the directory");

    // The log, opened after the clean close: its closed segment ends where the close left
    // it, so every read returns the true records of both segments and nothing of the forgery.
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail)).unwrap();
    let mut all = Vec::new();
    for _ in 0..20 {
        let from = all.last().map_or(1, |r: &krabka_storage::Record| r.seq + 1);
        let got = log.read(from, 7).unwrap();
        if got.is_empty() {
            break;
        }
        all.extend(got);
    }
    assert_eq!(all.len(), 60);
    for r in &all {
        assert_eq!(r.message, msg(r.seq), "Log::read seq {}", r.seq);
    }
    let batches = log.read_batches(next, 1 << 20).unwrap();
    assert_eq!(batches.first_seq(), next);
    assert_eq!(
        batches.path(),
        dir.join(segment::segment_file_name(next, "log"))
    );
    for r in batches.records() {
        assert_ne!(r.unwrap().value.as_deref(), Some(FORGED.as_bytes()));
    }
}

/// A log of closed segments `bounds` (each `first..=last`, the newest active) and a forged
/// batch of seqs `forged` appended to the closed segment that ends just before `forged`
/// starts (its next segment holds those seqs, or some of them). Returns that segment's path,
/// its length before the forgery, and the forged bytes.
fn forge(dir: &Path, bounds: &[(u64, u64)], forged: (u64, u64)) -> (PathBuf, u64, Vec<u8>) {
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail)).unwrap();
    for (i, &(first, last)) in bounds.iter().enumerate() {
        if i > 0 {
            log.roll().unwrap();
        }
        log.append_batch(&(first..=last).map(msg).collect::<Vec<_>>())
            .unwrap();
    }
    log.close().unwrap();
    let base = bounds
        .iter()
        .find(|&&(_, last)| last + 1 == forged.0)
        .map(|&(first, _)| first)
        .unwrap();
    let victim = dir.join(segment::segment_file_name(base, "log"));
    let end = fs::metadata(&victim).unwrap().len();
    // One batch of every forged seq, CRC-valid: only its baseOffset (outside the CRC) puts it
    // under the next segment's seqs.
    let values: Vec<Message> = (forged.0..=forged.1)
        .map(|_| Message::new(FORGED))
        .collect();
    let mut bytes = Vec::new();
    krabka_protocol::batch::encode_messages(
        &mut bytes,
        forged.0 as i64,
        &values,
        krabka_protocol::batch::Compression::None,
        usize::MAX,
    )
    .unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&victim)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
        .unwrap();
    (victim, end, bytes)
}

/// Every segment of `dir` verified as a segment of its log: `(path, verification)`.
fn verify_all(dir: &Path) -> Vec<(PathBuf, segment::SegmentVerification)> {
    let bases = LogView::new(dir).segment_bases().unwrap();
    bases
        .iter()
        .enumerate()
        .map(|(i, &base)| {
            let next = bases.get(i + 1).copied();
            let file = |ext| dir.join(segment::segment_file_name(base, ext));
            let (log, idx, tidx) = (file("log"), file("index"), file("timeindex"));
            let indexes = next.map(|_| (idx.as_path(), tidx.as_path()));
            let v = segment::verify_segment_in_log(
                &log,
                indexes.map(|i| i.0),
                indexes.map(|i| i.1),
                next,
            )
            .unwrap();
            (log, v)
        })
        .collect()
}

/// Every record of `dir` through the read-only reader, until caught up.
fn read_all(dir: &Path) -> Vec<krabka_storage::Record> {
    let mut reader = LogView::new(dir).reader(1);
    let mut got = Vec::new();
    for _ in 0..100 {
        let batch = reader.poll(16).unwrap();
        if batch.is_empty() {
            return got;
        }
        got.extend(batch);
    }
    panic!("the reader never caught up: {} records", got.len());
}

#[test]
fn a_forged_batch_is_the_closed_segments_damage_and_a_repair_moves_only_it_aside() {
    for (what, bounds, forged) in [
        (
            "three forged seqs, part of the next segment's",
            &[(1, 40), (41, 60)][..],
            (41, 43),
        ),
        (
            "thirty forged seqs, past the next segment into the active one",
            &[(1, 40), (41, 60), (61, 80)][..],
            (41, 70),
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (victim, end, bytes) = forge(dir, bounds, forged);
        let last = bounds.last().unwrap().1;
        let forged_len = bytes.len() as u64;

        // Before: verification blames the closed segment's bytes past its end, at their byte,
        // and finds every other segment intact (no seq overlap of the next one).
        let before = verify_all(dir);
        for (path, v) in &before {
            if *path == victim {
                let p = v.problem.as_ref().expect("the forged bytes are a problem");
                assert_eq!(p.position, end, "{what}");
                assert!(
                    p.reason.contains("beyond the end of the closed segment"),
                    "{what}: {}",
                    p.reason
                );
                assert_eq!(v.problem_path.as_ref(), Some(path), "{what}");
                assert_eq!(v.valid_bytes, end, "{what}");
            } else {
                assert!(v.is_ok(), "{what}: {}: {:?}", path.display(), v.problem);
            }
        }
        // The plan a dry run prints: the forged bytes cut, no seq lost, nothing else touched.
        let plans = LogView::new(dir).plan_repair().unwrap();
        assert_eq!(plans.len(), 1, "{what}: {plans:?}");
        assert_eq!((&plans[0].path, plans[0].intact_len), (&victim, end));
        assert!(!plans[0].torn_tail);
        assert_eq!(
            plans[0].steps,
            [krabka_storage::RepairStep::Cut {
                from: end,
                to: end + forged_len,
                seqs: None,
            }],
            "{what}"
        );
        // An open that does not trust the clean close refuses the log naming the forged
        // bytes' file and byte, and changes nothing.
        fs::remove_file(dir.join(krabka_storage::CLEAN_SHUTDOWN_FILE_NAME)).unwrap();
        let untouched = snapshot(dir);
        match Log::open(dir, opts(RecoveryMode::TolerateTornTail)) {
            Err(Error::Corrupt {
                path,
                position,
                reason,
            }) => {
                assert_eq!((&path, position), (&victim, end), "{what}: {reason}");
                assert!(
                    reason.contains("beyond the end of the closed segment"),
                    "{what}: {reason}"
                );
            }
            other => panic!("{what}: {:?}", other.map(|_| ())),
        }
        assert_eq!(
            snapshot(dir),
            untouched,
            "{what}: a refused open changed the directory"
        );

        // The repair: only the forged bytes move, copied into quarantine first; every segment
        // keeps every acknowledged record; no hole.
        let segment_files: Vec<(PathBuf, Vec<u8>)> = untouched
            .iter()
            .filter(|(p, _)| p.extension().is_some_and(|e| e == "log"))
            .cloned()
            .collect();
        let log = Log::open(dir, opts(RecoveryMode::Repair)).unwrap();
        let report = log.recovery_report().clone();
        assert_eq!(report.quarantined.len(), 1, "{what}: {report:?}");
        let piece = &report.quarantined[0];
        assert_eq!(
            (&piece.from, piece.position, piece.bytes, piece.seqs),
            (&victim, end, forged_len, None),
            "{what}"
        );
        assert_eq!(
            fs::read(&piece.to).unwrap(),
            bytes,
            "{what}: quarantined bytes"
        );
        assert!(
            report.kept.is_empty() && report.holes.is_empty(),
            "{what}: {report:?}"
        );
        let mut all = Vec::new();
        for _ in 0..100 {
            let from = all.last().map_or(1, |r: &krabka_storage::Record| r.seq + 1);
            let got = log.read(from, 16).unwrap();
            if got.is_empty() {
                break;
            }
            all.extend(got);
        }
        assert_eq!(all.len() as u64, last, "{what}");
        for r in &all {
            assert_eq!(r.message, msg(r.seq), "{what}: Log::read seq {}", r.seq);
        }
        log.close().unwrap();
        for (path, was) in &segment_files {
            let now = fs::read(path).unwrap();
            if *path == victim {
                assert_eq!(now.len() as u64, end, "{what}: the victim's true bytes");
                assert_eq!(now[..], was[..end as usize], "{what}");
            } else {
                assert_eq!(now, *was, "{what}: {} changed", path.display());
            }
        }

        // After: clean verification, no plan, and every original record read, none forged.
        for (path, v) in verify_all(dir) {
            assert!(v.is_ok(), "{what}: {}: {:?}", path.display(), v.problem);
        }
        assert!(
            LogView::new(dir).plan_repair().unwrap().is_empty(),
            "{what}"
        );
        let got = read_all(dir);
        assert_no_forged(&got, what);
        assert_eq!(got.len() as u64, last, "{what}");
        for r in &got {
            assert_eq!(r.message, msg(r.seq), "{what}: poll seq {}", r.seq);
        }
    }
}

#[test]
fn a_stray_empty_segment_file_inside_a_closed_segments_seqs_is_the_stray_not_its_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail)).unwrap();
    log.append_batch(&(1..=40).map(msg).collect::<Vec<_>>())
        .unwrap();
    log.roll().unwrap();
    log.append_batch(&(41..=60).map(msg).collect::<Vec<_>>())
        .unwrap();
    log.close().unwrap();
    // An empty file named like a segment of seq 30 holds no seq: it does not end the closed
    // segment before it at seq 29.
    let stray = dir.join(segment::segment_file_name(30, "log"));
    fs::write(&stray, b"").unwrap();
    let before = verify_all(dir);
    assert!(before[0].1.is_ok(), "{:?}", before[0].1.problem);
    assert_eq!(before[0].1.last_seq, Some(40));
    assert!(LogView::new(dir).plan_repair().unwrap().is_empty());
    // The open names the stray file as the overlap; a repair moves it aside, whole.
    match Log::open(dir, opts(RecoveryMode::TolerateTornTail)) {
        Err(Error::SeqOverlap { path, found, .. }) => {
            assert_eq!((path, found), (stray.clone(), 30))
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let log = Log::open(dir, opts(RecoveryMode::Repair)).unwrap();
    let moved: Vec<&PathBuf> = log
        .recovery_report()
        .quarantined
        .iter()
        .map(|q| &q.from)
        .collect();
    assert_eq!(moved, [&stray]);
    let got = log.read(1, 100).unwrap();
    assert_eq!(got.len(), 60);
    for r in &got {
        assert_eq!(r.message, msg(r.seq), "seq {}", r.seq);
    }
}
