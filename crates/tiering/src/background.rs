//! The tokio background task: a round of the engine ([`TieredLog::run_round`], in
//! `crate::round`) every interval, graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Error;
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
    /// [`ServiceError::Task`](crate::ServiceError::Task) when the task panicked.
    pub async fn shutdown(self) -> Result<(), Error> {
        // The receiver lives in the task; a send error means it already ended.
        let _ = self.stop.send(true);
        self.task
            .await
            .map_err(|e| Error::Service(crate::error::ServiceError::Task(e.to_string())))
    }
}

impl TieredLog {
    /// Starts the background task: a round ([`run_round`](Self::run_round)) every `interval`
    /// (the first one right away) until [`TieringHandle::shutdown`]. Copies run up to
    /// [`copy_concurrency`](crate::TieringConfig::copy_concurrency) at a time, each bounded by
    /// [`copy_deadline`](crate::TieringConfig::copy_deadline), and finish in seq order. Round
    /// failures are logged with `tracing` and retried next round.
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
