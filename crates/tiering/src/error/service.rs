//! Why the tiering service or a round's driver refused: a round already running, a partition
//! unknown or present, the service stopped, a task or deadline lost.

use std::time::Duration;

/// Why the tiering service or a round's driver refused: a round already running, a partition
/// unknown or present, the service stopped, a task or deadline lost.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// Another tiering round (`run_once`, the background task, or a `TieringService` turn) is
    /// running.
    #[error("a tiering round is already running on this log")]
    RoundInProgress,
    /// A blocking task of the background runner panicked or was cancelled.
    #[error("tiering task failed: {0}")]
    Task(String),
    /// The partition is not in the [`TieringService`](crate::TieringService).
    #[error("partition {0} is not in the tiering service")]
    UnknownPartition(krabka_remote_storage::TopicIdPartition),
    /// The partition is already in the [`TieringService`](crate::TieringService).
    #[error("partition {0} is already in the tiering service")]
    PartitionExists(krabka_remote_storage::TopicIdPartition),
    /// The [`TieringService`](crate::TieringService) is shut down (or shutting down).
    #[error("the tiering service is shut down")]
    ServiceStopped,
    /// Retention of a partition in the [`TieringService`](crate::TieringService) ran past
    /// [`ServiceConfig::delete_deadline`](crate::ServiceConfig::delete_deadline); the partition
    /// is not scheduled again until the deletes return, and the next round finishes them.
    #[error("retention of {partition} exceeded its deadline of {deadline:?}")]
    DeleteDeadlineExceeded {
        /// The partition.
        partition: krabka_remote_storage::TopicIdPartition,
        /// The deadline.
        deadline: Duration,
    },
}
