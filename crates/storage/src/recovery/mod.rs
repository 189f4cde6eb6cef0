//! Recovery on [`Log::open`](crate::Log::open): list the directory, load or scan every segment,
//! check that seqs are contiguous, and deal with damage as [`RecoveryMode`] says.
//!
//! The rules (invariants I1 and I3 of `docs/ARCHITECTURE.md`):
//! - a byte leaves a segment file only after it was copied into the quarantine directory and
//!   synced there;
//! - a torn tail (damage in the active segment that no valid batch follows) is the only damage
//!   cut by default; anything else fails the open naming the file, the byte and the seqs at
//!   stake, unless the user asked for [`RecoveryMode::Repair`];
//! - seqs are contiguous across segment files, except across an explicit hole that a repair
//!   recorded with a marker file; appends never reuse a seq below or inside a hole.
//!
//! The steps, in order: finish a repair's interrupted split ([`split`]), check the record of
//! accepted holes ([`accepted`]), read the recovery point ([`recovery_point`]), list the
//! directory ([`listing`]), fit each segment after the previous one ([`holes`] between them,
//! gaps and overlaps), load or scan it and deal with damage ([`load`], moving bytes aside
//! through [`quarantine`]; under a repair keeping the intact batches after damage: [`resync`]),
//! check the end against the recovery point and the hole markers, and only then write what was
//! deferred. What it did goes into the [`report`].

mod accepted;
mod holes;
mod listing;
mod load;
mod quarantine;
mod recovery_point;
mod report;
mod resync;
mod split;
mod trusted;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use self::report::{QuarantinedPiece, RecoveryReport, TruncatedTail};
pub use self::resync::{KeptRun, RepairStep, SegmentRepair, plan_segment_repair};
use crate::fsutil::{self, IoResultExt};
use crate::index::IndexBuilder;
use crate::layout::clean::{Marker, read_clean_shutdown};
use crate::layout::index_files::plain_fsync;
use crate::layout::{Seg, seg_file, write_indexes};
use crate::segment::segment_paths;
use crate::{Error, Hole, Options, RecoveryMode, SyncPolicy};

/// The largest seq a log accepts (Kafka's offsets are `i64`; this leaves room so that seq
/// arithmetic never overflows). Segment files and hole markers beyond it are damage.
pub(crate) const MAX_SEQ: u64 = i64::MAX as u64;

/// What recovery hands to the log: its segments (the last one active and open) and the index
/// builder of the active segment.
pub(crate) struct Recovered {
    pub(crate) segs: Vec<Seg>,
    pub(crate) active_builder: Option<IndexBuilder>,
    pub(crate) report: RecoveryReport,
    /// Whether the active segment was loaded from the clean-shutdown marker, which stays on
    /// disk until the log first writes.
    pub(crate) clean_marker: bool,
}

/// The hole markers not placed yet, in seq order.
type Holes = std::iter::Peekable<std::vec::IntoIter<Hole>>;

struct Recoverer<'a> {
    dir: &'a Path,
    opts: &'a Options,
    report: RecoveryReport,
    segs: Vec<Seg>,
    /// Whether the quarantine directory exists and its parent entry is synced.
    quarantine_ready: bool,
    /// The recovery point: every seq up to it was synced (0 when unknown).
    point: u64,
    /// The clean-shutdown marker found in the directory.
    marker: Marker,
    /// Directories named like segment files.
    bad_entries: Vec<PathBuf>,
    /// Segments (by position in `segs`) whose index files are written once open succeeds.
    index_writes: Vec<usize>,
}

/// Runs recovery on `dir` (already locked).
pub(crate) fn recover(dir: &Path, opts: &Options) -> Result<Recovered, Error> {
    let mut r = Recoverer {
        dir,
        opts,
        report: RecoveryReport::default(),
        segs: Vec::new(),
        quarantine_ready: false,
        point: 0,
        marker: Marker::Absent,
        bad_entries: Vec::new(),
        index_writes: Vec::new(),
    };
    // A repair interrupted in the middle of a split is finished (or undone) before anything
    // else looks at the files.
    r.finish_interrupted_split()?;
    r.check_accepted_holes()?;
    r.point = r.read_point()?;
    r.marker = read_clean_shutdown(dir);
    if let Some(recovered) = r.trust_unchanged_dir()? {
        return Ok(recovered);
    }
    let listing = r.list()?;
    r.move_bad_entries()?;
    let all_holes = listing.holes.clone();
    let mut holes = listing.holes.into_iter().peekable();
    let mut bases = listing.bases;
    // Absurd base seqs first, before anything is changed.
    r.drop_absurd_bases(&mut bases)?;
    if let Some(recovered) = r.trust_marker(&bases, &all_holes, true)? {
        return Ok(recovered);
    }
    let mut active_builder = None;
    for (i, &base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied();
        if !r.place(base, next_base, &mut holes)? {
            continue;
        }
        if let Some(builder) = r.load(base, next_base)? {
            active_builder = Some(builder);
        }
    }
    r.take_trailing_holes(&mut holes, &mut active_builder);
    r.check_recovery_point(&mut active_builder)?;
    r.check_hole_markers(&all_holes)?;
    r.finish(active_builder)
}

