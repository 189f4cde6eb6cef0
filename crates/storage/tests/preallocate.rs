//! Preallocated segments (`Options::preallocate`): the active segment's file is given its whole
//! `max_bytes` at its first write; a roll or a close cuts it back to its true end; after a
//! crash the zeros after the newest segment's last batch are its preallocated space, while a
//! zero run between batches, or non-zero garbage after them, is damage as before.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use krabka_protocol::Message;
use krabka_storage::segment::{DumpFile, segment_file_name, verify_segment};
use krabka_storage::view::LogView;
use krabka_storage::{Error, Log, Options, SyncPolicy};

const CHILD_ENV: &str = "KRABKA_PREALLOC_CHILD_DIR";
const MAX_BYTES: u64 = 256 << 10;

fn options() -> Options {
    Options {
        max_bytes: MAX_BYTES,
        sync: SyncPolicy::EveryAppend,
        preallocate: true,
        ..Options::default()
    }
}

fn message_for(seq: u64) -> Message {
    let len = (seq * 37 % 700) as usize + 1;
    Message::new(vec![(seq % 251) as u8 | 1; len]).with_timestamp(seq as i64)
}

fn log_file(dir: &Path, base: u64) -> std::path::PathBuf {
    dir.join(segment_file_name(base, "log"))
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

/// Appends `n` records and drops the log without closing it (as a crash of the process
/// leaves it); returns the active segment's base seq and true end.
fn crash_after(dir: &Path, n: u64) -> (u64, u64) {
    let log = Log::open(dir, options()).unwrap();
    for s in 1..=n {
        log.append(&message_for(s)).unwrap();
    }
    let active = log.segments().pop().unwrap();
    drop(log);
    (active.base_seq, active.size)
}

#[test]
fn prealloc_child_appends_until_killed() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let log = Log::open(&dir, options()).unwrap();
    let mut out = std::io::stdout().lock();
    for _ in 0..200_000u64 {
        let next = log.last_seq() + 1;
        let seq = log.append(&message_for(next)).unwrap();
        writeln!(out, "ACK {seq}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_mid_append_with_a_preallocated_tail_then_verify_dump_and_open_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut acked = 0;
    for round in 0..4u64 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "prealloc_child_appends_until_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ACK ") {
                    let _ = tx.send(n.trim().parse::<u64>().unwrap());
                }
            }
        });
        let _ = rx.recv_timeout(Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(150 + 70 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        acked = rx.try_iter().max().unwrap_or(0).max(acked);
        assert!(acked > 0, "round {round}: the child acknowledged nothing");

        // Before any open: the directory as the kill left it, the newest file preallocated.
        let view = LogView::new(dir.path());
        let bases = view.segment_bases().unwrap();
        let newest = log_file(dir.path(), *bases.last().unwrap());
        // Empty when the kill came between a roll and the new segment's first write; cut to
        // its batches when it came inside a roll, after the old segment's cut and before the new
        // segment's file (then it holds its batches only, and no zero tail).
        let len = file_len(&newest);
        let fresh = len == 0;
        let cut_by_roll = len > 0 && len < MAX_BYTES && {
            let v = verify_segment(&newest).unwrap();
            v.is_ok() && v.valid_bytes == v.file_bytes
        };
        assert!(
            fresh || cut_by_roll || len == MAX_BYTES,
            "round {round}: not preallocated: {len} bytes"
        );
        let report = view.verify().unwrap();
        assert!(report.is_ok(), "round {round}: {report:?}");
        assert!(report.cut_at_open.is_empty(), "round {round}: {report:?}");
        for &base in &bases[..bases.len() - 1] {
            // Every closed file holds its batches only.
            let v = verify_segment(&log_file(dir.path(), base)).unwrap();
            assert!(v.is_ok() && v.valid_bytes == v.file_bytes, "{v:?}");
        }
        let mut dump = DumpFile::open(&newest).unwrap();
        let walked: Vec<_> = dump.by_ref().collect::<Result<_, _>>().unwrap();
        assert!(walked.iter().all(|b| b.crc_ok && b.problem.is_none()));
        let end = walked.last().map_or(0, |b| b.position + b.batch_len);
        assert_eq!(
            dump.zero_tail(),
            (!fresh && !cut_by_roll).then_some(end),
            "round {round}"
        );

        let log = Log::open(dir.path(), options()).unwrap();
        assert!(log.recovery_report().truncated.is_none(), "round {round}");
        assert!(log.recovery_report().quarantined.is_empty());
        assert!(
            log.last_seq() >= acked,
            "acked {acked}, found {}",
            log.last_seq()
        );
        let recs = log.read(1, usize::MAX).unwrap();
        assert_eq!(recs.len() as u64, log.last_seq());
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.seq, i as u64 + 1);
            assert_eq!(r.message, message_for(r.seq));
        }
        assert_eq!(log.segments().last().unwrap().size, end);
        log.close().unwrap();
        assert_eq!(file_len(&newest), end, "close cuts the preallocated space");
    }
}

