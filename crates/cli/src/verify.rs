//! `krabka verify`: check every segment and index of a log directory without opening (and so
//! without recovering or changing) the log.
//!
//! What the next open of the log repairs by itself is not damage, and is reported as such
//! (exit 0): a closed segment's index files that are missing or do not describe its intact
//! `.log` (what a crash during local retention, which deletes the index files first, leaves)
//! are rebuilt from the `.log`; see [`LogView::indexes_rebuilt_at_open`]; and the active
//! segment's torn tail (a write a crash cut short, with nothing valid after it and above the
//! recovery point) is cut, its bytes saved in `quarantine/` first; see
//! [`LogView::tail_cut_at_open`]. A log that starts
//! above seq 1 after `recover` (or local retention) is not short: its older records are in the
//! remote tier. Everything is read through storage's read-only [`LogView`].

use std::io::Write;
use std::path::{Path, PathBuf};

use krabka_storage::segment::{self, INDEX_EXTENSION, LOG_EXTENSION, TIME_INDEX_EXTENSION};
use krabka_storage::view::LogView;
use krabka_storage::{Hole, holes_cover};

use crate::args::VerifyArgs;
use crate::error::{CliError, Result};
use crate::inspect::VERIFY_HINT;
use crate::reader::view_error;
use crate::{human, output, progress};

/// One finding of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file with the problem.
    pub path: PathBuf,
    /// Byte position in that file (`None` when the problem is the file's absence or a
    /// disagreement between files).
    pub position: Option<u64>,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.position {
            Some(p) => write!(f, "{} at byte {p}: {}", self.path.display(), self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// What [`verify`] checked and found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segments checked.
    pub segments: u64,
    /// Valid records found.
    pub records: u64,
    /// Bytes of `.log` files checked.
    pub bytes: u64,
    /// Index files checked.
    pub indexes: u64,
    /// First and last seq of the valid records.
    pub range: Option<(u64, u64)>,
    /// Everything found wrong.
    pub problems: Vec<Problem>,
    /// Seqs a repair moved aside (explicit holes; not problems).
    pub holes: Vec<Hole>,
    /// Index files the next open of the log rebuilds from their intact `.log` by itself
    /// (missing, or not describing it): not problems.
    pub rebuilt_at_open: Vec<Problem>,
    /// The active segment's torn tail, which the next open cuts by itself (saving the bytes
    /// in `quarantine/` first): not a problem.
    pub cut_at_open: Vec<Problem>,
}

/// What `verify` says about a torn tail the next open cuts.
pub const CUT_AT_OPEN: &str = "a torn tail (a write cut short by a crash; nothing valid follows      and no synced record is at stake): the next open of the log cuts it by itself, saving      the bytes in quarantine/ first; no acknowledged record is lost";

/// What `verify` says about an index file the next open rebuilds.
pub const REBUILT_AT_OPEN: &str = "will be rebuilt at the next open of the log from its intact \
     .log (after a clean close, when the segment is first read); nothing is lost";

/// Checks every segment and index of the log at `dir`, printing one line per segment to
/// `out` (or only problems when `quiet`).
///
/// Checks: every record batch's length, CRC, records and seqs (contiguous, starting at the
/// file's base seq); that every closed segment has a `.index` and `.timeindex` whose every
/// entry points at the batch of its seq in the `.log`
/// ([`verify_segment_in_log`](segment::verify_segment_in_log), which also finds bytes past a
/// closed segment's end, where the next segment starts); that no closed segment is empty;
/// that segments follow each other without a gap or an overlap, unless a repair recorded the
/// gap as a hole (listed, not a problem). Index files the next open rebuilds by itself are
/// listed in [`VerifyReport::rebuilt_at_open`], not as problems.
///
/// # Errors
/// When the directory cannot be read or a file cannot be opened. Corruption is not an error
/// here: it is in [`VerifyReport::problems`].
pub fn verify(dir: &Path, quiet: bool, out: &mut impl Write) -> Result<VerifyReport> {
    let view = LogView::new(dir);
    let bases = view.segment_bases().map_err(|e| view_error(dir, e))?;
    if bases.is_empty() {
        return Err(
            CliError::new(format!("no segment files (*.log) in {}", dir.display()))
                .hint("pass the directory of a krabka log"),
        );
    }
    let holes = view.holes().map_err(|e| view_error(dir, e))?;
    let total: u64 = bases
        .iter()
        .filter_map(|b| std::fs::metadata(segment_path(dir, *b, LOG_EXTENSION)).ok())
        .map(|m| m.len())
        .sum();
    let bar = progress::bytes_bar("verify", total);
    let w = |e: std::io::Error| output::write_error(&e);
    let mut walk = Walk {
        view: &view,
        dir,
        holes: &holes,
        report: VerifyReport::default(),
        expected_next: None,
        held: Vec::new(),
    };
    for (i, &base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied();
        let line = walk.segment(base, next_base, quiet, &bar)?;
        if let Some(line) = line {
            bar.suspend(|| writeln!(out, "{line}")).map_err(w)?;
        }
    }
    bar.finish_and_clear();
    let Walk {
        mut report, held, ..
    } = walk;
    check_hole_markers(&holes, &held, &mut report);
    check_recovery_point(&view, &bases, &holes, &mut report);
    if let Some(line) = below_local_start(dir, &bases) {
        writeln!(out, "{line}").map_err(w)?;
    }
    for h in &holes {
        let accepted = h.accepted_at_ms.map_or_else(String::new, |at| {
            format!(
                " (accepted hole seq {}..={}, accepted {}: tiering goes on past it)",
                h.first_seq,
                h.last_seq,
                crate::inspect::timestamp(at)
            )
        });
        writeln!(
            out,
            "hole    seq {}..={} moved aside by a repair: {}{accepted}",
            h.first_seq,
            h.last_seq,
            h.marker.display()
        )
        .map_err(w)?;
    }
    report.holes = holes;
    for p in &report.rebuilt_at_open {
        writeln!(out, "note: {p}: {REBUILT_AT_OPEN}").map_err(w)?;
    }
    for p in &report.cut_at_open {
        writeln!(out, "note: {p}: {CUT_AT_OPEN}").map_err(w)?;
    }
    for p in &report.problems {
        writeln!(out, "problem: {p}").map_err(w)?;
    }
    Ok(report)
}

/// The path of the segment file of `base` with `suffix` in `dir`.
fn segment_path(dir: &Path, base: u64, suffix: &str) -> PathBuf {
    dir.join(segment::segment_file_name(base, suffix))
}

/// What [`verify`] carries from one segment to the next.
struct Walk<'a> {
    view: &'a LogView,
    dir: &'a Path,
    holes: &'a [Hole],
    report: VerifyReport,
    /// The seq the next segment must start at; `None` when unknown (past damage).
    expected_next: Option<u64>,
    /// `(first, last)` seqs each segment file holds.
    held: Vec<(u64, u64)>,
}

