//! The clean-shutdown marker: an open after `Log::close` builds the log from the marker without
//! a scan or an index read (index entries load at first use), and only then — a stale, damaged
//! or mismatching marker, a repair, or a crash after an append always means the full recovery,
//! and never an error of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::Path;

use krabka_protocol::Message;
use krabka_storage::{CLEAN_SHUTDOWN_FILE_NAME, Error, Log, Options, RecoveryMode, SyncPolicy};

fn opts(mode: RecoveryMode) -> Options {
    Options {
        max_bytes: 4000,
        sync: SyncPolicy::Never,
        index_interval_bytes: 256,
        recovery: mode,
        ..Options::default()
    }
}

fn open(dir: &Path) -> Log {
    Log::open(dir, opts(RecoveryMode::TolerateTornTail)).unwrap()
}

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}-{}", "y".repeat((seq % 40) as usize)))
        .with_key(format!("k{seq}"))
        .with_timestamp(seq as i64 * 3)
}

fn fill(log: &Log, n: u64) {
    for _ in 0..n {
        let seq = log.next_seq();
        assert_eq!(log.append(&msg(seq)).unwrap(), seq);
    }
}

/// Every record is there, in order, and the last one is `last`.
fn check_all(log: &Log, last: u64) {
    assert_eq!(log.last_seq(), last);
    let recs = log.read(1, usize::MAX).unwrap();
    assert_eq!(recs.len() as u64, last);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!((r.seq, &r.message), (i as u64 + 1, &msg(i as u64 + 1)));
    }
    // Point reads go through the index entries the open restored.
    for seq in (1..=last).step_by(7) {
        assert_eq!(log.read(seq, 1).unwrap()[0].message, msg(seq));
    }
}

fn marker(dir: &Path) -> std::path::PathBuf {
    dir.join(CLEAN_SHUTDOWN_FILE_NAME)
}

/// A closed log of `n` records whose active segment holds some of them.
fn closed_log(dir: &Path, n: u64) {
    let log = open(dir);
    fill(&log, n);
    let active = log.segments().pop().unwrap();
    assert!(
        active.last_seq >= active.base_seq,
        "the active segment holds records"
    );
    log.close().unwrap();
    assert!(marker(dir).exists());
}

#[test]
fn reopen_after_a_clean_close_skips_the_scan_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 100);
    let log = open(dir.path());
    let report = log.recovery_report().clone();
    assert!(report.clean_shutdown && report.is_clean(), "{report:?}");
    assert_eq!(report.scanned_bytes, 0);
    assert!(report.ignored_files.is_empty(), "{report:?}");
    check_all(&log, 100);
    // The first append removes the marker and the active segment's index files first.
    let active = log.segments().pop().unwrap();
    assert!(active.index_path.exists());
    fill(&log, 1);
    assert!(!marker(dir.path()).exists());
    assert!(!active.index_path.exists() && !active.time_index_path.exists());
    fill(&log, 60);
    check_all(&log, 161);
    assert_eq!(log.seq_for_timestamp(150 * 3).unwrap(), Some(150));
    log.close().unwrap();
    let log = open(dir.path());
    assert!(log.recovery_report().clean_shutdown);
    check_all(&log, 161);
}

#[test]
fn an_open_without_writes_keeps_the_marker_valid() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 50);
    drop(open(dir.path()));
    let log = open(dir.path());
    assert!(log.recovery_report().clean_shutdown);
    log.close().unwrap();
    let log = open(dir.path());
    assert!(log.recovery_report().clean_shutdown);
    check_all(&log, 50);
}

#[test]
fn a_crash_after_reopen_and_append_rescans() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 80);
    let saved = fs::read(marker(dir.path())).unwrap();
    let log = open(dir.path());
    assert!(log.recovery_report().clean_shutdown);
    fill(&log, 5);
    let active = log.segments().pop().unwrap();
    // A crash: no close.
    drop(log);
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    assert_eq!(log.recovery_report().scanned_bytes, active.size);
    check_all(&log, 85);
    drop(log);
    // Even if the marker's removal were lost, the file no longer matches it.
    fs::write(marker(dir.path()), &saved).unwrap();
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    check_all(&log, 85);
    // Open changes nothing; the first write removes the stale marker.
    assert!(marker(dir.path()).exists());
    fill(&log, 1);
    assert!(!marker(dir.path()).exists(), "a stale marker is removed");
}

