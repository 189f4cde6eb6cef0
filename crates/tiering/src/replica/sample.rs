//! What the metrics sample of a read replica: [`ReplicaSample`] takes plain figures, so the
//! conversion lives here, beside the replica.

use super::ReplicaStats;
use crate::metrics::ReplicaSample;

impl From<&ReplicaStats> for ReplicaSample {
    fn from(stats: &ReplicaStats) -> Self {
        Self {
            lag_seqs: stats.lag_seqs,
            since_refresh: stats.since_refresh,
            head_age: stats.head_age,
        }
    }
}
