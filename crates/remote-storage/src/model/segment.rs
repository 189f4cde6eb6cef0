//! A remote segment's metadata, its lifecycle, and the updates that move it along.

use std::collections::BTreeMap;
use std::hash::Hash;

use super::{CustomMetadata, RemoteLogSegmentId, TopicIdPartition, now_ms};
use crate::error::RemoteStorageError;

/// The lifecycle of a remote segment.
///
/// ```text
/// CopySegmentStarted ──▶ CopySegmentFinished ──▶ DeleteSegmentStarted ──▶ DeleteSegmentFinished
///          └──────────────────────────────────────────▲
/// ```
/// Moving to the state a segment is already in is allowed, so retries are idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RemoteLogSegmentState {
    /// The copy has begun; data may be partial. Not readable.
    CopySegmentStarted,
    /// The copy is complete; the segment is readable.
    CopySegmentFinished,
    /// Deletion has begun; the segment is no longer readable.
    DeleteSegmentStarted,
    /// The data is gone.
    DeleteSegmentFinished,
}

impl RemoteLogSegmentState {
    /// Whether a segment in this state may move to `next`.
    pub fn can_transition_to(self, next: Self) -> bool {
        use RemoteLogSegmentState::*;
        self == next
            || matches!(
                (self, next),
                (CopySegmentStarted, CopySegmentFinished)
                    | (CopySegmentStarted, DeleteSegmentStarted)
                    | (CopySegmentFinished, DeleteSegmentStarted)
                    | (DeleteSegmentStarted, DeleteSegmentFinished)
            )
    }

    /// A stable numeric code, for durable encodings.
    pub fn code(self) -> u8 {
        match self {
            Self::CopySegmentStarted => 0,
            Self::CopySegmentFinished => 1,
            Self::DeleteSegmentStarted => 2,
            Self::DeleteSegmentFinished => 3,
        }
    }

    /// The state with the given [`code`](Self::code).
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => Self::CopySegmentStarted,
            1 => Self::CopySegmentFinished,
            2 => Self::DeleteSegmentStarted,
            3 => Self::DeleteSegmentFinished,
            _ => return None,
        })
    }
}

/// Metadata of one remote segment (one copy attempt).
///
/// Fields are private and validated at construction: `end_offset >= start_offset`, a non-empty
/// leader-epoch map, and a size whose every byte position fits a `u32`.
///
/// ```
/// use std::collections::BTreeMap;
/// use krabka_remote_storage::*;
///
/// let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "orders", 0);
/// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 100, 199)
///     .max_timestamp_ms(1_700_000_000_000)
///     .segment_size_in_bytes(4096)
///     .build()?;
/// assert_eq!(m.state(), RemoteLogSegmentState::CopySegmentStarted);
/// assert_eq!(m.segment_leader_epochs(), &BTreeMap::from([(0, 100)]));
/// # Ok::<(), RemoteStorageError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteLogSegmentMetadata {
    segment_id: RemoteLogSegmentId,
    start_offset: u64,
    end_offset: u64,
    max_timestamp_ms: i64,
    broker_id: i32,
    event_timestamp_ms: i64,
    segment_leader_epochs: BTreeMap<i32, u64>,
    segment_size_in_bytes: u64,
    custom_metadata: Option<CustomMetadata>,
    state: RemoteLogSegmentState,
    writer_epoch: u64,
}

impl RemoteLogSegmentMetadata {
    /// Starts a builder for a segment covering `start_offset..=end_offset`.
    ///
    /// Defaults: max timestamp 0, broker 0, event time now, leader epochs `{0: start_offset}`,
    /// size 0, no custom metadata, state `CopySegmentStarted`, writer epoch 0 (none).
    pub fn builder(
        segment_id: RemoteLogSegmentId,
        start_offset: u64,
        end_offset: u64,
    ) -> RemoteLogSegmentMetadataBuilder {
        RemoteLogSegmentMetadataBuilder {
            inner: RemoteLogSegmentMetadata {
                segment_id,
                start_offset,
                end_offset,
                max_timestamp_ms: 0,
                broker_id: 0,
                event_timestamp_ms: now_ms(),
                segment_leader_epochs: BTreeMap::new(),
                segment_size_in_bytes: 0,
                custom_metadata: None,
                state: RemoteLogSegmentState::CopySegmentStarted,
                writer_epoch: 0,
            },
        }
    }

