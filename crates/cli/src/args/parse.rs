//! The value parsers of the command line: every duration, size, count and seq is
//! range-checked here, when the command line is read, so that a bad value is a usage error
//! (exit 2) naming the flag, and nothing later does arithmetic on an unchecked value.

use std::time::Duration;

use crate::human;

/// Smallest segment size the commands accept.
pub const MIN_SEGMENT_BYTES: u64 = 1024;

/// Largest segment size the commands accept: the remote tier addresses a segment's bytes with
/// `u32` positions, so a larger segment could never be tiered.
pub const MAX_SEGMENT_BYTES: u64 = krabka_tiering::MAX_SEGMENT_BYTES;

/// The longest `--timeout`: a year (an `Instant` plus it never overflows).
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);
/// The shortest `--interval`: shorter ones would spin a core between rounds.
const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// The longest `--interval`: a day.
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// The largest record count `demo`, `bench` and `produce --generate` accept: 10^12, far more
/// than any disk holds, so a typo (`--records 18446744073709551615`) is a usage error.
pub const MAX_RECORDS: u64 = 1_000_000_000_000;

/// The largest `recover --concurrency`: one thread each.
pub(super) const MAX_CONCURRENCY: u64 = 256;

/// A seq: 1 or more (the log's first record has seq 1).
pub(super) fn parse_seq(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("seq 0 does not exist: seqs start at 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!(
            "`{s}` is not a seq (a whole number from 1 to 2^64 - 1): {e}"
        )),
    }
}

/// `--key-separator`: not empty (every line would get an empty key) and without a newline
/// (lines never hold one, so it could never match).
pub(super) fn parse_separator(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err(
            "the separator must not be empty (each line would get an empty key); \
             leave out --key-separator for records without keys"
                .to_owned(),
        )
    } else if s.contains('\n') {
        Err(
            "the separator must not contain a newline: lines are split at newlines, so it \
             could never match"
                .to_owned(),
        )
    } else {
        Ok(s.to_owned())
    }
}

/// `--compression`: checked at parse time (`none`, `zstd`, `zstd:1`..`zstd:22`), kept as given.
pub(super) fn parse_compression(s: &str) -> Result<String, String> {
    s.parse::<krabka_remote_transform::ChunkCompression>()
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// The largest `bench --value-size`: the largest value whose record (with the bench's key), as
/// a batch of one, fits the log's largest message (16 MiB): less the batch header and the
/// record's own fields.
fn max_bench_value_bytes() -> u64 {
    use krabka_protocol::batch::record_size;
    use krabka_storage::segment::BATCH_HEADER_LEN;
    let max = krabka_storage::Options::default().max_message_bytes;
    let with_value = |v: bytes::Bytes| {
        let msg = krabka_protocol::Message::new(v).with_key("key-0000");
        (BATCH_HEADER_LEN + record_size(&msg, 0, 0)) as u64
    };
    let overhead = with_value(bytes::Bytes::new());
    let Some(mut n) = max
        .checked_sub(overhead)
        .and_then(|n| usize::try_from(n).ok())
    else {
        return 0;
    };
    // The value's length and the record's length are varints: a longer value may take a few
    // more bytes of them. The value is one zeroed allocation, never written, sliced per try.
    let value = bytes::Bytes::from(vec![0u8; n]);
    while n > 0 && with_value(value.slice(..n)) > max {
        n -= 1;
    }
    n as u64
}

pub(super) fn parse_bench_value_size(s: &str) -> Result<u64, String> {
    let n = human::parse_bytes(s)?;
    let max = max_bench_value_bytes();
    if n > max {
        return Err(format!(
            "a value must be at most {max} bytes (the largest message the log accepts, {}, less \
             the key, the record's fields and the batch header), got {n}",
            human::bytes(krabka_storage::Options::default().max_message_bytes)
        ));
    }
    Ok(n)
}

pub(super) fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d > MAX_TIMEOUT {
        return Err(format!("a timeout must be at most 365 days, got {s}"));
    }
    Ok(d)
}

