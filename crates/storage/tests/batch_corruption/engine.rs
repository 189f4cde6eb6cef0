//! The checks every damaged batch goes through: `verify_segment` names the first bad batch's
//! byte; `Log::read` of a log that was open when the damage happened, and `LogReader::poll` of
//! a read-only view, return exactly the records before it and then fail naming the file and the
//! byte; `Log::open` on a copy of the damaged directory, in each `RecoveryMode` (and, for a
//! closed segment, without its index files), cuts only a torn tail (saving it byte for byte),
//! refuses other damage naming the file, byte and seqs without changing a byte, and under a
//! repair loses exactly the damaged batch's seqs.

use std::fs;
use std::path::{Path, PathBuf};

use krabka_storage::segment::{self, verify_segment};
use krabka_storage::{Compression, Error, Log, RecoveryMode};

use super::common::*;

/// Where the damaged batch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Batch 3..=102 of the closed segment (batches follow it).
    ClosedMiddle,
    /// Batch 204, the last of the closed segment.
    ClosedLast,
    /// Batch 206..=305 of the active segment (batches follow it).
    ActiveMiddle,
    /// Batch 307..=406, the last of the active segment.
    ActiveLast,
}

/// The places of a batch of 100 records with batches after it, and the last of the log.
pub const PLACES: [Place; 3] = [Place::ClosedMiddle, Place::ActiveMiddle, Place::ActiveLast];

/// What the damage did to the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing any check can see, and no record changed: the bytes are as they were (zeroing a
    /// field that is already 0), or a `partitionLeaderEpoch` (outside the CRC, in no record)
    /// was raised to a value that is valid.
    Unseen,
    /// The batch is bad, and every check says so at its first byte.
    Bad,
}

/// A named damage of the batch of a place.
pub type Case = (String, Place, Box<dyn Fn(&Batch) -> Expect>);

/// A [`Case`]: its name, where the damage goes, and the damage (which says what to expect).
pub fn make_case(name: String, place: Place, damage: impl Fn(&Batch) -> Expect + 'static) -> Case {
    (name, place, Box::new(damage))
}

/// Every recovery mode.
pub const MODES: [RecoveryMode; 3] = [
    RecoveryMode::TolerateTornTail,
    RecoveryMode::Strict,
    RecoveryMode::Repair,
];

/// What [`check_case`] checks besides `verify_segment`.
#[derive(Clone, Copy, Debug)]
pub struct Checks<'a> {
    /// The reads (`Log::read` and `LogReader::poll`).
    pub reads: bool,
    /// The recovery modes to open the damaged directory in.
    pub modes: &'a [RecoveryMode],
    /// The codec of the log's batches.
    pub compression: Compression,
}

/// Runs every case with reads and opens in every mode, catching failures, and fails listing
/// them all.
pub fn run_all(cases: Vec<Case>) {
    run_in(cases, &MODES);
}

/// [`run_all`] with opens in `modes` only.
pub fn run_in(cases: Vec<Case>, modes: &[RecoveryMode]) {
    run_with(
        cases,
        Checks {
            reads: true,
            modes,
            compression: Compression::None,
        },
    );
}

/// [`run_all`] with `checks` only.
pub fn run_with(cases: Vec<Case>, checks: Checks) {
    let mut failed = Vec::new();
    for (case, place, damage) in &cases {
        let run =
            std::panic::AssertUnwindSafe(|| check_case(case, *place, damage.as_ref(), checks));
        if std::panic::catch_unwind(run).is_err() {
            failed.push(case.clone());
        }
    }
    assert!(failed.is_empty(), "failed cases: {failed:#?}");
}

/// Whether the damaged batch at `b` runs past the end of its file (the recovery's and the
/// reader's "incomplete").
fn incomplete(b: &Batch) -> bool {
    let bytes = fs::read(&b.path).unwrap();
    let rest = bytes.get(b.position as usize..).unwrap_or(&[]);
    segment::batch_len(rest).is_none_or(|n| n > rest.len())
}

