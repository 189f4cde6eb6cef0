//! Two drivers of the round engine: [`TieredLog::run_once`] runs the copies on scoped threads,
//! [`TieredLog::run_round`] (and so [`TieredLog::spawn`]) on Tokio tasks with the copy
//! deadline. The service's turns are the third (`service/partition.rs`).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;

use tokio::task::JoinSet;

use super::{CopyLimits, Outcome, Round, blocking, retention};
use crate::error::Error;
use crate::stats::TieringReport;
use crate::tiered::TieredLog;

impl TieredLog {
    /// One round on the calling thread: clean stale attempts, copy eligible segments, apply
    /// whole-log retention to the remote tier, then local retention. Up to
    /// [`copy_concurrency`](crate::TieringConfig::copy_concurrency) copies run at a time on
    /// scoped threads, each checking its segment before its upload begins; the call waits for
    /// every copy (there is no copy deadline here: [`spawn`](Self::spawn) and
    /// [`TieringService`](crate::TieringService) have one).
    ///
    /// Copies finish in seq order, in every engine: a copy is recorded finished only after
    /// every older copy of the round was, so the highest finished seq only grows and no
    /// finished segment lies above an unfinished one. A damaged segment begins no upload and
    /// nothing after it is copied: when a segment fails its check or its copy, the younger
    /// copies still running are discarded (their attempts deleted) and copied again next round
    /// (docs/tiering.md, "The round engine").
    ///
    /// Failures of individual copies and deletes are in [`TieringReport::failures`] and are
    /// retried next round.
    ///
    /// # Errors
    /// [`ServiceError::RoundInProgress`](crate::ServiceError::RoundInProgress) when another round runs; [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) when a later
    /// writer took the partition over; [`Error::Metadata`] when the metadata manager cannot
    /// list segments; [`Error::Storage`] when local retention fails.
    pub fn run_once(&self) -> Result<TieringReport, Error> {
        let _guard = self.begin_round()?;
        let mut round = Round::start(self)?;
        let width = self.config.copy_concurrency.max(1);
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::channel();
            let mut running = 0usize;
            let launch_all = |round: &mut Round, running: &mut usize| {
                while let Some(launch) = round.next_launch(self, width) {
                    let tx = tx.clone();
                    *running += 1;
                    scope.spawn(move || {
                        let outcome =
                            catch_unwind(AssertUnwindSafe(|| self.copy_blocking(&launch)))
                                .unwrap_or_else(|_| Outcome::lost("a copy thread panicked".into()));
                        // The receiver lives until every copy reported.
                        let _ = tx.send((launch.base_seq(), outcome));
                    });
                }
            };
            launch_all(&mut round, &mut running);
            while running > 0 {
                // Never disconnected: this scope holds a sender.
                let Ok((base_seq, outcome)) = rx.recv() else {
                    break;
                };
                running -= 1;
                round.complete(base_seq, outcome);
                // The freed slot takes the next copy before the finishes are recorded (metadata
                // writes): a copy launched now that an older finish then fails is discarded,
                // as any copy running at that failure is.
                launch_all(&mut round, &mut running);
                round.settle(self);
                // A settled round may have room again (it launches nothing once stopped).
                launch_all(&mut round, &mut running);
            }
        });
        let mut report = round.into_report();
        report.merge(retention(self)?);
        Ok(report)
    }

    /// One round on the Tokio runtime: [`run_once`](Self::run_once)'s round, its copies on
    /// Tokio tasks and the blocking pool, each bounded by
    /// [`copy_deadline`](crate::TieringConfig::copy_deadline) (a copy past it is abandoned and
    /// cleaned up when its call returns); finished in seq order likewise.
    ///
    /// # Errors
    /// As [`run_once`](Self::run_once); [`ServiceError::Task`](crate::ServiceError::Task) when a blocking step panicked.
    pub async fn run_round(self: &Arc<Self>) -> Result<TieringReport, Error> {
        let _guard = self.begin_round()?;
        let this = self.clone();
        let mut round = blocking(move || Round::start(&this)).await?;
        let limits = CopyLimits {
            deadline: Some(self.config.copy_deadline),
            ..CopyLimits::default()
        };
        let width = self.config.copy_concurrency.max(1);
        let mut copies = JoinSet::new();
        let mut launched = HashMap::new();
        let launch_all = |round: &mut Round,
                          copies: &mut JoinSet<Outcome>,
                          launched: &mut HashMap<tokio::task::Id, u64>| {
            while let Some(launch) = round.next_launch(self, width) {
                let base_seq = launch.base_seq();
                let (this, limits) = (self.clone(), limits.clone());
                let task = copies.spawn(async move { this.copy(launch, limits).await });
                launched.insert(task.id(), base_seq);
            }
        };
        loop {
            launch_all(&mut round, &mut copies, &mut launched);
            let Some(joined) = copies.join_next_with_id().await else {
                break;
            };
            let (id, outcome) = match joined {
                Ok((id, outcome)) => (id, outcome),
                Err(e) => (e.id(), Outcome::lost(e.to_string())),
            };
            let Some(base_seq) = launched.remove(&id) else {
                continue;
            };
            round.complete(base_seq, outcome);
            // As in `run_once`: the freed slot takes the next copy before the finishes are
            // recorded.
            launch_all(&mut round, &mut copies, &mut launched);
            let this = self.clone();
            round = blocking(move || {
                round.settle(&this);
                Ok(round)
            })
            .await?;
        }
        let this = self.clone();
        let mut report = round.into_report();
        report.merge(blocking(move || retention(&this)).await?);
        Ok(report)
    }
}
