//! Reads from the remote tier: offset index once (validated, then cached as its entries), then
//! aligned chunks through the cache, with every record's seq checked.

use bytes::{Bytes, BytesMut};
use krabka_remote_storage::{IndexType, RemoteLogSegmentMetadata};
use krabka_storage::Record;
use krabka_storage::segment::{decode_records_at, verify_index};

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

impl TieredLog {
    /// Up to `max` records from `seq` within one finished remote segment.
    ///
    /// Every record's seq is checked: the frame the index points at must carry the entry's
    /// seq, and each frame (across chunk boundaries too) the seq after the previous one; the
    /// first record returned is `seq` itself. Anything else is [`Error::CorruptRemote`].
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
        let corrupt = |reason: String| Error::CorruptRemote {
            segment: id.clone(),
            seq,
            reason,
        };
        let size = meta.segment_size_in_bytes();
        let entries = self.remote_index(meta, seq)?;
        let (mut expect, start) = floor_entry(&entries, seq).unwrap_or((meta.start_offset(), 0));
        if start >= size {
            return Err(corrupt(format!(
                "offset index points at byte {start} of a {size}-byte segment"
            )));
        }
        let chunk = u64::from(self.config.chunk_bytes);
        let mut out: Vec<Record> = Vec::new();
        // Undecoded bytes carried over from the previous chunk (a frame cut by the boundary).
        let mut carry = Bytes::new();
        let mut pos = start;
        let mut sequential = false;
        while out.len() < max && pos < size {
            let buf_start = pos - carry.len() as u64;
            let n = pos / chunk;
            let data = self.remote_chunk(meta, n, seq, sequential)?;
            let offset = usize::try_from(pos - n * chunk).unwrap_or(usize::MAX);
            let fresh = data
                .get(offset..)
                .ok_or_else(|| corrupt(format!("chunk {n} is shorter than expected")))?;
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
            let decoded = decode_records_at(&buf, expect, seq, max - out.len()).map_err(|e| {
                corrupt(format!(
                    "bytes from position {buf_start} (expected seq {expect} there): {e}"
                ))
            })?;
            if let Some(next) = decoded.next_seq {
                expect = next;
            }
            if let (true, Some(first)) = (out.is_empty(), decoded.records.first())
                && first.seq != seq
            {
                return Err(corrupt(format!(
                    "the first record found is seq {}, not the seq asked for",
                    first.seq
                )));
            }
            if let Some(past) = decoded.records.iter().find(|r| r.seq > meta.end_offset()) {
                return Err(corrupt(format!(
                    "holds seq {} past the segment's last seq {}",
                    past.seq,
                    meta.end_offset()
                )));
            }
            let done = decoded.next_seq.is_some_and(|s| s > meta.end_offset());
            out.extend(decoded.records);
            carry = buf.slice(decoded.consumed.min(buf.len())..);
            if done {
                break;
            }
            sequential = true;
        }
        if out.is_empty() && max > 0 {
            return Err(corrupt(format!(
                "no record at or after seq {seq} in {size} bytes (from byte {start})"
            )));
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
        let corrupt = |reason: String| Error::CorruptRemote {
            segment: id.clone(),
            seq,
            reason: format!("offset index: {reason}"),
        };
        let summary = verify_index(&bytes).map_err(|e| corrupt(e.to_string()))?;
        let expected = (
            meta.start_offset(),
            meta.end_offset(),
            meta.segment_size_in_bytes(),
        );
        let found = (summary.base_seq, summary.last_seq, summary.log_size);
        if found != expected {
            return Err(corrupt(format!(
                "describes seqs {}..={} in {} bytes, the metadata {}..={} in {} bytes",
                found.0, found.1, found.2, expected.0, expected.1, expected.2
            )));
        }
        let end = INDEX_HEADER_LEN + summary.entries * INDEX_ENTRY_LEN;
        if end + INDEX_CRC_LEN != bytes.len() {
            return Err(corrupt(format!(
                "{} entries in {} bytes",
                summary.entries,
                bytes.len()
            )));
        }
        let entries = Bytes::copy_from_slice(bytes.get(INDEX_HEADER_LEN..end).unwrap_or(&[]));
        self.cache.insert(key, entries.clone());
        Ok(entries)
    }

    /// Chunk `n` of a segment; with `read_ahead`, a miss fetches chunks `n` and `n + 1` in one
    /// request and caches both.
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
        let (Ok(first), Ok(last)) = (u32::try_from(start), u32::try_from(end.saturating_sub(1)))
        else {
            return Err(Error::CorruptRemote {
                segment: id.clone(),
                seq,
                reason: format!("chunk {n} lies beyond u32 positions"),
            });
        };
        bump(&self.counters.fetch_log, 1);
        let bytes = self
            .rsm
            .fetch_log_segment(meta, first, Some(last))
            .map_err(|e| Error::remote("fetch_log_segment", id, Some(seq), e))?;
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
