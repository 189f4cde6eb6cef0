//! A follower: a tiered log whose local log another process's writer also holds (the user
//! replicates the records), which copies nothing and learns from the bucket, through a
//! [`ReadReplica`], which of its local segments are safely remote (Kafka's follower trimming
//! its local log below the highest offset in remote storage).

use std::sync::Arc;

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_storage::Log;

use super::TieredLog;
use crate::config::TieringConfig;
use crate::error::Error;
use crate::replica::ReadReplica;
use crate::stats::TieringReport;

impl TieredLog {
    /// Opens `log` as a follower of the partition `replica` serves: reads span the local log
    /// and the remote segments the replica serves; rounds ([`run_once`](Self::run_once),
    /// [`spawn`](Self::spawn), a `TieringService`) refresh the replica, then delete the local
    /// segments below [`TieringConfig::local_retention_bytes`] / `local_retention_ms` that a
    /// finished remote copy covers, never one the writer has not finished copying. A follower
    /// never copies, never deletes from the remote tier and never writes to the bucket; it
    /// takes the writer's whole-log retention point from the replica.
    ///
    /// An empty local log continues after the remote end (as `recover` does); a local log that
    /// does not continue the remote tier is refused, as [`new`](Self::new) refuses it.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn open_follower(
        log: Log,
        replica: Arc<ReadReplica>,
        config: TieringConfig,
    ) -> Result<Self, Error> {
        let rlmm: Arc<dyn RemoteLogMetadataManager> = replica.metadata();
        let mut this = Self::new(
            log,
            replica.rsm.clone(),
            rlmm,
            replica.topic_id_partition().clone(),
            config,
        )?;
        this.follower = Some(replica);
        this.follow_retention_point()?;
        Ok(this)
    }

    /// Whether this log is a follower ([`open_follower`](Self::open_follower)).
    pub fn is_follower(&self) -> bool {
        self.follower.is_some()
    }

    /// A follower's round start: refreshes the replica (a failure is reported, the previous
    /// view kept) and takes the writer's retention point.
    pub(crate) fn follow(&self, report: &mut TieringReport) {
        let Some(replica) = &self.follower else {
            return;
        };
        if let Err(e) = replica.refresh() {
            report.failures.push(e);
        }
        if let Err(e) = self.follow_retention_point() {
            report.failures.push(e);
        }
    }

    /// Raises this log's retention point to the one the replica's view was built with.
    fn follow_retention_point(&self) -> Result<(), Error> {
        let Some(replica) = &self.follower else {
            return Ok(());
        };
        let point = replica.stats().retention_point;
        if point > 0 {
            self.raise_retention_point(point)?;
        }
        Ok(())
    }
}
