//! What the metrics sample of a tiered log: [`PartitionSample`] takes plain figures, so the
//! conversion lives here, beside the log.

use crate::metrics::{PartitionSample, RemoteSample};

use super::TieredLog;

impl From<&TieredLog> for PartitionSample {
    /// Samples `log`; lists its remote metadata once (blocking), leaving `remote` `None` when
    /// that fails.
    fn from(log: &TieredLog) -> Self {
        let stats = log.stats();
        let local = log.log();
        Self {
            tp: log.topic_id_partition().clone(),
            copy_lag_bytes: stats.copy_lag_bytes,
            copy_lag_segments: stats.copy_lag_segments,
            remote_bytes: stats.remote_bytes,
            local_bytes: stats.local_bytes,
            local_segments: local.segments().len() as u64,
            next_seq: local.next_seq(),
            local_log: local.stats(),
            remote: log.remote_list().ok().map(|list| RemoteSample::of(&list)),
        }
    }
}
