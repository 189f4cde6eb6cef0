//! `storage`: krabka-storage against `commitlog`, `okaywal` and plain files, on one workload.
//!
//! Every case runs in a child process of its own (so its peak RSS is its own) on a fresh
//! directory. The payload of a record is `value` bytes of pseudo-random data; MB/s counts those
//! payload bytes only, so every system is measured on the same useful work. After the tables of
//! every value size come the [`targets`]: krabka's ratios against their floors, measured in the
//! same run, optionally drawn as an SVG chart (`--chart [PATH]`).

mod cases;
mod chart;
mod commitlog_peer;
mod driver;
mod files;
pub mod goal;
mod krabka;
mod okaywal_peer;
mod raw;
pub mod targets;

pub use cases::CASES;
pub use driver::run;

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use krabka_protocol::Message;
use krabka_storage::DEFAULT_MAX_BYTES;

use crate::cost::Meter;
use crate::report::{Histogram, Measurement};
use crate::{BoxError, Result};

/// Records per batch in every batch case.
pub const BATCH: usize = 100;
/// Appending threads in the 4-thread cases.
pub const THREADS: usize = 4;
/// Segment size for every system that has segments (krabka's default).
pub const SEGMENT_BYTES: u64 = DEFAULT_MAX_BYTES;
/// Bytes a sequential read asks for per call.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// The sizes of one storage run for one value size.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Payload bytes per record.
    pub value: usize,
    /// Records of the no-sync append cases and of the logs the read cases read.
    pub records: u64,
    /// Records of the cases that fsync every record (each fsync costs a device round trip).
    pub sync_records: u64,
    /// Point reads of the random-read cases.
    pub random_reads: u64,
}

impl Workload {
    /// The child-process argument form.
    pub fn to_args(self) -> Vec<String> {
        [
            self.value as u64,
            self.records,
            self.sync_records,
            self.random_reads,
        ]
        .iter()
        .map(u64::to_string)
        .collect()
    }

    /// Parses [`to_args`](Self::to_args).
    pub fn from_args(args: &[String]) -> Result<Self> {
        let n = |i: usize| -> Result<u64> {
            let s = args.get(i).ok_or("missing workload argument")?;
            Ok(s.parse::<u64>().map_err(|e| format!("{s}: {e}"))?)
        };
        Ok(Self {
            value: usize::try_from(n(0)?)?,
            records: n(1)?,
            sync_records: n(2)?,
            random_reads: n(3)?,
        })
    }
}

/// The bench's generator with a fixed seed: the same sequence in every case and every process.
#[derive(Clone)]
pub struct Rng(fastrand::Rng);

