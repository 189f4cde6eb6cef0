//! The remote log metadata a [`TieredLog`](crate::TieredLog) records its copies in: the managers
//! of `krabka-remote-metadata`, re-exported.
//!
//! - [`DurableRemoteLogMetadataManager`] — every event appended to a crash-safe local log,
//!   compacted into snapshot generations; damage in its files is a [`MetadataError`] naming the
//!   file (found in a [`RemoteStorageError`](krabka_remote_storage::RemoteStorageError) with
//!   [`MetadataError::find`]).
//! - [`InMemoryRemoteLogMetadataManager`] — for tests and setups that rebuild the metadata some
//!   other way.

pub use krabka_remote_metadata::{
    DurableOptions, DurableRemoteLogMetadataManager, InMemoryRemoteLogMetadataManager,
    MetadataError, ReadOnlyRemoteLogMetadataManager, RemoteLogMetadataManager, TornEventCut,
    TornEventFound,
};
