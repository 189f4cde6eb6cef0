//! One copy of a round, as every driver runs it: the check before the copy, the copy quota,
//! the attempt recorded (`CopySegmentStarted`), the upload — on the calling thread
//! ([`TieredLog::copy_blocking`]) or on Tokio's blocking pool within a deadline
//! ([`TieredLog::copy`]) — and its [`Outcome`]. The finish is the round's
//! ([`Round::settle`](super::Round::settle)), in seq order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_remote_storage::{CustomMetadata, RemoteLogSegmentMetadata};
use krabka_storage::SegmentInfo;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::blocking;
use crate::error::Error;
use crate::metrics::{self as m, time};
use crate::quota::ByteRateQuota;
use crate::tiered::TieredLog;
use crate::verify::verify_for_copy;

type Meta = RemoteLogSegmentMetadata;

/// How one copy ended, before the round records it.
pub(crate) enum Outcome {
    /// Checked and uploaded: its attempt, the custom metadata to record with its finish, and
    /// when it was launched.
    Uploaded(Box<(Meta, Option<CustomMetadata>, Instant)>),
    /// The segment (this base seq) failed its check: nothing of its copy was begun.
    Refused(u64, Error),
    /// An older copy of the round failed first: nothing was begun.
    Skipped,
    /// Recording the attempt or the upload failed, or the upload outlived its deadline: the
    /// attempt when it is to be removed now (`None` when none was recorded, or when an
    /// abandoned upload still runs and removes it itself when its call returns), and the error.
    Failed(Box<(Option<Meta>, Error)>),
}

impl Outcome {
    fn failed(meta: Option<Meta>, e: Error) -> Self {
        Outcome::Failed(Box::new((meta, e)))
    }

    /// A copy whose thread or task ended without an outcome (it panicked, or was cancelled).
    pub(crate) fn lost(what: String) -> Self {
        Outcome::failed(None, Error::Service(crate::error::ServiceError::Task(what)))
    }
}

/// A copy the round hands its driver: the segment, its event time (taken in plan order) and
/// the round's halt mark.
pub(crate) struct Launch {
    seg: SegmentInfo,
    at: i64,
    halt: Arc<AtomicU64>,
    launched: Instant,
}

impl Launch {
    pub(super) fn new(seg: SegmentInfo, at: i64, halt: Arc<AtomicU64>) -> Self {
        Self {
            seg,
            at,
            halt,
            launched: Instant::now(),
        }
    }

    /// The first seq of the segment to copy.
    pub(crate) fn base_seq(&self) -> u64 {
        self.seg.base_seq
    }

    /// Whether an older copy of the round failed (or the round stopped).
    fn older_failed(&self) -> bool {
        self.halt.load(Ordering::Acquire) < self.seg.base_seq
    }

    /// Marks the round failed at this segment: younger copies begin nothing more.
    fn halt_here(&self) {
        self.halt.fetch_min(self.seg.base_seq, Ordering::AcqRel);
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "tiering_copy",
            base_seq = self.seg.base_seq,
            last_seq = self.seg.last_seq,
            bytes = self.seg.size
        )
    }
}

/// What bounds a copy on the Tokio runtime.
#[derive(Clone, Default)]
pub(crate) struct CopyLimits {
    /// The upload is abandoned past it (see [`TieredLog::copy`]).
    pub(crate) deadline: Option<Duration>,
    /// Charged with the segment's bytes before the attempt is recorded.
    pub(crate) quota: Option<Arc<ByteRateQuota>>,
    /// The upload is abandoned when it turns true (a service shutting down).
    pub(crate) cancel: Option<watch::Receiver<bool>>,
}

/// What an upload's blocking task returns: the SPI result, and whether it also cleaned the
/// attempt up because the attempt had been abandoned by then.
type Upload = (Result<Option<CustomMetadata>, Error>, bool);

