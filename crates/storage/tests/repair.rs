//! A repair keeps every intact batch: damage in the middle of a segment costs only the seqs of
//! the damaged batches (the batches after it are kept as segment files of their own), the plan a
//! dry run prints is what the repair does, a repair interrupted at any step of its split leaves
//! the log as it was or as repaired, and an accepted hole is recorded durably.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::{Path, PathBuf};

use krabka_protocol::Message;
use krabka_storage::segment::{self, QUARANTINE_DIR};
use krabka_storage::{
    ACCEPTED_HOLES_FILE_NAME, Error, Log, Options, RecoveryMode, RepairStep, SegmentInfo,
    SyncPolicy, plan_segment_repair, read_accepted_holes, testkit,
};

fn opts(mode: RecoveryMode, max_bytes: u64) -> Options {
    Options {
        max_bytes,
        sync: SyncPolicy::Never,
        index_interval_bytes: 100,
        recovery: mode,
        ..Options::default()
    }
}

fn msg(seq: u64) -> Message {
    Message::new(format!("value-{seq}"))
        .with_key(format!("k{seq}"))
        .with_timestamp(seq as i64)
}

/// A closed log of `n` records (segments of `max_bytes`); returns its segments.
fn setup(dir: &Path, n: u64, max_bytes: u64) -> Vec<SegmentInfo> {
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail, max_bytes)).unwrap();
    for seq in 1..=n {
        assert_eq!(log.append(&msg(seq)).unwrap(), seq);
    }
    let segs = log.segments();
    log.close().unwrap();
    segs
}

/// `(seq, position)` of every batch of the segment file `path`.
fn batches(path: &Path) -> Vec<(u64, u64)> {
    segment::dump_batches(segment::read_segment_file(path).unwrap())
        .map(|f| (f.seq.unwrap(), f.position))
        .collect()
}

/// Damages the batch of `seq` in the segment file `path` (a flipped byte in its message).
fn damage(path: &Path, seq: u64) {
    let (_, pos) = batches(path).into_iter().find(|(s, _)| *s == seq).unwrap();
    testkit::xor_byte(path, pos + 20, 0x5a).unwrap();
}

/// Every seq of `1..=last` read one by one: `Ok` with the record, or the hole it lies in.
fn read_all(log: &Log, last: u64) -> (Vec<u64>, Vec<u64>) {
    let (mut read, mut holes) = (Vec::new(), Vec::new());
    for seq in 1..=last {
        match log.read(seq, 1) {
            Ok(r) => {
                assert_eq!(r[0].seq, seq);
                assert_eq!(r[0].message, msg(seq), "seq {seq}");
                read.push(seq);
            }
            Err(Error::Quarantined {
                first_seq,
                last_seq,
                ..
            }) => {
                assert!((first_seq..=last_seq).contains(&seq));
                holes.push(seq);
            }
            Err(e) => panic!("seq {seq}: {e}"),
        }
    }
    (read, holes)
}

