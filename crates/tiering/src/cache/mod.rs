//! [`RemoteReadCache`]: a byte-bounded LRU cache of remote indexes (offset and time) and data
//! chunks, shareable between tiered logs.
//!
//! Entries are reference-counted [`Bytes`]; the bound counts their lengths. An entry larger than
//! the whole budget is not kept. The use order is the `lru` crate's (unbounded by count: the
//! byte budget evicts from its least recently used end), so lookup, insert and eviction are
//! `O(1)`. Keys hold the remote segment attempt's id (a UUID), so the logs sharing one cache
//! never collide.
//!
//! Every remote fetch of an entry (chunks, offset and time indexes) is single-flight: readers
//! fetch through [`ByteLru::get_or_fetch`] and the read-ahead through [`ByteLru::begin_fetch`],
//! both registering the fetch before its request, so a reader missing an entry another thread
//! is fetching waits for that fetch (bounded by its deadline) and takes its result instead of
//! issuing its own request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lru::LruCache;
use parking_lot::Mutex;
use uuid::Uuid;

pub(crate) use flight::FetchError;

use crate::read::engine::{ReadEngine, ReadEngineStats, ReadLimits};
use flight::{Flight, MAX_WAIT, Waited};

mod flight;
#[cfg(test)]
mod tests;

/// What a cached entry holds for one remote segment attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    /// The segment's offset index, whole.
    OffsetIndex,
    /// The segment's time index, whole.
    TimeIndex,
    /// The aligned data chunk with this number (`position / chunk_bytes`).
    Chunk(u64),
    /// Frame hints after the chunk-map entry at this byte position.
    Hints(u64),
}

impl Part {
    /// The index a part holds (`None`: data of the `.log`, or hints learnt from it).
    pub(crate) fn index_type(self) -> Option<krabka_remote_storage::IndexType> {
        match self {
            Part::OffsetIndex => Some(krabka_remote_storage::IndexType::Offset),
            Part::TimeIndex => Some(krabka_remote_storage::IndexType::Timestamp),
            Part::Chunk(_) | Part::Hints(_) => None,
        }
    }
}

/// The key of a cached entry: the remote segment attempt and the part.
pub(crate) type Key = (Uuid, Part);

/// A snapshot of a [`RemoteReadCache`]'s counters and size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found their entry.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Misses that found the same entry being fetched by another thread (a reader or the
    /// read-ahead) and waited for that fetch instead of sending a request of their own (also
    /// counted when that fetch failed or the wait ran out).
    pub waits: u64,
    /// Entries dropped to stay within the byte budget (not counting entries of deleted
    /// segments, which are removed, not evicted).
    pub evictions: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// Entries held now.
    pub entries: u64,
}

/// The remote read cache of one or more [`TieredLog`](crate::TieredLog)s: a byte-bounded LRU
/// of remote offset and time indexes and aligned data chunks.
///
/// Cloning is cheap and yields a handle on the same cache, so many partitions can share one
/// memory budget: give it to each log with
/// [`TieredLog::with_cache`](crate::TieredLog::with_cache). Entries are keyed by the remote
/// segment attempt's id, unique across partitions. Thread safe.
#[derive(Clone)]
pub struct RemoteReadCache {
    inner: Arc<ByteLru>,
    /// The read engine every remote fetch of the logs sharing this cache goes through.
    engine: Arc<ReadEngine>,
}

impl std::fmt::Debug for RemoteReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteReadCache")
            .field("capacity_bytes", &self.inner.capacity)
            .field("stats", &self.stats())
            .field("read_limits", &self.engine.limits())
            .finish()
    }
}

impl RemoteReadCache {
    /// A cache holding at most `capacity_bytes` bytes of entries (0 disables caching: every
    /// remote read fetches).
    ///
    /// Its remote fetches go through a read engine of its own with the default
    /// [`ReadLimits`] (4 fetches in flight, so at most 4 read-ahead threads).
    pub fn new(capacity_bytes: u64) -> Self {
        Self::with_read_limits(capacity_bytes, ReadLimits::default())
    }

