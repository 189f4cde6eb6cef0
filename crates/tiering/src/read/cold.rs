//! Reads that await their fetches without a thread: a read the cache cannot serve is made
//! cached-only ([`ColdRead`] records the first entry it missed), the missing entry is fetched
//! on the read engine in the reader's turn ([`RemoteReader::fetch_missing`]) while the read
//! awaits it, and the read is made again holding the fetched bytes, so that the cache's
//! eviction between the fetch and the read cannot take them away.
//!
//! So a read holds a thread (and a reader slot) only to decode bytes it has, never while its
//! bytes are in flight: fetches in flight stay bounded by the engine, and the threads decoding
//! by the reader slots.

use bytes::Bytes;
use krabka_remote_storage::RemoteLogSegmentMetadata;
use parking_lot::Mutex;

use super::RemoteReader;
use super::index::prefetched_index;
use super::job::{Job, What};
use crate::cache::Part;
use crate::cache::byte_lru::Lookup;

/// Entries a cold read holds at once, fetched for it or found cached: an offset index and two
/// chunks (a batch crossing a chunk boundary needs both); the oldest chunk goes first. Bounds a
/// read's memory beside the cache to about two chunks (they may be the cache's own entries,
/// shared, or ones it has evicted since).
const HELD: usize = 3;

/// What a cached-only read missed first.
#[derive(Clone)]
pub(crate) struct Miss {
    meta: RemoteLogSegmentMetadata,
    what: Missing,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    OffsetIndex,
    Chunk(u64),
    /// The rest of a chunk a read resumes in: bytes `start..end`, never cached.
    Range {
        start: u64,
        end: u64,
    },
}

/// An entry a cold read holds.
struct Held {
    segment: uuid::Uuid,
    what: Missing,
    bytes: Bytes,
}

/// The state of one read awaiting its fetches without a thread: the entries fetched for it,
/// and the entry its last cached-only attempt missed.
#[derive(Default)]
pub(crate) struct ColdRead {
    held: Mutex<Vec<Held>>,
    miss: Mutex<Option<Miss>>,
}

impl ColdRead {
    /// The entry the last attempt missed first (taken).
    pub(crate) fn take_miss(&self) -> Option<Miss> {
        self.miss.lock().take()
    }

    /// Notes a miss; only the first of an attempt counts (the read stops there).
    fn missed(&self, meta: &RemoteLogSegmentMetadata, what: Missing) {
        let mut miss = self.miss.lock();
        if miss.is_none() {
            *miss = Some(Miss {
                meta: meta.clone(),
                what,
            });
        }
    }

    /// Keeps `bytes`, fetched for `miss`, for the next attempt.
    pub(crate) fn hold(&self, miss: &Miss, bytes: Bytes) {
        self.keep(miss.meta.remote_log_segment_id().id(), miss.what, bytes);
    }

    /// Keeps entry `what` of `segment` for the next attempt (once), the oldest chunk making
    /// room when [`HELD`] are kept.
    fn keep(&self, segment: uuid::Uuid, what: Missing, bytes: Bytes) {
        let mut held = self.held.lock();
        if held.iter().any(|h| h.segment == segment && h.what == what) {
            return;
        }
        if held.len() >= HELD
            && let Some(i) = held
                .iter()
                .position(|h| !matches!(h.what, Missing::OffsetIndex))
        {
            held.remove(i);
        }
        held.push(Held {
            segment,
            what,
            bytes,
        });
    }

    /// A held entry for `part` of `segment` (an index, or a whole chunk).
    fn entry(&self, segment: uuid::Uuid, part: Part) -> Option<Bytes> {
        let what = match part {
            Part::OffsetIndex => Missing::OffsetIndex,
            Part::Chunk(n) => Missing::Chunk(n),
            Part::TimeIndex | Part::Hints(_) => return None,
        };
        self.held
            .lock()
            .iter()
            .find(|h| h.segment == segment && h.what == what)
            .map(|h| h.bytes.clone())
    }

    /// Held bytes `start..end` of `segment`'s chunk `n` (of `chunk` bytes): from the range
    /// fetched for them, or from the whole chunk.
    fn range(&self, segment: uuid::Uuid, (start, end): (u64, u64), chunk: u64) -> Option<Bytes> {
        let n = start / chunk.max(1);
        let held = self.held.lock();
        held.iter().filter(|h| h.segment == segment).find_map(|h| {
            let from = match h.what {
                Missing::Range { start: s, end: e } if s <= start && end <= e => s,
                Missing::Chunk(c) if c == n => c * chunk,
                _ => return None,
            };
            let (a, b) = (
                usize::try_from(start - from).ok()?,
                usize::try_from(end - from).ok()?,
            );
            (b <= h.bytes.len()).then(|| h.bytes.slice(a..b))
        })
    }
}

