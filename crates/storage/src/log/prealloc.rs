//! Preallocated segment files ([`Options::preallocate`](crate::Options::preallocate)): the
//! active segment's `.log` is given space ahead of its batches, [`PREALLOCATE_STEP`] at a time
//! (never past `max_bytes`, unless one batch needs it), so that a synced append writes into
//! space the file already has and its `fdatasync` commits a size change once per step, not at
//! every append, while a log holds at most one step of unused disk;
//! the file is cut back to its true end (the log's own count of bytes, never the file's size)
//! before a roll or a close syncs it, so a closed segment's file holds only its batches.

use rustix::fs::{FallocateFlags, fallocate};

use super::Inner;
use super::append::Appender;
use crate::Error;

/// Bytes given to the active segment's file ahead of its batches at a time: 4 MiB, so a log of
/// 1 KiB synced appends changes its file's size once per 4,096 appends, and a process with many
/// partitions holds at most this much unused disk per partition.
pub const PREALLOCATE_STEP: u64 = 4 << 20;

impl Inner {
    /// Before a write of `len` bytes: gives the active segment's file space up to
    /// [`PREALLOCATE_STEP`] past it when it has less, when the options ask for it and it has
    /// not failed for this segment. A filesystem that cannot (no `fallocate`, no space) leaves
    /// the file as it was: appends then grow it, as without the option.
    pub(super) fn preallocate(&self, ap: &mut Appender, len: u64) {
        if !self.opts.preallocate || ap.preallocated {
            return;
        }
        let need = ap.size.saturating_add(len);
        if ap.file_len >= need {
            return;
        }
        let want = need
            .saturating_add(PREALLOCATE_STEP)
            .min(self.opts.max_bytes.max(need));
        match fallocate(&*ap.file, FallocateFlags::empty(), 0, want) {
            Ok(()) => ap.file_len = want,
            Err(e) => {
                // Not tried again for this segment.
                ap.preallocated = true;
                tracing::warn!(
                    path = %ap.active.log_path.display(),
                    bytes = want,
                    error = %e,
                    "could not preallocate the active segment; appends grow it instead"
                );
                // A failed fallocate may have extended the file in part: its size is known
                // again from the file itself (its tail past the batches can only be zeros).
                if let Ok(m) = ap.file.metadata() {
                    ap.file_len = m.len();
                }
            }
        }
    }

    /// Cuts the active segment's file back to its true end when it is longer (its
    /// preallocated space): before a roll or a close syncs it, so that what is synced, indexed
    /// and later copied to a remote tier is exactly its batches. A failure poisons the log.
    pub(super) fn trim_active(&self, ap: &mut Appender) -> Result<(), Error> {
        if ap.file_len <= ap.size {
            return Ok(());
        }
        if let Err(e) = ap.file.set_len(ap.size) {
            let e = Error::io(&ap.active.log_path, e);
            self.poison(&e);
            return Err(e);
        }
        ap.file_len = ap.size;
        Ok(())
    }
}
