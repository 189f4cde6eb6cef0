//! Index entries loaded at first use, as Kafka loads a segment's index lazily: after an open
//! that trusted the clean-shutdown marker, no `.index` or `.timeindex` is read until a read,
//! a timestamp lookup or a roll needs that segment's entries.
//!
//! What the marker recorded (base and last seq, size, largest timestamp) is what the loaded
//! index files must describe. When they do not (missing, damaged or stale index files), the
//! entries are rebuilt in memory by a scan of the `.log`; when the `.log` itself no longer holds
//! the records the marker names, the lookup fails with [`Error::Damaged`] naming the file and
//! the byte, and nothing is changed on disk. Rebuilt entries replace the index files (as the
//! full recovery rewrites a missing or invalid index), so a tiered copy finds them valid.

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::{SegFile, load_indexes};
use crate::Error;
use crate::fsutil::{self, IoResultExt};
use crate::index::{
    IndexBounds, OffsetEntries, TimeEntries, encode_indexes, floor_and_next, time_floor,
};
use crate::segment::scan_file;

/// A segment's index entries: `(seq, position)` and `(largest timestamp before, seq)`.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    pub(crate) offsets: OffsetEntries,
    pub(crate) times: TimeEntries,
}

/// The on-disk index of a segment as a clean close left it, loaded at first use.
#[derive(Debug)]
pub(crate) struct LazyIndex {
    file: Arc<SegFile>,
    base_seq: u64,
    last_seq: u64,
    /// Bytes of the `.log` the index describes.
    log_size: u64,
    max_timestamp: i64,
    interval: u64,
    /// Whether the segment is closed: its `.log` should be exactly `log_size` bytes long (the
    /// active one may have grown since).
    closed: bool,
    loaded: OnceLock<Arc<Entries>>,
}

impl LazyIndex {
    /// The index of segment `base_seq` (files `file`) holding `base_seq..=last_seq` in its first
    /// `log_size` bytes, with largest timestamp `max_timestamp`; rebuilt with index interval
    /// `interval` when its files do not describe that.
    pub(crate) fn new(
        file: Arc<SegFile>,
        base_seq: u64,
        last_seq: u64,
        log_size: u64,
        max_timestamp: i64,
        interval: u64,
    ) -> Self {
        Self {
            file,
            base_seq,
            last_seq,
            log_size,
            max_timestamp,
            interval,
            closed: false,
            loaded: OnceLock::new(),
        }
    }

    /// The same, for a closed segment (whose length is checked at first use).
    pub(crate) fn closed(self) -> Self {
        Self {
            closed: true,
            ..self
        }
    }

    /// The entries, when loaded already.
    pub(crate) fn get(&self) -> Option<&Entries> {
        self.loaded.get().map(|e| &**e)
    }

    /// The entries, loading them first when needed (from the index files, else by a scan).
    ///
    /// # Errors
    /// [`Error::Damaged`] naming the `.log` when it no longer holds the records the marker
    /// named; [`Error::Io`] when it cannot be read.
    pub(crate) fn load(&self) -> Result<&Entries, Error> {
        if let Some(e) = self.loaded.get() {
            return Ok(e);
        }
        let entries = Arc::new(self.read()?);
        Ok(self.loaded.get_or_init(|| entries))
    }

    fn read(&self) -> Result<Entries, Error> {
        let path = &self.file.log_path;
        let damaged = |position: u64, first_seq: u64, reason: String| Error::Damaged {
            path: path.clone(),
            position,
            reason,
            first_seq,
            last_seq: self.last_seq.max(first_seq),
        };
        // An open that found the directory unchanged did not check the length: a closed `.log`
        // cut or grown since the close is said here. The index still describes the records
        // the close left; a read past where the file now ends fails naming the file and the
        // byte, and bytes past the recorded end are never read.
        let file = File::open(path).at(path)?;
        let len = file.metadata().at(path)?.len();
        if self.closed && len != self.log_size {
            tracing::warn!(
                path = %path.display(),
                len,
                recorded = self.log_size,
                "a closed segment's length changed since the clean close (an open with RecoveryMode::Repair moves damage aside)"
            );
        }
        if let Some((idx, tidx, _)) = load_indexes(&self.file, self.base_seq, self.log_size)
            && idx.last_seq == self.last_seq
            && idx.max_timestamp == self.max_timestamp
        {
            return Ok(Entries {
                offsets: idx.entries,
                times: tidx.entries,
            });
        }
        tracing::warn!(
            path = %path.display(),
            "index files missing or not describing the segment as the clean close left it: rebuilding its index in memory by a scan"
        );
        if len < self.log_size {
            return Err(damaged(
                len,
                self.base_seq,
                format!(
                    "the file is {len} bytes long, but the clean close left {} bytes of records in it, and its index files do not describe them",
                    self.log_size
                ),
            ));
        }
        let mut scan = scan_file(
            &file,
            path,
            self.log_size,
            Some(self.base_seq),
            u64::MAX,
            self.interval,
        )?;
        let next = scan.last_seq.map_or(self.base_seq, |s| s + 1);
        if let Some(p) = scan.problem {
            return Err(damaged(p.position, next, p.reason));
        }
        if scan.last_seq != Some(self.last_seq) {
            return Err(damaged(
                scan.valid_len,
                next,
                format!(
                    "the segment ends at seq {} but the clean close recorded seq {}",
                    next - 1,
                    self.last_seq
                ),
            ));
        }
        let (offsets, times) = scan.index.take();
        let entries = Entries { offsets, times };
        self.rewrite(&entries);
        Ok(entries)
    }

    /// Replaces the segment's index files with the rebuilt entries (each through a synced
    /// temporary file renamed into place, so a concurrent reader of them sees the old file or
    /// the new one). Best effort: the entries in memory are what the log uses.
    fn rewrite(&self, entries: &Entries) {
        let (idx, tidx) = encode_indexes(
            self.base_seq,
            self.last_seq,
            self.log_size,
            self.max_timestamp,
            entries.offsets.clone(),
            entries.times.clone(),
        );
        for (path, bytes) in [
            (&self.file.index_path, idx),
            (&self.file.time_index_path, tidx),
        ] {
            let mut tmp = path.clone().into_os_string();
            tmp.push(".tmp");
            if let Err(e) = fsutil::write_atomic(path, Path::new(&tmp), &bytes) {
                tracing::warn!(path = %path.display(), error = %e, "could not rewrite a rebuilt index file");
            }
        }
    }
}

/// The floor entry for `seq` over `prefix` (the loaded on-disk entries) followed by `tail`
/// (entries added since the open), and the entry after it (see [`floor_and_next`]).
pub(crate) fn offset_floor(prefix: &[(u64, u64)], tail: &[(u64, u64)], seq: u64) -> IndexBounds {
    match tail.first() {
        Some(&(first, _)) if first <= seq => floor_and_next(tail, seq),
        first_of_tail => {
            let (floor, next) = floor_and_next(prefix, seq);
            (floor, next.or(first_of_tail.copied()))
        }
    }
}

/// [`time_floor`] over `prefix` followed by `tail` (see [`offset_floor`]).
pub(crate) fn timestamp_floor(
    prefix: &[(i64, u64)],
    tail: &[(i64, u64)],
    max_timestamp: i64,
    ts: i64,
) -> Option<u64> {
    match tail.first() {
        Some(&(before, _)) if before < ts || prefix.is_empty() => {
            time_floor(tail, max_timestamp, ts)
        }
        _ => time_floor(prefix, max_timestamp, ts),
    }
}
