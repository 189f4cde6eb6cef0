//! The lines `krabka dump` prints for a batch and for each of its records, in the words of
//! Kafka's `kafka-dump-log --deep-iteration --print-data-log`.

use krabka_protocol::batch::{BatchHeader, Compression, RecordRef, TimestampType};
use krabka_storage::segment::{BATCH_HEADER_LEN, DumpedBatch};

use super::show_bytes;

/// The header fields of a batch as stored: from a checked batch, or read from the bytes of one
/// that failed its checks (then they are what the bytes say, not known to be true).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    base_offset: i64,
    last_offset_delta: i32,
    partition_leader_epoch: i32,
    magic: i8,
    crc: u32,
    attributes: i16,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    record_count: i32,
}

/// Bit 3 of the attributes: the record timestamps are the log's append time.
const LOG_APPEND_TIME: i16 = 0x08;
/// Bit 4 of the attributes: a transactional batch.
const TRANSACTIONAL: i16 = 0x10;
/// Bit 5 of the attributes: a batch of control records.
const CONTROL: i16 = 0x20;

fn be<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b.get(at..at + N)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .unwrap_or([0; N])
}

impl Head {
    /// The fields of a checked batch.
    pub(super) fn of(h: &BatchHeader) -> Head {
        Head {
            base_offset: h.base_offset,
            last_offset_delta: h.last_offset_delta,
            partition_leader_epoch: h.partition_leader_epoch,
            magic: h.magic,
            crc: h.crc,
            attributes: h.attributes,
            max_timestamp: h.max_timestamp,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            record_count: h.record_count,
        }
    }

    /// The fields the first [`BATCH_HEADER_LEN`] bytes of `b` hold (big-endian, at their
    /// places in a v2 batch header); `None` when `b` is shorter or its magic byte is not 2 (the
    /// bytes are then not a batch header at all).
    pub(super) fn read(b: &[u8]) -> Option<Head> {
        if b.len() < BATCH_HEADER_LEN || b.get(16) != Some(&2) {
            return None;
        }
        Some(Head {
            base_offset: i64::from_be_bytes(be(b, 0)),
            partition_leader_epoch: i32::from_be_bytes(be(b, 12)),
            magic: 2,
            crc: u32::from_be_bytes(be(b, 17)),
            attributes: i16::from_be_bytes(be(b, 21)),
            last_offset_delta: i32::from_be_bytes(be(b, 23)),
            max_timestamp: i64::from_be_bytes(be(b, 35)),
            producer_id: i64::from_be_bytes(be(b, 43)),
            producer_epoch: i16::from_be_bytes(be(b, 51)),
            base_sequence: i32::from_be_bytes(be(b, 53)),
            record_count: i32::from_be_bytes(be(b, 57)),
        })
    }

    /// Kafka's name of the timestamp type (bit 3 of the attributes).
    pub(super) fn timestamp_type(&self) -> &'static str {
        timestamp_type(self.attributes & LOG_APPEND_TIME != 0)
    }

    /// Whether the control bit is set (Kafka prints no contents of control records).
    pub(super) fn is_control(&self) -> bool {
        self.attributes & CONTROL != 0
    }

    fn compression(&self) -> String {
        let code = (self.attributes & 0x07) as u8;
        Compression::from_code(code)
            .map_or_else(|_| format!("unknown({code})"), |c| c.name().to_owned())
    }
}

/// `CreateTime` or `LogAppendTime`, as Kafka names the timestamp types.
fn timestamp_type(log_append_time: bool) -> &'static str {
    if log_append_time {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

/// The timestamp type of a checked batch's header.
pub(super) fn header_timestamp_type(h: &BatchHeader) -> &'static str {
    timestamp_type(h.timestamp_type() == TimestampType::LogAppendTime)
}

/// The producer sequence `delta` records after `base`, as Kafka counts it: -1 without a
/// sequence, wrapping to 0 past `i32::MAX`.
pub(super) fn sequence(base: i32, delta: i64) -> i64 {
    if base < 0 {
        return -1;
    }
    let n = i64::from(base) + delta;
    if n > i64::from(i32::MAX) {
        n - i64::from(i32::MAX) - 1
    } else {
        n
    }
}

