//! One tiering round and the copy of each segment: the round flag, the stale cleanup, the copy
//! plan, the check before a copy, and the copy attempt (started, uploaded, finished).

use std::collections::VecDeque;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use krabka_remote_storage::{
    CustomMetadata, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
};
use krabka_storage::SegmentInfo;
use krabka_storage::index::OffsetIndexView;

use super::chunkmap;
use super::remote::remote_segment;
use super::{NOT_BLOCKED, TieredLog, local_segment};
use crate::error::Error;
use crate::policy::{self, LocalSegment};
use crate::stats::{TieringReport, bump};
use crate::verify::verify_for_copy;

type Meta = RemoteLogSegmentMetadata;
/// An uploaded attempt: its metadata and the custom metadata to record when it finishes.
type Attempt = (Meta, Option<CustomMetadata>);
/// A failed attempt: its metadata when it was recorded, and the error.
type Failed = Box<(Option<Meta>, Error)>;

/// How one copy's thread ended.
enum Outcome {
    /// Checked and uploaded; to be finished in seq order.
    Uploaded(Attempt),
    /// The segment (this base seq) failed its check: nothing of its copy was started.
    Refused(u64, Error),
    /// An older segment failed first: nothing was started.
    Skipped,
    /// The attempt or its upload failed.
    Failed(Failed),
}

/// Clears the round flag when a round ends, however it ends.
pub(crate) struct RoundGuard<'a>(&'a AtomicBool);

impl Drop for RoundGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl TieredLog {
    /// One deterministic round: clean stale attempts, copy eligible segments (up to
    /// [`copy_concurrency`](crate::TieringConfig::copy_concurrency) uploads at a time, each
    /// segment checked on its copy's thread before its upload starts, finished in seq order,
    /// stopping at the first failure), apply whole-log retention to the remote tier, then
    /// local retention.
    ///
    /// Copies finish in seq order: a segment's copy is recorded finished only after every
    /// older segment of the round finished, so the highest finished seq only grows and the
    /// finished segments never leave a gap behind them. A damaged segment starts no upload
    /// and nothing after it is copied: when a segment fails its check or its copy, the copies
    /// after it already running are discarded (their attempts deleted) and copied again next
    /// round.
    ///
    /// Failures of individual copies and deletes are in [`TieringReport::failures`] and are
    /// retried next round.
    ///
    /// # Errors
    /// [`Error::RoundInProgress`] when another round runs; [`Error::Metadata`] when the
    /// metadata manager cannot list segments; [`Error::Storage`] when local retention fails.
    pub fn run_once(&self) -> Result<TieringReport, Error> {
        let _guard = self.begin_round()?;
        let mut report = TieringReport::default();
        self.clean_stale(&mut report)?;
        let plan = self.copy_plan(&mut report)?;
        self.copy_in_order(plan, &mut report);
        self.apply_retention(&mut report)?;
        Ok(report)
    }

    /// Copies `plan` (oldest first) with up to `copy_concurrency` copies in flight on scoped
    /// threads, finishing them in plan order; see [`run_once`](Self::run_once). Each copy's
    /// thread checks its segment before anything of the copy starts, so the checks overlap
    /// with the uploads of older segments.
    fn copy_in_order(&self, plan: Vec<SegmentInfo>, report: &mut TieringReport) {
        let width = self.config.copy_concurrency.max(1);
        // The lowest base seq whose check, upload or finish failed: copies of later segments
        // not started yet start nothing, and nothing more is spawned.
        let halt = AtomicU64::new(u64::MAX);
        std::thread::scope(|scope| {
            let mut pending = VecDeque::new();
            let mut plan = plan.into_iter();
            // A segment failed its check or its copy: nothing more finishes this round.
            let mut stopped = false;
            loop {
                while !stopped && halt.load(Ordering::Acquire) == u64::MAX && pending.len() < width
                {
                    let Some(seg) = plan.next() else { break };
                    let halt = &halt;
                    // Taken here, in plan order, not on the copy's thread.
                    let at = self.next_copy_time();
                    pending.push_back(scope.spawn(move || self.check_and_copy(&seg, at, halt)));
                }
                let Some(copy) = pending.pop_front() else {
                    break;
                };
                let outcome = copy.join().unwrap_or_else(|_| {
                    Outcome::Failed(Box::new((
                        None,
                        Error::Task("a copy thread panicked".into()),
                    )))
                });
                if stopped {
                    self.discard_outcome(outcome, report);
                    continue;
                }
                stopped = !self.settle(outcome, report);
                if stopped {
                    halt.store(0, Ordering::Release);
                }
            }
        });
    }

