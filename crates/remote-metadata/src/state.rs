//! The I/O-free bookkeeping shared by every metadata manager, and its locked form
//! ([`SharedMetadataState`]) the managers answer their reads from.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};

use parking_lot::RwLock;
use uuid::Uuid;

use krabka_remote_storage::metadata::not_ready;
use krabka_remote_storage::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState, RemoteStorageError, TopicIdPartition,
};

/// The segments of every partition, with the lifecycle rules applied.
///
/// Changes are two-step so a durable manager can validate an event, persist it, and only then
/// make it visible: [`check_add`](Self::check_add) / [`check_update`](Self::check_update)
/// validate without changing anything, [`commit`](Self::commit) applies the validated result.
#[derive(Debug, Default)]
pub struct MetadataState {
    partitions: HashMap<TopicIdPartition, HashMap<Uuid, RemoteLogSegmentMetadata>>,
    /// Ids that reached `DeleteSegmentFinished` since the last [`forget_dropped`](Self::forget_dropped):
    /// an add may not reuse them.
    dropped: HashSet<RemoteLogSegmentId>,
}

impl MetadataState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates the addition of a new segment.
    ///
    /// # Errors
    /// As [`RemoteLogMetadataManager::add_remote_log_segment_metadata`](crate::RemoteLogMetadataManager::add_remote_log_segment_metadata).
    pub fn check_add(&self, metadata: &RemoteLogSegmentMetadata) -> Result<(), RemoteStorageError> {
        let id = metadata.remote_log_segment_id();
        if metadata.state() != RemoteLogSegmentState::CopySegmentStarted {
            return Err(RemoteStorageError::InvalidStateTransition {
                segment: id.clone(),
                from: RemoteLogSegmentState::CopySegmentStarted,
                to: metadata.state(),
            });
        }
        if self.get(id).is_some() || self.dropped.contains(id) {
            return Err(RemoteStorageError::invalid_argument(format!(
                "remote segment {id} is already known"
            )));
        }
        Ok(())
    }

    /// Validates an update and returns the metadata it would produce.
    ///
    /// # Errors
    /// As [`RemoteLogMetadataManager::update_remote_log_segment_metadata`](crate::RemoteLogMetadataManager::update_remote_log_segment_metadata).
    pub fn check_update(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let id = update.remote_log_segment_id();
        let current = self
            .get(id)
            .ok_or_else(|| RemoteStorageError::SegmentNotFound {
                segment: id.clone(),
                what: if self.dropped.contains(id) {
                    "metadata (deleted)".to_owned()
                } else {
                    "metadata".to_owned()
                },
            })?;
        current.apply(update)
    }

    /// Makes validated metadata (from [`check_add`](Self::check_add) or
    /// [`check_update`](Self::check_update)) current; a `DeleteSegmentFinished` segment is
    /// dropped.
    pub fn commit(&mut self, metadata: RemoteLogSegmentMetadata) {
        let id = metadata.remote_log_segment_id().clone();
        let tp = id.topic_id_partition().clone();
        if metadata.state() == RemoteLogSegmentState::DeleteSegmentFinished {
            if let Some(segments) = self.partitions.get_mut(&tp) {
                segments.remove(&id.id());
                if segments.is_empty() {
                    self.partitions.remove(&tp);
                }
            }
            self.dropped.insert(id);
        } else {
            self.partitions
                .entry(tp)
                .or_default()
                .insert(id.id(), metadata);
        }
    }

    /// Restores a live segment from a compaction snapshot, in whatever state it had.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] naming the segment when it is already known or
    /// its state is `DeleteSegmentFinished` (a snapshot holds live segments only).
    pub fn restore(
        &mut self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let id = metadata.remote_log_segment_id();
        if metadata.state() == RemoteLogSegmentState::DeleteSegmentFinished {
            return Err(RemoteStorageError::invalid_argument(format!(
                "snapshot of remote segment {id} is DeleteSegmentFinished; snapshots hold live segments only"
            )));
        }
        if self.get(id).is_some() {
            return Err(RemoteStorageError::invalid_argument(format!(
                "remote segment {id} appears twice in a snapshot"
            )));
        }
        self.commit(metadata.clone());
        Ok(())
    }

    /// Every live segment, ordered by partition (topic id, partition), then as
    /// [`list`](Self::list) orders them: what a compaction writes.
    pub fn snapshot(&self) -> Vec<RemoteLogSegmentMetadata> {
        let mut tps: Vec<&TopicIdPartition> = self.partitions.keys().collect();
        tps.sort_by_key(|tp| (tp.topic_id(), tp.partition()));
        tps.into_iter().flat_map(|tp| self.list(tp)).collect()
    }

    /// How many dropped (`DeleteSegmentFinished`) ids are remembered to reject their re-adding.
    pub fn dropped_len(&self) -> usize {
        self.dropped.len()
    }

    /// Whether `id` reached `DeleteSegmentFinished` since the last
    /// [`forget_dropped`](Self::forget_dropped).
    pub fn was_dropped(&self, id: &RemoteLogSegmentId) -> bool {
        self.dropped.contains(id)
    }

    /// Forgets the dropped ids (a compaction does, to keep the memory bounded): an add may then
    /// reuse one of them. Ids are fresh random UUIDs per copy attempt
    /// ([`RemoteLogSegmentId::generate`]), so a reuse means a caller bug that then goes
    /// undetected rather than a lost segment.
    pub fn forget_dropped(&mut self) {
        self.dropped = HashSet::new();
    }

    /// Validates and applies an addition.
    ///
    /// # Errors
    /// As [`check_add`](Self::check_add).
    pub fn add(&mut self, metadata: &RemoteLogSegmentMetadata) -> Result<(), RemoteStorageError> {
        self.check_add(metadata)?;
        self.commit(metadata.clone());
        Ok(())
    }

    /// Validates and applies an update.
    ///
    /// # Errors
    /// As [`check_update`](Self::check_update).
    pub fn update(
        &mut self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let next = self.check_update(update)?;
        self.commit(next.clone());
        Ok(next)
    }

    /// One live segment by id.
    pub fn get(&self, id: &RemoteLogSegmentId) -> Option<&RemoteLogSegmentMetadata> {
        self.partitions
            .get(id.topic_id_partition())
            .and_then(|s| s.get(&id.id()))
    }

    /// A partition's live segments, ordered by start offset, event time, then id.
    pub fn list(&self, tp: &TopicIdPartition) -> Vec<RemoteLogSegmentMetadata> {
        let mut out: Vec<_> = self
            .partitions
            .get(tp)
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        out.sort_by_key(|m| {
            (
                m.start_offset(),
                m.event_timestamp_ms(),
                m.remote_log_segment_id().id(),
            )
        });
        out
    }

    fn finished(&self, tp: &TopicIdPartition) -> impl Iterator<Item = &RemoteLogSegmentMetadata> {
        self.partitions
            .get(tp)
            .into_iter()
            .flat_map(|s| s.values())
            .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
    }

    /// The finished segment containing `offset` (highest start offset, then latest event).
    pub fn find(&self, tp: &TopicIdPartition, offset: u64) -> Option<RemoteLogSegmentMetadata> {
        self.finished(tp)
            .filter(|m| m.contains(offset))
            .max_by_key(|m| {
                (
                    m.start_offset(),
                    m.event_timestamp_ms(),
                    m.remote_log_segment_id().id(),
                )
            })
            .cloned()
    }

    /// Like [`find`](Self::find), but tells "not ready" from "nothing there": when no finished
    /// segment contains `offset` but a segment still in `CopySegmentStarted` does, the answer is
    /// [`RemoteStorageError::MetadataNotReady`] naming that segment.
    ///
    /// # Errors
    /// [`RemoteStorageError::MetadataNotReady`] as above.
    pub fn find_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        if let Some(found) = self.find(tp, offset) {
            return Ok(Some(found));
        }
        let in_flight = self.partitions.get(tp).and_then(|s| {
            s.values()
                .filter(|m| {
                    m.state() == RemoteLogSegmentState::CopySegmentStarted && m.contains(offset)
                })
                .min_by_key(|m| m.remote_log_segment_id().id())
        });
        match in_flight {
            Some(m) => Err(not_ready(tp, offset, m)),
            None => Ok(None),
        }
    }

    /// Highest end offset among finished segments.
    pub fn highest_offset(&self, tp: &TopicIdPartition) -> Option<u64> {
        self.finished(tp).map(|m| m.end_offset()).max()
    }

    /// Total size of the finished segments.
    pub fn size(&self, tp: &TopicIdPartition) -> u64 {
        self.finished(tp)
            .map(|m| m.segment_size_in_bytes())
            .fold(0u64, u64::saturating_add)
    }

    /// How many live segments there are, over all partitions.
    pub fn len(&self) -> usize {
        self.partitions.values().map(HashMap::len).sum()
    }

    /// Whether there are no live segments.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }
}