#[test]
fn damage_in_the_middle_of_the_active_segment_costs_only_the_damaged_frame() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 18, 1 << 20);
    let active = segs.last().unwrap().log_path.clone();
    damage(&active, 9);
    let len = fs::metadata(&active).unwrap().len();
    let ten = batches(&active).iter().find(|(s, _)| *s == 9).unwrap().1;
    let plan = plan_segment_repair(&active, 1, None, 18).unwrap().unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 1 << 20)).unwrap();
    let report = log.recovery_report().clone();
    // The dry run's plan is what the repair did.
    assert_eq!(
        fs::metadata(&active).unwrap().len(),
        ten,
        "the file is cut right after seq 8"
    );
    assert_eq!(plan.intact_len, ten);
    let Some(RepairStep::Keep {
        from,
        to,
        first_seq,
        last_seq,
        ..
    }) = plan.steps.get(1).copied()
    else {
        panic!("{plan:?}");
    };
    assert_eq!((first_seq, last_seq, to), (10, 18, len));
    assert!(matches!(
        plan.steps[0],
        RepairStep::Cut { from: f, to: t, seqs: Some((9, 9)) } if f == ten && t == from
    ));
    assert_eq!(plan.steps.len(), 2, "{plan:?}");
    assert_eq!(report.quarantined.len(), 1, "{report}");
    assert_eq!(report.quarantined[0].seqs, Some((9, 9)));
    assert_eq!(report.quarantined[0].bytes, from - ten);
    assert_eq!(report.kept.len(), 1, "{report}");
    assert_eq!(
        (report.kept[0].first_seq, report.kept[0].last_seq),
        (10, 18)
    );
    assert!(report.to_string().contains("kept seqs 10..=18"), "{report}");
    // 17 records read back exactly, the hole is seq 9 alone, and appends go on after 18.
    assert_eq!(
        read_all(&log, 18),
        ((1..=8).chain(10..=18).collect(), vec![9])
    );
    assert_eq!(log.append(&msg(19)).unwrap(), 19);
    log.close().unwrap();
    // Every file verifies, and a strict open accepts the repaired log as it is.
    for seg in fs::read_dir(dir.path()).unwrap() {
        let p = seg.unwrap().path();
        if p.extension().is_some_and(|e| e == "log") && p != active {
            let v = segment::verify_segment_files(&p, None, None).unwrap();
            assert!(v.is_ok(), "{p:?}: {:?}", v.problem);
        }
    }
    let log = Log::open(dir.path(), opts(RecoveryMode::Strict, 1 << 20)).unwrap();
    assert!(
        log.recovery_report().is_clean(),
        "{}",
        log.recovery_report()
    );
    assert_eq!(read_all(&log, 19).1, vec![9]);
    assert_eq!(log.quarantined().len(), 1);
}

#[test]
fn several_damaged_frames_in_closed_segments_each_cost_only_their_own_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 200, 2000);
    assert!(segs.len() >= 4, "{}", segs.len());
    let closed = &segs[1];
    let (a, b) = (closed.base_seq + 3, closed.base_seq + 6);
    damage(&closed.log_path, a);
    damage(&closed.log_path, b);
    damage(&closed.log_path, b + 1);
    let first = &segs[0];
    damage(&first.log_path, first.base_seq);
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 2000)).unwrap();
    let (read, holes) = read_all(&log, 200);
    assert_eq!(holes, vec![first.base_seq, a, b, b + 1]);
    assert_eq!(read.len(), 196);
    assert_eq!(log.quarantined().len(), 3, "{}", log.recovery_report());
    // Damage at the very start of a segment leaves no empty file behind.
    assert!(!first.log_path.exists());
    log.close().unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::Strict, 2000)).unwrap();
    assert_eq!(read_all(&log, 200).1, holes);
}

#[test]
fn a_frame_cut_out_of_a_segment_costs_its_seq_and_not_the_frame_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 18, 1 << 20);
    let path = segs[0].log_path.clone();
    let f = batches(&path);
    let (seven, eight) = (f[6].1 as usize, f[7].1 as usize);
    let mut bytes = fs::read(&path).unwrap();
    bytes.drain(seven..eight);
    fs::write(&path, &bytes).unwrap();
    let plan = plan_segment_repair(&path, 1, None, 18).unwrap().unwrap();
    assert_eq!(
        plan.steps,
        vec![
            RepairStep::Cut {
                from: seven as u64,
                to: seven as u64,
                seqs: Some((7, 7))
            },
            RepairStep::Keep {
                from: seven as u64,
                to: bytes.len() as u64,
                first_seq: 8,
                last_seq: 18
            },
        ]
    );
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 1 << 20)).unwrap();
    assert_eq!(
        read_all(&log, 18),
        ((1..=6).chain(8..=18).collect(), vec![7])
    );
}

/// The directory's files and their bytes, the quarantine directory left out.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut all: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.ends_with(".lock"))
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    all.sort();
    all
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

