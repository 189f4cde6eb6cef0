//! What a repair would do and what one did, as data a tool prints: the plan of a dry run
//! ([`LogView::preview_repair`]), and the rules about holes and moved pieces a report of a
//! repair is read by.

use std::path::PathBuf;

use super::LogView;
use super::verify::Problem;
use crate::segment::{LOG_EXTENSION, segment_file_name};
use crate::{Error, Hole, Log, QuarantinedPiece, RecoveryReport, RepairStep, SegmentRepair};

/// What a repair ([`RecoveryMode::Repair`](crate::RecoveryMode::Repair)) of a log directory
/// would change, found without changing anything; see [`LogView::preview_repair`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPreview {
    /// The repair's own plan for every damaged segment file ([`LogView::plan_repair`]).
    pub plans: Vec<SegmentRepair>,
    /// The problems [`LogView::verify`] finds that no plan covers (a gap or an overlap between
    /// segment files, an index file, a hole marker, the recovery point): a repair moves the
    /// damaged part aside, rebuilds bad index files and records missing seqs as a hole.
    pub others: Vec<Problem>,
}

impl RepairPreview {
    /// Whether a repair would change nothing.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty() && self.others.is_empty()
    }
}

impl LogView {
    /// What a repair of the log would do: [`plan_repair`](Self::plan_repair), and every problem
    /// of [`verify`](Self::verify) in a file no plan is for.
    ///
    /// # Errors
    /// As [`verify`](Self::verify) and [`plan_repair`](Self::plan_repair).
    pub fn preview_repair(&self) -> Result<RepairPreview, Error> {
        let report = self.verify()?;
        let plans = self.plan_repair()?;
        let others = report
            .problems
            .into_iter()
            .filter(|p| !plans.iter().any(|plan| plan.path == p.path))
            .collect();
        Ok(RepairPreview { plans, others })
    }
}

impl SegmentRepair {
    /// The segment file a repair keeps the intact batches from `first_seq` on in (a
    /// [`RepairStep::Keep`]): named by that seq, next to the damaged file.
    pub fn kept_path(&self, first_seq: u64) -> PathBuf {
        self.path
            .with_file_name(segment_file_name(first_seq, LOG_EXTENSION))
    }
}

impl RepairStep {
    /// The seqs a [`RepairStep::Cut`] of no bytes records as a hole (seqs missing at a seam,
    /// with nothing to move); `None` for any other step.
    pub fn hole_only(&self) -> Option<(u64, u64)> {
        match *self {
            RepairStep::Cut {
                from,
                to,
                seqs: Some(seqs),
            } if from == to => Some(seqs),
            _ => None,
        }
    }
}

impl QuarantinedPiece {
    /// Whether the piece moved no bytes and only recorded missing seqs as a hole.
    pub fn is_hole_only(&self) -> bool {
        self.bytes == 0 && self.seqs.is_some()
    }
}

impl RecoveryReport {
    /// Bytes moved into the quarantine directory.
    pub fn bytes_moved(&self) -> u64 {
        self.quarantined.iter().map(|q| q.bytes).sum()
    }

    /// Pieces of bytes moved into the quarantine directory (not counting
    /// [hole-only](QuarantinedPiece::is_hole_only) ones).
    pub fn pieces_moved(&self) -> usize {
        self.quarantined
            .iter()
            .filter(|q| !q.is_hole_only())
            .count()
    }

    /// Holes of missing seqs recorded with no bytes to move.
    pub fn holes_recorded(&self) -> usize {
        self.quarantined.len() - self.pieces_moved()
    }

    /// Records a repair kept after damage, in [`kept`](Self::kept) segment files.
    pub fn records_kept(&self) -> u64 {
        self.kept
            .iter()
            .map(|k| k.last_seq.saturating_sub(k.first_seq) + 1)
            .sum()
    }
}

impl Log {
    /// The explicit holes ([`holes`](Self::holes)) not accepted as lost
    /// ([`accept_holes`](Self::accept_holes)): tiering stops at the first of them.
    pub fn unaccepted_holes(&self) -> Vec<Hole> {
        self.holes()
            .into_iter()
            .filter(|h| !h.is_accepted())
            .collect()
    }

    /// The first and last seq the log spans (holes included), `None` when it holds no
    /// records.
    pub fn span(&self) -> Option<(u64, u64)> {
        let (first, last) = (self.first_seq(), self.last_seq());
        (last >= first && last > 0).then_some((first, last))
    }
}
