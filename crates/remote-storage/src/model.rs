//! The data model of the remote tier, modeled on Kafka's `org.apache.kafka.server.log.remote.storage`.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

use bytes::Bytes;
use uuid::Uuid;

use crate::error::RemoteStorageError;

/// Largest topic name Kafka accepts.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Default cap on [`CustomMetadata`] size, in bytes (Kafka's
/// `remote.log.metadata.custom.metadata.max.bytes` default).
pub const DEFAULT_CUSTOM_METADATA_MAX_BYTES: usize = 128;

/// A topic partition identified by topic id (plus its human-readable name).
///
/// Equality and hashing use the topic id and partition only: a topic deleted and re-created
/// under the same name is a different partition, and a rename does not change identity.
#[derive(Clone, Debug)]
pub struct TopicIdPartition {
    topic_id: Uuid,
    topic: String,
    partition: i32,
}

impl TopicIdPartition {
    /// Creates a topic partition. The name is not validated here (Kafka does not either); call
    /// [`validate`](Self::validate) before using it to build a path or key — backends do.
    pub fn new(topic_id: Uuid, topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic_id,
            topic: topic.into(),
            partition,
        }
    }

    /// The topic id.
    pub fn topic_id(&self) -> Uuid {
        self.topic_id
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// Checks the topic name with Kafka's rules (`[a-zA-Z0-9._-]`, 1..=249 characters, not `.`
    /// or `..`) and that the partition is not negative, so that no name can escape a backend's
    /// root directory or key prefix.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] naming what is wrong.
    pub fn validate(&self) -> Result<(), RemoteStorageError> {
        validate_topic_name(&self.topic)?;
        if self.partition < 0 {
            return Err(RemoteStorageError::invalid_argument(format!(
                "partition {} of topic `{}` is negative",
                self.partition, self.topic
            )));
        }
        Ok(())
    }
}

impl PartialEq for TopicIdPartition {
    fn eq(&self, other: &Self) -> bool {
        self.topic_id == other.topic_id && self.partition == other.partition
    }
}

impl Eq for TopicIdPartition {}

impl Hash for TopicIdPartition {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.topic_id.hash(state);
        self.partition.hash(state);
    }
}

impl fmt::Display for TopicIdPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}-{}", self.topic_id, self.topic, self.partition)
    }
}

/// Checks a topic name with Kafka's rules: 1..=249 characters from `[a-zA-Z0-9._-]`, and not
/// `.` or `..`.
///
/// ```
/// use krabka_remote_storage::validate_topic_name;
/// assert!(validate_topic_name("orders.v2_eu-west").is_ok());
/// assert!(validate_topic_name("../etc").is_err());
/// assert!(validate_topic_name("a/b").is_err());
/// ```
///
/// # Errors
/// [`RemoteStorageError::InvalidArgument`] naming the rule broken.
pub fn validate_topic_name(name: &str) -> Result<(), RemoteStorageError> {
    let bad = |why: &str| {
        Err(RemoteStorageError::invalid_argument(format!(
            "topic name {name:?} is invalid: {why}"
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return bad("it is longer than 249 characters");
    }
    if name == "." || name == ".." {
        return bad("`.` and `..` are not allowed");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(&format!(
            "character {c:?} is not allowed (only ASCII letters, digits, '.', '_' and '-')"
        ));
    }
    Ok(())
}

/// The id of one copy attempt of one segment: a partition and a fresh UUID.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteLogSegmentId {
    topic_id_partition: TopicIdPartition,
    id: Uuid,
}

impl RemoteLogSegmentId {
    /// Creates an id from its parts (e.g. when rebuilding state from a durable record).
    pub fn new(topic_id_partition: TopicIdPartition, id: Uuid) -> Self {
        Self {
            topic_id_partition,
            id,
        }
    }

    /// A fresh, random id for a new copy attempt. Every attempt gets its own, so a retried
    /// copy never overwrites the objects of an earlier, possibly still running one.
    pub fn generate(topic_id_partition: TopicIdPartition) -> Self {
        Self::new(topic_id_partition, Uuid::new_v4())
    }

    /// The partition the segment belongs to.
    pub fn topic_id_partition(&self) -> &TopicIdPartition {
        &self.topic_id_partition
    }

    /// The attempt's UUID.
    pub fn id(&self) -> Uuid {
        self.id
    }
}

impl fmt::Display for RemoteLogSegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic_id_partition, self.id)
    }
}

