//! Integrity at every edge (invariants I1–I3 of docs/ARCHITECTURE.md): recovery never deletes an
//! intact record, open refuses gaps, overlaps and stray segment files, reads are exact or an
//! error naming the file, and a repair moves bytes aside instead of deleting them. Ends with
//! the corruption matrix: every file kind × every damage × `Log::open` / `Log::read`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::{Path, PathBuf};

use krabka_protocol::Message;
use krabka_storage::segment::{self, QUARANTINE_DIR, verify_segment_files};
use krabka_storage::testkit;
use krabka_storage::{Error, Log, Options, RecoveryMode, SegmentInfo, SyncPolicy};

const RECORDS: u64 = 60;

fn opts(mode: RecoveryMode) -> Options {
    Options {
        max_bytes: 1000,
        sync: SyncPolicy::Never,
        index_interval_bytes: 256,
        recovery: mode,
        ..Options::default()
    }
}

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}-{}", "x".repeat((seq % 50) as usize)))
        .with_key(format!("k{seq}"))
        .with_timestamp(seq as i64 * 10)
}

/// A closed log of `RECORDS` records in several segments; returns its segments.
fn setup(dir: &Path) -> Vec<SegmentInfo> {
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail)).unwrap();
    for seq in 1..=RECORDS {
        assert_eq!(log.append(&msg(seq)).unwrap(), seq);
    }
    let segs = log.segments();
    log.close().unwrap();
    assert!(segs.len() >= 5, "{} segments", segs.len());
    segs
}

fn flip(path: &Path, at: usize) {
    testkit::xor_byte(path, at as u64, 0x5a).unwrap();
}

fn truncate(path: &Path, len: u64) {
    testkit::set_len(path, len).unwrap();
}

/// Offset, within the batch at the start of `batch`, of a byte of its records (the middle of
/// its records section, past the 61-byte header): a flip there changes a record, not a header
/// field, and only the CRC-32C can tell.
fn record_byte(batch: &[u8]) -> usize {
    let len = segment::batch_len(batch).unwrap();
    let header = segment::BATCH_HEADER_LEN;
    assert!(len > header + 2, "a batch of {len} bytes");
    header + (len - header) / 2
}

// ---- the numbered items of the integrity issue, at the level of the library ----

#[test]
fn flipped_byte_mid_active_segment_fails_open_and_keeps_every_intact_record() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    let active = segs.last().unwrap();
    let before = fs::read(&active.log_path).unwrap();
    // A record of the second batch of the active segment: the first stays intact, later ones
    // too.
    let second = segment::batch_len(&before).unwrap();
    flip(&active.log_path, second + record_byte(&before[second..]));
    let damaged = fs::read(&active.log_path).unwrap();
    let err = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap_err();
    match &err {
        Error::Damaged {
            path,
            position,
            first_seq,
            last_seq,
            ..
        } => {
            assert_eq!(path, &active.log_path);
            assert_eq!(*position, second as u64);
            assert_eq!((*first_seq, *last_seq), (active.base_seq + 1, RECORDS));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains(&active.log_path.display().to_string())
    );
    // Nothing moved: the file is exactly as damaged, and a second open says the same.
    assert_eq!(fs::read(&active.log_path).unwrap(), damaged);
    let again = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).map(|_| ());
    assert!(
        matches!(&again, Err(e @ Error::Damaged { .. }) if e.to_string() == err.to_string()),
        "{again:?}"
    );
    assert!(!dir.path().join(QUARANTINE_DIR).exists());
}

