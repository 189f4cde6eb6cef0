//! The round engine: one tiering round as a state machine that every driver runs —
//! [`TieredLog::run_once`] (copies on scoped threads), [`TieredLog::run_round`] and
//! [`TieredLog::spawn`] (copies on Tokio tasks, each with the copy deadline) and
//! [`TieringService`](crate::TieringService) (one step per turn, one copy per turn, within the
//! copy quota and deadline).
//!
//! A round is plan → copy → finish → retention:
//! 1. [`Round::start`] forgets abandoned copies whose cleanup ended, checks the writer epoch
//!    and cleans stale attempts ([`TieredLog::clean_stale`]), and plans the copies
//!    ([`TieredLog::copy_plan`]).
//! 2. [`Round::next_launch`] hands the driver the next planned segment while fewer than its
//!    width of copies are running (a sliding window: [`FinishOrder::can_launch`]); the driver runs the copy ([`copy`]: check, quota, record,
//!    upload — wherever it likes) and gives its [`Outcome`] back with [`Round::complete`].
//! 3. [`Round::settle`] records the completed copies in seq order ([`FinishOrder`]): a copy
//!    that completes early waits for every older copy of the round before its
//!    `CopySegmentFinished` is recorded. The first failure (a refused segment, a failed or late
//!    upload, a refused finish) stops the round: the younger copies still pending are not
//!    finished but discarded (their attempts deleted) and copied again next round, and none
//!    starts.
//! 4. [`retention`] applies whole-log, then local retention.
//!
//! Why discard rather than finish the younger copies above a failed one: the remote metadata
//! then never holds a finished segment above an unfinished one. A gap there would be safe for
//! reads and local retention (the older segment stays local, and retention only deletes the
//! contiguous finished prefix), but not for a local directory that is wiped: the log then
//! continues after the remote end, and the seqs of the gap would be in neither tier while
//! `first_seq()` claims them readable. The cost is re-copying, next round, what was uploaded
//! beside the failed copy. (A crash can still leave a younger copy's objects complete above an
//! older one's in the remote tier itself; recovery from manifests reports that as a hole.)
//!
//! Every rule of a round lives once: the writer-epoch checks in `clean_stale`, `begin_copy`,
//! `finish_copy` and retention; the check before a copy and the quota and deadline in [`copy`];
//! the finish order here.

pub(crate) mod copy;
mod drivers;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use krabka_storage::SegmentInfo;

pub(crate) use self::copy::{CopyLimits, Launch, Outcome};
use crate::error::Error;
use crate::policy::{FinishOrder, Settle};
use crate::stats::{TieringReport, bump};
use crate::tiered::TieredLog;

/// `halt` value meaning "no copy of the round failed".
const NOT_HALTED: u64 = u64::MAX;

/// Runs `f` on Tokio's blocking pool and waits for it.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Service(crate::error::ServiceError::Task(e.to_string())))?
}

/// One round in progress: the segments left to copy, the copies pending in seq order, and
/// what the round did so far.
pub(crate) struct Round {
    plan: VecDeque<SegmentInfo>,
    order: FinishOrder<Outcome>,
    /// The lowest base seq whose check, record or upload failed ([`NOT_HALTED`]: none; 0 once
    /// the round stopped): copies of younger segments not begun yet begin nothing.
    halt: Arc<AtomicU64>,
    report: TieringReport,
}

impl Round {
    /// Starts a round: forgets abandoned copies whose cleanup ended, cleans stale attempts
    /// (after checking the writer epoch) and plans the copies. Blocking.
    ///
    /// # Errors
    /// [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) and [`OwnershipError::Record`](crate::OwnershipError::Record) from the epoch check; [`Error::Metadata`]
    /// when the metadata manager cannot list segments.
    pub(crate) fn start(log: &TieredLog) -> Result<Self, Error> {
        log.prune_abandoned();
        let mut report = TieringReport::default();
        if log.is_follower() {
            // A follower copies nothing: it learns what is remote, then only local retention.
            log.follow(&mut report);
            return Ok(Self {
                plan: VecDeque::new(),
                order: FinishOrder::new(),
                halt: Arc::new(AtomicU64::new(NOT_HALTED)),
                report,
            });
        }
        log.clean_stale(&mut report)?;
        let plan = log.copy_plan(&mut report)?;
        Ok(Self {
            plan: plan.into(),
            order: FinishOrder::new(),
            halt: Arc::new(AtomicU64::new(NOT_HALTED)),
            report,
        })
    }

    /// A round that could not start: it copies nothing and reports `e`.
    pub(crate) fn failed(e: Error) -> Self {
        let mut report = TieringReport::default();
        report.failures.push(e);
        let mut order = FinishOrder::new();
        order.stop();
        Self {
            plan: VecDeque::new(),
            order,
            halt: Arc::new(AtomicU64::new(0)),
            report,
        }
    }

    /// The next copy to run, while fewer than `width` are running (and at most
    /// [`WAITING_PER_SLOT`](crate::policy::WAITING_PER_SLOT) × `width` are not recorded yet)
    /// and nothing failed. Its
    /// event time is taken here, in plan order, whatever order the copies then begin in.
    pub(crate) fn next_launch(&mut self, log: &TieredLog, width: usize) -> Option<Launch> {
        if self.halt.load(Ordering::Acquire) != NOT_HALTED || !self.order.can_launch(width) {
            return None;
        }
        let seg = self.plan.pop_front()?;
        self.order.launch(seg.base_seq);
        Some(Launch::new(seg, log.next_copy_time(), self.halt.clone()))
    }

