//! What a point read allocates, counted by this test binary's global allocator (one test in
//! its binary, so the counts are the read's own).

use std::alloc::System;

use krabka_protocol::Message;
use krabka_storage::{Log, Options, Record};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A point read of a log of single appends allocates the `Vec` it returns and nothing else
/// once the thread's read buffer and the segment's file are set up: one allocation of one
/// `Record` per read, in closed segments and the active one.
#[test]
fn a_point_read_allocates_only_the_vec_of_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        max_bytes: 256 << 10,
        ..Options::default()
    };
    let log = Log::open(dir.path(), opts).unwrap();
    for i in 1..=2_000u64 {
        let mut v = i.to_be_bytes().to_vec();
        v.resize(1000, 7);
        log.append(&Message::new(v).with_timestamp(i as i64))
            .unwrap();
    }
    assert!(
        log.segments().len() >= 3,
        "closed segments and the active one"
    );
    let last = log.last_seq();
    // Opens every segment's file and sizes the thread's read buffer.
    for seq in 1..=last {
        log.read(seq, 1).unwrap();
    }
    let region = Region::new(GLOBAL);
    let mut reads = 0usize;
    for seq in (1..=last).step_by(3) {
        let got = log.read(seq, 1).unwrap();
        assert_eq!(got[0].seq, seq);
        assert_eq!(got[0].message.value[..8], seq.to_be_bytes());
        drop(got);
        reads += 1;
    }
    let spent = region.change();
    assert_eq!(
        spent.allocations + spent.reallocations,
        reads,
        "allocations for {reads} point reads: {spent:?}"
    );
    assert_eq!(
        spent.bytes_allocated,
        reads * std::mem::size_of::<Record>(),
        "{spent:?}"
    );
}
