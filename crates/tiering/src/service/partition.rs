//! One partition in the service: its round (the engine's, `crate::round`) cut into turns —
//! start and first copy, one copy per later turn, retention last — and its retirement.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::Shared;
use crate::error::Error;
use crate::metrics::{self as m};
use crate::round::{self, CopyLimits, Round, blocking};
use crate::stats::TieringReport;
use crate::tiered::TieredLog;

/// Permits of a partition's operation gate: each turn and read holds one; retiring takes all.
const OPS: u32 = 1 << 20;

/// Where a partition is in its round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// The next turn starts a round (stale cleanup, plan) and copies the first segment.
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
    /// The round in progress (from its start until it ends).
    round: Option<Round>,
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
                st.phase == Phase::Copying && st.round.as_ref().is_some_and(|r| !r.copying_done())
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

    /// Starts the round (stale cleanup, plan); false when that failed.
    async fn start_round(&self) -> bool {
        let log = self.log.clone();
        let started = blocking(move || Round::start(&log)).await;
        let mut st = self.state.lock();
        st.round_started = Some(Instant::now());
        let ok = started.is_ok();
        st.round = Some(started.unwrap_or_else(Round::failed));
        if ok {
            st.phase = Phase::Copying;
        }
        ok
    }

    /// Runs the round's next copy (one per turn, so the partition's copies never overlap),
    /// within the copy quota and deadline, and records it. Once the copies are done (the plan
    /// ended, or a copy failed), the next turn applies retention.
    async fn copy_next(&self, shared: &Shared) {
        let launch = {
            let mut st = self.state.lock();
            st.round.as_mut().and_then(|r| r.next_launch(&self.log, 1))
        };
        if let Some(launch) = launch {
            let base_seq = launch.base_seq();
            let limits = CopyLimits {
                deadline: Some(shared.config.copy_deadline),
                quota: shared.copy_quota.clone(),
                cancel: Some(shared.cancel.subscribe()),
            };
            let outcome = self.log.copy(launch, limits).await;
            let round = self.state.lock().round.take();
            let log = self.log.clone();
            let settled = blocking(move || {
                let mut round = round.ok_or(Error::Service(crate::error::ServiceError::Task(
                    "a turn lost its round".into(),
                )))?;
                round.complete(base_seq, outcome);
                round.settle(&log);
                Ok(round)
            })
            .await;
            self.state.lock().round = Some(settled.unwrap_or_else(Round::failed));
        }
        let mut st = self.state.lock();
        if st.round.as_ref().is_none_or(Round::copying_done) {
            st.phase = Phase::Retention;
        }
    }

    /// Whole-log and local retention within the delete deadline, then the partition's gauges.
    async fn retention(&self, shared: &Shared) {
        let log = self.log.clone();
        let mut handle = tokio::task::spawn_blocking(move || {
            let result = round::retention(&log);
            crate::metrics::publish_partition(&*log);
            result
        });
        let deadline = shared.config.delete_deadline;
        let outcome = tokio::time::timeout(deadline, &mut handle).await;
        let mut st = self.state.lock();
        let st = &mut *st;
        let report = st
            .round
            .get_or_insert_with(|| {
                Round::failed(Error::Service(crate::error::ServiceError::Task(
                    "a turn lost its round".into(),
                )))
            })
            .report_mut();
        match outcome {
            Ok(Ok(Ok(r))) => report.merge(r),
            Ok(Ok(Err(e))) => report.failures.push(e),
            Ok(Err(join)) => {
                report
                    .failures
                    .push(Error::Service(crate::error::ServiceError::Task(
                        join.to_string(),
                    )))
            }
            Err(_) => {
                st.lingering = Some(handle);
                report.failures.push(Error::Service(
                    crate::error::ServiceError::DeleteDeadlineExceeded {
                        partition: self.log.topic_id_partition().clone(),
                        deadline,
                    },
                ));
            }
        }
    }

    /// Ends the round: records it (metrics, events) and resets the plan.
    fn finish_round(&self) -> TurnEnd {
        let tp = self.log.topic_id_partition();
        let mut st = self.state.lock();
        let report = st.round.take().map(Round::into_report).unwrap_or_default();
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
