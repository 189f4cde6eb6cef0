//! `LogView::verify` and `LogView::preview_repair` on real damaged log directories: each field
//! of the report (segments, counts, range, problems with their path and byte, holes, what the
//! next open repairs by itself), and the summaries a repair is read by.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::{Path, PathBuf};

use krabka_protocol::Message;
use krabka_storage::segment::{self, INDEX_EXTENSION, LOG_EXTENSION, QUARANTINE_DIR};
use krabka_storage::view::{IndexState, LogView, Problem, VerifyReport};
use krabka_storage::{Log, Options, RecoveryMode, SyncPolicy, testkit};

/// Segments of 5 records each.
const MAX_BYTES: u64 = 5 * 90;

fn opts(mode: RecoveryMode) -> Options {
    Options {
        max_bytes: MAX_BYTES,
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

/// A closed log of 13 records in segments of 5: bases 1, 6 and 11 (the active one).
fn setup(dir: &Path) -> Vec<u64> {
    let log = Log::open(dir, opts(RecoveryMode::TolerateTornTail)).unwrap();
    for seq in 1..=13 {
        assert_eq!(log.append(&msg(seq)).unwrap(), seq);
    }
    let bases = log.segments().iter().map(|s| s.base_seq).collect();
    log.close().unwrap();
    assert_eq!(bases, vec![1, 6, 11], "segments of 5 records");
    bases
}

fn log_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(segment::segment_file_name(base, LOG_EXTENSION))
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

fn verify(dir: &Path) -> VerifyReport {
    LogView::new(dir).verify().unwrap()
}

#[test]
fn an_intact_log_reports_every_segment_its_counts_and_its_range_and_no_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bases = setup(dir.path());
    let mut seen = Vec::new();
    let report = LogView::new(dir.path())
        .verify_each(|s| seen.push(s.base))
        .unwrap();
    assert_eq!(seen, bases, "called once per segment, in order");
    assert!(
        report.is_ok() && report.first_problem().is_none(),
        "{report:?}"
    );
    let got: Vec<_> = report
        .segments
        .iter()
        .map(|s| {
            (
                s.base,
                s.first_seq,
                s.last_seq,
                s.records,
                s.index,
                s.corrupt,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, Some(1), Some(5), 5, IndexState::Ok, false),
            (6, Some(6), Some(10), 5, IndexState::Ok, false),
            (11, Some(11), Some(13), 3, IndexState::Active, false),
        ]
    );
    let bytes: u64 = bases
        .iter()
        .map(|&b| file_len(&log_path(dir.path(), b)))
        .sum();
    assert_eq!(
        (report.records, report.bytes, report.indexes, report.range),
        (13, bytes, 4, Some((1, 13)))
    );
    assert_eq!(report.segments[2].log_path, log_path(dir.path(), 11));
    assert!(report.holes.is_empty() && report.rebuilt_at_open.is_empty());
    assert!(report.cut_at_open.is_empty());
}

#[test]
fn a_directory_without_segment_files_gives_a_report_without_segments() {
    let dir = tempfile::tempdir().unwrap();
    let report = verify(dir.path());
    assert!(report.segments.is_empty() && report.is_ok(), "{report:?}");
}

#[test]
fn a_deleted_middle_segment_is_a_gap_named_at_the_next_segment() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let (log, index, time) = (
        log_path(dir.path(), 6),
        log_path(dir.path(), 6).with_extension(INDEX_EXTENSION),
        log_path(dir.path(), 6).with_extension(segment::TIME_INDEX_EXTENSION),
    );
    for p in [log, index, time] {
        fs::remove_file(p).unwrap();
    }
    let report = verify(dir.path());
    assert_eq!(report.problems.len(), 1, "{report:?}");
    let p = &report.problems[0];
    assert_eq!((&p.path, p.position), (&log_path(dir.path(), 11), None));
    assert!(p.reason.contains("seqs 6..=10 are missing"), "{}", p.reason);
    assert_eq!(report.first_problem(), Some(p));
    let corrupt: Vec<_> = report.segments.iter().map(|s| s.corrupt).collect();
    assert_eq!(corrupt, vec![false, true]);
    assert_eq!((report.records, report.range), (8, Some((1, 13))));
}

