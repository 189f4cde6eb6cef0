//! The `okaywal` crate's cases: a write-ahead log that is never checkpointed away.

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{BATCH, Params, Rng, SEGMENT_BYTES, Workload, batches, timed, timed_threads};
use crate::cost::Meter;
use crate::report::{Histogram, Measurement};
use crate::{BoxError, Result};

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

/// Runs one `okaywal-*` case.
pub(super) fn run(id: &str, w: &Workload, p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        vlen,
        sync_n,
        sync_batches,
        reads,
        ..
    } = *p;
    match id {
        "okaywal-sync1" => {
            let wal = okaywal_config(dir).open(Keep)?;
            let m = timed(sync_n, 1, vlen, |_| {
                let mut e = wal.begin_entry()?;
                e.write_chunk(v)?;
                Ok(e.commit().map(drop)?)
            });
            wal.shutdown()?;
            m
        }
        "okaywal-sync4" => {
            let wal = okaywal_config(dir).open(Keep)?;
            let m = timed_threads(sync_n, vlen, |_, _| {
                let mut e = wal.begin_entry()?;
                e.write_chunk(v)?;
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
                    e.write_chunk(v)?;
                }
                Ok(e.commit().map(drop)?)
            });
            wal.shutdown()?;
            m
        }
        "okaywal-read-seq" => {
            let wal = okaywal_config(dir).open(Keep)?;
            fill_okaywal(&wal, w, v)?;
            wal.shutdown()?;
            let scan = Scan::default();
            let counts = Arc::clone(&scan.bytes);
            let start = Meter::start();
            let wal = okaywal_config(dir).open(scan)?;
            let elapsed = start.stop();
            wal.shutdown()?;
            let (bytes, records) = *counts.lock().map_err(|_| "poisoned")?;
            // One op: the whole scan.
            let mut hist = Histogram::default();
            hist.record(elapsed.elapsed);
            Ok(Measurement::new(bytes, records, elapsed, &hist))
        }
        "okaywal-read-random" => {
            let wal = okaywal_config(dir).open(Keep)?;
            let positions = fill_okaywal(&wal, w, v)?;
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
        other => Err(BoxError::from(format!("unknown storage case {other}"))),
    }
}