#[test]
fn repair_moves_the_damaged_frame_aside_keeps_the_rest_and_never_reuses_its_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    let active = segs.last().unwrap();
    assert!(active.last_seq >= active.base_seq + 2, "{active:?}");
    let before = fs::read(&active.log_path).unwrap();
    let second = segment::batch_len(&before).unwrap();
    let third = second + segment::batch_len(&before[second..]).unwrap();
    let at = record_byte(&before[second..]);
    flip(&active.log_path, second + at);
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    let report = log.recovery_report().clone();
    assert_eq!(report.quarantined.len(), 1, "{report}");
    let piece = &report.quarantined[0];
    assert_eq!(piece.from, active.log_path);
    assert_eq!(piece.position, second as u64);
    // Only the damaged batch's seq is lost: the batches after it are kept.
    let hole = active.base_seq + 1;
    assert_eq!(piece.seqs, Some((hole, hole)));
    assert_eq!(report.kept.len(), 1, "{report}");
    assert_eq!(
        (report.kept[0].first_seq, report.kept[0].last_seq),
        (hole + 1, RECORDS)
    );
    for seq in hole + 1..=RECORDS {
        assert_eq!(log.read(seq, 1).unwrap()[0].message, msg(seq));
    }
    // The moved bytes are kept byte for byte.
    let mut expect = before[second..third].to_vec();
    expect[at] ^= 0x5a;
    assert_eq!(fs::read(&piece.to).unwrap(), expect);
    assert!(report.to_string().contains("hole"), "{report}");
    // Before the damage: exact. The hole: a typed error naming its marker. Appends go after.
    let recs = log.read(1, usize::MAX).unwrap();
    assert_eq!(recs.len() as u64, active.base_seq);
    assert!(recs.iter().all(|r| r.message == msg(r.seq)));
    match log.read(active.base_seq + 1, 5) {
        Err(Error::Quarantined { path, .. }) => assert_eq!(path, piece.to),
        other => panic!("{other:?}"),
    }
    assert_eq!(log.append(&msg(RECORDS + 1)).unwrap(), RECORDS + 1);
    assert_eq!(
        log.read(RECORDS + 1, 1).unwrap()[0].message,
        msg(RECORDS + 1)
    );
    log.close().unwrap();
    // Reopened with the default mode: the hole is explicit and accepted.
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    assert_eq!(log.last_seq(), RECORDS + 1);
    assert_eq!(log.quarantined().len(), 1);
    assert_eq!(log.recovery_report().holes.len(), 1);
}

#[test]
fn stray_empty_future_segment_file_fails_open_instead_of_jumping_seqs() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let stray = dir.path().join(segment::segment_file_name(400, "log"));
    fs::write(&stray, b"").unwrap();
    match Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)) {
        Err(Error::SeqGap {
            path,
            expected,
            found,
            ..
        }) => {
            assert_eq!(path, stray);
            assert_eq!((expected, found), (RECORDS + 1, 400));
        }
        other => panic!("{other:?}"),
    }
    // Repair moves the empty stray aside (nothing was at stake) and the log goes on at 61.
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    assert!(!stray.exists());
    assert_eq!(log.append(&msg(RECORDS + 1)).unwrap(), RECORDS + 1);
    assert!(log.quarantined().is_empty());
}

#[test]
fn deleted_middle_segment_fails_open_naming_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    let victim = &segs[2];
    for p in [
        &victim.log_path,
        &victim.index_path,
        &victim.time_index_path,
    ] {
        fs::remove_file(p).unwrap();
    }
    let err = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap_err();
    match &err {
        Error::SeqGap {
            previous,
            path,
            expected,
            found,
        } => {
            assert_eq!(previous, &segs[1].log_path);
            assert_eq!(path, &segs[3].log_path);
            assert_eq!((*expected, *found), (victim.base_seq, segs[3].base_seq));
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&format!("{}..={}", victim.base_seq, victim.last_seq)),
        "{text}"
    );
    // Repair records the missing seqs as a hole; every other record reads exactly.
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    assert_eq!(log.last_seq(), RECORDS);
    for seq in 1..=RECORDS {
        match log.read(seq, 1) {
            Ok(r) => assert_eq!(r[0].message, msg(seq)),
            Err(Error::Quarantined {
                first_seq,
                last_seq,
                ..
            }) => {
                assert_eq!((first_seq, last_seq), (victim.base_seq, victim.last_seq));
                assert!((victim.base_seq..=victim.last_seq).contains(&seq));
            }
            Err(e) => panic!("{seq}: {e}"),
        }
    }
}

#[test]
fn copied_segment_file_overlapping_another_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    // A copy of segment 2's bytes under a name inside segment 1's range.
    let overlap = dir
        .path()
        .join(segment::segment_file_name(segs[1].base_seq + 1, "log"));
    fs::copy(&segs[2].log_path, &overlap).unwrap();
    assert!(matches!(
        Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)),
        Err(Error::SeqOverlap { .. })
    ));
}

