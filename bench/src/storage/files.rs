//! krabka's segment files read as plain files: where each record batch is, found once
//! (untimed) from the batch headers, so the raw cases can read exactly what krabka stores.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use krabka_storage::Log;
use krabka_storage::index::OffsetIndexView;
use krabka_storage::segment::{batch_len, peek_batch};

use crate::Result;

/// Where a v2 batch's CRC-32C starts (its `attributes`): the bytes before it are not checked.
const CRC_FROM: u64 = 21;

/// Bytes read per step of the walk.
const WALK_CHUNK: usize = 1 << 20;

/// One record batch of a segment file (24 bytes: a log of single appends has one per record).
#[derive(Clone, Copy, Debug)]
pub(super) struct BatchAt {
    /// Its byte in its file.
    pub pos: u64,
    /// The seq of its first record.
    pub first: u64,
    /// Its length.
    pub len: u32,
    /// Index of its file in [`Segments::files`].
    pub file: u32,
}

/// A closed log's segment files, opened for reading, and its record count.
pub(super) struct Segments {
    /// Each `.log` file and its length, in seq order.
    pub files: Vec<(File, u64)>,
    /// Records in the log.
    pub records: u64,
    /// Each file's `.index` as the log wrote it, parsed (same order as `files`).
    pub indexes: Vec<OffsetIndexView>,
}

impl Segments {
    /// The segment files of `log`, which is closed (dropped) first.
    pub fn of(log: Log) -> Result<Segments> {
        let records = log.last_seq();
        let paths: Vec<(PathBuf, PathBuf, u64)> = log
            .segments()
            .into_iter()
            .filter(|s| s.size > 0)
            .map(|s| (s.log_path, s.index_path, s.size))
            .collect();
        // Closing writes the active segment's index files too.
        log.close()?;
        let (mut files, mut indexes) = (Vec::new(), Vec::new());
        for (log_path, index_path, size) in paths {
            files.push((File::open(&log_path)?, size));
            indexes.push(OffsetIndexView::parse(std::fs::read(&index_path)?)?);
        }
        Ok(Segments {
            files,
            records,
            indexes,
        })
    }

    /// Bytes the CRC-32Cs of all the batches cover: what a reader of the whole log that
    /// checks every batch once checks.
    pub fn crc_bytes(&self) -> Result<u64> {
        Ok(self
            .batches()?
            .iter()
            .map(|b| u64::from(b.len).saturating_sub(CRC_FROM))
            .sum())
    }

    /// Bytes of all the files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, size)| size).sum()
    }

    /// Every batch of every file, in order, read from their headers; checked to hold every
    /// seq of the log once, in order.
    pub fn batches(&self) -> Result<Vec<BatchAt>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; WALK_CHUNK];
        let mut expect = 1;
        let mut push = |file: usize, pos: u64, first: u64, last: u64, len: usize| -> Result<()> {
            if first != expect {
                return Err(
                    format!("batch at byte {pos} starts at seq {first}, not {expect}").into(),
                );
            }
            expect = last + 1;
            out.push(BatchAt {
                pos,
                first,
                len: u32::try_from(len)?,
                file: u32::try_from(file)?,
            });
            Ok(())
        };
        for (file, (f, size)) in self.files.iter().enumerate() {
            let mut pos = 0u64;
            while pos < *size {
                let want = usize::try_from((size - pos).min(WALK_CHUNK as u64))?;
                let chunk = buf.get_mut(..want).ok_or("walk buffer")?;
                f.read_exact_at(chunk, pos)?;
                let mut at = 0usize;
                while let Some(rest) = chunk.get(at..) {
                    let Some(len) = batch_len(rest) else { break };
                    if len > rest.len() {
                        if at == 0 {
                            // One batch longer than the chunk: its header tells its length
                            // (checked when the whole batch is read below).
                            let mut whole = vec![0u8; len];
                            f.read_exact_at(&mut whole, pos)?;
                            let (first, last, _) = peek_batch(&whole)
                                .ok_or_else(|| format!("no batch at byte {pos}"))?;
                            push(file, pos, first, last, len)?;
                            at = len;
                        }
                        break;
                    }
                    let (first, last, len) = peek_batch(rest)
                        .ok_or_else(|| format!("no batch at byte {}", pos + at as u64))?;
                    push(file, pos + at as u64, first, last, len)?;
                    at += len;
                }
                if at == 0 {
                    return Err(format!("no batch at byte {pos}").into());
                }
                pos += at as u64;
            }
        }
        if expect != self.records + 1 {
            return Err(
                format!("batches end at seq {}, log at {}", expect - 1, self.records).into(),
            );
        }
        Ok(out)
    }
}
