//! Behaviour of the `Log` API, one scenario per test.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_protocol::{Bytes, Message};
use krabka_storage::segment::{
    self, BATCH_HEADER_LEN, decode_records, lookup_position, lookup_time, verify_segment,
};
use krabka_storage::{Error, Log, Options, SyncPolicy};

fn opts(max_bytes: u64) -> Options {
    Options {
        max_bytes,
        sync: SyncPolicy::Never,
        index_interval_bytes: 256,
        ..Options::default()
    }
}

/// The bytes of the log's files in `dir`, the active segment's `.log` counted to its true end:
/// a preallocated one (`Options::preallocate`) is longer, zeros past its last batch.
fn on_disk_bytes(dir: &Path, log: &Log) -> u64 {
    let active = log.segments().pop().unwrap();
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let len = e.metadata().unwrap().len();
            if e.path() != active.log_path {
                return len;
            }
            assert!(len >= active.size, "{active:?}: {len} bytes");
            let tail = fs::read(&active.log_path).unwrap();
            assert!(tail[active.size as usize..].iter().all(|&b| b == 0));
            active.size
        })
        .sum()
}

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}-{}", "x".repeat((seq % 50) as usize)))
        .with_key(format!("k{seq}"))
        .with_timestamp(seq as i64 * 10)
}

fn fill(log: &Log, n: u64) {
    for _ in 0..n {
        let seq = log.last_seq() + 1;
        assert_eq!(log.append(&msg(seq)).unwrap(), seq);
    }
}

fn check_all(log: &Log) {
    let first = log.first_seq();
    let recs = log.read(first, usize::MAX).unwrap();
    assert_eq!(recs.len() as u64, log.last_seq() + 1 - first);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.seq, first + i as u64);
        assert_eq!(r.message, msg(r.seq));
    }
}

#[test]
fn new_log_is_empty_and_first_append_gets_seq_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(0)).unwrap();
    assert_eq!((log.first_seq(), log.last_seq()), (0, 0));
    assert!(log.read(1, 10).unwrap().is_empty());
    assert!(matches!(log.read(2, 10), Err(Error::OutOfRange { .. })));
    assert_eq!(log.append(&msg(1)).unwrap(), 1);
    assert_eq!((log.first_seq(), log.last_seq()), (1, 1));
    assert!(dir.path().join("00000000000000000001.log").exists());
}

#[test]
fn read_respects_range_and_max() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(2000)).unwrap();
    fill(&log, 100);
    assert!(log.segments().len() > 3);
    let r = log.read(37, 20).unwrap();
    assert_eq!(r.first().unwrap().seq, 37);
    assert_eq!(r.len(), 20);
    assert!(log.read(101, 5).unwrap().is_empty());
    assert!(matches!(
        log.read(102, 5),
        Err(Error::OutOfRange { seq: 102, .. })
    ));
    assert!(log.read(5, 0).unwrap().is_empty());
    assert_eq!(log.read(99, 100).unwrap().len(), 2);
    check_all(&log);
}

#[test]
fn reopen_keeps_records_and_uses_index_files_for_closed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(2000)).unwrap();
    fill(&log, 200);
    let segs = log.segments();
    log.close().unwrap();
    let log = Log::open(dir.path(), opts(2000)).unwrap();
    assert!(log.recovery_report().is_clean());
    // After a clean close nothing is scanned (tests/clean_shutdown.rs has the rest).
    assert_eq!(log.recovery_report().scanned_bytes, 0);
    assert_eq!(log.segments(), segs);
    check_all(&log);
    fill(&log, 10);
    check_all(&log);
}

#[test]
fn segment_rolls_before_exceeding_max_bytes_and_big_message_gets_own_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    fill(&log, 30);
    for s in log.segments() {
        assert!(s.size <= 1000, "{s:?}");
    }
    let big = Message::new(vec![7u8; 5000]);
    let seq = log.append(&big).unwrap();
    let segs = log.segments();
    let own = segs.iter().find(|s| s.base_seq == seq).unwrap();
    assert_eq!(own.last_seq, seq);
    log.append(&msg(seq + 1)).unwrap();
    let segs = log.segments();
    assert_eq!(segs.last().unwrap().base_seq, seq + 1);
    assert_eq!(log.read(seq, 1).unwrap()[0].message, big);
}

