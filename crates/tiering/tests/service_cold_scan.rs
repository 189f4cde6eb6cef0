//! Many lagging consumers scanning the remote tier through one service whose cache cannot hold
//! a chunk and the next for each of them: every byte is still fetched about once, in about one
//! request per chunk (no offset index, no read-ahead of chunks every reader has passed, no
//! second fetch of a chunk's rest when the cache evicts it between a read's two attempts).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod service_util;

use std::sync::Arc;
use std::time::Duration;

use krabka_remote_storage::RemoteStorageManager;
use krabka_remote_storage::testkit::{Counting, Method};
use krabka_tiering::metadata::RemoteLogMetadataManager;
use krabka_tiering::{ServiceConfig, TieringService};
use service_util::{World, tp, value, wait_until};

const PARTITIONS: i32 = 24;
const RECORDS: u64 = 400;
/// Records a consumer asks for per read: about a chunk and a half (1 KiB chunks).
const PAGE: usize = 48;

#[test]
fn lagging_consumers_of_a_crowded_cache_fetch_each_byte_about_once() {
    let world = World::new();
    // Each fetch takes a few milliseconds, as a bucket's do: the readers' reads overlap, and
    // the cache evicts while they wait.
    let rsm = Arc::new(Counting::new(world.fs.clone()).with_hook(|call| {
        if call.method == Method::FetchLogSegment {
            std::thread::sleep(Duration::from_millis(3));
        }
        Ok(())
    }));
    let svc = TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        // 8 chunks for 24 readers: each reader's chunk is evicted before its next read.
        cache_bytes: 8 << 10,
        read_queue: PARTITIONS as usize * 2,
        ..ServiceConfig::default()
    })
    .unwrap();
    let backend: Arc<dyn RemoteStorageManager> = rsm.clone();
    let logs: Vec<_> = (0..PARTITIONS)
        .map(|i| world.partition_with(i, backend.clone(), 2048, RECORDS, Some(svc.cache())))
        .collect();
    for log in &logs {
        svc.add(log.clone()).unwrap();
    }
    assert!(wait_until(Duration::from_secs(60), || {
        logs.iter()
            .all(|l| l.stats().copy_lag_segments == 0 && l.local_first_seq() > RECORDS / 2)
    }));
    let remote_bytes: u64 = (0..PARTITIONS)
        .flat_map(|i| world.rlmm.list_remote_log_segments(&tp(i)).unwrap())
        .map(|m| m.segment_size_in_bytes())
        .sum();
    rsm.take();

    std::thread::scope(|s| {
        for (i, log) in (0..PARTITIONS).zip(&logs) {
            let svc = &svc;
            s.spawn(move || {
                let end = log.local_first_seq();
                let mut next = 1;
                for _ in 0..10_000 {
                    if next >= end {
                        return;
                    }
                    let page = svc.read(&tp(i), next, PAGE).unwrap();
                    assert!(!page.is_empty(), "partition {i}: no progress at {next}");
                    for r in &page {
                        assert_eq!(r.seq, next);
                        assert_eq!(r.message.value.as_ref(), value(i, next).as_bytes());
                        next += 1;
                    }
                }
                panic!("partition {i}: not read to {end} in 10,000 reads");
            });
        }
    });
    let counts = rsm.counts();
    let chunks = remote_bytes.div_ceil(1024);
    assert_eq!(counts.fetch_index, 0, "{counts:?}");
    assert!(
        counts.fetch_log_bytes * 100 <= remote_bytes * 105,
        "{} bytes fetched for {remote_bytes} scanned: {counts:?}",
        counts.fetch_log_bytes
    );
    assert!(
        counts.fetch_log * 100 <= chunks * 115,
        "{} fetches for {chunks} chunks: {counts:?}",
        counts.fetch_log
    );
    svc.shutdown(Duration::from_secs(5));
}