#[test]
fn a_segment_starting_inside_the_previous_one_is_an_overlap() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    // A stray segment-named file of seq 4, inside the first segment's 1..=5, holding no batch
    // (so it bounds nothing: the first segment keeps its seqs and the seam names the overlap).
    let stray = log_path(dir.path(), 4);
    fs::write(&stray, [0xa7u8; 100]).unwrap();
    let report = verify(dir.path());
    assert_eq!(report.problems.len(), 2, "{report:?}");
    let overlap = &report.problems[0];
    assert_eq!((&overlap.path, overlap.position), (&stray, None));
    assert_eq!(
        overlap.reason,
        "seq overlap: the segment starts at seq 4 but the previous one already holds seqs up to 5"
    );
    assert_eq!(
        (&report.problems[1].path, report.problems[1].position),
        (&stray, Some(0))
    );
    assert_eq!(report.first_problem(), Some(overlap));
    let bases: Vec<_> = report
        .segments
        .iter()
        .map(|s| (s.base, s.corrupt))
        .collect();
    assert_eq!(bases, vec![(1, false), (4, true), (6, false), (11, false)]);
    // Past the stray file's damage the seqs are unknown: the seam at 6 is not a further problem.
    assert_eq!((report.records, report.range), (13, Some((1, 13))));
}

#[test]
fn a_hole_marker_over_records_the_segments_hold_is_a_problem_naming_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let qdir = dir.path().join(QUARANTINE_DIR);
    fs::create_dir(&qdir).unwrap();
    let marker = qdir.join(segment::hole_file_name(7, 8));
    fs::write(&marker, b"").unwrap();
    let report = verify(dir.path());
    assert_eq!(report.holes.len(), 1);
    assert_eq!(
        (report.holes[0].seqs(), &report.holes[0].marker),
        (7..=8, &marker)
    );
    assert_eq!(
        report.problems,
        vec![Problem {
            path: marker,
            position: None,
            reason: "the hole marker claims seqs 7..=8 are missing, but segment files hold some \
                     of them"
                .to_owned(),
        }]
    );
}

#[test]
fn segment_files_that_end_below_the_recovery_point_have_lost_records() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    // An emptied active segment: nothing in it is damaged, but seqs 11..=13 were synced.
    fs::write(log_path(dir.path(), 11), b"").unwrap();
    let report = verify(dir.path());
    assert_eq!(report.problems.len(), 1, "{report:?}");
    let p = &report.problems[0];
    assert_eq!((&p.path, p.position), (&log_path(dir.path(), 11), None));
    assert!(
        p.reason.contains("the segment files end at seq 10")
            && p.reason.contains("records 11..=13 are missing"),
        "{}",
        p.reason
    );
    assert_eq!(report.range, Some((1, 10)));
    assert!(report.cut_at_open.is_empty());
}

#[test]
fn a_torn_tail_above_the_recovery_point_is_cut_at_open_and_below_it_is_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let active = log_path(dir.path(), 11);
    let intact = fs::read(&active).unwrap();
    let mut torn = intact.clone();
    torn.extend_from_slice(&intact[..20]);
    fs::write(&active, &torn).unwrap();
    let report = verify(dir.path());
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.cut_at_open.len(), 1);
    let cut = &report.cut_at_open[0];
    assert_eq!(
        (&cut.path, cut.position),
        (&active, Some(intact.len() as u64))
    );
    assert_eq!(report.segments[2].records, 3);
    assert!(!report.segments[2].corrupt);
    // Cut into the synced records instead: not a torn write but damage, at its byte.
    testkit::set_len(&active, intact.len() as u64 - 1).unwrap();
    let report = verify(dir.path());
    assert!(report.cut_at_open.is_empty(), "{report:?}");
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert_eq!(report.problems[0].path, active);
    assert!(report.problems[0].position.is_some());
    assert!(report.segments[2].corrupt);
}

#[test]
fn a_missing_index_of_a_closed_segment_is_rebuilt_at_open_not_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let index = log_path(dir.path(), 1).with_extension(INDEX_EXTENSION);
    fs::remove_file(&index).unwrap();
    let report = verify(dir.path());
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.rebuilt_at_open.len(), 1);
    assert_eq!(report.rebuilt_at_open[0].path, index);
    assert_eq!(report.segments[0].index, IndexState::RebuiltAtOpen);
    assert_eq!(report.indexes, 4);
}

