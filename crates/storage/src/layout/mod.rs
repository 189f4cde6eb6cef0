//! The layout of a log directory as the log and its recovery share it: a segment's files and
//! published state ([`Seg`]), its index entries loaded at first use ([`lazy`]), the index files
//! of a closed segment ([`index_files`]), the files beside the segments that record the log's
//! state (the recovery point, the clean-shutdown marker, the accepted holes) and the explicit
//! holes a repair left in `DIR/quarantine/` ([`hole`]).
//!
//! [`Log`](crate::Log) writes these files and recovery reads (and, under a repair, writes)
//! them: both import them from here, neither from the other; the read-only
//! [`view`](crate::view) reads them too.

pub(crate) mod accepted;
pub(crate) mod clean;
pub(crate) mod hole;
pub(crate) mod index_files;
pub(crate) mod lazy;
pub(crate) mod recovery_point;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::RwLock;

pub(crate) use self::index_files::{load_indexes, write_indexes};
pub(crate) use self::lazy::LazyIndex;
use self::lazy::{offset_floor, timestamp_floor};
use crate::Error;
use crate::index::{OffsetEntries, TimeEntries};
use crate::segment::segment_paths;

/// The paths of a segment's files, and the read descriptor of its `.log` once closed.
#[derive(Debug)]
pub(crate) struct SegFile {
    pub(crate) log_path: PathBuf,
    pub(crate) index_path: PathBuf,
    pub(crate) time_index_path: PathBuf,
    /// The open `.log` of the closed segment, while the log's descriptor cache keeps it.
    pub(crate) read_fd: FdSlot,
}

/// A closed segment's read descriptor, held with the segment so that a read finds it with
/// one uncontended shared lock, no search of a shared map and no list update; the log's
/// descriptor cache decides which slots hold one (see `FdCache`).
#[derive(Debug, Default)]
pub(crate) struct FdSlot {
    pub(crate) file: RwLock<Option<Arc<File>>>,
    /// Set by each read that uses the descriptor, cleared by the cache's clock hand passing
    /// it: a descriptor used since the hand last passed is kept for one more turn.
    pub(crate) used: AtomicBool,
}

/// A segment's published state: what readers may see. An explicit hole (seqs a repair moved
/// aside or found missing) is a `Seg` too, with `hole` set and no data, so seqs stay contiguous
/// across the list.
#[derive(Debug)]
pub(crate) struct Seg {
    pub(crate) base_seq: u64,
    pub(crate) file: Arc<SegFile>,
    /// The open `.log` file of the active segment (shared with the appender); `None` for closed
    /// segments, whose files the log opens on demand (through its descriptor cache).
    pub(crate) open: Option<Arc<File>>,
    /// Seq of the last published record (`base_seq - 1` when empty).
    pub(crate) last_seq: u64,
    /// Bytes of published batches.
    pub(crate) size: u64,
    pub(crate) max_timestamp: i64,
    /// Index entries on disk that are loaded at first use (after an open that trusted the
    /// clean-shutdown marker); `offsets` and `times` follow them.
    pub(crate) lazy: Option<Arc<LazyIndex>>,
    pub(crate) offsets: Vec<(u64, u64)>,
    pub(crate) times: Vec<(i64, u64)>,
    /// Bytes of its index files on disk (0 for the active segment).
    pub(crate) index_bytes: u64,
    /// For an explicit hole: its marker file in the quarantine directory.
    pub(crate) hole: Option<PathBuf>,
}

impl Seg {
    /// A new, empty active segment `base` with files `file`, open for appends as `open`.
    pub(crate) fn empty_active(base: u64, file: Arc<SegFile>, open: Arc<File>) -> Seg {
        Seg {
            base_seq: base,
            file,
            open: Some(open),
            last_seq: base - 1,
            size: 0,
            max_timestamp: i64::MIN,
            lazy: None,
            offsets: Vec::new(),
            times: Vec::new(),
            index_bytes: 0,
            hole: None,
        }
    }

