//! Reading a batch's header, and rewriting the fields the CRC leaves out.

use bytes::Bytes;

use super::encode::{ATTRIBUTES_AT, CRC_AT, MAX_TIMESTAMP_AT};
use super::records::{RecordIter, check_records};
use super::{
    ATTR_COMPRESSION_MASK, ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TRANSACTIONAL, BatchError,
    Compression, HEADER_LEN, LOG_OVERHEAD, MAGIC, TimestampType, codec,
};

/// Byte position of `partitionLeaderEpoch`.
const LEADER_EPOCH_AT: usize = 12;
/// Byte position of the magic byte.
const MAGIC_AT: usize = 16;

/// The header fields of a batch, as stored (see the [module docs](super) for the layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after this field: the batch is `12 + batch_length` bytes.
    pub batch_length: i32,
    /// The leader epoch stamped by the partition leader.
    pub partition_leader_epoch: i32,
    /// Always [`MAGIC`] (2) in a parsed header.
    pub magic: i8,
    /// The CRC-32C of `attributes` to the end of the batch.
    pub crc: u32,
    /// The raw attribute bits.
    pub attributes: i16,
    /// The codec of bits 0-2 of the attributes.
    pub compression: Compression,
    /// Offset delta of the last record (the record count minus one).
    pub last_offset_delta: i32,
    /// The timestamp record timestamps are stored relative to (the first record's, as producers
    /// write it; the delete horizon when [`has_delete_horizon`](Self::has_delete_horizon)).
    pub base_timestamp: i64,
    /// The largest record timestamp, or the log append time.
    pub max_timestamp: i64,
    /// Idempotent producer id (-1 if none).
    pub producer_id: i64,
    /// Idempotent producer epoch (-1 if none).
    pub producer_epoch: i16,
    /// Sequence number of the first record (-1 if none).
    pub base_sequence: i32,
    /// Number of records.
    pub record_count: i32,
}

impl BatchHeader {
    /// What the record timestamps mean (bit 3).
    pub fn timestamp_type(&self) -> TimestampType {
        super::stored_header::timestamp_type_of(self.attributes)
    }

    /// Whether the transactional bit (4) is set.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the control bit (5) is set.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether the delete-horizon bit (6) is set.
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & ATTR_DELETE_HORIZON != 0
    }

    /// Offset of the last record (`base_offset + last_offset_delta`; checked by
    /// [`BatchView::parse`] not to overflow).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// Bytes of the whole batch, `12 + batch_length`.
    pub fn size(&self) -> usize {
        LOG_OVERHEAD + usize::try_from(self.batch_length).unwrap_or(0)
    }
}

/// A checked batch: its framing, magic, CRC and header ranges are valid. The records are
/// checked as [`records`](Self::records) reads them.
#[derive(Clone, Debug)]
pub struct BatchView {
    bytes: Bytes,
    header: BatchHeader,
}

fn array<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], BatchError> {
    buf.get(at..)
        .and_then(|rest| rest.get(..N))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or(BatchError::Truncated { needed: N, at })
}

fn i16_at(buf: &[u8], at: usize) -> Result<i16, BatchError> {
    array(buf, at).map(i16::from_be_bytes)
}
fn i32_at(buf: &[u8], at: usize) -> Result<i32, BatchError> {
    array(buf, at).map(i32::from_be_bytes)
}
fn i64_at(buf: &[u8], at: usize) -> Result<i64, BatchError> {
    array(buf, at).map(i64::from_be_bytes)
}

/// Checks that `buf` starts with a v2 batch header (61 bytes, magic 2).
fn check_header(buf: &[u8]) -> Result<(), BatchError> {
    if let Some(&magic) = buf.get(MAGIC_AT) {
        let found = magic as i8;
        if found != MAGIC {
            return Err(BatchError::BadMagic { found });
        }
    }
    if buf.len() < HEADER_LEN {
        return Err(BatchError::Truncated {
            needed: HEADER_LEN,
            at: 0,
        });
    }
    Ok(())
}

