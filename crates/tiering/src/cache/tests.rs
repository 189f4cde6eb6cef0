//! Unit tests of the cache and its single-flight fetches.

use super::*;
use crate::cache::byte_lru::Key;
use bytes::Bytes;
use proptest::prelude::*;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};
use uuid::Uuid;

fn key(n: u64) -> Key {
    (Uuid::nil(), Part::Chunk(n))
}

#[test]
fn a_flood_of_chunks_evicts_older_chunks_before_a_segments_index() {
    let c = ByteLru::new(100);
    let index = (Uuid::nil(), Part::OffsetIndex);
    c.insert(index, Bytes::from(vec![0; 10]));
    // Ten times the budget of chunks, all used after the index.
    for n in 0..100 {
        c.insert(key(n), Bytes::from(vec![0; 10]));
    }
    assert!(c.get(&index).is_some(), "the index stays within its share");
    assert!(c.get(&key(99)).is_some());
    assert!(c.get(&key(90)).is_none(), "older chunks went first");
    assert!(c.bytes() <= 100);
}

#[test]
fn indexes_beyond_their_share_of_the_budget_are_evicted() {
    let c = ByteLru::new(100);
    // Indexes of 10 segments, 20 bytes each: more than a quarter of the budget.
    let index = |n: u128| (Uuid::from_u128(n), Part::OffsetIndex);
    for n in 0..10 {
        c.insert(index(n), Bytes::from(vec![0; 20]));
    }
    c.insert(key(1), Bytes::from(vec![0; 10]));
    assert!(c.bytes() <= 100);
    assert!(c.get(&index(0)).is_none(), "the oldest index was evicted");
    assert!(c.get(&index(9)).is_some());
    assert!(c.get(&key(1)).is_some());
    c.remove_segment(Uuid::from_u128(9));
    assert!(c.get(&index(9)).is_none(), "removed with its segment");
    let (bytes, entries) = c.size();
    let held: u64 = c
        .inner
        .lock()
        .indexes
        .iter()
        .map(|(_, v)| v.len() as u64)
        .sum();
    assert_eq!(c.inner.lock().index_bytes, held);
    assert!(bytes >= held && entries >= 1);
}

#[test]
fn a_demoted_chunk_is_evicted_before_older_ones() {
    let c = ByteLru::new(30);
    c.insert(key(1), Bytes::from(vec![0; 10]));
    c.insert(key(2), Bytes::from(vec![0; 10]));
    c.insert(key(3), Bytes::from(vec![0; 10]));
    // A reader went past chunk 3: it goes first, before chunk 1 read ahead for another.
    c.demote(&key(3));
    c.insert(key(4), Bytes::from(vec![0; 10]));
    assert!(c.get(&key(3)).is_none());
    assert!(c.get(&key(1)).is_some());
    assert!(c.get(&key(2)).is_some());
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

#[test]
fn evictions_are_counted_and_stats_are_shared_by_clones() {
    let cache = RemoteReadCache::new(20);
    let other = cache.clone();
    cache.lru().insert(key(1), Bytes::from(vec![0; 10]));
    cache.lru().insert(key(2), Bytes::from(vec![0; 10]));
    other.lru().insert(key(3), Bytes::from(vec![0; 10]));
    assert!(other.lru().get(&key(3)).is_some());
    assert!(cache.lru().get(&key(1)).is_none());
    let stats = other.stats();
    assert_eq!(
        stats,
        CacheStats {
            hits: 1,
            misses: 1,
            waits: 0,
            evictions: 1,
            bytes: 20,
            entries: 2
        }
    );
    assert!(cache.ptr_eq(&other));
    assert!(!cache.ptr_eq(&RemoteReadCache::new(20)));
}

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn concurrent_misses_of_one_key_fetch_once() {
    let c = ByteLru::new(100);
    let fetches = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let got = c.get_or_fetch(key(1), WAIT, || {
                    fetches.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                    Ok::<_, ()>(Bytes::from_static(b"abc"))
                });
                assert_eq!(got, Ok(Bytes::from_static(b"abc")));
            });
        }
    });
    assert_eq!(fetches.load(Ordering::Relaxed), 1);
    assert!(c.begin_fetch(key(1)).is_none(), "cached already");
    let guard = c.begin_fetch(key(2));
    assert!(guard.is_some());
    drop(guard);
    let failed = c.get_or_fetch(key(2), WAIT, || Err::<Bytes, _>("boom"));
    assert_eq!(failed, Err(FetchError::Fetch("boom")));
    assert!(c.inner.lock().flights.is_empty());
}

