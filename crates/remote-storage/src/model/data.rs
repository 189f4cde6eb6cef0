//! What a copy hands to a backend: a segment's files and its indexes.

use std::fmt;
use std::path::PathBuf;

use bytes::Bytes;

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

/// Milliseconds since the Unix epoch now, by the system's wall clock (negative before 1970;
/// saturating at the ends of `i64`): the clock of every event time, record and manifest
/// stamp, and the one the layers above use (`krabka_protocol::Message::new` stamps messages
/// with the same reading).
pub fn now_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}