    /// The writer epoch of the process that copied the segment (see
    /// [`ownership`](crate::ownership)): 0 for a copy made without one (a log opened without
    /// ownership, or by a version before writer epochs). A copy by an older writer epoch holding
    /// seqs a newer epoch claimed is superseded ([`ownership::superseding_epoch`](crate::ownership::superseding_epoch)).
    pub fn writer_epoch(&self) -> u64 {
        self.writer_epoch
    }

    /// The segment (copy attempt) id.
    pub fn remote_log_segment_id(&self) -> &RemoteLogSegmentId {
        &self.segment_id
    }

    /// The partition.
    pub fn topic_id_partition(&self) -> &TopicIdPartition {
        self.segment_id.topic_id_partition()
    }

    /// First offset (seq) in the segment.
    pub fn start_offset(&self) -> u64 {
        self.start_offset
    }

    /// Last offset (seq) in the segment, inclusive.
    pub fn end_offset(&self) -> u64 {
        self.end_offset
    }

    /// Largest record timestamp in the segment (ms since the epoch).
    pub fn max_timestamp_ms(&self) -> i64 {
        self.max_timestamp_ms
    }

    /// The broker (process) that produced this event.
    pub fn broker_id(&self) -> i32 {
        self.broker_id
    }

    /// When this state was recorded (ms since the epoch).
    pub fn event_timestamp_ms(&self) -> i64 {
        self.event_timestamp_ms
    }

    /// Leader epoch → its start offset within the segment; never empty.
    pub fn segment_leader_epochs(&self) -> &BTreeMap<i32, u64> {
        &self.segment_leader_epochs
    }

    /// Size of the segment's `.log` data in bytes (fits `u32` positions).
    pub fn segment_size_in_bytes(&self) -> u64 {
        self.segment_size_in_bytes
    }

    /// What the backend returned from the copy, if anything.
    pub fn custom_metadata(&self) -> Option<&CustomMetadata> {
        self.custom_metadata.as_ref()
    }

    /// The lifecycle state.
    pub fn state(&self) -> RemoteLogSegmentState {
        self.state
    }

    /// Whether `offset` lies within `start_offset..=end_offset`.
    pub fn contains(&self, offset: u64) -> bool {
        (self.start_offset..=self.end_offset).contains(&offset)
    }

    /// Applies an update and returns the new metadata; `self` is left unchanged.
    ///
    /// The update's custom metadata, when present, replaces the current one.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] when the update is for another segment,
    /// [`RemoteStorageError::InvalidStateTransition`] when the lifecycle forbids the move.
    pub fn apply(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        if update.segment_id != self.segment_id {
            return Err(RemoteStorageError::invalid_argument(format!(
                "update for segment {} applied to segment {}",
                update.segment_id, self.segment_id
            )));
        }
        if !self.state.can_transition_to(update.state) {
            return Err(RemoteStorageError::InvalidStateTransition {
                segment: self.segment_id.clone(),
                from: self.state,
                to: update.state,
            });
        }
        let mut next = self.clone();
        next.state = update.state;
        next.event_timestamp_ms = update.event_timestamp_ms;
        next.broker_id = update.broker_id;
        if let Some(cm) = &update.custom_metadata {
            next.custom_metadata = Some(cm.clone());
        }
        Ok(next)
    }

    /// A copy of this metadata in `state` (for the records of the shared layout, which say
    /// where a segment's objects stand; no lifecycle check).
    pub(crate) fn with_state(&self, state: RemoteLogSegmentState) -> Self {
        let mut next = self.clone();
        next.state = state;
        next
    }

    /// A copy of this metadata with `custom_metadata` set (what a copy returned).
    #[must_use]
    pub fn with_custom_metadata(&self, custom_metadata: Option<CustomMetadata>) -> Self {
        let mut next = self.clone();
        next.custom_metadata = custom_metadata;
        next
    }

    fn validate(&self) -> Result<(), RemoteStorageError> {
        let bad = |reason: String| Err(RemoteStorageError::InvalidMetadata { reason });
        if self.end_offset < self.start_offset {
            return bad(format!(
                "segment {}: end offset {} is before start offset {}",
                self.segment_id, self.end_offset, self.start_offset
            ));
        }
        if self.segment_leader_epochs.is_empty() {
            return bad(format!(
                "segment {}: leader epochs are empty",
                self.segment_id
            ));
        }
        if self.segment_size_in_bytes > u64::from(u32::MAX) {
            return bad(format!(
                "segment {}: size {} does not fit u32 byte positions",
                self.segment_id, self.segment_size_in_bytes
            ));
        }
        Ok(())
    }
}

