//! Kafka's v2 record batches (magic 2), byte for byte.
//!
//! A batch is a 61-byte big-endian header followed by its records, optionally compressed as one
//! block. The layout (Kafka's `DefaultRecordBatch` and `DefaultRecord`):
//!
//! ```text
//! baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 (= 2) | crc u32
//! | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64
//! | producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records
//!
//! record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
//!         | keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value
//!         | headerCount varint | headers (keyLength varint | key (UTF-8)
//!                                          | valueLength varint (-1 = null) | value)
//! ```
//!
//! `batchLength` counts the bytes after itself; the CRC-32C (Castagnoli) covers `attributes` to
//! the end, so `baseOffset` and `partitionLeaderEpoch` can be rewritten in place without
//! recomputing it ([`set_base_offset`], [`set_partition_leader_epoch`]). Varints are
//! zigzag-encoded LEB128, at most 5 bytes (varint) or 10 (varlong).
//!
//! - [`encode_batch`] writes a batch from a [`BatchSpec`] and [`RecordSpec`]s.
//! - [`BatchView::parse`] checks the framing, the magic and the CRC and gives the header
//!   ([`BatchHeader`]); [`BatchView::records`] decompresses once, within a bound, and iterates
//!   the records ([`RecordRef`]), checking every one of them and the header against them.
//!
//! Compression codecs are cargo features, none of them on by default: `gzip` (flate2), `snappy`
//! (snap; written in the xerial framing Kafka's Java client uses, read framed or plain), `lz4`
//! (lz4_flex, the LZ4 frame format with independent 64 KiB blocks) and `zstd`. A batch whose
//! codec is not built in is named by [`BatchError::CodecDisabled`]; its header still parses.
//!
//! Decoding is written for untrusted input: it never panics, never reads out of bounds, and never
//! allocates more than the input holds — except the decompressed records of a compressed batch,
//! which never exceed the caller's `max_uncompressed` ([`BatchError::TooLarge`]).
//!
//! ```
//! use krabka_protocol::batch::{encode_batch, BatchSpec, BatchView, RecordSpec};
//!
//! let records = vec![
//!     RecordSpec::new(1_700_000_000_000, "first").with_key("k"),
//!     RecordSpec::new(1_700_000_000_005, "second").with_header("trace", Some("abc".into())),
//! ];
//! let bytes = encode_batch(&BatchSpec::new(100), &records)?;
//!
//! let view = BatchView::parse(&bytes)?;
//! assert_eq!(view.header().record_count, 2);
//! assert_eq!(view.header().last_offset(), 101);
//! let read = view.records(1 << 20)?.collect::<Result<Vec<_>, _>>()?;
//! assert_eq!(read[1].offset, 101);
//! assert_eq!(read[1].value.as_deref(), Some(&b"second"[..]));
//! assert_eq!(read[1].headers[0].0, "trace");
//! # Ok::<(), krabka_protocol::batch::BatchError>(())
//! ```

use std::fmt;

use bytes::Bytes;

mod codec;
mod crc;
mod encode;
mod error;
mod messages;
mod records;
mod stored_header;
mod varint;
mod view;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_encoder;
#[cfg(test)]
mod tests_hostile;

pub use crc::{Crc32c, crc32c};
pub use encode::encode_batch;
pub use error::BatchError;
pub use messages::{BatchPiece, encode_messages, encode_messages_split, record_size};
pub use records::{RecordIter, RecordRef};
pub use stored_header::StoredHeader;
pub use view::{
    BatchHeader, BatchView, max_timestamp_of, set_base_offset, set_partition_leader_epoch,
};

/// The magic byte of a v2 record batch.
pub const MAGIC: i8 = 2;
/// Bytes of the batch header, up to the first record.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batchLength` counts: `baseOffset` (8) and `batchLength` (4) themselves.
pub const LOG_OVERHEAD: usize = 12;
/// `producerId` of a batch written without an idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// `producerEpoch` of a batch written without an idempotent producer.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `baseSequence` of a batch written without an idempotent producer.
pub const NO_SEQUENCE: i32 = -1;
/// `partitionLeaderEpoch` of a batch no leader has stamped.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// `baseTimestamp` and `maxTimestamp` of a batch without records.
pub const NO_TIMESTAMP: i64 = -1;