#[test]
fn a_stale_marker_over_a_file_cut_back_to_its_length_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 70);
    let saved = fs::read(marker(dir.path())).unwrap();
    let log = open(dir.path());
    let before = log.segments().pop().unwrap();
    fill(&log, 5);
    let after = log.segments().pop().unwrap();
    assert_eq!(
        after.base_seq, before.base_seq,
        "the appends stay in the segment"
    );
    drop(log);
    // The appended bytes are lost and the old marker is back: same length, same base, same
    // inode, but the file was written since the close.
    fs::OpenOptions::new()
        .write(true)
        .open(&before.log_path)
        .unwrap()
        .set_len(before.size)
        .unwrap();
    fs::write(marker(dir.path()), &saved).unwrap();
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    assert_eq!(log.recovery_report().scanned_bytes, before.size);
    check_all(&log, 70);
}

#[test]
fn a_marker_of_another_length_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 30);
    let older = fs::read(marker(dir.path())).unwrap();
    let log = open(dir.path());
    fill(&log, 3);
    let active = log.segments().pop().unwrap();
    log.close().unwrap();
    // The marker of the first close names a shorter file.
    fs::write(marker(dir.path()), &older).unwrap();
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    assert_eq!(log.recovery_report().scanned_bytes, active.size);
    check_all(&log, 33);
}

#[test]
fn a_damaged_marker_is_ignored_not_trusted_and_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 40);
    let good = fs::read(marker(dir.path())).unwrap();
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        fs::write(marker(dir.path()), &bad).unwrap();
        let log = open(dir.path());
        assert!(!log.recovery_report().clean_shutdown, "byte {i}");
        assert!(log.recovery_report().scanned_bytes > 0);
        assert!(log.recovery_report().is_clean());
        assert_eq!(log.last_seq(), 40);
        drop(log);
    }
    for bytes in [&b""[..], b"garbage", &good[..good.len() - 1]] {
        fs::write(marker(dir.path()), bytes).unwrap();
        let log = open(dir.path());
        assert!(!log.recovery_report().clean_shutdown);
        check_all(&log, 40);
    }
    // Not even a file: ignored, and appends go on.
    fs::remove_file(marker(dir.path())).unwrap();
    fs::create_dir(marker(dir.path())).unwrap();
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    fill(&log, 2);
    check_all(&log, 42);
}

#[test]
fn index_files_gone_or_damaged_after_a_clean_close_are_rebuilt_by_a_scan_at_first_use() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 200);
    let segs = open(dir.path()).segments();
    assert!(segs.len() >= 3, "closed segments too: {segs:?}");
    let (first, active) = (&segs[0], &segs[segs.len() - 1]);
    let saved = fs::read(&active.index_path).unwrap();
    // Open reads no index file: it trusts the marker; reads rebuild the entries by a scan.
    fs::remove_file(&active.index_path).unwrap();
    fs::remove_file(&first.time_index_path).unwrap();
    let log = open(dir.path());
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(log.recovery_report().scanned_bytes, 0);
    check_all(&log, 200);
    assert_eq!(log.seq_for_timestamp(3).unwrap(), Some(1));
    drop(log);
    // Damaged the other way round; the first append loads the active entries before it
    // removes the active segment's index files.
    let mut bad = saved;
    let at = bad.len() / 2;
    bad[at] ^= 1;
    fs::write(&active.index_path, bad).unwrap();
    let mut bad = fs::read(&first.index_path).unwrap();
    let at = bad.len() - 9;
    bad[at] ^= 1;
    fs::write(&first.index_path, bad).unwrap();
    let log = open(dir.path());
    assert!(log.recovery_report().clean_shutdown);
    fill(&log, 40);
    check_all(&log, 240);
    log.close().unwrap();
    let log = open(dir.path());
    check_all(&log, 240);
}