impl Rng {
    /// A generator with a fixed seed.
    pub fn new() -> Self {
        Self(fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15))
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// A value below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The value every record carries: `len` pseudo-random bytes (incompressible).
pub fn value(len: usize) -> Bytes {
    let mut rng = Rng::new();
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Record `i` of a case: value `v`, timestamp `i`. Built as a literal, as a caller with its own
/// timestamps would: `Message::new` reads the wall clock first (a `clock_gettime`, about 8 % of
/// a batch append of 1 KiB values here), which `with_timestamp` then overwrites.
fn message(v: &Bytes, i: u64) -> Message {
    Message {
        timestamp: i as i64,
        value: v.clone(),
        ..Message::default()
    }
}

/// Runs `ops` ops of `per_op` records each, timing each op.
fn timed(
    ops: u64,
    per_op: u64,
    value: usize,
    mut op: impl FnMut(u64) -> Result<()>,
) -> Result<Measurement> {
    let mut hist = Histogram::default();
    let start = Meter::start();
    for i in 0..ops {
        let t = Instant::now();
        op(i)?;
        hist.record(t.elapsed());
    }
    let elapsed = start.stop();
    let records = ops * per_op;
    Ok(Measurement::new(
        records * value as u64,
        records,
        elapsed,
        &hist,
    ))
}

/// Runs `op` on [`THREADS`] threads, `ops` in all, and merges their histograms.
fn timed_threads<F>(ops: u64, value: usize, op: F) -> Result<Measurement>
where
    F: Fn(usize, u64) -> Result<()> + Sync,
{
    let per = ops.div_ceil(THREADS as u64);
    // Allocated before the meter starts: the harness's memory is not the case's.
    let mut fresh: Vec<Histogram> = (0..THREADS).map(|_| Histogram::default()).collect();
    let hists: Mutex<Vec<Histogram>> = Mutex::new(Vec::with_capacity(THREADS));
    let start = Meter::start();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (op, hists) = (&op, &hists);
                let mut h = fresh.pop().unwrap_or_default();
                s.spawn(move || -> Result<()> {
                    for i in 0..per {
                        let at = Instant::now();
                        op(t, i)?;
                        h.record(at.elapsed());
                    }
                    hists.lock().map_err(|_| "poisoned")?.push(h);
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let elapsed = start.stop();
    for r in results {
        r?;
    }
    let mut hist = Histogram::default();
    for h in hists.into_inner().map_err(|_| "poisoned")? {
        hist.merge(&h);
    }
    let records = per * THREADS as u64;
    Ok(Measurement::new(
        records * value as u64,
        records,
        elapsed,
        &hist,
    ))
}

fn batch_of(v: &Bytes, first: u64) -> Vec<Message> {
    (0..BATCH as u64).map(|j| message(v, first + j)).collect()
}

/// A batch of [`BATCH`] records whose values are the [`BATCH`] distinct values of `values`
/// (`vlen` bytes each), so a compressed batch finds no repeats between its records.
fn distinct_batch_of(values: &Bytes, vlen: usize, first: u64) -> Vec<Message> {
    (0..BATCH)
        .map(|j| Message {
            timestamp: (first + j as u64) as i64,
            value: values.slice(j * vlen..(j + 1) * vlen),
            ..Message::default()
        })
        .collect()
}

fn batches(records: u64) -> u64 {
    (records / BATCH as u64).max(1)
}

/// What every case derives from its workload.
pub(super) struct Params {
    /// The value every record carries (in the batch append cases, the first of `values`).
    v: Bytes,
    /// [`BATCH`] distinct values back to back, the records of a batch append case (pseudo-random,
    /// so incompressible even across the records of a batch).
    values: Bytes,
    /// Its length.
    vlen: usize,
    /// Records of a no-sync single-record case.
    n: u64,
    /// Batches of a no-sync batch case.
    nb: u64,
    /// Records of a single-record fsync case.
    sync_n: u64,
    /// Batches of a batch fsync case.
    sync_batches: u64,
    /// Point reads of a random-read case.
    reads: u64,
    /// Records a sequential read asks for per call.
    per_read: usize,
}

impl Params {
    fn new(w: &Workload) -> Self {
        let vlen = w.value;
        Self {
            v: value(w.value),
            values: value(w.value * BATCH),
            vlen,
            n: w.records.max(1),
            nb: batches(w.records),
            sync_n: w.sync_records.max(THREADS as u64),
            sync_batches: (w.sync_records / 4).max(1),
            reads: w.random_reads.max(1),
            per_read: (READ_CHUNK_BYTES / vlen.max(1)).max(1),
        }
    }
}

/// Passes of each [`REPEATED`] case; the fastest counts.
const PASSES: usize = 3;

/// The no-sync append cases: each runs [`PASSES`] times in its process, on a fresh directory
/// each time (the one before deleted), and the fastest pass counts.
///
/// On a VM whose freed memory goes back to the host (free page reporting, as here), the first
/// touch of a page the host has taken back costs a host fault. A no-sync append case is little
/// more than copying into fresh page cache, and one that landed on such pages ran up to 10×
/// slower (`perf`: the time in the kernel's copy into the page cache; 134 MB in 1.6 MB writes
/// took 0.20–0.35 s instead of 0.025 s), at random between cases and runs, more often after a
/// pause. Each pass frees its page cache for the next, which mostly finds it backed: the
/// fastest pass is the case's cost on warm memory, and every case gets the same chances.
const REPEATED: &[&str] = &[
    "krabka-append",
    "commitlog-append",
    "raw-write",
    "raw-write-frame",
    "krabka-batch",
    "krabka-raw-batch",
    "krabka-batch-lz4",
    "krabka-batch-zstd",
    "commitlog-batch",
    "raw-batch",
    "raw-batch-crc",
    "raw-batch-frame",
    "raw-batch-frame-copy",
];

/// Runs one case in this process and returns its measurement (the fastest pass of a
/// [`REPEATED`] case).
pub fn run_case(id: &str, w: &Workload, dir: &Path) -> Result<Measurement> {
    let p = Params::new(w);
    if !REPEATED.contains(&id) {
        return run_in(id, w, &p, dir);
    }
    let mut best: Option<Measurement> = None;
    for pass in 0..PASSES {
        let sub = dir.join(format!("pass-{pass}"));
        std::fs::create_dir(&sub)?;
        let m = run_in(id, w, &p, &sub)?;
        std::fs::remove_dir_all(&sub)?;
        if best.as_ref().is_none_or(|b| m.secs < b.secs) {
            best = Some(m);
        }
    }
    best.ok_or_else(|| BoxError::from("no pass ran"))
}

fn run_in(id: &str, w: &Workload, p: &Params, dir: &Path) -> Result<Measurement> {
    match id.split_once('-').map_or(id, |(system, _)| system) {
        "krabka" => krabka::run(id, w, p, dir),
        "commitlog" => commitlog_peer::run(id, w, p, dir),
        "okaywal" => okaywal_peer::run(id, w, p, dir),
        "raw" => raw::run(id, w, p, dir),
        _ => Err(BoxError::from(format!("unknown storage case {id}"))),
    }
}

/// The sizes for a run: `bytes` of payload per no-sync case, fewer records for fsync cases.
pub fn workload(value: usize, bytes: u64, quick: bool) -> Workload {
    let records = (bytes / value as u64).max(BATCH as u64);
    Workload {
        value,
        records,
        sync_records: if quick { 200 } else { 2_000 },
        random_reads: records.min(if quick { 5_000 } else { 100_000 }),
    }
}

/// Wall-clock budget hint printed with the table.
pub fn describe(w: &Workload) -> String {
    format!(
        "value {} B: {} records per no-sync case ({:.1} MB), {} per fsync case, {} point reads",
        w.value,
        w.records,
        (w.records * w.value as u64) as f64 / 1e6,
        w.sync_records,
        w.random_reads
    )
}