#[test]
fn message_over_max_message_bytes_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        max_message_bytes: 100,
        ..opts(0)
    };
    let log = Log::open(dir.path(), o).unwrap();
    let r = log.append(&Message::new(vec![0u8; 200]));
    assert!(matches!(r, Err(Error::MessageTooLarge { max: 100, .. })));
    let r = log.append_batch(&[msg(1), Message::new(vec![0u8; 200])]);
    assert!(matches!(r, Err(Error::MessageTooLarge { .. })));
    assert_eq!(log.last_seq(), 0);
}

#[test]
fn invalid_options_and_file_path_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        index_interval_bytes: 0,
        ..Options::default()
    };
    assert!(matches!(
        Log::open(dir.path(), o),
        Err(Error::InvalidOptions {
            field: "index_interval_bytes",
            ..
        })
    ));
    let o = Options {
        max_message_bytes: 3,
        ..Options::default()
    };
    match Log::open(dir.path(), o) {
        Err(e @ Error::InvalidOptions { .. }) => {
            assert!(matches!(
                e,
                Error::InvalidOptions {
                    field: "max_message_bytes",
                    ..
                }
            ));
            assert!(e.to_string().contains("max_message_bytes"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let file = dir.path().join("f");
    fs::write(&file, b"x").unwrap();
    assert!(matches!(
        Log::open(&file, Options::default()),
        Err(Error::NotADirectory { .. })
    ));
}

#[test]
fn append_batch_assigns_contiguous_seqs_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(1500)).unwrap();
    fill(&log, 3);
    let batch: Vec<Message> = (4..=103).map(msg).collect();
    assert_eq!(log.append_batch(&batch).unwrap(), 4..=103);
    let empty = log.append_batch(&[]).unwrap();
    assert_eq!((*empty.start(), *empty.end()), (104, 103));
    for s in log.segments() {
        assert!(s.size <= 1500);
    }
    check_all(&log);
}

#[test]
fn delete_before_drops_only_whole_segments_and_never_the_active_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    fill(&log, 60);
    let segs = log.segments();
    let second = segs[1].clone();
    log.delete_before(second.base_seq + 1).unwrap();
    assert_eq!(log.first_seq(), second.base_seq);
    assert!(!segs[0].log_path.exists() && !segs[0].index_path.exists());
    assert!(matches!(
        log.read(second.base_seq - 1, 1),
        Err(Error::OutOfRange { .. })
    ));
    log.delete_before(u64::MAX).unwrap();
    assert_eq!(log.segments().len(), 1);
    assert_eq!(log.last_seq(), 60);
    assert_eq!(log.first_seq(), log.segments()[0].base_seq);
    check_all(&log);
    drop(log);
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    check_all(&log);
    // A log whose only segment is the empty active one after a roll.
    log.roll().unwrap();
    log.delete_before(u64::MAX).unwrap();
    assert_eq!((log.first_seq(), log.last_seq()), (61, 60));
    assert!(log.read(61, 1).unwrap().is_empty());
    assert_eq!(log.append(&msg(61)).unwrap(), 61);
}

#[test]
fn trim_over_bytes_frees_oldest_segments_until_under_target() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    fill(&log, 100);
    let before = log.bytes();
    let target = before / 2;
    let freed = log.trim_over_bytes(target).unwrap();
    assert_eq!(log.bytes(), before - freed);
    assert!(log.bytes() <= target);
    assert_eq!(on_disk_bytes(dir.path(), &log), log.bytes());
    log.trim_over_bytes(0).unwrap();
    assert_eq!(log.segments().len(), 1);
    assert_eq!(log.last_seq(), 100);
    check_all(&log);
}

