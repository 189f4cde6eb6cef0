//! The tokio background task: periodic rounds, concurrent copies with a deadline, graceful
//! shutdown. Every SPI and metadata call runs on the blocking pool (`spawn_blocking`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use krabka_remote_storage::RemoteLogSegmentMetadata;
use krabka_storage::SegmentInfo;
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::error::Error;
use crate::stats::{TieringReport, bump};
use crate::tiered::TieredLog;

/// Handle of the background task started by [`TieredLog::spawn`].
#[derive(Debug)]
pub struct TieringHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    rounds: Arc<AtomicU64>,
}

impl TieringHandle {
    /// Rounds completed so far (successful or not).
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Acquire)
    }

    /// Stops the task: the round in progress (if any) finishes, then the task waits — at most
    /// one copy deadline — for abandoned copies to return and be cleaned up.
    ///
    /// # Errors
    /// [`Error::Task`] when the task panicked.
    pub async fn shutdown(self) -> Result<(), Error> {
        // The receiver lives in the task; a send error means it already ended.
        let _ = self.stop.send(true);
        self.task.await.map_err(|e| Error::Task(e.to_string()))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}

/// What an upload's blocking task returns: the SPI result, and whether it also cleaned the
/// attempt up because the attempt had been abandoned by then.
type Upload = (
    Result<Option<krabka_remote_storage::CustomMetadata>, Error>,
    bool,
);

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
    /// Starts the background task: a round every `interval` (the first one right away) until
    /// [`TieringHandle::shutdown`]. Copies run up to
    /// [`copy_concurrency`](crate::TieringConfig::copy_concurrency) at a time, each bounded by
    /// [`copy_deadline`](crate::TieringConfig::copy_deadline). Round failures are logged with
    /// `tracing` and retried next round.
    ///
    /// Must be called from within a Tokio runtime.
    pub fn spawn(self: Arc<Self>, interval: Duration) -> TieringHandle {
        let (stop, mut stopped) = watch::channel(false);
        let rounds = Arc::new(AtomicU64::new(0));
        let counter = rounds.clone();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = ticker.tick() => {}
                }
                match self.run_round().await {
                    Ok(report) => {
                        for failure in &report.failures {
                            tracing::warn!(partition = %self.tp, error = %failure, "tiering step failed; retrying next round");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(partition = %self.tp, error = %e, "tiering round failed")
                    }
                }
                counter.fetch_add(1, Ordering::AcqRel);
                if *stopped.borrow() {
                    break;
                }
            }
            self.wait_for_abandoned().await;
        });
        TieringHandle { stop, task, rounds }
    }

    /// One round on the Tokio runtime: like [`run_once`](Self::run_once), but copies run
    /// concurrently (bounded) on the blocking pool, each with the copy deadline.
    ///
    /// # Errors
    /// As [`run_once`](Self::run_once).
    pub async fn run_round(self: &Arc<Self>) -> Result<TieringReport, Error> {
        let _guard = self.begin_round()?;
        self.prune_abandoned();
        let this = self.clone();
        let (mut report, plan) = blocking(move || {
            let mut report = TieringReport::default();
            this.clean_stale(&mut report)?;
            let plan = this.copy_plan(&mut report)?;
            Ok((report, plan))
        })
        .await?;

        let permits = Arc::new(Semaphore::new(self.config.copy_concurrency));
        let mut copies = JoinSet::new();
        for seg in plan {
            let permit = permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|e| Error::Task(e.to_string()))?;
            // Each segment is checked before its copy starts, in order, so copying stops right
            // before a damaged one (copies of older segments may still be running).
            let this = self.clone();
            let checked = seg.clone();
            let check = blocking(move || {
                let mut r = TieringReport::default();
                let result = this.check_before_copy(&checked, &mut r);
                Ok((r.copy_blocked_at, result))
            })
            .await?;
            if let (blocked, Err(e)) = check {
                if let Some(seq) = blocked {
                    report.block_at(seq);
                }
                report.failures.push(e);
                break;
            }
            let this = self.clone();
            let deadline = self.config.copy_deadline;
            // Taken here, in plan order: the copies below may begin in any order.
            let at = self.next_copy_time();
            copies.spawn(async move {
                let result = this.copy_with_deadline(seg, at, deadline, None).await;
                drop(permit);
                result
            });
        }
        while let Some(joined) = copies.join_next().await {
            match joined {
                Ok(Ok(bytes)) => {
                    report.segments_copied += 1;
                    report.bytes_copied += bytes;
                }
                Ok(Err(e)) => report.failures.push(e),
                Err(e) => report.failures.push(Error::Task(e.to_string())),
            }
        }

        let this = self.clone();
        let retention = blocking(move || {
            let mut r = TieringReport::default();
            this.apply_retention(&mut r)?;
            Ok(r)
        })
        .await?;
        report.merge(retention);
        Ok(report)
    }

    /// One copy attempt on the blocking pool, with event time `at`
    /// ([`next_copy_time`](Self::next_copy_time), taken in plan order), abandoned (and
    /// cleaned up once its call returns, so no orphan remains) when it runs past `deadline`
    /// or when `cancel` turns true.
    pub(crate) async fn copy_with_deadline(
        self: &Arc<Self>,
        seg: SegmentInfo,
        at: i64,
        deadline: Duration,
        cancel: Option<watch::Receiver<bool>>,
    ) -> Result<u64, Error> {
        let this = self.clone();
        let seg_for_begin = seg.clone();
        let meta = blocking(move || this.begin_copy(&seg_for_begin, at))
            .await
            .inspect_err(|_| bump(&self.counters.copy_failures, 1))?;
        let this = self.clone();
        let (m, s) = (meta.clone(), seg.clone());
        let gave_up = Arc::new(AtomicBool::new(false));
        let flag = gave_up.clone();
        // An abandoned attempt is cleaned up by the thread that ran it, as soon as its call
        // returns: no runtime needs to be alive then (a service may have shut down).
        let mut upload = tokio::task::spawn_blocking(move || {
            let result = this.upload(&m, &s);
            let cleaned = flag.load(Ordering::Acquire);
            if cleaned {
                this.discard_after_failure(&m);
                this.abandoned
                    .lock()
                    .remove(&m.remote_log_segment_id().id());
            }
            (result, cleaned)
        });
        let outcome = tokio::select! {
            r = tokio::time::timeout(deadline, &mut upload) => r,
            () = cancelled(cancel) => tokio::time::timeout(Duration::ZERO, &mut upload).await,
        };
        let outcome = outcome.map(|joined| joined.map(|(result, _)| result));
        let result = match outcome {
            Ok(Ok(Ok(custom))) => {
                let this = self.clone();
                let m = meta.clone();
                blocking(move || this.finish_copy(&m, custom)).await
            }
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(join)) => Err(Error::Task(join.to_string())),
            Err(_elapsed) => {
                self.abandoned
                    .lock()
                    .insert(meta.remote_log_segment_id().id());
                gave_up.store(true, Ordering::Release);
                self.abandon(meta.clone(), upload);
                bump(&self.counters.copy_failures, 1);
                return Err(Error::CopyDeadlineExceeded {
                    segment: meta.remote_log_segment_id().clone(),
                    base_seq: seg.base_seq,
                    last_seq: seg.last_seq,
                    deadline,
                });
            }
        };
        if result.is_err() {
            bump(&self.counters.copy_failures, 1);
            let this = self.clone();
            let m = meta.clone();
            let _ = blocking(move || {
                this.discard_after_failure(&m);
                Ok(())
            })
            .await;
        }
        result
    }

    /// Leaves a late copy running; when its call returns, its objects are deleted. Until then
    /// the attempt is not treated as stale (deleting under a running upload would orphan what
    /// it writes afterwards).
    fn abandon(self: &Arc<Self>, meta: RemoteLogSegmentMetadata, upload: JoinHandle<Upload>) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Instant;

    use crate::metadata::InMemoryRemoteLogMetadataManager;
    use krabka_protocol::Message;
    use krabka_remote_storage::testkit::{FaultInjecting, Faults, InMemoryRemoteStorage, Method};
    use krabka_remote_storage::{TopicIdPartition, Uuid};
    use krabka_storage::{Options, SyncPolicy};

    use super::*;
    use crate::TieringConfig;

    #[test]
    fn finished_abandoned_copies_are_forgotten() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let stall = Faults::stall(Duration::from_millis(300)).on(&[Method::CopyLogSegmentData]);
        let rsm = Arc::new(FaultInjecting::new(InMemoryRemoteStorage::new(), stall));
        let log = TieredLog::open(
            dir.path(),
            Options {
                max_bytes: 512,
                sync: SyncPolicy::Never,
                ..Options::default()
            },
            rsm.clone(),
            Arc::new(InMemoryRemoteLogMetadataManager::new()),
            TopicIdPartition::new(Uuid::from_u128(7), "t", 0),
            TieringConfig {
                copy_deadline: Duration::from_millis(20),
                ..TieringConfig::default()
            },
        )
        .unwrap();
        let msgs: Vec<Message> = (0..100).map(|i| Message::new(format!("m{i}"))).collect();
        log.append_batch(&msgs).unwrap();
        let log = Arc::new(log);
        rt.block_on(async {
            log.run_round().await.unwrap();
            assert!(!log.abandoned_tasks.lock().is_empty());
            rsm.set_faults(Faults::none());
            let until = Instant::now() + Duration::from_secs(30);
            while !log.abandoned.lock().is_empty() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            // A round that copies nothing (so abandons nothing new) prunes the finished tasks.
            log.set_commit_seq(0);
            log.run_round().await.unwrap();
        });
        assert_eq!(
            log.abandoned_tasks.lock().len(),
            0,
            "finished tasks are kept"
        );
    }
}
