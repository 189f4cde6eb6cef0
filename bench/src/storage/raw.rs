//! Plain files: the machine's limit for each workload.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use krabka_protocol::batch::{Compression, crc32c, encode_messages};
use krabka_storage::segment::{MAX_BATCH_RECORD_BYTES, encode_batch_of_one};
use rustix::fs::{FallocateFlags, fallocate};

use super::files::Segments;
use super::krabka::{fill_krabka, fill_single};
use super::{
    BATCH, Params, READ_CHUNK_BYTES, Rng, THREADS, Workload, distinct_batch_of, message, timed,
    timed_threads,
};
use crate::cost::Meter;
use crate::report::{Histogram, Measurement};
use crate::{BoxError, Result};

fn raw_file(dir: &Path, name: &str) -> Result<File> {
    Ok(OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))?)
}

/// Runs one `raw-*` case.
pub(super) fn run(id: &str, w: &Workload, p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        ref values,
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
        "raw-write-frame" => {
            // The bytes krabka writes for one record (its batch of one), encoded once.
            let mut f = raw_file(dir, "raw")?;
            let mut frame = Vec::new();
            encode_batch_of_one(1, &message(v, 0), &mut frame)?;
            timed(n, 1, vlen, |_| Ok(f.write_all(&frame)?))
        }
        "raw-batch" => {
            // The 100 values krabka's batch append case appends.
            let mut f = raw_file(dir, "raw")?;
            timed(nb, BATCH as u64, vlen, |_| Ok(f.write_all(values)?))
        }
        "raw-sync1" => {
            let mut f = raw_file(dir, "raw")?;
            timed(sync_n, 1, vlen, |_| {
                f.write_all(v)?;
                Ok(f.sync_data()?)
            })
        }
        "raw-sync1-prealloc" => {
            // As krabka's `preallocate` does: the file's blocks are allocated up front
            // (`fallocate`), so fdatasync need not commit a size change to the file system
            // journal (a sparse `set_len` would leave each write a block to allocate).
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(dir.join("raw"))?;
            fallocate(&f, FallocateFlags::empty(), 0, sync_n * vlen as u64)?;
            f.sync_all()?;
            timed(sync_n, 1, vlen, |i| {
                f.write_all_at(v, i * vlen as u64)?;
                Ok(f.sync_data()?)
            })
        }
        "raw-sync1-prealloc-frame" => {
            // The same with the bytes krabka writes for each record (its batch of one, encoded
            // once): a record no longer fills whole pages, so each fdatasync also rewrites the
            // page the previous record ended in.
            let mut frame = Vec::new();
            encode_batch_of_one(1, &message(v, 0), &mut frame)?;
            let flen = frame.len() as u64;
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(dir.join("raw"))?;
            fallocate(&f, FallocateFlags::empty(), 0, sync_n * flen)?;
            f.sync_all()?;
            timed(sync_n, 1, vlen, |i| {
                f.write_all_at(&frame, i * flen)?;
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
            // The floor of a log of v2 batches: the raw batch write plus one CRC-32C over the
            // batch's bytes, computed before the write as a batch writer must.
            let mut f = raw_file(dir, "raw")?;
            timed(nb, BATCH as u64, vlen, |_| {
                std::hint::black_box(crc32c(values));
                Ok(f.write_all(values)?)
            })
        }
        "raw-batch-frame" => {
            // The floor of any writer of this format: the batch krabka writes for the 100
            // records (encoded once, before the timer), its CRC-32C computed and the batch
            // written, per call.
            let mut f = raw_file(dir, "raw")?;
            let batches = v2_batches_of(values, vlen)?;
            timed(nb, BATCH as u64, vlen, |_| {
                for batch in &batches {
                    std::hint::black_box(crc32c(batch.get(21..).unwrap_or_default()));
                    f.write_all(batch)?;
                }
                Ok(())
            })
        }
        "raw-batch-frame-copy" => {
            // The format floor plus the least an encoder adds: each call copies the batch,
            // encoded once before the timer, into a reused buffer (as an encoder writes its
            // bytes once), then computes its CRC-32C and writes it. What `append_batch` does
            // above this is the framing of the records and the log's own bookkeeping.
            let mut f = raw_file(dir, "raw")?;
            let batches = v2_batches_of(values, vlen)?;
            let mut buf = Vec::new();
            timed(nb, BATCH as u64, vlen, |_| {
                for batch in &batches {
                    buf.clear();
                    buf.extend_from_slice(std::hint::black_box(batch));
                    std::hint::black_box(crc32c(buf.get(21..).unwrap_or_default()));
                    f.write_all(&buf)?;
                }
                Ok(())
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
        "raw-read-random" => read_values(p, dir),
        "raw-read-seq" => read_segments(&Segments::of(fill_krabka(dir, w, v)?)?, vlen),
        "raw-read-seq-crc" => {
            read_segments_checked(&Segments::of(fill_krabka(dir, w, v)?)?, vlen, false)
        }
        "raw-read-seq-views" => {
            read_segments_checked(&Segments::of(fill_krabka(dir, w, v)?)?, vlen, true)
        }
        "raw-read-seq-views-single" => {
            read_segments_checked(&Segments::of(fill_single(dir, w, v)?)?, vlen, true)
        }
        "raw-read-random-single" => read_batches_at(&Segments::of(fill_single(dir, w, v)?)?, p),
        "raw-read-random-single-span" => {
            read_index_spans(&Segments::of(fill_single(dir, w, v)?)?, p, false)
        }
        "raw-read-random-single-span-crc" => {
            read_index_spans(&Segments::of(fill_single(dir, w, v)?)?, p, true)
        }
        "raw-read-random-batch" => read_batches_at(&Segments::of(fill_krabka(dir, w, v)?)?, p),
        other => Err(BoxError::from(format!("unknown storage case {other}"))),
    }
}

/// Point reads of a file of bare values (written untimed in batches): the value's bytes alone
/// at a known position.
fn read_values(p: &Params, dir: &Path) -> Result<Measurement> {
    let Params {
        ref v,
        vlen,
        nb,
        reads,
        ..
    } = *p;
    {
        let mut f = raw_file(dir, "raw")?;
        let buf = v.repeat(BATCH);
        for _ in 0..nb {
            f.write_all(&buf)?;
        }
    }
    let total = nb * BATCH as u64;
    let f = File::open(dir.join("raw"))?;
    let mut rng = Rng::new();
    let mut buf = vec![0u8; vlen];
    timed(reads, 1, vlen, |_| {
        Ok(f.read_exact_at(&mut buf, rng.below(total) * vlen as u64)?)
    })
}

/// Reads krabka's segment files through in [`READ_CHUNK_BYTES`] `read` calls, nothing checked.
/// MB/s counts the log's payload, as the krabka rows of the same group.
fn read_segments(segs: &Segments, vlen: usize) -> Result<Measurement> {
    let mut files = segs
        .files
        .iter()
        .map(|(f, _)| f.try_clone())
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut hist = Histogram::default();
    let mut bytes = 0u64;
    let start = Meter::start();
    for f in &mut files {
        loop {
            let t = Instant::now();
            let got = f.read(&mut buf)?;
            if got == 0 {
                break;
            }
            hist.record(t.elapsed());
            bytes += got as u64;
        }
    }
    let elapsed = start.stop();
    if bytes != segs.bytes() {
        return Err(format!("read {bytes} of {} bytes", segs.bytes()).into());
    }
    // Nothing checked: the floor of a reader that trusts its bytes.
    Ok(
        Measurement::new(segs.records * vlen as u64, segs.records, elapsed, &hist)
            .with_crc_bytes(0),
    )
}

/// The floor of any reader of v2 batches that checks them: krabka's segment files read through
/// in [`READ_CHUNK_BYTES`] `pread`s (a batch longer than that read whole), each batch's
/// CRC-32C checked, nothing decoded. With `views`, also the floor of a read that hands every
/// record out as bytes of its own, as `Log::read`'s `Record`s hold their values: each read goes
/// into a buffer the views share, each record's length varint is read and a `Bytes` view of
/// the record made and collected, and the views are dropped before the buffer is reused.
fn read_segments_checked(segs: &Segments, vlen: usize, views: bool) -> Result<Measurement> {
    let mut buf = BytesMut::zeroed(READ_CHUNK_BYTES);
    let mut out: Vec<Bytes> = Vec::with_capacity(if views { READ_CHUNK_BYTES / 64 } else { 0 });
    let mut hist = Histogram::default();
    let (mut bytes, mut batches, mut records, mut crc) = (0u64, 0u64, 0u64, 0u64);
    let start = Meter::start();
    for (f, size) in &segs.files {
        let mut pos = 0u64;
        while pos < *size {
            let t = Instant::now();
            let want = usize::try_from((size - pos).min(buf.len() as u64))?;
            buf.truncate(want);
            f.read_exact_at(&mut buf, pos)?;
            let chunk = buf.freeze();
            let mut at = 0usize;
            while let Some(header) = chunk.get(at..at + 21) {
                let len = u32::from_be_bytes(header[8..12].try_into()?) as usize + 12;
                let stored = u32::from_be_bytes(header[17..21].try_into()?);
                let Some(body) = chunk.get(at + 21..at + len) else {
                    break;
                };
                crc += body.len() as u64;
                if crc32c(body) != stored {
                    return Err(format!("CRC mismatch at byte {}", pos + at as u64).into());
                }
                if views {
                    let mut r = at + 61;
                    while r < at + len {
                        let (n, body) = zigzag_varint(&chunk, r).ok_or("bad record length")?;
                        let end = body + usize::try_from(n)?;
                        out.push(chunk.slice(body..end));
                        records += 1;
                        r = end;
                    }
                }
                batches += 1;
                at += len;
            }
            out.clear();
            hist.record(t.elapsed());
            buf = chunk
                .try_into_mut()
                .map_err(|_| "read buffer still shared")?;
            if at == 0 {
                // A batch longer than the buffer: read it whole next time.
                let len = buf
                    .get(8..12)
                    .and_then(|l| <[u8; 4]>::try_from(l).ok())
                    .map(|l| u32::from_be_bytes(l) as usize + 12)
                    .filter(|&len| len > want && pos + len as u64 <= *size)
                    .ok_or_else(|| format!("torn batch at byte {pos}"))?;
                buf.resize(len, 0);
                continue;
            }
            buf.resize(buf.capacity().max(READ_CHUNK_BYTES), 0);
            pos += at as u64;
            bytes += at as u64;
        }
    }
    let elapsed = start.stop();
    if bytes != segs.bytes() || batches == 0 || (views && records != segs.records) {
        return Err(format!(
            "checked {bytes} of {} bytes, {records} records",
            segs.bytes()
        )
        .into());
    }
    Ok(
        Measurement::new(segs.records * vlen as u64, segs.records, elapsed, &hist)
            .with_crc_bytes(crc),
    )
}

/// A zigzag varint (a v2 record's length) at `at` of `buf`: its value and where it ends.
fn zigzag_varint(buf: &[u8], mut at: usize) -> Option<(i64, usize)> {
    let mut raw = 0u64;
    for shift in (0..35).step_by(7) {
        let b = *buf.get(at)?;
        at += 1;
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(((raw >> 1) as i64 ^ -((raw & 1) as i64), at));
        }
    }
    None
}

/// Point reads of random records, each a bare `pread` of the whole batch that holds it, at a
/// position known in advance (found from the batch headers before the timer): the least any
/// reader that checks the batch's CRC must read.
fn read_batches_at(segs: &Segments, p: &Params) -> Result<Measurement> {
    let batches = segs.batches()?;
    // The batch of each record, by seq - 1 (none needed when every batch holds one record).
    let of_record: Vec<u32> = if batches.len() as u64 == segs.records {
        Vec::new()
    } else {
        let mut of = Vec::with_capacity(usize::try_from(segs.records)?);
        for (i, b) in batches.iter().enumerate() {
            let next = batches.get(i + 1).map_or(segs.records + 1, |n| n.first);
            of.extend(std::iter::repeat_n(
                u32::try_from(i)?,
                usize::try_from(next - b.first)?,
            ));
        }
        of
    };
    let mut buf = vec![0u8; batches.iter().map(|b| b.len as usize).max().unwrap_or(0)];
    let last = segs.records;
    let mut rng = Rng::new();
    timed(p.reads, 1, p.vlen, |_| {
        let i = usize::try_from(rng.below(last))?;
        let b = if of_record.is_empty() {
            batches.get(i)
        } else {
            of_record.get(i).and_then(|&j| batches.get(j as usize))
        }
        .ok_or("no batch for the seq")?;
        let (f, _) = segs.files.get(b.file as usize).ok_or("no file")?;
        let into = buf.get_mut(..b.len as usize).ok_or("read buffer")?;
        Ok(f.read_exact_at(into, b.pos)?)
    })
}

/// The floor of a point read through the log's own sparse `.index`: for each random record a
/// bare `pread` from the index entry at or before it to the end of its batch, both positions
/// known in advance. A reader that steps from an index entry to the record's batch by the batch
/// headers reads at least this much in one call (it cannot know where the batch ends sooner).
/// With `crc`, also checks the CRC-32C of the record's batch (the last bytes read): the floor
/// of a reader that proves what it hands out.
fn read_index_spans(segs: &Segments, p: &Params, crc: bool) -> Result<Measurement> {
    let batches = segs.batches()?;
    if batches.len() as u64 != segs.records {
        return Err("the index-span floor needs a batch per record".into());
    }
    let mut longest = 0u64;
    let mut spans = Vec::with_capacity(batches.len());
    for b in &batches {
        let index = segs.indexes.get(b.file as usize).ok_or("no index")?;
        let (_, from) = index.floor(b.first).ok_or("no index entry")?;
        let len = b.pos + u64::from(b.len) - from;
        longest = longest.max(len);
        spans.push((b.file, from, len, b.len));
    }
    let mut buf = vec![0u8; usize::try_from(longest)?];
    let mut rng = Rng::new();
    timed(p.reads, 1, p.vlen, |_| {
        let &(file, from, len, batch) = spans
            .get(usize::try_from(rng.below(segs.records))?)
            .ok_or("no span for the seq")?;
        let (f, _) = segs.files.get(file as usize).ok_or("no file")?;
        let into = buf.get_mut(..usize::try_from(len)?).ok_or("read buffer")?;
        f.read_exact_at(into, from)?;
        if crc {
            let at = into.len().saturating_sub(usize::try_from(batch)?);
            let batch = into.get(at..).ok_or("no batch in the span")?;
            let stored = batch.get(17..21).ok_or("short batch")?;
            let body = batch.get(21..).ok_or("short batch")?;
            if crc32c(body) != u32::from_be_bytes(stored.try_into()?) {
                return Err(format!("CRC mismatch in the batch read at byte {from}").into());
            }
        }
        Ok(())
    })
}

/// The v2 batches `append_batch` writes for the 100 records of `values` (each `vlen` bytes),
/// encoded once: split as it splits them, into batches of up to `MAX_BATCH_RECORD_BYTES` of
/// records.
fn v2_batches_of(values: &Bytes, vlen: usize) -> Result<Vec<Vec<u8>>> {
    let msgs = distinct_batch_of(values, vlen, 0);
    let mut batches = Vec::new();
    let mut taken = 0;
    while let Some(rest) = msgs.get(taken..).filter(|r| !r.is_empty()) {
        let mut batch = Vec::new();
        let base = i64::try_from(taken)?;
        taken += encode_messages(
            &mut batch,
            base,
            rest,
            Compression::None,
            MAX_BATCH_RECORD_BYTES,
        )?;
        batches.push(batch);
    }
    Ok(batches)
}