/// The checks of [`BatchView::parse`] on the batch at the start of `bytes`: its header.
fn parse_header(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    check_header(bytes)?;
    let batch_length = i32_at(bytes, 8)?;
    let size = usize::try_from(batch_length)
        .ok()
        .filter(|&len| len >= HEADER_LEN - LOG_OVERHEAD)
        .map(|len| len + LOG_OVERHEAD)
        .ok_or(BatchError::Length {
            field: "batchLength",
            value: i64::from(batch_length),
            at: 8,
        })?;
    if size > bytes.len() {
        return Err(BatchError::Truncated {
            needed: size,
            at: 0,
        });
    }
    let stored = u32::from_be_bytes(array(bytes, CRC_AT)?);
    let computed = super::crc32c(bytes.get(ATTRIBUTES_AT..size).unwrap_or_default());
    if stored != computed {
        return Err(BatchError::BadCrc { stored, computed });
    }
    let attributes = i16_at(bytes, ATTRIBUTES_AT)?;
    let compression = Compression::from_code((attributes & ATTR_COMPRESSION_MASK) as u8)?;
    let header = BatchHeader {
        base_offset: i64_at(bytes, 0)?,
        batch_length,
        partition_leader_epoch: i32_at(bytes, LEADER_EPOCH_AT)?,
        magic: MAGIC,
        crc: stored,
        attributes,
        compression,
        last_offset_delta: i32_at(bytes, 23)?,
        base_timestamp: i64_at(bytes, 27)?,
        max_timestamp: i64_at(bytes, 35)?,
        producer_id: i64_at(bytes, 43)?,
        producer_epoch: i16_at(bytes, 51)?,
        base_sequence: i32_at(bytes, 53)?,
        record_count: i32_at(bytes, 57)?,
    };
    if header.record_count < 0 {
        return Err(BatchError::Length {
            field: "recordCount",
            value: i64::from(header.record_count),
            at: 57,
        });
    }
    let delta = header.last_offset_delta;
    if delta < -1 || header.base_offset.checked_add(i64::from(delta)).is_none() {
        return Err(BatchError::Length {
            field: "lastOffsetDelta",
            value: i64::from(delta),
            at: 23,
        });
    }
    Ok(header)
}

impl BatchView {
    /// Parses the batch at the start of `bytes` (bytes after it are left alone: the view's
    /// [`size`](Self::size) tells where the next one starts). Checks, in order: the magic, the
    /// header length, `batchLength` against the header minimum and the buffer, the CRC-32C,
    /// the compression code, and that `recordCount` is not negative, `lastOffsetDelta` not
    /// below -1 and the last offset not past `i64::MAX`.
    ///
    /// ```
    /// use krabka_protocol::batch::{encode_batch, BatchError, BatchSpec, BatchView, RecordSpec};
    ///
    /// let bytes = encode_batch(&BatchSpec::new(0), &[RecordSpec::new(1, "v")])?;
    /// let mut damaged = bytes.to_vec();
    /// damaged[65] ^= 1; // inside the record
    /// let err = BatchView::parse(&damaged.into()).unwrap_err();
    /// assert!(matches!(err, BatchError::BadCrc { .. }));
    /// # Ok::<(), BatchError>(())
    /// ```
    ///
    /// # Errors
    /// [`BatchError::BadMagic`], [`BatchError::Truncated`], [`BatchError::Length`],
    /// [`BatchError::BadCrc`] or [`BatchError::UnsupportedCompression`].
    pub fn parse(bytes: &Bytes) -> Result<BatchView, BatchError> {
        Self::parse_at(bytes, 0)
    }

    /// [`parse`](Self::parse) of the batch at byte `at` of `bytes` (without a handle on the
    /// bytes before it). An `at` past the end is [`BatchError::Truncated`].
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn parse_at(bytes: &Bytes, at: usize) -> Result<BatchView, BatchError> {
        let header = parse_header(bytes.get(at..).unwrap_or_default())?;
        Ok(BatchView {
            bytes: bytes.slice(at..at + header.size()),
            header,
        })
    }

