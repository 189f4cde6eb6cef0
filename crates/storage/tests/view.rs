//! The read-only view of a log directory (`krabka_storage::view`): it follows a log another
//! handle is appending to without taking its lock, stops at an explicit hole naming it, steps
//! around a wrong index entry, tells a torn tail (a write in progress) from damage, and names
//! the file and the seqs of every seam that does not hold.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::index::OffsetIndexView;
use krabka_storage::segment::{self, QUARANTINE_DIR};
use krabka_storage::view::{IndexFallback, LogView};
use krabka_storage::{Error, Log, Options, RecoveryMode, SegmentInfo, SyncPolicy, testkit};

fn opts(mode: RecoveryMode, max_bytes: u64) -> Options {
    Options {
        max_bytes,
        sync: SyncPolicy::Never,
        index_interval_bytes: 160,
        recovery: mode,
        ..Options::default()
    }
}

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}"))
        .with_key(format!("k{seq}"))
        .with_timestamp(seq as i64)
}

/// A closed log of `n` records in segments of `max_bytes`; returns its segments.
fn setup(dir: &Path, n: u64, max_bytes: u64) -> Vec<SegmentInfo> {
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail, max_bytes)).unwrap();
    for seq in 1..=n {
        assert_eq!(log.append(&msg(seq)).unwrap(), seq);
    }
    let segs = log.segments();
    log.close().unwrap();
    segs
}

/// Polls `reader` until it returns nothing or fails (at most `n` polls): the seqs read and the
/// error, if any.
fn drain(reader: &mut krabka_storage::view::LogReader, n: usize) -> (Vec<u64>, Option<Error>) {
    let mut seqs = Vec::new();
    for _ in 0..n {
        match reader.poll(7) {
            Ok(records) if records.is_empty() => return (seqs, None),
            Ok(records) => {
                for r in records {
                    assert_eq!(r.message, msg(r.seq), "record {}", r.seq);
                    seqs.push(r.seq);
                }
            }
            Err(e) => return (seqs, Some(e)),
        }
    }
    panic!("still reading after {n} polls");
}

#[test]
fn a_reader_follows_a_log_another_handle_appends_to_across_rolls() {
    const N: u64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 2000)).unwrap();
    let view = LogView::new(dir.path());
    let mut reader = view.reader(1);
    let writer = std::thread::spawn(move || {
        for seq in 1..=N {
            assert_eq!(log.append(&msg(seq)).unwrap(), seq);
        }
        let rolled = log.segments().len();
        log.close().unwrap();
        rolled
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next = 1;
    for _ in 0..1_000_000 {
        if next > N || Instant::now() > deadline {
            break;
        }
        let records = reader.poll(100).unwrap();
        for r in &records {
            assert_eq!((r.seq, &r.message), (next, &msg(next)));
            next += 1;
        }
        if records.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(next, N + 1, "read every record the writer appended");
    assert!(
        writer.join().unwrap() > 10,
        "the writer rolled many segments"
    );
    assert!(reader.poll(100).unwrap().is_empty());
    assert_eq!(reader.incomplete_tail(), None);
    assert!(reader.take_fallbacks().is_empty());
    assert_eq!(view.segment_bases().unwrap().first(), Some(&1));
    assert_eq!(view.recovery_point().unwrap(), Some(N));
}

#[test]
fn raw_frames_are_the_bytes_of_the_records_a_poll_returns() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 200, 1500);
    let seg = &segs[1];
    assert!(seg.last_seq - seg.base_seq > 8, "{seg:?}");
    // From an index entry's batch or a batch after it (skipped up to), within one segment.
    let from = seg.base_seq + 2;
    let view = LogView::new(dir.path());
    let mut reader = view.reader(from);
    let batches = reader.poll_batches(5).unwrap().unwrap();
    assert_eq!((batches.first_seq, batches.last_seq), (from, from + 4));
    assert_eq!(batches.path, seg.log_path);
    let file = fs::read(&batches.path).unwrap();
    let at = usize::try_from(batches.position).unwrap();
    assert_eq!(&file[at..at + batches.bytes.len()], &batches.bytes[..]);
    let decoded = segment::decode_records_at(&batches.bytes, from, from, 100).unwrap();
    let seqs: Vec<u64> = decoded.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (from..=from + 4).collect::<Vec<_>>());
    assert_eq!(decoded.consumed, batches.bytes.len());
    assert_eq!(reader.poll(1).unwrap()[0].seq, from + 5);
}

