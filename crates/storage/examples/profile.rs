//! A small workload for profilers (`valgrind --tool=callgrind`, `perf`): appends batches of
//! 1 KiB records, then reads them back sequentially and at random.
//!
//! `cargo run --release -p krabka-storage --example profile [append|read|random|all] [MiB]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

fn message(i: u64) -> Message {
    Message::new(vec![(i % 251) as u8; 1024])
        .with_key(format!("key-{i}"))
        .with_timestamp(i as i64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let mib: u64 = std::env::args()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let dir = tempfile::tempdir()?;
    let log = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            max_bytes: 16 << 20,
            ..Options::default()
        },
    )?;
    let batch: Vec<Message> = (0..100).map(message).collect();
    let t = Instant::now();
    while log.bytes() < mib << 20 {
        log.append_batch(&batch)?;
    }
    let n = log.last_seq();
    println!("append: {:?} for {n} records", t.elapsed());
    if what == "read" || what == "all" {
        let t = Instant::now();
        for _ in 0..4 {
            let mut seq = 1;
            while seq <= n {
                let r = log.read(seq, 1000)?;
                seq += r.len() as u64;
                black_box(r);
            }
        }
        println!("read seq x4: {:?}", t.elapsed());
    }
    if what == "random" || what == "all" {
        let t = Instant::now();
        let mut x = 88172645463325252u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            black_box(log.read(1 + x % n, 1)?);
        }
        println!("read random x100k: {:?}", t.elapsed());
    }
    Ok(())
}
