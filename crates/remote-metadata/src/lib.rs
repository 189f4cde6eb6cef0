//! The remote log metadata of krabka: which segments of a partition are in the remote tier, and
//! in what state, kept by a [`RemoteLogMetadataManager`] (the SPI's trait, re-exported here).
//!
//! - [`DurableRemoteLogMetadataManager`] — every event (in the SPI's
//!   [`event`](krabka_remote_storage::metadata::event) encoding) appended to a crash-safe
//!   `krabka_storage::Log`, replayed on open, compacted into snapshot generations behind a
//!   `CURRENT` pointer; damage in its files is a [`MetadataError`] naming the file.
//!   [`open_read_only`](DurableRemoteLogMetadataManager::open_read_only) reads a directory as
//!   its open would find it without changing a byte, into a
//!   [`ReadOnlyRemoteLogMetadataManager`] that refuses writes.
//! - [`InMemoryRemoteLogMetadataManager`] — for tests and setups that rebuild the metadata some
//!   other way.
//! - [`MetadataState`] / [`SharedMetadataState`] — the I/O-free bookkeeping both managers
//!   answer their reads from (validate, then commit).
//! - [`recovery`] — [`recover`](recovery::recover): rebuild a partition's durable metadata (and
//!   start its empty local log after the remote end) from the remote tier alone, using the
//!   manifests every copy writes.
//!
//! It knows the local log (`krabka-storage`) and the SPI, never a backend nor the tiered log:
//! `krabka-tiering` drives it, and adds the local log's binding to its remote to recovery
//! (`krabka_tiering::recovery`).
//!
//! ```
//! use krabka_remote_metadata::{DurableRemoteLogMetadataManager, RemoteLogMetadataManager};
//! use krabka_remote_storage::*;
//!
//! let dir = tempfile::tempdir()?;
//! let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
//! let id = RemoteLogSegmentId::generate(tp.clone());
//! let m = RemoteLogSegmentMetadata::builder(id.clone(), 0, 99).build()?;
//! {
//!     let rlmm = DurableRemoteLogMetadataManager::open(dir.path())?;
//!     rlmm.add_remote_log_segment_metadata(&m)?;
//!     rlmm.update_remote_log_segment_metadata(&RemoteLogSegmentMetadataUpdate::to_state(
//!         id,
//!         RemoteLogSegmentState::CopySegmentFinished,
//!         0,
//!     ))?;
//! }
//! let reopened = DurableRemoteLogMetadataManager::open(dir.path())?;
//! assert_eq!(reopened.highest_remote_offset(&tp)?, Some(99));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod durable;
mod error;
mod memory;
pub mod recovery;
mod shared;
mod state;

pub use durable::{
    DurableOptions, DurableRemoteLogMetadataManager, ReadOnlyRemoteLogMetadataManager,
    TornEventCut, TornEventFound,
};
pub use error::MetadataError;
pub use krabka_remote_storage::metadata::RemoteLogMetadataManager;
pub use memory::{DROPPED_IDS_SLACK, InMemoryRemoteLogMetadataManager};
pub use state::{MetadataState, SharedMetadataState};
