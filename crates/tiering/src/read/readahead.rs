//! Read-ahead for sequential remote scans: the readers' recent positions (which survive across
//! `read` calls), and a small bounded set of threads fetching the next chunks into the cache
//! while the reader decodes.
//!
//! A read that continues where an earlier read of the same segment stopped (or that crosses a
//! chunk boundary) is sequential: the next [`DEPTH`] chunks are queued. Each is fetched at most
//! once (the cache's single-flight fetch: a reader reaching a chunk still being fetched waits
//! for it) and checked like a reader's fetch (the exact range asked for). Nothing is queued
//! when the cache could not hold the chunks until the reader gets there.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use bytes::Bytes;
use krabka_remote_storage::{IndexType, RemoteLogSegmentMetadata, RemoteStorageManager};
use parking_lot::Mutex;
use uuid::Uuid;

use super::chunkmap::backend_view;
use crate::cache::{Part, RemoteReadCache};

/// Chunks fetched ahead of a sequential reader.
pub(crate) const DEPTH: u64 = 8;
/// Threads fetching ahead (per log, started at the first sequential read).
const WORKERS: usize = 8;
/// Readers' positions remembered.
const STREAMS: usize = 32;

/// Checks a fetched offset index against its segment's metadata: the bytes to cache, or
/// `None` (the reader then fetches it itself and reports what is wrong).
pub(crate) type IndexCheck = fn(&RemoteLogSegmentMetadata, Vec<u8>) -> Option<Bytes>;

/// What to fetch ahead.
#[derive(Clone, Copy)]
enum What {
    Chunk(u64),
    OffsetIndex(IndexCheck),
}

/// One fetch ahead.
struct Job {
    meta: RemoteLogSegmentMetadata,
    what: What,
    chunk_bytes: u64,
    cache: RemoteReadCache,
}

/// A reader's position: the segment attempt, the seq its next read starts at, the last
/// chunk queued for it, and what was queued of the next segment (its metadata and last
/// chunk queued).
#[derive(Clone)]
struct Stream {
    segment: Uuid,
    next_seq: u64,
    queued: u64,
    ahead: Option<(RemoteLogSegmentMetadata, u64)>,
}

impl Stream {
    /// The stream moved on to `segment`: what was queued of it becomes its `queued`.
    fn enter(&mut self, segment: Uuid) {
        if self.segment == segment {
            return;
        }
        self.queued = match self.ahead.take() {
            Some((next, count)) if next.remote_log_segment_id().id() == segment => {
                count.saturating_sub(1)
            }
            _ => 0,
        };
        self.segment = segment;
    }
}

/// The read-ahead state of one tiered log.
#[derive(Default)]
pub(crate) struct ReadAhead {
    streams: Mutex<VecDeque<Stream>>,
    queue: Mutex<Option<SyncSender<Job>>>,
    /// Ranged fetches the read-ahead threads made.
    pub(crate) requests: Arc<AtomicU64>,
    /// Index fetches the read-ahead threads made.
    pub(crate) index_requests: Arc<AtomicU64>,
}

impl ReadAhead {
    /// Whether a read from `seq` continues an earlier read (of this segment, or of the one
    /// before it: seqs are unique within a log).
    pub(crate) fn continues(&self, seq: u64) -> bool {
        self.streams.lock().iter().any(|s| s.next_seq == seq)
    }

    /// Records that a read of `segment` from `from_seq` ended before `next_seq`.
    pub(crate) fn record(&self, segment: Uuid, from_seq: u64, next_seq: u64) {
        let mut streams = self.streams.lock();
        let found = streams.iter().position(|s| s.next_seq == from_seq);
        let mut stream = found.and_then(|i| streams.remove(i)).unwrap_or(Stream {
            segment,
            next_seq,
            queued: 0,
            ahead: None,
        });
        stream.enter(segment);
        stream.next_seq = next_seq;
        if streams.len() >= STREAMS {
            streams.pop_front();
        }
        streams.push_back(stream);
    }

