//! `storage`: krabka-storage against `commitlog`, `okaywal` and plain files, on one workload.
//!
//! Every case runs in a child process of its own (so its peak RSS is its own) on a fresh
//! directory. The payload of a record is `value` bytes of pseudo-random data; MB/s counts those
//! payload bytes only, so every system is measured on the same useful work.

mod commitlog_peer;
mod krabka;
mod okaywal_peer;
mod raw;

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use krabka_protocol::Message;
use krabka_storage::DEFAULT_MAX_BYTES;

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

/// One case: its comparison group, its row name, its id for the child process.
pub struct Case {
    /// The comparison group.
    pub group: &'static str,
    /// Row label.
    pub name: &'static str,
    /// Child-process id.
    pub id: &'static str,
    /// Whether it is the group's krabka reference.
    pub krabka: bool,
    /// Whether it is the group's raw-file limit.
    pub raw: bool,
}

const fn case(group: &'static str, name: &'static str, id: &'static str) -> Case {
    Case {
        group,
        name,
        id,
        krabka: false,
        raw: false,
    }
}

const fn krabka(group: &'static str, name: &'static str, id: &'static str) -> Case {
    Case {
        krabka: true,
        ..case(group, name, id)
    }
}

const fn raw(group: &'static str, name: &'static str, id: &'static str) -> Case {
    Case {
        raw: true,
        ..case(group, name, id)
    }
}

const G_APPEND: &str = "append, no sync";
const G_BATCH: &str = "append batch of 100, no sync";
const G_SYNC1: &str = "append + fsync each, 1 thread";
const G_SYNC4: &str = "append + fsync each, 4 threads";
const G_BATCH_SYNC: &str = "append batch of 100 + fsync";
const G_SEQ: &str = "sequential read of all";
const G_RANDOM: &str = "random point read";

/// Every storage case, in the order they run and print.
pub const CASES: &[Case] = &[
    krabka(G_APPEND, "krabka append", "krabka-append"),
    case(G_APPEND, "commitlog append_msg", "commitlog-append"),
    raw(G_APPEND, "raw write", "raw-write"),
    krabka(G_BATCH, "krabka append_batch", "krabka-batch"),
    case(G_BATCH, "commitlog append(MessageBuf)", "commitlog-batch"),
    raw(G_BATCH, "raw write of 100", "raw-batch"),
    raw(G_BATCH, "raw write of 100 + CRC-32 each", "raw-batch-crc"),
    krabka(G_SYNC1, "krabka append, EveryAppend", "krabka-sync1"),
    case(G_SYNC1, "okaywal entry commit", "okaywal-sync1"),
    case(
        G_SYNC1,
        "commitlog append + flush (no data fsync)",
        "commitlog-flush1",
    ),
    raw(G_SYNC1, "raw write + sync_data", "raw-sync1"),
    case(
        G_SYNC1,
        "raw pwrite into preallocated file + sync_data",
        "raw-sync1-prealloc",
    ),
    krabka(G_SYNC4, "krabka append, EveryAppend", "krabka-sync4"),
    case(G_SYNC4, "okaywal entry commit", "okaywal-sync4"),
    raw(
        G_SYNC4,
        "raw write + sync_data, file per thread",
        "raw-sync4",
    ),
    krabka(
        G_BATCH_SYNC,
        "krabka append_batch, EveryAppend",
        "krabka-batch-sync",
    ),
    case(
        G_BATCH_SYNC,
        "okaywal 100-chunk entry commit",
        "okaywal-batch-sync",
    ),
    raw(
        G_BATCH_SYNC,
        "raw write of 100 + sync_data",
        "raw-batch-sync",
    ),
    krabka(G_SEQ, "krabka read(seq, 1 MiB worth)", "krabka-read-seq"),
    case(G_SEQ, "commitlog read(off, 1 MiB)", "commitlog-read-seq"),
    case(G_SEQ, "okaywal recovery scan", "okaywal-read-seq"),
    raw(G_SEQ, "raw read, 1 MiB", "raw-read-seq"),
    raw(
        G_SEQ,
        "raw read, 1 MiB + CRC-32 per record",
        "raw-read-seq-crc",
    ),
    krabka(G_RANDOM, "krabka read(seq, 1)", "krabka-read-random"),
    krabka(
        G_RANDOM,
        "krabka read(seq, 1), index_interval_bytes 1",
        "krabka-read-random-dense",
    ),
    case(
        G_RANDOM,
        "commitlog read(off, 1 record)",
        "commitlog-read-random",
    ),
    case(G_RANDOM, "okaywal read_at", "okaywal-read-random"),
    raw(G_RANDOM, "raw pread", "raw-read-random"),
];

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
    let start = Instant::now();
    for i in 0..ops {
        let t = Instant::now();
        op(i)?;
        hist.record(t.elapsed());
    }
    let elapsed = start.elapsed();
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
    let hists: Mutex<Vec<Histogram>> = Mutex::new(Vec::new());
    let start = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (op, hists) = (&op, &hists);
                s.spawn(move || -> Result<()> {
                    let mut h = Histogram::default();
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
    let elapsed = start.elapsed();
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

fn batches(records: u64) -> u64 {
    (records / BATCH as u64).max(1)
}

/// What every case derives from its workload.
pub(super) struct Params {
    /// The value every record carries.
    v: Bytes,
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

/// Runs one case in this process and returns its measurement.
pub fn run_case(id: &str, w: &Workload, dir: &Path) -> Result<Measurement> {
    let p = Params::new(w);
    match id.split_once('-').map_or(id, |(system, _)| system) {
        "krabka" => krabka::run(id, w, &p, dir),
        "commitlog" => commitlog_peer::run(id, w, &p, dir),
        "okaywal" => okaywal_peer::run(id, w, &p, dir),
        "raw" => raw::run(id, &p, dir),
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
