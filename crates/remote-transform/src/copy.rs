//! The copy side: transform a segment's local files into scratch files the inner store copies.
//!
//! The `.log` is read one chunk at a time and its chunks are compressed and sealed by a few
//! threads (about two chunks in memory per thread); the transformed `.log` is written after a
//! hole the size of the header, which is known up front (fixed-size entries) and written last.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use bytes::Bytes;
use krabka_remote_storage::{IndexSource, IndexType, LogSegmentData, RemoteLogSegmentId};
use parking_lot::Mutex;

use crate::cache::OpenSegment;
use crate::codec::{Compressor, Encoder, header_tag};
use crate::config::{ChunkCompression, TransformConfig};
use crate::crypto::DataKey;
use crate::error::TransformError;
use crate::format::{
    ChunkEntry, EncryptionHeader, FLAG_AES_GCM, FLAG_ZSTD, Header, INDEX_SLOTS, IndexEntry,
    chunk_count, header_len, index_object, index_slot,
};
use crate::scratch::{self, Scratch};

/// A transformed copy, ready for the inner store.
pub(crate) struct Prepared {
    /// The scratch files (kept until the inner copy is done).
    pub data: LogSegmentData,
    /// The encoded header.
    pub header: Vec<u8>,
    /// The header decoded, for the cache.
    pub open: OpenSegment,
    /// Size of the transformed `.log` object.
    pub stored_size: u32,
    pub _dir: Scratch,
}

fn too_large(segment: &RemoteLogSegmentId, object: &str, reason: String) -> TransformError {
    TransformError::TooLarge {
        segment: segment.clone(),
        object: object.to_owned(),
        reason,
    }
}

/// Index bodies in `IndexType::ALL` order, transformed.
type IndexBodies = Vec<(IndexType, Vec<u8>)>;

/// Transforms `data` into scratch files under a fresh directory; with `sweep`, first removes
/// the scratch directories killed processes left behind (`scratch::sweep`).
pub(crate) fn prepare(
    config: &TransformConfig,
    segment: &RemoteLogSegmentId,
    data: &LogSegmentData,
    sweep: bool,
) -> Result<Prepared, TransformError> {
    let root = config
        .scratch_dir()
        .map_or_else(std::env::temp_dir, Path::to_path_buf);
    let dir = scratch::create(&root, segment)?;
    if sweep {
        scratch::sweep(&root, dir.path());
    }
    let log_path = &data.log_segment;
    let mut src = File::open(log_path).map_err(io(segment, log_path))?;
    let size = src.metadata().map_err(io(segment, log_path))?.len();
    let plaintext_size = u32::try_from(size).map_err(|_| {
        too_large(
            segment,
            "log",
            format!("{size} bytes do not fit u32 positions"),
        )
    })?;
    let chunk_size = config.chunk_size();
    let count = u32::try_from(chunk_count(size, chunk_size))
        .map_err(|_| too_large(segment, "log", "too many chunks".to_owned()))?;

    let (key, encryption, flags) = data_key(config, segment)?;

    // Indexes first: the header records their stored lengths and checksums.
    let mut encoder = Encoder {
        segment,
        key: key.as_ref(),
        compressor: Compressor::new(config.compression(), segment)?,
        chunk_count: count,
    };
    let (indexes, bodies) = transform_indexes(&mut encoder, data)?;

    // The `.log`: a hole for the header, then the chunks.
    let mlen = header_len(key.is_some(), u64::from(count));
    let out_path = dir.path().join("segment.log");
    let (mut dst, chunks, stored_size) = write_chunks(
        config,
        &mut encoder,
        (&mut src, log_path),
        &out_path,
        mlen,
        size,
    )?;

    let tp = segment.topic_id_partition();
    let mut header = Header {
        flags,
        topic_id: tp.topic_id(),
        partition: tp.partition(),
        segment_uuid: segment.id(),
        chunk_size,
        plaintext_size,
        encryption,
        indexes,
        chunks,
        tag: None,
    };
    if let Some(key) = &key {
        header.tag = Some(header_tag(key, segment, &header.authenticated_bytes())?);
    }
    let header_bytes = header.encode();
    write_header(&mut dst, &out_path, &header_bytes, segment)?;
    drop(dst);

    let out = write_index_objects(segment, dir.path(), out_path, &header_bytes, bodies)?;
    let offsets = chunk_offsets(mlen, &header);
    Ok(Prepared {
        data: out,
        header: header_bytes,
        open: OpenSegment {
            header,
            offsets,
            key,
        },
        stored_size,
        _dir: dir,
    })
}

/// A new data key wrapped for the header when encrypting, and the transform flags.
fn data_key(
    config: &TransformConfig,
    segment: &RemoteLogSegmentId,
) -> Result<(Option<DataKey>, Option<EncryptionHeader>, u8), TransformError> {
    let (key, encryption) = match config.keys() {
        Some(keys) => {
            let (key, encryption_header) = DataKey::generate(keys.as_ref(), segment)?;
            (Some(key), Some(encryption_header))
        }
        None => (None, None),
    };
    let mut flags = 0;
    if matches!(config.compression(), ChunkCompression::Zstd { .. }) {
        flags |= FLAG_ZSTD;
    }
    if key.is_some() {
        flags |= FLAG_AES_GCM;
    }
    Ok((key, encryption, flags))
}