impl Walk<'_> {
    fn problem(&mut self, path: &Path, position: Option<u64>, reason: String) {
        self.report.problems.push(Problem {
            path: path.to_path_buf(),
            position,
            reason,
        });
    }

    /// Checks the segment of `base` (the active one when no segment follows it, at
    /// `next_base`) and returns its line, unless `quiet` and it has no problem.
    fn segment(
        &mut self,
        base: u64,
        next_base: Option<u64>,
        quiet: bool,
        bar: &indicatif::ProgressBar,
    ) -> Result<Option<String>> {
        let newest = next_base.is_none();
        let log_path = segment_path(self.dir, base, LOG_EXTENSION);
        let (index_path, time_path) = (
            segment_path(self.dir, base, INDEX_EXTENSION),
            segment_path(self.dir, base, TIME_INDEX_EXTENSION),
        );
        // A closed segment ends where the next one starts: bytes past that (a batch of the next
        // segment's seqs appended to it) are its problem, not an overlap of the next one.
        let v = if newest {
            segment::verify_segment_in_log(&log_path, None, None, None)
        } else {
            segment::verify_segment_in_log(
                &log_path,
                Some(&index_path),
                Some(&time_path),
                next_base,
            )
        }
        .map_err(|e| match e {
            krabka_storage::Error::OldFormat { path } => {
                crate::reader::old_format(self.dir, &path, "verify")
            }
            e => CliError::new(e.to_string()).hint("check the file's permissions"),
        })?;
        bar.inc(v.file_bytes);
        self.report.segments += 1;
        self.report.records += v.records;
        self.report.bytes += v.file_bytes;
        let before = self.report.problems.len();
        self.seam(base, &log_path);
        let empty_closed = !newest && v.file_bytes == 0;
        if empty_closed {
            self.problem(
                &log_path,
                Some(0),
                format!(
                    "closed segment is empty (0 bytes): the seqs from {base} up to the next \
                     segment's start are missing"
                ),
            );
        }
        let log_problem = v.problem_path.as_deref().is_none_or(|p| p == log_path);
        // An index problem over an intact, non-empty closed `.log` that open rebuilds by itself.
        let rebuilt = !newest
            && !empty_closed
            && !log_problem
            && v.problem.is_some()
            && self.view.indexes_rebuilt_at_open(base, v.file_bytes);
        // A torn tail of the active segment that open cuts by itself.
        let last_intact = v.last_seq.unwrap_or(base.saturating_sub(1));
        let cut = match &v.problem {
            Some(p) if newest && log_problem && v.file_bytes > 0 => self
                .view
                .tail_cut_at_open(base, p.position, last_intact)
                .map_err(|e| CliError::new(e.to_string()))?,
            _ => false,
        };
        if let Some(p) = &v.problem {
            let path = v.problem_path.clone().unwrap_or_else(|| log_path.clone());
            if cut {
                self.report.cut_at_open.push(Problem {
                    path,
                    position: Some(p.position),
                    reason: p.reason.clone(),
                });
            } else if rebuilt {
                self.report.rebuilt_at_open.push(Problem {
                    path,
                    position: Some(p.position).filter(|&at| at > 0),
                    reason: p.reason.clone(),
                });
            } else if !(empty_closed && log_problem) {
                self.problem(&path, Some(p.position), p.reason.clone());
            }
        }
        // Past a bad batch the seqs of the rest of the file are unknown, and an empty closed
        // segment was reported itself: do not report the next seam as a further problem.
        let last = v.last_seq.unwrap_or(base.saturating_sub(1));
        let records_unknown = empty_closed || (v.problem.is_some() && log_problem && !cut);
        self.expected_next = (!records_unknown).then(|| last.saturating_add(1));
        if let (Some(a), Some(b)) = (v.first_seq, v.last_seq) {
            self.held.push((a, b));
        }
        if let Some(first) = v.first_seq {
            self.report.range = Some(match self.report.range {
                Some((lo, _)) => (lo, last),
                None => (first, last),
            });
        }
        let index_state = if newest {
            "active (indexes written at roll)"
        } else {
            self.report.indexes += 2;
            if rebuilt {
                "index rebuilt at the next open"
            } else if v.problem.is_some() && !log_problem {
                "index problem"
            } else {
                "index ok, timeindex ok"
            }
        };
        let corrupt = self.report.problems.len() > before;
        Ok((!quiet || corrupt).then(|| segment_line(&log_path, &v, corrupt, index_state)))
    }

    /// Checks that the segment of `base` starts where the previous one ended, unless a repair
    /// recorded the gap as a hole.
    fn seam(&mut self, base: u64, log_path: &Path) {
        let Some(next) = self.expected_next else {
            return;
        };
        if base > next {
            if !holes_cover(self.holes, next, base - 1) {
                self.problem(
                    log_path,
                    None,
                    format!(
                        "seqs {next}..={} are missing: the segment starts at seq {base} but the \
                         previous one ends at seq {}",
                        base - 1,
                        next.saturating_sub(1)
                    ),
                );
            }
        } else if base < next {
            self.problem(
                log_path,
                None,
                format!(
                    "seq overlap: the segment starts at seq {base} but the previous one already \
                     holds seqs up to {}",
                    next.saturating_sub(1)
                ),
            );
        }
    }
}

