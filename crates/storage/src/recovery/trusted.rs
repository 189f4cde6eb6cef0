//! The open after a clean close: when the clean-shutdown marker describes every segment file
//! exactly as the directory lists them, the log is built from the marker alone. No index file
//! is read (each segment's entries load at first use, see `layout::lazy`) and no segment is
//! scanned, so the open of a large log costs about what a small one's does.
//!
//! Trusted only when the marker is intact, the mode is not
//! [`Repair`](crate::RecoveryMode::Repair), there is no hole marker, the segment files are
//! exactly the marker's (same bases, contiguous seqs), the active `.log` matches the marker
//! (length, inode, modification time), and the recovery point is not past the marker's last
//! seq. When the directory still has the modification time the close gave it, no entry was
//! created, removed or renamed since, so the directory is not even listed; otherwise it is
//! listed and every closed `.log` must also have the length the close left. Anything else falls
//! back to the full recovery, which still uses the marker for the active segment where it can.
//! (A closed `.log` cut or grown while the directory stayed unchanged is found at its first
//! use, see `layout::lazy`.)

use std::fs;
use std::sync::Arc;

use super::{MAX_SEQ, Recovered, Recoverer};
use crate::Error;
use crate::Hole;
use crate::fsutil::{self, IoResultExt};
use crate::index::IndexBuilder;
use crate::layout::clean::{CleanShutdown, Marker};
use crate::layout::{LazyIndex, Seg, seg_file};
use crate::segment::{QUARANTINE_DIR, segment_paths};

impl Recoverer<'_> {
    /// The log as the marker describes it without listing the directory, when the directory
    /// still has the modification time the close gave it (no entry was created, removed or
    /// renamed since) and there is no quarantine directory; `None` otherwise.
    pub(super) fn trust_unchanged_dir(&mut self) -> Result<Option<Recovered>, Error> {
        let Marker::Intact(m) = &self.marker else {
            return Ok(None);
        };
        if self.repair() {
            return Ok(None);
        }
        let unchanged = fs::metadata(self.dir).is_ok_and(|meta| m.dir_unchanged(&meta));
        if !unchanged || fs::symlink_metadata(self.dir.join(QUARANTINE_DIR)).is_ok() {
            return Ok(None);
        }
        let bases: Vec<u64> = m
            .closed
            .iter()
            .map(|c| c.base_seq)
            .chain([m.base_seq])
            .collect();
        self.trust_marker(&bases, &[], false)
    }

    /// The log as the marker describes it, when it can be trusted (see the module
    /// documentation); `None` to run the full recovery. `check_lengths`: whether to check each
    /// closed `.log`'s length now (else at its first use).
    pub(super) fn trust_marker(
        &mut self,
        bases: &[u64],
        holes: &[Hole],
        check_lengths: bool,
    ) -> Result<Option<Recovered>, Error> {
        let Marker::Intact(m) = &self.marker else {
            return Ok(None);
        };
        if self.repair() || !holes.is_empty() || !describes(m, bases) || self.point > m.last_seq {
            return Ok(None);
        }
        let lengths_hold = !check_lengths
            || m.closed.iter().all(|c| {
                fs::metadata(segment_paths(self.dir, c.base_seq).0)
                    .is_ok_and(|meta| meta.is_file() && meta.len() == c.size)
            });
        if !lengths_hold {
            return Ok(None);
        }
        let sf = seg_file(self.dir, m.base_seq);
        let file = fsutil::open_rw(&sf.log_path, false).at(&sf.log_path)?;
        let meta = file.metadata().at(&sf.log_path)?;
        if !m.matches(m.base_seq, &meta) {
            return Ok(None);
        }
        let interval = self.opts.index_interval_bytes;
        let mut segs: Vec<Seg> = m
            .closed
            .iter()
            .map(|c| {
                let file = seg_file(self.dir, c.base_seq);
                let lazy = LazyIndex::new(
                    Arc::clone(&file),
                    c.base_seq,
                    c.last_seq,
                    c.size,
                    c.max_timestamp,
                    interval,
                )
                .closed();
                Seg {
                    base_seq: c.base_seq,
                    file,
                    open: None,
                    last_seq: c.last_seq,
                    size: c.size,
                    max_timestamp: c.max_timestamp,
                    lazy: Some(Arc::new(lazy)),
                    offsets: Vec::new(),
                    times: Vec::new(),
                    index_bytes: c.index_bytes,
                    hole: None,
                }
            })
            .collect();
        let lazy = LazyIndex::new(
            Arc::clone(&sf),
            m.base_seq,
            m.last_seq,
            m.log_len,
            m.max_timestamp,
            interval,
        );
        segs.push(Seg {
            lazy: Some(Arc::new(lazy)),
            last_seq: m.last_seq,
            size: m.log_len,
            max_timestamp: m.max_timestamp,
            ..Seg::empty_active(m.base_seq, sf, Arc::new(file))
        });
        let builder =
            IndexBuilder::resume_at(interval, m.last_index_pos, m.log_len, m.max_timestamp);
        self.report.clean_shutdown = true;
        Ok(Some(Recovered {
            segs,
            active_builder: Some(builder),
            report: std::mem::take(&mut self.report),
            clean_marker: true,
        }))
    }
}

/// Whether the marker describes a log of exactly the segment files `bases` (sorted), with
/// contiguous seqs, and an active segment that holds records.
fn describes(m: &CleanShutdown, bases: &[u64]) -> bool {
    let Some((&active, closed)) = bases.split_last() else {
        return false;
    };
    if active != m.base_seq || closed.len() != m.closed.len() {
        return false;
    }
    let mut next = closed.first().copied();
    for (c, &base) in m.closed.iter().zip(closed) {
        if c.base_seq != base || Some(base) != next || c.last_seq < base || c.size == 0 {
            return false;
        }
        next = c.last_seq.checked_add(1);
    }
    let entry_ok = m.last_index_pos.is_some_and(|pos| pos < m.log_len);
    next.is_none_or(|n| n == active)
        && active >= 1
        && m.last_seq >= active
        && m.last_seq <= MAX_SEQ
        && m.log_len > 0
        && entry_ok
}