#[test]
fn read_delivers_the_records_before_a_bad_frame_then_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    let victim = &segs[1];
    let bytes = fs::read(&victim.log_path).unwrap();
    let first = segment::batch_len(&bytes).unwrap();
    let second = segment::batch_len(&bytes[first..]).unwrap();
    // A record of the third batch of the segment.
    flip(
        &victim.log_path,
        first + second + record_byte(&bytes[first + second..]),
    );
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    let got = log.read(victim.base_seq, 100).unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.message == msg(r.seq)));
    match log.read(victim.base_seq + 2, 100) {
        Err(Error::Corrupt { path, position, .. }) => {
            assert_eq!(path, victim.log_path);
            assert_eq!(position, (first + second) as u64);
        }
        other => panic!("{other:?}"),
    }
    // A read from an earlier segment stops at the same place, never skipping past it.
    let from_start = log.read(1, usize::MAX).unwrap();
    assert_eq!(from_start.last().unwrap().seq, victim.base_seq + 1);
}

#[test]
fn verify_catches_an_index_entry_rewritten_with_a_valid_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    let seg = &segs[1];
    let ok = verify_segment_files(
        &seg.log_path,
        Some(&seg.index_path),
        Some(&seg.time_index_path),
    )
    .unwrap();
    assert!(ok.is_ok(), "{:?}", ok.problem);
    let rewritten = rewrite_index_entry(&seg.index_path);
    let v = verify_segment_files(
        &seg.log_path,
        Some(&seg.index_path),
        Some(&seg.time_index_path),
    )
    .unwrap();
    assert_eq!(v.problem_path.as_deref(), Some(seg.index_path.as_path()));
    let reason = v.problem.unwrap().reason;
    assert!(reason.contains("index entry"), "{reason}");
    // The log itself never serves a wrong record through it.
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    for seq in seg.base_seq..=seg.last_seq {
        match log.read(seq, 1) {
            Ok(r) => assert_eq!(r[0].message, msg(seq)),
            Err(Error::Corrupt { path, .. }) => {
                assert_eq!(path, seg.log_path);
                assert!(rewritten.contains(&seq));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// A dense offset index (an entry per record) whose positions all lie by a few bytes or more,
/// with valid checksums, never makes a read wrong or fail: the entry after a read's floor only
/// sizes its first chunk, and a floor that lies is passed over for the segment's start.
#[test]
fn reads_through_a_dense_index_whose_positions_lie_are_exact() {
    for shift in [-1i64, 1, -9, 9, -40, -47, 20] {
        let dir = tempfile::tempdir().unwrap();
        let dense = Options {
            index_interval_bytes: 1,
            ..opts(RecoveryMode::TolerateTornTail)
        };
        let log = Log::open(dir.path(), dense.clone()).unwrap();
        for seq in 1..=RECORDS {
            log.append(&msg(seq)).unwrap();
        }
        let segs = log.segments();
        log.close().unwrap();
        let mut lies = Vec::new();
        for seg in &segs {
            let mut b = fs::read(&seg.index_path).unwrap();
            let count = u32::from_le_bytes(b[40..44].try_into().unwrap()) as usize;
            assert_eq!(count as u64, seg.last_seq - seg.base_seq + 1, "dense");
            for i in 0..count {
                let at = 44 + 16 * i + 8;
                let pos = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
                if pos > 0 {
                    let lie = pos.saturating_add_signed(shift);
                    b[at..at + 8].copy_from_slice(&lie.to_le_bytes());
                }
            }
            let body = b.len() - 4;
            let crc = crc32fast::hash(&b[..body]);
            b[body..].copy_from_slice(&crc.to_le_bytes());
            fs::write(&seg.index_path, &b).unwrap();
            lies.push((seg.index_path.clone(), b));
        }
        let log = Log::open(dir.path(), dense).unwrap();
        for seq in 1..=RECORDS {
            for max in 1..=3 {
                let got = log.read(seq, max).unwrap();
                let want = max.min((RECORDS - seq + 1) as usize);
                assert_eq!(got.len(), want, "shift {shift} seq {seq} max {max}");
                for (r, s) in got.iter().zip(seq..) {
                    assert_eq!((r.seq, &r.message), (s, &msg(s)), "shift {shift}");
                }
            }
        }
        // The lies were what the reads went through: no index was rebuilt meanwhile.
        for (path, bytes) in &lies {
            assert_eq!(&fs::read(path).unwrap(), bytes, "{}", path.display());
        }
        // Appends after the open (the first loads the active segment's lying entries and
        // keeps them): reads across the old records and the new ones.
        for seq in RECORDS + 1..=RECORDS + 5 {
            assert_eq!(log.append(&msg(seq)).unwrap(), seq);
        }
        for seq in RECORDS - 5..=RECORDS + 5 {
            for max in 1..=3 {
                let got = log.read(seq, max).unwrap();
                assert_eq!(got.len(), max.min((RECORDS + 6 - seq) as usize));
                for (r, s) in got.iter().zip(seq..) {
                    assert_eq!((r.seq, &r.message), (s, &msg(s)), "shift {shift}");
                }
            }
        }
    }
}

/// Points the second entry of an offset index at the batch after the one it names and fixes the
/// CRC, so the file is well formed but lies. Returns the seqs whose reads start at that entry.
fn rewrite_index_entry(index_path: &Path) -> std::ops::RangeInclusive<u64> {
    let mut b = fs::read(index_path).unwrap();
    let count = u32::from_le_bytes(b[40..44].try_into().unwrap()) as usize;
    assert!(count >= 2, "need two entries");
    let at = 44 + 16;
    let seq = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let pos = u64::from_le_bytes(b[at + 8..at + 16].try_into().unwrap());
    // Move the position forward by one batch of the `.log`.
    let log = fs::read(index_path.with_extension("log")).unwrap();
    let next = pos + segment::batch_len(&log[pos as usize..]).unwrap() as u64;
    b[at + 8..at + 16].copy_from_slice(&next.to_le_bytes());
    let body = b.len() - 4;
    let crc = crc32fast::hash(&b[..body]);
    b[body..].copy_from_slice(&crc.to_le_bytes());
    fs::write(index_path, b).unwrap();
    let last = u64::from_le_bytes(b_last_seq(index_path).to_le_bytes());
    seq..=last
}

fn b_last_seq(index_path: &Path) -> u64 {
    let b = fs::read(index_path).unwrap();
    u64::from_le_bytes(b[16..24].try_into().unwrap())
}

#[test]
fn start_at_moves_an_empty_log_forward_only() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    log.start_at(301).unwrap();
    assert_eq!(log.next_seq(), 301);
    assert!(matches!(log.start_at(5), Err(Error::InvalidStart { .. })));
    assert!(log.read(301, 1).unwrap().is_empty());
    assert!(matches!(log.read(300, 1), Err(Error::OutOfRange { .. })));
    log.close().unwrap();
    // Durable: a reopen continues at 301 and there is one segment file.
    let log = Log::open(dir.path(), opts(RecoveryMode::Strict)).unwrap();
    assert_eq!(log.next_seq(), 301);
    assert_eq!(log.append(&msg(301)).unwrap(), 301);
    assert!(matches!(log.start_at(500), Err(Error::NotEmpty { .. })));
    let logs: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .collect();
    assert_eq!(logs.len(), 1);
}

#[test]
fn strict_mode_refuses_a_torn_tail_and_says_it_is_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    // Not closed: the active segment's records were never synced, so a torn tail is possible.
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    for seq in 1..=RECORDS {
        log.append(&msg(seq)).unwrap();
    }
    let segs = log.segments();
    drop(log);
    let active = segs.last().unwrap();
    truncate(&active.log_path, active.size - 5);
    match Log::open(dir.path(), opts(RecoveryMode::Strict)) {
        Err(Error::TornTail {
            path, incomplete, ..
        }) => {
            assert_eq!(path, active.log_path);
            assert!(incomplete);
        }
        other => panic!("{other:?}"),
    }
    // The default mode cuts it and keeps the cut bytes.
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    assert_eq!(log.last_seq(), RECORDS - 1);
    let q = &log.recovery_report().quarantined;
    assert_eq!(q.len(), 1);
    assert!(fs::metadata(&q[0].to).unwrap().len() > 0);
}

#[test]
fn deleted_active_segment_after_a_clean_close_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    let active = segs.last().unwrap();
    fs::remove_file(&active.log_path).unwrap();
    match Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)) {
        Err(Error::Damaged {
            first_seq,
            last_seq,
            ..
        }) => assert_eq!((first_seq, last_seq), (active.base_seq, RECORDS)),
        other => panic!("{other:?}"),
    }
    // Repair records the hole; the next append is after it.
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    assert_eq!(log.append(&msg(RECORDS + 1)).unwrap(), RECORDS + 1);
    assert!(matches!(
        log.read(active.base_seq, 1),
        Err(Error::Quarantined { .. })
    ));
}

