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

use std::sync::Arc;
use std::sync::atomic::Ordering;

pub(crate) use flight::FetchError;

use crate::read::engine::{ReadEngine, ReadEngineStats, ReadLimits};
pub(crate) use byte_lru::{ByteLru, Part};

pub(crate) mod byte_lru;
mod flight;
#[cfg(test)]
mod tests;

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
    /// [`ReadLimits`] (6 fetches in flight, so at most 6 read-ahead threads).
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