/// Damages the batch of `place` with `damage` (which says what it did to it) and checks
/// everything the public API does with the result (see the module docs).
pub fn check_case(case: &str, place: Place, damage: &dyn Fn(&Batch) -> Expect, checks: Checks) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let built = build_with(&dir, checks.compression);
    let (seg, at) = match place {
        Place::ClosedMiddle => (&built.closed, 2),
        Place::ClosedLast => (&built.closed, 5),
        Place::ActiveMiddle => (&built.active, 1),
        Place::ActiveLast => (&built.active, 3),
    };
    let b = seg[at].clone();
    let seg_first = seg[0].first;
    let seg_last = seg.last().unwrap().last;
    let closed = matches!(place, Place::ClosedMiddle | Place::ClosedLast);
    let size = fs::metadata(&b.path).unwrap().len();
    let expect = damage(&b);
    let cut = fs::metadata(&b.path).unwrap().len() < size;
    let incomplete = expect == Expect::Bad && incomplete(&b);
    assert!(!cut || incomplete, "{case}: a cut batch is incomplete");
    // Where a scan finds the damage.
    let found_at = (expect == Expect::Bad).then(|| b.clone());

    // verify_segment: the first bad batch's byte, and exactly the records before it.
    // The active segment as the newest of its log: a preallocated file goes on with zeros.
    let v = if closed {
        verify_segment(&b.path)
    } else {
        segment::verify_segment_in_log(&b.path, None, None, None)
    }
    .unwrap();
    match &found_at {
        None => {
            assert!(v.is_ok(), "{case}: {:?}", v.problem);
            assert_eq!(v.last_seq, Some(seg_last), "{case}");
        }
        Some(f) => {
            let p = v
                .problem
                .as_ref()
                .unwrap_or_else(|| panic!("{case}: verify passes"));
            assert_eq!(p.position, f.position, "{case}: {}", p.reason);
            assert_eq!(
                (v.valid_bytes, v.records),
                (f.position, f.first - seg_first),
                "{case}"
            );
        }
    }

    // Log::read of the log that was open when the damage happened, and a read-only view.
    let reads_stop = expect == Expect::Bad;
    if checks.reads {
        check_reads(&built.log, &b, reads_stop, case);
        if reads_stop {
            let ok = point_reads(&built.log, seg_first..=seg_last, &b.path, case);
            assert!(ok.iter().all(|s| !b.seqs().contains(s)), "{case}: {ok:?}");
            assert!(
                (seg_first..b.first).all(|s| ok.contains(&s)),
                "{case}: {ok:?}"
            );
        }
        let (recs, err, tail) = poll_on(&dir, 1);
        if reads_stop {
            assert_exact(&recs, 1..=b.first - 1, case);
            match (err, closed, incomplete) {
                (Some(e @ Error::CutShort { .. }), true, true)
                | (Some(e @ Error::BadBatch { .. }), _, false) => {
                    assert_names(&e, &b.path, b.position, case)
                }
                // The newest segment ending inside a batch: a write in progress to a reader.
                (None, false, true) => assert_eq!(tail, Some(b.position), "{case}"),
                (other, ..) => panic!("{case}: poll: {other:?}"),
            }
        } else {
            assert_exact(&recs, 1..=LAST, case);
            assert!(err.is_none() && tail.is_none(), "{case}: {err:?}");
        }
    }
    drop(built.log);

    // Log::open, in every mode, each on a copy of the damaged directory.
    let target = |dir: &Path, scanned: bool| {
        let path = dir.join(b.path.file_name().unwrap());
        Target {
            found: found_at.clone().filter(|_| scanned).map(|f| Batch {
                path: path.clone(),
                ..f
            }),
            b: Batch { path, ..b.clone() },
            seg_last,
            incomplete,
            reads_stop,
            reads: checks.reads,
            closed,
        }
    };
    for &mode in checks.modes {
        let copy = tmp.path().join(format!("{mode:?}"));
        copy_dir(&dir, &copy);
        // A closed segment whose index files describe it is not scanned unless by a repair.
        let scanned = !closed || cut || mode == RecoveryMode::Repair;
        check_open(&copy, mode, &target(&copy, scanned), case);
    }
    if closed && checks.modes.contains(&RecoveryMode::TolerateTornTail) {
        // Without its index files, the closed segment is scanned by every open.
        let copy = tmp.path().join("no-index");
        copy_dir(&dir, &copy);
        for ext in ["index", "timeindex"] {
            fs::remove_file(copy.join(segment::segment_file_name(1, ext))).unwrap();
        }
        let case = format!("{case}, no index");
        check_open(
            &copy,
            RecoveryMode::TolerateTornTail,
            &target(&copy, true),
            &case,
        );
    }
}

/// Reads from seq 1 on: exactly the records before the batch `b`, then an error naming its file
/// and byte (`stops`); or every record.
fn check_reads(log: &Log, b: &Batch, stops: bool, case: &str) {
    let (recs, err) = read_on(log, 1);
    if !stops {
        assert_exact(&recs, 1..=LAST, case);
        assert!(err.is_none(), "{case}: {err:?}");
        return;
    }
    assert_exact(&recs, 1..=b.first - 1, case);
    match err {
        Some(e @ Error::Corrupt { .. }) => assert_names(&e, &b.path, b.position, case),
        other => panic!("{case}: read: {other:?}"),
    }
}

/// The damaged batch of a copy of the log directory, and what an open of it can see.
struct Target {
    /// The damaged batch (as the intact file held it).
    b: Batch,
    /// The batch a scan of its segment stops at; `None` when the open does not see the damage.
    found: Option<Batch>,
    seg_last: u64,
    /// Whether the damaged batch runs past the end of its file.
    incomplete: bool,
    /// Whether reads stop at the damaged batch.
    reads_stop: bool,
    /// Whether to check the reads of a log that opens without seeing the damage.
    reads: bool,
    closed: bool,
}