    /// Checks the batch at the start of `buf` as [`parse`](Self::parse) does, then reads
    /// every record as driving [`records`](Self::records) to its end does (decompressed within
    /// `max_uncompressed`), without copying or viewing the bytes of an uncompressed batch;
    /// returns its header and how many records it holds. The batch is
    /// [`BatchHeader::size`] bytes; bytes after it are left alone.
    ///
    /// ```
    /// use krabka_protocol::batch::{encode_batch, BatchSpec, BatchView, RecordSpec};
    ///
    /// let bytes = encode_batch(&BatchSpec::new(3), &[RecordSpec::new(1, "a"), RecordSpec::new(2, "b")])?;
    /// let (header, records) = BatchView::check(&bytes, 1 << 20)?;
    /// assert_eq!((header.base_offset, header.size(), records), (3, bytes.len(), 2));
    /// # Ok::<(), krabka_protocol::batch::BatchError>(())
    /// ```
    ///
    /// # Errors
    /// Those of [`parse`](Self::parse), of [`records`](Self::records), and the first fault of
    /// a record or of the header against the records, as the iterator returns them.
    pub fn check(buf: &[u8], max_uncompressed: usize) -> Result<(BatchHeader, usize), BatchError> {
        let header = Self::check_header(buf)?;
        let count = Self::check_records(&header, buf, max_uncompressed)?;
        Ok((header, count))
    }

    /// The first half of [`check`](Self::check): the checks of [`parse`](Self::parse) on the
    /// batch at the start of `buf` (its CRC included), without taking a view of it.
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn check_header(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        parse_header(buf)
    }

    /// The second half of [`check`](Self::check): reads every record of the batch at the
    /// start of `buf`, whose header [`check_header`](Self::check_header) returned, as
    /// driving [`records`](Self::records) to its end does; returns how many there are.
    ///
    /// # Errors
    /// As [`records`](Self::records) and its iterator.
    pub fn check_records(
        header: &BatchHeader,
        buf: &[u8],
        max_uncompressed: usize,
    ) -> Result<usize, BatchError> {
        let payload = buf
            .get(HEADER_LEN..header.size())
            .ok_or(BatchError::Truncated {
                needed: header.size(),
                at: 0,
            })?;
        match header.compression {
            Compression::None => check_records(*header, payload),
            codec => check_records(
                *header,
                &codec::decompress(codec, payload, max_uncompressed)?,
            ),
        }
    }

    /// The records of the uncompressed batch at byte `at` of `bytes`, whose header
    /// [`check_header`](Self::check_header) returned (its CRC checked), read in place: no
    /// handle on the bytes is taken for the batch, only one per key or value handed out. Each
    /// record is checked as it is read, as [`records`](Self::records) does. `None` for a
    /// compressed batch (read it through [`parse_at`](Self::parse_at) and
    /// [`into_records`](Self::into_records)) or when `bytes` ends before the batch does.
    ///
    /// ```
    /// use krabka_protocol::batch::{encode_batch, BatchSpec, BatchView, RecordSpec};
    ///
    /// let mut buf = encode_batch(&BatchSpec::new(0), &[RecordSpec::new(1, "a")])?.to_vec();
    /// let at = buf.len();
    /// buf.extend_from_slice(&encode_batch(&BatchSpec::new(1), &[RecordSpec::new(2, "b")])?);
    /// let buf = krabka_protocol::Bytes::from(buf);
    /// let header = BatchView::check_header(&buf[at..])?;
    /// let mut records = BatchView::records_in(&buf, at, &header).unwrap();
    /// let (offset, msg) = records.next_message().unwrap()?;
    /// assert_eq!((offset, msg.value.as_ref()), (1, &b"b"[..]));
    /// assert!(records.next_message().is_none());
    /// # Ok::<(), krabka_protocol::batch::BatchError>(())
    /// ```
    pub fn records_in<'a>(
        bytes: &'a Bytes,
        at: usize,
        header: &BatchHeader,
    ) -> Option<RecordIter<&'a Bytes>> {
        let end = at.checked_add(header.size())?;
        if header.compression != Compression::None || end > bytes.len() {
            return None;
        }
        Some(RecordIter::within(*header, bytes, at + HEADER_LEN, end))
    }

    /// The header fields.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's bytes (exactly [`size`](Self::size) of them).
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Bytes of the batch, `12 + batchLength`.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The records section as stored (compressed or not).
    pub fn payload(&self) -> Bytes {
        self.bytes.slice(HEADER_LEN.min(self.bytes.len())..)
    }

    /// A lazy iterator over the records, each checked as it is read (see [`RecordIter`]).
    ///
    /// A compressed batch is decompressed here, once, into a buffer of at most
    /// `max_uncompressed` bytes; the records are then views of that buffer. An uncompressed
    /// batch's records are views of the batch's own bytes and the limit does not apply.
    ///
    /// # Errors
    /// [`BatchError::CodecDisabled`] when this build lacks the codec,
    /// [`BatchError::TooLarge`] when the records decompress past `max_uncompressed`,
    /// [`BatchError::Decompress`] when they do not decompress.
    pub fn records(&self, max_uncompressed: usize) -> Result<RecordIter, BatchError> {
        self.clone().into_records(max_uncompressed)
    }

    /// [`records`](Self::records), taking the view: an uncompressed batch's records are read
    /// from its bytes without another handle on them.
    ///
    /// # Errors
    /// As [`records`](Self::records).
    pub fn into_records(self, max_uncompressed: usize) -> Result<RecordIter, BatchError> {
        match self.header.compression {
            Compression::None => {
                let start = HEADER_LEN.min(self.bytes.len());
                Ok(RecordIter::new(self.header, self.bytes, start))
            }
            codec => {
                let payload = self.bytes.get(HEADER_LEN..).unwrap_or_default();
                let data = Bytes::from(codec::decompress(codec, payload, max_uncompressed)?);
                Ok(RecordIter::new(self.header, data, 0))
            }
        }
    }
}

