//! What `append_batch` costs the process, counted rather than timed: heap allocations and
//! write calls per call. A test binary of its own with a single test, so that no other test
//! thread allocates or writes while it counts (the allocator's counts are process-wide).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::alloc::System;
use std::fs::File;
use std::io::Read;

use krabka_protocol::{Bytes, Message};
use krabka_storage::{Log, Options, SyncPolicy};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Write-family system calls of this process so far (`syscw` of `/proc/self/io`).
fn write_calls() -> u64 {
    let mut text = String::new();
    File::open("/proc/self/io")
        .and_then(|mut f| f.read_to_string(&mut text))
        .expect("/proc/self/io");
    text.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("syscw in /proc/self/io")
}

#[test]
fn an_append_batch_of_100_allocates_nothing_and_makes_one_write_call() {
    const CALLS: u64 = 200;
    for vlen in [100usize, 1024, 16 * 1024] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(
            dir.path(),
            Options {
                // Room for every call: no roll (whose index files are writes of their own).
                max_bytes: 1 << 30,
                sync: SyncPolicy::Never,
                ..Options::default()
            },
        )
        .unwrap();
        let mut msgs: Vec<Message> = (0..100u8)
            .map(|i| Message::new(Bytes::from(vec![i; vlen])))
            .collect();
        let append = |call: u64, msgs: &mut [Message]| {
            for (j, m) in msgs.iter_mut().enumerate() {
                m.timestamp = (call * 100 + j as u64) as i64;
            }
            log.append_batch(msgs).unwrap();
        };
        // The first calls size the reused buffers and remove what an open leaves.
        for call in 0..3 {
            append(call, &mut msgs);
        }
        let writes_before = write_calls();
        let region = Region::new(GLOBAL);
        for call in 3..3 + CALLS {
            append(call, &mut msgs);
        }
        let heap = region.change();
        let writes = write_calls() - writes_before;
        assert_eq!(writes, CALLS, "{vlen} B: one write per batch");
        // The encoding reuses the log's buffer and allocates nothing per record or per call;
        // what remains is the segment's in-memory index growing by doubling (one entry per
        // `index_interval_bytes` of batches): a handful of reallocations over all the calls.
        // `.index` and `.timeindex` entries: two vectors, each doubling at most
        // log2(entries) times.
        let allocs = (heap.allocations + heap.reallocations) as u64;
        let doublings = u64::from((CALLS + 3).next_power_of_two().trailing_zeros());
        assert!(
            allocs <= 2 * doublings,
            "{vlen} B: {allocs} allocations in {CALLS} calls ({heap:?})"
        );
        // And the records are there, in order (the first seq is 1).
        let last = log.read(100 * (CALLS + 3), 1).unwrap();
        assert_eq!(last[0].message.value, msgs[99].value);
        assert_eq!(last[0].message.timestamp, ((CALLS + 2) * 100 + 99) as i64);
    }
}
