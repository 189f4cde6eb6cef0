//! [`Transforming`]: the decorator. Its read side is in `read`, metadata recovery in
//! `recover`, the SPI in `spi`; the copy side is the crate's `copy`.

mod read;
mod recover;
mod spi;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use krabka_remote_storage::{
    CustomMetadata, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager,
};

use crate::cache::SegmentCache;
use crate::config::TransformConfig;
use crate::error::TransformError;
use crate::format::{FLAG_AES_GCM, FLAG_ZSTD, Header, Record};
use crate::keys::KeyId;
use read::check_against_record;

/// A [`RemoteStorageManager`] that compresses and/or encrypts segments in chunks on their way to
/// an inner store, and reads back only the chunks a ranged fetch needs.
///
/// Every segment records its transform in the custom metadata its copy returns, so one instance
/// reads a bucket whose segments were written with different settings, untransformed ones
/// included (those go to the inner store as they are). See `docs/format.md` for the layout.
///
/// ```
/// use std::sync::Arc;
/// use krabka_remote_storage::testkit::InMemoryRemoteStorage;
/// use krabka_remote_storage::*;
/// use krabka_remote_transform::{Transforming, TransformConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = TransformConfig::from_options(Some("none"), None)?;
/// let store = Transforming::new(Arc::new(InMemoryRemoteStorage::new()), config);
///
/// let dir = tempfile::tempdir()?;
/// let p = |n: &str| dir.path().join(n);
/// std::fs::write(p("s.log"), b"hello, remote tier")?;
/// std::fs::write(p("s.index"), b"")?;
/// std::fs::write(p("s.timeindex"), b"")?;
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 0)
///     .segment_size_in_bytes(18)
///     .build()?;
/// let data = LogSegmentData::new(p("s.log"), p("s.index"), p("s.timeindex"));
/// let m = m.with_custom_metadata(store.copy_log_segment_data(&m, &data)?);
/// assert_eq!(store.fetch_log_segment(&m, 7, Some(10))?, b"remo");
/// # Ok(())
/// # }
/// ```
pub struct Transforming {
    inner: Arc<dyn RemoteStorageManager>,
    config: TransformConfig,
    cache: SegmentCache,
    /// Whether a copy has swept the scratch root for directories of killed processes.
    swept: AtomicBool,
}

/// What a transformed segment's header says about it (see [`Transforming::inspect`]): how its
/// remote objects are encoded. Not `krabka_storage::SegmentInfo`, which describes a local
/// segment's files and seqs; this one knows only the stored bytes of a remote copy.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransformedSegmentInfo {
    /// Whether its chunks and indexes were compressed with zstd (chunks that did not shrink are
    /// stored as they are).
    pub compressed: bool,
    /// The master key its data key is wrapped with, when encrypted.
    pub key_id: Option<KeyId>,
    /// Plaintext bytes per chunk.
    pub chunk_size: u32,
    /// Number of chunks.
    pub chunks: u32,
    /// Size of the segment's `.log` data.
    pub plaintext_bytes: u32,
    /// Size of the stored `.log` object (header and chunks).
    pub stored_bytes: u32,
    /// Size of the header at the head of every object of the segment.
    pub header_bytes: u32,
}

impl Transforming {
    /// Wraps `inner`. Copies are transformed as `config` says; reads decode whatever each
    /// segment recorded.
    pub fn new(inner: Arc<dyn RemoteStorageManager>, config: TransformConfig) -> Self {
        let cache = SegmentCache::new(config.header_cache_entries());
        Self {
            inner,
            config,
            cache,
            swept: AtomicBool::new(false),
        }
    }

    /// The store underneath.
    pub fn inner(&self) -> &Arc<dyn RemoteStorageManager> {
        &self.inner
    }

    /// The configuration.
    pub fn config(&self) -> &TransformConfig {
        &self.config
    }

    /// Whether `metadata` describes a segment this layer transformed (from its custom metadata;
    /// no request). Untransformed segments are passed to the inner store as they are.
    ///
    /// # Errors
    /// [`TransformError`] when the custom metadata is this layer's but malformed.
    pub fn is_transformed(metadata: &RemoteLogSegmentMetadata) -> Result<bool, TransformError> {
        Ok(Record::decode(metadata.custom_metadata(), metadata.remote_log_segment_id())?.is_some())
    }

    /// Whether `metadata` describes a segment this layer encrypted (from its custom metadata;
    /// no request).
    ///
    /// # Errors
    /// [`TransformError`] when the custom metadata is this layer's but malformed.
    pub fn is_encrypted(metadata: &RemoteLogSegmentMetadata) -> Result<bool, TransformError> {
        let record = Record::decode(metadata.custom_metadata(), metadata.remote_log_segment_id())?;
        Ok(record.is_some_and(|r| r.flags & FLAG_AES_GCM != 0))
    }

