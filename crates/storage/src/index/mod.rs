//! The sparse offset index (`.index`) and time index (`.timeindex`) of a segment.
//!
//! Both are written when a segment is closed and carry a header, their entries and a trailing
//! CRC-32, so a torn or stale index is detected (and rebuilt by scanning the `.log`). Layouts
//! are in `docs/format.md`; this module is their one owner. Readers outside the log (a tier
//! that fetched an index back, tools) use [`OffsetIndexView`] and [`TimeIndexView`] (validate
//! once, then look up in place) or the one-shot [`lookup_position`], [`lookup_time`],
//! [`verify_index`] and [`verify_time_index`] (also re-exported from
//! [`segment`](crate::segment)).

mod view;

use std::path::Path;

use bytes::BufMut;

pub use self::view::{OffsetIndexView, TimeIndexView};
use crate::Error;
use crate::segment::BadBytes;

/// Magic bytes at the start of a `.index` file.
pub const INDEX_MAGIC: [u8; 4] = *b"KIDX";
/// Magic bytes at the start of a `.timeindex` file.
pub const TIME_INDEX_MAGIC: [u8; 4] = *b"KTIX";
/// Format version of both index files.
pub const INDEX_VERSION: u8 = 2;

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

    /// The builder a scan of the segment `idx` describes would leave: entries taken, and the
    /// bytes and timestamps since its last entry accounted for.
    pub(crate) fn resume(interval: u64, idx: &OffsetIndex) -> Self {
        let last_pos = idx.entries.last().map(|&(_, pos)| pos);
        Self::resume_at(interval, last_pos, idx.log_size, idx.max_timestamp)
    }

    /// A builder for a segment of `log_size` bytes whose last index entry is at `last_pos`
    /// and whose largest timestamp is `max_ts`.
    pub(crate) fn resume_at(
        interval: u64,
        last_pos: Option<u64>,
        log_size: u64,
        max_ts: i64,
    ) -> Self {
        Self {
            since: last_pos.map_or(0, |pos| log_size.saturating_sub(pos)),
            max_ts,
            started: last_pos.is_some(),
            ..Self::new(interval)
        }
    }

    /// Records a batch of `len` bytes at `pos` holding `seq` with timestamp `ts`.
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