/// Rewrites `baseOffset` of the batch at the start of `buf` in place. The CRC does not cover it,
/// so the batch stays valid (the offsets of all its records move with it).
///
/// ```
/// use krabka_protocol::batch::{encode_batch, set_base_offset, BatchSpec, BatchView, RecordSpec};
///
/// let mut bytes = encode_batch(&BatchSpec::new(0), &[RecordSpec::new(1, "v")])?.to_vec();
/// set_base_offset(&mut bytes, 1_000)?;
/// assert_eq!(BatchView::parse(&bytes.into())?.header().base_offset, 1_000);
/// # Ok::<(), krabka_protocol::batch::BatchError>(())
/// ```
///
/// # Errors
/// [`BatchError::BadMagic`] or [`BatchError::Truncated`] when `buf` does not start with a v2
/// batch header; nothing is written then.
pub fn set_base_offset(buf: &mut [u8], base_offset: i64) -> Result<(), BatchError> {
    write_at(buf, 0, &base_offset.to_be_bytes())
}

/// Rewrites `partitionLeaderEpoch` of the batch at the start of `buf` in place; like
/// [`set_base_offset`], the CRC stays valid.
///
/// # Errors
/// As [`set_base_offset`].
pub fn set_partition_leader_epoch(buf: &mut [u8], epoch: i32) -> Result<(), BatchError> {
    write_at(buf, LEADER_EPOCH_AT, &epoch.to_be_bytes())
}

/// The `maxTimestamp` of the batch header at the start of `buf`, read without checking the
/// batch (its CRC, its records): for a batch this process just encoded, say.
///
/// ```
/// use krabka_protocol::batch::{encode_batch, max_timestamp_of, BatchSpec, RecordSpec};
///
/// let bytes = encode_batch(&BatchSpec::new(0), &[RecordSpec::new(7, "a"), RecordSpec::new(5, "b")])?;
/// assert_eq!(max_timestamp_of(&bytes)?, 7);
/// # Ok::<(), krabka_protocol::batch::BatchError>(())
/// ```
///
/// # Errors
/// [`BatchError::BadMagic`] or [`BatchError::Truncated`] when `buf` does not start with a v2
/// batch header.
pub fn max_timestamp_of(buf: &[u8]) -> Result<i64, BatchError> {
    check_header(buf)?;
    buf.get(MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes)
        .ok_or(BatchError::Truncated {
            needed: HEADER_LEN,
            at: 0,
        })
}

fn write_at(buf: &mut [u8], at: usize, value: &[u8]) -> Result<(), BatchError> {
    check_header(buf)?;
    let slot = buf
        .get_mut(at..at + value.len())
        .ok_or(BatchError::Truncated {
            needed: HEADER_LEN,
            at: 0,
        })?;
    slot.copy_from_slice(value);
    Ok(())
}
