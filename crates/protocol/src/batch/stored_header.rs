//! The header fields of a batch as its bytes hold them, checked or not: what a tool shows for
//! a batch that failed its checks, where they are what the bytes say, not known to be true.

use super::{
    ATTR_COMPRESSION_MASK, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, Compression,
    HEADER_LEN as BATCH_HEADER_LEN, MAGIC, TimestampType,
};

/// The fields of a v2 batch header (`docs/format.md`) read from its first
/// [`HEADER_LEN`](super::HEADER_LEN) bytes, without checking anything but the magic byte: what
/// a tool shows of a batch that failed its checks ([`BatchView::parse`](super::BatchView::parse)
/// is the checked reading). The one decoder of these bytes is this crate's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredHeader {
    /// `baseOffset`: the seq of the first record.
    pub base_offset: i64,
    /// `batchLength`: bytes after this field.
    pub batch_length: i32,
    /// `partitionLeaderEpoch`.
    pub partition_leader_epoch: i32,
    /// `magic` (always 2 here).
    pub magic: i8,
    /// `crc`: the stored CRC-32C of `attributes` to the end of the batch.
    pub crc: u32,
    /// `attributes`: the raw attribute bits.
    pub attributes: i16,
    /// `lastOffsetDelta`.
    pub last_offset_delta: i32,
    /// `baseTimestamp`.
    pub base_timestamp: i64,
    /// `maxTimestamp`.
    pub max_timestamp: i64,
    /// `producerId` (-1 if none).
    pub producer_id: i64,
    /// `producerEpoch` (-1 if none).
    pub producer_epoch: i16,
    /// `baseSequence` (-1 if none).
    pub base_sequence: i32,
    /// `recordCount`.
    pub record_count: i32,
}

/// The `N` bytes of `b` at `at` (`b` is at least `HEADER_LEN` long where called).
fn field<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b.get(at..at + N)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .unwrap_or([0; N])
}

impl StoredHeader {
    /// The fields the first [`HEADER_LEN`](super::HEADER_LEN) bytes of `b` hold (big-endian,
    /// at their places in a v2 batch header); `None` when `b` is shorter or its magic byte is
    /// not 2 (the bytes are then not a batch header at all).
    ///
    /// ```
    /// use krabka_protocol::Message;
    /// use krabka_protocol::batch::{Compression, StoredHeader, encode_messages};
    ///
    /// let mut buf = Vec::new();
    /// encode_messages(&mut buf, 7, &[Message::new("x")], Compression::None, 1 << 20)?;
    /// let h = StoredHeader::read(&buf).unwrap();
    /// assert_eq!((h.base_offset, h.record_count, h.last_offset()), (7, 1, 7));
    /// assert_eq!(StoredHeader::read(&buf[..60]), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read(b: &[u8]) -> Option<StoredHeader> {
        if b.len() < BATCH_HEADER_LEN || b.get(16) != Some(&(MAGIC as u8)) {
            return None;
        }
        Some(StoredHeader {
            base_offset: i64::from_be_bytes(field(b, 0)),
            batch_length: i32::from_be_bytes(field(b, 8)),
            partition_leader_epoch: i32::from_be_bytes(field(b, 12)),
            magic: MAGIC,
            crc: u32::from_be_bytes(field(b, 17)),
            attributes: i16::from_be_bytes(field(b, 21)),
            last_offset_delta: i32::from_be_bytes(field(b, 23)),
            base_timestamp: i64::from_be_bytes(field(b, 27)),
            max_timestamp: i64::from_be_bytes(field(b, 35)),
            producer_id: i64::from_be_bytes(field(b, 43)),
            producer_epoch: i16::from_be_bytes(field(b, 51)),
            base_sequence: i32::from_be_bytes(field(b, 53)),
            record_count: i32::from_be_bytes(field(b, 57)),
        })
    }

    /// `baseOffset + lastOffsetDelta` (saturating: the fields are unchecked).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// The codec code of bits 0-2 of the attributes.
    pub fn compression_code(&self) -> u8 {
        (self.attributes & ATTR_COMPRESSION_MASK) as u8
    }

    /// The codec those bits name; `None` for a code no codec has.
    pub fn compression(&self) -> Option<Compression> {
        Compression::from_code(self.compression_code()).ok()
    }

    /// What the record timestamps mean (bit 3).
    pub fn timestamp_type(&self) -> TimestampType {
        timestamp_type_of(self.attributes)
    }

    /// Whether the transactional bit (4) is set.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the control bit (5) is set.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
}

/// What the record timestamps of a batch with `attributes` mean (bit 3): the one reading of
/// that bit, for the checked and the unchecked header alike.
pub(super) fn timestamp_type_of(attributes: i16) -> TimestampType {
    if attributes & ATTR_LOG_APPEND_TIME != 0 {
        TimestampType::LogAppendTime
    } else {
        TimestampType::CreateTime
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_read_from_its_bytes_only_with_magic_2() {
        let mut b = [0u8; BATCH_HEADER_LEN];
        b[0..8].copy_from_slice(&7i64.to_be_bytes());
        b[16] = 2;
        b[21..23].copy_from_slice(&(0x23i16).to_be_bytes());
        b[53..57].copy_from_slice(&(-1i32).to_be_bytes());
        let h = StoredHeader::read(&b).expect("magic 2");
        assert_eq!(h.base_offset, 7);
        assert_eq!(h.base_sequence, -1);
        assert_eq!(h.compression(), Some(Compression::Lz4));
        assert!(h.is_control() && !h.is_transactional());
        b[21..23].copy_from_slice(&(0x07i16).to_be_bytes());
        let h = StoredHeader::read(&b).expect("magic 2");
        assert_eq!((h.compression(), h.compression_code()), (None, 7));
        b[16] = 1;
        assert_eq!(StoredHeader::read(&b), None);
        assert_eq!(StoredHeader::read(&b[..60]), None);
    }
}
