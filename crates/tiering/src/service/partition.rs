//! One partition in the service: its round, cut into turns (start and first copy, one copy per
//! later turn, retention last), and its retirement.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use krabka_storage::SegmentInfo;
use parking_lot::Mutex;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::Shared;
use crate::error::Error;
use crate::metrics::{self as m, time};
use crate::stats::TieringReport;
use crate::tiered::TieredLog;

/// Permits of a partition's operation gate: each turn and read holds one; retiring takes all.
const OPS: u32 = 1 << 20;

/// Where a partition is in its round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// The next turn cleans stale attempts, plans the copies and copies the first segment.
    #[default]
    Start,
    /// The next turn copies the next planned segment.
    Copying,
    /// The next turn applies retention and ends the round.
    Retention,
}

#[derive(Default)]
struct State {
    phase: Phase,
    plan: VecDeque<SegmentInfo>,
    report: TieringReport,
    round_started: Option<Instant>,
    /// Retention that outlived its deadline: the partition waits until it returns.
    lingering: Option<JoinHandle<Result<TieringReport, Error>>>,
}

/// How a turn ended, for the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TurnEnd {
    /// Work is left in this round: back of the ready queue.
    More,
    /// The round ended: next round after the interval.
    RoundDone,
    /// Another round (not the service's) runs on the log, or the partition is retiring.
    Busy,
}

pub(crate) struct Partition {
    pub(crate) log: Arc<TieredLog>,
    ops: Semaphore,
    removed: AtomicBool,
    state: Mutex<State>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}

impl Partition {
    pub(crate) fn new(log: Arc<TieredLog>) -> Self {
        Self {
            log,
            ops: Semaphore::new(OPS as usize),
            removed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        }
    }

    /// A permit for one operation, unless the partition is retiring.
    pub(crate) fn op(&self) -> Option<SemaphorePermit<'_>> {
        self.ops.try_acquire().ok()
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Whether retention past its deadline still runs.
    pub(crate) fn is_lingering(&self) -> bool {
        self.state
            .lock()
            .lingering
            .as_ref()
            .is_some_and(|h| !h.is_finished())
    }

    /// Stops new work on the partition and waits for the work in flight: turns, reads,
    /// retention past its deadline, abandoned copies' cleanups.
    pub(crate) async fn retire(&self) {
        self.removed.store(true, Ordering::Release);
        if let Ok(all) = self.ops.acquire_many(OPS).await {
            all.forget();
        }
        self.ops.close();
        let lingering = self.state.lock().lingering.take();
        if let Some(handle) = lingering {
            let _ = handle.await;
        }
        self.log.wait_for_abandoned().await;
    }

    /// One turn: one step of the partition's round.
    pub(crate) async fn turn(self: &Arc<Self>, shared: &Shared) -> TurnEnd {
        if self.is_removed() {
            return TurnEnd::Busy;
        }
        let Some(_op) = self.op() else {
            return TurnEnd::Busy;
        };
        let log = self.log.clone();
        let Ok(_round) = log.begin_round() else {
            return TurnEnd::Busy;
        };
        let tp = log.topic_id_partition();
        let phase = self.state.lock().phase;
        let span = tracing::info_span!("tiering_round", topic = tp.topic(), partition = tp.partition(),
            step = ?phase);
        async {
            if phase == Phase::Start && !self.start_round().await {
                return self.finish_round();
            }
            let copying = {
                let st = self.state.lock();
                st.phase == Phase::Copying && !st.plan.is_empty()
            };
            if copying {
                self.copy_next(shared).await;
                return TurnEnd::More;
            }
            self.retention(shared).await;
            self.finish_round()
        }
        .instrument(span)
        .await
    }

    /// Cleans stale attempts and plans the round's copies; false when that failed.
    async fn start_round(&self) -> bool {
        let log = self.log.clone();
        let planned = blocking(move || {
            log.prune_abandoned();
            let mut report = TieringReport::default();
            log.clean_stale(&mut report)?;
            let plan = log.copy_plan(&mut report)?;
            Ok((report, plan))
        })
        .await;
        let mut st = self.state.lock();
        st.round_started = Some(Instant::now());
        match planned {
            Ok((report, plan)) => {
                st.report = report;
                st.plan = plan.into();
                st.phase = Phase::Copying;
                true
            }
            Err(e) => {
                st.report = TieringReport::default();
                st.report.failures.push(e);
                false
            }
        }
    }

