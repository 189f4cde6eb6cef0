//! A byte-bounded LRU cache of remote indexes (offset and time) and data chunks.
//!
//! Entries are reference-counted [`Bytes`]; the bound counts their lengths. An entry larger than
//! the whole budget is not kept. Small and dependency-free: a map from key to entry plus an
//! ordered map from a use tick to key, so lookup, insert and eviction are `O(log n)`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use uuid::Uuid;

/// What a cached entry holds for one remote segment attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    /// The segment's offset index, whole.
    OffsetIndex,
    /// The segment's time index, whole.
    TimeIndex,
    /// The aligned data chunk with this number (`position / chunk_bytes`).
    Chunk(u64),
}

/// The key of a cached entry: the remote segment attempt and the part.
pub(crate) type Key = (Uuid, Part);

#[derive(Default)]
struct Inner {
    map: HashMap<Key, (Bytes, u64)>,
    order: BTreeMap<u64, Key>,
    tick: u64,
    bytes: u64,
}

/// The cache. Thread safe; counts hits and misses.
pub(crate) struct ByteLru {
    capacity: u64,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl ByteLru {
    /// A cache holding at most `capacity` bytes (0 disables it).
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The entry for `key`, marking it most recently used.
    pub(crate) fn get(&self, key: &Key) -> Option<Bytes> {
        let mut inner = self.inner.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let Inner { map, order, .. } = &mut *inner;
        match map.get_mut(key) {
            Some((value, used)) => {
                order.remove(used);
                *used = tick;
                order.insert(tick, *key);
                let value = value.clone();
                drop(inner);
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(value)
            }
            None => {
                drop(inner);
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Stores `value` under `key`, evicting least recently used entries to stay in budget.
    pub(crate) fn insert(&self, key: Key, value: Bytes) {
        let len = value.len() as u64;
        if len > self.capacity {
            return;
        }
        let mut inner = self.inner.lock();
        inner.tick += 1;
        let tick = inner.tick;
        if let Some((old, used)) = inner.map.remove(&key) {
            inner.order.remove(&used);
            inner.bytes -= old.len() as u64;
        }
        while inner.bytes + len > self.capacity {
            let Some((_, victim)) = inner.order.pop_first() else {
                break;
            };
            if let Some((old, _)) = inner.map.remove(&victim) {
                inner.bytes -= old.len() as u64;
            }
        }
        inner.bytes += len;
        inner.order.insert(tick, key);
        inner.map.insert(key, (value, tick));
    }

    /// Drops every entry of one remote segment attempt (after it is deleted).
    pub(crate) fn remove_segment(&self, id: Uuid) {
        let mut inner = self.inner.lock();
        let keys: Vec<(Key, u64)> = inner
            .map
            .iter()
            .filter(|(k, _)| k.0 == id)
            .map(|(k, (_, used))| (*k, *used))
            .collect();
        for (key, used) in keys {
            inner.order.remove(&used);
            if let Some((old, _)) = inner.map.remove(&key) {
                inner.bytes -= old.len() as u64;
            }
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(n: u64) -> Key {
        (Uuid::nil(), Part::Chunk(n))
    }

    #[test]
    fn least_recently_used_entry_is_evicted_first() {
        let c = ByteLru::new(30);
        c.insert(key(1), Bytes::from(vec![0; 10]));
        c.insert(key(2), Bytes::from(vec![0; 10]));
        c.insert(key(3), Bytes::from(vec![0; 10]));
        assert!(c.get(&key(1)).is_some());
        c.insert(key(4), Bytes::from(vec![0; 10]));
        assert!(c.get(&key(2)).is_none(), "2 was least recently used");
        assert!(c.get(&key(1)).is_some());
        assert!(c.get(&key(3)).is_some());
        assert_eq!(c.bytes(), 30);
        assert_eq!((c.hits(), c.misses()), (3, 1));
    }

    #[test]
    fn entry_larger_than_budget_is_not_kept_and_zero_disables() {
        let c = ByteLru::new(5);
        c.insert(key(1), Bytes::from(vec![0; 6]));
        assert!(c.get(&key(1)).is_none());
        let off = ByteLru::new(0);
        off.insert(key(1), Bytes::from_static(b"x"));
        assert!(off.get(&key(1)).is_none());
        assert_eq!(off.bytes(), 0);
    }

    #[test]
    fn removing_a_segment_frees_its_bytes() {
        let c = ByteLru::new(100);
        let other = Uuid::from_u128(7);
        c.insert(key(1), Bytes::from(vec![0; 10]));
        c.insert((other, Part::OffsetIndex), Bytes::from(vec![0; 20]));
        c.remove_segment(Uuid::nil());
        assert_eq!(c.bytes(), 20);
        assert!(c.get(&(other, Part::OffsetIndex)).is_some());
    }

    proptest! {
        #[test]
        fn bytes_never_exceed_capacity(
            cap in 0u64..200,
            ops in proptest::collection::vec((0u64..16, 0usize..80), 0..200)
        ) {
            let c = ByteLru::new(cap);
            for (k, len) in ops {
                c.insert(key(k), Bytes::from(vec![0; len]));
                prop_assert!(c.bytes() <= cap);
                let held: u64 = c.inner.lock().map.values().map(|(v, _)| v.len() as u64).sum();
                prop_assert_eq!(held, c.bytes());
            }
        }
    }
}
