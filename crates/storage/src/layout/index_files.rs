//! The `.index` and `.timeindex` files of a closed segment: writing them from its entries, and
//! the one check of whether they describe its `.log` (what open trusts, and what a read-only
//! tool predicts open will rebuild).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use super::{Seg, SegFile};
use crate::Error;
use crate::fault::FaultInjector;
use crate::index::{OffsetIndex, TimeIndex, encode_indexes};

/// How [`write_indexes`] syncs each file it wrote: `fsync(file, path)`.
pub(crate) type Fsync<'a> = &'a dyn Fn(&File, &Path) -> io::Result<()>;

/// The fsync of recovery, which counts nothing: through a fault injector with no fault armed.
pub(crate) fn plain_fsync(file: &File, path: &Path) -> io::Result<()> {
    FaultInjector::default().sync_file(file, path)
}

/// Writes a closed segment's `.index` and `.timeindex`; returns their total size. Each file is
/// synced with `fsync` when given.
pub(crate) fn write_indexes(seg: &Seg, fsync: Option<Fsync<'_>>) -> Result<u64, Error> {
    let (offsets, times) = seg.all_entries()?;
    let (idx, tidx) = encode_indexes(
        seg.base_seq,
        seg.last_seq,
        seg.size,
        seg.max_timestamp,
        offsets,
        times,
    );
    write_file(&seg.file.index_path, &idx, fsync)?;
    write_file(&seg.file.time_index_path, &tidx, fsync)?;
    Ok((idx.len() + tidx.len()) as u64)
}

fn write_file(path: &Path, bytes: &[u8], fsync: Option<Fsync<'_>>) -> Result<(), Error> {
    let mut f = File::create(path).map_err(|e| Error::io(path, e))?;
    f.write_all(bytes).map_err(|e| Error::io(path, e))?;
    if let Some(fsync) = fsync {
        fsync(&f, path).map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// What the index files of a closed segment are worth to an open of the log.
#[derive(Debug)]
pub(crate) enum IndexFiles {
    /// Both decode and describe the `.log`: open trusts them (the offset index, the time index
    /// and their total size).
    Trusted(OffsetIndex, TimeIndex, u64),
    /// Missing, undecodable or not describing the `.log`: open rebuilds them from it.
    Rebuilt,
    /// One of them cannot be read at all (a directory in its place, no permission): open cannot
    /// replace it either.
    Unreadable,
}

/// Checks a closed segment's index files against a `.log` of `log_len` bytes whose base seq is
/// `base`: both must decode, name `base`, describe a `.log` of exactly `log_len` bytes holding at
/// least one record, and agree with each other on the largest timestamp and on the seq of every
/// entry. Reads only the two index files (never the `.log`); whether the segment continues the
/// one before it is recovery's business.
pub(crate) fn check_indexes(sf: &SegFile, base: u64, log_len: u64) -> IndexFiles {
    let read = |p: &Path| match fs::read(p) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    };
    let (idx_bytes, tidx_bytes) = match (read(&sf.index_path), read(&sf.time_index_path)) {
        (Err(_), _) | (_, Err(_)) => return IndexFiles::Unreadable,
        (Ok(Some(a)), Ok(Some(b))) => (a, b),
        _ => return IndexFiles::Rebuilt,
    };
    let (Ok(idx), Ok(tidx)) = (
        OffsetIndex::decode(&idx_bytes),
        TimeIndex::decode(&tidx_bytes),
    ) else {
        return IndexFiles::Rebuilt;
    };
    let index_bytes = (idx_bytes.len() + tidx_bytes.len()) as u64;
    let consistent = idx.base_seq == base
        && tidx.base_seq == base
        && idx.log_size == log_len
        && idx.max_timestamp == tidx.max_timestamp
        && idx.entries.len() == tidx.entries.len()
        && idx
            .entries
            .iter()
            .zip(&tidx.entries)
            .all(|(&(seq, _), &(_, tseq))| seq == tseq)
        && idx.last_seq >= base;
    if consistent {
        IndexFiles::Trusted(idx, tidx, index_bytes)
    } else {
        IndexFiles::Rebuilt
    }
}

/// Loads a closed segment's indexes if open trusts them ([`check_indexes`]) for a `.log` of
/// `log_len` bytes; also returns the index files' total size.
pub(crate) fn load_indexes(
    sf: &SegFile,
    base: u64,
    log_len: u64,
) -> Option<(OffsetIndex, TimeIndex, u64)> {
    match check_indexes(sf, base, log_len) {
        IndexFiles::Trusted(idx, tidx, bytes) => Some((idx, tidx, bytes)),
        IndexFiles::Rebuilt | IndexFiles::Unreadable => None,
    }
}
