//! Plain files: the machine's limit for each workload.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use super::{BATCH, Params, Rng, THREADS, timed, timed_threads};
use crate::report::{Histogram, Measurement};
use crate::{BoxError, Result};

fn raw_file(dir: &Path, name: &str) -> Result<File> {
    Ok(OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))?)
}

/// Runs one `raw-*` case.
pub(super) fn run(id: &str, p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        vlen,
        n,
        nb,
        sync_n,
        sync_batches,
        ..
    } = *p;
    match id {
        "raw-write" => {
            let mut f = raw_file(dir, "raw")?;
            timed(n, 1, vlen, |_| Ok(f.write_all(v)?))
        }
        "raw-batch" => {
            let mut f = raw_file(dir, "raw")?;
            let buf = v.repeat(BATCH);
            timed(nb, BATCH as u64, vlen, |_| Ok(f.write_all(&buf)?))
        }
        "raw-sync1" => {
            let mut f = raw_file(dir, "raw")?;
            timed(sync_n, 1, vlen, |_| {
                f.write_all(v)?;
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
                f.write_all_at(v, i * vlen as u64)?;
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
                f.write_all(v)?;
                Ok(f.sync_data()?)
            })
        }
        "raw-batch-crc" => {
            // The floor of any log that checksums each record: the raw batch write plus a
            // CRC-32 of each value, computed before the write as a framing writer must.
            let mut f = raw_file(dir, "raw")?;
            let buf = v.repeat(BATCH);
            timed(nb, BATCH as u64, vlen, |_| {
                let mut acc = 0u32;
                for value in buf.chunks(vlen.max(1)) {
                    acc ^= crc32fast::hash(value);
                }
                std::hint::black_box(acc);
                Ok(f.write_all(&buf)?)
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
        "raw-read-seq" | "raw-read-random" => read(id, p, dir),
        "raw-read-seq-crc" => read_checked(p, dir),
        other => Err(BoxError::from(format!("unknown storage case {other}"))),
    }
}

/// The two read cases: the file written in batches (untimed), then read through in
/// [`READ_CHUNK_BYTES`](super::READ_CHUNK_BYTES) calls or at random records.
fn read(id: &str, p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        vlen,
        nb,
        reads,
        per_read,
        ..
    } = *p;
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

/// The floor of any reader that checks each record: a file of `[len u32][CRC-32 u32][value]`
/// frames (written untimed), read through in [`READ_CHUNK_BYTES`](super::READ_CHUNK_BYTES)
/// calls, each frame's CRC checked and nothing decoded.
fn read_checked(p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        vlen,
        nb,
        per_read,
        ..
    } = *p;
    let path = dir.join("raw");
    {
        let mut frame = Vec::with_capacity(8 + vlen);
        frame.extend_from_slice(&u32::try_from(vlen)?.to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(v).to_le_bytes());
        frame.extend_from_slice(v);
        let buf = frame.repeat(BATCH);
        let mut f = raw_file(dir, "raw")?;
        for _ in 0..nb {
            f.write_all(&buf)?;
        }
    }
    let f = File::open(&path)?;
    // The same read size as `raw-read-seq` (room for one frame at the least).
    let mut buf = vec![0u8; (per_read * vlen).max(vlen + 8)];
    let mut hist = Histogram::default();
    let (mut bytes, mut records, mut pos) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    loop {
        let t = Instant::now();
        let got = f.read_at(&mut buf, pos)?;
        if got == 0 {
            hist.record(t.elapsed());
            break;
        }
        let mut at = 0usize;
        while let Some(header) = buf.get(at..at + 8) {
            let len = u32::from_le_bytes(header[..4].try_into()?) as usize;
            let stored = u32::from_le_bytes(header[4..].try_into()?);
            let Some(value) = buf
                .get(at + 8..at + 8 + len)
                .filter(|_| at + 8 + len <= got)
            else {
                break;
            };
            if crc32fast::hash(value) != stored {
                return Err(format!("CRC mismatch at byte {}", pos + at as u64).into());
            }
            bytes += len as u64;
            records += 1;
            at += 8 + len;
        }
        hist.record(t.elapsed());
        if at == 0 {
            return Err(format!("frame at byte {pos} longer than the read buffer").into());
        }
        pos += at as u64;
    }
    Ok(Measurement::new(bytes, records, start.elapsed(), &hist))
}
