//! [`Transforming`]: the decorator.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteStorageError, RemoteStorageManager, checked_range,
};

use crate::cache::{OpenSegment, SegmentCache};
use crate::codec::{decode_chunk, decode_index, verify_header_tag};
use crate::config::TransformConfig;
use crate::copy::prepare;
use crate::crypto::DataKey;
use crate::error::TransformError;
use crate::format::{
    FIXED_LEN, FLAG_ZSTD, Header, Record, header_digest, header_len_from_prefix, index_object,
    index_slot,
};
use crate::keys::KeyId;

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
}

/// What a transformed segment's header says about it (see [`Transforming::inspect`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentInfo {
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

    /// Reads a transformed segment's header (one small ranged request) and describes it;
    /// `None` for an untransformed segment. Needs no key: the key id is stored in the clear.
    ///
    /// # Errors
    /// As [`fetch_log_segment`](RemoteStorageManager::fetch_log_segment).
    pub fn inspect(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<Option<SegmentInfo>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        let Some(record) = Record::decode(metadata.custom_metadata(), segment)? else {
            return Ok(None);
        };
        let inner_meta = inner_metadata(metadata, &record)?;
        let bytes = self.fetch_header(&inner_meta, &record, segment)?;
        let header = Header::decode(&bytes, segment)?;
        check_against_record(&header, &bytes, &record, segment)?;
        Ok(Some(SegmentInfo {
            compressed: header.flags & FLAG_ZSTD != 0,
            key_id: header.encryption.map(|e| e.key_id),
            chunk_size: header.chunk_size,
            chunks: u32::try_from(header.chunks.len()).unwrap_or(u32::MAX),
            plaintext_bytes: header.plaintext_size,
            stored_bytes: record.stored_size,
            header_bytes: record.header_len,
        }))
    }

    /// The caller-facing metadata of a segment, from the metadata its backend knows (what
    /// rebuilding the metadata from the bucket alone yields, e.g. from the backend's segment
    /// manifests): for a transformed segment that has the stored size and not this layer's
    /// record, so this reads the transform header at the head of the stored `.log` (two small
    /// ranged requests), checks it (checksum, identity, and the data key and authentication tag
    /// when the key is at hand) and returns the metadata with the plaintext size and the record
    /// wrapping the backend's custom metadata. Untransformed segments come back unchanged;
    /// metadata already carrying the record gets the plaintext size it records.
    ///
    /// # Errors
    /// The backend's fetch errors; [`TransformError`] when the header is damaged, or belongs to
    /// another segment, or its key is present but does not open it.
    pub fn recover_metadata(
        &self,
        stored: &RemoteLogSegmentMetadata,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let segment = stored.remote_log_segment_id();
        if let Some(record) = Record::decode(stored.custom_metadata(), segment)? {
            return with_size(
                stored,
                u64::from(record.plaintext_size),
                Some(record.encode()),
            );
        }
        let size = stored.segment_size_in_bytes();
        if size < FIXED_LEN as u64 {
            return Ok(stored.clone());
        }
        let prefix = self
            .inner
            .fetch_log_segment(stored, 0, Some(FIXED_LEN as u32 - 1))?;
        let Some(len) = header_len_from_prefix(&prefix) else {
            return Ok(stored.clone());
        };
        let corrupt = |reason: String| -> RemoteStorageError {
            TransformError::corrupt(segment, "transform header", reason).into()
        };
        let (Ok(header_len), true) = (u32::try_from(len), len <= size) else {
            return Err(corrupt(format!(
                "a {len}-byte header does not fit the {size}-byte stored object"
            )));
        };
        let bytes = self
            .inner
            .fetch_log_segment(stored, 0, Some(header_len - 1))
            .map_err(|e| truncated(e, segment, "transform header"))?;
        let header = Header::decode(&bytes, segment)?;
        if let Some(encryption) = &header.encryption {
            match DataKey::unwrap_with(self.config.keys().map(AsRef::as_ref), encryption, segment) {
                Ok(key) => {
                    let tag = header
                        .tag
                        .as_ref()
                        .ok_or_else(|| corrupt("encrypted without a tag".to_owned()))?;
                    verify_header_tag(&key, segment, &header.authenticated_bytes(), tag)?;
                }
                // Recovery records what the bucket holds; reading it needs the key later.
                Err(TransformError::MissingKey { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let record = Record {
            flags: header.flags,
            header_len,
            stored_size: u32::try_from(size).map_err(|_| corrupt(format!("{size} bytes")))?,
            plaintext_size: header.plaintext_size,
            digest: header_digest(&bytes),
            inner: stored.custom_metadata().cloned(),
        };
        check_against_record(&header, &bytes, &record, segment)?;
        with_size(
            stored,
            u64::from(header.plaintext_size),
            Some(record.encode()),
        )
    }

    /// The stored `.log` range `[0, header_len)`.
    fn fetch_header(
        &self,
        inner_meta: &RemoteLogSegmentMetadata,
        record: &Record,
        segment: &RemoteLogSegmentId,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let last = record.header_len.saturating_sub(1);
        let bytes = self
            .inner
            .fetch_log_segment(inner_meta, 0, Some(last))
            .map_err(|e| truncated(e, segment, "transform header"))?;
        if bytes.len() as u64 != u64::from(record.header_len) {
            return Err(TransformError::corrupt(
                segment,
                "transform header",
                format!(
                    "the store returned {} bytes for the {}-byte header",
                    bytes.len(),
                    record.header_len
                ),
            )
            .into());
        }
        Ok(bytes)
    }

    /// The decoded header of a copy: from the cache, or fetched with one ranged request.
    fn open_segment(
        &self,
        inner_meta: &RemoteLogSegmentMetadata,
        record: &Record,
        segment: &RemoteLogSegmentId,
    ) -> Result<Arc<OpenSegment>, RemoteStorageError> {
        let key = (segment.clone(), record.digest);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let bytes = self.fetch_header(inner_meta, record, segment)?;
        let open = Arc::new(self.verify_header(&bytes, record, segment)?);
        self.cache.insert(key, Arc::clone(&open));
        Ok(open)
    }

    /// Decodes and verifies a header against the record: structure and CRC, identity, the
    /// data key and GMAC when encrypted, the digest recorded at copy time, and the sizes.
    fn verify_header(
        &self,
        bytes: &[u8],
        record: &Record,
        segment: &RemoteLogSegmentId,
    ) -> Result<OpenSegment, TransformError> {
        let header = Header::decode(bytes, segment)?;
        let key = match &header.encryption {
            Some(encryption) => {
                let key = DataKey::unwrap_with(
                    self.config.keys().map(AsRef::as_ref),
                    encryption,
                    segment,
                )?;
                let tag = header.tag.as_ref().ok_or_else(|| {
                    TransformError::corrupt(segment, "transform header", "encrypted without a tag")
                })?;
                verify_header_tag(&key, segment, &header.authenticated_bytes(), tag)?;
                Some(key)
            }
            None => None,
        };
        let offsets = check_against_record(&header, bytes, record, segment)?;
        Ok(OpenSegment {
            header,
            offsets,
            key,
        })
    }

    /// Fetches and decodes the chunks holding plaintext `range` (non-empty).
    fn read_range(
        &self,
        open: &OpenSegment,
        inner_meta: &RemoteLogSegmentMetadata,
        segment: &RemoteLogSegmentId,
        range: Range<u64>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let m = &open.header;
        let chunk = u64::from(m.chunk_size);
        let size = u64::from(m.plaintext_size);
        let count = u32::try_from(m.chunks.len()).unwrap_or(u32::MAX);
        let first = usize::try_from(range.start / chunk).unwrap_or(usize::MAX);
        let last = usize::try_from((range.end - 1) / chunk).unwrap_or(usize::MAX);
        let cap = u64::from(self.config.fetch_run_bytes());
        let offset = |i: usize| -> Result<u64, TransformError> {
            open.offsets.get(i).copied().ok_or_else(|| {
                TransformError::corrupt(segment, "transform header", format!("no chunk {i}"))
            })
        };
        let mut out = Vec::with_capacity(usize::try_from(range.end - range.start).unwrap_or(0));
        let mut scratch = Vec::new();
        let mut i = first;
        while i <= last {
            // One request for the run i..=j, as long as it stays under the cap.
            let start = offset(i)?;
            let mut j = i;
            while j < last && offset(j + 2)? - start <= cap {
                j += 1;
            }
            let end = offset(j + 1)?;
            let mut stored = if end > start {
                let (Ok(a), Ok(b)) = (u32::try_from(start), u32::try_from(end - 1)) else {
                    return Err(TransformError::corrupt(
                        segment,
                        "transform header",
                        "chunk offsets beyond u32 positions",
                    )
                    .into());
                };
                self.inner
                    .fetch_log_segment(inner_meta, a, Some(b))
                    .map_err(|e| truncated(e, segment, &format!("log chunks {i}..={j}")))?
            } else {
                Vec::new()
            };
            if stored.len() as u64 != end - start {
                return Err(TransformError::corrupt(
                    segment,
                    format!("log chunks {i}..={j}"),
                    format!(
                        "the store returned {} bytes for stored bytes {start}..{end}: the object \
                         is shorter than its header says (truncated?)",
                        stored.len()
                    ),
                )
                .into());
            }
            for k in i..=j {
                let entry = m.chunks.get(k).ok_or_else(|| {
                    TransformError::corrupt(segment, "transform header", format!("no chunk {k}"))
                })?;
                let (a, b) = (
                    (offset(k)? - start) as usize,
                    (offset(k + 1)? - start) as usize,
                );
                let body = stored.get_mut(a..b).ok_or_else(|| {
                    TransformError::corrupt(
                        segment,
                        "transform header",
                        "chunk offsets out of order",
                    )
                })?;
                let plain_start = k as u64 * chunk;
                let plain_len = chunk.min(size - plain_start) as usize;
                let want = (range.start.max(plain_start) - plain_start) as usize
                    ..(range.end.min(plain_start + plain_len as u64) - plain_start) as usize;
                let index = u32::try_from(k).unwrap_or(u32::MAX);
                let key = open.key.as_ref();
                if want.len() == plain_len {
                    let at = out.len();
                    out.resize(at + plain_len, 0);
                    decode_chunk(segment, key, index, count, entry, body, &mut out[at..])?;
                } else {
                    scratch.resize(plain_len, 0);
                    decode_chunk(segment, key, index, count, entry, body, &mut scratch)?;
                    out.extend_from_slice(&scratch[want]);
                }
            }
            i = j + 1;
        }
        Ok(out)
    }
}

/// Checks a decoded header against the record kept in the custom metadata; returns the
/// stored offset of each chunk plus the object's end.
fn check_against_record(
    header: &Header,
    bytes: &[u8],
    record: &Record,
    segment: &RemoteLogSegmentId,
) -> Result<Vec<u64>, TransformError> {
    if header_digest(bytes) != record.digest {
        return Err(TransformError::corrupt(
            segment,
            "transform header",
            "it is not the header recorded when the segment was copied (replaced or replayed \
             from another copy)",
        ));
    }
    if (header.flags, header.plaintext_size) != (record.flags, record.plaintext_size) {
        return Err(TransformError::corrupt(
            segment,
            "transform header",
            "its flags or size differ from the custom metadata",
        ));
    }
    let mut offsets = Vec::with_capacity(header.chunks.len() + 1);
    let mut at = bytes.len() as u64;
    offsets.push(at);
    for c in &header.chunks {
        at += u64::from(c.stored_len);
        offsets.push(at);
    }
    if at != u64::from(record.stored_size) {
        return Err(TransformError::corrupt(
            segment,
            "transform header",
            format!(
                "its chunks end at byte {at}, the stored object has {} bytes",
                record.stored_size
            ),
        ));
    }
    Ok(offsets)
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
    .state(m.state())
    .build_strict()
}

impl RemoteStorageManager for Transforming {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        self.cache.forget(segment);
        if self.config.is_passthrough() {
            return self.inner.copy_log_segment_data(metadata, data);
        }
        let prepared = prepare(&self.config, segment, data)?;
        let inner_meta = with_size(
            &metadata.with_custom_metadata(None),
            u64::from(prepared.stored_size),
            None,
        )?;
        let inner_cm = self
            .inner
            .copy_log_segment_data(&inner_meta, &prepared.data)?;
        let header_len =
            u32::try_from(prepared.header.len()).map_err(|_| TransformError::TooLarge {
                segment: segment.clone(),
                object: "transform header".to_owned(),
                reason: format!("{} bytes", prepared.header.len()),
            })?;
        let record = Record {
            flags: prepared.open.header.flags,
            header_len,
            stored_size: prepared.stored_size,
            plaintext_size: prepared.open.header.plaintext_size,
            digest: header_digest(&prepared.header),
            inner: inner_cm,
        };
        let cm = record.encode();
        let max = self.config.custom_metadata_max_bytes();
        if cm.len() > max {
            return Err(TransformError::TooLarge {
                segment: segment.clone(),
                object: "custom metadata".to_owned(),
                reason: format!(
                    "{} bytes (the inner store's {} plus this layer's record) exceed the cap of \
                     {max} bytes",
                    cm.len(),
                    record.inner.as_ref().map_or(0, CustomMetadata::len)
                ),
            }
            .into());
        }
        self.cache
            .insert((segment.clone(), record.digest), Arc::new(prepared.open));
        Ok(Some(cm))
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        let Some(record) = Record::decode(metadata.custom_metadata(), segment)? else {
            return self
                .inner
                .fetch_log_segment(metadata, start_position, end_position);
        };
        let range = checked_range(
            u64::from(record.plaintext_size),
            start_position,
            end_position,
        )
        .map_err(|e| e.for_segment(segment))?;
        let inner_meta = inner_metadata(metadata, &record)?;
        if range.is_empty() {
            // No bytes to decode, but a missing segment is still SegmentNotFound.
            self.fetch_header(&inner_meta, &record, segment)?;
            return Ok(Vec::new());
        }
        let open = self.open_segment(&inner_meta, &record, segment)?;
        self.read_range(&open, &inner_meta, segment, range)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        let Some(record) = Record::decode(metadata.custom_metadata(), segment)? else {
            return self.inner.fetch_index(metadata, index_type);
        };
        let object = index_object(index_type);
        let inner_meta = inner_metadata(metadata, &record)?;
        let mut bytes = self.inner.fetch_index(&inner_meta, index_type)?;
        let mlen = record.header_len as usize;
        if bytes.len() < mlen {
            return Err(TransformError::corrupt(
                segment,
                object,
                format!(
                    "{} bytes cannot hold its {mlen}-byte header (truncated?)",
                    bytes.len()
                ),
            )
            .into());
        }
        let (head, body) = bytes.split_at_mut(mlen);
        let key = (segment.clone(), record.digest);
        let open = match self.cache.get(&key) {
            Some(hit) => {
                if header_digest(head) != record.digest {
                    return Err(TransformError::corrupt(
                        segment,
                        object,
                        "its header is not the one recorded when the segment was copied",
                    )
                    .into());
                }
                hit
            }
            None => {
                let open = Arc::new(self.verify_header(head, &record, segment)?);
                self.cache.insert(key, Arc::clone(&open));
                open
            }
        };
        let slot = index_slot(index_type);
        let Some(entry) = open.header.indexes.get(slot).copied().flatten() else {
            return Err(TransformError::corrupt(
                segment,
                object,
                "the store has it but the header records no such index",
            )
            .into());
        };
        Ok(decode_index(
            segment,
            open.key.as_ref(),
            slot,
            &index_object(index_type),
            &entry,
            body,
        )?)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        self.cache.forget(segment);
        match Record::decode(metadata.custom_metadata(), segment) {
            Ok(Some(record)) => self
                .inner
                .delete_log_segment_data(&inner_metadata(metadata, &record)?),
            Ok(None) => self.inner.delete_log_segment_data(metadata),
            // A malformed record must not keep the data from being deleted.
            Err(_) => self
                .inner
                .delete_log_segment_data(&metadata.with_custom_metadata(None)),
        }
    }
}

impl fmt::Debug for Transforming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transforming")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
