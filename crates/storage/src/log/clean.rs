//! The log's side of the clean-shutdown marker (see `layout::clean`): writing it at the end of
//! a clean close, and removing it before the first write after an open that trusted it.

use super::Inner;
use super::append::Appender;
use crate::Error;
use crate::fault::Op;
use crate::fsutil::{self, IoResultExt};
use crate::layout::clean::{
    CleanShutdown, ClosedSegment, epoch_parts, remove_clean_shutdown, stamp, stamp_time,
    write_clean_shutdown,
};
use crate::layout::write_indexes;

impl Inner {
    /// The last step of a clean close, under the append lock, once every record is synced and
    /// the recovery point written: writes the active segment's index files (synced), stamps and
    /// syncs its `.log`, then writes the marker describing it. Nothing to do for an empty active
    /// segment (a scan of it reads nothing) or when the marker this open trusted still holds.
    pub(super) fn write_clean_shutdown(&self, ap: &Appender) -> Result<(), Error> {
        if ap.clean_marker {
            return Ok(());
        }
        let st = self.state.read();
        let Some(seg) = st.active().filter(|s| s.size > 0 && s.open.is_some()) else {
            return Ok(());
        };
        let path = &seg.file.log_path;
        if ap.file.metadata().at(path)?.len() != seg.size {
            // Bytes past the published records (cannot happen on a log that is not poisoned):
            // leave it to the scan.
            return Ok(());
        }
        write_indexes(seg, Some(&|f, p| self.sync_data(f, p)))?;
        stamp(&ap.file, path)?;
        self.faults
            .check(Op::Fsync)
            .and_then(|()| self.counters.fsync(|| ap.file.sync_all()))
            .at(path)?;
        let meta = ap.file.metadata().at(path)?;
        let (offsets, _) = seg.all_entries()?;
        let n = st.segs.len();
        let marker = CleanShutdown {
            max_timestamp: seg.max_timestamp,
            last_index_pos: offsets.last().map(|&(_, pos)| pos),
            closed: st
                .segs
                .iter()
                .take(n.saturating_sub(1))
                .filter(|s| s.hole.is_none())
                .map(|s| ClosedSegment {
                    base_seq: s.base_seq,
                    last_seq: s.last_seq,
                    size: s.size,
                    max_timestamp: s.max_timestamp,
                    index_bytes: s.index_bytes,
                })
                .collect(),
            dir_mtime: epoch_parts(stamp_time()),
            ..CleanShutdown::describe(seg.base_seq, seg.last_seq, &meta)
        };
        self.faults.check(Op::Fsync).at(&self.dir)?;
        write_clean_shutdown(&self.dir, &marker)
    }

    /// Before the first write after open: removes the clean-shutdown marker and the active
    /// segment's index files, which describe the file as a close (or a crash during a roll)
    /// left it. When open trusted the marker, the directory is synced too, so that no later
    /// open takes the marker for a description of the file, and a failure poisons the log
    /// (nothing was written yet); otherwise they describe no file as it is, and removing them
    /// is tidying up, best effort.
    pub(super) fn invalidate_clean_shutdown(&self, ap: &mut Appender) -> Result<(), Error> {
        if !ap.leftovers {
            return Ok(());
        }
        if ap.clean_marker {
            // The active segment's entries on disk are about to go: load them now.
            // (Loaded outside the state lock first, so readers do not wait for the file reads.)
            let lazy = self.state.read().active().and_then(|s| s.lazy.clone());
            let materialized = lazy.map_or(Ok(()), |l| l.load().map(drop)).and_then(|()| {
                self.state
                    .write()
                    .segs
                    .last_mut()
                    .map_or(Ok(()), |seg| seg.materialize())
            });
            if let Err(e) = materialized {
                // The segment no longer holds what the marker says: remove the marker, so
                // that the next open runs a full recovery, and refuse writes until then.
                let _ = remove_clean_shutdown(&self.dir).and_then(|()| self.fsync_dir());
                self.poison(&e);
                return Err(e);
            }
        }
        let removed = remove_clean_shutdown(&self.dir).and_then(|()| {
            for path in [&ap.active.index_path, &ap.active.time_index_path] {
                fsutil::remove_if_exists(path).at(path)?;
            }
            Ok(())
        });
        if ap.clean_marker {
            if let Err(e) = removed.and_then(|()| self.fsync_dir()) {
                self.poison(&e);
                return Err(e);
            }
            ap.clean_marker = false;
        }
        ap.leftovers = false;
        Ok(())
    }
}
