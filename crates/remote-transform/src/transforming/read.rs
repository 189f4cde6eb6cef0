//! The read side: a segment's header fetched and verified, and ranged reads that fetch and
//! decode only the chunks they need.

use std::ops::{Range, RangeInclusive};
use std::sync::Arc;

use krabka_remote_storage::{
    IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageError,
};

use super::{Transforming, truncated};
use crate::cache::OpenSegment;
use crate::codec::{decode_chunk, verify_header_tag};
use crate::crypto::DataKey;
use crate::error::TransformError;
use crate::format::{Header, Record, header_digest};

impl Transforming {
    /// The stored `.log` range `[0, header_len)`.
    pub(super) fn fetch_header(
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
    pub(super) fn open_segment(
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
        let open = match self.verify_header(&bytes, record, segment) {
            Ok(open) => open,
            // The same header starts every index object of the copy: a damaged `.log` header
            // is read from there (checked against the digest recorded at copy time all the
            // same), and reported as it is only when no copy of it checks out.
            Err(e @ (TransformError::Corrupt { .. } | TransformError::Authentication { .. })) => {
                match self.header_from_index(inner_meta, record, segment) {
                    Some(open) => open,
                    None => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let open = Arc::new(open);
        self.cache.insert(key, Arc::clone(&open));
        Ok(open)
    }

    /// The header of a copy from the start of one of its index objects (the offset index,
    /// then the time index) that passes every check [`verify_header`](Self::verify_header)
    /// makes; `None` when none does (or none can be fetched).
    fn header_from_index(
        &self,
        inner_meta: &RemoteLogSegmentMetadata,
        record: &Record,
        segment: &RemoteLogSegmentId,
    ) -> Option<OpenSegment> {
        let len = record.header_len as usize;
        [IndexType::Offset, IndexType::Timestamp]
            .into_iter()
            .find_map(|index_type| {
                let bytes = self.inner.fetch_index(inner_meta, index_type).ok()?;
                let head = bytes.get(..len)?;
                let open = self.verify_header(head, record, segment).ok()?;
                // Reads go on, but the `.log` object is damaged: say so.
                tracing::warn!(
                    %segment,
                    copy = ?index_type,
                    "the transform header of the segment's .log object fails its checks;                      read from the copy at the head of its index object"
                );
                Some(open)
            })
    }

    /// Decodes and verifies a header against the record: structure and CRC, identity, the
    /// data key and GMAC when encrypted, the digest recorded at copy time, and the sizes.
    pub(super) fn verify_header(
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

    /// Fetches and decodes the chunks holding plaintext `range` (non-empty): one request per
    /// run of adjacent chunks up to `TransformConfig::fetch_run_bytes`.
    pub(super) fn read_range(
        &self,
        open: &OpenSegment,
        inner_meta: &RemoteLogSegmentMetadata,
        segment: &RemoteLogSegmentId,
        range: Range<u64>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let chunk = u64::from(open.header.chunk_size);
        let first = usize::try_from(range.start / chunk).unwrap_or(usize::MAX);
        let last = usize::try_from((range.end - 1) / chunk).unwrap_or(usize::MAX);
        let cap = u64::from(self.config.fetch_run_bytes());
        let offset = |i: usize| chunk_offset(open, segment, i);
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
            let mut stored = self.fetch_run(inner_meta, segment, i..=j, start..end)?;
            let run = Run {
                chunks: i..=j,
                start,
                range: &range,
            };
            decode_run(open, segment, &run, &mut stored, &mut out, &mut scratch)?;
            i = j + 1;
        }
        Ok(out)
    }

    /// The stored bytes `stored` of chunks `chunks`, all of them or an error.
    fn fetch_run(
        &self,
        inner_meta: &RemoteLogSegmentMetadata,
        segment: &RemoteLogSegmentId,
        chunks: RangeInclusive<usize>,
        stored: Range<u64>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let (i, j) = (chunks.start(), chunks.end());
        let Range { start, end } = stored;
        let bytes = if end > start {
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
        if bytes.len() as u64 != end - start {
            return Err(TransformError::corrupt(
                segment,
                format!("log chunks {i}..={j}"),
                format!(
                    "the store returned {} bytes for stored bytes {start}..{end}: the object \
                     is shorter than its header says (truncated?)",
                    bytes.len()
                ),
            )
            .into());
        }
        Ok(bytes)
    }
}

/// One fetched run: its chunks, where its stored bytes start, and the plaintext range read.
struct Run<'a> {
    chunks: RangeInclusive<usize>,
    start: u64,
    range: &'a Range<u64>,
}

/// The stored offset of chunk `i` (of the object's end for `i == chunks`).
fn chunk_offset(
    open: &OpenSegment,
    segment: &RemoteLogSegmentId,
    i: usize,
) -> Result<u64, TransformError> {
    open.offsets.get(i).copied().ok_or_else(|| {
        TransformError::corrupt(segment, "transform header", format!("no chunk {i}"))
    })
}

/// Decodes the chunks of `run` from its stored bytes and appends the part of each that
/// `run.range` covers to `out` (whole chunks straight into `out`, others through `scratch`).
fn decode_run(
    open: &OpenSegment,
    segment: &RemoteLogSegmentId,
    run: &Run<'_>,
    stored: &mut [u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), TransformError> {
    let m = &open.header;
    let chunk = u64::from(m.chunk_size);
    let size = u64::from(m.plaintext_size);
    let count = u32::try_from(m.chunks.len()).unwrap_or(u32::MAX);
    let range = run.range;
    for k in run.chunks.clone() {
        let entry = m.chunks.get(k).ok_or_else(|| {
            TransformError::corrupt(segment, "transform header", format!("no chunk {k}"))
        })?;
        let (a, b) = (
            (chunk_offset(open, segment, k)? - run.start) as usize,
            (chunk_offset(open, segment, k + 1)? - run.start) as usize,
        );
        let body = stored.get_mut(a..b).ok_or_else(|| {
            TransformError::corrupt(segment, "transform header", "chunk offsets out of order")
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
            decode_chunk(segment, key, index, count, entry, body, scratch)?;
            out.extend_from_slice(&scratch[want]);
        }
    }
    Ok(())
}

/// Checks a decoded header against the record kept in the custom metadata; returns the
/// stored offset of each chunk plus the object's end.
pub(super) fn check_against_record(
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
    if let Some(recorded) = record.key_id
        && header.encryption.map(|e| e.key_id) != Some(recorded)
    {
        return Err(TransformError::corrupt(
            segment,
            "transform header",
            format!("its key id differs from the {recorded} of the custom metadata"),
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