#[test]
fn a_read_into_a_hole_fails_naming_it_and_reads_go_on_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 300, 1500);
    let damaged = &segs[2];
    // A flipped byte in the first batch of a closed segment: a repair moves it aside.
    testkit::xor_byte(&damaged.log_path, 20, 0x5a).unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 1500)).unwrap();
    let logged = log.holes();
    assert_eq!(logged.len(), 1);
    let hole = logged[0].clone();
    assert_eq!(hole.first_seq, damaged.base_seq);
    assert_eq!(hole.accepted_at_ms, None);
    drop(log);

    let view = LogView::new(dir.path());
    assert_eq!(view.holes().unwrap(), logged);
    assert!(view.quarantine().unwrap().contains(&hole.marker));
    for from in [1, hole.first_seq, hole.last_seq] {
        let (seqs, err) = drain(&mut view.reader(from), 1000);
        assert_eq!(
            seqs,
            (from.min(hole.first_seq)..hole.first_seq).collect::<Vec<_>>()
        );
        match err {
            Some(Error::Quarantined {
                first_seq,
                last_seq,
                path,
            }) => assert_eq!(
                (first_seq, last_seq, path),
                (hole.first_seq, hole.last_seq, hole.marker.clone())
            ),
            other => panic!("from {from}: {other:?}"),
        }
    }
    let (seqs, err) = drain(&mut view.reader(hole.last_seq + 1), 1000);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(seqs, (hole.last_seq + 1..=300).collect::<Vec<_>>());

    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 1500)).unwrap();
    log.accept_holes(hole.first_seq..=hole.first_seq).unwrap();
    drop(log);
    let accepted = view.holes().unwrap();
    assert!(accepted[0].is_accepted(), "{accepted:?}");
    assert_eq!(accepted[0].seqs(), hole.seqs());
}

/// Rewrites entry `i` of the `.index` file `path` to point at `position` (CRC kept valid).
fn point_entry(path: &Path, i: usize, position: u64) {
    let mut bytes = fs::read(path).unwrap();
    let at = 44 + 16 * i + 8;
    bytes[at..at + 8].copy_from_slice(&position.to_le_bytes());
    let end = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_wrong_index_entry_costs_a_scan_from_the_segment_start_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 200, 3000);
    let seg = &segs[0];
    let index = OffsetIndexView::parse(fs::read(&seg.index_path).unwrap()).unwrap();
    assert!(index.len() > 4, "{} entries", index.len());
    let (seq, at) = index.entry(2).unwrap();
    let (_, next_entry) = index.entry(3).unwrap();
    let log_bytes = fs::read(&seg.log_path).unwrap();
    let later = at + segment::batch_len(&log_bytes[usize::try_from(at).unwrap()..]).unwrap() as u64;
    assert!(later < next_entry, "two batches between entries");
    // The entry for `seq` now points at the batch of the seq after it (the index stays valid:
    // its positions still increase).
    point_entry(&seg.index_path, 2, later);
    let mut reader = LogView::new(dir.path()).reader(seq);
    let (seqs, err) = drain(&mut reader, 1000);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(seqs, (seq..=200).collect::<Vec<_>>());
    assert_eq!(
        reader.take_fallbacks(),
        vec![IndexFallback::NoBatch {
            index: seg.index_path.clone(),
            seq,
            position: later,
        }]
    );

    // A damaged batch where the index points: noted, scanned from the start, and the damage
    // named by file, byte and seq.
    point_entry(&seg.index_path, 2, at);
    testkit::xor_byte(&seg.log_path, at + 20, 0x5a).unwrap();
    let mut reader = LogView::new(dir.path()).reader(seq);
    let (seqs, err) = drain(&mut reader, 1000);
    assert!(seqs.is_empty(), "{seqs:?}");
    match err {
        Some(Error::BadBatch {
            path,
            position,
            seq: s,
            ..
        }) => assert_eq!((path, position, s), (seg.log_path.clone(), at, seq)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        reader.take_fallbacks(),
        vec![IndexFallback::BadBatch {
            log: seg.log_path.clone(),
            position: at,
            seq,
        }]
    );
    // From the start, every record before the damage is delivered first.
    let (seqs, err) = drain(&mut LogView::new(dir.path()).reader(1), 1000);
    assert_eq!(seqs, (1..seq).collect::<Vec<_>>());
    assert!(
        matches!(err, Some(Error::BadBatch { position, .. }) if position == at),
        "{err:?}"
    );
}

