//! The remote indexes a read uses: a segment's offset index (validated against its metadata,
//! for the read and for the read-ahead) and its time index (for timestamp lookups), each fetched
//! once through the single-flight path and cached whole.

use bytes::Bytes;
use krabka_remote_storage::{IndexType, RemoteLogSegmentMetadata};
use krabka_storage::index::{OffsetIndexView, TimeIndexView};

use super::{RemoteReader, object_key, position_and_reason};
use crate::cache::Part;
use crate::error::Error;
use crate::read::chunkmap::backend_view;
use crate::stats::bump;

/// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) for a segment's offset index.
fn index_corrupt(meta: &RemoteLogSegmentMetadata, seq: u64, e: &krabka_storage::Error) -> Error {
    let (at, why) = position_and_reason(e);
    index_error(meta, seq, at, why)
}

fn index_error(
    meta: &RemoteLogSegmentMetadata,
    seq: u64,
    position: Option<u64>,
    reason: String,
) -> Error {
    super::object_corrupt(
        meta,
        Some(IndexType::Offset),
        seq,
        position,
        format!("offset index: {reason}"),
    )
}

/// A fetched offset index, validated (CRC, order, and its range and size against the
/// metadata).
fn checked_offset_index(
    meta: &RemoteLogSegmentMetadata,
    seq: u64,
    bytes: Vec<u8>,
) -> Result<OffsetIndexView, Error> {
    let view = OffsetIndexView::parse(bytes).map_err(|e| index_corrupt(meta, seq, &e))?;
    let expected = (
        meta.start_offset(),
        meta.end_offset(),
        meta.segment_size_in_bytes(),
    );
    let found = (view.base_seq(), view.last_seq(), view.log_size());
    if found != expected {
        return Err(index_error(
            meta,
            seq,
            None,
            format!(
                "describes seqs {}..={} in {} bytes, the metadata {}..={} in {} bytes",
                found.0, found.1, found.2, expected.0, expected.1, expected.2
            ),
        ));
    }
    Ok(view)
}

/// [`checked_offset_index`] for the read-ahead: the bytes to cache, or `None`.
pub(crate) fn prefetched_index(meta: &RemoteLogSegmentMetadata, bytes: Vec<u8>) -> Option<Bytes> {
    checked_offset_index(meta, meta.start_offset(), bytes)
        .ok()
        .map(|v| v.as_bytes().clone())
}

impl RemoteReader<'_> {
    /// The segment's offset index. On a miss the index is fetched (single-flight: a fetch of
    /// it in progress, by another reader or the read-ahead, is waited for and its result
    /// taken), validated once (CRC, order, and its range and size against the metadata) and
    /// cached whole; a hit is wrapped again without a new CRC check, so later reads only
    /// binary-search it.
    pub(super) fn remote_index(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seq: u64,
    ) -> Result<OffsetIndexView, Error> {
        let id = meta.remote_log_segment_id();
        let bytes = self.single_flight(meta, Part::OffsetIndex, seq, || {
            let _slot = self.fetch_slot(meta, Some(IndexType::Offset), 0, seq)?;
            bump(&self.counters.fetch_index, 1);
            let bytes = self
                .rsm
                .fetch_index(&backend_view(meta), IndexType::Offset)
                .map_err(|e| Error::remote("fetch_index", id, Some(seq), e))?;
            Ok(checked_offset_index(meta, seq, bytes)?.as_bytes().clone())
        })?;
        OffsetIndexView::from_parsed_bytes(bytes).map_err(|e| index_corrupt(meta, seq, &e))
    }

    /// The seq from which to scan a finished remote segment for the first record whose
    /// timestamp is `>= ts` (`None`: no record of it has one), from its time index. On a miss
    /// the time index is fetched, validated (CRC, order, base seq and max timestamp against the
    /// metadata) and cached whole.
    pub(crate) fn remote_time_floor(
        &self,
        meta: &RemoteLogSegmentMetadata,
        ts: i64,
    ) -> Result<Option<u64>, Error> {
        let seq = meta.start_offset();
        let corrupt = |position: Option<u64>, reason: String| {
            Error::Read(crate::error::ReadError::CorruptRemote {
                segment: Box::new(meta.remote_log_segment_id().clone()),
                object: object_key(meta, Some(IndexType::Timestamp)),
                position,
                seq,
                reason: format!("time index: {reason}"),
            })
        };
        let floor = self.remote_time_index(meta)?.floor(ts);
        match floor {
            Some(f) if f < meta.start_offset() || f > meta.end_offset() => Err(corrupt(
                None,
                format!(
                    "points at seq {f}, outside the segment's seqs {}..={}",
                    meta.start_offset(),
                    meta.end_offset()
                ),
            )),
            other => Ok(other),
        }
    }

    /// The segment's time index: fetched, validated and checked against the metadata on a
    /// miss, then cached whole.
    fn remote_time_index(&self, meta: &RemoteLogSegmentMetadata) -> Result<TimeIndexView, Error> {
        let id = meta.remote_log_segment_id();
        let seq = meta.start_offset();
        let corrupt = |position: Option<u64>, reason: String| {
            Error::Read(crate::error::ReadError::CorruptRemote {
                segment: Box::new(id.clone()),
                object: object_key(meta, Some(IndexType::Timestamp)),
                position,
                seq,
                reason: format!("time index: {reason}"),
            })
        };
        let invalid = |e: krabka_storage::Error| {
            let (at, why) = position_and_reason(&e);
            corrupt(at, why)
        };
        let bytes = self.single_flight(meta, Part::TimeIndex, seq, || {
            let _slot = self.fetch_slot(meta, Some(IndexType::Timestamp), 0, seq)?;
            bump(&self.counters.fetch_index, 1);
            let bytes = self
                .rsm
                .fetch_index(&backend_view(meta), IndexType::Timestamp)
                .map_err(|e| Error::remote("fetch_index", id, Some(seq), e))?;
            let view = TimeIndexView::parse(bytes).map_err(invalid)?;
            if (view.base_seq(), view.max_timestamp())
                != (meta.start_offset(), meta.max_timestamp_ms())
            {
                return Err(corrupt(
                    None,
                    format!(
                        "describes base seq {} and max timestamp {}, the metadata {} and {}",
                        view.base_seq(),
                        view.max_timestamp(),
                        meta.start_offset(),
                        meta.max_timestamp_ms()
                    ),
                ));
            }
            Ok(view.as_bytes().clone())
        })?;
        TimeIndexView::from_parsed_bytes(bytes).map_err(invalid)
    }
}