    /// Queues the [`DEPTH`] chunks after chunk `after` of `meta` for the reader reading
    /// `from_seq` (those not queued for it yet). When the window reaches past the segment's
    /// end, `next` gives the next remote segment, whose offset index (checked by `check`)
    /// and first chunks are queued too.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn schedule(
        &self,
        rsm: &Arc<dyn RemoteStorageManager>,
        cache: &RemoteReadCache,
        meta: &RemoteLogSegmentMetadata,
        from_seq: u64,
        after: u64,
        chunk_bytes: u64,
        next: impl FnOnce() -> Option<RemoteLogSegmentMetadata>,
        check: IndexCheck,
    ) {
        let last_chunk = meta.segment_size_in_bytes().saturating_sub(1) / chunk_bytes;
        // The chunks ahead must stay cached until the reader gets there.
        let room = cache.capacity_bytes() / chunk_bytes / 2;
        let depth = DEPTH.min(room);
        if depth == 0 {
            return;
        }
        let segment = meta.remote_log_segment_id().id();
        let (queued, ahead) = {
            let mut streams = self.streams.lock();
            match streams.iter_mut().find(|s| s.next_seq == from_seq) {
                Some(s) => {
                    s.enter(segment);
                    (s.queued, s.ahead.clone())
                }
                None => (0, None),
            }
        };
        let Some(tx) = self.sender(rsm) else { return };
        let job = |meta: &RemoteLogSegmentMetadata, what| Job {
            meta: meta.clone(),
            what,
            chunk_bytes,
            cache: cache.clone(),
        };
        let end = (after + depth).min(last_chunk);
        let upto = send_chunks(&tx, cache, meta, queued.max(after) + 1..end + 1, &job);
        // The part of the window past this segment's end goes to the next segment.
        let spill = (after + depth).saturating_sub(last_chunk);
        let mut next_sent = None;
        if spill > 0 && upto > end {
            let (next, count) = match ahead {
                Some((m, count)) => (Some(m), Some(count)),
                None => (next(), None),
            };
            if let Some(next) = next {
                let key = (next.remote_log_segment_id().id(), Part::OffsetIndex);
                if count.is_none() && !cache.lru().contains(&key) {
                    // Best effort: when the queue is full the reader fetches it itself.
                    let _ = tx.try_send(job(&next, What::OffsetIndex(check)));
                }
                let chunks = next.segment_size_in_bytes().div_ceil(chunk_bytes);
                let from = count.unwrap_or(0);
                let got = send_chunks(&tx, cache, &next, from..spill.min(chunks), &job);
                next_sent = Some((next, got.max(from)));
            }
        }
        let mut streams = self.streams.lock();
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

    /// The queue, starting the threads on first use.
    fn sender(&self, rsm: &Arc<dyn RemoteStorageManager>) -> Option<SyncSender<Job>> {
        let mut queue = self.queue.lock();
        if let Some(tx) = queue.as_ref() {
            return Some(tx.clone());
        }
        let (tx, rx) = sync_channel::<Job>(DEPTH as usize * 2);
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for i in 0..WORKERS {
            let (rx, rsm) = (Arc::clone(&rx), Arc::clone(rsm));
            let (requests, index_requests) = (self.requests.clone(), self.index_requests.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("krabka-read-ahead-{i}"))
                .spawn(move || work(&rx, rsm.as_ref(), &requests, &index_requests));
            if let Err(e) = spawned {
                tracing::debug!(error = %e, "could not start a read-ahead thread");
                if i == 0 {
                    return None;
                }
                break;
            }
        }
        *queue = Some(tx.clone());
        Some(tx)
    }
}

/// Queues the chunks `range` of `meta` in order (skipping those cached or being fetched)
/// until the queue is full; returns the end of the prefix of `range` queued.
fn send_chunks(
    tx: &SyncSender<Job>,
    cache: &RemoteReadCache,
    meta: &RemoteLogSegmentMetadata,
    range: std::ops::Range<u64>,
    job: &impl Fn(&RemoteLogSegmentMetadata, What) -> Job,
) -> u64 {
    let segment = meta.remote_log_segment_id().id();
    let mut upto = range.start;
    for chunk in range {
        if !cache.lru().contains(&(segment, Part::Chunk(chunk))) {
            match tx.try_send(job(meta, What::Chunk(chunk))) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => break,
            }
        }
        upto = chunk + 1;
    }
    upto
}

/// A read-ahead thread: fetches queued chunks and indexes until the log (the queue's
/// sender) is dropped.
fn work(
    rx: &std::sync::Mutex<Receiver<Job>>,
    rsm: &dyn RemoteStorageManager,
    requests: &AtomicU64,
    index_requests: &AtomicU64,
) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        match job.what {
            What::Chunk(n) => fetch_chunk(&job, n, rsm, requests),
            What::OffsetIndex(check) => fetch_index(&job, check, rsm, index_requests),
        }
    }
}

/// Fetches chunk `n` of the job's segment into the cache (exactly the range asked for).
fn fetch_chunk(job: &Job, n: u64, rsm: &dyn RemoteStorageManager, requests: &AtomicU64) {
    let key = (job.meta.remote_log_segment_id().id(), Part::Chunk(n));
    let Some(guard) = job.cache.lru().begin_fetch(key) else {
        return;
    };
    let size = job.meta.segment_size_in_bytes();
    let start = n * job.chunk_bytes;
    let end = (start + job.chunk_bytes).min(size);
    let (Ok(first), Ok(last)) = (u32::try_from(start), u32::try_from(end.saturating_sub(1))) else {
        return;
    };
    requests.fetch_add(1, Ordering::Relaxed);
    match rsm.fetch_log_segment(&backend_view(&job.meta), first, Some(last)) {
        // Anything else is left to the reader's own fetch, which reports it.
        Ok(bytes) if bytes.len() as u64 == end - start => guard.complete(Bytes::from(bytes)),
        Ok(_) | Err(_) => drop(guard),
    }
}

/// Fetches the job's segment's offset index into the cache when it passes `check`.
fn fetch_index(
    job: &Job,
    check: IndexCheck,
    rsm: &dyn RemoteStorageManager,
    index_requests: &AtomicU64,
) {
    let key = (job.meta.remote_log_segment_id().id(), Part::OffsetIndex);
    let Some(guard) = job.cache.lru().begin_fetch(key) else {
        return;
    };
    index_requests.fetch_add(1, Ordering::Relaxed);
    let fetched = rsm.fetch_index(&backend_view(&job.meta), IndexType::Offset);
    // Anything else is left to the reader's own fetch, which reports it.
    match fetched.ok().and_then(|bytes| check(&job.meta, bytes)) {
        Some(valid) => guard.complete(valid),
        None => drop(guard),
    }
}
