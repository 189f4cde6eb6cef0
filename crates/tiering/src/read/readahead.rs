//! Read-ahead for sequential remote scans: the readers' recent positions (which survive across
//! `read` calls), and the fetches of the next chunks queued on the read engine
//! ([`engine`](super::engine)) of the log's cache while the reader decodes.
//!
//! A read that continues where an earlier read of the same segment stopped (or that crosses a
//! chunk boundary) is sequential: the next chunks are queued, as many as its fair share of the
//! cache allows ([`fair_depth`]: the cache's chunks divided between the readers reading
//! sequentially through it (beside the indexes it keeps), less the chunk the reader is in; at
//! least 1, at most [`DEPTH`]), so
//! that the chunks read ahead for many readers at once fit in the cache together and none is
//! evicted before its reader gets there. Each is fetched at most
//! once (the cache's single-flight fetch: a reader reaching a chunk still being fetched waits
//! for it) and checked like a reader's fetch (the exact range asked for). Nothing is queued
//! when the cache could not hold the chunks until the reader gets there. Adjacent chunks the
//! engine hands out together leave as one ranged fetch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageManager};
use uuid::Uuid;

use super::job::{DEPTH, Job, What};
use super::streams::{Stream, Streams};
use crate::cache::RemoteReadCache;
use crate::cache::byte_lru::Part;

/// Readers' positions remembered.
const STREAMS: usize = 32;

/// Chunks to read ahead for one of `readers` sequential readers sharing a cache of
/// `cache_chunks` chunks: its share of the cache less the chunk it is reading (which its next
/// read starts in), at least 1, at most [`DEPTH`] and half the cache; 0 (no read-ahead) for a
/// cache of less than two chunks.
pub(crate) fn fair_depth(cache_chunks: u64, readers: u64) -> u64 {
    let room = cache_chunks / 2;
    if room == 0 {
        return 0;
    }
    let share = (cache_chunks / readers.max(1)).saturating_sub(1);
    share.clamp(1, DEPTH).min(room)
}

/// The read-ahead state of one tiered log (or read replica): one reader of the read engine.
pub(crate) struct ReadAhead {
    /// Its queue on the read engine (unique in the process).
    id: u64,
    /// Shared with the jobs queued for it: a job whose chunk every stream has gone past is
    /// dropped unfetched ([`Streams::passed`]).
    streams: Arc<Streams>,
    /// Ranged fetches the read-ahead made.
    pub(crate) requests: Arc<AtomicU64>,
    /// Index fetches the read-ahead made.
    pub(crate) index_requests: Arc<AtomicU64>,
}

impl Default for ReadAhead {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            streams: Arc::default(),
            requests: Arc::default(),
            index_requests: Arc::default(),
        }
    }
}

impl ReadAhead {
    /// Its reader id on the read engine: its own fetches and its read-ahead share one turn.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether a read from `seq` continues an earlier read (of this segment, or of the one
    /// before it: seqs are unique within a log).
    pub(crate) fn continues(&self, seq: u64) -> bool {
        self.streams.0.lock().iter().any(|s| s.next_seq == seq)
    }

    /// Where a read of `segment` from `seq` that continues an earlier read can start
    /// decoding: the batch boundary that read stopped at (see [`record`](Self::record)).
    pub(crate) fn resume_point(&self, segment: Uuid, seq: u64) -> Option<(u64, u64)> {
        self.streams
            .0
            .lock()
            .iter()
            .find(|s| s.next_seq == seq && s.segment == segment)
            .and_then(|s| s.resume)
            .filter(|&(at, _)| at <= seq)
    }

    /// Records that a read of `segment` from `from_seq` ended before `next_seq`, having
    /// decoded up to the batch `resume` (`(seq, byte)`, of `segment`) when it knows it.
    pub(crate) fn record(
        &self,
        segment: Uuid,
        from_seq: u64,
        next_seq: u64,
        resume: Option<(u64, u64)>,
    ) {
        let mut streams = self.streams.0.lock();
        let found = streams.iter().position(|s| s.next_seq == from_seq);
        let mut stream = found.and_then(|i| streams.remove(i)).unwrap_or(Stream {
            segment,
            next_seq,
            queued: 0,
            ahead: None,
            resume: None,
        });
        stream.enter(segment);
        stream.next_seq = next_seq;
        stream.resume = resume.filter(|&(at, _)| at <= next_seq);
        if streams.len() >= STREAMS {
            streams.pop_front();
        }
        streams.push_back(stream);
    }

