//! The durable remote log metadata: [`DurableRemoteLogMetadataManager`], a
//! [`RemoteLogMetadataManager`](crate::RemoteLogMetadataManager) that appends every event (in
//! the SPI's [`event`](krabka_remote_storage::metadata::event) encoding) to a
//! `krabka_storage::Log` and rebuilds its state on open, so the metadata survives a crash
//! exactly like the data.
//!
//! It keeps its segments in a [`SharedMetadataState`](crate::SharedMetadataState), as
//! [`InMemoryRemoteLogMetadataManager`](crate::InMemoryRemoteLogMetadataManager) does: both
//! answer the reads of the trait with the same code; this one only adds how changes are
//! written.
//!
//! - `manager` — the manager and its options;
//! - `open` — opening a directory: lock, current generation, replay, clean-up;
//! - `read_only` — reading a directory as `open` would find it, changing nothing, into a
//!   manager that refuses writes;
//! - `generation` — the `gen-<n>` directories, the `CURRENT` pointer and generation records;
//! - `replay` — reading a generation's log back strictly;
//! - `compact` — writing the live segments to the next generation (and recovery's install);
//! - `error` — a storage error as the SPI's, damage as a [`MetadataError`](crate::MetadataError).

mod compact;
mod error;
mod generation;
mod manager;
mod open;
mod read_only;
mod replay;
#[cfg(test)]
mod tests;

pub use manager::{DurableOptions, DurableRemoteLogMetadataManager, TornEventCut};
pub use read_only::{ReadOnlyRemoteLogMetadataManager, TornEventFound};