    /// The key id `metadata`'s custom metadata records (no request): `Some` for an encrypted
    /// segment copied or recovered by this version, `None` for an unencrypted one and for one
    /// encrypted by an older version (whose header holds it: [`key_id`](Self::key_id)).
    ///
    /// # Errors
    /// [`TransformError`] when the custom metadata is this layer's but malformed.
    pub fn recorded_key_id(
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<Option<KeyId>, TransformError> {
        let record = Record::decode(metadata.custom_metadata(), metadata.remote_log_segment_id())?;
        Ok(record.and_then(|r| r.key_id))
    }

    /// The id of the master key `metadata`'s segment is encrypted with; `None` when it is not
    /// encrypted. From the custom metadata when it records the id (`KTX2`, every copy and
    /// recovery of this version), else read from the segment's header (one small ranged
    /// request: an encrypted segment copied by an older version).
    ///
    /// # Errors
    /// As [`inspect`](Self::inspect).
    pub fn key_id(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<Option<KeyId>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        match Record::decode(metadata.custom_metadata(), segment)? {
            None => Ok(None),
            Some(record) if record.key_id.is_some() => Ok(record.key_id),
            Some(record) if record.flags & FLAG_AES_GCM == 0 => Ok(None),
            Some(_) => Ok(self.inspect(metadata)?.and_then(|info| info.key_id)),
        }
    }

    /// Whether the configured key provider has the master key `id` (`false` without one).
    ///
    /// # Errors
    /// The provider's error when it cannot be asked.
    pub fn has_key(&self, id: KeyId) -> Result<bool, TransformError> {
        match self.config.keys() {
            Some(keys) => Ok(keys.key(id)?.is_some()),
            None => Ok(false),
        }
    }

    /// Reads a transformed segment's header (one small ranged request) and describes it;
    /// `None` for an untransformed segment. Needs no key: the key id is stored in the clear.
    ///
    /// # Errors
    /// As [`fetch_log_segment`](RemoteStorageManager::fetch_log_segment).
    pub fn inspect(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<Option<TransformedSegmentInfo>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        let Some(record) = Record::decode(metadata.custom_metadata(), segment)? else {
            return Ok(None);
        };
        let inner_meta = inner_metadata(metadata, &record)?;
        let bytes = self.fetch_header(&inner_meta, &record, segment)?;
        let header = Header::decode(&bytes, segment)?;
        check_against_record(&header, &bytes, &record, segment)?;
        Ok(Some(TransformedSegmentInfo {
            compressed: header.flags & FLAG_ZSTD != 0,
            key_id: header.encryption.map(|e| e.key_id),
            chunk_size: header.chunk_size,
            chunks: u32::try_from(header.chunks.len()).unwrap_or(u32::MAX),
            plaintext_bytes: header.plaintext_size,
            stored_bytes: record.stored_size,
            header_bytes: record.header_len,
        }))
    }
}

/// An `InvalidArgument` from the inner store for a range the header vouches for means the
/// stored object is shorter than it should be.
fn truncated(
    e: RemoteStorageError,
    segment: &RemoteLogSegmentId,
    object: &str,
) -> RemoteStorageError {
    match e {
        RemoteStorageError::InvalidArgument { message } => TransformError::corrupt(
            segment,
            object,
            format!("the stored object is shorter than its header says (truncated?): {message}"),
        )
        .into(),
        other => other,
    }
}

/// The metadata the inner store knows: the stored size and its own custom metadata.
fn inner_metadata(
    m: &RemoteLogSegmentMetadata,
    record: &Record,
) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
    with_size(m, u64::from(record.stored_size), record.inner.clone())
}

fn with_size(
    m: &RemoteLogSegmentMetadata,
    size: u64,
    custom: Option<CustomMetadata>,
) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
    RemoteLogSegmentMetadata::builder(
        m.remote_log_segment_id().clone(),
        m.start_offset(),
        m.end_offset(),
    )
    .max_timestamp_ms(m.max_timestamp_ms())
    .broker_id(m.broker_id())
    .event_timestamp_ms(m.event_timestamp_ms())
    .segment_leader_epochs(m.segment_leader_epochs().clone())
    .segment_size_in_bytes(size)
    .custom_metadata(custom)
    .writer_epoch(m.writer_epoch())
    .state(m.state())
    .build_strict()
}

impl fmt::Debug for Transforming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transforming")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