/// Resolves when `cancel` turns true; never without a receiver (or once its sender is gone).
async fn cancelled(cancel: Option<watch::Receiver<bool>>) {
    match cancel {
        Some(mut rx) => {
            if rx.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

impl TieredLog {
    /// The check before a copy: `None` when the copy goes on, else its outcome (skipped after
    /// an older failure; refused when the segment is damaged, which retention must not pass
    /// from now on, whatever else the round does).
    fn check_launch(&self, launch: &Launch) -> Option<Outcome> {
        if launch.older_failed() {
            return Some(Outcome::Skipped);
        }
        if let Err(e) = verify_for_copy(&launch.seg) {
            self.block_at(launch.seg.base_seq);
            launch.halt_here();
            return Some(Outcome::Refused(launch.seg.base_seq, e));
        }
        None
    }

    /// Records the attempt (`CopySegmentStarted`, after the writer-epoch check), unless an
    /// older copy failed meanwhile.
    fn begin_launch(&self, launch: &Launch) -> Result<Meta, Outcome> {
        if launch.older_failed() {
            return Err(Outcome::Skipped);
        }
        self.begin_copy(&launch.seg, launch.at).map_err(|e| {
            launch.halt_here();
            Outcome::failed(None, e)
        })
    }

    /// The outcome of an upload of `meta` that returned `result`.
    fn uploaded(
        launch: &Launch,
        meta: Meta,
        result: Result<Option<CustomMetadata>, Error>,
    ) -> Outcome {
        match result {
            Ok(custom) => Outcome::Uploaded(Box::new((meta, custom, launch.launched))),
            Err(e) => {
                launch.halt_here();
                Outcome::failed(Some(meta), e)
            }
        }
    }

    /// One copy on the calling thread, without a deadline: check, record, upload.
    pub(crate) fn copy_blocking(&self, launch: &Launch) -> Outcome {
        let _span = launch.span().entered();
        if let Some(outcome) = self.check_launch(launch) {
            return outcome;
        }
        let meta = match self.begin_launch(launch) {
            Ok(meta) => meta,
            Err(outcome) => return outcome,
        };
        let result = self.upload(&meta, &launch.seg);
        Self::uploaded(launch, meta, result)
    }

    /// One copy on the Tokio runtime: the check and the record on the blocking pool, the quota
    /// wait on the timer (holding no thread), then the upload on the blocking pool, abandoned
    /// when it runs past `limits.deadline` or `limits.cancel` turns true. An abandoned
    /// upload's attempt is not stale while its call runs; the thread that ran it deletes its
    /// objects as soon as the call returns (no runtime needs to be alive then).
    pub(crate) async fn copy(self: &Arc<Self>, launch: Launch, limits: CopyLimits) -> Outcome {
        let span = launch.span();
        self.copy_in_span(launch, limits).instrument(span).await
    }

    async fn copy_in_span(self: &Arc<Self>, launch: Launch, limits: CopyLimits) -> Outcome {
        let launch = Arc::new(launch);
        let (this, l) = (self.clone(), launch.clone());
        match blocking(move || Ok(this.check_launch(&l))).await {
            Ok(None) => {}
            Ok(Some(outcome)) => return outcome,
            Err(e) => {
                launch.halt_here();
                return Outcome::failed(None, e);
            }
        }
        if let Some(q) = &limits.quota {
            let waited = q.acquire(launch.seg.size).await;
            if !waited.is_zero() {
                time(m::COPY_THROTTLE_SECONDS, &self.tp, waited);
            }
        }
        let (this, l) = (self.clone(), launch.clone());
        let meta = match blocking(move || Ok(this.begin_launch(&l))).await {
            Ok(Ok(meta)) => meta,
            Ok(Err(outcome)) => return outcome,
            Err(e) => {
                launch.halt_here();
                return Outcome::failed(None, e);
            }
        };
        let (this, l, m) = (self.clone(), launch.clone(), meta.clone());
        let gave_up = Arc::new(AtomicBool::new(false));
        let flag = gave_up.clone();
        let mut upload = tokio::task::spawn_blocking(move || {
            let result = this.upload(&m, &l.seg);
            let cleaned = flag.load(Ordering::Acquire);
            if cleaned {
                this.discard_after_failure(&m);
                this.abandoned
                    .lock()
                    .remove(&m.remote_log_segment_id().id());
            }
            (result, cleaned)
        });
        let deadline = limits.deadline.unwrap_or(Duration::MAX);
        let outcome = tokio::select! {
            r = tokio::time::timeout(deadline, &mut upload) => r,
            () = cancelled(limits.cancel) => tokio::time::timeout(Duration::ZERO, &mut upload).await,
        };
        match outcome {
            Ok(Ok((result, _))) => Self::uploaded(&launch, meta, result),
            Ok(Err(join)) => {
                launch.halt_here();
                Outcome::failed(
                    Some(meta),
                    Error::Service(crate::error::ServiceError::Task(join.to_string())),
                )
            }
            Err(_elapsed) => {
                self.abandoned
                    .lock()
                    .insert(meta.remote_log_segment_id().id());
                gave_up.store(true, Ordering::Release);
                launch.halt_here();
                let e = Error::CopyDeadlineExceeded {
                    segment: meta.remote_log_segment_id().clone(),
                    base_seq: launch.seg.base_seq,
                    last_seq: launch.seg.last_seq,
                    deadline,
                };
                self.abandon(meta, upload);
                Outcome::failed(None, e)
            }
        }
    }

    /// Leaves a late copy running; when its call returns, its objects are deleted. Until then
    /// the attempt is not treated as stale (deleting under a running upload would orphan what
    /// it writes afterwards).
    fn abandon(self: &Arc<Self>, meta: Meta, upload: JoinHandle<Upload>) {
        let uuid = meta.remote_log_segment_id().id();
        let this = self.clone();
        let task = tokio::spawn(async move {
            if let Ok((_, true)) = upload.await {
                return;
            }
            let inner = this.clone();
            let _ = blocking(move || {
                inner.discard_after_failure(&meta);
                Ok(())
            })
            .await;
            this.abandoned.lock().remove(&uuid);
        });
        let mut tasks = self.abandoned_tasks.lock();
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Forgets abandoned copies whose cleanup has finished.
    pub(crate) fn prune_abandoned(&self) {
        self.abandoned_tasks.lock().retain(|t| !t.is_finished());
    }

    /// Waits for abandoned copies' cleanups, each at most one copy deadline.
    pub(crate) async fn wait_for_abandoned(&self) {
        let tasks: Vec<_> = std::mem::take(&mut *self.abandoned_tasks.lock());
        let deadline = self.config.copy_deadline;
        for task in tasks {
            if tokio::time::timeout(deadline, task).await.is_err() {
                tracing::warn!(partition = %self.tp,
                    "an abandoned copy is still running at shutdown; the next open cleans it up");
            }
        }
    }
}
