//! Remote log metadata: which segments of a partition are in the remote tier, and in what state.
//!
//! [`RemoteLogMetadataManager`] is the interface the tiering layer drives; [`MetadataState`] is
//! the pure, I/O-free bookkeeping every implementation shares, and [`SharedMetadataState`] its
//! locked form: a type implementing [`StateBackedManager`] (only the two writes) gets the
//! whole trait, its reads answered from that one state.
//! - [`InMemoryRemoteLogMetadataManager`] — for tests and single-process setups;
//! - the durable manager (`krabka_tiering::metadata::DurableRemoteLogMetadataManager`) appends
//!   every event, in the [`event`] encoding, to a local log and rebuilds its state on open, so
//!   the metadata survives a crash exactly like the data.

pub mod event;
mod memory;
mod shared;
mod state;

pub use memory::{DROPPED_IDS_SLACK, InMemoryRemoteLogMetadataManager};
pub use shared::StateBackedManager;
pub use state::{MetadataState, SharedMetadataState};

use crate::error::RemoteStorageError;
use crate::model::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, TopicIdPartition,
};

/// Tracks the remote segments of every partition through their lifecycle
/// ([`RemoteLogSegmentState`](crate::RemoteLogSegmentState)).
///
/// Synchronous, `Send + Sync` and dyn compatible: layers above hold an
/// `Arc<dyn RemoteLogMetadataManager>`.
///
/// ```
/// use krabka_remote_storage::*;
/// use krabka_remote_storage::metadata::*;
///
/// let rlmm = InMemoryRemoteLogMetadataManager::new();
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let id = RemoteLogSegmentId::generate(tp.clone());
/// let m = RemoteLogSegmentMetadata::builder(id.clone(), 0, 99).segment_size_in_bytes(10).build()?;
/// rlmm.add_remote_log_segment_metadata(&m)?;
/// assert_eq!(rlmm.remote_log_segment_metadata(&tp, 50)?, None); // not finished yet
/// rlmm.update_remote_log_segment_metadata(&RemoteLogSegmentMetadataUpdate::to_state(
///     id, RemoteLogSegmentState::CopySegmentFinished, 0))?;
/// assert_eq!(rlmm.highest_remote_offset(&tp)?, Some(99));
/// assert_eq!(rlmm.remote_log_size(&tp)?, 10);
/// # Ok::<(), RemoteStorageError>(())
/// ```
pub trait RemoteLogMetadataManager: Send + Sync {
    /// Records a new segment.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidStateTransition`] when its state is not
    /// `CopySegmentStarted`; [`RemoteStorageError::InvalidArgument`] when the id is already
    /// known (or was known and dropped); a storage error for a durable manager.
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError>;

    /// Applies a state change (validated by [`RemoteLogSegmentMetadata::apply`]) and returns
    /// the new metadata. A segment reaching `DeleteSegmentFinished` is dropped from listings
    /// and lookups.
    ///
    /// # Errors
    /// [`RemoteStorageError::SegmentNotFound`] for an unknown (or dropped) segment,
    /// [`RemoteStorageError::InvalidStateTransition`] for a move the lifecycle forbids.
    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError>;

    /// The `CopySegmentFinished` segment containing `offset`, if any. When several overlap (a
    /// re-copy after a leader change), the one with the highest start offset, then the latest
    /// event, wins.
    ///
    /// `Ok(None)` covers both "nothing there" and "a copy of it is in flight"; callers that must
    /// tell them apart use [`segment_for_offset_ready`](Self::segment_for_offset_ready).
    ///
    /// # Errors
    /// Implementation specific (the provided ones do not fail, and never return
    /// [`RemoteStorageError::MetadataNotReady`] here).
    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError>;

    /// Like [`remote_log_segment_metadata`](Self::remote_log_segment_metadata), but tells "not
    /// ready" from "nothing there":
    /// - `Ok(Some(m))`: the `CopySegmentFinished` segment containing `offset` (same choice);
    /// - `Err(MetadataNotReady)`: no finished segment contains `offset`, but one still in
    ///   `CopySegmentStarted` does — a copy is in flight; ask again later
    ///   ([`RemoteStorageError::is_retriable`] is true);
    /// - `Ok(None)`: no segment contains it, or only ones being deleted (`DeleteSegmentStarted`).
    ///
    /// The provided default derives the answer from
    /// [`remote_log_segment_metadata`](Self::remote_log_segment_metadata) and
    /// [`list_remote_log_segments`](Self::list_remote_log_segments); both managers of this crate
    /// answer it directly.
    ///
    /// ```
    /// use krabka_remote_storage::*;
    /// use krabka_remote_storage::metadata::*;
    ///
    /// let rlmm = InMemoryRemoteLogMetadataManager::new();
    /// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
    /// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 99).build()?;
    /// rlmm.add_remote_log_segment_metadata(&m)?;
    /// let err = rlmm.segment_for_offset_ready(&tp, 50).unwrap_err();
    /// assert!(matches!(err, RemoteStorageError::MetadataNotReady { .. }));
    /// assert_eq!(rlmm.segment_for_offset_ready(&tp, 100)?, None); // nothing there
    /// # Ok::<(), RemoteStorageError>(())
    /// ```
    ///
    /// # Errors
    /// [`RemoteStorageError::MetadataNotReady`] as above; otherwise as
    /// [`remote_log_segment_metadata`](Self::remote_log_segment_metadata).
    fn segment_for_offset_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        if let Some(found) = self.remote_log_segment_metadata(tp, offset)? {
            return Ok(Some(found));
        }
        let segments = self.list_remote_log_segments(tp)?;
        match segments.iter().find(|m| {
            m.state() == crate::RemoteLogSegmentState::CopySegmentStarted && m.contains(offset)
        }) {
            Some(m) => Err(state::not_ready(tp, offset, m)),
            None => Ok(None),
        }
    }

    /// All of a partition's segments not yet `DeleteSegmentFinished`, ordered by start offset,
    /// then event time (then segment id, so the order is total).
    ///
    /// # Errors
    /// Implementation specific (the provided ones do not fail).
    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError>;

    /// The highest end offset among `CopySegmentFinished` segments.
    ///
    /// # Errors
    /// Implementation specific (the provided ones do not fail).
    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError>;

    /// The sum of `segment_size_in_bytes` over `CopySegmentFinished` segments.
    ///
    /// # Errors
    /// Implementation specific (the provided ones do not fail).
    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError>;

    /// One segment by id, in any state except dropped.
    ///
    /// # Errors
    /// Implementation specific (the provided ones do not fail).
    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError>;
}