/// Builder of [`RemoteLogSegmentMetadata`]; see [`RemoteLogSegmentMetadata::builder`].
#[derive(Clone, Debug)]
pub struct RemoteLogSegmentMetadataBuilder {
    inner: RemoteLogSegmentMetadata,
}

impl RemoteLogSegmentMetadataBuilder {
    /// Largest record timestamp in the segment (default 0).
    #[must_use]
    pub fn max_timestamp_ms(mut self, v: i64) -> Self {
        self.inner.max_timestamp_ms = v;
        self
    }

    /// Broker (process) id (default 0).
    #[must_use]
    pub fn broker_id(mut self, v: i32) -> Self {
        self.inner.broker_id = v;
        self
    }

    /// Event time (default: now).
    #[must_use]
    pub fn event_timestamp_ms(mut self, v: i64) -> Self {
        self.inner.event_timestamp_ms = v;
        self
    }

    /// Leader epochs (default `{0: start_offset}`); must not be empty.
    #[must_use]
    pub fn segment_leader_epochs(mut self, v: BTreeMap<i32, u64>) -> Self {
        self.inner.segment_leader_epochs = v;
        self
    }

    /// Size of the `.log` data in bytes (default 0); at most `u32::MAX`.
    #[must_use]
    pub fn segment_size_in_bytes(mut self, v: u64) -> Self {
        self.inner.segment_size_in_bytes = v;
        self
    }

    /// Custom metadata (default none).
    #[must_use]
    pub fn custom_metadata(mut self, v: Option<CustomMetadata>) -> Self {
        self.inner.custom_metadata = v;
        self
    }

    /// State (default `CopySegmentStarted`).
    #[must_use]
    pub fn state(mut self, v: RemoteLogSegmentState) -> Self {
        self.inner.state = v;
        self
    }

    /// The copying writer's epoch (default 0: none; see
    /// [`RemoteLogSegmentMetadata::writer_epoch`]).
    #[must_use]
    pub fn writer_epoch(mut self, v: u64) -> Self {
        self.inner.writer_epoch = v;
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidMetadata`] when end < start, epochs were set empty, or the
    /// size does not fit `u32` positions.
    pub fn build(mut self) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        if self.inner.segment_leader_epochs.is_empty() {
            self.inner
                .segment_leader_epochs
                .insert(0, self.inner.start_offset);
        }
        self.inner.validate()?;
        Ok(self.inner)
    }

    /// Like [`build`](Self::build) but keeps an explicitly empty epoch map an error (used when
    /// decoding stored metadata, where an empty map means corruption).
    ///
    /// # Errors
    /// As [`build`](Self::build), plus empty epochs.
    pub fn build_strict(self) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        self.inner.validate()?;
        Ok(self.inner)
    }
}

/// A state change of one remote segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteLogSegmentMetadataUpdate {
    segment_id: RemoteLogSegmentId,
    event_timestamp_ms: i64,
    custom_metadata: Option<CustomMetadata>,
    state: RemoteLogSegmentState,
    broker_id: i32,
}

impl RemoteLogSegmentMetadataUpdate {
    /// Creates an update.
    pub fn new(
        segment_id: RemoteLogSegmentId,
        event_timestamp_ms: i64,
        custom_metadata: Option<CustomMetadata>,
        state: RemoteLogSegmentState,
        broker_id: i32,
    ) -> Self {
        Self {
            segment_id,
            event_timestamp_ms,
            custom_metadata,
            state,
            broker_id,
        }
    }

    /// An update to `state` stamped now, keeping custom metadata as it is.
    pub fn to_state(
        segment_id: RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        broker_id: i32,
    ) -> Self {
        Self::new(segment_id, now_ms(), None, state, broker_id)
    }

    /// The segment.
    pub fn remote_log_segment_id(&self) -> &RemoteLogSegmentId {
        &self.segment_id
    }

    /// When the change happened.
    pub fn event_timestamp_ms(&self) -> i64 {
        self.event_timestamp_ms
    }

    /// New custom metadata, if any.
    pub fn custom_metadata(&self) -> Option<&CustomMetadata> {
        self.custom_metadata.as_ref()
    }

    /// The new state.
    pub fn state(&self) -> RemoteLogSegmentState {
        self.state
    }

    /// The broker (process) making the change.
    pub fn broker_id(&self) -> i32 {
        self.broker_id
    }
}
