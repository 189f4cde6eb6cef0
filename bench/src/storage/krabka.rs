//! The krabka-storage cases: a [`Log`] with krabka's default segment size.

use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use krabka_protocol::batch::encode_messages;
use krabka_storage::{Compression, Log, Options, SyncPolicy};

use super::files::Segments;
use super::{
    BATCH, Params, READ_CHUNK_BYTES, Rng, SEGMENT_BYTES, Workload, batch_of, batches,
    distinct_batch_of, message, timed, timed_threads,
};
use crate::cost::Meter;
use crate::report::{Histogram, Measurement};
use crate::{BoxError, Result};

fn krabka_log(dir: &Path, sync: SyncPolicy) -> Result<Log> {
    Ok(Log::open(dir, krabka_options(sync))?)
}

/// Options with an index entry per record (Kafka's `index.interval.bytes = 1`, commitlog's
/// density).
fn dense_options() -> Options {
    Options {
        index_interval_bytes: 1,
        ..krabka_options(SyncPolicy::Never)
    }
}

fn krabka_options(sync: SyncPolicy) -> Options {
    Options {
        max_bytes: SEGMENT_BYTES,
        sync,
        ..Options::default()
    }
}

/// [`krabka_options`] with `SyncPolicy::EveryAppend` and `preallocate` as given.
fn prealloc_options(preallocate: bool) -> Options {
    Options {
        preallocate,
        ..krabka_options(SyncPolicy::EveryAppend)
    }
}

/// Prints to stderr (beside the measurement, which it does not change) how many records each
/// fsync of a synced-append case covered: the group commit's batching, a count rather than a
/// time.
fn report_fsyncs(log: &Log) {
    let s = log.stats();
    let per = s.appends as f64 / s.fsyncs.max(1) as f64;
    eprintln!(
        "fsyncs={} appends={} records_per_fsync={per:.2}",
        s.fsyncs, s.appends
    );
}

/// Builds a krabka log of `w.records` records (untimed) with `opts`.
fn fill_krabka_with(dir: &Path, w: &Workload, v: &Bytes, opts: Options) -> Result<Log> {
    let log = Log::open(dir, opts)?;
    for b in 0..batches(w.records) {
        log.append_batch(&batch_of(v, b * BATCH as u64))?;
    }
    Ok(log)
}

/// Builds a krabka log of `w.records` records in batches of [`BATCH`] (untimed).
pub(super) fn fill_krabka(dir: &Path, w: &Workload, v: &Bytes) -> Result<Log> {
    fill_krabka_with(dir, w, v, krabka_options(SyncPolicy::Never))
}

/// Builds a krabka log of `w.records` records, one `append` each (untimed), with `opts`.
fn fill_single_with(dir: &Path, w: &Workload, v: &Bytes, opts: Options) -> Result<Log> {
    let log = Log::open(dir, opts)?;
    for i in 0..w.records.max(1) {
        log.append(&message(v, i))?;
    }
    Ok(log)
}

/// Builds a krabka log of `w.records` records, one `append` each (untimed).
pub(super) fn fill_single(dir: &Path, w: &Workload, v: &Bytes) -> Result<Log> {
    fill_single_with(dir, w, v, krabka_options(SyncPolicy::Never))
}

/// Times `nb` `append_batch` calls of [`BATCH`] records with `compression`; then rolls the
/// log (untimed) so every segment has its index files and records the bytes on disk.
fn append_batches(dir: &Path, p: &Params, compression: Compression) -> Result<Measurement> {
    let log = Log::open(
        dir,
        Options {
            compression,
            ..krabka_options(SyncPolicy::Never)
        },
    )?;
    // The caller's messages exist before the call, as the raw case's values do: built once,
    // each call gives them the timestamps of their seqs.
    let mut b = distinct_batch_of(&p.values, p.vlen, 0);
    let m = timed(p.nb, BATCH as u64, p.vlen, |i| {
        for (j, m) in b.iter_mut().enumerate() {
            m.timestamp = (i * BATCH as u64 + j as u64) as i64;
        }
        Ok(log.append_batch(&b).map(drop)?)
    })?;
    log.roll()?;
    Ok(m.with_disk_bytes(log.bytes()))
}

/// Reads the whole log through `read_batches` in [`READ_CHUNK_BYTES`] budgets; with
/// `records`, reads every record of every batch (counting its value bytes), else counts the
/// bytes delivered only.
fn read_batches(log: &Log, vlen: usize, records: bool) -> Result<Measurement> {
    let last = log.last_seq();
    let file_bytes: u64 = log.segments().iter().map(|s| s.size).sum();
    let (mut next, mut delivered, mut values, mut count) = (1, 0u64, 0u64, 0u64);
    let mut hist = Histogram::default();
    let start = Meter::start();
    while next <= last {
        let t = Instant::now();
        let got = log.read_batches(next, READ_CHUNK_BYTES)?;
        if records {
            for r in got.records() {
                let r = r?;
                values += r.value.as_ref().map_or(0, |v| v.len() as u64);
                count += 1;
            }
        }
        hist.record(t.elapsed());
        if got.is_empty() {
            return Err(format!("read_batches({next}) returned nothing before seq {last}").into());
        }
        delivered += got.bytes().len() as u64;
        next = got.next_seq();
    }
    let elapsed = start.stop();
    if delivered != file_bytes || (records && (count != last || values != last * vlen as u64)) {
        return Err(format!(
            "read {delivered} of {file_bytes} bytes, {count} records of {values} value bytes"
        )
        .into());
    }
    Ok(Measurement::new(last * vlen as u64, last, elapsed, &hist))
}

