//! The lines `krabka dump` prints for a batch and for each of its records, in the words of
//! Kafka's `kafka-dump-log --deep-iteration --print-data-log`.

use krabka_protocol::batch::{BatchHeader, RecordRef, TimestampType};
use krabka_storage::segment::{DumpedBatch, StoredHeader};

use super::show_bytes;

/// Kafka's name of a codec code (`unknown(N)` for a code no codec has).
fn compression(h: &StoredHeader) -> String {
    h.compression().map_or_else(
        || format!("unknown({})", h.compression_code()),
        |c| c.name().to_owned(),
    )
}

/// `CreateTime` or `LogAppendTime`, as Kafka names the timestamp types.
fn timestamp_type(log_append_time: bool) -> &'static str {
    if log_append_time {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

/// The timestamp type of a batch header's timestamp type `t`.
fn timestamp_name(t: TimestampType) -> &'static str {
    timestamp_type(t == TimestampType::LogAppendTime)
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

/// The line of one batch: its header fields when they can be read, its position, size and CRC
/// status, and `problem` if it has one.
pub(super) fn batch_line(frame: &DumpedBatch, problem: Option<&str>) -> String {
    let valid = frame.crc_ok;
    let mut line = match &frame.header {
        Some(h) => {
            let last = h.last_offset();
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
                h.is_transactional(),
                h.is_control(),
                frame.position,
                timestamp_name(h.timestamp_type()),
                h.max_timestamp,
                frame.batch_len,
                h.magic,
                compression(h),
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
        timestamp_name(h.timestamp_type()),
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
}
