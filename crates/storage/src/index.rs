//! The sparse offset index (`.index`) and time index (`.timeindex`) of a segment.
//!
//! Both are written when a segment is closed and carry a header, their entries and a trailing
//! CRC-32, so a torn or stale index is detected (and rebuilt by scanning the `.log`). Layouts
//! are in `docs/format.md`.

use bytes::BufMut;

use crate::Error;
use crate::segment::FrameError;

/// Magic bytes at the start of a `.index` file.
pub const INDEX_MAGIC: [u8; 4] = *b"KIDX";
/// Magic bytes at the start of a `.timeindex` file.
pub const TIME_INDEX_MAGIC: [u8; 4] = *b"KTIX";
/// Format version of both index files.
pub const INDEX_VERSION: u8 = 1;

pub(crate) const INDEX_HEADER_LEN: usize = 44;
pub(crate) const TIME_INDEX_HEADER_LEN: usize = 28;
pub(crate) const ENTRY_LEN: usize = 16;

/// `(seq, byte position)` entries of the offset index.
pub(crate) type OffsetEntries = Vec<(u64, u64)>;
/// `(max timestamp of the records before seq, seq)` entries of the time index.
pub(crate) type TimeEntries = Vec<(i64, u64)>;

/// Builds both indexes while records are appended or scanned: an entry for the first record and
/// then for the first record after every `interval` bytes.
#[derive(Debug, Clone)]
pub(crate) struct IndexBuilder {
    interval: u64,
    since: u64,
    max_ts: i64,
    started: bool,
    /// `(seq, byte position)` entries not yet taken.
    pub(crate) offsets: Vec<(u64, u64)>,
    /// `(max timestamp of the records before seq, seq)` entries not yet taken.
    pub(crate) times: Vec<(i64, u64)>,
}

impl IndexBuilder {
    pub(crate) fn new(interval: u64) -> Self {
        Self {
            interval: interval.max(1),
            since: 0,
            max_ts: i64::MIN,
            started: false,
            offsets: Vec::new(),
            times: Vec::new(),
        }
    }

    /// Records a frame of `len` bytes at `pos` holding `seq` with timestamp `ts`.
    pub(crate) fn observe(&mut self, seq: u64, pos: u64, len: u64, ts: i64) {
        if !self.started || self.since >= self.interval {
            self.offsets.push((seq, pos));
            self.times.push((self.max_ts, seq));
            self.since = 0;
            self.started = true;
        }
        self.since += len;
        self.max_ts = self.max_ts.max(ts);
    }

    /// Takes the entries added since the last call.
    pub(crate) fn take(&mut self) -> (OffsetEntries, TimeEntries) {
        (
            std::mem::take(&mut self.offsets),
            std::mem::take(&mut self.times),
        )
    }
}

/// A decoded `.index` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetIndex {
    pub(crate) base_seq: u64,
    pub(crate) last_seq: u64,
    pub(crate) log_size: u64,
    pub(crate) max_timestamp: i64,
    pub(crate) entries: Vec<(u64, u64)>,
}

/// A decoded `.timeindex` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimeIndex {
    pub(crate) base_seq: u64,
    pub(crate) max_timestamp: i64,
    pub(crate) entries: Vec<(i64, u64)>,
}

/// The header of a valid `.index` file, as returned by [`verify_index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSummary {
    /// Base seq of the segment.
    pub base_seq: u64,
    /// Last seq of the segment (`base_seq - 1` when empty).
    pub last_seq: u64,
    /// Size in bytes of the `.log` file the index describes.
    pub log_size: u64,
    /// Largest timestamp in the segment (`i64::MIN` when empty).
    pub max_timestamp: i64,
    /// Number of entries.
    pub entries: usize,
}

/// The header of a valid `.timeindex` file, as returned by [`verify_time_index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeIndexSummary {
    /// Base seq of the segment.
    pub base_seq: u64,
    /// Largest timestamp in the segment (`i64::MIN` when empty).
    pub max_timestamp: i64,
    /// Number of entries.
    pub entries: usize,
}

fn bad(position: usize, reason: impl Into<String>) -> FrameError {
    FrameError {
        position,
        reason: reason.into(),
    }
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    buf.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    buf.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_le_bytes)
}

fn finish(mut buf: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&buf);
    buf.put_u32_le(crc);
    buf
}

