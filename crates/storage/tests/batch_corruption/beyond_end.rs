//! A CRC-valid batch appended to a closed segment, its `baseOffset` (outside Kafka's CRC) the
//! next segment's base: its records would read as the next segment's seqs, values never
//! appended there. No reader hands one of them out: the read-only reader, `Log::read` and
//! `Log::read_batches` stop at that batch, naming the file and the byte, after the records
//! before it; verification and the open refuse the log without changing it.

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
        segment::encode_frame(41 + i, &Message::new(FORGED), &mut forged).unwrap();
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
        Error::BadFrame {
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
        Err(Error::BadFrame {
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
