//! `storage`: krabka-storage against `commitlog`, `okaywal` and plain files, on one workload.
//!
//! Every case runs in a child process of its own (so its peak RSS is its own) on a fresh
//! directory. The payload of a record is `value` bytes of pseudo-random data; MB/s counts those
//! payload bytes only, so every system is measured on the same useful work.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use krabka_protocol::Message;
use krabka_storage::{DEFAULT_MAX_BYTES, Log, Options, SyncPolicy};

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
    krabka(G_RANDOM, "krabka read(seq, 1)", "krabka-read-random"),
    case(
        G_RANDOM,
        "commitlog read(off, 1 record)",
        "commitlog-read-random",
    ),
    case(G_RANDOM, "okaywal read_at", "okaywal-read-random"),
    raw(G_RANDOM, "raw pread", "raw-read-random"),
];

/// A small xorshift generator: the same sequence in every case and every process.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator with a fixed seed.
    pub fn new() -> Self {
        Self(0x9E37_79B9_7F4A_7C15)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
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

fn message(v: &Bytes, i: u64) -> Message {
    Message::new(v.clone()).with_timestamp(i as i64)
}

fn krabka_log(dir: &Path, sync: SyncPolicy) -> Result<Log> {
    Ok(Log::open(
        dir,
        Options {
            max_bytes: SEGMENT_BYTES,
            sync,
            ..Options::default()
        },
    )?)
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

/// Builds a krabka log of `w.records` records (untimed).
fn fill_krabka(dir: &Path, w: &Workload, v: &Bytes) -> Result<Log> {
    let log = krabka_log(dir, SyncPolicy::Never)?;
    for b in 0..batches(w.records) {
        log.append_batch(&batch_of(v, b * BATCH as u64))?;
    }
    Ok(log)
}

fn commitlog_options(dir: &Path) -> commitlog::LogOptions {
    let mut o = commitlog::LogOptions::new(dir);
    o.segment_max_bytes(SEGMENT_BYTES as usize)
        .message_max_bytes(16 << 20);
    o
}

fn fill_commitlog(dir: &Path, w: &Workload, v: &Bytes) -> Result<commitlog::CommitLog> {
    let mut log = commitlog::CommitLog::new(commitlog_options(dir))?;
    for _ in 0..batches(w.records) {
        let mut buf: commitlog::message::MessageBuf =
            std::iter::repeat_n(v.as_ref(), BATCH).collect();
        log.append(&mut buf)?;
    }
    Ok(log)
}

/// okaywal's no-op checkpointer: data is never checkpointed away, so everything written stays
/// readable (the closest a WAL gets to a log).
#[derive(Debug)]
struct Keep;

impl okaywal::LogManager for Keep {
    fn recover(&mut self, _entry: &mut okaywal::Entry<'_>) -> std::io::Result<()> {
        Ok(())
    }

    fn checkpoint_to(
        &mut self,
        _last: okaywal::EntryId,
        _entries: &mut okaywal::SegmentReader,
        _wal: &okaywal::WriteAheadLog,
    ) -> std::io::Result<()> {
        Ok(())
    }
}

/// Counts what okaywal's recovery hands over (its only sequential read path).
#[derive(Debug, Default)]
struct Scan {
    bytes: Arc<Mutex<(u64, u64)>>,
}

impl okaywal::LogManager for Scan {
    fn recover(&mut self, entry: &mut okaywal::Entry<'_>) -> std::io::Result<()> {
        if let Some(chunks) = entry.read_all_chunks()? {
            let n: u64 = chunks.iter().map(|c| c.len() as u64).sum();
            if let Ok(mut b) = self.bytes.lock() {
                b.0 += n;
                b.1 += chunks.len() as u64;
            }
        }
        Ok(())
    }

    fn checkpoint_to(
        &mut self,
        _last: okaywal::EntryId,
        _entries: &mut okaywal::SegmentReader,
        _wal: &okaywal::WriteAheadLog,
    ) -> std::io::Result<()> {
        Ok(())
    }
}

fn okaywal_config(dir: &Path) -> okaywal::Configuration {
    okaywal::Configuration::default_for(dir)
        .preallocate_bytes(SEGMENT_BYTES as u32)
        .checkpoint_after_bytes(u64::MAX)
}

/// Writes `w.records` records to okaywal in 100-chunk entries; returns every chunk's position.
fn fill_okaywal(
    wal: &okaywal::WriteAheadLog,
    w: &Workload,
    v: &Bytes,
) -> Result<Vec<okaywal::LogPosition>> {
    let mut positions = Vec::new();
    for _ in 0..batches(w.records) {
        let mut e = wal.begin_entry()?;
        for _ in 0..BATCH {
            positions.push(e.write_chunk(v)?.position);
        }
        e.commit()?;
    }
    Ok(positions)
}

fn raw_file(dir: &Path, name: &str) -> Result<File> {
    Ok(OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))?)
}

