//! The remote tier of krabka: the [`RemoteStorageManager`] SPI every backend implements, its
//! data model (modeled on Kafka's KIP-405 storage API), and the errors callers act on.
//!
//! A leaf crate: it depends on no other krabka crate, so a backend depends on it alone. The
//! metadata managers (in memory, and durable) and the recovery that installs into the durable
//! one and sets up the local log live in `krabka-remote-metadata`.
//!
//! - [`RemoteStorageManager`] — copy, fetch a byte range, fetch an index, delete.
//! - [`RemoteLogSegmentMetadata`] and its lifecycle [`RemoteLogSegmentState`].
//! - [`layout`] — the object layout shared by the filesystem and S3 backends.
//! - [`metadata`] — the [`RemoteLogMetadataManager`](metadata::RemoteLogMetadataManager) trait
//!   and the [`event`](metadata::event) encoding the durable manager stores and every manifest
//!   embeds.
//! - [`manifest`] — the self-describing manifest every copy writes (in progress first,
//!   complete last), and
//!   [`recovery`] — the [`RemoteSegmentLister`](recovery::RemoteSegmentLister) backends
//!   implement, and the read-only [`scan`](recovery::scan) that chooses, from the manifests
//!   alone, the segments that form a partition's log.
//! - [`ownership`] — the partition's identity record and writer epochs (create-only writes
//!   through [`OwnershipStore`](ownership::OwnershipStore)), and the lineage that decides
//!   which writer's copies count.
//! - [`head`] — the partition head a writer rewrites whenever its finished segments change,
//!   so a read replica refreshes with one conditional read, and the tail chains holding its
//!   records not yet in a finished segment.
//! - [`tail`] — tail objects: the chains of small create-only objects a writer uploads while a
//!   segment is active, their format, and the fence that closes a chain.
//! - `testkit` (feature `testkit`) — the conformance kit every backend runs, and a
//!   fault-injecting wrapper for the layers above.
//! - [`RemoteStorageError`] — one error enum; [`RemoteStorageError::is_retriable`] tells callers
//!   whether to try again.
//!
//! ```
//! use krabka_remote_storage::*;
//!
//! let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "orders", 0);
//! let id = RemoteLogSegmentId::generate(tp);
//! let started = RemoteLogSegmentMetadata::builder(id.clone(), 0, 99)
//!     .segment_size_in_bytes(1 << 20)
//!     .build()?;
//! let finished = started.apply(&RemoteLogSegmentMetadataUpdate::to_state(
//!     id,
//!     RemoteLogSegmentState::CopySegmentFinished,
//!     0,
//! ))?;
//! assert_eq!(finished.state(), RemoteLogSegmentState::CopySegmentFinished);
//! # Ok::<(), RemoteStorageError>(())
//! ```

mod error;
pub mod head;
pub mod layout;
mod manager;
pub mod manifest;
pub mod metadata;
mod model;
pub mod ownership;
pub mod recovery;
pub mod tail;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use error::{BoxError, RemoteStorageError};
pub use manager::{RemoteStorageManager, checked_range};
pub use model::{
    CustomMetadata, DEFAULT_CUSTOM_METADATA_MAX_BYTES, IndexSource, IndexType, LOG_SUFFIX,
    LogSegmentData, MAX_TOPIC_NAME_LEN, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataBuilder, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState,
    TopicIdPartition, now_ms, validate_topic_name,
};
pub use uuid::Uuid;