#[test]
fn roll_closes_active_segment_with_index_files_and_is_noop_when_empty() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(0)).unwrap();
    log.roll().unwrap();
    assert_eq!(log.segments().len(), 1);
    fill(&log, 10);
    log.roll().unwrap();
    log.roll().unwrap();
    let segs = log.segments();
    assert_eq!(segs.len(), 2);
    assert!(!segs[0].active && segs[1].active);
    assert!(segs[0].index_path.exists() && segs[0].time_index_path.exists());
    assert_eq!((segs[1].base_seq, segs[1].last_seq), (11, 10));
    assert_eq!(segs[0].max_timestamp, 100);
    // The closed segment can be read from its bytes alone.
    let bytes = Bytes::from(fs::read(&segs[0].log_path).unwrap());
    let index = fs::read(&segs[0].index_path).unwrap();
    let pos = lookup_position(&index, 7).unwrap() as usize;
    let d = decode_records(&bytes.slice(pos..), 7, 100).unwrap();
    assert_eq!(d.records.first().unwrap().seq, 7);
    assert_eq!(d.records.len(), 4);
    let tindex = fs::read(&segs[0].time_index_path).unwrap();
    let from = lookup_time(&tindex, 55).unwrap().unwrap();
    assert!(from <= 6);
    assert_eq!(lookup_time(&tindex, 101).unwrap(), None);
    assert!(verify_segment(&segs[0].log_path).unwrap().is_ok());
    assert_eq!(log.append(&msg(11)).unwrap(), 11);
}

#[test]
fn seq_for_timestamp_and_delete_older_than_use_max_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    fill(&log, 80); // timestamps seq * 10
    assert_eq!(log.seq_for_timestamp(i64::MIN).unwrap(), Some(1));
    assert_eq!(log.seq_for_timestamp(255).unwrap(), Some(26));
    assert_eq!(log.seq_for_timestamp(800).unwrap(), Some(80));
    assert_eq!(log.seq_for_timestamp(801).unwrap(), None);
    let segs = log.segments();
    let cut = segs[2].max_timestamp + 1;
    log.delete_older_than(cut).unwrap();
    assert_eq!(log.first_seq(), segs[3].base_seq);
    log.delete_older_than(i64::MAX).unwrap();
    assert_eq!(log.segments().len(), 1);
    check_all(&log);
}

#[test]
fn out_of_order_timestamps_still_find_first_matching_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(600)).unwrap();
    let ts = [50i64, 10, 70, 20, 90, 30, 5, 100, 40, 60, 80, 0];
    for (i, t) in ts.iter().cycle().take(60).enumerate() {
        log.append(&Message::new(format!("{i}")).with_timestamp(*t + (i / 12) as i64))
            .unwrap();
    }
    let all = log.read(1, usize::MAX).unwrap();
    for target in [0i64, 11, 55, 75, 95, 101, 104] {
        let expect = all
            .iter()
            .find(|r| r.message.timestamp >= target)
            .map(|r| r.seq);
        assert_eq!(
            log.seq_for_timestamp(target).unwrap(),
            expect,
            "target {target}"
        );
    }
}

#[test]
fn stray_files_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    fill(&log, 30);
    drop(log);
    fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
    fs::write(dir.path().join("123.log"), b"junk").unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    assert_eq!(log.recovery_report().ignored_files.len(), 3);
    check_all(&log);
}

#[test]
fn sync_policies_all_keep_records_across_reopen() {
    for sync in [
        SyncPolicy::Never,
        SyncPolicy::EveryAppend,
        SyncPolicy::EveryN(3),
        SyncPolicy::Interval(Duration::from_millis(1)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options { sync, ..opts(800) };
        let log = Log::open(dir.path(), o.clone()).unwrap();
        fill(&log, 25);
        log.sync().unwrap();
        log.close().unwrap();
        let log = Log::open(dir.path(), o).unwrap();
        assert_eq!(log.last_seq(), 25);
        check_all(&log);
    }
}

#[test]
fn bytes_counts_all_segment_files() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    fill(&log, 50);
    assert_eq!(log.bytes(), on_disk_bytes(dir.path(), &log));
}

