//! Time of `Log::open` on a large log against a small one, after a clean close and after a
//! crash (no close), with the default segment size.
//!
//! `cargo run --release -p krabka-storage --example open_time [MiB of the large log] [opens]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::{DEFAULT_MAX_BYTES, Log, Options, SyncPolicy};

fn opts() -> Options {
    Options {
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

/// A log of about `bytes` of 1 KiB records, whose active segment is nearly full; closed
/// cleanly when `close`, else dropped (a crash).
fn build(dir: &Path, bytes: u64, close: bool) {
    let log = Log::open(dir, opts()).unwrap();
    let batch: Vec<Message> = (0..100)
        .map(|i| Message::new(vec![(i % 251) as u8; 1024]).with_timestamp(i))
        .collect();
    // Stop a little short of a roll, so that the active segment is as large as it gets.
    let target = if bytes > DEFAULT_MAX_BYTES {
        bytes - DEFAULT_MAX_BYTES / 16
    } else {
        bytes
    };
    while log.bytes() < target {
        log.append_batch(&batch).unwrap();
    }
    if close {
        log.close().unwrap();
    } else {
        log.sync().unwrap();
    }
}

/// The median time of `n` opens.
fn time_opens(dir: &Path, n: usize) -> (Duration, u64) {
    let mut times = Vec::with_capacity(n);
    let mut scanned = 0;
    for _ in 0..n {
        let t = Instant::now();
        let log = Log::open(dir, opts()).unwrap();
        times.push(t.elapsed());
        scanned = log.recovery_report().scanned_bytes;
    }
    times.sort();
    (times[n / 2], scanned)
}

fn main() {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let n: usize = std::env::args()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let only_close = std::env::var_os("OPEN_TIME_ONLY_CLOSE").is_some();
    for close in [true, false] {
        if only_close && !close {
            continue;
        }
        let small = tempfile::tempdir().unwrap();
        let large = tempfile::tempdir().unwrap();
        build(small.path(), 1 << 20, close);
        build(large.path(), mib << 20, close);
        let (s, s_scan) = time_opens(small.path(), n);
        let (l, l_scan) = time_opens(large.path(), n);
        println!(
            "{}: open of a 1 MiB log {s:?} (scanned {s_scan} B), of a {mib} MiB log {l:?} \
             (scanned {l_scan} B): ratio {:.2}",
            if close {
                "after close"
            } else {
                "after a crash"
            },
            l.as_secs_f64() / s.as_secs_f64()
        );
    }
}