fn log_bytes(snap: &[(PathBuf, Vec<u8>)]) -> u64 {
    snap.iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "log"))
        .map(|(_, b)| b.len() as u64)
        .sum()
}

/// Opens the damaged copy `dir` in `mode` and checks what it did.
fn check_open(dir: &Path, mode: RecoveryMode, t: &Target, case: &str) {
    let case = format!("{case}, open {mode:?}");
    let b = &t.b;
    let before = snapshot(dir);
    let file_len = fs::metadata(&b.path).unwrap().len();
    let opened = Log::open(dir, opts(mode));
    let Some(f) = &t.found else {
        // Unseen by open: the log serves the records before the damage, then names it.
        let log = opened.unwrap_or_else(|e| panic!("{case}: {e}"));
        assert!(log.recovery_report().truncated.is_none(), "{case}");
        assert!(log.recovery_report().quarantined.is_empty(), "{case}");
        if t.reads {
            check_reads(&log, b, t.reads_stop, &case);
        }
        return;
    };
    // A torn tail: damage in the active segment that no valid batch follows.
    let torn = !t.closed && (f.last == LAST || t.incomplete);
    match (opened, torn, mode) {
        (
            Err(Error::TornTail {
                path,
                position,
                incomplete,
                ..
            }),
            true,
            RecoveryMode::Strict,
        ) => {
            assert_eq!(
                (path, position, incomplete),
                (f.path.clone(), f.position, t.incomplete),
                "{case}"
            );
            assert_eq!(snapshot(dir), before, "{case}: files changed");
        }
        (
            Err(e @ Error::Damaged { .. }),
            false,
            RecoveryMode::TolerateTornTail | RecoveryMode::Strict,
        ) => {
            assert_names(&e, &f.path, f.position, &case);
            if let Error::Damaged {
                first_seq,
                last_seq,
                ..
            } = e
            {
                assert_eq!((first_seq, last_seq), (f.first, t.seg_last), "{case}");
            }
            assert_eq!(snapshot(dir), before, "{case}: files changed");
            assert!(!has_quarantine(dir), "{case}");
        }
        (Ok(log), true, RecoveryMode::TolerateTornTail | RecoveryMode::Repair) => {
            let report = log.recovery_report().clone();
            let cut = report
                .truncated
                .as_ref()
                .unwrap_or_else(|| panic!("{case}: {report}"));
            assert_eq!(
                (&cut.path, cut.position, cut.bytes_removed),
                (&f.path, f.position, file_len - f.position),
                "{case}"
            );
            // The cut bytes are saved, byte for byte.
            let piece = report
                .quarantined
                .iter()
                .find(|q| q.position == f.position)
                .unwrap_or_else(|| panic!("{case}: {report}"));
            let damaged = &before.iter().find(|(p, _)| *p == f.path).unwrap().1;
            let cut = &damaged[f.position as usize..];
            let saved = fs::read(&piece.to).unwrap();
            if krabka_storage::fault::preallocate_by_default() {
                // A preallocated file's zeros after the torn bytes are its space, not saved.
                let (head, zeros) = cut.split_at(saved.len().min(cut.len()));
                assert_eq!(saved, head, "{case}");
                assert!(zeros.iter().all(|&b| b == 0), "{case}");
            } else {
                assert_eq!(saved, cut, "{case}");
            }
            assert_eq!(log.last_seq(), f.first - 1, "{case}");
            let (recs, err) = read_on(&log, 1);
            assert_exact(&recs, 1..=f.first - 1, &case);
            assert!(err.is_none(), "{case}: {err:?}");
        }
        (Ok(log), false, RecoveryMode::Repair) => {
            let lost = holes_of(&log, &case);
            let report = log.recovery_report();
            if t.incomplete {
                assert_eq!(
                    lost,
                    (b.first..=t.seg_last).collect::<Vec<_>>(),
                    "{case}: {report}"
                );
            } else {
                assert_eq!(lost, b.seqs().collect::<Vec<_>>(), "{case}: {report}");
            }
            assert_eq!(log.last_seq(), LAST, "{case}");
            let after = log_bytes(&snapshot(dir));
            let moved: u64 = log
                .recovery_report()
                .quarantined
                .iter()
                .map(|q| q.bytes)
                .sum();
            assert!(
                after + moved >= log_bytes(&before),
                "{case}: bytes vanished"
            );
            assert_eq!(log.append(&msg(LAST + 1)).unwrap(), LAST + 1, "{case}");
        }
        (other, ..) => panic!(
            "{case}: torn {torn}: {:?}",
            other.map(|l| l.recovery_report().to_string())
        ),
    }
}