/// A [`MetadataState`] behind a reader-writer lock: the one state a metadata manager keeps.
///
/// Its query methods take the read lock for one answer each; they are the read half of
/// [`RemoteLogMetadataManager`](crate::RemoteLogMetadataManager) for both managers of this
/// crate, and for any other built on it. Writers take [`write`](Self::write).
#[derive(Debug, Default)]
pub struct SharedMetadataState(RwLock<MetadataState>);

impl SharedMetadataState {
    /// Wraps `state`.
    pub fn new(state: MetadataState) -> Self {
        Self(RwLock::new(state))
    }

    /// The state, read-locked until the guard is dropped.
    pub fn read(&self) -> impl Deref<Target = MetadataState> + '_ {
        self.0.read()
    }

    /// The state, write-locked until the guard is dropped.
    pub fn write(&self) -> impl DerefMut<Target = MetadataState> + '_ {
        self.0.write()
    }

    /// As [`MetadataState::find`].
    pub fn find(&self, tp: &TopicIdPartition, offset: u64) -> Option<RemoteLogSegmentMetadata> {
        self.0.read().find(tp, offset)
    }

    /// As [`MetadataState::find_ready`].
    ///
    /// # Errors
    /// As [`MetadataState::find_ready`].
    pub fn find_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.0.read().find_ready(tp, offset)
    }

    /// As [`MetadataState::list`].
    pub fn list(&self, tp: &TopicIdPartition) -> Vec<RemoteLogSegmentMetadata> {
        self.0.read().list(tp)
    }

    /// As [`MetadataState::highest_offset`].
    pub fn highest_offset(&self, tp: &TopicIdPartition) -> Option<u64> {
        self.0.read().highest_offset(tp)
    }

    /// As [`MetadataState::size`].
    pub fn size(&self, tp: &TopicIdPartition) -> u64 {
        self.0.read().size(tp)
    }

    /// As [`MetadataState::get`], cloned.
    pub fn get(&self, id: &RemoteLogSegmentId) -> Option<RemoteLogSegmentMetadata> {
        self.0.read().get(id).cloned()
    }
}
