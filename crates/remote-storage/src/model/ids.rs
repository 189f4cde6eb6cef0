//! Identities: topic partitions, segment ids, and the opaque custom metadata a backend returns.

use std::fmt;
use std::hash::{Hash, Hasher};

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
/// use krabka_remote_storage::{validate_topic_name, RemoteStorageError};
/// assert!(validate_topic_name("orders.v2_eu-west").is_ok());
/// let up = validate_topic_name("../etc");
/// assert!(matches!(up, Err(RemoteStorageError::InvalidArgument { .. })), "{up:?}");
/// let slash = validate_topic_name("a/b");
/// assert!(matches!(slash, Err(RemoteStorageError::InvalidArgument { .. })), "{slash:?}");
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
