//! One log across a local disk tier and a remote tier (S3 or filesystem): copy, retention,
//! transparent reads, caching.
//!
//! A [`TieredLog`] owns a local `krabka_storage::Log`, a
//! [`RemoteStorageManager`](krabka_remote_storage::RemoteStorageManager) and a
//! [`RemoteLogMetadataManager`](metadata::RemoteLogMetadataManager).
//! Appends go to the local log; tiering rounds copy closed segments to the remote tier, delete
//! local segments once their copy is finished, and apply whole-log retention; reads below the
//! local start are served from the remote tier through a byte-bounded cache.
//!
//! - [`PartitionDir`] — a tiered log's directory as a broker opens it: every file of it owned
//!   here, one open path as the partition's writer or read-only (which writes nothing), a
//!   recovery from the bucket, over one [`RemoteTier`] connection; every refusal the `krabka`
//!   command gives (an empty directory over a populated remote, a copied directory, a wrong
//!   remote or topic id, a recovery into a live log) comes from here.
//! - [`TieredLog::run_once`] — one deterministic round, for tests or your own scheduler.
//! - [`TieredLog::spawn`] — a Tokio background task with bounded copy concurrency and a
//!   per-copy deadline, stopped with [`TieringHandle::shutdown`].
//! - [`TieringService`] — many partitions on bounded pools: fair round-robin scheduling,
//!   copy/delete/fetch deadlines, byte-rate quotas, a shared cache, a bounded reader queue.
//!
//!   All three run one round engine: whatever order copies complete in, they are recorded
//!   finished in seq order, and none above a failed one ([`policy::FinishOrder`]).
//! - [`Instrumented`] and [`metrics`] — every backend call and every round reported through
//!   the `metrics` facade and `tracing` spans.
//! - [`TieredLog::read`] and [`TieredLog::seq_for_timestamp`] — reads and timestamp lookups
//!   across both tiers; every read is exact or an error.
//! - [`policy`] — the decisions as pure functions over plain data.
//! - [`metadata`] — the metadata managers of `krabka-remote-metadata`, re-exported: the durable
//!   [`DurableRemoteLogMetadataManager`](metadata::DurableRemoteLogMetadataManager) (every
//!   metadata event appended to a local log, compacted into snapshot generations) and the
//!   in-memory one.
//! - [`recovery`] — [`recover`](recovery::recover): rebuild a partition's durable metadata and
//!   its local log's start from the remote tier alone (`krabka-remote-metadata`), and bind the
//!   recovered directory to its remote.
//!
//! Integrity: a segment is checked (frames, seqs, indexes) before it is copied and a damaged
//! one is never copied nor deleted locally; a local log that does not continue the remote tier
//! is started after the remote end when it is empty and refused otherwise
//! ([`Error::LocalLogMismatch`]), so a seq is never used twice.
//!
//! ```
//! # #[cfg(feature = "fs")] {
//! use std::sync::Arc;
//! use krabka_protocol::Message;
//! use krabka_remote_storage::{TopicIdPartition, Uuid};
//! use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
//! use krabka_storage::Options;
//! use krabka_tiering::{TieredLog, TieringConfig, fs::FsRemoteStorage};
//!
//! let dir = tempfile::tempdir()?;
//! let remote = Arc::new(FsRemoteStorage::new(dir.path().join("remote"))?);
//! let metadata = Arc::new(InMemoryRemoteLogMetadataManager::new());
//! let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
//! // Keep locally only what is not yet remote. `Message::new` stamps the current time, so the
//! // default whole-log retention (7 days) keeps these records.
//! let config = TieringConfig {
//!     local_retention_bytes: Some(0),
//!     ..TieringConfig::default()
//! };
//! let log = TieredLog::open(
//!     dir.path().join("local"),
//!     Options { max_bytes: 256, ..Options::default() },
//!     remote, metadata, tp, config,
//! )?;
//! for i in 0..20 {
//!     log.append(&Message::new(format!("record {i}")))?;
//! }
//! let report = log.run_once()?;
//! assert!(report.segments_copied > 0);
//! assert!(log.local_first_seq() > log.first_seq()?); // older records now live remotely
//! let all = log.read(log.first_seq()?, 100)?;
//! assert_eq!(all.len(), 20);
//! assert_eq!(all[0].message.value, "record 0");
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Backends by feature: `fs` (default) re-exports `krabka-remote-fs` as [`fs`], `s3`
//! re-exports `krabka-remote-s3` as `s3`.

mod background;
mod cache;
mod config;
mod error;
mod fd_limit;
mod instrumented;
mod lost;
pub mod metadata;
pub mod metrics;
pub mod ownership;
pub mod partition;
pub mod policy;
mod quota;
mod read;
pub mod recovery;
pub mod replica;
mod retention_point;
mod round;
mod service;
mod stats;
pub mod tail;
mod tiered;
mod verify;

pub use background::TieringHandle;
pub use cache::{CacheStats, RemoteReadCache};
pub use config::{
    DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_BYTES, DEFAULT_COPY_CONCURRENCY, DEFAULT_COPY_DEADLINE,
    DEFAULT_COPY_THREADS, DEFAULT_DELETE_DEADLINE, DEFAULT_FETCH_DEADLINE,
    DEFAULT_LOCAL_RETENTION_BYTES, DEFAULT_READ_QUEUE, DEFAULT_READ_THREADS, DEFAULT_RETENTION_MS,
    DEFAULT_ROUND_INTERVAL, DEFAULT_WORKER_THREADS, MAX_FETCH_DEADLINE, MAX_SEGMENT_BYTES,
    MIN_CHUNK_BYTES, MIN_MAX_UPLOAD_LAG, SPARE_BLOCKING_THREADS, ServiceConfig, TieringConfig,
    validate_log_options,
};
pub use error::{Error, OwnershipError, ReadError, ServiceError, TailError};
pub use fd_limit::open_files_limit;
pub use instrumented::Instrumented;
pub use lost::{LOST_SEQS_FILE, read as read_lost_seqs};
pub use ownership::{BINDING_FILE, RemoteOwnership};
pub use partition::{Access, PartitionDir, RemoteTier};
pub use quota::ByteRateQuota;
pub use read::engine::{
    DEFAULT_COALESCE_CHUNKS, DEFAULT_READ_BYTES_IN_FLIGHT, DEFAULT_READ_FETCH_THREADS,
    ReadEngineStats, ReadLimits,
};
pub use read::holes::{HoleRead, LostSeqs};
pub use retention_point::{RETENTION_POINT_FILE, read as read_retention_point};
pub use service::{ShutdownReport, TieringService};
pub use stats::{RemoteRequests, TieringReport, TieringStats};
pub use tail::{Durability, TailConfig, TailStats, TailWriter};
pub use tiered::{LocalLogView, TieredLog};

/// The filesystem backend (feature `fs`, on by default).
#[cfg(feature = "fs")]
pub use krabka_remote_fs as fs;

/// The S3 backend (feature `s3`).
#[cfg(feature = "s3")]
pub use krabka_remote_s3 as s3;
