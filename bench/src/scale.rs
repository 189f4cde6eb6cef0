//! `krabka-bench scale [--quick] [--partitions N]`: one `TieringService` tiering many small
//! partitions to remote-fs. `krabka-bench scale reads ...`: cold reads of many lagging
//! consumers through one service ([`mod@reads`]).
//!
//! Reports the time to tier everything, peak and per-partition RSS, the thread count and open
//! descriptors at their peak, the p99 of a remote `read` on one partition during the storm
//! against its idle p99, and starvation (the last partition's first copy against the mean
//! first copy). The measuring process runs under `ulimit -n 65536` where the shell may raise
//! it (each open partition holds two descriptors).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition, Uuid,
};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::{ServiceConfig, TieredLog, TieringConfig, TieringService};
use parking_lot_free::Mutex;

use crate::Result;

mod reads;
mod threads;

/// `std::sync::Mutex` without poisoning surprises: a poisoned lock still yields its data.
mod parking_lot_free {
    pub struct Mutex<T>(std::sync::Mutex<T>);
    impl<T> Mutex<T> {
        pub fn new(v: T) -> Self {
            Self(std::sync::Mutex::new(v))
        }
        pub fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
}

/// Records per partition (about three closed segments of 512 bytes plus the active one).
const RECORDS: u64 = 40;
/// Records of the partition read during the storm.
const READ_RECORDS: u64 = 2000;
const SEGMENT_BYTES: u64 = 512;
const COPY_THREADS: usize = 2;
const READ_THREADS: usize = 2;

/// Runs the measurement in a child with a raised descriptor limit and prints its report.
pub fn run(quick: bool, rest: &[String]) -> Result<()> {
    if let Some((first, reads_args)) = rest.split_first()
        && first == "reads"
    {
        return reads::run(quick, reads_args);
    }
    let partitions = match rest.iter().position(|a| a == "--partitions") {
        Some(i) => rest
            .get(i + 1)
            .ok_or("--partitions needs a value")?
            .parse::<u32>()?,
        None if quick => 500,
        None => 10_000,
    };
    let exe = std::env::current_exe()?;
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 65536 2>/dev/null; exec \"$0\" child scale \"$1\"")
        .arg(exe)
        .arg(partitions.to_string())
        .output()?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("scale child failed: {}", stderr.trim()).into());
    }
    Ok(())
}

/// A backend decorator that records when each partition's first copy finished and counts
/// copies.
struct Observed {
    inner: FsRemoteStorage,
    first_copy: Mutex<HashMap<i32, Instant>>,
    copies: std::sync::atomic::AtomicU64,
}

impl RemoteStorageManager for Observed {
    fn copy_log_segment_data(
        &self,
        m: &RemoteLogSegmentMetadata,
        d: &LogSegmentData,
    ) -> std::result::Result<Option<CustomMetadata>, RemoteStorageError> {
        let r = self.inner.copy_log_segment_data(m, d)?;
        let p = m.topic_id_partition().partition();
        self.first_copy.lock().entry(p).or_insert_with(Instant::now);
        self.copies
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(r)
    }
    fn fetch_log_segment(
        &self,
        m: &RemoteLogSegmentMetadata,
        s: u32,
        e: Option<u32>,
    ) -> std::result::Result<Vec<u8>, RemoteStorageError> {
        self.inner.fetch_log_segment(m, s, e)
    }
    fn fetch_index(
        &self,
        m: &RemoteLogSegmentMetadata,
        t: IndexType,
    ) -> std::result::Result<Vec<u8>, RemoteStorageError> {
        self.inner.fetch_index(m, t)
    }
    fn delete_log_segment_data(
        &self,
        m: &RemoteLogSegmentMetadata,
    ) -> std::result::Result<(), RemoteStorageError> {
        self.inner.delete_log_segment_data(m)
    }
}