#[test]
fn a_repair_interrupted_in_its_split_reopens_as_it_was_or_as_repaired() {
    let damaged = tempfile::tempdir().unwrap();
    let segs = setup(damaged.path(), 60, 1 << 20);
    let active = segs.last().unwrap().log_path.clone();
    damage(&active, 20);
    damage(&active, 40);
    let original = fs::read(&active).unwrap();
    // The reference repair.
    let done = tempfile::tempdir().unwrap();
    copy_dir(damaged.path(), done.path());
    drop(Log::open(done.path(), opts(RecoveryMode::Repair, 1 << 20)).unwrap());
    let pieces: Vec<(u64, Vec<u8>)> = [21u64, 41]
        .iter()
        .map(|&b| {
            let p = done.path().join(segment::segment_file_name(b, "log"));
            (b, fs::read(p).unwrap())
        })
        .collect();
    let keep_len = batches(&active).iter().find(|(s, _)| *s == 20).unwrap().1;
    let journal = format!(
        "krabka repair split v1\nsegment 1 {keep_len} {}\npiece 21 {}\npiece 41 {}\n",
        original.len(),
        pieces[0].1.len(),
        pieces[1].1.len()
    );
    let journal = format!(
        "{journal}crc32 {:08x}\n",
        crc32fast::hash(journal.as_bytes())
    );
    // Killed after the journal and `written` whole new files, before the cut: as it was.
    for written in 0..=2 {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(damaged.path(), dir.path());
        let before = snapshot(dir.path());
        fs::write(dir.path().join("repair-split"), &journal).unwrap();
        for (base, bytes) in pieces.iter().take(written) {
            fs::write(
                dir.path().join(segment::segment_file_name(*base, "log")),
                bytes,
            )
            .unwrap();
        }
        if written < 2 {
            // The next file, cut short.
            let (base, bytes) = &pieces[written];
            let path = dir.path().join(segment::segment_file_name(*base, "log"));
            fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
        }
        assert!(matches!(
            Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 1 << 20)),
            Err(Error::Damaged { first_seq: 20, .. })
        ));
        assert_eq!(snapshot(dir.path()), before, "written {written}");
        let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 1 << 20)).unwrap();
        assert_eq!(read_all(&log, 60).1, vec![20, 40]);
    }
    // Killed after the cut, before the journal was removed: as repaired.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(damaged.path(), dir.path());
    fs::create_dir(dir.path().join(QUARANTINE_DIR)).unwrap();
    for h in [
        segment::hole_file_name(20, 20),
        segment::hole_file_name(40, 40),
    ] {
        fs::write(dir.path().join(QUARANTINE_DIR).join(h), b"x").unwrap();
    }
    fs::write(dir.path().join("repair-split"), &journal).unwrap();
    for (base, bytes) in &pieces {
        fs::write(
            dir.path().join(segment::segment_file_name(*base, "log")),
            bytes,
        )
        .unwrap();
    }
    testkit::set_len(&dir.path().join(active.file_name().unwrap()), keep_len).unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 1 << 20)).unwrap();
    assert_eq!(read_all(&log, 60).1, vec![20, 40]);
    assert!(!dir.path().join("repair-split").exists());
    assert!(log.recovery_report().ignored_files.is_empty());
}

#[test]
fn an_accepted_hole_is_recorded_durably_and_still_fails_its_reads() {
    let dir = tempfile::tempdir().unwrap();
    let segs = setup(dir.path(), 18, 1 << 20);
    damage(&segs[0].log_path, 9);
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 1 << 20)).unwrap();
    match log.accept_holes(8..=9) {
        Err(Error::NotAHole { seq: 8, reason, .. }) => {
            assert!(reason.contains("9..=9"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!dir.path().join(ACCEPTED_HOLES_FILE_NAME).exists());
    let accepted = log.accept_holes(9..=9).unwrap();
    assert_eq!(
        (accepted.len(), accepted[0].first_seq, accepted[0].last_seq),
        (1, 9, 9)
    );
    // Accepting again keeps the first acceptance and its time.
    assert_eq!(log.accept_holes(9..=9).unwrap(), accepted);
    assert!(matches!(log.read(9, 1), Err(Error::Quarantined { .. })));
    log.close().unwrap();
    assert_eq!(read_accepted_holes(dir.path()).unwrap(), accepted);
    let log = Log::open(dir.path(), opts(RecoveryMode::Strict, 1 << 20)).unwrap();
    assert_eq!(log.accepted_holes(), accepted);
    assert!(log.recovery_report().ignored_files.is_empty());
    drop(log);
    // A damaged record of acceptances fails the open naming it; a repair moves it aside.
    fs::write(dir.path().join(ACCEPTED_HOLES_FILE_NAME), b"junk\n").unwrap();
    match Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 1 << 20)) {
        Err(Error::Corrupt { path, .. }) => {
            assert_eq!(path, dir.path().join(ACCEPTED_HOLES_FILE_NAME));
        }
        other => panic!("{other:?}"),
    }
    let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 1 << 20)).unwrap();
    assert!(log.accepted_holes().is_empty());
    assert_eq!(log.recovery_report().quarantined.len(), 1);
}

