//! The read engine shared by logs through one cache: readers take turns for fetch slots (a
//! scanning reader with a long read-ahead queue cannot starve point readers), and the GET
//! budget caps the fetches per second.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod service_util;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::RemoteStorageManager;
use krabka_remote_storage::testkit::{Counting, Method};
use krabka_tiering::metadata::RemoteLogMetadataManager;
use krabka_tiering::{ReadLimits, RemoteReadCache, TieredLog, TieringConfig};
use service_util::{World, append, options, tp, value};

type Counted = Arc<Counting<Arc<FsRemoteStorage>>>;

/// GETs `rsm` has served: data and index fetches.
fn gets(rsm: &Counted) -> u64 {
    let c = rsm.counts();
    c.fetch_log + c.fetch_index
}

/// Partition `i` of `world` over `rsm`, `records` records tiered away (nothing kept locally
/// but the active segment), reading through `cache`.
fn tiered(
    world: &World,
    i: i32,
    rsm: &Counted,
    records: u64,
    cache: &RemoteReadCache,
) -> TieredLog {
    let config = TieringConfig {
        local_retention_bytes: Some(0),
        chunk_bytes: 256,
        ..TieringConfig::default()
    };
    let backend: Arc<dyn RemoteStorageManager> = rsm.clone();
    let log = TieredLog::open(
        world.dir.path().join(format!("p{i}")),
        options(4096),
        backend,
        world.rlmm.clone(),
        tp(i),
        config,
    )
    .unwrap()
    .with_cache(cache.clone());
    append(&log, i, records);
    log.sync().unwrap();
    log.run_once().unwrap();
    assert!(log.local_first_seq() > 1, "partition {i} tiered nothing");
    log
}