/// The line of one batch: its header fields when they can be read (`head`), its position,
/// size and CRC status, and `problem` if it has one.
pub(super) fn batch_line(
    frame: &DumpedBatch,
    head: Option<&Head>,
    problem: Option<&str>,
) -> String {
    let valid = frame.crc_ok;
    let mut line = match head {
        Some(h) => {
            let last = h.base_offset.saturating_add(i64::from(h.last_offset_delta));
            format!(
                "baseOffset: {} lastOffset: {last} count: {} baseSequence: {} lastSequence: {} \
                 producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} \
                 isControl: {} position: {} {}: {} size: {} magic: {} compresscodec: {} crc: {} \
                 isvalid: {valid}",
                h.base_offset,
                h.record_count,
                h.base_sequence,
                sequence(h.base_sequence, i64::from(h.last_offset_delta)),
                h.producer_id,
                h.producer_epoch,
                h.partition_leader_epoch,
                h.attributes & TRANSACTIONAL != 0,
                h.is_control(),
                frame.position,
                h.timestamp_type(),
                h.max_timestamp,
                frame.batch_len,
                h.magic,
                h.compression(),
                h.crc,
            )
        }
        None => {
            let base = frame.seq.map_or_else(|| "?".to_owned(), |s| s.to_string());
            format!(
                "baseOffset: {base} position: {} size: {} isvalid: {valid}",
                frame.position, frame.batch_len
            )
        }
    };
    if let Some(p) = problem {
        line.push_str(&format!(" problem: {p}"));
    }
    line
}

/// The line of one record of the batch `h`, with its key and value cut at `values` chars
/// when asked for (never those of a control record).
pub(super) fn record_line(h: &BatchHeader, r: &RecordRef, values: Option<usize>) -> String {
    let size = |b: &Option<bytes::Bytes>| b.as_ref().map_or(-1, |b| b.len() as i64);
    let header_keys: Vec<String> = r
        .headers
        .iter()
        .map(|(name, _)| show_bytes(name.as_bytes(), 64))
        .collect();
    let mut line = format!(
        "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
        r.offset,
        header_timestamp_type(h),
        r.timestamp,
        size(&r.key),
        size(&r.value),
        sequence(h.base_sequence, r.offset.saturating_sub(h.base_offset)),
        header_keys.join(",")
    );
    if let Some(max) = values.filter(|_| !h.is_control()) {
        if let Some(k) = &r.key {
            line.push_str(&format!(" key: {}", show_bytes(k, max)));
        }
        if let Some(v) = &r.value {
            line.push_str(&format!(" payload: {}", show_bytes(v, max)));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_count_as_kafka_does() {
        assert_eq!(sequence(-1, 5), -1);
        assert_eq!(sequence(10, 0), 10);
        assert_eq!(sequence(10, 4), 14);
        assert_eq!(sequence(i32::MAX, 0), i64::from(i32::MAX));
        assert_eq!(sequence(i32::MAX, 1), 0);
        assert_eq!(sequence(i32::MAX - 1, 3), 1);
    }

    #[test]
    fn a_header_is_read_from_its_bytes_only_with_magic_2() {
        let mut b = [0u8; BATCH_HEADER_LEN];
        b[0..8].copy_from_slice(&7i64.to_be_bytes());
        b[16] = 2;
        b[21..23].copy_from_slice(&(0x23i16).to_be_bytes());
        b[53..57].copy_from_slice(&(-1i32).to_be_bytes());
        let h = Head::read(&b).unwrap();
        assert_eq!(h.base_offset, 7);
        assert_eq!(h.compression(), "lz4");
        assert!(h.is_control());
        b[21..23].copy_from_slice(&(0x07i16).to_be_bytes());
        assert_eq!(Head::read(&b).unwrap().compression(), "unknown(7)");
        b[16] = 1;
        assert_eq!(Head::read(&b), None);
        assert_eq!(Head::read(&b[..60]), None);
    }
}
