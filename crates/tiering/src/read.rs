//! Reads from the remote tier: offset index once (validated, then cached as its entries), then
//! aligned chunks through the cache, with every record's seq checked; time indexes (validated,
//! cached) for timestamp lookups.

use bytes::{Bytes, BytesMut};
use krabka_remote_storage::{IndexType, RemoteLogSegmentMetadata, layout};
use krabka_storage::Record;
use krabka_storage::segment::{decode_records_at, lookup_time, verify_index, verify_time_index};

use crate::cache::Part;
use crate::error::Error;
use crate::stats::bump;
use crate::tiered::TieredLog;

/// Bytes of the `.index` header before the entries (`docs/format.md`).
const INDEX_HEADER_LEN: usize = 44;
/// Bytes of one `.index` entry: seq and byte position, both `u64` little endian.
const INDEX_ENTRY_LEN: usize = 16;
/// Bytes of the CRC after the entries.
const INDEX_CRC_LEN: usize = 4;

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(<[u8; 8]>::try_from(s).ok()?))
}

/// The last `(seq, position)` entry with seq <= `seq` in validated, packed index entries (as
/// cached by `remote_index`): a binary search, no decoding or CRC.
pub(crate) fn floor_entry(entries: &[u8], seq: u64) -> Option<(u64, u64)> {
    let n = entries.len() / INDEX_ENTRY_LEN;
    let entry = |i: usize| {
        let at = i * INDEX_ENTRY_LEN;
        Some((u64_at(entries, at)?, u64_at(entries, at + 8)?))
    };
    // First entry whose seq is > `seq`.
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match entry(mid) {
            Some((s, _)) if s <= seq => lo = mid + 1,
            _ => hi = mid,
        }
    }
    lo.checked_sub(1).and_then(entry)
}

/// The key of a segment's object in the shared layout: its `.log` (`None`) or an index.
pub(crate) fn object_key(meta: &RemoteLogSegmentMetadata, index: Option<IndexType>) -> String {
    let key = match index {
        None => layout::log_key(meta),
        Some(t) => layout::index_key(meta, t),
    };
    key.unwrap_or_else(|_| {
        let suffix = index.map_or(".log", IndexType::suffix);
        format!("{}{suffix}", meta.remote_log_segment_id())
    })
}

/// The byte position and reason of a storage decoding error (positions relative to the
/// decoded buffer).
fn position_and_reason(e: &krabka_storage::Error) -> (Option<u64>, String) {
    match e {
        krabka_storage::Error::Corrupt {
            position, reason, ..
        } => (Some(*position), reason.clone()),
        other => (None, other.to_string()),
    }
}