    /// One copy's thread: checks `seg` ([`check_before_copy`](Self::check_before_copy)'s
    /// check), then records its attempt and uploads it, unless an older segment of the round
    /// failed first (`halt`).
    fn check_and_copy(&self, seg: &SegmentInfo, at: i64, halt: &AtomicU64) -> Outcome {
        let older_failed = || halt.load(Ordering::Acquire) < seg.base_seq;
        if older_failed() {
            return Outcome::Skipped;
        }
        if let Err(e) = verify_for_copy(seg) {
            // Retention must not pass it from now on, whatever else the round does.
            self.block_at(seg.base_seq);
            halt.fetch_min(seg.base_seq, Ordering::AcqRel);
            return Outcome::Refused(seg.base_seq, e);
        }
        if older_failed() {
            return Outcome::Skipped;
        }
        let outcome = match self.start_and_upload(seg, at) {
            Ok(attempt) => Outcome::Uploaded(attempt),
            Err(failed) => Outcome::Failed(failed),
        };
        if matches!(outcome, Outcome::Failed(_)) {
            halt.fetch_min(seg.base_seq, Ordering::AcqRel);
        }
        outcome
    }

    /// Settles the oldest outstanding copy while nothing older failed: finishes it, or
    /// reports its failure. `false` when it failed (the round's copying stops there).
    fn settle(&self, outcome: Outcome, report: &mut TieringReport) -> bool {
        match outcome {
            Outcome::Uploaded((meta, custom)) => match self.finish_copy(&meta, custom) {
                Ok(bytes) => {
                    report.segments_copied += 1;
                    report.bytes_copied += bytes;
                    true
                }
                Err(e) => {
                    self.fail_copy(Some(&meta), e, report, true);
                    false
                }
            },
            Outcome::Refused(base_seq, e) => {
                self.refuse(base_seq, &e, report);
                report.failures.push(e);
                false
            }
            Outcome::Failed(failed) => {
                let (meta, e) = *failed;
                self.fail_copy(meta.as_ref(), e, report, true);
                false
            }
            // Only after an older failure, which stopped the round already.
            Outcome::Skipped => false,
        }
    }

    /// Undoes a copy younger than a failed one: its attempt is not finished (it is copied
    /// again next round).
    fn discard_outcome(&self, outcome: Outcome, report: &mut TieringReport) {
        match outcome {
            Outcome::Uploaded((meta, _)) => self.discard_after_failure(&meta),
            Outcome::Failed(failed) => {
                let (meta, e) = *failed;
                self.fail_copy(meta.as_ref(), e, report, false);
            }
            Outcome::Refused(base_seq, e) => {
                tracing::debug!(partition = %self.tp, base_seq, error = %e,
                    "a segment after a failed copy failed its check too; checked again next round");
            }
            Outcome::Skipped => {}
        }
    }

    /// Records a segment refused by its check: the round's
    /// [`TieringReport::copy_blocked_at`] (retention never passes it), the counter, the log.
    fn refuse(&self, base_seq: u64, e: &Error, report: &mut TieringReport) {
        self.block_at(base_seq);
        report.block_at(base_seq);
        bump(&self.counters.segments_refused, 1);
        tracing::warn!(partition = %self.tp, error = %e,
            "a local segment failed its check before the copy; it is not copied");
    }

