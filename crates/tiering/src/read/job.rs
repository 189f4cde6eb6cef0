//! One fetch ahead of a sequential reader ([`Job`]), as the read engine
//! ([`engine`](super::engine)) queues it, and how an engine thread runs a batch of them
//! ([`run`]): an index, or adjacent chunks of one segment as one ranged fetch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use krabka_remote_storage::{IndexType, RemoteLogSegmentMetadata, RemoteStorageManager};
use uuid::Uuid;

use super::chunkmap::backend_view;
use super::streams::Streams;
use crate::cache::byte_lru::{ByteLru, FetchGuard, Part};

/// Chunks fetched ahead of a sequential reader.
pub(crate) const DEPTH: u64 = 8;
/// Checks a fetched offset index against its segment's metadata: the bytes to cache, or
/// `None` (the reader then fetches it itself and reports what is wrong).
pub(crate) type IndexCheck = fn(&RemoteLogSegmentMetadata, Vec<u8>) -> Option<Bytes>;

/// What to fetch ahead.
#[derive(Clone, Copy)]
pub(crate) enum What {
    Chunk(u64),
    OffsetIndex(IndexCheck),
    /// Bytes `start..end` of the `.log` within one chunk, not cached: the rest of a chunk a
    /// read resumes in after the chunk was evicted.
    Range {
        start: u64,
        end: u64,
    },
}

/// Where a read's own fetch run by the engine ([`Job::done`]) delivers its entry: `None` when
/// it fetched nothing (failed, or the entry was being fetched by another).
pub(crate) type Done = tokio::sync::oneshot::Sender<Option<Bytes>>;

/// One fetch ahead, queued on the read engine.
pub(crate) struct Job {
    pub(crate) meta: RemoteLogSegmentMetadata,
    pub(crate) what: What,
    pub(crate) chunk_bytes: u64,
    pub(crate) cache: Arc<ByteLru>,
    pub(crate) rsm: Arc<dyn RemoteStorageManager>,
    /// The log's counters of ranged and index fetches made ahead.
    pub(crate) requests: Arc<AtomicU64>,
    pub(crate) index_requests: Arc<AtomicU64>,
    /// For a read's own fetch (not read-ahead): the read awaiting the entry. Such a job is
    /// never coalesced nor dropped as stale.
    pub(crate) done: Option<Done>,
    /// For read-ahead: the positions of the log's readers, so that a chunk they have all
    /// gone past by the time the engine gets to it is dropped, not fetched.
    pub(crate) readers: Option<Arc<Streams>>,
}

impl Job {
    pub(crate) fn key(&self) -> (Uuid, Part) {
        let part = match self.what {
            What::Chunk(n) => Part::Chunk(n),
            What::Range { start, .. } => Part::Chunk(start / self.chunk_bytes.max(1)),
            What::OffsetIndex(_) => Part::OffsetIndex,
        };
        (self.meta.remote_log_segment_id().id(), part)
    }

    /// The bytes of the data range it fetches (0 for an index: its size is not known yet).
    pub(crate) fn bytes(&self) -> u64 {
        match self.what {
            What::Chunk(n) => self.chunk_range(n).map_or(0, |(s, e)| e - s),
            What::Range { start, end } => end.saturating_sub(start),
            What::OffsetIndex(_) => 0,
        }
    }

    /// Whether its entry is cached or being fetched already, or (read-ahead of a chunk) every
    /// reader of the log has gone past it.
    pub(crate) fn is_stale(&self) -> bool {
        if self.cache.contains(&self.key()) {
            return true;
        }
        match (&self.readers, self.what) {
            (Some(readers), What::Chunk(n)) => self
                .chunk_range(n)
                .is_some_and(|(_, end)| readers.passed(&self.meta, end)),
            _ => false,
        }
    }

    /// Whether `next` is the chunk right after this one, of the same segment attempt.
    pub(crate) fn followed_by(&self, next: &Job) -> bool {
        match (self.what, next.what) {
            (What::Chunk(a), What::Chunk(b)) => {
                b == a + 1
                    && self.chunk_bytes == next.chunk_bytes
                    && self.meta.remote_log_segment_id() == next.meta.remote_log_segment_id()
            }
            _ => false,
        }
    }