/// Point and short reads through a dense index (an entry per record, so a read's first chunk
/// ends at the next entry) while one thread appends and rolls small segments and another drops
/// old ones: every record read is the one asked for, and a read of a dropped seq is
/// `OutOfRange`, never a wrong or short answer.
#[test]
fn dense_index_reads_racing_appends_rolls_and_retention_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        index_interval_bytes: 1,
        ..opts(1500)
    };
    let log = Arc::new(Log::open(dir.path(), o).unwrap());
    fill(&log, 50);
    let total = 3000u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..total {
                let seq = log.last_seq() + 1;
                assert_eq!(log.append(&msg(seq)).unwrap(), seq);
            }
        });
        s.spawn(|| {
            let mut rounds = 0;
            while log.last_seq() < total && Instant::now() < deadline && rounds < 100_000 {
                rounds += 1;
                log.delete_before(log.last_seq().saturating_sub(200))
                    .unwrap();
            }
        });
        for r in 0..3u64 {
            let log = &log;
            s.spawn(move || {
                let mut n = 0u64;
                while log.last_seq() < total && Instant::now() < deadline && n < 200_000 {
                    n += 1;
                    let (first, last) = (log.first_seq(), log.last_seq());
                    let seq = first + (n * 7919 + r * 104_729) % (last - first + 1);
                    let max = 1 + (n % 3) as usize;
                    match log.read(seq, max) {
                        Ok(got) => {
                            assert!(!got.is_empty(), "seq {seq}");
                            assert!(got.len() <= max);
                            for (rec, want) in got.iter().zip(seq..) {
                                assert_eq!((rec.seq, &rec.message), (want, &msg(want)));
                            }
                        }
                        Err(Error::OutOfRange { first, .. }) => assert!(first > seq, "seq {seq}"),
                        Err(e) => panic!("seq {seq}: {e}"),
                    }
                }
            });
        }
    });
    assert_eq!(log.last_seq(), total + 50);
}

