//! Remote log metadata: which segments of a partition are in the remote tier, and in what state.
//!
//! [`RemoteLogMetadataManager`] is the interface the tiering layer drives, and [`event`] the
//! encoding of its changes (every manifest embeds one). The managers live in
//! `krabka-remote-metadata`: an in-memory one for tests, and the durable one
//! (`krabka_remote_metadata::DurableRemoteLogMetadataManager`), which appends every event to a
//! local log and rebuilds its state on open, so the metadata survives a crash exactly like the
//! data.

pub mod event;

use crate::error::RemoteStorageError;
use crate::model::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState, TopicIdPartition,
};

/// Tracks the remote segments of every partition through their lifecycle
/// ([`RemoteLogSegmentState`]).
///
/// Synchronous, `Send + Sync` and dyn compatible: layers above hold an
/// `Arc<dyn RemoteLogMetadataManager>`. `krabka-remote-metadata` implements it (in memory, and
/// durably); its docs show the trait in use.
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
    /// Implementation specific (the managers of `krabka-remote-metadata` do not fail, and never
    /// return [`RemoteStorageError::MetadataNotReady`] here).
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
    /// [`list_remote_log_segments`](Self::list_remote_log_segments), answering
    /// [`not_ready`]; the managers of `krabka-remote-metadata` answer it directly.
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
        match segments
            .iter()
            .find(|m| m.state() == RemoteLogSegmentState::CopySegmentStarted && m.contains(offset))
        {
            Some(m) => Err(not_ready(tp, offset, m)),
            None => Ok(None),
        }
    }

    /// All of a partition's segments not yet `DeleteSegmentFinished`, ordered by start offset,
    /// then event time (then segment id, so the order is total).
    ///
    /// # Errors
    /// Implementation specific (the managers of `krabka-remote-metadata` do not fail).
    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError>;

    /// The highest end offset among `CopySegmentFinished` segments.
    ///
    /// # Errors
    /// Implementation specific (the managers of `krabka-remote-metadata` do not fail).
    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError>;

    /// The sum of `segment_size_in_bytes` over `CopySegmentFinished` segments.
    ///
    /// # Errors
    /// Implementation specific (the managers of `krabka-remote-metadata` do not fail).
    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError>;

    /// One segment by id, in any state except dropped.
    ///
    /// # Errors
    /// Implementation specific (the managers of `krabka-remote-metadata` do not fail).
    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError>;
}

/// The [`RemoteStorageError::MetadataNotReady`] a manager answers
/// [`segment_for_offset_ready`](RemoteLogMetadataManager::segment_for_offset_ready) with when
/// `offset` of `tp` is covered only by `m`, a segment whose copy has started but not finished.
pub fn not_ready(
    tp: &TopicIdPartition,
    offset: u64,
    m: &RemoteLogSegmentMetadata,
) -> RemoteStorageError {
    RemoteStorageError::MetadataNotReady {
        what: format!("offset {offset} of {tp}"),
        message: format!(
            "it is covered only by segment {} (offsets {}..={}), whose copy has not finished",
            m.remote_log_segment_id(),
            m.start_offset(),
            m.end_offset()
        ),
    }
}