/// A record whose value holds the bytes of a valid batch (a log stored inside a log, or a
/// producer's crafted value): when that record is damaged, the repair keeps the log's own next
/// batch, never the batch inside the damaged value, and the damaged seq is the only hole. At
/// the file's first byte too, where a kept piece could otherwise carry the file's own name.
#[test]
fn frames_inside_a_damaged_value_are_never_taken_for_the_log() {
    for damaged_seq in [1u64, 6] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 1 << 20)).unwrap();
        for seq in 1..=12 {
            let m = if seq == damaged_seq {
                // A valid batch of the damaged seq itself and one a few seqs on.
                let mut inner = Vec::new();
                segment::encode_batch_of_one(damaged_seq, &msg(99), &mut inner).unwrap();
                segment::encode_batch_of_one(damaged_seq + 3, &msg(98), &mut inner).unwrap();
                Message::new(inner)
                    .with_key(format!("k{seq}"))
                    .with_timestamp(seq as i64)
            } else {
                msg(seq)
            };
            assert_eq!(log.append(&m).unwrap(), seq);
        }
        let active = log.segments().last().unwrap().log_path.clone();
        log.close().unwrap();
        // Flip a byte of the damaged record's key: its CRC fails, the batches in its value stay
        // valid.
        let (_, pos) = batches(&active)
            .into_iter()
            .find(|(s, _)| *s == damaged_seq)
            .unwrap();
        testkit::xor_byte(&active, pos + 16 + 4, 0x5a).unwrap();
        let log = Log::open(dir.path(), opts(RecoveryMode::Repair, 1 << 20)).unwrap();
        for seq in 1..=12 {
            match log.read(seq, 1) {
                Ok(r) if seq != damaged_seq => {
                    assert_eq!(r[0].seq, seq);
                    assert_eq!(r[0].message, msg(seq), "seq {seq}");
                }
                Err(Error::Quarantined {
                    first_seq,
                    last_seq,
                    ..
                }) if seq == damaged_seq => assert_eq!((first_seq, last_seq), (seq, seq)),
                other => panic!("damaged {damaged_seq}, seq {seq}: {other:?}"),
            }
        }
        log.close().unwrap();
    }
}

/// A damaged or hostile split journal (a digit flipped so that a piece names a live segment)
/// fails the open naming it, and nothing is removed.
#[test]
fn a_damaged_split_journal_fails_the_open_and_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 60, 600);
    let live: Vec<u64> = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail, 600))
        .unwrap()
        .segments()
        .iter()
        .map(|s| s.base_seq)
        .collect();
    assert!(live.len() > 2, "{live:?}");
    let body = format!(
        "krabka repair split v1\nsegment {} 10 900\npiece {} 300\n",
        live[0], live[2]
    );
    let crc = crc32fast::hash(body.as_bytes()) ^ 1;
    fs::write(
        dir.path().join("repair-split"),
        format!("{body}crc32 {crc:08x}\n"),
    )
    .unwrap();
    let before = snapshot(dir.path());
    let err = Log::open(dir.path(), opts(RecoveryMode::Repair, 600)).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if path.ends_with("repair-split")),
        "{err}"
    );
    assert_eq!(snapshot(dir.path()), before);
}