/// Bits 0-2 of `attributes`: the compression codec.
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
/// Bit 3 of `attributes`: the timestamps are the log append time (`maxTimestamp`).
pub const ATTR_LOG_APPEND_TIME: i16 = 0x08;
/// Bit 4 of `attributes`: the batch belongs to a transaction.
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
/// Bit 5 of `attributes`: the batch holds control records (transaction markers).
pub const ATTR_CONTROL: i16 = 0x20;
/// Bit 6 of `attributes`: `baseTimestamp` is the delete horizon set by log compaction.
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// The compression codec of a batch (bits 0-2 of its attributes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Records stored as they are (code 0).
    #[default]
    None,
    /// Gzip (code 1; feature `gzip`).
    Gzip,
    /// Snappy (code 2; feature `snappy`).
    Snappy,
    /// LZ4 frame format (code 3; feature `lz4`).
    Lz4,
    /// Zstandard (code 4; feature `zstd`).
    Zstd,
}

impl Compression {
    /// Every codec, in code order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec's code in the attributes.
    pub const fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec of a code.
    ///
    /// # Errors
    /// [`BatchError::UnsupportedCompression`] for codes 5 to 7 (and anything larger).
    pub const fn from_code(code: u8) -> Result<Compression, BatchError> {
        match code {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            _ => Err(BatchError::UnsupportedCompression { code }),
        }
    }

    /// Kafka's name of the codec (`none`, `gzip`, `snappy`, `lz4`, `zstd`).
    pub const fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Whether this build can write and read the codec (its cargo feature is on).
    pub const fn is_enabled(self) -> bool {
        match self {
            Compression::None => true,
            Compression::Gzip => cfg!(feature = "gzip"),
            Compression::Snappy => cfg!(feature = "snappy"),
            Compression::Lz4 => cfg!(feature = "lz4"),
            Compression::Zstd => cfg!(feature = "zstd"),
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the record timestamps of a batch mean (bit 3 of its attributes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimestampType {
    /// Each record carries the time its producer gave it.
    CreateTime,
    /// Every record's timestamp is the batch's `maxTimestamp`, the time the log appended it.
    LogAppendTime,
}

/// The batch-level fields [`encode_batch`] writes.
///
/// `Default` is a batch at offset 0 without a leader epoch, producer or compression:
/// `BatchSpec { compression: Compression::Zstd, ..BatchSpec::new(42) }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSpec {
    /// Offset of the first record; record `i` gets `base_offset + i`.
    pub base_offset: i64,
    /// The leader epoch stamped by the partition leader ([`NO_PARTITION_LEADER_EPOCH`] if none).
    pub partition_leader_epoch: i32,
    /// Idempotent producer id ([`NO_PRODUCER_ID`] if none).
    pub producer_id: i64,
    /// Idempotent producer epoch ([`NO_PRODUCER_EPOCH`] if none).
    pub producer_epoch: i16,
    /// Sequence number of the first record ([`NO_SEQUENCE`] if none).
    pub base_sequence: i32,
    /// How the records are compressed.
    pub compression: Compression,
    /// Sets the transactional bit.
    pub transactional: bool,
    /// Sets the control bit (the records are transaction markers; their contents are the
    /// caller's to form).
    pub control: bool,
    /// `Some(t)`: a log-append-time batch whose `maxTimestamp` is `t` (the record timestamps are
    /// still written, as deltas, but readers report `t` for every record). `None`: create time,
    /// `maxTimestamp` is the largest record timestamp.
    pub log_append_time: Option<i64>,
}

impl BatchSpec {
    /// A batch at `base_offset`, otherwise [`Default`].
    pub fn new(base_offset: i64) -> Self {
        Self {
            base_offset,
            ..Self::default()
        }
    }
}

impl Default for BatchSpec {
    fn default() -> Self {
        Self {
            base_offset: 0,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            compression: Compression::None,
            transactional: false,
            control: false,
            log_append_time: None,
        }
    }
}

/// One record to encode.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct RecordSpec {
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The key; `None` (null) and an empty key are distinct.
    pub key: Option<Bytes>,
    /// The value; `None` (null, a tombstone) and an empty value are distinct.
    pub value: Option<Bytes>,
    /// Headers in order: a UTF-8 name and a nullable value; names may repeat.
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl RecordSpec {
    /// A record with a value, no key and no headers.
    pub fn new(timestamp: i64, value: impl Into<Bytes>) -> Self {
        Self {
            timestamp,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
        }
    }

    /// A record with a null value (a tombstone) and no key or headers.
    pub fn tombstone(timestamp: i64) -> Self {
        Self {
            timestamp,
            ..Self::default()
        }
    }

    /// Sets the key.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Appends a header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push((name.into(), value));
        self
    }
}