// ---- the corruption matrix ----

#[derive(Clone, Copy, Debug)]
enum Kind {
    FirstClosedLog,
    MiddleClosedLog,
    ActiveLog,
    Index,
    TimeIndex,
    LockFile,
    RecoveryPoint,
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    FlipStart,
    FlipMiddle,
    FlipEnd,
    TruncateMidFrame,
    TruncateToZero,
    Delete,
    ReplaceWithDirectory,
    StrayFutureSegment,
    StrayIndexWithoutLog,
    IndexEntryRewritten,
}

const KINDS: [Kind; 7] = [
    Kind::RecoveryPoint,
    Kind::FirstClosedLog,
    Kind::MiddleClosedLog,
    Kind::ActiveLog,
    Kind::Index,
    Kind::TimeIndex,
    Kind::LockFile,
];
const DAMAGES: [Damage; 10] = [
    Damage::FlipStart,
    Damage::FlipMiddle,
    Damage::FlipEnd,
    Damage::TruncateMidFrame,
    Damage::TruncateToZero,
    Damage::Delete,
    Damage::ReplaceWithDirectory,
    Damage::StrayFutureSegment,
    Damage::StrayIndexWithoutLog,
    Damage::IndexEntryRewritten,
];

fn target(kind: Kind, dir: &Path, segs: &[SegmentInfo]) -> PathBuf {
    match kind {
        Kind::FirstClosedLog => segs[0].log_path.clone(),
        Kind::MiddleClosedLog => segs[2].log_path.clone(),
        Kind::ActiveLog => segs.last().unwrap().log_path.clone(),
        Kind::Index => segs[2].index_path.clone(),
        Kind::TimeIndex => segs[2].time_index_path.clone(),
        Kind::LockFile => dir.join(krabka_storage::LOCK_FILE_NAME),
        Kind::RecoveryPoint => dir.join(krabka_storage::RECOVERY_POINT_FILE_NAME),
    }
}