#[test]
fn a_closed_preallocated_segment_holds_only_its_records_and_close_cuts_the_active_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), options()).unwrap();
    let mut s = 0;
    while log.segments().len() < 3 {
        s += 1;
        log.append(&message_for(s)).unwrap();
    }
    let segs = log.segments();
    for seg in &segs[..2] {
        assert_eq!(file_len(&seg.log_path), seg.size, "{seg:?}");
        let v = verify_segment(&seg.log_path).unwrap();
        assert!(v.is_ok() && v.valid_bytes == seg.size, "{v:?}");
    }
    let active = segs.last().unwrap();
    assert_eq!(file_len(&active.log_path), MAX_BYTES);
    log.close().unwrap();
    assert_eq!(file_len(&active.log_path), active.size);
    // A clean reopen trusts the close, and appends preallocate again.
    let log = Log::open(dir.path(), options()).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    log.append(&message_for(s + 1)).unwrap();
    assert_eq!(file_len(&active.log_path), MAX_BYTES);
    assert_eq!(log.read(1, usize::MAX).unwrap().len() as u64, s + 1);
}

#[test]
fn a_crash_with_a_preallocated_tail_loses_nothing_and_appends_continue_at_the_true_end() {
    let dir = tempfile::tempdir().unwrap();
    let (base, end) = crash_after(dir.path(), 20);
    assert_eq!(file_len(&log_file(dir.path(), base)), MAX_BYTES);
    let log = Log::open(dir.path(), options()).unwrap();
    assert!(log.recovery_report().truncated.is_none());
    assert_eq!(log.last_seq(), 20);
    assert_eq!(log.segments().last().unwrap().size, end);
    assert_eq!(log.append(&message_for(21)).unwrap(), 21);
    let recs = log.read(1, usize::MAX).unwrap();
    assert!(recs.iter().all(|r| r.message == message_for(r.seq)));
    assert_eq!(recs.len(), 21);
    log.close().unwrap();
}

#[test]
fn a_zero_run_between_valid_batches_of_a_preallocated_segment_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = crash_after(dir.path(), 3);
    let path = log_file(dir.path(), base);
    // Zero the second batch: zeros, then a valid batch, then the preallocated zeros.
    let batches: Vec<_> = DumpFile::open(&path)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let second = &batches[1];
    let zeros = vec![0u8; second.batch_len as usize];
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&zeros, second.position)
        .unwrap();
    let report = LogView::new(dir.path()).verify().unwrap();
    assert!(!report.is_ok(), "{report:?}");
    // A reader hands out the first record, then names the zeros as the bad batch they are.
    let mut reader = LogView::new(dir.path()).reader(1);
    let first = reader.poll(100).unwrap();
    assert_eq!(first.iter().map(|r| r.seq).collect::<Vec<_>>(), [1]);
    let bad = reader.poll(100);
    assert!(
        matches!(&bad, Err(Error::BadBatch { position, seq: 2, .. }) if *position == second.position),
        "{bad:?}"
    );
    let opened = Log::open(dir.path(), options());
    assert!(
        matches!(&opened, Err(Error::Damaged { position, .. }) if *position == second.position),
        "{opened:?}"
    );
}

#[test]
fn non_zero_garbage_in_the_preallocated_tail_is_a_torn_tail_saved_without_the_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let (base, end) = crash_after(dir.path(), 5);
    let path = log_file(dir.path(), base);
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&[0xAB; 40], end)
        .unwrap();
    let strict = Log::open(
        dir.path(),
        Options {
            recovery: krabka_storage::RecoveryMode::Strict,
            ..options()
        },
    );
    assert!(
        matches!(&strict, Err(Error::TornTail { position, .. }) if *position == end),
        "{strict:?}"
    );
    let log = Log::open(dir.path(), options()).unwrap();
    let report = log.recovery_report().clone();
    let cut = report.truncated.as_ref().unwrap();
    assert_eq!((cut.position, cut.bytes_removed), (end, MAX_BYTES - end));
    let piece = &report.quarantined[0];
    assert_eq!((piece.position, piece.bytes), (end, 40));
    assert_eq!(fs::read(&piece.to).unwrap(), vec![0xAB; 40]);
    assert_eq!(log.last_seq(), 5);
    log.close().unwrap();
    assert_eq!(file_len(&path), end);
}

#[test]
fn a_reader_follows_a_live_preallocated_log_across_rolls_and_stops_at_its_true_end() {
    const N: u64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            ..options()
        },
    )
    .unwrap();
    let mut reader = LogView::new(dir.path()).reader(1);
    let writer = std::thread::spawn(move || {
        for s in 1..=N {
            assert_eq!(log.append(&message_for(s)).unwrap(), s);
        }
        log
    });
    let mut next = 1;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for _ in 0..1_000_000 {
        if next > N || std::time::Instant::now() > deadline {
            break;
        }
        let records = reader.poll(50).unwrap();
        for r in &records {
            assert_eq!((r.seq, &r.message), (next, &message_for(next)));
            next += 1;
        }
        if records.is_empty() {
            assert_eq!(reader.incomplete_tail(), None);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(next, N + 1, "read every record the writer appended");
    let log = writer.join().unwrap();
    let segs = log.segments();
    assert!(segs.len() > 3, "the writer rolled: {}", segs.len());
    let active = segs.last().unwrap();
    // Caught up at the true end of a file still preallocated: nothing more, nothing torn.
    assert_eq!(file_len(&active.log_path), MAX_BYTES);
    assert!(reader.poll(50).unwrap().is_empty());
    assert_eq!(reader.incomplete_tail(), None);
    log.append(&message_for(N + 1)).unwrap();
    let more = reader.poll(50).unwrap();
    assert_eq!(more.iter().map(|r| r.seq).collect::<Vec<_>>(), [N + 1]);
    log.close().unwrap();
    assert!(reader.poll(50).unwrap().is_empty());
    assert_eq!(reader.incomplete_tail(), None);
}