/// Runs `waiter` on another thread while `key` is being fetched here (the fetch is
/// registered first), and ends that fetch with `value` once the waiter waits.
fn race_one_fetch(
    c: &ByteLru,
    value: Option<Bytes>,
    waiter: impl FnOnce() -> Result<Bytes, FetchError<&'static str>> + Send,
) -> Result<Bytes, FetchError<&'static str>> {
    let guard = c
        .begin_fetch(key(1))
        .expect("nothing cached or fetched yet");
    std::thread::scope(|s| {
        let waiting = s.spawn(waiter);
        let until = Instant::now() + WAIT;
        while c.waits.load(Ordering::Relaxed) == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            c.waits.load(Ordering::Relaxed),
            1,
            "the waiter never waited"
        );
        match value {
            Some(v) => guard.complete(v),
            None => drop(guard),
        }
        waiting.join().expect("waiter panicked")
    })
}

#[test]
fn a_waiter_takes_the_flights_entry_even_when_the_cache_cannot_keep_it() {
    // A zero budget keeps nothing: the waiter still gets the bytes fetched, not a second
    // request.
    let c = ByteLru::new(0);
    let got = race_one_fetch(&c, Some(Bytes::from_static(b"fetched")), || {
        c.get_or_fetch(key(1), WAIT, || Err("a second request was sent"))
    });
    assert_eq!(got, Ok(Bytes::from_static(b"fetched")));
    assert_eq!(c.bytes(), 0);
}

#[test]
fn a_waiter_whose_flight_failed_fetches_itself_and_reports_its_own_error() {
    let c = ByteLru::new(100);
    let own = AtomicU64::new(0);
    let got = race_one_fetch(&c, None, || {
        c.get_or_fetch(key(1), WAIT, || {
            own.fetch_add(1, Ordering::Relaxed);
            Err("the waiter's own fetch failed")
        })
    });
    assert_eq!(got, Err(FetchError::Fetch("the waiter's own fetch failed")));
    assert_eq!(own.load(Ordering::Relaxed), 1);
    assert!(c.inner.lock().flights.is_empty());
}

#[test]
fn a_wait_past_its_deadline_is_cut_short_and_sends_no_request() {
    let c = ByteLru::new(100);
    let guard = c.begin_fetch(key(1)).expect("nothing cached yet");
    let got = c.get_or_fetch(key(1), Duration::from_millis(30), || {
        Err("a second request was sent")
    });
    assert_eq!(
        got,
        Err(FetchError::WaitTimedOut(Duration::from_millis(30)))
    );
    // The stalled fetch still ends normally, and then serves.
    guard.complete(Bytes::from_static(b"late"));
    assert_eq!(c.get(&key(1)), Some(Bytes::from_static(b"late")));
    // An absurd wait is cut to a representable one, not a panic.
    let hit = c.get_or_fetch(key(1), Duration::MAX, || Err("cached"));
    assert_eq!(hit, Ok(Bytes::from_static(b"late")));
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
            let inner = c.inner.lock();
            let held: u64 = inner.entries.iter().chain(inner.indexes.iter())
                .map(|(_, v)| v.len() as u64).sum();
            drop(inner);
            prop_assert_eq!(held, c.bytes());
        }
    }
}