/// Reads the whole log through `Log::read` of `per_read` records a call (decoded records).
fn read_seq(log: &Log, per_read: usize) -> Result<Measurement> {
    let last = log.last_seq();
    let mut next = 1;
    let mut hist = Histogram::default();
    let (mut records, mut bytes) = (0u64, 0u64);
    let start = Meter::start();
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
    Ok(Measurement::new(bytes, records, start.stop(), &hist))
}

/// The decoded sequential read of a log of single appends (a batch per record).
fn read_seq_single(dir: &Path, w: &Workload, v: &Bytes, per_read: usize) -> Result<Measurement> {
    let log = fill_single(dir, w, v)?;
    let m = read_seq(&log, per_read)?;
    Ok(m.with_crc_bytes(Segments::of(log)?.crc_bytes()?))
}

/// Point reads of random seqs of `log`, timed one by one.
fn random_reads(log: &Log, reads: u64, vlen: usize) -> Result<Measurement> {
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

/// Runs one `krabka-*` case.
pub(super) fn run(id: &str, w: &Workload, p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        vlen,
        n,
        nb,
        sync_n,
        sync_batches,
        reads,
        per_read,
        ..
    } = *p;
    match id {
        "krabka-append" => {
            // One message, built before the timer (the raw case's value is too), restamped.
            let log = krabka_log(dir, SyncPolicy::Never)?;
            let mut m = message(v, 0);
            timed(n, 1, vlen, |i| {
                m.timestamp = i as i64;
                Ok(log.append(&m).map(drop)?)
            })
        }
        "krabka-batch" => append_batches(dir, p, Compression::None),
        "krabka-batch-lz4" => append_batches(dir, p, Compression::Lz4),
        "krabka-batch-zstd" => append_batches(dir, p, Compression::Zstd),
        "krabka-raw-batch" => {
            // A producer's batch, encoded before the timer (its base offset 0): the log checks
            // it, writes its own base offset and stores it as it came.
            let log = krabka_log(dir, SyncPolicy::Never)?;
            let mut batch = Vec::new();
            let msgs = distinct_batch_of(&p.values, vlen, 0);
            let taken = encode_messages(&mut batch, 0, &msgs, Compression::None, usize::MAX)?;
            if taken != BATCH {
                return Err(format!("{taken} of {BATCH} records in one batch").into());
            }
            timed(nb, BATCH as u64, vlen, |_| {
                Ok(log.append_raw_batch(&batch).map(drop)?)
            })
        }
        "krabka-sync1" => {
            let log = krabka_log(dir, SyncPolicy::EveryAppend)?;
            timed(sync_n, 1, vlen, |i| {
                Ok(log.append(&message(v, i)).map(drop)?)
            })
        }
        "krabka-sync4" => {
            let log = krabka_log(dir, SyncPolicy::EveryAppend)?;
            timed_threads(sync_n, vlen, |_, i| {
                Ok(log.append(&message(v, i)).map(drop)?)
            })
        }
        // The same with the segment file preallocated (`fallocate` to its `max_bytes` at its
        // first write), or explicitly not, whatever the default.
        "krabka-sync1-prealloc" | "krabka-sync1-grow" => {
            let log = Log::open(dir, prealloc_options(id.ends_with("-prealloc")))?;
            let m = timed(sync_n, 1, vlen, |i| {
                Ok(log.append(&message(v, i)).map(drop)?)
            });
            report_fsyncs(&log);
            m
        }
        "krabka-sync4-prealloc" | "krabka-sync4-grow" => {
            let log = Log::open(dir, prealloc_options(id.ends_with("-prealloc")))?;
            let m = timed_threads(sync_n, vlen, |_, i| {
                Ok(log.append(&message(v, i)).map(drop)?)
            });
            report_fsyncs(&log);
            m
        }
        "krabka-batch-sync" => {
            // Built once, restamped per call, as the no-sync batch case does.
            let log = krabka_log(dir, SyncPolicy::EveryAppend)?;
            let mut b = batch_of(v, 0);
            timed(sync_batches, BATCH as u64, vlen, |i| {
                for (j, m) in b.iter_mut().enumerate() {
                    m.timestamp = (i * BATCH as u64 + j as u64) as i64;
                }
                Ok(log.append_batch(&b).map(drop)?)
            })
        }
        "krabka-read-seq" => {
            let log = fill_krabka(dir, w, v)?;
            let m = read_seq(&log, per_read)?;
            Ok(m.with_crc_bytes(Segments::of(log)?.crc_bytes()?))
        }
        "krabka-read-seq-single" => read_seq_single(dir, w, v, per_read),
        "krabka-batches-seq" | "krabka-batches-records" => {
            let log = fill_krabka(dir, w, v)?;
            let m = read_batches(&log, vlen, id == "krabka-batches-records")?;
            Ok(m.with_crc_bytes(Segments::of(log)?.crc_bytes()?))
        }
        "krabka-read-random" => random_reads(&fill_krabka(dir, w, v)?, reads, vlen),
        "krabka-read-random-dense" => {
            random_reads(&fill_krabka_with(dir, w, v, dense_options())?, reads, vlen)
        }
        "krabka-read-random-single" => random_reads(&fill_single(dir, w, v)?, reads, vlen),
        "krabka-read-random-single-dense" => {
            random_reads(&fill_single_with(dir, w, v, dense_options())?, reads, vlen)
        }
        other => Err(BoxError::from(format!("unknown storage case {other}"))),
    }
}