    /// Copies the next planned segment (checked first, within the copy quota and deadline).
    /// After the last one, or a failure, the next turn applies retention.
    async fn copy_next(&self, shared: &Shared) {
        let seg = {
            let mut st = self.state.lock();
            match st.plan.pop_front() {
                Some(seg) => seg,
                None => {
                    st.phase = Phase::Retention;
                    return;
                }
            }
        };
        let tp = self.log.topic_id_partition().clone();
        let log = self.log.clone();
        let checked = seg.clone();
        let check = blocking(move || {
            let mut r = TieringReport::default();
            let result = log.check_before_copy(&checked, &mut r);
            Ok((r.copy_blocked_at, result))
        })
        .await;
        let result = match check {
            Ok((_, Ok(()))) => self.copy_one(shared, seg).await,
            Ok((blocked, Err(e))) => {
                if let Some(seq) = blocked {
                    self.state.lock().report.copy_blocked_at = Some(seq);
                }
                Err(e)
            }
            Err(e) => Err(e),
        };
        let mut st = self.state.lock();
        match result {
            Ok(bytes) => {
                st.report.segments_copied += 1;
                st.report.bytes_copied += bytes;
            }
            Err(e) => {
                tracing::warn!(partition = %tp, error = %e, "copy failed; retried next round");
                st.report.failures.push(e);
                st.plan.clear();
            }
        }
        if st.plan.is_empty() {
            st.phase = Phase::Retention;
        }
    }

    async fn copy_one(&self, shared: &Shared, seg: SegmentInfo) -> Result<u64, Error> {
        let tp = self.log.topic_id_partition();
        if let Some(q) = &shared.copy_quota {
            let waited = q.acquire(seg.size).await;
            if !waited.is_zero() {
                time(m::COPY_THROTTLE_SECONDS, tp, waited);
            }
        }
        let span = tracing::info_span!(
            "tiering_copy",
            base_seq = seg.base_seq,
            last_seq = seg.last_seq,
            bytes = seg.size
        );
        let (base, last) = (seg.base_seq, seg.last_seq);
        let cancel = Some(shared.cancel.subscribe());
        let started = Instant::now();
        // One copy per turn, in seq order: the time is taken in plan order too.
        let at = self.log.next_copy_time();
        let result = self
            .log
            .copy_with_deadline(seg, at, shared.config.copy_deadline, cancel)
            .instrument(span)
            .await;
        if let Ok(bytes) = result {
            tracing::info!(partition = %tp, base_seq = base, last_seq = last, bytes,
                millis = started.elapsed().as_millis() as u64, "segment copied to the remote tier");
        }
        result
    }

    /// Whole-log and local retention within the delete deadline, then the partition's gauges.
    async fn retention(&self, shared: &Shared) {
        let log = self.log.clone();
        let mut handle = tokio::task::spawn_blocking(move || {
            let mut r = TieringReport::default();
            let result = log.apply_retention(&mut r);
            crate::metrics::publish_partition(&log);
            result.map(|()| r)
        });
        let deadline = shared.config.delete_deadline;
        let outcome = tokio::time::timeout(deadline, &mut handle).await;
        let mut st = self.state.lock();
        match outcome {
            Ok(Ok(Ok(r))) => st.report.merge(r),
            Ok(Ok(Err(e))) => st.report.failures.push(e),
            Ok(Err(join)) => st.report.failures.push(Error::Task(join.to_string())),
            Err(_) => {
                st.lingering = Some(handle);
                st.report.failures.push(Error::DeleteDeadlineExceeded {
                    partition: self.log.topic_id_partition().clone(),
                    deadline,
                });
            }
        }
    }

    /// Ends the round: records it (metrics, events) and resets the plan.
    fn finish_round(&self) -> TurnEnd {
        let tp = self.log.topic_id_partition();
        let mut st = self.state.lock();
        let report = std::mem::take(&mut st.report);
        st.plan.clear();
        st.phase = Phase::Start;
        let took = st.round_started.take().map(|t| t.elapsed());
        drop(st);
        m::record_round(tp, &report);
        if report.remote_segments_deleted > 0 {
            tracing::info!(partition = %tp, segments = report.remote_segments_deleted,
                "retention deleted remote segments");
        }
        if report.local_segments_deleted > 0 {
            tracing::info!(partition = %tp, segments = report.local_segments_deleted,
                "local retention deleted segments");
        }
        for failure in &report.failures {
            tracing::warn!(partition = %tp, error = %failure, "tiering step failed; retrying next round");
        }
        tracing::debug!(partition = %tp, copied = report.segments_copied,
            bytes = report.bytes_copied, millis = took.map_or(0, |t| t.as_millis() as u64),
            "tiering round finished");
        TurnEnd::RoundDone
    }
}