    /// A cache of `capacity_bytes` whose logs' remote fetches (their own and read-ahead) go
    /// through one read engine bounded by `limits`, whatever the number of logs sharing it:
    /// fetches and bytes in flight, engine threads, GETs per second (see docs/tiering.md,
    /// "Reads").
    pub fn with_read_limits(capacity_bytes: u64, limits: ReadLimits) -> Self {
        Self {
            inner: Arc::new(ByteLru::new(capacity_bytes)),
            engine: Arc::new(ReadEngine::new(limits)),
        }
    }

    /// The bounds of the read engine of this cache's logs.
    pub fn read_limits(&self) -> ReadLimits {
        self.engine.limits()
    }

    /// Counters of the read engine of this cache's logs (since the cache was created).
    pub fn read_engine_stats(&self) -> ReadEngineStats {
        self.engine.stats()
    }

    /// The read engine.
    pub(crate) fn engine(&self) -> &ReadEngine {
        &self.engine
    }

    /// The shared LRU, for fetches outliving the borrow of a log.
    pub(crate) fn lru_arc(&self) -> &Arc<ByteLru> {
        &self.inner
    }

    /// The byte budget.
    pub fn capacity_bytes(&self) -> u64 {
        self.inner.capacity
    }

    /// Counters (since the cache was created, over every log sharing it) and size now.
    pub fn stats(&self) -> CacheStats {
        let (bytes, entries) = self.inner.size();
        CacheStats {
            hits: self.inner.hits.load(Ordering::Relaxed),
            misses: self.inner.misses.load(Ordering::Relaxed),
            waits: self.inner.waits.load(Ordering::Relaxed),
            evictions: self.inner.evictions.load(Ordering::Relaxed),
            bytes,
            entries,
        }
    }

    /// Whether `self` and `other` are handles on the same cache.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The shared LRU.
    pub(crate) fn lru(&self) -> &ByteLru {
        &self.inner
    }
}

struct Inner {
    /// The entries, least recently used first out.
    entries: LruCache<Key, Bytes>,
    /// The sum of the entries' lengths.
    bytes: u64,
    /// Entries being fetched now.
    flights: HashMap<Key, Arc<Flight>>,
}

/// The cache behind a [`RemoteReadCache`]. Thread safe; counts hits, misses and evictions.
pub(crate) struct ByteLru {
    capacity: u64,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
    waits: AtomicU64,
    evictions: AtomicU64,
}

/// The right to fetch one entry, given by [`ByteLru::begin_fetch`]: waiters are released when
/// it is completed or dropped (a failed fetch: they then fetch themselves).
pub(crate) struct FetchGuard<'a> {
    lru: &'a ByteLru,
    key: Key,
    flight: Arc<Flight>,
    value: Option<Bytes>,
}

impl FetchGuard<'_> {
    /// Stores the fetched entry and hands it to the waiters.
    pub(crate) fn complete(mut self, value: Bytes) {
        // Cached before the flight ends: a reader arriving in between finds one or the other.
        self.lru.insert(self.key, value.clone());
        self.value = Some(value);
    }
}

impl Drop for FetchGuard<'_> {
    fn drop(&mut self) {
        self.lru.inner.lock().flights.remove(&self.key);
        self.flight.end(self.value.take());
    }
}