/// Creates the transformed `.log` at `out_path` and writes its chunks after an `mlen`-byte
/// hole for the header; returns the file, the chunk table and the object's size.
fn write_chunks(
    config: &TransformConfig,
    encoder: &mut Encoder<'_>,
    (src, log_path): (&mut File, &PathBuf),
    out_path: &PathBuf,
    mlen: u64,
    size: u64,
) -> Result<(File, Vec<ChunkEntry>, u32), TransformError> {
    let segment = encoder.segment;
    let mut dst = File::create(out_path).map_err(io(segment, out_path))?;
    dst.seek(SeekFrom::Start(mlen))
        .map_err(io(segment, out_path))?;
    let chunks = transform_chunks(config, encoder, (src, log_path), (&mut dst, out_path), size)?;
    ensure_done(src, log_path, segment)?;
    let stored: u64 = mlen + chunks.iter().map(|c| u64::from(c.stored_len)).sum::<u64>();
    let stored_size = u32::try_from(stored).map_err(|_| {
        too_large(
            segment,
            "log",
            format!("the transformed object would be {stored} bytes, over u32 positions"),
        )
    })?;
    Ok((dst, chunks, stored_size))
}

/// Writes the encoded header into the hole at the head of the transformed `.log`.
fn write_header(
    dst: &mut File,
    out_path: &Path,
    header_bytes: &[u8],
    segment: &RemoteLogSegmentId,
) -> Result<(), TransformError> {
    dst.seek(SeekFrom::Start(0))
        .map_err(io(segment, out_path))?;
    dst.write_all(header_bytes).map_err(io(segment, out_path))?;
    dst.flush().map_err(io(segment, out_path))
}

/// An I/O error on `path` of `segment`'s copy.
fn io<'a>(
    segment: &'a RemoteLogSegmentId,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> TransformError + 'a {
    let path = path.to_path_buf();
    move |e| TransformError::io(segment, path, e)
}

/// Reads and transforms every index `data` has; returns the header's index table and the
/// transformed bodies.
fn transform_indexes(
    encoder: &mut Encoder<'_>,
    data: &LogSegmentData,
) -> Result<([Option<IndexEntry>; INDEX_SLOTS], IndexBodies), TransformError> {
    let mut indexes = [None; INDEX_SLOTS];
    let mut bodies: IndexBodies = Vec::new();
    for t in IndexType::ALL {
        let plain = match data.index_source(t) {
            None => continue,
            Some(IndexSource::File(p)) => std::fs::read(p).map_err(io(encoder.segment, p))?,
            Some(IndexSource::Bytes(b)) => b.to_vec(),
        };
        let slot = index_slot(t);
        let (body, entry) = encoder.index(slot, &index_object(t), plain)?;
        if let Some(s) = indexes.get_mut(slot) {
            *s = Some(entry);
        }
        bodies.push((t, body));
    }
    Ok((indexes, bodies))
}

/// Fails when the source `.log` has bytes past those transformed (it grew meanwhile).
fn ensure_done(
    src: &mut File,
    log_path: &Path,
    segment: &RemoteLogSegmentId,
) -> Result<(), TransformError> {
    let mut probe = [0u8; 1];
    if src.read(&mut probe).map_err(io(segment, log_path))? != 0 {
        return Err(TransformError::io(
            segment,
            log_path.to_path_buf(),
            std::io::Error::other("the segment file grew while it was being copied"),
        ));
    }
    Ok(())
}

/// Writes each index object (the header, then its transformed body) under `dir` (the
/// leader-epoch checkpoint stays in memory); returns the files for the inner store.
fn write_index_objects(
    segment: &RemoteLogSegmentId,
    dir: &Path,
    log: PathBuf,
    header_bytes: &[u8],
    bodies: IndexBodies,
) -> Result<LogSegmentData, TransformError> {
    let mut out = LogSegmentData::new(
        log,
        dir.join("segment.index"),
        dir.join("segment.timeindex"),
    );
    for (t, body) in bodies {
        let mut object = Vec::with_capacity(header_bytes.len() + body.len());
        object.extend_from_slice(header_bytes);
        object.extend_from_slice(&body);
        let path = dir.join(format!("segment{}", t.suffix()));
        match t {
            IndexType::LeaderEpoch => {
                out.leader_epoch_index = Bytes::from(object);
                continue;
            }
            IndexType::Transaction => out.transaction_index = Some(path.clone()),
            IndexType::ProducerSnapshot => out.producer_snapshot_index = Some(path.clone()),
            _ => {}
        }
        std::fs::write(&path, &object).map_err(io(segment, &path))?;
    }
    Ok(out)
}

