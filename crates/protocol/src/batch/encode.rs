//! Writing a batch.

use bytes::Bytes;

use super::varint::{put_varint, put_varlong};
use super::{
    ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, BatchError, BatchSpec, Compression,
    HEADER_LEN, LOG_OVERHEAD, MAGIC, NO_TIMESTAMP, RecordSpec, codec,
};

/// Byte position of the CRC in the header.
pub(crate) const CRC_AT: usize = 17;
/// Byte position of the attributes, where the CRC's coverage starts.
pub(crate) const ATTRIBUTES_AT: usize = 21;
/// Byte position of `lastOffsetDelta`.
pub(crate) const LAST_OFFSET_DELTA_AT: usize = 23;
/// Byte position of `maxTimestamp`.
pub(crate) const MAX_TIMESTAMP_AT: usize = 35;
/// Byte position of `recordCount`.
pub(crate) const RECORD_COUNT_AT: usize = 57;

/// Encodes `records` as one v2 record batch, byte for byte as Kafka lays it out.
///
/// Record `i` gets offset delta `i`; `baseTimestamp` is the first record's timestamp (as Kafka's
/// producer writes it) and every record stores its difference to it; `maxTimestamp` is the
/// largest record timestamp, or [`BatchSpec::log_append_time`] when that is set. A batch without
/// records has `lastOffsetDelta` -1 and both timestamps [`NO_TIMESTAMP`](super::NO_TIMESTAMP).
/// The records section is compressed with [`BatchSpec::compression`] (even when that does not
/// make it smaller), and the CRC-32C is computed over `attributes` to the end.
///
/// ```
/// use krabka_protocol::batch::{encode_batch, BatchSpec, BatchView, Compression, RecordSpec};
///
/// let spec = BatchSpec { producer_id: 7, producer_epoch: 0, base_sequence: 0, ..BatchSpec::new(0) };
/// let bytes = encode_batch(&spec, &[RecordSpec::tombstone(5).with_key("gone")])?;
/// assert_eq!(bytes.len(), 61 + 11); // length, attributes, two deltas, key, null value, no headers
/// assert_eq!(BatchView::parse(&bytes)?.header().producer_id, 7);
/// # Ok::<(), krabka_protocol::batch::BatchError>(())
/// ```
///
/// # Errors
/// [`BatchError::Encode`] when a count, length, offset or timestamp delta does not fit its
/// field; [`BatchError::CodecDisabled`] when the codec's feature is off;
/// [`BatchError::Compress`] when the codec fails.
pub fn encode_batch(spec: &BatchSpec, records: &[RecordSpec]) -> Result<Bytes, BatchError> {
    let n = records.len();
    let batch_field = |field| BatchError::Encode { field, index: n };
    let count = i32::try_from(n).map_err(|_| batch_field("recordCount"))?;
    let last_offset_delta = count - 1;
    spec.base_offset
        .checked_add(i64::from(last_offset_delta))
        .ok_or(batch_field("baseOffset"))?;
    let base_timestamp = records.first().map_or(NO_TIMESTAMP, |r| r.timestamp);
    let max_timestamp = match spec.log_append_time {
        Some(t) => t,
        None => records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(NO_TIMESTAMP),
    };

    let mut body = Vec::new();
    let mut scratch = Vec::new();
    for (index, (record, delta)) in records.iter().zip(0i32..).enumerate() {
        scratch.clear();
        encode_record(&mut scratch, record, base_timestamp, delta, index)?;
        let len = i32::try_from(scratch.len()).map_err(|_| BatchError::Encode {
            field: "length",
            index,
        })?;
        put_varint(&mut body, len);
        body.extend_from_slice(&scratch);
    }
    let payload = match spec.compression {
        Compression::None => body,
        codec => codec::compress(codec, &body)?,
    };

    let batch_length = i32::try_from(HEADER_LEN - LOG_OVERHEAD + payload.len())
        .map_err(|_| batch_field("batchLength"))?;
    let mut attributes = i16::from(spec.compression.code());
    if spec.log_append_time.is_some() {
        attributes |= ATTR_LOG_APPEND_TIME;
    }
    if spec.transactional {
        attributes |= ATTR_TRANSACTIONAL;
    }
    if spec.control {
        attributes |= ATTR_CONTROL;
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&spec.base_offset.to_be_bytes());
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&[0; 4]); // The CRC, once the rest is written.
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&last_offset_delta.to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&spec.producer_id.to_be_bytes());
    out.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    out.extend_from_slice(&spec.base_sequence.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    debug_assert_eq!(out.len(), HEADER_LEN);
    out.extend_from_slice(&payload);
    let crc = super::crc32c(out.get(ATTRIBUTES_AT..).unwrap_or_default());
    if let Some(slot) = out.get_mut(CRC_AT..ATTRIBUTES_AT) {
        slot.copy_from_slice(&crc.to_be_bytes());
    }
    Ok(Bytes::from(out))
}

/// Appends one record's body (everything after its length).
fn encode_record(
    out: &mut Vec<u8>,
    record: &RecordSpec,
    base_timestamp: i64,
    offset_delta: i32,
    index: usize,
) -> Result<(), BatchError> {
    let field_error = |field| BatchError::Encode { field, index };
    out.push(0); // Record attributes: unused.
    let timestamp_delta = record
        .timestamp
        .checked_sub(base_timestamp)
        .ok_or(field_error("timestampDelta"))?;
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_nullable(out, record.key.as_deref(), "keyLength", index)?;
    put_nullable(out, record.value.as_deref(), "valueLength", index)?;
    let headers = i32::try_from(record.headers.len()).map_err(|_| field_error("headerCount"))?;
    put_varint(out, headers);
    for (name, value) in &record.headers {
        put_nullable(out, Some(name.as_bytes()), "headerKeyLength", index)?;
        put_nullable(out, value.as_deref(), "headerValueLength", index)?;
    }
    Ok(())
}

/// Appends a varint length (-1 for null) and the bytes.
fn put_nullable(
    out: &mut Vec<u8>,
    bytes: Option<&[u8]>,
    field: &'static str,
    index: usize,
) -> Result<(), BatchError> {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            let len = i32::try_from(b.len()).map_err(|_| BatchError::Encode { field, index })?;
            put_varint(out, len);
            out.extend_from_slice(b);
        }
    }
    Ok(())
}
