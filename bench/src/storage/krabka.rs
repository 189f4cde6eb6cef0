//! The krabka-storage cases: a [`Log`] with krabka's default segment size.

use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use krabka_storage::{Log, Options, SyncPolicy};

use super::{
    BATCH, Params, Rng, SEGMENT_BYTES, Workload, batch_of, batches, message, timed, timed_threads,
};
use crate::report::{Histogram, Measurement};
use crate::{BoxError, Result};

fn krabka_log(dir: &Path, sync: SyncPolicy) -> Result<Log> {
    Ok(Log::open(dir, krabka_options(sync))?)
}

fn krabka_options(sync: SyncPolicy) -> Options {
    Options {
        max_bytes: SEGMENT_BYTES,
        sync,
        ..Options::default()
    }
}

/// Builds a krabka log of `w.records` records (untimed) with `opts`.
fn fill_krabka_with(dir: &Path, w: &Workload, v: &Bytes, opts: Options) -> Result<Log> {
    let log = Log::open(dir, opts)?;
    for b in 0..batches(w.records) {
        log.append_batch(&batch_of(v, b * BATCH as u64))?;
    }
    Ok(log)
}

/// Builds a krabka log of `w.records` records (untimed).
fn fill_krabka(dir: &Path, w: &Workload, v: &Bytes) -> Result<Log> {
    fill_krabka_with(dir, w, v, krabka_options(SyncPolicy::Never))
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
    } = *p;
    match id {
        "krabka-append" => {
            let log = krabka_log(dir, SyncPolicy::Never)?;
            timed(n, 1, vlen, |i| Ok(log.append(&message(v, i)).map(drop)?))
        }
        "krabka-batch" => {
            let log = krabka_log(dir, SyncPolicy::Never)?;
            timed(nb, BATCH as u64, vlen, |i| {
                let b = batch_of(v, i * BATCH as u64);
                Ok(log.append_batch(&b).map(drop)?)
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
        "krabka-batch-sync" => {
            let log = krabka_log(dir, SyncPolicy::EveryAppend)?;
            timed(sync_batches, BATCH as u64, vlen, |i| {
                Ok(log.append_batch(&batch_of(v, i * BATCH as u64)).map(drop)?)
            })
        }
        "krabka-read-seq" => {
            let log = fill_krabka(dir, w, v)?;
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
        "krabka-read-random" => random_reads(&fill_krabka(dir, w, v)?, reads, vlen),
        "krabka-read-random-dense" => {
            // An index entry per record, as commitlog keeps (Kafka's index.interval.bytes = 1).
            let opts = Options {
                index_interval_bytes: 1,
                ..krabka_options(SyncPolicy::Never)
            };
            random_reads(&fill_krabka_with(dir, w, v, opts)?, reads, vlen)
        }
        other => Err(BoxError::from(format!("unknown storage case {other}"))),
    }
}