/// The stored offset of each chunk after a `mlen`-byte header, plus the object's end.
fn chunk_offsets(mlen: u64, header: &Header) -> Vec<u64> {
    let mut offsets = Vec::with_capacity(header.chunks.len() + 1);
    let mut at = mlen;
    offsets.push(at);
    for c in &header.chunks {
        at += u64::from(c.stored_len);
        offsets.push(at);
    }
    offsets
}

/// Reads, transforms and writes every chunk, in order; returns the chunk table.
fn transform_chunks(
    config: &TransformConfig,
    encoder: &mut Encoder<'_>,
    (src, src_path): (&mut File, &PathBuf),
    (dst, dst_path): (&mut File, &PathBuf),
    size: u64,
) -> Result<Vec<ChunkEntry>, TransformError> {
    let files = ChunkFiles {
        segment: encoder.segment,
        src_path,
        dst_path,
        chunk: u64::from(config.chunk_size()),
        size,
    };
    let count = encoder.chunk_count;
    let threads = config.copy_threads().min(count as usize);
    if threads <= 1 {
        let mut entries = Vec::with_capacity(count as usize);
        for i in 0..count {
            let (body, entry) = encoder.chunk(i, files.read(i, src)?)?;
            files.write(dst, &body)?;
            entries.push(entry);
        }
        return Ok(entries);
    }
    let mut workers = Vec::with_capacity(threads);
    for _ in 0..threads {
        workers.push(Encoder {
            segment: encoder.segment,
            key: encoder.key,
            compressor: Compressor::new(config.compression(), encoder.segment)?,
            chunk_count: count,
        });
    }
    transform_in_parallel(workers, &files, src, dst, count)
}

/// The source `.log` and the transformed one, read and written a chunk at a time.
struct ChunkFiles<'a> {
    segment: &'a RemoteLogSegmentId,
    src_path: &'a PathBuf,
    dst_path: &'a PathBuf,
    /// Plaintext bytes per chunk.
    chunk: u64,
    /// Plaintext bytes in all.
    size: u64,
}

impl ChunkFiles<'_> {
    /// Reads chunk `i` (the next one in `src`).
    fn read(&self, i: u32, src: &mut File) -> Result<Vec<u8>, TransformError> {
        let start = u64::from(i) * self.chunk;
        let len = self.chunk.min(self.size - start) as usize;
        let mut buf = vec![0u8; len];
        src.read_exact(&mut buf)
            .map_err(|e| TransformError::io(self.segment, self.src_path.clone(), e))?;
        Ok(buf)
    }

    /// Appends a transformed chunk.
    fn write(&self, dst: &mut File, body: &[u8]) -> Result<(), TransformError> {
        dst.write_all(body)
            .map_err(|e| TransformError::io(self.segment, self.dst_path.clone(), e))
    }
}

/// The chunks transformed by `workers` threads, at most two chunks per thread in memory,
/// written in order as they complete.
fn transform_in_parallel(
    workers: Vec<Encoder<'_>>,
    files: &ChunkFiles<'_>,
    src: &mut File,
    dst: &mut File,
    count: u32,
) -> Result<Vec<ChunkEntry>, TransformError> {
    type Done = (u32, Result<(Vec<u8>, ChunkEntry), TransformError>);
    let segment = files.segment;
    let threads = workers.len();
    let gone = || TransformError::Crypto {
        segment: segment.clone(),
        operation: "a chunk worker thread stopped",
    };
    let mut entries = Vec::with_capacity(count as usize);
    let (job_tx, job_rx) = mpsc::sync_channel::<(u32, Vec<u8>)>(threads);
    let job_rx = Mutex::new(job_rx);
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    std::thread::scope(|scope| {
        // Owned here, so dropping it below closes the queue while the workers run.
        let job_tx = job_tx;
        for mut worker in workers {
            let (job_rx, done_tx) = (&job_rx, done_tx.clone());
            scope.spawn(move || {
                loop {
                    let job = job_rx.lock().recv();
                    let Ok((i, plain)) = job else { break };
                    if done_tx.send((i, worker.chunk(i, plain))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done_tx);
        let window = 2 * threads as u32;
        let mut pending = BTreeMap::new();
        let (mut next_read, mut next_write) = (0u32, 0u32);
        let result = (|| {
            while next_write < count {
                while next_read < count && next_read - next_write < window {
                    job_tx
                        .send((next_read, files.read(next_read, src)?))
                        .map_err(|_| gone())?;
                    next_read += 1;
                }
                let (i, done) = done_rx.recv().map_err(|_| gone())?;
                pending.insert(i, done?);
                while let Some((body, entry)) = pending.remove(&next_write) {
                    files.write(dst, &body)?;
                    entries.push(entry);
                    next_write += 1;
                }
            }
            Ok(())
        })();
        // Closing the job queue stops the workers; the scope joins them.
        drop(job_tx);
        result
    })?;
    Ok(entries)
}