#[test]
fn two_appenders_and_four_readers_see_contiguous_intact_records() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        sync: SyncPolicy::EveryAppend,
        ..opts(20_000)
    };
    let log = Arc::new(Log::open(dir.path(), o).unwrap());
    let per_thread = 300u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut handles = Vec::new();
    for t in 0..2u64 {
        let log = Arc::clone(&log);
        handles.push(std::thread::spawn(move || {
            for i in 0..per_thread {
                let m = Message::new(format!("{t}:{i}")).with_key(vec![t as u8]);
                if i % 10 == 0 {
                    log.append_batch(&[m.clone(), m]).unwrap();
                } else {
                    log.append(&m).unwrap();
                }
            }
        }));
    }
    for r in 0..4u64 {
        let log = Arc::clone(&log);
        handles.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while Instant::now() < deadline && n < 2000 {
                n += 1;
                let last = log.last_seq();
                if last == 0 {
                    continue;
                }
                let from = 1 + (n * 7919 + r) % last;
                let recs = log.read(from, 50).unwrap();
                for (i, rec) in recs.iter().enumerate() {
                    assert_eq!(rec.seq, from + i as u64);
                    let v = std::str::from_utf8(&rec.message.value).unwrap();
                    assert!(v.starts_with("0:") || v.starts_with("1:"));
                }
                if log.last_seq() >= 2 * per_thread + 2 * per_thread / 10 {
                    break;
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let total = 2 * (per_thread + per_thread / 10);
    assert_eq!(log.last_seq(), total);
    let recs = log.read(1, usize::MAX).unwrap();
    for t in 0..2u8 {
        let mine: Vec<String> = recs
            .iter()
            .filter(|r| r.message.key.as_deref() == Some(&[t][..]))
            .map(|r| String::from_utf8(r.message.value.to_vec()).unwrap())
            .collect();
        let mut expect = Vec::new();
        for i in 0..per_thread {
            expect.push(format!("{t}:{i}"));
            if i % 10 == 0 {
                expect.push(format!("{t}:{i}"));
            }
        }
        assert_eq!(mine, expect);
    }
}

// ---- corruption ----

fn corrupt_setup(dir: &Path) -> Vec<krabka_storage::SegmentInfo> {
    let log = Log::open(dir, opts(1000)).unwrap();
    fill(&log, 60);
    let segs = log.segments();
    log.close().unwrap();
    segs
}

#[test]
fn flipped_byte_in_closed_segment_makes_read_corrupt_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let segs = corrupt_setup(dir.path());
    let victim = &segs[1];
    let mut bytes = fs::read(&victim.log_path).unwrap();
    bytes[BATCH_HEADER_LEN + 5] ^= 0x01;
    fs::write(&victim.log_path, &bytes).unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    match log.read(victim.base_seq, 10) {
        Err(Error::Corrupt { path, position, .. }) => {
            assert_eq!(path, victim.log_path);
            assert_eq!(position, 0);
        }
        other => panic!("{other:?}"),
    }
    // Other segments still read.
    assert_eq!(log.read(segs[2].base_seq, 3).unwrap().len(), 3);
    let v = verify_segment(&victim.log_path).unwrap();
    assert_eq!(v.problem.unwrap().position, 0);
    // The file was not altered.
    assert_eq!(fs::read(&victim.log_path).unwrap(), bytes);
}

#[test]
fn truncated_closed_segment_fails_open_then_repair_records_the_hole() {
    let dir = tempfile::tempdir().unwrap();
    let segs = corrupt_setup(dir.path());
    let victim = &segs[1];
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&victim.log_path)
        .unwrap();
    f.set_len(victim.size - 7).unwrap();
    drop(f);
    let truncated = fs::read(&victim.log_path).unwrap();
    // After the clean close no directory entry changed: open trusts the marker, and the cut is
    // found by the read that reaches it, naming the file and the byte.
    {
        let log = Log::open(dir.path(), opts(1000)).unwrap();
        assert!(log.recovery_report().clean_shutdown);
        assert_eq!(log.read(victim.base_seq, 1).unwrap().len(), 1);
        let err = log.read(victim.last_seq, 1).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { path, position, .. }
                if *path == victim.log_path && *position < victim.size),
            "{err}"
        );
    }
    // Once a directory entry changed (here: no marker), open checks every length again.
    fs::remove_file(dir.path().join(krabka_storage::CLEAN_SHUTDOWN_FILE_NAME)).unwrap();
    match Log::open(dir.path(), opts(1000)) {
        Err(Error::Damaged {
            path,
            first_seq,
            last_seq,
            ..
        }) => {
            assert_eq!(path, victim.log_path);
            assert_eq!((first_seq, last_seq), (victim.last_seq, victim.last_seq));
        }
        other => panic!("{other:?}"),
    }
    // Nothing was changed by the refused open.
    assert_eq!(fs::read(&victim.log_path).unwrap(), truncated);
    let repair = Options {
        recovery: krabka_storage::RecoveryMode::Repair,
        ..opts(1000)
    };
    let log = Log::open(dir.path(), repair).unwrap();
    let report = log.recovery_report();
    assert_eq!(report.quarantined.len(), 1, "{report}");
    let moved = &report.quarantined[0];
    assert_eq!(moved.seqs, Some((victim.last_seq, victim.last_seq)));
    assert_eq!(moved.bytes, victim.size - 7 - (moved.position));
    assert!(moved.to.exists());
    // The records before the damage read; the hole is an error naming its marker; after it,
    // everything reads and the log keeps its last seq.
    let before = log.read(victim.base_seq, 100).unwrap();
    assert_eq!(before.last().unwrap().seq, victim.last_seq - 1);
    assert!(matches!(
        log.read(victim.last_seq, 1),
        Err(Error::Quarantined { .. })
    ));
    assert_eq!(log.read(victim.last_seq + 1, 1).unwrap().len(), 1);
    assert_eq!(log.last_seq(), 60);
    drop(log);
    // The hole survives a plain reopen.
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    assert_eq!(log.quarantined().len(), 1);
    assert_eq!(log.append(&Message::new("next")).unwrap(), 61);
}

#[test]
fn deleted_or_damaged_index_files_are_rebuilt_by_scanning() {
    let dir = tempfile::tempdir().unwrap();
    let segs = corrupt_setup(dir.path());
    let originals: Vec<Vec<u8>> = segs[..3]
        .iter()
        .map(|s| fs::read(&s.index_path).unwrap())
        .collect();
    fs::remove_file(&segs[0].index_path).unwrap();
    fs::remove_file(&segs[1].time_index_path).unwrap();
    let mut idx = fs::read(&segs[2].index_path).unwrap();
    let n = idx.len();
    idx[n / 2] ^= 0x80;
    fs::write(&segs[2].index_path, idx).unwrap();
    let damaged: Vec<Vec<u8>> = segs[..3]
        .iter()
        .map(|s| fs::read(&s.index_path).unwrap_or_default())
        .collect();
    // After the clean close, open reads no index file; the first reads rebuild them.
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    check_all(&log);
    for (s, orig) in segs[..3].iter().zip(&originals) {
        assert_eq!(&fs::read(&s.index_path).unwrap(), orig);
        assert!(s.time_index_path.exists());
    }
    drop(log);
    // Without the marker (a crash), open rebuilds them and says so.
    for (s, bytes) in segs[..3].iter().zip(&damaged) {
        fs::write(&s.index_path, bytes).unwrap();
    }
    fs::remove_file(&segs[1].time_index_path).unwrap();
    fs::remove_file(dir.path().join(krabka_storage::CLEAN_SHUTDOWN_FILE_NAME)).unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    let report = log.recovery_report();
    assert_eq!(report.rebuilt_indexes.len(), 3, "{report:?}");
    for (s, orig) in segs[..3].iter().zip(&originals) {
        assert_eq!(&fs::read(&s.index_path).unwrap(), orig);
        assert!(s.time_index_path.exists());
    }
    check_all(&log);
    drop(log);
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    assert!(log.recovery_report().is_clean());
}

