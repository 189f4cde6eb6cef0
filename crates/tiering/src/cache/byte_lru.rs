//! The byte-bounded LRU behind a [`RemoteReadCache`](super::RemoteReadCache), with its
//! single-flight fetches: [`ByteLru`], its keys ([`Part`], [`Key`]) and [`FetchGuard`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lru::LruCache;
use parking_lot::Mutex;
use uuid::Uuid;

use super::flight::{FetchError, Flight, MAX_WAIT, Waited};

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
    /// Whether the part is a segment's index (offset or time) or hints: a small entry every
    /// read of the segment starts from, kept apart from the data chunks ([`ByteLru`]).
    fn is_index(self) -> bool {
        !matches!(self, Part::Chunk(_))
    }
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

/// The most of the budget indexes (and hints) keep from the chunks' eviction: a quarter.
const INDEX_SHARE_DIVISOR: u64 = 4;

pub(super) struct Inner {
    /// The data chunks, least recently used first out.
    pub(super) entries: LruCache<Key, Bytes>,
    /// The indexes and hints, least recently used first out: evicted only once they hold more
    /// than their share of the budget (or no chunk is left), so that a flood of chunks (many
    /// readers' read-ahead) does not evict the index every read of a segment starts from.
    pub(super) indexes: LruCache<Key, Bytes>,
    /// The sum of the entries' lengths (both lists).
    pub(super) bytes: u64,
    /// The sum of the indexes' and hints' lengths.
    pub(super) index_bytes: u64,
    /// Entries being fetched now.
    pub(super) flights: HashMap<Key, Arc<Flight>>,
}

impl Inner {
    fn list(&mut self, key: &Key) -> &mut LruCache<Key, Bytes> {
        if key.1.is_index() {
            &mut self.indexes
        } else {
            &mut self.entries
        }
    }

    fn contains(&self, key: &Key) -> bool {
        if key.1.is_index() {
            self.indexes.contains(key)
        } else {
            self.entries.contains(key)
        }
    }

    /// Removes `key`'s entry, keeping the byte counts.
    fn pop(&mut self, key: &Key) -> Option<Bytes> {
        let old = self.list(key).pop(key)?;
        self.forget(key, old.len() as u64);
        Some(old)
    }

    fn forget(&mut self, key: &Key, len: u64) {
        self.bytes -= len;
        if key.1.is_index() {
            self.index_bytes -= len;
        }
    }

    /// Evicts the least recently used chunk, or index when the indexes hold more than `share`
    /// bytes or no chunk is left; `false` when nothing is left.
    fn evict_one(&mut self, share: u64) -> bool {
        let from_indexes = self.entries.is_empty() || self.index_bytes > share;
        let popped = if from_indexes {
            self.indexes.pop_lru().or_else(|| self.entries.pop_lru())
        } else {
            self.entries.pop_lru()
        };
        match popped {
            Some((key, old)) => {
                self.forget(&key, old.len() as u64);
                true
            }
            None => false,
        }
    }
}

/// What [`ByteLru::lookup_or_subscribe`] found.
pub(crate) enum Lookup {
    /// The entry, cached.
    Cached(Bytes),
    /// A fetch of it in progress: its entry when it ends (`None`: it failed).
    Fetching(tokio::sync::oneshot::Receiver<Option<Bytes>>),
    /// Neither.
    Absent,
}

/// The cache behind a [`RemoteReadCache`]. Thread safe; counts hits, misses and evictions.
pub(crate) struct ByteLru {
    pub(super) capacity: u64,
    pub(super) inner: Mutex<Inner>,
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) waits: AtomicU64,
    pub(super) evictions: AtomicU64,
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
                indexes: LruCache::unbounded(),
                bytes: 0,
                index_bytes: 0,
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
        inner.list(key).get(key).cloned()
    }

    /// Marks a data chunk a sequential reader has gone past as the next to evict: it is
    /// unlikely to be read again soon, and every chunk read ahead for a reader that has not
    /// got there yet stays cached before it.
    pub(crate) fn demote(&self, key: &Key) {
        self.inner.lock().list(key).demote(key);
    }

    /// The entry for `key` when cached, marking it most recently used; counts a hit when found
    /// and nothing when not (a read serving only what is cached: its read again counts the
    /// miss). A fetch of it in progress is not waited for: that read would hold a thread
    /// outside the reader slots while a fetch it does not own runs.
    pub(crate) fn lookup(&self, key: &Key) -> Option<Bytes> {
        let found = Self::touch(&mut self.inner.lock(), key);
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
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
        if inner.contains(&key) || inner.flights.contains_key(&key) {
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

    /// The entry for `key` when cached (marking it most recently used, a hit counted), else a
    /// receiver of the fetch of it in progress (a wait counted), else nothing (neither counted:
    /// the fetch the caller starts counts its miss). For reads that await a fetch without
    /// holding a thread.
    pub(crate) fn lookup_or_subscribe(&self, key: &Key) -> Lookup {
        let mut inner = self.inner.lock();
        if let Some(hit) = Self::touch(&mut inner, key) {
            drop(inner);
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Lookup::Cached(hit);
        }
        match inner.flights.get(key).cloned() {
            Some(flight) => {
                drop(inner);
                self.waits.fetch_add(1, Ordering::Relaxed);
                self.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Fetching(flight.subscribe())
            }
            None => {
                drop(inner);
                self.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Absent
            }
        }
    }

    /// Whether `key` is cached or being fetched (no lookup counted, use order unchanged).
    pub(crate) fn contains(&self, key: &Key) -> bool {
        let inner = self.inner.lock();
        inner.contains(key) || inner.flights.contains_key(key)
    }

    /// Stores `value` under `key`, evicting least recently used entries to stay in budget:
    /// chunks first, indexes and hints only beyond their share (a quarter of the budget).
    pub(crate) fn insert(&self, key: Key, value: Bytes) {
        let len = value.len() as u64;
        if len > self.capacity {
            return;
        }
        let share = self.capacity / INDEX_SHARE_DIVISOR;
        let mut inner = self.inner.lock();
        inner.pop(&key);
        let mut evicted = 0;
        while inner.bytes + len > self.capacity && inner.evict_one(share) {
            evicted += 1;
        }
        inner.bytes += len;
        if key.1.is_index() {
            inner.index_bytes += len;
        }
        inner.list(&key).put(key, value);
        drop(inner);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// Drops every entry of one remote segment attempt (after it is deleted).
    pub(crate) fn remove_segment(&self, id: Uuid) {
        let mut inner = self.inner.lock();
        let Inner {
            entries,
            indexes,
            bytes,
            index_bytes,
            ..
        } = &mut *inner;
        entries.retain(|key, value| {
            let keep = key.0 != id;
            if !keep {
                *bytes -= value.len() as u64;
            }
            keep
        });
        indexes.retain(|key, value| {
            let keep = key.0 != id;
            if !keep {
                *bytes -= value.len() as u64;
                *index_bytes -= value.len() as u64;
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

    /// Bytes of indexes and hints held now.
    pub(crate) fn index_bytes(&self) -> u64 {
        self.inner.lock().index_bytes
    }

    /// Bytes held now.
    pub(crate) fn bytes(&self) -> u64 {
        self.inner.lock().bytes
    }

    /// Bytes and entries held now.
    pub(super) fn size(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (
            inner.bytes,
            (inner.entries.len() + inner.indexes.len()) as u64,
        )
    }
}