impl TieredLog {
    /// Up to `max` records from `seq` within one finished remote segment.
    ///
    /// Every record's seq is checked: the frame the index points at must carry the entry's
    /// seq, and each frame (across chunk boundaries too) the seq after the previous one; the
    /// first record returned is `seq` itself, and none lies past the segment's last seq.
    /// Anything else is [`Error::CorruptRemote`] naming the object and byte. Records decoded
    /// before a bad frame are returned first (a short read); a read starting at the bad frame
    /// gets the error.
    ///
    /// Costs, with a cold cache: one index fetch and one ranged fetch per chunk touched (a
    /// point read touches one chunk unless its record straddles a chunk boundary). With a warm
    /// cache: nothing.
    pub(crate) fn read_remote(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seq: u64,
        max: usize,
    ) -> Result<Vec<Record>, Error> {
        let id = meta.remote_log_segment_id();
        let corrupt = |position: Option<u64>, reason: String| Error::CorruptRemote {
            segment: Box::new(id.clone()),
            object: object_key(meta, None),
            position,
            seq,
            reason,
        };
        let size = meta.segment_size_in_bytes();
        let entries = self.remote_index(meta, seq)?;
        let (mut expect, start) = floor_entry(&entries, seq).unwrap_or((meta.start_offset(), 0));
        if start >= size {
            return Err(corrupt(
                None,
                format!("offset index points at byte {start} of a {size}-byte segment"),
            ));
        }
        let chunk = u64::from(self.config.chunk_bytes);
        let mut out: Vec<Record> = Vec::new();
        // Undecoded bytes carried over from the previous chunk (a frame cut by the boundary).
        let mut carry = Bytes::new();
        let mut pos = start;
        let mut sequential = false;
        // Checks a decoded batch and moves it to `out`.
        let accept = |out: &mut Vec<Record>, records: Vec<Record>| -> Result<(), Error> {
            if let (true, Some(first)) = (out.is_empty(), records.first())
                && first.seq != seq
            {
                return Err(corrupt(
                    None,
                    format!(
                        "the first record found is seq {}, not the seq asked for",
                        first.seq
                    ),
                ));
            }
            if let Some(past) = records.iter().find(|r| r.seq > meta.end_offset()) {
                return Err(corrupt(
                    None,
                    format!(
                        "holds seq {} past the segment's last seq {}",
                        past.seq,
                        meta.end_offset()
                    ),
                ));
            }
            out.extend(records);
            Ok(())
        };
        while out.len() < max && pos < size {
            let buf_start = pos - carry.len() as u64;
            let n = pos / chunk;
            let data = self.remote_chunk(meta, n, seq, sequential)?;
            let offset = usize::try_from(pos - n * chunk).unwrap_or(usize::MAX);
            let fresh = data
                .get(offset..)
                .ok_or_else(|| corrupt(Some(pos), format!("chunk {n} is shorter than expected")))?;
            let buf = if carry.is_empty() {
                data.slice_ref(fresh)
            } else {
                let mut joined = BytesMut::with_capacity(carry.len() + fresh.len());
                joined.extend_from_slice(&carry);
                joined.extend_from_slice(fresh);
                joined.freeze()
            };
            pos = (n + 1) * chunk;
            // The bytes start at the frame holding `expect` (the index entry's seq, then the
            // seq after the last decoded frame), and seqs are contiguous from there.
            let want = max - out.len();
            let decoded = match decode_records_at(&buf, expect, seq, want) {
                Ok(d) => d,
                Err(e) => {
                    let (at, why) = position_and_reason(&e);
                    let error = corrupt(
                        Some(buf_start + at.unwrap_or(0)),
                        format!("expected the frame of seq {expect} or a later one: {why}"),
                    );
                    // The frames before the bad one are valid: deliver them first.
                    let good = at
                        .and_then(|a| usize::try_from(a).ok())
                        .filter(|&a| a > 0)
                        .map(|a| buf.slice(..a.min(buf.len())));
                    if let Some(good) = good
                        && let Ok(d) = decode_records_at(&good, expect, seq, want)
                    {
                        accept(&mut out, d.records)?;
                    }
                    if out.is_empty() {
                        return Err(error);
                    }
                    tracing::debug!(error = %error, "short remote read before a bad frame");
                    return Ok(out);
                }
            };
            if let Some(next) = decoded.next_seq {
                expect = next;
            }
            let done = decoded.next_seq.is_some_and(|s| s > meta.end_offset());
            accept(&mut out, decoded.records)?;
            carry = buf.slice(decoded.consumed.min(buf.len())..);
            if done {
                break;
            }
            sequential = true;
        }
        if out.is_empty() && max > 0 {
            return Err(corrupt(
                Some(start),
                format!("no record at or after seq {seq} in {size} bytes (from byte {start})"),
            ));
        }
        Ok(out)
    }

    /// The segment's offset index entries, packed (16 bytes each). On a miss the index is
    /// fetched, validated once (CRC, order, and its range and size against the metadata) and
    /// cached without its header and CRC, so later reads only binary-search it.
    fn remote_index(&self, meta: &RemoteLogSegmentMetadata, seq: u64) -> Result<Bytes, Error> {
        let id = meta.remote_log_segment_id();
        let key = (id.id(), Part::OffsetIndex);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        bump(&self.counters.fetch_index, 1);
        let bytes = self
            .rsm
            .fetch_index(meta, IndexType::Offset)
            .map_err(|e| Error::remote("fetch_index", id, Some(seq), e))?;
        let corrupt = |position: Option<u64>, reason: String| Error::CorruptRemote {
            segment: Box::new(id.clone()),
            object: object_key(meta, Some(IndexType::Offset)),
            position,
            seq,
            reason: format!("offset index: {reason}"),
        };
        let summary = verify_index(&bytes).map_err(|e| {
            let (at, why) = position_and_reason(&e);
            corrupt(at, why)
        })?;
        let expected = (
            meta.start_offset(),
            meta.end_offset(),
            meta.segment_size_in_bytes(),
        );
        let found = (summary.base_seq, summary.last_seq, summary.log_size);
        if found != expected {
            return Err(corrupt(
                None,
                format!(
                    "describes seqs {}..={} in {} bytes, the metadata {}..={} in {} bytes",
                    found.0, found.1, found.2, expected.0, expected.1, expected.2
                ),
            ));
        }
        let end = INDEX_HEADER_LEN + summary.entries * INDEX_ENTRY_LEN;
        if end + INDEX_CRC_LEN != bytes.len() {
            return Err(corrupt(
                None,
                format!("{} entries in {} bytes", summary.entries, bytes.len()),
            ));
        }
        let entries = Bytes::copy_from_slice(bytes.get(INDEX_HEADER_LEN..end).unwrap_or(&[]));
        self.cache.insert(key, entries.clone());
        Ok(entries)
    }