/// `/proc/self/status` field `name` (first number).
fn status(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Peaks sampled while the storm runs.
#[derive(Default)]
struct Peaks {
    threads: u64,
    fds: u64,
}

impl Peaks {
    fn sample(&mut self) {
        self.threads = self.threads.max(status("Threads:"));
        self.fds = self.fds.max(open_fds());
    }
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let i = (v.len() * 99 / 100).min(v.len().saturating_sub(1));
    v.get(i).copied().unwrap_or_default()
}

fn open_partition(
    dir: &std::path::Path,
    i: i32,
    rsm: &Arc<dyn RemoteStorageManager>,
    rlmm: &Arc<InMemoryRemoteLogMetadataManager>,
    cache: &krabka_tiering::RemoteReadCache,
    records: u64,
) -> Result<Arc<TieredLog>> {
    let log = TieredLog::open(
        dir.join(format!("p{i}")),
        Options {
            max_bytes: SEGMENT_BYTES,
            sync: SyncPolicy::Never,
            max_open_segments: 4,
            ..Options::default()
        },
        rsm.clone(),
        rlmm.clone(),
        TopicIdPartition::new(Uuid::from_u128(1), "scale", i),
        TieringConfig {
            local_retention_bytes: Some(0),
            chunk_bytes: 4096,
            ..TieringConfig::default()
        },
    )?
    .with_cache(cache.clone());
    let msgs: Vec<Message> = (0..records)
        .map(|s| Message::new(format!("partition {i} record {s:06}")))
        .collect();
    log.append_batch(&msgs)?;
    Ok(Arc::new(log))
}

/// Remote reads of ten records at spread seqs of `tp`, timed.
fn reads(
    svc: &TieringService,
    tp: &TopicIdPartition,
    n: usize,
    k: &mut u64,
) -> Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        *k = (*k * 7919 + 13) % (READ_RECORDS - 200);
        let t = Instant::now();
        let got = svc.read(tp, 1 + *k, 10)?;
        out.push(t.elapsed());
        if got.len() != 10 {
            return Err(format!("short read of {} records", got.len()).into());
        }
    }
    Ok(out)
}

