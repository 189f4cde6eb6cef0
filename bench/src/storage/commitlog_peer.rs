//! The `commitlog` crate's cases.

use std::path::Path;
use std::time::Instant;

use bytes::Bytes;

use super::{BATCH, Params, READ_CHUNK_BYTES, Rng, SEGMENT_BYTES, Workload, batches, timed};
use crate::cost::Meter;
use crate::report::{Histogram, Measurement};
use crate::{BoxError, Result};

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

/// Runs one `commitlog-*` case.
pub(super) fn run(id: &str, w: &Workload, p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        vlen,
        n,
        nb,
        sync_n,
        reads,
        ..
    } = *p;
    match id {
        "commitlog-append" => {
            let mut log = commitlog::CommitLog::new(commitlog_options(dir))?;
            timed(n, 1, vlen, |_| Ok(log.append_msg(v).map(drop)?))
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
                log.append_msg(v)?;
                Ok(log.flush()?)
            })
        }
        "commitlog-read-seq" => {
            let log = fill_commitlog(dir, w, v)?;
            let end = log.next_offset();
            let mut next = 0;
            let mut hist = Histogram::default();
            let (mut records, mut bytes) = (0u64, 0u64);
            let start = Meter::start();
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
            Ok(Measurement::new(bytes, records, start.stop(), &hist))
        }
        "commitlog-read-random" => {
            let log = fill_commitlog(dir, w, v)?;
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
        other => Err(BoxError::from(format!("unknown storage case {other}"))),
    }
}