#[test]
fn garbage_tail_on_active_segment_is_truncated_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let segs = corrupt_setup(dir.path());
    let active = segs.last().unwrap();
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(&active.log_path)
        .unwrap();
    std::io::Write::write_all(&mut f, &[0xAB; 37]).unwrap();
    drop(f);
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    let t = log.recovery_report().truncated.clone().unwrap();
    assert_eq!((t.position, t.bytes_removed), (active.size, 37));
    assert_eq!(fs::metadata(&active.log_path).unwrap().len(), active.size);
    check_all(&log);
    fill(&log, 5);
    check_all(&log);
}

#[test]
fn torn_last_frame_is_cut_but_a_flipped_byte_before_intact_frames_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    // Dropped, not closed: the active segment's tail was never synced (a torn write can hit
    // it). After a clean close the same cut would be refused as damage to synced records.
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    fill(&log, 60);
    let segs = log.segments();
    drop(log);
    let active = segs.last().unwrap();
    let bytes = fs::read(&active.log_path).unwrap();
    // Torn: cut the last batch in half (at its true end: a preallocated file is longer).
    fs::write(&active.log_path, &bytes[..active.size as usize - 10]).unwrap();
    let log = Log::open(dir.path(), opts(1000)).unwrap();
    assert_eq!(log.last_seq(), 59);
    check_all(&log);
    drop(log);
    // The cut bytes were saved, not deleted.
    let qdir = dir.path().join(segment::QUARANTINE_DIR);
    let saved: Vec<_> = fs::read_dir(&qdir).unwrap().collect();
    assert_eq!(saved.len(), 1);
    // Flip a byte in the first batch: intact batches follow it, so open refuses and changes
    // nothing.
    let mut b = fs::read(&active.log_path).unwrap();
    b[20] ^= 0xff;
    fs::write(&active.log_path, &b).unwrap();
    match Log::open(dir.path(), opts(1000)) {
        Err(Error::Damaged {
            path,
            position,
            first_seq,
            last_seq,
            ..
        }) => {
            assert_eq!(path, active.log_path);
            assert_eq!(position, 0);
            assert_eq!((first_seq, last_seq), (active.base_seq, 59));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(&active.log_path).unwrap(), b);
    // Strict refuses too; Repair moves the bytes aside and never reuses their seqs.
    let strict = Options {
        recovery: krabka_storage::RecoveryMode::Strict,
        ..opts(1000)
    };
    assert!(matches!(
        Log::open(dir.path(), strict),
        Err(Error::Damaged { .. })
    ));
    let repair = Options {
        recovery: krabka_storage::RecoveryMode::Repair,
        ..opts(1000)
    };
    let log = Log::open(dir.path(), repair).unwrap();
    assert_eq!(log.last_seq(), 59);
    assert_eq!(log.quarantined().len(), 1);
    assert_eq!(*log.quarantined()[0].0.start(), active.base_seq);
    assert_eq!(log.append(&msg(60)).unwrap(), 60);
    assert!(matches!(
        log.read(active.base_seq, 1),
        Err(Error::Quarantined { .. })
    ));
    assert_eq!(log.read(60, 1).unwrap()[0].message, msg(60));
}

#[test]
fn every_single_byte_flip_in_a_segment_is_detected_by_verify() {
    let mut buf = Vec::new();
    for s in 1..=3 {
        segment::encode_batch_of_one(s, &msg(s), &mut buf).unwrap();
    }
    for i in 0..buf.len() {
        let mut b = buf.clone();
        b[i] ^= 0x10;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(segment::segment_file_name(1, "log"));
        fs::write(&p, &b).unwrap();
        let v = verify_segment(&p).unwrap();
        assert!(!v.is_ok(), "flip at {i} undetected");
    }
}

