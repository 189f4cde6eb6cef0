//! The clean-shutdown marker: an open after `Log::close` loads the active segment without a
//! scan, and only then — a stale, damaged or mismatching marker, a repair, or a crash after an
//! append always means a scan, and never an error of its own.
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
    closed_log(dir.path(), 80);
    let saved = fs::read(marker(dir.path())).unwrap();
    let log = open(dir.path());
    let before = log.segments().pop().unwrap();
    fill(&log, 5);
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
    check_all(&log, 80);
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
fn a_marker_whose_index_files_are_gone_or_damaged_means_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    closed_log(dir.path(), 60);
    let active = open(dir.path()).segments().pop().unwrap();
    let saved = fs::read(&active.index_path).unwrap();
    fs::remove_file(&active.index_path).unwrap();
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    check_all(&log, 60);
    log.close().unwrap();
    let mut bad = saved;
    let at = bad.len() / 2;
    bad[at] ^= 1;
    fs::write(&active.index_path, bad).unwrap();
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    check_all(&log, 60);
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
    assert!(log.append(&msg(21)).is_err());
    assert_eq!(fs::metadata(&active.log_path).unwrap().len(), active.size);
    assert!(matches!(log.append(&msg(21)), Err(Error::Poisoned { .. })));
    drop(log);
    let log = open(dir.path());
    check_all(&log, 20);
}