    /// Bytes `start..end` of chunk `n` (cut at the segment's end).
    fn chunk_range(&self, n: u64) -> Option<(u64, u64)> {
        let size = self.meta.segment_size_in_bytes();
        let start = n.checked_mul(self.chunk_bytes)?;
        (start < size).then(|| (start, (start + self.chunk_bytes).min(size)))
    }
}
/// Runs a batch the read engine handed out (on an engine thread): an index, or adjacent chunks
/// of one segment, each run of chunks not cached or being fetched meanwhile fetched as one
/// range (exactly the range asked for). `take_get` waits for the GET budget before each
/// request. A failure leaves the entries to the readers' own fetches, which report it.
pub(crate) fn run(mut batch: Vec<Job>, take_get: impl Fn()) {
    if batch.len() == 1
        && let Some(mut job) = batch.pop()
    {
        if let Some(done) = job.done.take() {
            let _ = done.send(fetch_for_read(&job, &take_get));
            return;
        }
        batch.push(job);
    }
    let Some(first) = batch.first() else { return };
    if let What::OffsetIndex(check) = first.what {
        fetch_index(first, check, &take_get);
        return;
    }
    // The chunks whose fetch this thread won, in order; runs of adjacent ones go together.
    let mut run: Vec<(&Job, u64, FetchGuard<'_>)> = Vec::new();
    for job in &batch {
        let What::Chunk(n) = job.what else { continue };
        let Some(guard) = job.cache.begin_fetch(job.key()) else {
            fetch_chunks(std::mem::take(&mut run), &take_get);
            continue;
        };
        run.push((job, n, guard));
    }
    fetch_chunks(run, &take_get);
}

/// A read's own fetch ([`Job::done`]): its entry, fetched and cached (a range: not cached);
/// taken from the cache when it got there meanwhile; `None` when the fetch failed or another
/// is fetching it (the read then awaits that one, or reads again itself and reports the
/// failure).
fn fetch_for_read(job: &Job, take_get: &impl Fn()) -> Option<Bytes> {
    match job.what {
        What::OffsetIndex(check) => {
            let Some(guard) = job.cache.begin_fetch(job.key()) else {
                return job.cache.peek(&job.key());
            };
            take_get();
            job.index_requests.fetch_add(1, Ordering::Relaxed);
            let fetched = job
                .rsm
                .fetch_index(&backend_view(&job.meta), IndexType::Offset);
            let valid = fetched.ok().and_then(|bytes| check(&job.meta, bytes))?;
            guard.complete(valid.clone());
            Some(valid)
        }
        What::Chunk(n) => {
            let Some(guard) = job.cache.begin_fetch(job.key()) else {
                return job.cache.peek(&job.key());
            };
            let (start, end) = job.chunk_range(n)?;
            let bytes = fetch_exact(job, start, end, take_get)?;
            guard.complete(bytes.clone());
            Some(bytes)
        }
        What::Range { start, end } => fetch_exact(job, start, end, take_get),
    }
}

/// Bytes `start..end` of the job's `.log`, exactly that many, else `None`.
fn fetch_exact(job: &Job, start: u64, end: u64, take_get: &impl Fn()) -> Option<Bytes> {
    let (Ok(from), Ok(to)) = (u32::try_from(start), u32::try_from(end.saturating_sub(1))) else {
        return None;
    };
    take_get();
    job.requests.fetch_add(1, Ordering::Relaxed);
    let bytes = job
        .rsm
        .fetch_log_segment(&backend_view(&job.meta), from, Some(to))
        .ok()?;
    (bytes.len() as u64 == end - start).then(|| Bytes::from(bytes))
}

/// Fetches adjacent chunks `run` (of one segment) as one range and caches each.
fn fetch_chunks(run: Vec<(&Job, u64, FetchGuard<'_>)>, take_get: &impl Fn()) {
    let (Some((job, first, _)), Some((_, last, _))) = (run.first(), run.last()) else {
        return;
    };
    let (Some((start, _)), Some((_, end))) = (job.chunk_range(*first), job.chunk_range(*last))
    else {
        return;
    };
    let (Ok(from), Ok(to)) = (u32::try_from(start), u32::try_from(end.saturating_sub(1))) else {
        return;
    };
    take_get();
    job.requests.fetch_add(1, Ordering::Relaxed);
    let Ok(bytes) = job
        .rsm
        .fetch_log_segment(&backend_view(&job.meta), from, Some(to))
    else {
        // Anything else is left to the reader's own fetch, which reports it.
        return;
    };
    if bytes.len() as u64 != end - start {
        return;
    }
    let mut run = run;
    if run.len() == 1
        && let Some((_, _, guard)) = run.pop()
    {
        guard.complete(Bytes::from(bytes));
        return;
    }
    for (job, n, guard) in run {
        let Some((s, e)) = job.chunk_range(n) else {
            continue;
        };
        let (Ok(s), Ok(e)) = (usize::try_from(s - start), usize::try_from(e - start)) else {
            continue;
        };
        // Each chunk its own buffer, so the cache's byte count is what it holds.
        if let Some(part) = bytes.get(s..e) {
            guard.complete(Bytes::copy_from_slice(part));
        }
    }
}

/// Fetches the job's segment's offset index into the cache when it passes `check`.
fn fetch_index(job: &Job, check: IndexCheck, take_get: &impl Fn()) {
    let Some(guard) = job.cache.begin_fetch(job.key()) else {
        return;
    };
    take_get();
    job.index_requests.fetch_add(1, Ordering::Relaxed);
    let fetched = job
        .rsm
        .fetch_index(&backend_view(&job.meta), IndexType::Offset);
    // Anything else is left to the reader's own fetch, which reports it.
    match fetched.ok().and_then(|bytes| check(&job.meta, bytes)) {
        Some(valid) => guard.complete(valid),
        None => drop(guard),
    }
}