/// Applies `damage` to `path`; false when the combination means nothing (e.g. rewriting an
/// index entry of a `.log`).
///
/// On a `.log` (batches of one record): `FlipStart` hits the high byte of the first batch's
/// `baseOffset` (outside the CRC: found by the seq check), `FlipEnd` the `headerCount` of the
/// last record (inside the CRC), `FlipMiddle` whatever byte is there, and `TruncateMidFrame`
/// cuts the last batch short by 7 bytes (every batch here is longer than the 61-byte header).
fn apply(damage: Damage, path: &Path, kind: Kind, dir: &Path) -> bool {
    let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    match damage {
        Damage::FlipStart | Damage::FlipMiddle | Damage::FlipEnd if len == 0 => return false,
        Damage::FlipStart => flip(path, 0),
        Damage::FlipMiddle => flip(path, (len / 2) as usize),
        Damage::FlipEnd => flip(path, len as usize - 1),
        Damage::TruncateMidFrame if len < 8 => return false,
        Damage::TruncateMidFrame => truncate(path, len - 7),
        Damage::TruncateToZero => truncate(path, 0),
        Damage::Delete => fs::remove_file(path).unwrap(),
        Damage::ReplaceWithDirectory => {
            fs::remove_file(path).unwrap();
            fs::create_dir(path).unwrap();
        }
        Damage::StrayFutureSegment => {
            if !matches!(kind, Kind::ActiveLog) {
                return false;
            }
            fs::write(dir.join(segment::segment_file_name(400, "log")), b"").unwrap();
        }
        Damage::StrayIndexWithoutLog => {
            if !matches!(kind, Kind::Index) {
                return false;
            }
            fs::copy(path, dir.join(segment::segment_file_name(500, "index"))).unwrap();
        }
        Damage::IndexEntryRewritten => {
            if !matches!(kind, Kind::Index) {
                return false;
            }
            rewrite_index_entry(path);
        }
    }
    true
}

