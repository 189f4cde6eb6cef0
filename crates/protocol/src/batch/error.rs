//! Why a batch could not be read or written.

use super::Compression;

/// Why bytes are not a valid v2 record batch, or why records cannot be written as one.
///
/// Positions (`at`) count bytes from the start of the batch. Inside the records of a compressed
/// batch they count in the decompressed records as if they followed the 61-byte header
/// uncompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The input ends before a field or the batch does.
    #[error("truncated batch: {needed} bytes needed at byte {at}")]
    Truncated {
        /// Bytes the item needs, from `at` on.
        needed: usize,
        /// Byte position where the item starts.
        at: usize,
    },
    /// The magic byte is not 2.
    #[error("magic byte {found} at byte 16 is not 2: not a v2 record batch")]
    BadMagic {
        /// The magic found.
        found: i8,
    },
    /// The CRC-32C over `attributes` to the end differs from the stored one.
    #[error("batch CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc {
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A length, count or delta is out of its range or disagrees with the bytes around it.
    #[error("{field} {value} at byte {at} is out of range")]
    Length {
        /// The field (Kafka's name: `batchLength`, `recordCount`, `keyLength`, ...).
        field: &'static str,
        /// The value found.
        value: i64,
        /// Byte position of the field.
        at: usize,
    },
    /// `recordCount` differs from the records the batch holds.
    #[error("recordCount {header} but the batch holds {found} records")]
    RecordCount {
        /// `recordCount` in the header.
        header: i32,
        /// Records found (at least this many when more than the header says).
        found: usize,
    },
    /// A record's `offsetDelta` is not its index (deltas must run 0, 1, ..., n-1).
    #[error("offsetDelta {found} at byte {at}: expected {expected}")]
    OffsetDelta {
        /// The record's index in the batch.
        expected: i32,
        /// The delta found.
        found: i32,
        /// Byte position of the field.
        at: usize,
    },
    /// `lastOffsetDelta` is not the number of records minus one.
    #[error("lastOffsetDelta {header} but the last record's offsetDelta is {found}")]
    LastOffsetDelta {
        /// `lastOffsetDelta` in the header.
        header: i32,
        /// The records' count minus one.
        found: i32,
    },
    /// `maxTimestamp` of a create-time batch is not its largest record timestamp.
    #[error("maxTimestamp {header} but the largest record timestamp is {found}")]
    Timestamp {
        /// `maxTimestamp` in the header.
        header: i64,
        /// The largest record timestamp.
        found: i64,
    },
    /// The compression code is not one Kafka defines (5 to 7).
    #[error("unsupported compression code {code}")]
    UnsupportedCompression {
        /// Bits 0-2 of the attributes.
        code: u8,
    },
    /// The codec is valid but this build does not include it (its cargo feature is off).
    #[error("{codec} compression is not built in (enable the `{codec}` feature)")]
    CodecDisabled {
        /// The codec.
        codec: Compression,
    },
    /// The compressed records could not be decompressed.
    #[error("{codec} records do not decompress: {reason}")]
    Decompress {
        /// The codec.
        codec: Compression,
        /// The decoder's reason.
        reason: String,
    },
    /// The records could not be compressed.
    #[error("{codec} compression failed: {reason}")]
    Compress {
        /// The codec.
        codec: Compression,
        /// The encoder's reason.
        reason: String,
    },
    /// The compressed records decompress to more than the caller's limit.
    #[error("records decompress to more than the {limit}-byte limit")]
    TooLarge {
        /// The limit given to [`BatchView::records`](super::BatchView::records).
        limit: usize,
    },
    /// A varint runs longer than 5 bytes (10 for a varlong) or past 32 (64) bits.
    #[error("invalid varint at byte {at}")]
    Varint {
        /// Byte position of the varint.
        at: usize,
    },
    /// A header name is not valid UTF-8.
    #[error("header name at byte {at} is not valid UTF-8")]
    Utf8 {
        /// Byte position of the name's first byte.
        at: usize,
    },
    /// A value does not fit its field of the v2 format, so the records cannot be written.
    #[error("record {index}: {field} does not fit the v2 batch format")]
    Encode {
        /// The field (`recordCount`, `timestampDelta`, `keyLength`, `batchLength`, ...).
        field: &'static str,
        /// The record's index (the number of records for batch-wide fields).
        index: usize,
    },
    /// A valid record that a `Message` cannot hold exactly (a null value, a header with a
    /// null value), or a batch whose records are not messages (control records).
    #[error("record at offset {offset} holds {what}, which a Message cannot represent")]
    NotAMessage {
        /// The record's offset.
        offset: i64,
        /// What it holds.
        what: &'static str,
    },
}