    /// Queues the chunks after chunk `after` of `meta` for the reader reading `from_seq`
    /// (those not queued for it yet), as many as [`fair_depth`] gives. When the cache cannot
    /// hold each sequential reader's chunk and one more, only up to `extent`, the last chunk
    /// (counted on from this segment's chunks) the read in progress is expected to reach, when
    /// known: a chunk for the reader's next read would be evicted by the others' before it
    /// comes back, and fetched twice. When the window reaches past the segment's
    /// end, `next` gives the next remote segment, whose first chunks are queued too (not its
    /// offset index: the reader enters it at its first batch).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn schedule(
        &self,
        rsm: &Arc<dyn RemoteStorageManager>,
        cache: &RemoteReadCache,
        meta: &RemoteLogSegmentMetadata,
        from_seq: u64,
        (after, extent): (u64, Option<u64>),
        chunk_bytes: u64,
        next: impl FnOnce() -> Option<RemoteLogSegmentMetadata>,
    ) {
        let last_chunk = meta.segment_size_in_bytes().saturating_sub(1) / chunk_bytes;
        // The chunks ahead must stay cached until the reader gets there, beside those of every
        // other reader reading ahead through the same cache.
        let cache_chunks = cache.capacity_bytes() / chunk_bytes;
        if fair_depth(cache_chunks, 1) == 0 {
            return;
        }
        let readers = cache.engine().sequential_readers(self.id) as u64;
        // The chunks the cache holds beside the indexes it keeps: a share counted on more
        // would overflow it, and a cyclic overflow evicts each reader's chunks just before it
        // comes back.
        let chunk_room = cache
            .capacity_bytes()
            .saturating_sub(cache.lru().index_bytes())
            / chunk_bytes;
        let mut depth = fair_depth(chunk_room, readers).max(1);
        if chunk_room < 2 * readers
            && let Some(extent) = extent
        {
            depth = depth.min(extent.saturating_sub(after));
        }
        if depth == 0 {
            return;
        }
        let segment = meta.remote_log_segment_id().id();
        let (queued, ahead) = {
            let mut streams = self.streams.0.lock();
            match streams.iter_mut().find(|s| s.next_seq == from_seq) {
                Some(s) => {
                    s.enter(segment);
                    (s.queued, s.ahead.clone())
                }
                None => (0, None),
            }
        };
        let engine = cache.engine();
        let job = |meta: &RemoteLogSegmentMetadata, what| Job {
            meta: meta.clone(),
            what,
            chunk_bytes,
            cache: cache.lru_arc().clone(),
            rsm: Arc::clone(rsm),
            requests: Arc::clone(&self.requests),
            index_requests: Arc::clone(&self.index_requests),
            done: None,
            readers: Some(Arc::clone(&self.streams)),
        };
        let send = |j: Job| engine.submit(self.id, j);
        let end = (after + depth).min(last_chunk);
        let upto = send_chunks(&send, cache, meta, queued.max(after) + 1..end + 1, &job);
        // The part of the window past this segment's end goes to the next segment.
        let spill = (after + depth).saturating_sub(last_chunk);
        let mut next_sent = None;
        if spill > 0 && upto > end {
            let (next, count) = match ahead {
                Some((m, count)) => (Some(m), Some(count)),
                None => (next(), None),
            };
            if let Some(next) = next {
                // No offset index: the reader enters the next segment at its first seq,
                // whose batch is the segment's first (byte 0), and goes on from where each
                // read stopped.
                let chunks = next.segment_size_in_bytes().div_ceil(chunk_bytes);
                let from = count.unwrap_or(0);
                let got = send_chunks(&send, cache, &next, from..spill.min(chunks), &job);
                next_sent = Some((next, got.max(from)));
            }
        }
        let mut streams = self.streams.0.lock();
        if let Some(s) = streams
            .iter_mut()
            .find(|s| s.next_seq == from_seq && s.segment == segment)
        {
            s.queued = s.queued.max(upto - 1);
            if let Some(n) = next_sent {
                s.ahead = Some(n);
            }
        }
    }
}

/// Queues the chunks `range` of `meta` in order (skipping those cached or being fetched)
/// until the reader's queue is full; returns the end of the prefix of `range` queued.
fn send_chunks(
    send: &impl Fn(Job) -> bool,
    cache: &RemoteReadCache,
    meta: &RemoteLogSegmentMetadata,
    range: std::ops::Range<u64>,
    job: &impl Fn(&RemoteLogSegmentMetadata, What) -> Job,
) -> u64 {
    let segment = meta.remote_log_segment_id().id();
    let mut upto = range.start;
    for chunk in range {
        if !cache.lru().contains(&(segment, Part::Chunk(chunk)))
            && !send(job(meta, What::Chunk(chunk)))
        {
            break;
        }
        upto = chunk + 1;
    }
    upto
}