#[test]
fn point_readers_are_served_in_turn_with_a_scanning_reader_whose_read_ahead_queue_is_long() {
    let world = World::new();
    // One fetch at a time, no coalescing: every queued read-ahead chunk is a fetch of its own,
    // so a first-come-first-served engine would make a point read wait for the scanner's whole
    // read-ahead window (8 fetches).
    let cache = RemoteReadCache::with_read_limits(
        64 << 20,
        ReadLimits {
            threads: 1,
            coalesce_chunks: 1,
            ..ReadLimits::default()
        },
    );
    let slow = |fs: &Arc<FsRemoteStorage>| -> Counted {
        Arc::new(Counting::new(fs.clone()).with_delay(
            &[Method::FetchLogSegment, Method::FetchIndex],
            Duration::from_millis(2),
        ))
    };
    let scan_rsm = slow(&world.fs);
    let scanned = Arc::new(tiered(&world, 0, &scan_rsm, 3000, &cache));
    let points: Vec<(Counted, TieredLog)> = (1..=3)
        .map(|i| {
            let rsm = slow(&world.fs);
            let log = tiered(&world, i, &rsm, 400, &cache);
            (rsm, log)
        })
        .collect();
    let before_scan = gets(&scan_rsm);

    let stop = Arc::new(AtomicBool::new(false));
    let scanner = {
        let (log, stop) = (scanned.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seq = 1;
            // Bounded: at most the partition's records, a page at a time.
            for _ in 0..3000 {
                if stop.load(Ordering::Relaxed) || seq > log.last_seq() {
                    break;
                }
                let page = log.read(seq, 5).unwrap();
                assert_eq!(page.first().map(|r| r.seq), Some(seq));
                seq += page.len() as u64;
            }
            seq
        })
    };
    // The scanner is well under way (its read-ahead window full) before the point reads.
    let started = service_util::wait_until(Duration::from_secs(30), || {
        gets(&scan_rsm) >= before_scan + 20
    });
    assert!(started, "the scanner made no fetches");

    let mut overlapped = 0;
    let point_threads: Vec<_> = points
        .into_iter()
        .enumerate()
        .map(|(n, (rsm, log))| {
            let (scan_rsm, i) = (scan_rsm.clone(), n as i32 + 1);
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                for k in 0..15u64 {
                    let seq = 1 + (k * 37 + n as u64 * 11) % 390;
                    let (own, scan) = (gets(&rsm), gets(&scan_rsm));
                    let got = log.read(seq, 1).unwrap();
                    let (own, scan) = (gets(&rsm) - own, gets(&scan_rsm) - scan);
                    assert_eq!(got.len(), 1);
                    assert_eq!(got[0].seq, seq);
                    assert_eq!(got[0].message.value.as_ref(), value(i, seq).as_bytes());
                    seen.push((seq, own, scan));
                }
                seen
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in point_threads {
        results.extend(t.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let scanned_to = scanner.join().unwrap();
    assert!(
        scanned_to > 100,
        "the scanner read along: reached {scanned_to}"
    );
    for &(seq, own, scan) in &results {
        // Each of the point read's own fetches waited for at most the fetch in flight and one
        // turn of the scanner; one more scanner fetch may start before the count is read.
        assert!(
            scan <= 2 * own + 1,
            "point read of seq {seq} made {own} fetches while the scanner made {scan}: {results:?}"
        );
        if scan > 0 {
            overlapped += 1;
        }
    }
    assert!(
        overlapped > 0,
        "no point read overlapped the scanner's fetches: {results:?}"
    );
}

#[test]
fn the_get_budget_caps_fetches_per_second_and_its_wait_is_counted() {
    let world = World::new();
    let rate = 10;
    let cache = RemoteReadCache::with_read_limits(
        64 << 20,
        ReadLimits {
            threads: 2,
            gets_per_second: Some(rate),
            ..ReadLimits::default()
        },
    );
    let rsm: Counted = Arc::new(Counting::new(world.fs.clone()));
    let log = tiered(&world, 0, &rsm, 400, &cache);
    let (before, start) = (gets(&rsm), Instant::now());
    let mut seq = 1;
    for _ in 0..400 {
        if seq > log.last_seq() {
            break;
        }
        let page = log.read(seq, 20).unwrap();
        for r in page {
            assert_eq!(r.seq, seq);
            assert_eq!(r.message.value.as_ref(), value(0, seq).as_bytes());
            seq += 1;
        }
    }
    assert_eq!(seq, log.last_seq() + 1, "read to the end");
    let elapsed = start.elapsed().as_secs_f64();
    let made = gets(&rsm) - before;
    assert!(
        made >= 8,
        "the read needed {made} GETs: too few to test the budget"
    );
    // The bucket starts with 100 ms of the rate, and lets one fetch overdraw it.
    let allowed = f64::from(rate) * elapsed + f64::from(rate) * 0.1 + 1.0;
    assert!(
        made as f64 <= allowed,
        "{made} GETs in {elapsed:.2} s over a budget of {rate}/s"
    );
    let stats = cache.read_engine_stats();
    assert!(
        stats.get_budget_wait
            >= Duration::from_secs_f64((made as f64 - 2.0) / f64::from(rate) * 0.8),
        "{made} GETs waited only {:?} for the budget",
        stats.get_budget_wait
    );
}

#[test]
fn many_sequential_readers_of_a_small_shared_cache_fetch_no_index_and_little_twice() {
    const READERS: i32 = 10;
    const PAGE: usize = 40;
    let world = World::new();
    let rsm: Counted = Arc::new(Counting::new(world.fs.clone()));
    // 40 chunks for 10 sequential readers (a page each a little more than a chunk): 4 chunks
    // each, where each reading 8 ahead would evict the others' chunks before they got there.
    let cache = RemoteReadCache::new(40 << 10);
    let logs: Vec<TieredLog> = (0..READERS)
        .map(|i| {
            let config = TieringConfig {
                local_retention_bytes: Some(0),
                chunk_bytes: 1024,
                ..TieringConfig::default()
            };
            let backend: Arc<dyn RemoteStorageManager> = rsm.clone();
            // Indexes as sparse, against the segment, as the default's 4 KiB in 64 MiB.
            let local = krabka_storage::Options {
                index_interval_bytes: 2048,
                ..options(8192)
            };
            let log = TieredLog::open(
                world.dir.path().join(format!("p{i}")),
                local,
                backend,
                world.rlmm.clone(),
                tp(i),
                config,
            )
            .unwrap()
            .with_cache(cache.clone());
            append(&log, i, 800);
            log.sync().unwrap();
            log.run_once().unwrap();
            assert!(log.local_first_seq() > 100, "partition {i} tiered little");
            log
        })
        .collect();
    let segments: u64 = (0..READERS)
        .map(|i| world.rlmm.list_remote_log_segments(&tp(i)).unwrap().len() as u64)
        .sum();
    let remote_bytes: u64 = (0..READERS)
        .flat_map(|i| world.rlmm.list_remote_log_segments(&tp(i)).unwrap())
        .map(|m| m.segment_size_in_bytes())
        .sum();
    rsm.take();

    // The readers take turns, a page each, as lagging consumers of one broker do.
    let mut next: Vec<u64> = vec![1; logs.len()];
    for _ in 0..10_000 {
        let mut active = false;
        for (i, log) in logs.iter().enumerate() {
            let end = log.local_first_seq();
            if next[i] >= end {
                continue;
            }
            active = true;
            let page = log.read(next[i], PAGE).unwrap();
            assert!(!page.is_empty(), "reader {i}: no progress at {}", next[i]);
            for r in &page {
                assert_eq!(r.seq, next[i]);
                let v = value(i32::try_from(i).unwrap(), r.seq);
                assert_eq!(r.message.value.as_ref(), v.as_bytes());
                next[i] += 1;
            }
        }
        if !active {
            break;
        }
    }
    assert!(
        next.iter()
            .zip(&logs)
            .all(|(n, l)| *n >= l.local_first_seq())
    );
    let counts = rsm.counts();
    // Each read starts at a segment's first batch or where the reader's last read stopped.
    assert!(segments > 0);
    assert_eq!(
        counts.fetch_index, 0,
        "sequential readers fetch no offset index: {counts:?}"
    );
    assert!(
        counts.fetch_log_bytes <= remote_bytes * 2,
        "data fetched {} bytes for {remote_bytes} scanned: {counts:?}, cache {:?}",
        counts.fetch_log_bytes,
        cache.stats()
    );
}