#[test]
fn a_closed_segment_cut_or_grown_after_a_clean_close_never_serves_a_wrong_record() {
    for delta in [-3i64, 5] {
        let dir = tempfile::tempdir().unwrap();
        closed_log(dir.path(), 200);
        let segs = open(dir.path()).segments();
        let second = &segs[1];
        let len = second.size.checked_add_signed(delta).unwrap();
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&second.log_path)
            .unwrap();
        f.set_len(len).unwrap();
        // No directory entry changed: open trusts the marker without listing the directory
        // or checking lengths. Every record still there reads exactly; a read of one that was
        // cut off fails naming the file; bytes past the recorded end are never read.
        let log = open(dir.path());
        assert!(log.recovery_report().clean_shutdown);
        assert_eq!(log.read(1, 1).unwrap()[0].message, msg(1));
        let first = second.base_seq;
        assert_eq!(log.read(first, 1).unwrap()[0].message, msg(first));
        let last = second.last_seq;
        match log.read(last, 1) {
            Ok(recs) if delta > 0 => assert_eq!(recs[0].message, msg(last)),
            Ok(recs) => panic!("{delta}: a cut record was served: {recs:?}"),
            Err(err) => assert!(
                delta < 0
                    && matches!(&err, Error::Corrupt { path, .. } if *path == second.log_path),
                "{delta}: {err}"
            ),
        }
        let third = segs[2].base_seq;
        assert_eq!(log.read(third, 1).unwrap()[0].message, msg(third));
        drop(log);
        // Once an entry of the directory changed, open lists it and checks every length:
        // the open fails naming the file, as without a marker. Cut: records are at stake.
        // Grown: the bytes past the segment's last record hold none of the log's (the next
        // segment holds the seqs after it), so they are this file's corrupt bytes.
        fs::write(dir.path().join("stray"), b"x").unwrap();
        let err = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap_err();
        let named = match &err {
            Error::Damaged { path, .. } => delta < 0 && *path == second.log_path,
            Error::Corrupt { path, position, .. } => {
                delta > 0 && *path == second.log_path && *position == second.size
            }
            _ => false,
        };
        assert!(named, "{delta}: {err}");
        // A repair moves the damage aside and the rest reads on.
        let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
        assert!(!log.recovery_report().quarantined.is_empty());
        assert_eq!(log.read(third, 1).unwrap()[0].message, msg(third));
    }
}

#[test]
fn a_stray_file_after_a_clean_close_is_listed_and_the_marker_still_trusted() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 200);
    fs::write(dir.path().join("notes.txt"), b"x").unwrap();
    let log = open(dir.path());
    let report = log.recovery_report();
    assert!(report.clean_shutdown, "{report:?}");
    assert_eq!(report.ignored_files, vec![dir.path().join("notes.txt")]);
    check_all(&log, 200);
}

#[test]
fn an_active_segment_changed_behind_a_preserved_modification_time_fails_the_first_write() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 200);
    let active = open(dir.path()).segments().pop().unwrap();
    let mtime = fs::metadata(&active.log_path).unwrap().modified().unwrap();
    let mut bytes = fs::read(&active.log_path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&active.log_path)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &bytes, 0).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    fs::remove_file(&active.index_path).unwrap();
    let log = open(dir.path());
    assert!(
        log.recovery_report().clean_shutdown,
        "the marker cannot tell"
    );
    // The entries must be rebuilt by a scan, which finds the damage: the write is refused
    // naming the file, and the marker is removed so that the next open scans.
    let err = log.append(&msg(201)).unwrap_err();
    assert!(
        matches!(&err, Error::Damaged { path, .. } if *path == active.log_path),
        "{err}"
    );
    assert!(!marker(dir.path()).exists());
    assert_eq!(fs::metadata(&active.log_path).unwrap().len(), active.size);
    drop(log);
    let err = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap_err();
    assert!(
        matches!(err, Error::Damaged { .. } | Error::TornTail { .. }),
        "{err}"
    );
}

#[test]
fn a_repair_ignores_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 70);
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    let active = log.segments().pop().unwrap();
    assert!(!log.recovery_report().clean_shutdown);
    assert!(log.recovery_report().scanned_bytes >= active.size);
    check_all(&log, 70);
}