#[cfg(test)]
mod tests {
    use super::{DEPTH, ReadAhead, fair_depth};

    /// A segment of seqs `first..=last` in 10,000 bytes.
    fn segment(first: u64, last: u64) -> krabka_remote_storage::RemoteLogSegmentMetadata {
        use krabka_remote_storage::{
            RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition, Uuid,
        };
        let id = RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 0));
        RemoteLogSegmentMetadata::builder(id, first, last)
            .segment_size_in_bytes(10_000)
            .build()
            .unwrap()
    }

    #[test]
    fn a_chunk_is_passed_only_when_every_reader_has_gone_past_it() {
        let (a, b) = (segment(1, 100), segment(101, 200));
        let (ida, idb) = (
            a.remote_log_segment_id().id(),
            b.remote_log_segment_id().id(),
        );
        let ra = ReadAhead::default();
        // No reader: nothing is passed.
        assert!(!ra.streams.passed(&a, 1_000));
        // One reader stopped at byte 4,000 of `a`: chunks ending by there are passed.
        ra.record(ida, 1, 40, Some((38, 4_000)));
        assert!(ra.streams.passed(&a, 4_000));
        assert!(!ra.streams.passed(&a, 4_001));
        assert!(!ra.streams.passed(&b, 1_000));
        // Without a position in the segment, nothing of it is passed.
        ra.record(ida, 40, 50, None);
        assert!(!ra.streams.passed(&a, 1_000));
        // A second reader behind the first keeps what it has not read yet.
        ra.record(ida, 50, 60, Some((58, 6_000)));
        ra.record(ida, 1, 20, Some((19, 2_000)));
        assert!(ra.streams.passed(&a, 2_000));
        assert!(!ra.streams.passed(&a, 3_000));
        // Both readers in the next segment: all of `a` is passed, not `b`.
        ra.record(idb, 60, 120, Some((118, 1_500)));
        ra.record(idb, 20, 110, Some((109, 500)));
        assert!(ra.streams.passed(&a, 10_000));
        assert!(ra.streams.passed(&b, 500));
        assert!(!ra.streams.passed(&b, 1_000));
    }

    #[test]
    fn a_resume_point_serves_only_the_read_that_continues_in_its_segment() {
        let (a, b) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        let ra = ReadAhead::default();
        ra.record(a, 1, 38, Some((30, 1_000)));
        assert_eq!(ra.resume_point(a, 38), Some((30, 1_000)));
        // Another seq, or another segment (attempt): no point.
        assert_eq!(ra.resume_point(a, 39), None);
        assert_eq!(ra.resume_point(b, 38), None);
        // A point past the read's end is not kept.
        ra.record(a, 38, 50, Some((51, 2_000)));
        assert_eq!(ra.resume_point(a, 50), None);
        // Moving on to the next segment without a point forgets the old one.
        ra.record(a, 50, 60, Some((55, 3_000)));
        ra.record(b, 60, 70, None);
        assert_eq!(ra.resume_point(b, 70), None);
        assert_eq!(ra.resume_point(a, 60), None);
    }

    #[test]
    fn read_ahead_depth_is_each_readers_share_of_the_cache_within_one_and_depth() {
        // One reader of the default 64-chunk cache: the full depth.
        assert_eq!(fair_depth(64, 1), DEPTH);
        // 20 readers: 3 chunks each, one of them the chunk being read.
        assert_eq!(fair_depth(64, 20), 2);
        // 100 readers in 64 chunks: still one chunk ahead each.
        assert_eq!(fair_depth(64, 100), 1);
        // 1,024 chunks for 100 readers: 10 each, capped at the depth.
        assert_eq!(fair_depth(1024, 100), DEPTH);
        // The readers' chunks ahead fit in the cache whenever a share holds two.
        for readers in 1..=32 {
            assert!(
                readers * (fair_depth(64, readers) + 1) <= 64,
                "{readers} readers"
            );
        }
        // A cache of less than two chunks reads nothing ahead; of two, one chunk.
        assert_eq!(fair_depth(1, 1), 0);
        assert_eq!(fair_depth(0, 5), 0);
        assert_eq!(fair_depth(2, 1), 1);
        // Zero readers is taken as one.
        assert_eq!(fair_depth(64, 0), DEPTH);
    }
}