/// Every `.log` file of the directory with its bytes.
fn log_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log") && p.is_file())
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    out.sort();
    out
}

/// Bytes of the files in the quarantine directory, all together.
fn quarantined_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir.join(QUARANTINE_DIR))
        .map(|d| d.map(|e| e.unwrap().metadata().unwrap().len()).sum())
        .unwrap_or(0)
}

/// Checks one opened log: every seq reads exactly or fails with an error that names a file;
/// returns how many seqs read exactly.
fn read_everything(log: &Log, case: &str) -> u64 {
    let mut exact = 0;
    let mut seq = log.first_seq().max(1);
    let mut guard = 0;
    while seq <= log.last_seq() {
        guard += 1;
        assert!(guard < 10_000, "{case}: read loop does not advance");
        match log.read(seq, 7) {
            Ok(recs) => {
                assert!(!recs.is_empty(), "{case}: empty read at {seq}");
                for (i, r) in recs.iter().enumerate() {
                    assert_eq!(r.seq, seq + i as u64, "{case}: seq out of order");
                    assert_eq!(r.message, msg(r.seq), "{case}: wrong record at {}", r.seq);
                }
                exact += recs.len() as u64;
                seq += recs.len() as u64;
            }
            Err(e @ (Error::Corrupt { .. } | Error::Quarantined { .. } | Error::Io { .. })) => {
                let text = e.to_string();
                assert!(
                    text.contains(".log") || text.contains(QUARANTINE_DIR),
                    "{case}: {text}"
                );
                seq += 1;
            }
            Err(e) => panic!("{case}: read {seq}: unexpected {e}"),
        }
    }
    exact
}

#[test]
fn corruption_matrix_never_loses_or_misserves_a_record() {
    let mut cases = 0;
    let mut refused = 0;
    let mut opened = 0;
    for kind in KINDS {
        for damage in DAMAGES {
            for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::Repair] {
                let dir = tempfile::tempdir().unwrap();
                let segs = setup(dir.path());
                let path = target(kind, dir.path(), &segs);
                if !apply(damage, &path, kind, dir.path()) {
                    continue;
                }
                cases += 1;
                let case = format!("{kind:?} × {damage:?} × {mode:?}");
                let before = log_files(dir.path());
                let before_bytes: u64 = before.iter().map(|(_, b)| b.len() as u64).sum();
                match Log::open(dir.path(), opts(mode)) {
                    Err(e) => {
                        refused += 1;
                        assert!(
                            mode != RecoveryMode::Repair
                                || (matches!(damage, Damage::ReplaceWithDirectory)
                                    && !matches!(kind, Kind::RecoveryPoint)),
                            "{case}: repair failed: {e}"
                        );
                        let text = e.to_string();
                        let name = path.file_name().unwrap().to_string_lossy().to_string();
                        assert!(
                            text.contains(&name) || text.contains("00000000000000000400.log"),
                            "{case}: error does not name the damaged file: {text}"
                        );
                        // A refused open changes no `.log` file.
                        assert_eq!(
                            log_files(dir.path()),
                            before,
                            "{case}: refused open changed files"
                        );
                    }
                    Ok(log) => {
                        opened += 1;
                        let exact = read_everything(&log, &case);
                        // Bytes leave `.log` files only into the quarantine directory.
                        let after: u64 = log_files(dir.path())
                            .iter()
                            .map(|(_, b)| b.len() as u64)
                            .sum();
                        assert!(
                            after + quarantined_bytes(dir.path()) >= before_bytes,
                            "{case}: {} bytes vanished",
                            before_bytes - after
                        );
                        // Never silently shorter: every seq up to the old end is still
                        // accounted for (a read or a named error), or the only loss is a torn
                        // tail of the active segment that the report names.
                        if log.last_seq() < RECORDS {
                            assert!(
                                log.recovery_report().truncated.is_some(),
                                "{case}: shorter log without a report"
                            );
                            assert!(matches!(kind, Kind::ActiveLog), "{case}");
                        }
                        if matches!(
                            kind,
                            Kind::Index | Kind::TimeIndex | Kind::LockFile | Kind::RecoveryPoint
                        ) {
                            assert_eq!(exact, RECORDS, "{case}: a record became unreadable");
                        }
                        // Appends never reuse a seq that is still readable or in a hole.
                        let next = log.append(&msg(log.last_seq() + 1)).unwrap();
                        assert!(
                            next > log
                                .quarantined()
                                .iter()
                                .map(|(r, _)| *r.end())
                                .max()
                                .unwrap_or(0),
                            "{case}"
                        );
                    }
                }
            }
        }
    }
    println!(
        "storage corruption matrix: {cases} cases ({opened} opened and read exactly, {refused} refused naming the file)"
    );
    assert!(cases >= 60, "{cases}");
}