/// A point read sizes its first chunk by the index interval's bytes per seq: records alike in
/// size are read in one chunk, and records far larger than their interval's average (an
/// under-estimate) are read again from their batch's start. Every seq, read alone and with
/// the next two, in closed and active segments, under Kafka's default interval and a small one.
#[test]
fn point_reads_through_a_sparse_index_find_every_record_whatever_the_sizes() {
    // Runs of like-sized records, then sizes that jump by two orders of magnitude.
    let size = |seq: u64| match seq % 97 {
        0..=59 => 100,
        60..=79 => 1 + (seq * 7919 % 3000) as usize,
        80..=89 => 20,
        _ => 6000,
    };
    let value = |seq: u64| Bytes::from(vec![(seq % 251) as u8; size(seq)]);
    for interval in [4096, 300] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            index_interval_bytes: interval,
            ..opts(200_000)
        };
        let log = Log::open(dir.path(), o).unwrap();
        // The value of each seq, by seq - 1.
        let mut values = Vec::new();
        for i in 1..=1500u64 {
            let m = Message::new(value(i)).with_timestamp(i as i64);
            if i % 5 == 0 {
                log.append_batch(&[m.clone(), m.clone()]).unwrap();
                values.push(m.value.clone());
            } else {
                log.append(&m).unwrap();
            }
            values.push(m.value);
        }
        assert!(
            log.segments().len() > 3,
            "closed segments and an active one"
        );
        let last = log.last_seq();
        for seq in 1..=last {
            for max in [1, 3] {
                let got = log.read(seq, max).unwrap();
                let want = (last + 1 - seq).min(max as u64);
                assert_eq!(got.len() as u64, want, "interval {interval}, seq {seq}");
                for (i, r) in got.iter().enumerate() {
                    assert_eq!(r.seq, seq + i as u64);
                    assert_eq!(
                        r.message.value,
                        values[(r.seq - 1) as usize],
                        "seq {}",
                        r.seq
                    );
                }
            }
        }
    }
}

/// Read system calls made by this thread so far (Linux's per-thread I/O accounting), taken
/// with one `read` of its own (counted after the figure is taken).
fn thread_read_calls() -> u64 {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    let n = fs::File::open("/proc/thread-self/io")
        .unwrap()
        .read(&mut buf)
        .unwrap();
    let io = std::str::from_utf8(&buf[..n]).unwrap();
    let line = io.lines().find(|l| l.starts_with("syscr:")).unwrap();
    line["syscr:".len()..].trim().parse().unwrap()
}

/// A point read is one `pread` under the default index interval, whether the log holds
/// batches of 100 (an interval is one batch: read whole) or like-sized single appends (read
/// up to the record's end), in closed segments and the active one.
#[test]
fn a_point_read_is_one_read_under_the_default_index() {
    let v = Bytes::from(vec![7u8; 100]);
    let message = |i: u64| Message::new(v.clone()).with_timestamp(i as i64);
    for batched in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            max_bytes: 256 << 10,
            ..Options::default()
        };
        let log = Log::open(dir.path(), o).unwrap();
        for b in 0..60u64 {
            if batched {
                let msgs: Vec<Message> = (0..100).map(|j| message(b * 100 + j)).collect();
                log.append_batch(&msgs).unwrap();
            } else {
                for j in 0..100 {
                    log.append(&message(b * 100 + j)).unwrap();
                }
            }
        }
        assert!(
            log.segments().len() > 2,
            "closed segments and an active one"
        );
        let last = log.last_seq();
        // Opens every segment's file and loads its index first.
        for s in log.segments() {
            log.read(s.base_seq, 1).unwrap();
        }
        let before = thread_read_calls();
        let mut reads = 0u64;
        for seq in (1..=last).step_by(7) {
            assert_eq!(log.read(seq, 1).unwrap()[0].seq, seq);
            reads += 1;
        }
        // Less the one read of the figure taken before.
        let calls = thread_read_calls() - before - 1;
        assert_eq!(calls, reads, "batched: {batched}");
    }
}