    /// The last batch boundary in `pos + 1..=limit` known without reading the file: the
    /// position of an indexed batch, or the end of the segment's published batches; `None`
    /// when none is known (or the entries that would tell are not loaded).
    pub(crate) fn boundary_within(&self, pos: u64, limit: u64) -> Option<u64> {
        if self.size <= limit {
            return Some(self.size).filter(|&end| end > pos);
        }
        let within = |entries: &[(u64, u64)]| {
            let i = entries.partition_point(|&(_, at)| at <= limit);
            entries
                .get(i.checked_sub(1)?)
                .map(|&(_, at)| at)
                .filter(|&at| at > pos)
        };
        within(&self.offsets).or_else(|| within(&self.lazy.as_ref()?.get()?.offsets))
    }

    /// The last index entry with a seq `<= seq` and the entry after it; `Err` with the lazy
    /// index to load first when the answer may be in entries not loaded yet.
    pub(crate) fn offset_floor(
        &self,
        seq: u64,
    ) -> Result<crate::index::IndexBounds, Arc<LazyIndex>> {
        match &self.lazy {
            None => Ok(offset_floor(&[], &self.offsets, seq)),
            Some(lazy) => match lazy.get() {
                Some(e) => Ok(offset_floor(&e.offsets, &self.offsets, seq)),
                None if self.offsets.first().is_some_and(|&(s, _)| s <= seq) => {
                    Ok(offset_floor(&[], &self.offsets, seq))
                }
                None => Err(Arc::clone(lazy)),
            },
        }
    }

    /// The seq to scan from for the first record with a timestamp `>= ts` (`None` when the
    /// segment holds none); `Err` as for [`offset_floor`](Self::offset_floor).
    pub(crate) fn time_floor(&self, ts: i64) -> Result<Option<u64>, Arc<LazyIndex>> {
        if self.max_timestamp < ts {
            return Ok(None);
        }
        match &self.lazy {
            None => Ok(timestamp_floor(&[], &self.times, self.max_timestamp, ts)),
            Some(lazy) => match lazy.get() {
                Some(e) => Ok(timestamp_floor(
                    &e.times,
                    &self.times,
                    self.max_timestamp,
                    ts,
                )),
                None if self.times.first().is_some_and(|&(before, _)| before < ts) => {
                    Ok(timestamp_floor(&[], &self.times, self.max_timestamp, ts))
                }
                None => Err(Arc::clone(lazy)),
            },
        }
    }

    /// Every index entry, the lazy ones (loaded when needed) first.
    pub(crate) fn all_entries(&self) -> Result<(OffsetEntries, TimeEntries), Error> {
        let Some(lazy) = &self.lazy else {
            return Ok((self.offsets.clone(), self.times.clone()));
        };
        let loaded = lazy.load()?;
        let offsets = loaded
            .offsets
            .iter()
            .chain(&self.offsets)
            .copied()
            .collect();
        let times = loaded.times.iter().chain(&self.times).copied().collect();
        Ok((offsets, times))
    }

    /// Loads the lazy entries (when there are any) and keeps them in `offsets` and `times`,
    /// ahead of the entries added since.
    pub(crate) fn materialize(&mut self) -> Result<(), Error> {
        if self.lazy.is_some() {
            (self.offsets, self.times) = self.all_entries()?;
            self.lazy = None;
        }
        Ok(())
    }
}

/// The paths of segment `base`'s files in `dir`.
pub(crate) fn seg_file(dir: &Path, base: u64) -> Arc<SegFile> {
    let (log_path, index_path, time_index_path) = segment_paths(dir, base);
    Arc::new(SegFile {
        log_path,
        index_path,
        time_index_path,
        read_fd: FdSlot::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boundary_within_is_an_indexed_batch_start_or_the_published_end() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = Arc::new(File::create(dir.path().join("x"))?);
        let mut seg = Seg::empty_active(1, seg_file(dir.path(), 1), file);
        seg.size = 10_000;
        seg.offsets = vec![(1, 0), (11, 1_000), (21, 5_000), (31, 9_000)];
        // The last indexed start within the limit, past `pos`.
        assert_eq!(seg.boundary_within(0, 4_999), Some(1_000));
        assert_eq!(seg.boundary_within(0, 5_000), Some(5_000));
        assert_eq!(seg.boundary_within(1_000, 8_999), Some(5_000));
        // None past `pos` within the limit.
        assert_eq!(seg.boundary_within(1_000, 4_999), None);
        // The end of the published batches.
        assert_eq!(seg.boundary_within(5_000, 10_000), Some(10_000));
        assert_eq!(seg.boundary_within(10_000, u64::MAX), None);
        Ok(())
    }
}