    /// Records a new attempt for `seg` and uploads it; on failure the attempt (when it was
    /// recorded) comes back with the error.
    fn start_and_upload(&self, seg: &SegmentInfo, at: i64) -> Result<Attempt, Failed> {
        let meta = self.begin_copy(seg, at).map_err(|e| Box::new((None, e)))?;
        match self.upload(&meta, seg) {
            Ok(custom) => Ok((meta, custom)),
            Err(e) => Err(Box::new((Some(meta), e))),
        }
    }

    /// Counts a failed copy, removes its attempt, and reports the error when `report_it`
    /// (a copy failing after an older one failed is not reported: it never should have run).
    fn fail_copy(
        &self,
        meta: Option<&Meta>,
        e: Error,
        report: &mut TieringReport,
        report_it: bool,
    ) {
        bump(&self.counters.copy_failures, 1);
        if let Some(meta) = meta {
            self.discard_after_failure(meta);
        }
        if report_it {
            report.failures.push(e);
        } else {
            tracing::debug!(partition = %self.tp, error = %e,
                "a copy after a failed one failed too; it is retried next round");
        }
    }

    pub(crate) fn begin_round(&self) -> Result<RoundGuard<'_>, Error> {
        self.round_running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| Error::RoundInProgress)?;
        Ok(RoundGuard(&self.round_running))
    }

    /// Cleans attempts a crashed process, a failed copy or an abandoned copy left behind.
    pub(crate) fn clean_stale(&self, report: &mut TieringReport) -> Result<(), Error> {
        // Every round starts here, in every engine: a fenced log does nothing more.
        self.check_owner()?;
        let list = self.remote_list()?;
        let view: Vec<_> = list.iter().map(remote_segment).collect();
        let abandoned = self.abandoned.lock().clone();
        for i in policy::stale_attempts(&view, |id| abandoned.contains(&id.id())) {
            let Some(meta) = list.get(i) else { continue };
            match self.discard_attempt(meta) {
                Ok(()) => report.stale_cleaned += 1,
                Err(e) => report.failures.push(e),
            }
        }
        Ok(())
    }

    /// The closed, committed local segments without a finished copy, oldest first, up to the
    /// first hole a repair left that no finished remote segment covers and the user did not
    /// accept (`Log::accept_holes`; reported in `report`, which also gets the round's
    /// [`TieringReport::copy_blocked_at`]).
    pub(crate) fn copy_plan(&self, report: &mut TieringReport) -> Result<Vec<SegmentInfo>, Error> {
        let segs = self.log.segments();
        let local: Vec<LocalSegment> = segs.iter().map(local_segment).collect();
        let view = self.remote_view()?;
        let last = self.log.last_seq();
        let commit = Some(self.commit_seq().map_or(last, |c| c.min(last)));
        let picked = policy::segments_to_copy(
            &local,
            &view,
            self.log_start.load(Ordering::Acquire),
            commit,
        );
        let quarantined = self.log.quarantined();
        let holes: Vec<RangeInclusive<u64>> = quarantined.iter().map(|(r, _)| r.clone()).collect();
        let accepted: Vec<RangeInclusive<u64>> = self
            .log
            .accepted_holes()
            .iter()
            .map(|a| a.first_seq..=a.last_seq)
            .collect();
        let barrier = policy::hole_barrier(&policy::blocking_holes(&holes, &accepted), &view);
        self.blocked_at
            .store(barrier.unwrap_or(NOT_BLOCKED), Ordering::Release);
        report.copy_blocked_at = barrier;
        if let Some(at) = barrier
            && let Some((range, path)) = quarantined.iter().find(|(r, _)| *r.start() == at)
        {
            let e = Error::DamagedSegment {
                path: path.clone(),
                position: 0,
                reason: format!(
                    "a repair moved these seqs aside and no remote segment holds them; restore \
                     them, or accept their loss with `krabka repair {} --accept-hole {}..={}` \
                     and tiering goes on past them",
                    self.log.dir().display(),
                    range.start(),
                    range.end()
                ),
                first_seq: *range.start(),
                last_seq: *range.end(),
            };
            tracing::warn!(partition = %self.tp, error = %e, "tiering stops before a hole");
            report.failures.push(e);
        }
        Ok(picked
            .into_iter()
            .filter_map(|i| segs.get(i).cloned())
            .filter(|s| barrier.is_none_or(|b| s.last_seq < b))
            .collect())
    }

    /// Verifies `seg` before its copy ([`verify_for_copy`]). A damaged segment becomes the
    /// round's [`TieringReport::copy_blocked_at`] (copying stops there and retention never
    /// passes it) and is logged with `tracing::warn!`.
    pub(crate) fn check_before_copy(
        &self,
        seg: &SegmentInfo,
        report: &mut TieringReport,
    ) -> Result<(), Error> {
        verify_for_copy(seg).inspect_err(|e| self.refuse(seg.base_seq, e, report))
    }

    /// Lowers the seq retention must not pass to `seq`.
    fn block_at(&self, seq: u64) {
        self.blocked_at.fetch_min(seq, Ordering::AcqRel);
    }

    /// Records a new attempt (CopySegmentStarted) for `seg` under a fresh id.
    /// The event time for the next copy attempt: now, or just after the previous attempt's time
    /// when the clock is behind it. Call it in plan (seq) order and hand the time to
    /// [`begin_copy`](Self::begin_copy): recovery orders copies by this time (ties by seq), so
    /// a younger segment's attempt must never carry an earlier time than an older one's.
    pub(crate) fn next_copy_time(&self) -> i64 {
        // Strictly increasing: two attempts never share an event time (recovery would then
        // order them by their random ids).
        let now = krabka_remote_storage::now_ms();
        let next = |prev: i64| prev.saturating_add(1).max(now);
        let prev = self
            .copy_clock
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| Some(next(p)))
            .unwrap_or_else(|p| p);
        next(prev)
    }

    /// Records a new attempt for `seg` (CopySegmentStarted) with event time `at`
    /// ([`next_copy_time`](Self::next_copy_time), taken in plan order).
    pub(crate) fn begin_copy(
        &self,
        seg: &SegmentInfo,
        at: i64,
    ) -> Result<RemoteLogSegmentMetadata, Error> {
        // Every copy of every engine starts here: nothing is written for a fenced writer.
        self.check_owner()?;
        let id = RemoteLogSegmentId::generate(self.tp.clone());
        let epochs = policy::segment_leader_epochs(&self.epochs.lock(), seg.base_seq, seg.last_seq);
        let meta = RemoteLogSegmentMetadata::builder(id.clone(), seg.base_seq, seg.last_seq)
            .max_timestamp_ms(seg.max_timestamp)
            .broker_id(self.config.broker_id)
            .segment_leader_epochs(epochs)
            .segment_size_in_bytes(seg.size)
            .event_timestamp_ms(at)
            .writer_epoch(self.writer_epoch().unwrap_or(0))
            .build()
            .map_err(|e| Error::metadata("add", Some(&id), e))?;
        self.rlmm
            .add_remote_log_segment_metadata(&meta)
            .map_err(|e| Error::metadata("add", Some(&id), e))?;
        Ok(meta)
    }

    /// Uploads `seg` under `meta`'s id (the blocking SPI call).
    pub(crate) fn upload(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seg: &SegmentInfo,
    ) -> Result<Option<CustomMetadata>, Error> {
        let id = meta.remote_log_segment_id();
        let mut data = LogSegmentData::new(&seg.log_path, &seg.index_path, &seg.time_index_path);
        // Kafka's leader-epoch checkpoint text: version, entry count, then "epoch start" lines.
        let epochs = meta.segment_leader_epochs();
        let mut text = format!("0\n{}\n", epochs.len());
        for (epoch, start) in epochs {
            text.push_str(&format!("{epoch} {start}\n"));
        }
        data.leader_epoch_index = Bytes::from(text);
        bump(&self.counters.copy, 1);
        let custom = self
            .rsm
            .copy_log_segment_data(meta, &data)
            .map_err(|e| Error::remote("copy", id, Some(seg.base_seq), e))?;
        if let Some(cm) = &custom {
            cm.check_size(self.config.custom_metadata_max_bytes)
                .map_err(|e| Error::remote("copy", id, Some(seg.base_seq), e))?;
        }
        Ok(self.with_chunk_map(seg, custom))
    }

    /// `custom` with the segment's chunk map around it (see [`chunkmap`]) when it fits
    /// `custom_metadata_max_bytes`. The map comes from the local offset index checked before
    /// the copy; when it cannot be read, no map is recorded (reads fetch the remote index).
    fn with_chunk_map(
        &self,
        seg: &SegmentInfo,
        custom: Option<CustomMetadata>,
    ) -> Option<CustomMetadata> {
        let index = std::fs::read(&seg.index_path)
            .ok()
            .and_then(|b| OffsetIndexView::parse(b).ok());
        let Some(index) = index else {
            return custom;
        };
        let map = chunkmap::from_index(&index, u64::from(self.config.chunk_bytes));
        chunkmap::wrap(
            custom,
            seg.base_seq,
            &map,
            self.config.custom_metadata_max_bytes,
        )
    }

    /// Records CopySegmentFinished: the segment is now readable and safely remote.
    ///
    /// Refused ([`Error::CopyDeadlineExceeded`]; the caller discards the attempt) when the copy
    /// began [`COPY_ABANDON_AFTER_MS`](krabka_remote_storage::manifest::COPY_ABANDON_AFTER_MS)
    /// or more ago: from then on a cleanup may take its objects for an abandoned copy's.
    pub(crate) fn finish_copy(
        &self,
        meta: &RemoteLogSegmentMetadata,
        custom: Option<CustomMetadata>,
    ) -> Result<u64, Error> {
        self.ensure_not_fenced()?;
        let limit = krabka_remote_storage::manifest::COPY_ABANDON_AFTER_MS;
        let age = krabka_remote_storage::now_ms().saturating_sub(meta.event_timestamp_ms());
        if age >= limit {
            return Err(Error::CopyDeadlineExceeded {
                segment: meta.remote_log_segment_id().clone(),
                base_seq: meta.start_offset(),
                last_seq: meta.end_offset(),
                deadline: Duration::from_millis(limit.unsigned_abs()),
            });
        }
        self.update_state(
            meta.remote_log_segment_id(),
            RemoteLogSegmentState::CopySegmentFinished,
            custom,
        )?;
        bump(&self.counters.segments_copied, 1);
        bump(&self.counters.bytes_copied, meta.segment_size_in_bytes());
        Ok(meta.segment_size_in_bytes())
    }

    /// Best-effort removal of a failed attempt; on failure the next round's stale cleanup
    /// finds it in CopySegmentStarted or DeleteSegmentStarted.
    pub(crate) fn discard_after_failure(&self, meta: &RemoteLogSegmentMetadata) {
        if self.ensure_not_fenced().is_err() {
            // A fenced writer deletes nothing; its attempt is superseded by the lineage.
            return;
        }
        let current = self
            .rlmm
            .segment_metadata(meta.remote_log_segment_id())
            .ok()
            .flatten()
            .unwrap_or_else(|| meta.clone());
        if current.state() == RemoteLogSegmentState::CopySegmentFinished {
            return;
        }
        if let Err(e) = self.discard_attempt(&current) {
            tracing::debug!(segment = %meta.remote_log_segment_id(), error = %e,
                "could not remove a failed copy attempt now; the next round will");
        }
    }
}