/// The measuring child: `partitions` partitions tiered by one service.
pub fn child(partitions: u32, dir: &std::path::Path) -> Result<()> {
    let n = partitions as i32;
    let rsm_inner = Arc::new(Observed {
        inner: FsRemoteStorage::new(dir.join("remote"))?,
        first_copy: Mutex::new(HashMap::new()),
        copies: std::sync::atomic::AtomicU64::new(0),
    });
    let svc = TieringService::new(ServiceConfig {
        copy_threads: COPY_THREADS,
        read_threads: READ_THREADS,
        round_interval: Duration::from_secs(3600),
        cache_bytes: 0,
        ..ServiceConfig::default()
    })?;
    let rsm: Arc<dyn RemoteStorageManager> = Arc::new(svc.instrument(rsm_inner.clone()));
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let cache = svc.cache().clone();
    // The partition read during the storm: tiered first, so that its reads are remote.
    let reader = open_partition(dir, n, &rsm, &rlmm, &cache, READ_RECORDS)?;
    let reader_tp = reader.topic_id_partition().clone();
    let reader_segments = reader.log().segments().len() as u64 - 1;
    svc.add(reader.clone())?;
    for _ in 0..6000 {
        if rsm_inner.copies.load(std::sync::atomic::Ordering::Relaxed) >= reader_segments {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut k = 1;
    let idle = reads(&svc, &reader_tp, 300, &mut k)?;

    let rss_before = status("VmRSS:");
    let opening = Instant::now();
    let mut logs = Vec::with_capacity(partitions as usize);
    let mut expected = 0u64;
    for i in 0..n {
        let log = open_partition(dir, i, &rsm, &rlmm, &cache, RECORDS)?;
        expected += log.log().segments().len() as u64 - 1;
        logs.push(log);
    }
    let opened_in = opening.elapsed();
    let rss_idle = status("VmRSS:");
    let per_idle = (rss_idle.saturating_sub(rss_before)) * 1024 / u64::from(partitions.max(1));

    let base = rsm_inner.copies.load(std::sync::atomic::Ordering::Relaxed);
    let mut peaks = Peaks::default();
    let storm = Instant::now();
    for log in &logs {
        svc.add(log.clone())?;
    }
    let mut during = Vec::new();
    let limit = Duration::from_secs(if partitions > 2000 { 1800 } else { 300 });
    while rsm_inner.copies.load(std::sync::atomic::Ordering::Relaxed) < base + expected {
        if storm.elapsed() > limit {
            return Err(format!("tiering did not finish within {limit:?}").into());
        }
        peaks.sample();
        during.extend(reads(&svc, &reader_tp, 5, &mut k)?);
    }
    let tiered_in = storm.elapsed();
    peaks.sample();
    // Let the last rounds' retention end, then measure the idle partitions.
    std::thread::sleep(Duration::from_millis(500));
    let rss_after = status("VmRSS:");
    let per_after = (rss_after.saturating_sub(rss_before)) * 1024 / u64::from(partitions.max(1));

    let firsts = rsm_inner.first_copy.lock().clone();
    let rel: Vec<f64> = (0..n)
        .filter_map(|i| {
            firsts
                .get(&i)
                .map(|t| t.duration_since(storm).as_secs_f64())
        })
        .collect();
    let mean = rel.iter().sum::<f64>() / rel.len().max(1) as f64;
    let last = firsts
        .get(&(n - 1))
        .map_or(f64::NAN, |t| t.duration_since(storm).as_secs_f64());
    let report = Report {
        partitions,
        segments: expected,
        opened_in,
        tiered_in,
        peak_rss_kib: status("VmHWM:"),
        per_idle,
        per_after,
        peaks,
        idle_p99: p99(idle),
        storm_p99: p99(during.clone()),
        storm_reads: during.len(),
        first_mean: mean,
        first_last: last,
    };
    report.print();
    let _ = svc.shutdown(Duration::from_secs(10));
    Ok(())
}

struct Report {
    partitions: u32,
    segments: u64,
    opened_in: Duration,
    tiered_in: Duration,
    peak_rss_kib: u64,
    per_idle: u64,
    per_after: u64,
    peaks: Peaks,
    idle_p99: Duration,
    storm_p99: Duration,
    storm_reads: usize,
    first_mean: f64,
    first_last: f64,
}

impl Report {
    fn print(&self) {
        let threads_target = (COPY_THREADS + READ_THREADS + 8) as u64;
        let ok = |b: bool| if b { "ok" } else { "MISSED" };
        let ratio = self.storm_p99.as_secs_f64() / self.idle_p99.as_secs_f64().max(1e-9);
        let starve = self.first_last / self.first_mean.max(1e-9);
        println!("# krabka-bench scale: {} partitions\n", self.partitions);
        println!("| measure | value | target | |");
        println!("| --- | --- | --- | --- |");
        println!(
            "| open + append {} partitions | {:.1} s | | |",
            self.partitions,
            self.opened_in.as_secs_f64()
        );
        println!(
            "| tier everything ({} segments) | {:.1} s ({:.0} segments/s) | | |",
            self.segments,
            self.tiered_in.as_secs_f64(),
            self.segments as f64 / self.tiered_in.as_secs_f64().max(1e-9)
        );
        println!("| peak RSS | {} MiB | | |", self.peak_rss_kib / 1024);
        println!(
            "| RSS per idle partition (opened) | {:.1} KiB | <= 64 KiB | {} |",
            self.per_idle as f64 / 1024.0,
            ok(self.per_idle <= 64 << 10)
        );
        println!(
            "| RSS per partition after tiering | {:.1} KiB | <= 64 KiB | {} |",
            self.per_after as f64 / 1024.0,
            ok(self.per_after <= 64 << 10)
        );
        println!(
            "| threads (peak) | {} | <= pools + 8 = {threads_target} | {} |",
            self.peaks.threads,
            ok(self.peaks.threads <= threads_target)
        );
        println!(
            "| open fds (peak) | {} ({:.2} per partition) | | |",
            self.peaks.fds,
            self.peaks.fds as f64 / f64::from(self.partitions.max(1))
        );
        println!(
            "| read p99 idle / storm | {:.3} ms / {:.3} ms ({} reads, {:.1}x) | <= 10x | {} |",
            self.idle_p99.as_secs_f64() * 1e3,
            self.storm_p99.as_secs_f64() * 1e3,
            self.storm_reads,
            ratio,
            ok(ratio <= 10.0)
        );
        println!(
            "| first copy: last partition / mean | {:.2} s / {:.2} s ({:.2}x) | <= 2x | {} |",
            self.first_last,
            self.first_mean,
            starve,
            ok(starve <= 2.0)
        );
    }
}
