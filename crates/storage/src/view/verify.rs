//! [`LogView::verify`]: every check a `verify` of a log directory makes, without opening (and so
//! without recovering or changing) the log, and what it found, for a tool to print.

use std::path::{Path, PathBuf};

use super::LogView;
use crate::segment::{self, LOG_EXTENSION, SegmentVerification};
use crate::{Error, Hole, RECOVERY_POINT_FILE_NAME, holes_cover};

/// One thing [`LogView::verify`] found wrong (or, in [`VerifyReport::rebuilt_at_open`] and
/// [`VerifyReport::cut_at_open`], found that the next open repairs by itself).
///
/// Its `Display` is `PATH at byte N: REASON` (or `PATH: REASON` without a position).
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

impl Problem {
    /// Whether the problem is in a segment's `.log` file (the records), not in an index file or
    /// another file of the directory.
    pub fn is_in_records(&self) -> bool {
        self.path.extension().is_some_and(|e| e == LOG_EXTENSION)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.position {
            Some(p) => write!(f, "{} at byte {p}: {}", self.path.display(), self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// What [`LogView::verify`] says about a segment's index files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexState {
    /// The active (newest) segment: its index files are written when it rolls, and not checked.
    Active,
    /// Both index files describe the segment's `.log`.
    Ok,
    /// The index files are missing or do not describe the intact `.log`: the next open of the
    /// log rebuilds them by itself (listed in [`VerifyReport::rebuilt_at_open`]).
    RebuiltAtOpen,
    /// An index file is wrong in a way the next open does not repair (a problem).
    Damaged,
}

/// What [`LogView::verify`] found in one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentCheck {
    /// The segment's base seq.
    pub base: u64,
    /// Its `.log` file.
    pub log_path: PathBuf,
    /// Seq of its first valid record.
    pub first_seq: Option<u64>,
    /// Seq of its last valid record (before the first problem).
    pub last_seq: Option<u64>,
    /// Valid records.
    pub records: u64,
    /// Size of the `.log` file; for the newest segment without a problem, the bytes of its
    /// batches (the zeros of its preallocated space after them left out).
    pub bytes: u64,
    /// Its index files.
    pub index: IndexState,
    /// Whether any problem (in [`VerifyReport::problems`]) was found in this segment or at its
    /// seam with the previous one.
    pub corrupt: bool,
}

/// What [`LogView::verify`] checked and found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every segment checked, by base seq.
    pub segments: Vec<SegmentCheck>,
    /// Valid records found.
    pub records: u64,
    /// Bytes of `.log` files checked.
    pub bytes: u64,
    /// Index files checked (two per closed segment).
    pub indexes: u64,
    /// First and last seq of the valid records.
    pub range: Option<(u64, u64)>,
    /// Everything found wrong, in the order found.
    pub problems: Vec<Problem>,
    /// Seqs a repair moved aside (explicit holes, with their acceptance; not problems).
    pub holes: Vec<Hole>,
    /// Index files the next open of the log rebuilds from their intact `.log` by itself
    /// (missing, or not describing it): not problems.
    pub rebuilt_at_open: Vec<Problem>,
    /// The active segment's torn tail, which the next open cuts by itself (saving the bytes
    /// in the quarantine directory first): not a problem.
    pub cut_at_open: Vec<Problem>,
}

impl VerifyReport {
    /// Whether nothing is wrong (what the next open repairs by itself is not wrong).
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problem to name first: the first one of the records (a bad batch, a gap, an
    /// overlap) before any of an index, which is derived data; else the first found.
    pub fn first_problem(&self) -> Option<&Problem> {
        self.problems
            .iter()
            .find(|p| p.is_in_records())
            .or(self.problems.first())
    }
}

impl LogView {
    /// Checks every segment and index file of the log directory, by the rules
    /// [`Log::open`](crate::Log::open) applies, without changing anything.
    ///
    /// Checks: every record batch's length, CRC, records and seqs (contiguous, starting at the
    /// file's base seq); that every closed segment has a `.index` and `.timeindex` whose every
    /// entry points at the batch of its seq in the `.log`
    /// ([`verify_segment_in_log`](segment::verify_segment_in_log), which also finds bytes past
    /// a closed segment's end, where the next segment starts); that no closed segment is empty;
    /// that segments follow each other without a gap (unless a repair recorded it as a hole,
    /// listed in [`VerifyReport::holes`]) or an overlap; that no hole marker claims seqs a
    /// segment file holds; that the segment files reach the recovery point (unless holes cover
    /// the rest). Past a bad batch the seqs of the rest of its file are unknown: the next seam
    /// is then not checked. What the next open repairs by itself is listed apart, not as a
    /// problem: index files it rebuilds ([`indexes_rebuilt_at_open`](Self::indexes_rebuilt_at_open))
    /// and a torn tail it cuts ([`tail_cut_at_open`](Self::tail_cut_at_open)). A directory
    /// without segment files gives a report without segments (and reads nothing else).
    ///
    /// # Errors
    /// [`Error::Io`] when the directory cannot be listed or a file cannot be read;
    /// [`Error::OldFormat`] naming a segment in krabka's old per-record format; as
    /// [`holes`](Self::holes). Corruption is not an error: it is in [`VerifyReport::problems`],
    /// and so is a recovery-point file that cannot be read.
    pub fn verify(&self) -> Result<VerifyReport, Error> {
        self.verify_each(|_| {})
    }