impl RemoteReader<'_> {
    /// In a cached-only read: entry `part` of `meta` when held by the cold read or cached;
    /// else the miss is noted.
    pub(super) fn cached_entry(
        &self,
        meta: &RemoteLogSegmentMetadata,
        part: Part,
    ) -> Option<Bytes> {
        let segment = meta.remote_log_segment_id().id();
        if let Some(cold) = self.cold
            && let Some(bytes) = cold.entry(segment, part)
        {
            return Some(bytes);
        }
        if let Some(found) = self.cache.lru().lookup(&(segment, part)) {
            // Kept for the read's next attempt too (after a miss further on): the cache may
            // evict the chunk while the missing entry is fetched, and the attempt would then
            // fetch the rest of it again.
            if let (Some(cold), Part::Chunk(n)) = (self.cold, part) {
                cold.keep(segment, Missing::Chunk(n), found.clone());
            }
            return Some(found);
        }
        if let Some(cold) = self.cold {
            match part {
                Part::OffsetIndex => cold.missed(meta, Missing::OffsetIndex),
                Part::Chunk(n) => cold.missed(meta, Missing::Chunk(n)),
                Part::TimeIndex | Part::Hints(_) => {}
            }
        }
        None
    }

    /// In a cached-only read: bytes `start..end` (within one chunk) of `meta`'s `.log` when
    /// the cold read holds them; else the miss is noted.
    pub(super) fn cached_range(
        &self,
        meta: &RemoteLogSegmentMetadata,
        start: u64,
        end: u64,
    ) -> Option<Bytes> {
        let cold = self.cold?;
        let segment = meta.remote_log_segment_id().id();
        let chunk = u64::from(self.config.chunk_bytes);
        if let Some(bytes) = cold.range(segment, (start, end), chunk) {
            return Some(bytes);
        }
        cold.missed(meta, Missing::Range { start, end });
        None
    }

    /// Starts getting the entry `miss` names without holding a thread: from the cache, from
    /// the fetch of it in progress, or fetched on the read engine in this reader's turn. The
    /// receiver gets the entry, or `None` (the fetch failed, or another fetch of it ended
    /// without one): the read then reads itself and reports what goes wrong. `None` when the
    /// engine takes no more work.
    pub(crate) fn fetch_missing(
        &self,
        miss: &Miss,
    ) -> Option<tokio::sync::oneshot::Receiver<Option<Bytes>>> {
        let meta = &miss.meta;
        let segment = meta.remote_log_segment_id().id();
        let chunk_bytes = u64::from(self.config.chunk_bytes);
        let what = match miss.what {
            Missing::OffsetIndex => {
                match self
                    .cache
                    .lru()
                    .lookup_or_subscribe(&(segment, Part::OffsetIndex))
                {
                    Lookup::Cached(bytes) => return Some(ready(bytes)),
                    Lookup::Fetching(rx) => return Some(rx),
                    Lookup::Absent => What::OffsetIndex(prefetched_index),
                }
            }
            Missing::Chunk(n) => match self
                .cache
                .lru()
                .lookup_or_subscribe(&(segment, Part::Chunk(n)))
            {
                Lookup::Cached(bytes) => return Some(ready(bytes)),
                Lookup::Fetching(rx) => return Some(rx),
                Lookup::Absent => What::Chunk(n),
            },
            Missing::Range { start, end } => What::Range { start, end },
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Job {
            meta: meta.clone(),
            what,
            chunk_bytes,
            cache: self.cache.lru_arc().clone(),
            rsm: std::sync::Arc::clone(self.rsm),
            requests: std::sync::Arc::clone(&self.readahead.requests),
            index_requests: std::sync::Arc::clone(&self.readahead.index_requests),
            done: Some(tx),
            readers: None,
        };
        self.cache
            .engine()
            .fetch_for_read(self.readahead.id(), job)
            .then_some(rx)
    }
}

/// A receiver that already holds `bytes`.
fn ready(bytes: Bytes) -> tokio::sync::oneshot::Receiver<Option<Bytes>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = tx.send(Some(bytes));
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_chunk_serves_the_next_attempt_once_and_the_held_entries_stay_bounded() {
        let cold = ColdRead::default();
        let segment = uuid::Uuid::from_u128(7);
        let chunk = 100u64;
        let bytes = Bytes::from((0..100u8).collect::<Vec<u8>>());
        cold.keep(segment, Missing::Chunk(2), bytes.clone());
        cold.keep(segment, Missing::Chunk(2), bytes.clone());
        assert_eq!(cold.held.lock().len(), 1, "kept once");
        assert_eq!(cold.entry(segment, Part::Chunk(2)), Some(bytes.clone()));
        // The rest of the chunk a resumed read asks for comes from it.
        assert_eq!(
            cold.range(segment, (210, 250), chunk).as_deref(),
            Some(&bytes[10..50])
        );
        // Not past the chunk, nor of another segment.
        assert_eq!(cold.range(segment, (290, 310), chunk), None);
        assert_eq!(cold.entry(uuid::Uuid::from_u128(8), Part::Chunk(2)), None);
        for n in 3..10 {
            cold.keep(segment, Missing::Chunk(n), bytes.clone());
        }
        let held = cold.held.lock();
        assert_eq!(held.len(), HELD);
        // The oldest went first.
        assert!(held.iter().all(|h| h.what != Missing::Chunk(2)));
    }
}