/// Runs one case in this process and returns its measurement.
pub fn run_case(id: &str, w: &Workload, dir: &Path) -> Result<Measurement> {
    let v = value(w.value);
    let vlen = w.value;
    let n = w.records.max(1);
    let nb = batches(w.records);
    let sync_n = w.sync_records.max(THREADS as u64);
    let sync_batches = (w.sync_records / 4).max(1);
    let reads = w.random_reads.max(1);
    let per_read = (READ_CHUNK_BYTES / vlen.max(1)).max(1);
    match id {
        "krabka-append" => {
            let log = krabka_log(dir, SyncPolicy::Never)?;
            timed(n, 1, vlen, |i| Ok(log.append(&message(&v, i)).map(drop)?))
        }
        "krabka-batch" => {
            let log = krabka_log(dir, SyncPolicy::Never)?;
            timed(nb, BATCH as u64, vlen, |i| {
                let b = batch_of(&v, i * BATCH as u64);
                Ok(log.append_batch(&b).map(drop)?)
            })
        }
        "krabka-sync1" => {
            let log = krabka_log(dir, SyncPolicy::EveryAppend)?;
            timed(sync_n, 1, vlen, |i| {
                Ok(log.append(&message(&v, i)).map(drop)?)
            })
        }
        "krabka-sync4" => {
            let log = krabka_log(dir, SyncPolicy::EveryAppend)?;
            timed_threads(sync_n, vlen, |_, i| {
                Ok(log.append(&message(&v, i)).map(drop)?)
            })
        }
        "krabka-batch-sync" => {
            let log = krabka_log(dir, SyncPolicy::EveryAppend)?;
            timed(sync_batches, BATCH as u64, vlen, |i| {
                Ok(log
                    .append_batch(&batch_of(&v, i * BATCH as u64))
                    .map(drop)?)
            })
        }
        "krabka-read-seq" => {
            let log = fill_krabka(dir, w, &v)?;
            let last = log.last_seq();
            let mut next = 1;
            let mut hist = Histogram::default();
            let (mut records, mut bytes) = (0u64, 0u64);
            let start = Instant::now();
            while next <= last {
                let t = Instant::now();
                let got = log.read(next, per_read)?;
                hist.record(t.elapsed());
                let Some(r) = got.last() else { break };
                next = r.seq + 1;
                records += got.len() as u64;
                bytes += got
                    .iter()
                    .map(|r| r.message.value.len() as u64)
                    .sum::<u64>();
            }
            Ok(Measurement::new(bytes, records, start.elapsed(), &hist))
        }
        "krabka-read-random" => {
            let log = fill_krabka(dir, w, &v)?;
            let last = log.last_seq();
            let mut rng = Rng::new();
            timed(reads, 1, vlen, |_| {
                let got = log.read(1 + rng.below(last), 1)?;
                if got.len() == 1 {
                    Ok(())
                } else {
                    Err("krabka point read returned no record".into())
                }
            })
        }
        "commitlog-append" => {
            let mut log = commitlog::CommitLog::new(commitlog_options(dir))?;
            timed(n, 1, vlen, |_| Ok(log.append_msg(&v).map(drop)?))
        }
        "commitlog-batch" => {
            let mut log = commitlog::CommitLog::new(commitlog_options(dir))?;
            timed(nb, BATCH as u64, vlen, |_| {
                let mut buf: commitlog::message::MessageBuf =
                    std::iter::repeat_n(v.as_ref(), BATCH).collect();
                Ok(log.append(&mut buf).map(drop)?)
            })
        }
        "commitlog-flush1" => {
            let mut log = commitlog::CommitLog::new(commitlog_options(dir))?;
            timed(sync_n, 1, vlen, |_| {
                log.append_msg(&v)?;
                Ok(log.flush()?)
            })
        }
        "commitlog-read-seq" => {
            let log = fill_commitlog(dir, w, &v)?;
            let end = log.next_offset();
            let mut next = 0;
            let mut hist = Histogram::default();
            let (mut records, mut bytes) = (0u64, 0u64);
            let start = Instant::now();
            while next < end {
                let t = Instant::now();
                let buf = log.read(next, commitlog::ReadLimit::max_bytes(READ_CHUNK_BYTES))?;
                hist.record(t.elapsed());
                use commitlog::message::MessageSet;
                let mut last = None;
                for m in buf.iter() {
                    records += 1;
                    bytes += m.payload().len() as u64;
                    last = Some(m.offset());
                }
                let Some(l) = last else { break };
                next = l + 1;
            }
            Ok(Measurement::new(bytes, records, start.elapsed(), &hist))
        }
        "commitlog-read-random" => {
            let log = fill_commitlog(dir, w, &v)?;
            let end = log.next_offset();
            let mut rng = Rng::new();
            // The limit fits one record and its 20-byte header, not two.
            let limit = vlen + 64;
            timed(reads, 1, vlen, |_| {
                let buf = log.read(rng.below(end), commitlog::ReadLimit::max_bytes(limit))?;
                use commitlog::message::MessageSet;
                if buf.len() == 1 {
                    Ok(())
                } else {
                    Err(format!("commitlog point read returned {} records", buf.len()).into())
                }
            })
        }
        "okaywal-sync1" => {
            let wal = okaywal_config(dir).open(Keep)?;
            let m = timed(sync_n, 1, vlen, |_| {
                let mut e = wal.begin_entry()?;
                e.write_chunk(&v)?;
                Ok(e.commit().map(drop)?)
            });
            wal.shutdown()?;
            m
        }
        "okaywal-sync4" => {
            let wal = okaywal_config(dir).open(Keep)?;
            let m = timed_threads(sync_n, vlen, |_, _| {
                let mut e = wal.begin_entry()?;
                e.write_chunk(&v)?;
                Ok(e.commit().map(drop)?)
            });
            wal.shutdown()?;
            m
        }
        "okaywal-batch-sync" => {
            let wal = okaywal_config(dir).open(Keep)?;
            let m = timed(sync_batches, BATCH as u64, vlen, |_| {
                let mut e = wal.begin_entry()?;
                for _ in 0..BATCH {
                    e.write_chunk(&v)?;
                }
                Ok(e.commit().map(drop)?)
            });
            wal.shutdown()?;
            m
        }
        "okaywal-read-seq" => {
            let wal = okaywal_config(dir).open(Keep)?;
            fill_okaywal(&wal, w, &v)?;
            wal.shutdown()?;
            let scan = Scan::default();
            let counts = Arc::clone(&scan.bytes);
            let start = Instant::now();
            let wal = okaywal_config(dir).open(scan)?;
            let elapsed = start.elapsed();
            wal.shutdown()?;
            let (bytes, records) = *counts.lock().map_err(|_| "poisoned")?;
            // One op: the whole scan.
            let mut hist = Histogram::default();
            hist.record(elapsed);
            Ok(Measurement::new(bytes, records, elapsed, &hist))
        }
        "okaywal-read-random" => {
            let wal = okaywal_config(dir).open(Keep)?;
            let positions = fill_okaywal(&wal, w, &v)?;
            let mut rng = Rng::new();
            let mut buf = Vec::with_capacity(vlen);
            let m = timed(reads, 1, vlen, |_| {
                let i = rng.below(positions.len() as u64) as usize;
                let pos = *positions.get(i).ok_or("no position")?;
                let mut r = wal.read_at(pos)?;
                buf.clear();
                r.read_to_end(&mut buf)?;
                if r.crc_is_valid()? && buf.len() == vlen {
                    Ok(())
                } else {
                    Err("okaywal chunk failed its CRC".into())
                }
            });
            wal.shutdown()?;
            m
        }
        "raw-write" => {
            let mut f = raw_file(dir, "raw")?;
            timed(n, 1, vlen, |_| Ok(f.write_all(&v)?))
        }
        "raw-batch" => {
            let mut f = raw_file(dir, "raw")?;
            let buf = v.repeat(BATCH);
            timed(nb, BATCH as u64, vlen, |_| Ok(f.write_all(&buf)?))
        }
        "raw-sync1" => {
            let mut f = raw_file(dir, "raw")?;
            timed(sync_n, 1, vlen, |_| {
                f.write_all(&v)?;
                Ok(f.sync_data()?)
            })
        }
        "raw-sync1-prealloc" => {
            // As okaywal does: the file already has its final size, so fdatasync need not
            // commit a size change to the file system journal.
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(dir.join("raw"))?;
            f.set_len(sync_n * vlen as u64)?;
            f.sync_all()?;
            timed(sync_n, 1, vlen, |i| {
                f.write_all_at(&v, i * vlen as u64)?;
                Ok(f.sync_data()?)
            })
        }
        "raw-sync4" => {
            let files = (0..THREADS)
                .map(|t| raw_file(dir, &format!("raw{t}")).map(Mutex::new))
                .collect::<Result<Vec<_>>>()?;
            timed_threads(sync_n, vlen, |t, _| {
                let f = files.get(t).ok_or("no file")?;
                let mut f = f.lock().map_err(|_| "poisoned")?;
                f.write_all(&v)?;
                Ok(f.sync_data()?)
            })
        }
        "raw-batch-sync" => {
            let mut f = raw_file(dir, "raw")?;
            let buf = v.repeat(BATCH);
            timed(sync_batches, BATCH as u64, vlen, |_| {
                f.write_all(&buf)?;
                Ok(f.sync_data()?)
            })
        }
        "raw-read-seq" | "raw-read-random" => {
            let path = dir.join("raw");
            {
                let mut f = raw_file(dir, "raw")?;
                let buf = v.repeat(BATCH);
                for _ in 0..nb {
                    f.write_all(&buf)?;
                }
            }
            let total = nb * BATCH as u64;
            let f = File::open(&path)?;
            if id == "raw-read-seq" {
                let mut f = f;
                let mut buf = vec![0u8; per_read * vlen];
                let mut hist = Histogram::default();
                let mut bytes = 0u64;
                let start = Instant::now();
                loop {
                    let t = Instant::now();
                    let got = f.read(&mut buf)?;
                    hist.record(t.elapsed());
                    if got == 0 {
                        break;
                    }
                    bytes += got as u64;
                }
                let elapsed = start.elapsed();
                Ok(Measurement::new(bytes, bytes / vlen as u64, elapsed, &hist))
            } else {
                let mut rng = Rng::new();
                let mut buf = vec![0u8; vlen];
                timed(reads, 1, vlen, |_| {
                    Ok(f.read_exact_at(&mut buf, rng.below(total) * vlen as u64)?)
                })
            }
        }
        other => Err(BoxError::from(format!("unknown storage case {other}"))),
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