    /// Records how the copy of `base_seq` (a [`Launch`] of this round) ended.
    pub(crate) fn complete(&mut self, base_seq: u64, outcome: Outcome) {
        if !self.order.complete(base_seq, outcome) {
            tracing::debug!(
                base_seq,
                "a copy outcome the round did not launch is ignored"
            );
        }
    }

    /// Records the completed copies that every older copy of the round precedes: finishes
    /// them (or reports their failure, which stops the round), or discards them after a
    /// failure. Blocking (metadata updates, deletes).
    pub(crate) fn settle(&mut self, log: &TieredLog) {
        while let Some((_, outcome, settle)) = self.order.pop_ready() {
            let recorded = match settle {
                Settle::InOrder => self.record(log, outcome),
                Settle::Discard => {
                    self.discard(log, outcome);
                    true
                }
            };
            if !recorded {
                self.order.stop();
                self.halt.store(0, Ordering::Release);
            }
        }
    }

    /// Whether the copy phase is over: nothing pending, and nothing left to launch (the plan
    /// is done, or the round stopped).
    pub(crate) fn copying_done(&self) -> bool {
        self.order.pending() == 0
            && (self.plan.is_empty()
                || self.order.is_stopped()
                || self.halt.load(Ordering::Acquire) != NOT_HALTED)
    }

    /// What the round did so far.
    pub(crate) fn report_mut(&mut self) -> &mut TieringReport {
        &mut self.report
    }

    /// What the round did.
    pub(crate) fn into_report(self) -> TieringReport {
        self.report
    }

    /// Records a copy whose older copies were all recorded: finishes it, or reports why it
    /// failed. `false` when it failed (the round stops there).
    fn record(&mut self, log: &TieredLog, outcome: Outcome) -> bool {
        match outcome {
            Outcome::Uploaded(up) => {
                let (meta, custom, launched) = *up;
                match log.finish_copy(&meta, custom) {
                    Ok(bytes) => {
                        self.report.segments_copied += 1;
                        self.report.bytes_copied += bytes;
                        tracing::info!(partition = %log.tp, base_seq = meta.start_offset(),
                            last_seq = meta.end_offset(), bytes,
                            millis = launched.elapsed().as_millis() as u64,
                            "segment copied to the remote tier");
                        true
                    }
                    Err(e) => {
                        self.fail_copy(log, Some(&meta), e, true);
                        false
                    }
                }
            }
            Outcome::Refused(base_seq, e) => {
                log.block_at(base_seq);
                self.report.block_at(base_seq);
                bump(&log.counters.segments_refused, 1);
                tracing::warn!(partition = %log.tp, error = %e,
                    "a local segment failed its check before the copy; it is not copied");
                self.report.failures.push(e);
                false
            }
            Outcome::Failed(failed) => {
                let (meta, e) = *failed;
                self.fail_copy(log, meta.as_ref(), e, true);
                false
            }
            // Only after an older failure, which stopped the round already.
            Outcome::Skipped => false,
        }
    }

    /// Undoes a copy younger than a failed one: its attempt is not finished (the segment is
    /// copied again next round).
    fn discard(&mut self, log: &TieredLog, outcome: Outcome) {
        match outcome {
            Outcome::Uploaded(up) => log.discard_after_failure(&up.0),
            Outcome::Failed(failed) => {
                let (meta, e) = *failed;
                self.fail_copy(log, meta.as_ref(), e, false);
            }
            Outcome::Refused(base_seq, e) => {
                tracing::debug!(partition = %log.tp, base_seq, error = %e,
                    "a segment after a failed copy failed its check too; checked again next round");
            }
            Outcome::Skipped => {}
        }
    }

    /// Counts a failed copy, removes its attempt (when it was recorded and its call has
    /// returned), and reports the error when `report_it` (a copy failing after an older one
    /// failed is not reported: it is retried next round).
    fn fail_copy(
        &mut self,
        log: &TieredLog,
        meta: Option<&krabka_remote_storage::RemoteLogSegmentMetadata>,
        e: Error,
        report_it: bool,
    ) {
        bump(&log.counters.copy_failures, 1);
        if let Some(meta) = meta {
            log.discard_after_failure(meta);
        }
        if report_it {
            self.report.failures.push(e);
        } else {
            tracing::debug!(partition = %log.tp, error = %e,
                "a copy after a failed one failed too; it is retried next round");
        }
    }
}

/// Whole-log retention over the remote tier, then local retention, as a report of its own.
/// Blocking.
///
/// # Errors
/// As [`TieredLog::apply_retention`](crate::TieredLog): [`OwnershipError::Fenced`](crate::OwnershipError::Fenced), [`Error::Metadata`],
/// [`Error::Storage`].
pub(crate) fn retention(log: &TieredLog) -> Result<TieringReport, Error> {
    let mut report = TieringReport::default();
    log.apply_retention(&mut report)?;
    // The head says what the round finished (and retention left) for read replicas.
    if let Err(e) = log.publish_head(false) {
        report.failures.push(e);
    }
    Ok(report)
}
