//! Validated read-only views over the bytes of index files, with floor lookups that binary
//! search the entries in place (no decoding into vectors).
//!
//! These views are the one reader of the index formats outside the log itself: a tier that
//! fetches a segment's `.index` or `.timeindex` back validates it with
//! [`OffsetIndexView::parse`] / [`TimeIndexView::parse`] and then looks entries up without
//! knowing the layout (`docs/format.md`).

use bytes::Bytes;

use super::{
    ENTRY_LEN, INDEX_HEADER_LEN, INDEX_MAGIC, INDEX_VERSION, IndexSummary, TIME_INDEX_HEADER_LEN,
    TIME_INDEX_MAGIC, TimeIndexSummary,
};
use crate::Error;
use crate::segment::BadBytes;

/// Byte position of the entry count in a `.index` header.
const INDEX_COUNT_AT: usize = 40;
/// Byte position of the entry count in a `.timeindex` header.
const TIME_INDEX_COUNT_AT: usize = 24;
/// Bytes of the CRC that ends both index files.
const CRC_LEN: usize = 4;

pub(super) fn bad(position: usize, reason: impl Into<String>) -> BadBytes {
    BadBytes::bad(position, reason)
}

pub(super) fn u64_at(buf: &[u8], at: usize) -> u64 {
    buf.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    buf.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_le_bytes)
}