impl ByteLru {
    /// A cache holding at most `capacity` bytes (0 disables it).
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
                flights: HashMap::new(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The entry for `key`, marking it most recently used (reads fetch through
    /// [`get_or_fetch`](Self::get_or_fetch) instead).
    #[cfg(test)]
    pub(crate) fn get(&self, key: &Key) -> Option<Bytes> {
        let found = Self::touch(&mut self.inner.lock(), key);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn touch(inner: &mut Inner, key: &Key) -> Option<Bytes> {
        inner.entries.get(key).cloned()
    }

    /// The entry for `key`, marking it most recently used, without counting a lookup (for
    /// entries that only help a read along).
    pub(crate) fn peek(&self, key: &Key) -> Option<Bytes> {
        Self::touch(&mut self.inner.lock(), key)
    }

    /// The entry for `key`; on a miss, `fetch` runs and its result is cached.
    ///
    /// Single-flight across threads: a miss while another thread (a reader or the read-ahead)
    /// fetches the same key waits for that fetch, at most `wait` in all, and takes its entry
    /// (even one the cache cannot keep); when that fetch failed, this caller fetches itself
    /// and reports its own error. A wait that runs out is [`FetchError::WaitTimedOut`]: the
    /// other fetch is left running, and no second request is made for the same bytes.
    pub(crate) fn get_or_fetch<E>(
        &self,
        key: Key,
        wait: Duration,
        fetch: impl FnOnce() -> Result<Bytes, E>,
    ) -> Result<Bytes, FetchError<E>> {
        // Capped at a year so that any `wait` gives a representable instant.
        let now = Instant::now();
        let until = now.checked_add(wait.min(MAX_WAIT)).unwrap_or(now);
        let mut waited = false;
        loop {
            let mut inner = self.inner.lock();
            if let Some(hit) = Self::touch(&mut inner, &key) {
                drop(inner);
                let counter = if waited { &self.misses } else { &self.hits };
                counter.fetch_add(1, Ordering::Relaxed);
                return Ok(hit);
            }
            if let Some(flight) = inner.flights.get(&key).cloned() {
                drop(inner);
                if !waited {
                    self.waits.fetch_add(1, Ordering::Relaxed);
                }
                waited = true;
                let outcome = flight.wait(until);
                match outcome {
                    Waited::Fetched(value) => {
                        self.misses.fetch_add(1, Ordering::Relaxed);
                        return Ok(value);
                    }
                    Waited::Failed => continue,
                    Waited::TimedOut => {
                        self.misses.fetch_add(1, Ordering::Relaxed);
                        return Err(FetchError::WaitTimedOut(wait));
                    }
                }
            }
            let guard = self.register(&mut inner, key);
            drop(inner);
            self.misses.fetch_add(1, Ordering::Relaxed);
            let value = fetch().map_err(FetchError::Fetch)?;
            guard.complete(value.clone());
            return Ok(value);
        }
    }

    /// The right to fetch `key`, unless it is cached or being fetched already (for
    /// read-ahead: neither counts as a lookup nor changes the use order).
    pub(crate) fn begin_fetch(&self, key: Key) -> Option<FetchGuard<'_>> {
        let mut inner = self.inner.lock();
        if inner.entries.contains(&key) || inner.flights.contains_key(&key) {
            return None;
        }
        Some(self.register(&mut inner, key))
    }

    fn register(&self, inner: &mut Inner, key: Key) -> FetchGuard<'_> {
        let flight = Arc::new(Flight::default());
        inner.flights.insert(key, Arc::clone(&flight));
        FetchGuard {
            lru: self,
            key,
            flight,
            value: None,
        }
    }

    /// Whether `key` is cached or being fetched (no lookup counted, use order unchanged).
    pub(crate) fn contains(&self, key: &Key) -> bool {
        let inner = self.inner.lock();
        inner.entries.contains(key) || inner.flights.contains_key(key)
    }

    /// Stores `value` under `key`, evicting least recently used entries to stay in budget.
    pub(crate) fn insert(&self, key: Key, value: Bytes) {
        let len = value.len() as u64;
        if len > self.capacity {
            return;
        }
        let mut inner = self.inner.lock();
        if let Some(old) = inner.entries.pop(&key) {
            inner.bytes -= old.len() as u64;
        }
        let mut evicted = 0;
        while inner.bytes + len > self.capacity {
            let Some((_, old)) = inner.entries.pop_lru() else {
                break;
            };
            inner.bytes -= old.len() as u64;
            evicted += 1;
        }
        inner.bytes += len;
        inner.entries.put(key, value);
        drop(inner);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// Drops every entry of one remote segment attempt (after it is deleted).
    pub(crate) fn remove_segment(&self, id: Uuid) {
        let mut inner = self.inner.lock();
        let Inner { entries, bytes, .. } = &mut *inner;
        entries.retain(|key, value| {
            let keep = key.0 != id;
            if !keep {
                *bytes -= value.len() as u64;
            }
            keep
        });
    }

    /// Lookups that found an entry.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Lookups that found nothing.
    pub(crate) fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Bytes held now.
    pub(crate) fn bytes(&self) -> u64 {
        self.inner.lock().bytes
    }

    /// Bytes and entries held now.
    fn size(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.bytes, inner.entries.len() as u64)
    }
}