#[test]
fn segment_file_with_an_absurd_base_seq_fails_open_and_repair_moves_it_aside() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let absurd = dir.path().join(segment::segment_file_name(u64::MAX, "log"));
    fs::write(&absurd, b"junk").unwrap();
    match Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)) {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, absurd),
        other => panic!("{other:?}"),
    }
    assert!(absurd.exists());
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    assert!(!absurd.exists());
    assert_eq!(log.append(&msg(RECORDS + 1)).unwrap(), RECORDS + 1);
}

fn dir_listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_refused_open_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    fs::write(
        dir.path().join(segment::segment_file_name(99_999, "log")),
        b"junk",
    )
    .unwrap();
    let before = dir_listing(dir.path());
    assert!(matches!(
        Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)),
        Err(Error::SeqGap { .. })
    ));
    // The old active segment, now followed by a file, got no index files.
    assert_eq!(dir_listing(dir.path()), before);
}

#[test]
fn a_hole_right_before_the_first_segment_survives_retention() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    for p in [
        &segs[2].log_path,
        &segs[2].index_path,
        &segs[2].time_index_path,
    ] {
        fs::remove_file(p).unwrap();
    }
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    assert_eq!(log.quarantined().len(), 1);
    // Retention drops everything before the hole.
    log.delete_before(segs[2].base_seq).unwrap();
    assert_eq!(log.first_seq(), segs[2].base_seq);
    log.close().unwrap();
    // Reopened, the log still starts at the hole: it is never taken for a short log.
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    assert_eq!(log.first_seq(), segs[2].base_seq);
    assert!(matches!(
        log.read(segs[2].base_seq, 1),
        Err(Error::Quarantined { .. })
    ));
    assert_eq!(
        log.read(segs[3].base_seq, 1).unwrap()[0].message,
        msg(segs[3].base_seq)
    );
}

#[test]
fn a_hand_made_hole_marker_over_records_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let qdir = dir.path().join(QUARANTINE_DIR);
    fs::create_dir(&qdir).unwrap();
    let marker = qdir.join(segment::hole_file_name(1, 20));
    fs::write(&marker, b"").unwrap();
    match Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)) {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, marker),
        other => panic!("{other:?}"),
    }
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    assert!(!marker.exists());
    assert!(log.quarantined().is_empty());
    assert_eq!(log.read(1, 100).unwrap().len() as u64, RECORDS);
}

#[test]
fn a_hole_marker_past_the_end_closes_the_active_segment_with_its_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path());
    let active = segs.last().unwrap();
    let qdir = dir.path().join(QUARANTINE_DIR);
    fs::create_dir(&qdir).unwrap();
    fs::write(
        qdir.join(segment::hole_file_name(RECORDS + 1, RECORDS + 10)),
        b"",
    )
    .unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    assert_eq!(log.append(&msg(RECORDS + 11)).unwrap(), RECORDS + 11);
    log.close().unwrap();
    let v = verify_segment_files(
        &active.log_path,
        Some(&active.index_path),
        Some(&active.time_index_path),
    )
    .unwrap();
    assert!(v.is_ok(), "{:?} in {:?}", v.problem, v.problem_path);
    let log = Log::open(dir.path(), opts(RecoveryMode::Strict)).unwrap();
    assert_eq!(log.last_seq(), RECORDS + 11);
}

#[test]
fn a_directory_named_like_a_segment_fails_open_and_repair_moves_it_aside() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let bogus = dir.path().join(segment::segment_file_name(99_999, "log"));
    fs::create_dir(&bogus).unwrap();
    match Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)) {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, bogus),
        other => panic!("{other:?}"),
    }
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    assert!(!bogus.exists());
    assert_eq!(log.append(&msg(RECORDS + 1)).unwrap(), RECORDS + 1);
}