#[test]
fn a_flipped_byte_after_a_clean_close_is_still_found_at_open() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 90);
    let active = open(dir.path()).segments().pop().unwrap();
    let mut bytes = fs::read(&active.log_path).unwrap();
    bytes[30] ^= 0x40;
    fs::write(&active.log_path, bytes).unwrap();
    let err = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap_err();
    assert!(
        matches!(err, Error::Damaged { .. } | Error::TornTail { .. }),
        "{err}"
    );
}

#[test]
fn a_failed_invalidation_poisons_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 20);
    let log = open(dir.path());
    let active = log.segments().pop().unwrap();
    log.faults().fail_nth_fsync(1);
    // The fsync of the directory after removing the clean-shutdown marker fails.
    let first = log.append(&msg(21));
    assert!(
        matches!(&first, Err(Error::Io { path, .. }) if path == dir.path()),
        "{first:?}"
    );
    assert_eq!(fs::metadata(&active.log_path).unwrap().len(), active.size);
    assert!(matches!(log.append(&msg(21)), Err(Error::Poisoned { .. })));
    drop(log);
    let log = open(dir.path());
    check_all(&log, 20);
}

#[test]
fn lazy_index_loads_race_appends_and_retention_without_a_wrong_record() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 400);
    let log = std::sync::Arc::new(open(dir.path()));
    assert!(log.recovery_report().clean_shutdown);
    assert!(log.segments().len() > 5);
    let readers: Vec<_> = (0..3u64)
        .map(|t| {
            let log = std::sync::Arc::clone(&log);
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t);
                for _ in 0..2000 {
                    let seq = rng.u64(1..=400);
                    match log.read(seq, 3) {
                        Ok(recs) => {
                            for r in recs {
                                assert_eq!(r.message, msg(r.seq), "seq {}", r.seq);
                            }
                        }
                        Err(Error::OutOfRange { .. }) => {}
                        Err(e) => panic!("read {seq}: {e}"),
                    }
                    let ts = seq as i64 * 3;
                    match log.seq_for_timestamp(ts) {
                        Ok(Some(found)) => {
                            assert!(found == seq || (found > seq && seq < log.first_seq()));
                        }
                        Ok(None) => panic!("no seq for timestamp {ts}"),
                        Err(e) => panic!("timestamp {ts}: {e}"),
                    }
                }
            })
        })
        .collect();
    fill(&log, 100);
    log.delete_before(150).unwrap();
    fill(&log, 100);
    for r in readers {
        r.join().unwrap();
    }
    let first = log.first_seq();
    assert!(first > 1 && first <= 150);
    let recs = log.read(first, usize::MAX).unwrap();
    assert_eq!(recs.len() as u64, 600 - first + 1);
    for r in recs {
        assert_eq!(r.message, msg(r.seq));
    }
}

#[test]
fn a_trusted_open_describes_the_log_exactly_as_a_full_recovery_does() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 300);
    let trusted = open(dir.path());
    assert!(trusted.recovery_report().clean_shutdown);
    let (segs, bytes, first, last) = (
        trusted.segments(),
        trusted.bytes(),
        trusted.first_seq(),
        trusted.last_seq(),
    );
    let by_time: Vec<_> = [0, 3, 150, 299 * 3, 900, 901]
        .iter()
        .map(|&ts| trusted.seq_for_timestamp(ts).unwrap())
        .collect();
    drop(trusted);
    fs::remove_file(marker(dir.path())).unwrap();
    let full = open(dir.path());
    assert!(!full.recovery_report().clean_shutdown);
    assert_eq!(full.segments(), segs);
    assert_eq!(full.bytes(), bytes);
    assert_eq!((full.first_seq(), full.last_seq()), (first, last));
    let again: Vec<_> = [0, 3, 150, 299 * 3, 900, 901]
        .iter()
        .map(|&ts| full.seq_for_timestamp(ts).unwrap())
        .collect();
    assert_eq!(again, by_time);
    assert_eq!(by_time[5], None);
}
