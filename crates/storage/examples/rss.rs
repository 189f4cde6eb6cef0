//! Appends `KRABKA_BENCH_BYTES` (default 2 GiB) of 1 KiB records and prints the peak RSS.
//!
//! `cargo run --release -p krabka-storage --example rss [DIR]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let total: u64 = std::env::var("KRABKA_BENCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2 << 30);
    let tmp = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map_or(tmp.path().to_path_buf(), Into::into);
    let log = Log::open(
        &dir,
        Options {
            sync: SyncPolicy::Never,
            ..Options::default()
        },
    )?;
    let batch: Vec<Message> = (0..100)
        .map(|i| Message::new(vec![i as u8; 1024]).with_timestamp(i))
        .collect();
    let start = std::time::Instant::now();
    while log.bytes() < total {
        log.append_batch(&batch)?;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "appended {} MiB in {} segments, {:.0} MiB/s, peak RSS (VmHWM) {} KiB",
        log.bytes() >> 20,
        log.segments().len(),
        (log.bytes() >> 20) as f64 / secs,
        vm_hwm_kib()
    );
    log.close()?;
    Ok(())
}