fn finish(mut buf: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&buf);
    buf.put_u32_le(crc);
    buf
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

    pub(crate) fn decode(buf: &[u8]) -> Result<OffsetIndex, BadBytes> {
        let h = view::validate_offset(buf, true)?;
        Ok(OffsetIndex {
            base_seq: h.base_seq,
            last_seq: h.last_seq,
            log_size: h.log_size,
            max_timestamp: h.max_timestamp,
            entries: (0..h.entries).map(|i| view::offset_entry(buf, i)).collect(),
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

    pub(crate) fn decode(buf: &[u8]) -> Result<TimeIndex, BadBytes> {
        let h = view::validate_time(buf, true)?;
        Ok(TimeIndex {
            base_seq: h.base_seq,
            max_timestamp: h.max_timestamp,
            entries: (0..h.entries).map(|i| view::time_entry(buf, i)).collect(),
        })
    }
}

/// The bytes of a segment's `.index` and `.timeindex` for segment `base_seq..=last_seq` with
/// `log_size` bytes of records and largest timestamp `max_timestamp`.
pub(crate) fn encode_indexes(
    base_seq: u64,
    last_seq: u64,
    log_size: u64,
    max_timestamp: i64,
    offsets: OffsetEntries,
    times: TimeEntries,
) -> (Vec<u8>, Vec<u8>) {
    let idx = OffsetIndex {
        base_seq,
        last_seq,
        log_size,
        max_timestamp,
        entries: offsets,
    };
    let tidx = TimeIndex {
        base_seq,
        max_timestamp,
        entries: times,
    };
    (idx.encode(), tidx.encode())
}

/// An offset index floor entry `(seq, position)` and the entry after it, for reading one seq.
pub(crate) type IndexBounds = (Option<(u64, u64)>, Option<(u64, u64)>);

/// The last `(seq, position)` entry with seq <= `seq` (`None` when there is none: read from
/// the segment's start), and the entry after it (the first with seq > `seq`), if any.
pub(crate) fn floor_and_next(entries: &[(u64, u64)], seq: u64) -> IndexBounds {
    let i = count_at_or_below(entries, seq);
    let floor = i.checked_sub(1).and_then(|i| entries.get(i)).copied();
    (floor, entries.get(i).copied())
}

/// How many entries have a seq `<= seq` (entries sorted by seq): the result of
/// `partition_point`, found first in a small window around where the seq would be if entries
/// were evenly spread over their seqs (they are close to that: one per index interval of
/// bytes), which spares a binary search over a large index its cache misses. Falls back to the
/// full binary search when the window does not hold the answer.
fn count_at_or_below(entries: &[(u64, u64)], seq: u64) -> usize {
    const SLACK: usize = 8;
    let (Some(&(first, _)), Some(&(last, _))) = (entries.first(), entries.last()) else {
        return 0;
    };
    if seq < first {
        return 0;
    }
    if seq >= last {
        return entries.len();
    }
    // first <= seq < last, so last > first and there are at least two entries.
    let span = u128::from(last - first);
    let guess = u128::from(seq - first) * (entries.len() as u128 - 1) / span;
    let guess = usize::try_from(guess).unwrap_or(0);
    // Evenly spread entries (a dense index of equal-sized records) put the answer right at
    // the guess: two neighbouring entries, usually one cache line.
    if let (Some(&(at, _)), Some(&(after, _))) = (entries.get(guess), entries.get(guess + 1))
        && at <= seq
        && seq < after
    {
        return guess + 1;
    }
    let lo = guess.saturating_sub(SLACK);
    let hi = guess.saturating_add(SLACK + 1).min(entries.len());
    // Every entry before `lo` is <= seq when entries[lo] is; every one from `hi` on is > seq
    // when entries[hi] is.
    let lo_ok = entries.get(lo).is_some_and(|&(s, _)| s <= seq);
    let hi_ok = entries.get(hi).is_none_or(|&(s, _)| s > seq);
    match (lo_ok, hi_ok, entries.get(lo..hi)) {
        (true, true, Some(window)) => lo + window.partition_point(|&(s, _)| s <= seq),
        _ => entries.partition_point(|&(s, _)| s <= seq),
    }
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
/// index entry with seq <= `seq` (0 when there is none). Reading batches from there reaches
/// `seq` after at most one index interval of bytes. [`OffsetIndexView`] does the same without
/// validating the bytes again on every lookup.
///
/// # Errors
/// [`Error::Corrupt`] (empty path) when the index is invalid: bad magic, version, length, CRC
/// or entry order.
pub fn lookup_position(index: &[u8], seq: u64) -> Result<u64, Error> {
    let h = verify_index(index)?;
    Ok(view::offset_floor(index, h.entries, seq).map_or(0, |(_, pos)| pos))
}

/// Given the bytes of a segment's `.timeindex` file, the seq from which to scan the segment for
/// the first record whose timestamp is >= `timestamp`: every record before the returned seq has
/// a smaller timestamp. `None` when no record of the segment has a timestamp >= `timestamp`
/// (the segment's max timestamp is smaller, or the segment is empty). [`TimeIndexView::floor`]
/// does the same on bytes validated once.
///
/// # Errors
/// [`Error::Corrupt`] (empty path) when the time index is invalid.
pub fn lookup_time(time_index: &[u8], timestamp: i64) -> Result<Option<u64>, Error> {
    let h = verify_time_index(time_index)?;
    Ok(view::time_floor_in(time_index, &h, timestamp))
}

/// Validates the bytes of a `.index` file and returns its header.
///
/// # Errors
/// [`Error::Corrupt`] naming the byte position of the first problem (empty path).
pub fn verify_index(index: &[u8]) -> Result<IndexSummary, Error> {
    view::validate_offset(index, true).map_err(|e| e.into_error(Path::new(""), 0))
}

/// Validates the bytes of a `.timeindex` file and returns its header.
///
/// # Errors
/// [`Error::Corrupt`] naming the byte position of the first problem (empty path).
pub fn verify_time_index(time_index: &[u8]) -> Result<TimeIndexSummary, Error> {
    view::validate_time(time_index, true).map_err(|e| e.into_error(Path::new(""), 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `r` is the [`Error::Corrupt`] (empty path) every index check returns.
    fn is_corrupt<T>(r: &Result<T, Error>) -> bool {
        matches!(r, Err(Error::Corrupt { path, .. }) if path.as_os_str().is_empty())
    }

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
    fn floor_and_next_agree_with_a_binary_search_on_even_dense_and_skewed_indexes() {
        let even: Vec<(u64, u64)> = (0..500u64).map(|i| (10 + i * 7, i * 100)).collect();
        // An entry per seq: the guess is the answer.
        let dense: Vec<(u64, u64)> = (0..500u64).map(|i| (10 + i, i * 100)).collect();
        // Seqs bunched at the start and spread out later: the guess lands far off.
        let skewed: Vec<(u64, u64)> = (0..300u64)
            .map(|i| (5 + if i < 250 { i } else { 250 + (i - 249) * 1000 }, i))
            .collect();
        for entries in [even, dense, skewed, vec![(3, 0)], Vec::new()] {
            let top = entries.last().map_or(10, |e| e.0 + 10);
            for seq in 0..top {
                let i = entries.partition_point(|&(s, _)| s <= seq);
                let want = (
                    i.checked_sub(1).map(|i| entries[i]),
                    entries.get(i).copied(),
                );
                assert_eq!(floor_and_next(&entries, seq), want, "seq {seq}");
            }
        }
    }

    #[test]
    fn index_round_trips_and_lookup_finds_floor_entry() {
        let (idx, _) = sample();
        let bytes = idx.encode();
        assert_eq!(OffsetIndex::decode(&bytes).unwrap(), idx);
        assert_eq!(lookup_position(&bytes, 10).unwrap(), 0);
        assert_eq!(lookup_position(&bytes, 5).unwrap(), 0);
        // Entries every 2 batches of 60 bytes (interval 100): seq 12 at 120.
        assert_eq!(lookup_position(&bytes, 13).unwrap(), 120);
    }

    #[test]
    fn every_flipped_byte_of_an_index_is_detected() {
        let (idx, tidx) = sample();
        for bytes in [idx.encode(), tidx.encode()] {
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0x40;
                let (offset, time) = (verify_index(&b), verify_time_index(&b));
                assert!(
                    is_corrupt(&offset) && is_corrupt(&time),
                    "byte {i}: {offset:?} {time:?}"
                );
            }
            let cut = verify_index(&bytes[..bytes.len() - 1]);
            assert!(is_corrupt(&cut), "{cut:?}");
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

    #[test]
    fn views_agree_with_the_decoded_entries() {
        let (idx, tidx) = sample();
        let view = OffsetIndexView::parse(idx.encode()).unwrap();
        assert_eq!(view.summary(), verify_index(&idx.encode()).unwrap());
        assert_eq!(view.len(), idx.entries.len());
        for seq in 0..40 {
            assert_eq!(
                view.floor(seq),
                floor_and_next(&idx.entries, seq).0,
                "seq {seq}"
            );
        }
        assert_eq!(view.floor(u64::MAX), idx.entries.last().copied());
        assert_eq!(view.entry(view.len()), None);
        let again = OffsetIndexView::from_parsed_bytes(view.as_bytes().clone()).unwrap();
        assert_eq!(again, view);

        let tview = TimeIndexView::parse(tidx.encode()).unwrap();
        assert_eq!(tview.summary(), verify_time_index(&tidx.encode()).unwrap());
        for ts in -5..60 {
            assert_eq!(
                tview.floor(ts),
                time_floor(&tidx.entries, tidx.max_timestamp, ts),
                "ts {ts}"
            );
        }
        assert_eq!(tview.floor(i64::MIN), Some(10));
        let again = TimeIndexView::from_parsed_bytes(tview.as_bytes().clone()).unwrap();
        assert_eq!(again, tview);
    }

    #[test]
    fn views_reject_what_verify_rejects() {
        let (idx, tidx) = sample();
        for (bytes, time) in [(idx.encode(), false), (tidx.encode(), true)] {
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0x40;
                if time {
                    let got = TimeIndexView::parse(b);
                    assert!(is_corrupt(&got), "byte {i}: {got:?}");
                } else {
                    let got = OffsetIndexView::parse(b);
                    assert!(is_corrupt(&got), "byte {i}: {got:?}");
                }
            }
            // The cheap constructor still checks the envelope.
            let cut = OffsetIndexView::from_parsed_bytes(bytes[..bytes.len() - 1].to_vec());
            assert!(is_corrupt(&cut), "{cut:?}");
            let cut = TimeIndexView::from_parsed_bytes(bytes[..bytes.len() - 1].to_vec());
            assert!(is_corrupt(&cut), "{cut:?}");
        }
        // An empty segment's index has no entries and no floor.
        let empty = OffsetIndex {
            base_seq: 5,
            last_seq: 4,
            log_size: 0,
            max_timestamp: i64::MIN,
            entries: Vec::new(),
        };
        let view = OffsetIndexView::parse(empty.encode()).unwrap();
        assert!(view.is_empty());
        assert_eq!(view.floor(5), None);
    }
}
