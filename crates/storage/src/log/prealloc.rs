//! Preallocated segment files ([`Options::preallocate`](crate::Options::preallocate)): the
//! active segment's `.log` is given its whole `max_bytes` at its first write, so that a synced
//! append writes into space the file already has and its `fdatasync` commits no size change;
//! the file is cut back to its true end (the log's own count of bytes, never the file's size)
//! before a roll or a close syncs it, so a closed segment's file holds only its batches.

use rustix::fs::{FallocateFlags, fallocate};

use super::Inner;
use super::append::Appender;
use crate::Error;

impl Inner {
    /// Gives the active segment's file its `max_bytes` when the options ask for it and it has
    /// not been tried for this segment yet. A filesystem that cannot (no `fallocate`, no
    /// space) leaves the file as it was: appends then grow it, as without the option.
    pub(super) fn preallocate(&self, ap: &mut Appender) {
        if !self.opts.preallocate || ap.preallocated {
            return;
        }
        ap.preallocated = true;
        let want = self.opts.max_bytes;
        if ap.file_len >= want {
            return;
        }
        match fallocate(&*ap.file, FallocateFlags::empty(), 0, want) {
            Ok(()) => ap.file_len = want,
            Err(e) => {
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