    /// [`verify`](Self::verify), calling `on_segment` with each segment's check as soon as it is
    /// made (to print it, or to move a progress bar).
    ///
    /// # Errors
    /// As [`verify`](Self::verify).
    pub fn verify_each(
        &self,
        mut on_segment: impl FnMut(&SegmentCheck),
    ) -> Result<VerifyReport, Error> {
        let bases = self.segment_bases()?;
        if bases.is_empty() {
            return Ok(VerifyReport::default());
        }
        let holes = self.holes()?;
        let mut walk = Walk {
            view: self,
            holes: &holes,
            report: VerifyReport::default(),
            expected_next: None,
            held: Vec::new(),
        };
        for (i, &base) in bases.iter().enumerate() {
            let check = walk.segment(base, bases.get(i + 1).copied())?;
            on_segment(&check);
            walk.report.segments.push(check);
        }
        let Walk {
            mut report, held, ..
        } = walk;
        check_hole_markers(&holes, &held, &mut report);
        check_recovery_point(self, &bases, &holes, &mut report);
        report.holes = holes;
        Ok(report)
    }
}

/// What [`LogView::verify_each`] carries from one segment to the next.
struct Walk<'a> {
    view: &'a LogView,
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
    /// `next_base`).
    fn segment(&mut self, base: u64, next_base: Option<u64>) -> Result<SegmentCheck, Error> {
        let newest = next_base.is_none();
        let (log_path, index_path, time_path) = segment::segment_paths(self.view.dir(), base);
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
        }?;
        self.report.records += v.records;
        // The newest segment's preallocated zeros after its last batch are no part of it.
        let bytes = if newest && v.problem.is_none() {
            v.valid_bytes
        } else {
            v.file_bytes
        };
        self.report.bytes += bytes;
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
        let last = v.last_seq.unwrap_or(base.saturating_sub(1));
        let cut = match &v.problem {
            Some(p) if newest && log_problem && v.file_bytes > 0 => {
                self.view.tail_cut_at_open(base, p.position, last)?
            }
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
        let index = if newest {
            IndexState::Active
        } else {
            self.report.indexes += 2;
            if rebuilt {
                IndexState::RebuiltAtOpen
            } else if v.problem.is_some() && !log_problem {
                IndexState::Damaged
            } else {
                IndexState::Ok
            }
        };
        Ok(check(
            base,
            log_path,
            (&v, bytes),
            index,
            self.report.problems.len() > before,
        ))
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

/// The [`SegmentCheck`] of the segment `base` from its verification `v`.
fn check(
    base: u64,
    log_path: PathBuf,
    (v, bytes): (&SegmentVerification, u64),
    index: IndexState,
    corrupt: bool,
) -> SegmentCheck {
    SegmentCheck {
        base,
        log_path,
        first_seq: v.first_seq,
        last_seq: v.last_seq,
        records: v.records,
        bytes,
        index,
        corrupt,
    }
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

/// Segment files that end below the recovery point have lost records (unless holes cover
/// them); checked only when nothing else was found, since damage already explains a short log.
fn check_recovery_point(view: &LogView, bases: &[u64], holes: &[Hole], report: &mut VerifyReport) {
    let dir = view.dir();
    match view.recovery_point() {
        Ok(Some(point)) => {
            // As open counts it: the seq before the next one, which an empty active segment
            // (a recovered log, or one that just rolled) gives by its base.
            let before_newest = bases.last().map_or(0, |b| b.saturating_sub(1));
            let last = report.range.map_or(0, |(_, last)| last).max(before_newest);
            let newest = bases.last().map(|b| view.log_path(*b));
            if report.problems.is_empty() && last < point && !holes_cover(holes, last + 1, point) {
                report.problems.push(Problem {
                    path: newest.unwrap_or_else(|| dir.to_path_buf()),
                    position: None,
                    reason: format!(
                        "the segment files end at seq {last}, but the log held every seq up to {point} when it was last closed ({RECOVERY_POINT_FILE_NAME}): records {}..={point} are missing",
                        last + 1
                    ),
                });
            }
        }
        Ok(None) => {}
        Err(e) => report.problems.push(Problem {
            path: dir.join(RECOVERY_POINT_FILE_NAME),
            position: None,
            reason: e.to_string(),
        }),
    }
}