/// Checks magic, version, reserved bytes and that the length matches the entry count; returns
/// the entry count. `full` also checks the trailing CRC.
fn check_envelope(
    buf: &[u8],
    magic: [u8; 4],
    header_len: usize,
    count_at: usize,
    full: bool,
) -> Result<usize, BadBytes> {
    if buf.len() < header_len + CRC_LEN {
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
        .and_then(|n| n.checked_add(header_len + CRC_LEN));
    if expected != Some(buf.len()) {
        return Err(bad(
            count_at,
            format!(
                "entry count {count} does not match the file length {}",
                buf.len()
            ),
        ));
    }
    let body = buf.len() - CRC_LEN;
    let stored = u32_at(buf, body);
    let actual = if full {
        crc32fast::hash(buf.get(..body).unwrap_or(&[]))
    } else {
        stored
    };
    if stored != actual {
        return Err(bad(
            body,
            format!("CRC mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }
    Ok(count)
}

/// `(seq, position)` of entry `i` of a valid `.index` buffer.
pub(super) fn offset_entry(buf: &[u8], i: usize) -> (u64, u64) {
    let at = INDEX_HEADER_LEN + i * ENTRY_LEN;
    (u64_at(buf, at), u64_at(buf, at + 8))
}

/// `(max timestamp before seq, seq)` of entry `i` of a valid `.timeindex` buffer.
pub(super) fn time_entry(buf: &[u8], i: usize) -> (i64, u64) {
    let at = TIME_INDEX_HEADER_LEN + i * ENTRY_LEN;
    (u64_at(buf, at) as i64, u64_at(buf, at + 8))
}

/// The first `i` in `0..n` for which `pred(i)` is false (`pred` holds for a prefix).
fn partition_point(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Validates a whole `.index` buffer (envelope and header; with `full` also the CRC and the entry order);
/// returns its header.
pub(super) fn validate_offset(buf: &[u8], full: bool) -> Result<IndexSummary, BadBytes> {
    let count = check_envelope(buf, INDEX_MAGIC, INDEX_HEADER_LEN, INDEX_COUNT_AT, full)?;
    let base_seq = u64_at(buf, 8);
    let last_seq = u64_at(buf, 16);
    let log_size = u64_at(buf, 24);
    let max_timestamp = u64_at(buf, 32) as i64;
    if base_seq == 0 || last_seq.checked_add(1).is_none_or(|n| n < base_seq) {
        return Err(bad(8, format!("bad seq range {base_seq}..={last_seq}")));
    }
    let empty = last_seq + 1 == base_seq;
    if empty != (count == 0) {
        return Err(bad(
            INDEX_COUNT_AT,
            "entry count disagrees with the seq range",
        ));
    }
    if full {
        let mut prev: Option<(u64, u64)> = None;
        for i in 0..count {
            let (seq, pos) = offset_entry(buf, i);
            let ok = match prev {
                None => seq == base_seq && pos == 0,
                Some((ps, pp)) => seq > ps && pos > pp,
            };
            if !ok || seq > last_seq || pos >= log_size {
                let at = INDEX_HEADER_LEN + i * ENTRY_LEN;
                return Err(bad(at, format!("entry {i} ({seq}, {pos}) is out of order")));
            }
            prev = Some((seq, pos));
        }
    }
    Ok(IndexSummary {
        base_seq,
        last_seq,
        log_size,
        max_timestamp,
        entries: count,
    })
}

/// Validates a whole `.timeindex` buffer (envelope; with `full` also the CRC and the entry order);
/// returns its header.
pub(super) fn validate_time(buf: &[u8], full: bool) -> Result<TimeIndexSummary, BadBytes> {
    let count = check_envelope(
        buf,
        TIME_INDEX_MAGIC,
        TIME_INDEX_HEADER_LEN,
        TIME_INDEX_COUNT_AT,
        full,
    )?;
    let base_seq = u64_at(buf, 8);
    let max_timestamp = u64_at(buf, 16) as i64;
    if full {
        let mut prev: Option<(i64, u64)> = None;
        for i in 0..count {
            let (ts, seq) = time_entry(buf, i);
            let ok = match prev {
                None => seq == base_seq && ts == i64::MIN,
                Some((pt, ps)) => seq > ps && ts >= pt && ts <= max_timestamp,
            };
            if !ok {
                let at = TIME_INDEX_HEADER_LEN + i * ENTRY_LEN;
                return Err(bad(at, format!("entry {i} ({ts}, {seq}) is out of order")));
            }
            prev = Some((ts, seq));
        }
    }
    Ok(TimeIndexSummary {
        base_seq,
        max_timestamp,
        entries: count,
    })
}

/// The last entry of a valid `.index` buffer of `n` entries whose seq is `<= seq`.
pub(super) fn offset_floor(buf: &[u8], n: usize, seq: u64) -> Option<(u64, u64)> {
    let i = partition_point(n, |i| offset_entry(buf, i).0 <= seq);
    i.checked_sub(1).map(|i| offset_entry(buf, i))
}

/// The seq to scan from for the first record with timestamp `>= ts`, in a valid `.timeindex`
/// buffer with header `h` (see [`TimeIndexView::floor`]).
pub(super) fn time_floor_in(buf: &[u8], h: &TimeIndexSummary, ts: i64) -> Option<u64> {
    if h.entries == 0 || h.max_timestamp < ts {
        return None;
    }
    let i = partition_point(h.entries, |i| time_entry(buf, i).0 < ts);
    Some(time_entry(buf, i.saturating_sub(1)).1)
}

fn corrupt(e: BadBytes) -> Error {
    e.into_error(std::path::Path::new(""), 0)
}

/// A validated, read-only view over the bytes of a segment's `.index` file (its sparse offset
/// index): the header and a floor lookup that binary-searches the entries in place.
///
/// Cloning is cheap (the bytes are shared), so a cache can keep the view itself.
///
/// ```
/// use krabka_protocol::Message;
/// use krabka_storage::index::OffsetIndexView;
/// use krabka_storage::{Log, Options};
///
/// let dir = tempfile::tempdir()?;
/// let log = Log::open(dir.path(), Options { index_interval_bytes: 1, ..Options::default() })?;
/// for value in ["a", "b", "c"] {
///     log.append(&Message::new(value))?; // a batch each
/// }
/// log.roll()?;
/// let closed = &log.segments()[0];
/// let view = OffsetIndexView::parse(std::fs::read(&closed.index_path)?)?;
/// assert_eq!((view.base_seq(), view.last_seq(), view.log_size()), (1, 3, closed.size));
/// assert_eq!(view.floor(0), None);
/// assert_eq!(view.floor(1), Some((1, 0)));
/// let (seq, position) = view.floor(3).unwrap_or((1, 0));
/// assert_eq!(seq, 3);
/// assert!(position > 0 && position < closed.size);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetIndexView {
    bytes: Bytes,
    summary: IndexSummary,
}

impl OffsetIndexView {
    /// Validates the bytes of a `.index` file (magic, version, length, CRC, seq range and that
    /// entries are strictly increasing, start at `(base_seq, 0)` and stay within the segment)
    /// and wraps them.
    ///
    /// # Errors
    /// [`Error::Corrupt`] (empty path) naming the byte position of the first problem.
    pub fn parse(bytes: impl Into<Bytes>) -> Result<Self, Error> {
        let bytes = bytes.into();
        let summary = validate_offset(&bytes, true).map_err(corrupt)?;
        Ok(Self { bytes, summary })
    }

    /// Wraps bytes that [`parse`](Self::parse) accepted before (for example kept in a cache as
    /// [`as_bytes`](Self::as_bytes)), checking only what costs nothing: magic, version, the
    /// seq range and that the length matches the entry count. The CRC and the entry order are
    /// not checked again, so lookups on bytes that were never parsed may give wrong answers
    /// (they never panic).
    ///
    /// # Errors
    /// [`Error::Corrupt`] (empty path) when those cheap checks fail.
    pub fn from_parsed_bytes(bytes: impl Into<Bytes>) -> Result<Self, Error> {
        let bytes = bytes.into();
        let summary = validate_offset(&bytes, false).map_err(corrupt)?;
        Ok(Self { bytes, summary })
    }

    /// The index file's header (base seq, last seq, `.log` size, max timestamp, entry count).
    pub fn summary(&self) -> IndexSummary {
        self.summary
    }

    /// Base seq of the segment (the first entry's seq).
    pub fn base_seq(&self) -> u64 {
        self.summary.base_seq
    }

    /// Last seq of the segment (`base_seq - 1` when it is empty).
    pub fn last_seq(&self) -> u64 {
        self.summary.last_seq
    }

    /// Size in bytes of the `.log` file the index describes.
    pub fn log_size(&self) -> u64 {
        self.summary.log_size
    }

    /// Largest record timestamp in the segment (`i64::MIN` when empty).
    pub fn max_timestamp(&self) -> i64 {
        self.summary.max_timestamp
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.summary.entries
    }

    /// Whether the index has no entries (an empty segment).
    pub fn is_empty(&self) -> bool {
        self.summary.entries == 0
    }

    /// Entry `i` as `(seq, byte position in the .log)`; `None` past the end.
    pub fn entry(&self, i: usize) -> Option<(u64, u64)> {
        (i < self.len()).then(|| offset_entry(&self.bytes, i))
    }

    /// The last entry `(seq, byte position)` whose seq is `<= seq`; `None` when `seq` is below
    /// the first entry (below the base seq) or the index is empty. Reading batches from that
    /// position reaches `seq` after at most one index interval of bytes.
    pub fn floor(&self, seq: u64) -> Option<(u64, u64)> {
        offset_floor(&self.bytes, self.len(), seq)
    }

    /// The whole file's bytes, as parsed.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }
}

/// A validated, read-only view over the bytes of a segment's `.timeindex` file: the header and
/// a floor lookup by timestamp that binary-searches the entries in place.
///
/// Entry `i` is `(max timestamp of the records before seq, seq)`: every record before `seq`
/// has a timestamp `<=` the first field.
///
/// ```
/// use krabka_protocol::Message;
/// use krabka_storage::index::TimeIndexView;
/// use krabka_storage::{Log, Options};
///
/// let dir = tempfile::tempdir()?;
/// let log = Log::open(dir.path(), Options { index_interval_bytes: 1, ..Options::default() })?;
/// for ts in [10, 20, 30] {
///     log.append(&Message::new("m").with_timestamp(ts))?;
/// }
/// log.roll()?;
/// let view = TimeIndexView::parse(std::fs::read(&log.segments()[0].time_index_path)?)?;
/// assert_eq!((view.base_seq(), view.max_timestamp(), view.len()), (1, 30, 3));
/// assert_eq!(view.floor(i64::MIN), Some(1));
/// assert_eq!(view.floor(25), Some(3)); // seq 3 (ts 30) is the first with ts >= 25
/// assert_eq!(view.floor(31), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeIndexView {
    bytes: Bytes,
    summary: TimeIndexSummary,
}

impl TimeIndexView {
    /// Validates the bytes of a `.timeindex` file (magic, version, length, CRC, and that
    /// entries start at `(i64::MIN, base_seq)` with increasing seqs and non-decreasing
    /// timestamps no larger than the max timestamp) and wraps them.
    ///
    /// # Errors
    /// [`Error::Corrupt`] (empty path) naming the byte position of the first problem.
    pub fn parse(bytes: impl Into<Bytes>) -> Result<Self, Error> {
        let bytes = bytes.into();
        let summary = validate_time(&bytes, true).map_err(corrupt)?;
        Ok(Self { bytes, summary })
    }

    /// Wraps bytes that [`parse`](Self::parse) accepted before, checking only magic, version
    /// and that the length matches the entry count (see
    /// [`OffsetIndexView::from_parsed_bytes`]).
    ///
    /// # Errors
    /// [`Error::Corrupt`] (empty path) when those cheap checks fail.
    pub fn from_parsed_bytes(bytes: impl Into<Bytes>) -> Result<Self, Error> {
        let bytes = bytes.into();
        let summary = validate_time(&bytes, false).map_err(corrupt)?;
        Ok(Self { bytes, summary })
    }

    /// The file's header (base seq, max timestamp, entry count).
    pub fn summary(&self) -> TimeIndexSummary {
        self.summary
    }

    /// Base seq of the segment.
    pub fn base_seq(&self) -> u64 {
        self.summary.base_seq
    }

    /// Largest record timestamp in the segment (`i64::MIN` when empty).
    pub fn max_timestamp(&self) -> i64 {
        self.summary.max_timestamp
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.summary.entries
    }

    /// Whether the index has no entries (an empty segment).
    pub fn is_empty(&self) -> bool {
        self.summary.entries == 0
    }

    /// Entry `i` as `(max timestamp of the records before seq, seq)`; `None` past the end.
    pub fn entry(&self, i: usize) -> Option<(i64, u64)> {
        (i < self.len()).then(|| time_entry(&self.bytes, i))
    }

    /// The seq from which to scan the segment for the first record whose timestamp is
    /// `>= timestamp`: every record before it has a smaller timestamp. `None` when no record of
    /// the segment has such a timestamp (the max timestamp is smaller, or it is empty).
    pub fn floor(&self, timestamp: i64) -> Option<u64> {
        time_floor_in(&self.bytes, &self.summary, timestamp)
    }

    /// The whole file's bytes, as parsed.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }
}