#[test]
fn a_torn_tail_is_an_incomplete_frame_not_damage_and_its_completion_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 1 << 20)).unwrap();
    for seq in 1..=10 {
        log.append(&msg(seq)).unwrap();
    }
    let segment = log.segments().pop().unwrap();
    let active = segment.log_path;
    let mut batch = Vec::new();
    segment::encode_batch_of_one(11, &msg(11), &mut batch).unwrap();
    // The true end: a preallocated file (`Options::preallocate`) goes on with zeros.
    let len = segment.size;
    let preallocated = fs::metadata(&active).unwrap().len() > len;
    let half = batch.len() / 2;
    let write = |bytes: &[u8], at: u64| {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(&active).unwrap();
        f.write_all_at(bytes, at).unwrap();
    };
    // Half a batch: a write in progress (or a torn one).
    write(&batch[..half], len);
    let view = LogView::new(dir.path());
    let mut reader = view.reader(1);
    let (seqs, err) = drain(&mut reader, 100);
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
    if preallocated {
        // In preallocated space the half batch is a whole-length batch failing its CRC (its
        // rest zeros): a still-failing one cannot be told from damage, and is named.
        assert!(
            matches!(&err, Some(Error::BadBatch { path, position, seq: 11, .. })
                if *path == active && *position == len),
            "{err:?}"
        );
    } else {
        assert!(err.is_none(), "{err:?}");
        let tail = reader.incomplete_tail().unwrap();
        assert_eq!(
            (&tail.path, tail.position, tail.bytes),
            (&active, len, half as u64)
        );
    }
    // The write completes: the reader reads on.
    write(&batch[half..], len + half as u64);
    let records = reader.poll(10).unwrap();
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![11]);
    assert_eq!(reader.incomplete_tail(), None);
    drop(log);
}

#[test]
fn seams_that_do_not_hold_and_seqs_the_directory_does_not_hold_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 300, 1500);
    let view = LogView::new(dir.path());
    assert!(matches!(
        view.reader(0).poll(1),
        Err(Error::BelowStart {
            seq: 0,
            first: 1,
            ..
        })
    ));
    assert!(matches!(
        view.reader(302).poll(1),
        Err(Error::OutOfRange {
            seq: 302,
            first: 1,
            last: 300
        })
    ));
    assert!(view.reader(301).poll(1).unwrap().is_empty());

    // The newest segment cut short of the recovery point: records are missing, not torn.
    let newest = segs.last().unwrap();
    testkit::set_len(&newest.log_path, 10).unwrap();
    let (seqs, err) = drain(&mut view.reader(newest.base_seq - 2), 100);
    assert_eq!(seqs, vec![newest.base_seq - 2, newest.base_seq - 1]);
    match err {
        Some(Error::EndsBelowRecoveryPoint {
            path,
            position,
            first_seq,
            recovery_point,
        }) => assert_eq!(
            (path, position, first_seq, recovery_point),
            (newest.log_path.clone(), 0, newest.base_seq, 300)
        ),
        other => panic!("{other:?}"),
    }

    // A deleted segment: a gap between the files around it; an emptied one.
    let gone = &segs[3];
    fs::remove_file(&gone.log_path).unwrap();
    let (seqs, err) = drain(&mut view.reader(segs[2].base_seq), 100);
    assert_eq!(
        seqs,
        (segs[2].base_seq..=segs[2].last_seq).collect::<Vec<_>>()
    );
    match err {
        Some(Error::SeqGap {
            previous,
            path,
            expected,
            found,
        }) => assert_eq!(
            (previous, path, expected, found),
            (
                segs[2].log_path.clone(),
                segs[4].log_path.clone(),
                gone.base_seq,
                segs[4].base_seq
            )
        ),
        other => panic!("{other:?}"),
    }
    testkit::set_len(&segs[2].log_path, 0).unwrap();
    let (_, err) = drain(&mut view.reader(segs[2].base_seq), 100);
    assert!(
        matches!(&err, Some(Error::EmptySegment { path, expected, .. })
            if *path == segs[2].log_path && *expected == segs[2].base_seq),
        "{err:?}"
    );
    // A closed segment cut inside a batch.
    let cut = &segs[1];
    testkit::set_len(&cut.log_path, cut.size - 3).unwrap();
    let (_, err) = drain(&mut view.reader(cut.base_seq), 100);
    match err {
        Some(Error::CutShort { path, seq, .. }) => {
            assert_eq!((path, seq), (cut.log_path.clone(), cut.last_seq));
        }
        other => panic!("{other:?}"),
    }

    // Nothing the view did changed the directory.
    assert!(!dir.path().join(QUARANTINE_DIR).exists());
    let bases: Vec<u64> = segs
        .iter()
        .map(|s| s.base_seq)
        .filter(|b| *b != gone.base_seq)
        .collect();
    assert_eq!(view.segment_bases().unwrap(), bases);
}