/// Opaque bytes a backend returns from a copy and gets back on every later call for that
/// segment (an object key, a version id...). Kept small: callers cap it, by default at
/// [`DEFAULT_CUSTOM_METADATA_MAX_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CustomMetadata(Bytes);

impl CustomMetadata {
    /// Wraps bytes.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self(value.into())
    }

    /// The bytes.
    pub fn value(&self) -> &Bytes {
        &self.0
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks the size against `max_bytes`.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidMetadata`] when it is larger.
    pub fn check_size(&self, max_bytes: usize) -> Result<(), RemoteStorageError> {
        if self.len() > max_bytes {
            return Err(RemoteStorageError::InvalidMetadata {
                reason: format!(
                    "custom metadata of {} bytes exceeds the cap of {max_bytes} bytes",
                    self.len()
                ),
            });
        }
        Ok(())
    }
}

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
}

impl RemoteLogSegmentMetadata {
    /// Starts a builder for a segment covering `start_offset..=end_offset`.
    ///
    /// Defaults: max timestamp 0, broker 0, event time now, leader epochs `{0: start_offset}`,
    /// size 0, no custom metadata, state `CopySegmentStarted`.
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
            },
        }
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

/// The kinds of index a segment carries, with Kafka's file suffixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum IndexType {
    /// Sparse offset → position index (`.index`).
    Offset,
    /// Sparse timestamp → offset index (`.timeindex`).
    Timestamp,
    /// Producer state snapshot (`.snapshot`), optional.
    ProducerSnapshot,
    /// Aborted-transaction index (`.txnindex`), optional.
    Transaction,
    /// Leader-epoch checkpoint (`.leader-epoch-checkpoint`).
    LeaderEpoch,
}

impl IndexType {
    /// Every index type, in a fixed order.
    pub const ALL: [IndexType; 5] = [
        IndexType::Offset,
        IndexType::Timestamp,
        IndexType::ProducerSnapshot,
        IndexType::Transaction,
        IndexType::LeaderEpoch,
    ];

    /// Kafka's file suffix for this index, with its leading dot.
    pub fn suffix(self) -> &'static str {
        match self {
            IndexType::Offset => ".index",
            IndexType::Timestamp => ".timeindex",
            IndexType::ProducerSnapshot => ".snapshot",
            IndexType::Transaction => ".txnindex",
            IndexType::LeaderEpoch => ".leader-epoch-checkpoint",
        }
    }
}

impl fmt::Display for IndexType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.suffix().trim_start_matches('.'))
    }
}

/// Suffix of a segment's data file.
pub const LOG_SUFFIX: &str = ".log";

/// The local files of one closed segment, handed to
/// [`RemoteStorageManager::copy_log_segment_data`](crate::RemoteStorageManager::copy_log_segment_data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSegmentData {
    /// The `.log` data file.
    pub log_segment: PathBuf,
    /// The offset index file.
    pub offset_index: PathBuf,
    /// The time index file.
    pub time_index: PathBuf,
    /// The transaction index file, if the segment has one.
    pub transaction_index: Option<PathBuf>,
    /// The producer snapshot file, if the segment has one.
    pub producer_snapshot_index: Option<PathBuf>,
    /// The leader-epoch checkpoint contents.
    pub leader_epoch_index: Bytes,
}

impl LogSegmentData {
    /// Data with the three mandatory files, no optional indexes and an empty epoch checkpoint.
    pub fn new(
        log_segment: impl Into<PathBuf>,
        offset_index: impl Into<PathBuf>,
        time_index: impl Into<PathBuf>,
    ) -> Self {
        Self {
            log_segment: log_segment.into(),
            offset_index: offset_index.into(),
            time_index: time_index.into(),
            transaction_index: None,
            producer_snapshot_index: None,
            leader_epoch_index: Bytes::new(),
        }
    }

    /// The local source of an index: a file path, in-memory bytes (the leader-epoch checkpoint),
    /// or `None` when the optional index is absent.
    pub fn index_source(&self, index_type: IndexType) -> Option<IndexSource<'_>> {
        match index_type {
            IndexType::Offset => Some(IndexSource::File(&self.offset_index)),
            IndexType::Timestamp => Some(IndexSource::File(&self.time_index)),
            IndexType::ProducerSnapshot => self
                .producer_snapshot_index
                .as_deref()
                .map(IndexSource::File),
            IndexType::Transaction => self.transaction_index.as_deref().map(IndexSource::File),
            IndexType::LeaderEpoch => Some(IndexSource::Bytes(&self.leader_epoch_index)),
        }
    }
}

/// Where an index's bytes come from when copying; see [`LogSegmentData::index_source`].
#[derive(Clone, Copy, Debug)]
pub enum IndexSource<'a> {
    /// A local file.
    File(&'a std::path::Path),
    /// Bytes in memory.
    Bytes(&'a Bytes),
}

/// The current time in milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use RemoteLogSegmentState::*;

    fn tp() -> TopicIdPartition {
        TopicIdPartition::new(Uuid::new_v4(), "t", 0)
    }

    #[test]
    fn lifecycle_transitions() {
        let all = [
            CopySegmentStarted,
            CopySegmentFinished,
            DeleteSegmentStarted,
            DeleteSegmentFinished,
        ];
        let allowed = [
            (CopySegmentStarted, CopySegmentFinished),
            (CopySegmentStarted, DeleteSegmentStarted),
            (CopySegmentFinished, DeleteSegmentStarted),
            (DeleteSegmentStarted, DeleteSegmentFinished),
        ];
        for a in all {
            for b in all {
                let expect = a == b || allowed.contains(&(a, b));
                assert_eq!(a.can_transition_to(b), expect, "{a:?} -> {b:?}");
            }
            assert_eq!(RemoteLogSegmentState::from_code(a.code()), Some(a));
        }
        assert_eq!(RemoteLogSegmentState::from_code(9), None);
    }

    #[test]
    fn apply_rejects_invalid_transition_and_foreign_segment() {
        let id = RemoteLogSegmentId::generate(tp());
        let m = RemoteLogSegmentMetadata::builder(id.clone(), 0, 9)
            .build()
            .unwrap();
        let fin = m
            .apply(&RemoteLogSegmentMetadataUpdate::to_state(
                id.clone(),
                CopySegmentFinished,
                1,
            ))
            .unwrap();
        assert_eq!(fin.state(), CopySegmentFinished);
        assert_eq!(fin.broker_id(), 1);
        let back = fin.apply(&RemoteLogSegmentMetadataUpdate::to_state(
            id.clone(),
            CopySegmentStarted,
            1,
        ));
        assert!(matches!(
            back,
            Err(RemoteStorageError::InvalidStateTransition { .. })
        ));
        let other = RemoteLogSegmentId::generate(tp());
        assert!(matches!(
            m.apply(&RemoteLogSegmentMetadataUpdate::to_state(
                other,
                CopySegmentFinished,
                0
            )),
            Err(RemoteStorageError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn metadata_is_validated() {
        let id = RemoteLogSegmentId::generate(tp());
        assert!(
            RemoteLogSegmentMetadata::builder(id.clone(), 10, 9)
                .build()
                .is_err()
        );
        assert!(
            RemoteLogSegmentMetadata::builder(id.clone(), 0, 0)
                .segment_size_in_bytes(u64::from(u32::MAX) + 1)
                .build()
                .is_err()
        );
        assert!(
            RemoteLogSegmentMetadata::builder(id, 0, 0)
                .build_strict()
                .is_err()
        );
    }

    #[test]
    fn topic_identity_ignores_the_name() {
        let id = Uuid::new_v4();
        assert_eq!(
            TopicIdPartition::new(id, "a", 1),
            TopicIdPartition::new(id, "b", 1)
        );
        assert_ne!(
            TopicIdPartition::new(id, "a", 1),
            TopicIdPartition::new(id, "a", 2)
        );
    }

    #[test]
    fn hostile_topic_names_are_rejected() {
        let long = "x".repeat(250);
        for name in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\0b",
            "a b",
            "ü",
            long.as_str(),
        ] {
            assert!(validate_topic_name(name).is_err(), "{name:?}");
        }
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
        assert!(
            TopicIdPartition::new(Uuid::new_v4(), "ok", -1)
                .validate()
                .is_err()
        );
    }

    #[test]
    fn custom_metadata_cap() {
        let cm = CustomMetadata::new(vec![0u8; 129]);
        assert!(cm.check_size(DEFAULT_CUSTOM_METADATA_MAX_BYTES).is_err());
        assert!(cm.check_size(129).is_ok());
    }

    #[test]
    fn index_suffixes_match_kafka() {
        let suffixes: Vec<_> = IndexType::ALL.iter().map(|t| t.suffix()).collect();
        assert_eq!(
            suffixes,
            [
                ".index",
                ".timeindex",
                ".snapshot",
                ".txnindex",
                ".leader-epoch-checkpoint"
            ]
        );
    }
}