/// Creates (or opens) the empty active segment `base` and syncs the directory.
pub(crate) fn new_active(dir: &Path, base: u64) -> Result<Seg, Error> {
    let (log_path, _, _) = segment_paths(dir, base);
    let file = fsutil::open_rw(&log_path, true).at(&log_path)?;
    fsutil::fsync_dir(dir).at(dir)?;
    Ok(Seg::empty_active(base, seg_file(dir, base), Arc::new(file)))
}

fn sync_files(opts: &Options) -> bool {
    opts.sync != SyncPolicy::Never
}

impl Recoverer<'_> {
    /// The seq after the last segment or hole so far.
    fn next_seq(&self) -> Option<u64> {
        self.segs.last().map(|s| s.last_seq + 1)
    }

    fn last_path(&self) -> PathBuf {
        self.segs.last().map_or_else(
            || self.dir.to_path_buf(),
            |s| s.hole.clone().unwrap_or_else(|| s.file.log_path.clone()),
        )
    }

    fn repair(&self) -> bool {
        self.opts.recovery == RecoveryMode::Repair
    }

    /// Directories named like segment files: damage, moved aside by a repair.
    fn move_bad_entries(&mut self) -> Result<(), Error> {
        for path in std::mem::take(&mut self.bad_entries) {
            if !self.repair() {
                return Err(Error::Corrupt {
                    path,
                    position: 0,
                    reason: "a directory is named like a segment file".into(),
                });
            }
            self.move_path_aside(&path, "a directory named like a segment file")?;
        }
        Ok(())
    }

    /// Segment files whose base seq is beyond [`MAX_SEQ`]: damage, moved aside by a repair.
    fn drop_absurd_bases(&mut self, bases: &mut Vec<u64>) -> Result<(), Error> {
        while let Some(&base) = bases.last().filter(|&&b| b > MAX_SEQ) {
            if !self.repair() {
                return Err(Error::Corrupt {
                    path: segment_paths(self.dir, base).0,
                    position: 0,
                    reason: format!("segment base seq {base} is beyond the largest seq {MAX_SEQ}"),
                });
            }
            self.move_aside(
                base,
                "segment base seq beyond the largest seq a log can reach",
            )?;
            bases.pop();
        }
        Ok(())
    }

    /// Fits segment `base` after what was recovered so far: places the holes before it and
    /// deals with a gap or an overlap. Returns false when the segment file was moved aside.
    fn place(
        &mut self,
        base: u64,
        next_base: Option<u64>,
        holes: &mut Holes,
    ) -> Result<bool, Error> {
        let log_path = segment_paths(self.dir, base).0;
        if base == 0 {
            return Err(Error::Corrupt {
                path: log_path,
                position: 0,
                reason: "segment base seq 0 (seqs start at 1)".into(),
            });
        }
        let Some(expected) = self.next_seq() else {
            self.take_holes_before_first(base, holes);
            return Ok(true);
        };
        self.take_holes_between(expected, base, holes);
        let expected = self.next_seq().unwrap_or(expected);
        if base < expected {
            if self.repair() {
                self.move_aside(base, "overlaps the segment before it")?;
                return Ok(false);
            }
            return Err(Error::SeqOverlap {
                previous: self.last_path(),
                path: log_path,
                expected,
                found: base,
            });
        }
        if base > expected {
            if !self.repair() {
                return Err(Error::SeqGap {
                    previous: self.last_path(),
                    path: log_path,
                    expected,
                    found: base,
                });
            }
            if next_base.is_none() && load::holds_no_frame(&log_path)? {
                // A stray empty file past the end: nothing of it is at stake.
                self.move_aside(base, "stray segment file past the end of the log")?;
                return Ok(false);
            }
            self.quarantine_bytes(
                None,
                &log_path,
                0,
                0,
                Some((expected, base - 1)),
                "seqs missing between two segment files",
            )?;
        }
        Ok(true)
    }

    /// Open succeeds from here on: writes what was deferred (so that a refused open changes
    /// nothing), and creates the active segment when there is none.
    fn finish(mut self, mut active_builder: Option<IndexBuilder>) -> Result<Recovered, Error> {
        for pos in std::mem::take(&mut self.index_writes) {
            if let Some(seg) = self.segs.get_mut(pos) {
                tracing::warn!(path = %seg.file.log_path.display(), "rebuilt a missing or invalid segment index");
                let fsync = sync_files(self.opts).then_some(&plain_fsync as _);
                seg.index_bytes = write_indexes(seg, fsync)?;
                if seg.open.is_none() && !self.report.rebuilt_indexes.contains(&seg.file.log_path) {
                    self.report.rebuilt_indexes.push(seg.file.log_path.clone());
                }
            }
        }
        let needs_active = self.segs.last().is_none_or(|s| s.open.is_none());
        if needs_active {
            let base = self.next_seq().unwrap_or(1);
            active_builder = None;
            let seg = new_active(self.dir, base)?;
            self.segs.push(seg);
        }
        self.report.holes = self
            .segs
            .iter()
            .filter_map(|s| {
                s.hole
                    .as_ref()
                    .map(|p| Hole::new(s.base_seq, s.last_seq, p.clone()))
            })
            .collect();
        Ok(Recovered {
            segs: self.segs,
            active_builder,
            clean_marker: self.report.clean_shutdown,
            report: self.report,
        })
    }
}