    /// The seq from which to scan a finished remote segment for the first record whose
    /// timestamp is `>= ts` (`None`: no record of it has one), from its time index. On a miss
    /// the time index is fetched, validated (CRC, order, base seq and max timestamp against the
    /// metadata) and cached whole.
    pub(crate) fn remote_time_floor(
        &self,
        meta: &RemoteLogSegmentMetadata,
        ts: i64,
    ) -> Result<Option<u64>, Error> {
        let id = meta.remote_log_segment_id();
        let seq = meta.start_offset();
        let corrupt = |position: Option<u64>, reason: String| Error::CorruptRemote {
            segment: Box::new(id.clone()),
            object: object_key(meta, Some(IndexType::Timestamp)),
            position,
            seq,
            reason: format!("time index: {reason}"),
        };
        let key = (id.id(), Part::TimeIndex);
        let bytes = match self.cache.get(&key) {
            Some(hit) => hit,
            None => {
                bump(&self.counters.fetch_index, 1);
                let bytes = Bytes::from(
                    self.rsm
                        .fetch_index(meta, IndexType::Timestamp)
                        .map_err(|e| Error::remote("fetch_index", id, Some(seq), e))?,
                );
                let summary = verify_time_index(&bytes).map_err(|e| {
                    let (at, why) = position_and_reason(&e);
                    corrupt(at, why)
                })?;
                if (summary.base_seq, summary.max_timestamp)
                    != (meta.start_offset(), meta.max_timestamp_ms())
                {
                    return Err(corrupt(
                        None,
                        format!(
                            "describes base seq {} and max timestamp {}, the metadata {} and {}",
                            summary.base_seq,
                            summary.max_timestamp,
                            meta.start_offset(),
                            meta.max_timestamp_ms()
                        ),
                    ));
                }
                self.cache.insert(key, bytes.clone());
                bytes
            }
        };
        let floor = lookup_time(&bytes, ts).map_err(|e| {
            let (at, why) = position_and_reason(&e);
            corrupt(at, why)
        })?;
        match floor {
            Some(f) if f < meta.start_offset() || f > meta.end_offset() => Err(corrupt(
                None,
                format!(
                    "points at seq {f}, outside the segment's seqs {}..={}",
                    meta.start_offset(),
                    meta.end_offset()
                ),
            )),
            other => Ok(other),
        }
    }

    /// Chunk `n` of a segment; with `read_ahead`, a miss fetches chunks `n` and `n + 1` in one
    /// request and caches both. The bytes returned must be exactly the range asked for: an
    /// object shorter than the metadata's size is [`Error::CorruptRemote`].
    fn remote_chunk(
        &self,
        meta: &RemoteLogSegmentMetadata,
        n: u64,
        seq: u64,
        read_ahead: bool,
    ) -> Result<Bytes, Error> {
        let id = meta.remote_log_segment_id();
        let key = (id.id(), Part::Chunk(n));
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let chunk = u64::from(self.config.chunk_bytes);
        let size = meta.segment_size_in_bytes();
        let start = n * chunk;
        let chunks = if read_ahead && self.config.prefetch {
            2
        } else {
            1
        };
        let end = (start + chunks * chunk).min(size);
        let corrupt = |reason: String| Error::CorruptRemote {
            segment: Box::new(id.clone()),
            object: object_key(meta, None),
            position: Some(start),
            seq,
            reason,
        };
        let (Ok(first), Ok(last)) = (u32::try_from(start), u32::try_from(end.saturating_sub(1)))
        else {
            return Err(corrupt(format!("chunk {n} lies beyond u32 positions")));
        };
        bump(&self.counters.fetch_log, 1);
        let bytes = self
            .rsm
            .fetch_log_segment(meta, first, Some(last))
            .map_err(|e| Error::remote("fetch_log_segment", id, Some(seq), e))?;
        if bytes.len() as u64 != end - start {
            return Err(corrupt(format!(
                "fetching bytes {start}..{end} returned {} bytes: the object is shorter than \
                 the segment's {size} bytes",
                bytes.len()
            )));
        }
        let bytes = Bytes::from(bytes);
        let split = usize::try_from(chunk)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let head = bytes.slice(..split);
        if bytes.len() > split {
            self.cache
                .insert((id.id(), Part::Chunk(n + 1)), bytes.slice(split..));
        }
        self.cache.insert(key, head.clone());
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(entries: &[(u64, u64)]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|&(s, p)| s.to_le_bytes().into_iter().chain(p.to_le_bytes()))
            .collect()
    }

    #[test]
    fn floor_entry_finds_the_last_entry_at_or_below() {
        let e = packed(&[(10, 0), (20, 300), (30, 700)]);
        assert_eq!(floor_entry(&e, 9), None);
        assert_eq!(floor_entry(&e, 10), Some((10, 0)));
        assert_eq!(floor_entry(&e, 29), Some((20, 300)));
        assert_eq!(floor_entry(&e, 30), Some((30, 700)));
        assert_eq!(floor_entry(&e, u64::MAX), Some((30, 700)));
        assert_eq!(floor_entry(&[], 5), None);
    }
}