/// Checks magic, version, total length and CRC; returns the entry count.
fn check_envelope(
    buf: &[u8],
    magic: [u8; 4],
    header_len: usize,
    count_at: usize,
) -> Result<usize, FrameError> {
    if buf.len() < header_len + 4 {
        return Err(bad(
            0,
            format!("{} bytes is shorter than the header", buf.len()),
        ));
    }
    if buf.get(..4) != Some(&magic[..]) {
        return Err(bad(0, "bad magic"));
    }
    let version = buf.get(4).copied().unwrap_or(0);
    if version != INDEX_VERSION {
        return Err(bad(4, format!("unsupported index version {version}")));
    }
    if buf.get(5..8) != Some(&[0u8; 3][..]) {
        return Err(bad(5, "reserved bytes are not zero"));
    }
    let count = u32_at(buf, count_at) as usize;
    let expected = count
        .checked_mul(ENTRY_LEN)
        .and_then(|n| n.checked_add(header_len + 4));
    if expected != Some(buf.len()) {
        return Err(bad(
            count_at,
            format!(
                "entry count {count} does not match the file length {}",
                buf.len()
            ),
        ));
    }
    let body = buf.len() - 4;
    let stored = u32_at(buf, body);
    let actual = crc32fast::hash(buf.get(..body).unwrap_or(&[]));
    if stored != actual {
        return Err(bad(
            body,
            format!("CRC mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }
    Ok(count)
}

impl OffsetIndex {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(INDEX_HEADER_LEN + self.entries.len() * ENTRY_LEN + 4);
        buf.put_slice(&INDEX_MAGIC);
        buf.put_u8(INDEX_VERSION);
        buf.put_slice(&[0; 3]);
        buf.put_u64_le(self.base_seq);
        buf.put_u64_le(self.last_seq);
        buf.put_u64_le(self.log_size);
        buf.put_i64_le(self.max_timestamp);
        buf.put_u32_le(u32::try_from(self.entries.len()).unwrap_or(u32::MAX));
        for &(seq, pos) in &self.entries {
            buf.put_u64_le(seq);
            buf.put_u64_le(pos);
        }
        finish(buf)
    }

    pub(crate) fn decode(buf: &[u8]) -> Result<OffsetIndex, FrameError> {
        let count = check_envelope(buf, INDEX_MAGIC, INDEX_HEADER_LEN, 40)?;
        let base_seq = u64_at(buf, 8);
        let last_seq = u64_at(buf, 16);
        let log_size = u64_at(buf, 24);
        let max_timestamp = u64_at(buf, 32) as i64;
        if base_seq == 0 || last_seq.checked_add(1).is_none_or(|n| n < base_seq) {
            return Err(bad(8, format!("bad seq range {base_seq}..={last_seq}")));
        }
        let empty = last_seq + 1 == base_seq;
        if empty != (count == 0) {
            return Err(bad(40, "entry count disagrees with the seq range"));
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let at = INDEX_HEADER_LEN + i * ENTRY_LEN;
            let (seq, pos) = (u64_at(buf, at), u64_at(buf, at + 8));
            let ok = match entries.last() {
                None => seq == base_seq && pos == 0,
                Some(&(ps, pp)) => seq > ps && pos > pp,
            };
            if !ok || seq > last_seq || pos >= log_size {
                return Err(bad(at, format!("entry {i} ({seq}, {pos}) is out of order")));
            }
            entries.push((seq, pos));
        }
        Ok(OffsetIndex {
            base_seq,
            last_seq,
            log_size,
            max_timestamp,
            entries,
        })
    }
}

impl TimeIndex {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut buf =
            Vec::with_capacity(TIME_INDEX_HEADER_LEN + self.entries.len() * ENTRY_LEN + 4);
        buf.put_slice(&TIME_INDEX_MAGIC);
        buf.put_u8(INDEX_VERSION);
        buf.put_slice(&[0; 3]);
        buf.put_u64_le(self.base_seq);
        buf.put_i64_le(self.max_timestamp);
        buf.put_u32_le(u32::try_from(self.entries.len()).unwrap_or(u32::MAX));
        for &(ts, seq) in &self.entries {
            buf.put_i64_le(ts);
            buf.put_u64_le(seq);
        }
        finish(buf)
    }

    pub(crate) fn decode(buf: &[u8]) -> Result<TimeIndex, FrameError> {
        let count = check_envelope(buf, TIME_INDEX_MAGIC, TIME_INDEX_HEADER_LEN, 24)?;
        let base_seq = u64_at(buf, 8);
        let max_timestamp = u64_at(buf, 16) as i64;
        let mut entries: Vec<(i64, u64)> = Vec::with_capacity(count);
        for i in 0..count {
            let at = TIME_INDEX_HEADER_LEN + i * ENTRY_LEN;
            let (ts, seq) = (u64_at(buf, at) as i64, u64_at(buf, at + 8));
            let ok = match entries.last() {
                None => seq == base_seq && ts == i64::MIN,
                Some(&(pt, ps)) => seq > ps && ts >= pt && ts <= max_timestamp,
            };
            if !ok {
                return Err(bad(at, format!("entry {i} ({ts}, {seq}) is out of order")));
            }
            entries.push((ts, seq));
        }
        Ok(TimeIndex {
            base_seq,
            max_timestamp,
            entries,
        })
    }
}

/// The last `(seq, position)` entry with seq <= `seq`, or `(base, 0)`-like `None` when none.
pub(crate) fn floor_entry(entries: &[(u64, u64)], seq: u64) -> Option<(u64, u64)> {
    let i = entries.partition_point(|&(s, _)| s <= seq);
    i.checked_sub(1).and_then(|i| entries.get(i)).copied()
}

/// The seq to scan from for the first record with timestamp >= `ts` (see [`lookup_time`]).
pub(crate) fn time_floor(entries: &[(i64, u64)], max_timestamp: i64, ts: i64) -> Option<u64> {
    if entries.is_empty() || max_timestamp < ts {
        return None;
    }
    let i = entries.partition_point(|&(before, _)| before < ts);
    let i = i.saturating_sub(1);
    entries.get(i).map(|&(_, seq)| seq)
}

/// Given the bytes of a segment's `.index` file, the byte position in its `.log` of the last
/// index entry with seq <= `seq` (0 when there is none). Reading frames from there reaches
/// `seq` after at most one index interval of bytes.
///
/// # Errors
/// [`Error::Corrupt`] (empty path) when the index is invalid: bad magic, version, length, CRC
/// or entry order.
pub fn lookup_position(index: &[u8], seq: u64) -> Result<u64, Error> {
    let idx = OffsetIndex::decode(index).map_err(|e| e.into_error(std::path::Path::new(""), 0))?;
    Ok(floor_entry(&idx.entries, seq).map_or(0, |(_, pos)| pos))
}

/// Given the bytes of a segment's `.timeindex` file, the seq from which to scan the segment for
/// the first record whose timestamp is >= `timestamp`: every record before the returned seq has
/// a smaller timestamp. `None` when no record of the segment has a timestamp >= `timestamp`
/// (the segment's max timestamp is smaller, or the segment is empty).
///
/// # Errors
/// [`Error::Corrupt`] (empty path) when the time index is invalid.
pub fn lookup_time(time_index: &[u8], timestamp: i64) -> Result<Option<u64>, Error> {
    let idx =
        TimeIndex::decode(time_index).map_err(|e| e.into_error(std::path::Path::new(""), 0))?;
    Ok(time_floor(&idx.entries, idx.max_timestamp, timestamp))
}

/// Validates the bytes of a `.index` file and returns its header.
///
/// # Errors
/// [`Error::Corrupt`] naming the byte position of the first problem (empty path).
pub fn verify_index(index: &[u8]) -> Result<IndexSummary, Error> {
    let idx = OffsetIndex::decode(index).map_err(|e| e.into_error(std::path::Path::new(""), 0))?;
    Ok(IndexSummary {
        base_seq: idx.base_seq,
        last_seq: idx.last_seq,
        log_size: idx.log_size,
        max_timestamp: idx.max_timestamp,
        entries: idx.entries.len(),
    })
}

/// Validates the bytes of a `.timeindex` file and returns its header.
///
/// # Errors
/// [`Error::Corrupt`] naming the byte position of the first problem (empty path).
pub fn verify_time_index(time_index: &[u8]) -> Result<TimeIndexSummary, Error> {
    let idx =
        TimeIndex::decode(time_index).map_err(|e| e.into_error(std::path::Path::new(""), 0))?;
    Ok(TimeIndexSummary {
        base_seq: idx.base_seq,
        max_timestamp: idx.max_timestamp,
        entries: idx.entries.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (OffsetIndex, TimeIndex) {
        let mut b = IndexBuilder::new(100);
        let mut pos = 0;
        for (i, seq) in (10..30u64).enumerate() {
            b.observe(seq, pos, 60, (i as i64 * 7) % 50);
            pos += 60;
        }
        let (offsets, times) = b.take();
        (
            OffsetIndex {
                base_seq: 10,
                last_seq: 29,
                log_size: pos,
                max_timestamp: 49,
                entries: offsets,
            },
            TimeIndex {
                base_seq: 10,
                max_timestamp: 49,
                entries: times,
            },
        )
    }

    #[test]
    fn index_round_trips_and_lookup_finds_floor_entry() {
        let (idx, _) = sample();
        let bytes = idx.encode();
        assert_eq!(OffsetIndex::decode(&bytes).unwrap(), idx);
        assert_eq!(lookup_position(&bytes, 10).unwrap(), 0);
        assert_eq!(lookup_position(&bytes, 5).unwrap(), 0);
        // Entries every 2 frames of 60 bytes (interval 100): seq 12 at 120.
        assert_eq!(lookup_position(&bytes, 13).unwrap(), 120);
    }

    #[test]
    fn every_flipped_byte_of_an_index_is_detected() {
        let (idx, tidx) = sample();
        for bytes in [idx.encode(), tidx.encode()] {
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0x40;
                assert!(verify_index(&b).is_err() && verify_time_index(&b).is_err());
            }
            assert!(verify_index(&bytes[..bytes.len() - 1]).is_err());
        }
    }

    #[test]
    fn time_lookup_returns_a_seq_before_every_matching_record() {
        let (_, tidx) = sample();
        let bytes = tidx.encode();
        assert_eq!(lookup_time(&bytes, 50).unwrap(), None);
        assert_eq!(lookup_time(&bytes, i64::MIN).unwrap(), Some(10));
        let ts: Vec<i64> = (0..20).map(|i| (i * 7) % 50).collect();
        for target in 0..50 {
            let first = ts.iter().position(|&t| t >= target).unwrap() as u64 + 10;
            let from = lookup_time(&bytes, target).unwrap().unwrap();
            assert!(from <= first, "target {target}: {from} > {first}");
        }
    }
}