#[test]
fn the_first_problem_named_is_one_of_the_records_before_one_of_an_index() {
    let problem = |path: &str| Problem {
        path: PathBuf::from(path),
        position: Some(3),
        reason: "bad".to_owned(),
    };
    let report = VerifyReport {
        problems: vec![
            problem("d/00000000000000000001.index"),
            problem("d/00000000000000000006.log"),
        ],
        ..VerifyReport::default()
    };
    assert_eq!(
        report.first_problem().map(|p| &p.path),
        Some(&PathBuf::from("d/00000000000000000006.log"))
    );
    assert_eq!(
        report.problems[1].to_string(),
        "d/00000000000000000006.log at byte 3: bad"
    );
    let only_index = VerifyReport {
        problems: vec![problem("d/00000000000000000001.index")],
        ..VerifyReport::default()
    };
    assert_eq!(only_index.first_problem(), only_index.problems.first());
}

#[test]
fn a_preview_plans_the_damaged_file_and_lists_the_seams_apart_and_the_repair_then_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let view = LogView::new(dir.path());
    assert!(view.preview_repair().unwrap().is_empty());
    // A flipped byte in the middle of the first segment and the second segment deleted.
    testkit::xor_byte(&log_path(dir.path(), 1), 100, 0x5a).unwrap();
    for ext in [
        LOG_EXTENSION,
        INDEX_EXTENSION,
        segment::TIME_INDEX_EXTENSION,
    ] {
        fs::remove_file(dir.path().join(segment::segment_file_name(6, ext))).unwrap();
    }
    let preview = view.preview_repair().unwrap();
    assert_eq!(preview.plans.len(), 1, "{preview:?}");
    let plan = &preview.plans[0];
    assert_eq!(plan.path, log_path(dir.path(), 1));
    assert!(
        preview.others.is_empty(),
        "past damage the seam is unknown: {preview:?}"
    );
    let keeps: Vec<_> = plan
        .steps
        .iter()
        .filter_map(|s| match *s {
            krabka_storage::RepairStep::Keep { first_seq, .. } => Some(plan.kept_path(first_seq)),
            _ => None,
        })
        .collect();
    assert!(
        keeps
            .iter()
            .all(|p| p.parent() == Some(dir.path()) && p != &plan.path),
        "{keeps:?}"
    );
    assert!(plan.steps.iter().all(|s| s.hole_only().is_none()));

    let log = Log::open(dir.path(), opts(RecoveryMode::Repair)).unwrap();
    let report = log.recovery_report().clone();
    assert!(report.pieces_moved() >= 1, "{report:?}");
    assert_eq!(
        report.bytes_moved(),
        report.quarantined.iter().map(|q| q.bytes).sum::<u64>()
    );
    assert!(report.bytes_moved() > 0);
    assert_eq!(
        report.holes_recorded(),
        1,
        "the deleted segment's seqs: {report:?}"
    );
    let recorded = report
        .quarantined
        .iter()
        .find(|q| q.is_hole_only())
        .unwrap();
    assert_eq!(recorded.seqs, Some((6, 10)));
    assert_eq!(
        report.records_kept(),
        report
            .kept
            .iter()
            .map(|k| k.last_seq - k.first_seq + 1)
            .sum::<u64>()
    );
    assert_eq!(log.span(), Some((1, 13)));
    let unaccepted: Vec<_> = log.unaccepted_holes().iter().map(|h| h.seqs()).collect();
    assert!(unaccepted.contains(&(6..=10)), "{unaccepted:?}");
    log.accept_holes(6..=10).unwrap();
    assert!(
        !log.unaccepted_holes().iter().any(|h| h.seqs() == (6..=10)),
        "accepted"
    );
    log.close().unwrap();
}

#[test]
fn an_empty_log_spans_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(RecoveryMode::TolerateTornTail)).unwrap();
    assert_eq!(log.span(), None);
    assert!(log.unaccepted_holes().is_empty());
    log.close().unwrap();
}