/// The line `verify` prints for a segment.
fn segment_line(
    log_path: &Path,
    v: &segment::SegmentVerification,
    corrupt: bool,
    index_state: &str,
) -> String {
    let status = if corrupt { "CORRUPT" } else { "ok" };
    let seqs = match (v.first_seq, v.last_seq) {
        (Some(a), Some(b)) => format!("seq {a}..={b}"),
        _ => "empty".to_owned(),
    };
    format!(
        "{status:<7} {}  {seqs} ({} records, {})  {index_state}",
        log_path.display(),
        human::count(v.records),
        human::bytes(v.file_bytes),
    )
}

/// The line saying where the seqs below the first local segment are, for a tiered log whose
/// local files start above seq 1 (after `recover`, or local retention): they are not missing.
fn below_local_start(dir: &Path, bases: &[u64]) -> Option<String> {
    let first = *bases.first()?;
    let tiered = dir.join(krabka_tiering::partition::METADATA_DIR).is_dir();
    (first > 1 && tiered).then(|| {
        format!(
            "remote  seq 1..={} are not in the local files: this is a tiered log ({} records its \
             remote segments), whose older records are in its remote tier or were deleted by \
             retention; verify checks the local files only (`krabka read {} --remote ...` reads \
             both tiers)",
            first - 1,
            dir.join(krabka_tiering::partition::METADATA_DIR).display(),
            dir.display()
        )
    })
}

