//! Starting an empty log at a later seq (see [`Log::start_at`](super::Log::start_at)).

use std::sync::Arc;

use super::append::Appender;
use super::{Inner, SegFile};
use crate::Error;
use crate::fsutil::{self, IoResultExt};
use crate::layout::{Seg, seg_file};

impl Inner {
    /// Makes `seq` the seq of the next append of a log without records (see
    /// [`Log::start_at`](super::Log::start_at)).
    pub(super) fn start_at(&self, seq: u64) -> Result<(), Error> {
        let mut guard = self.appender.lock();
        self.check_poisoned()?;
        let ap = &mut *guard;
        if !self.check_start(ap, seq)? {
            return Ok(());
        }
        self.invalidate_clean_shutdown(ap)?;
        // The old (empty) segment files go first: a crash in between leaves a directory with
        // no segment, which opens as a new log the caller starts again.
        let old: Vec<(u64, Arc<SegFile>)> = self
            .state
            .read()
            .segs
            .iter()
            .filter(|s| s.hole.is_none())
            .map(|s| (s.base_seq, Arc::clone(&s.file)))
            .collect();
        for (_, f) in &old {
            for path in [&f.index_path, &f.time_index_path, &f.log_path] {
                fsutil::remove_if_exists(path).at(path)?;
            }
        }
        self.fsync_dir().inspect_err(|e| self.poison(e))?;
        let file = self
            .create_segment_file(seq)
            .inspect_err(|e| self.poison(e))?;
        self.fsync_dir().inspect_err(|e| self.poison(e))?;
        let sf = seg_file(&self.dir, seq);
        let file = Arc::new(file);
        self.state.write().segs = vec![Seg::empty_active(seq, Arc::clone(&sf), Arc::clone(&file))];
        for (_, f) in &old {
            self.fds.remove(f);
        }
        self.unsynced_closed.lock().clear();
        self.sync_state.lock().restart_at(seq - 1);
        ap.switch_to(sf, file, self.opts.index_interval_bytes);
        ap.next_seq = seq;
        self.write_recovery_point(seq - 1)
            .inspect_err(|e| self.poison(e))?;
        tracing::info!(dir = %self.dir.display(), seq, "empty log now starts at a new seq");
        Ok(())
    }

    /// Whether the log may start at `seq`: `Ok(false)` when it already does, an error when it
    /// holds records or `seq` is below its next seq.
    fn check_start(&self, ap: &Appender, seq: u64) -> Result<bool, Error> {
        let (has_records, last) = {
            let st = self.state.read();
            let has = st
                .segs
                .iter()
                .any(|s| s.hole.is_none() && s.last_seq >= s.base_seq);
            (has, st.last_seq())
        };
        if has_records {
            return Err(Error::NotEmpty {
                dir: self.dir.clone(),
                last_seq: last,
            });
        }
        if seq == 0 || seq < ap.next_seq {
            return Err(Error::InvalidStart {
                seq,
                next_seq: ap.next_seq,
            });
        }
        Ok(seq != ap.next_seq)
    }
}