pub(super) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < MIN_INTERVAL || d > MAX_INTERVAL {
        return Err(format!(
            "an interval must be from 10ms to 1 day (24h), got {s}"
        ));
    }
    Ok(d)
}

/// The shortest `read --refresh-interval`.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(1);

/// `read --refresh-interval`: 1 ms to 1 day (what the replica accepts).
pub(super) fn parse_refresh_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < MIN_REFRESH_INTERVAL || d > krabka_tiering::replica::MAX_REFRESH_INTERVAL {
        return Err(format!(
            "a refresh interval must be from 1ms to 1 day (24h), got {s}"
        ));
    }
    Ok(d)
}

/// `read --topic`: a name the remote tier's layout can hold.
pub(super) fn parse_topic(s: &str) -> Result<String, String> {
    krabka_remote_storage::validate_topic_name(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.to_string())
}

pub(super) fn parse_segment_bytes(s: &str) -> Result<u64, String> {
    let n = human::parse_bytes(s)?;
    if n < MIN_SEGMENT_BYTES {
        Err(format!(
            "a segment must be at least {MIN_SEGMENT_BYTES} bytes, got {n}"
        ))
    } else if n > MAX_SEGMENT_BYTES {
        Err(format!(
            "a segment must be at most {MAX_SEGMENT_BYTES} bytes (4 GiB - 1, what the remote tier can address), got {n}"
        ))
    } else {
        Ok(n)
    }
}

/// `--tail-interval`: the tail's window, within what the library accepts (10 ms to 60 s).
pub(super) fn parse_tail_interval(s: &str) -> Result<Duration, String> {
    use krabka_tiering::tail::config::{MAX_TAIL_INTERVAL, MIN_TAIL_INTERVAL};
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if !(MIN_TAIL_INTERVAL..=MAX_TAIL_INTERVAL).contains(&d) {
        return Err(format!("a tail interval must be from 10ms to 60s, got {s}"));
    }
    Ok(d)
}

/// `--tail-bytes`: the most bytes of batches in one tail object, 4 KiB to 32 MiB.
pub(super) fn parse_tail_bytes(s: &str) -> Result<usize, String> {
    use krabka_tiering::tail::config::{MAX_TAIL_BYTES, MIN_TAIL_BYTES};
    let n = human::parse_bytes(s)?;
    match usize::try_from(n) {
        Ok(n) if (MIN_TAIL_BYTES..=MAX_TAIL_BYTES).contains(&n) => Ok(n),
        _ => Err(format!(
            "a tail object must hold from 4KiB to 32MiB ({MIN_TAIL_BYTES} to {MAX_TAIL_BYTES} \
             bytes), got {n}"
        )),
    }
}

/// `--tail-grace`: how long an unneeded tail object stays, 1 s to 1 day.
pub(super) fn parse_tail_grace(s: &str) -> Result<Duration, String> {
    use krabka_tiering::tail::config::{MAX_TAIL_DURATION, MIN_TAIL_GRACE};
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if !(MIN_TAIL_GRACE..=MAX_TAIL_DURATION).contains(&d) {
        return Err(format!(
            "a tail grace must be from 1s to 1 day (24h), got {s}"
        ));
    }
    Ok(d)
}

/// `--ack-deadline`: how long records may wait for their tail object, 10 ms to 1 day.
pub(super) fn parse_ack_deadline(s: &str) -> Result<Duration, String> {
    use krabka_tiering::tail::config::{MAX_TAIL_DURATION, MIN_ACK_DEADLINE};
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if !(MIN_ACK_DEADLINE..=MAX_TAIL_DURATION).contains(&d) {
        return Err(format!(
            "an acknowledgement deadline must be from 10ms to 1 day (24h), got {s}"
        ));
    }
    Ok(d)
}
