//! Reads from the remote tier: offset index once, then aligned chunks through the cache.

use bytes::{Bytes, BytesMut};
use krabka_remote_storage::{IndexType, RemoteLogSegmentMetadata};
use krabka_storage::Record;
use krabka_storage::segment::{decode_records, lookup_position};

use crate::cache::Part;
use crate::error::Error;
use crate::stats::bump;
use crate::tiered::TieredLog;

impl TieredLog {
    /// Up to `max` records from `seq` within one finished remote segment.
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
        let index = self.remote_index(meta, seq)?;
        let start =
            lookup_position(&index, seq).map_err(|e| corrupt(format!("offset index: {e}")))?;
        if start >= size {
            return Err(corrupt(format!(
                "offset index points at byte {start} of a {size}-byte segment"
            )));
        }
        let chunk = u64::from(self.config.chunk_bytes);
        let mut out = Vec::new();
        // Undecoded bytes carried over from the previous chunk (a frame cut by the boundary).
        let mut carry = Bytes::new();
        let mut pos = start;
        let mut sequential = false;
        while out.len() < max && pos < size {
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
            let decoded = decode_records(&buf, seq, max - out.len())
                .map_err(|e| corrupt(format!("bytes near position {pos}: {e}")))?;
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
        let bytes = Bytes::from(bytes);
        self.cache.insert(key, bytes.clone());
        Ok(bytes)
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