/// A hole marker over records the segment files hold contradicts them (open refuses it).
fn check_hole_markers(holes: &[Hole], held: &[(u64, u64)], report: &mut VerifyReport) {
    for h in holes {
        if held
            .iter()
            .any(|&(a, b)| a <= h.last_seq && h.first_seq <= b)
        {
            report.problems.push(Problem {
                path: h.marker.clone(),
                position: None,
                reason: format!(
                    "the hole marker claims seqs {}..={} are missing, but segment files hold some of them",
                    h.first_seq, h.last_seq
                ),
            });
        }
    }
}

/// Segment files that end below the recovery point have lost records.
fn check_recovery_point(view: &LogView, bases: &[u64], holes: &[Hole], report: &mut VerifyReport) {
    let dir = view.dir();
    match view.recovery_point() {
        Ok(Some(point)) => {
            // As open counts it: the seq before the next one, which an empty active segment
            // (a recovered log, or one that just rolled) gives by its base.
            let before_newest = bases.last().map_or(0, |b| b.saturating_sub(1));
            let last = report.range.map_or(0, |(_, last)| last).max(before_newest);
            let newest = bases.last().map(|b| segment_path(dir, *b, LOG_EXTENSION));
            if report.problems.is_empty() && last < point && !holes_cover(holes, last + 1, point) {
                report.problems.push(Problem {
                    path: newest.unwrap_or_else(|| dir.to_path_buf()),
                    position: None,
                    reason: format!(
                        "the segment files end at seq {last}, but the log held every seq up to {point} when it was last closed ({}): records {}..={point} are missing",
                        krabka_storage::RECOVERY_POINT_FILE_NAME,
                        last + 1
                    ),
                });
            }
        }
        Ok(None) => {}
        Err(e) => report.problems.push(Problem {
            path: dir.join(krabka_storage::RECOVERY_POINT_FILE_NAME),
            position: None,
            reason: e.to_string(),
        }),
    }
}

/// Runs `krabka verify`: a line per segment (unless `--quiet`), then the summary line.
///
/// # Errors
/// The first problem found (one naming the records before one naming an index), with the
/// count of the others, or a failed write to stdout.
pub fn run(a: &VerifyArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let report = verify(&a.dir, a.quiet, &mut out)?;
    let range = report.range.map_or_else(
        || "no records".to_owned(),
        |(a, b)| format!("seq {a}..={b}"),
    );
    let mut summary = format!(
        "{} segments, {} indexes, {} records ({range}), {}",
        human::count(report.segments),
        report.indexes,
        human::count(report.records),
        human::bytes(report.bytes)
    );
    if !report.holes.is_empty() {
        let holes: Vec<String> = report
            .holes
            .iter()
            .map(|h| format!("{}..={}", h.first_seq, h.last_seq))
            .collect();
        summary.push_str(&format!(
            ", {} hole(s) left by a repair (seq {})",
            holes.len(),
            holes.join(", ")
        ));
    }
    // The line names a problem of the records (a bad batch, a gap) before one of an
    // index, which is derived data.
    let in_log = |p: &&Problem| {
        p.path
            .extension()
            .is_some_and(|e| e == krabka_storage::segment::LOG_EXTENSION)
    };
    let first = report
        .problems
        .iter()
        .find(in_log)
        .or(report.problems.first());
    if !report.cut_at_open.is_empty() {
        summary.push_str(", a torn tail to be cut at the next open (listed above; not damage)");
    }
    if !report.rebuilt_at_open.is_empty() {
        summary.push_str(&format!(
            ", {} index file(s) to be rebuilt at the next open (listed above; not damage)",
            report.rebuilt_at_open.len()
        ));
    }
    match first {
        None => output::outln!("verify: OK: {summary}"),
        Some(first) => Err(CliError::new(format!(
            "{} problem(s) in {}: {first}{}",
            report.problems.len(),
            a.dir.display(),
            match report.problems.len() {
                1 => String::new(),
                n => format!(" (and {} more, listed above)", n - 1),
            }
        ))
        .hint(VERIFY_HINT)),
    }
}
