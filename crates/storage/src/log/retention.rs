//! Retention: dropping whole segments from the front of the log, never the active one.

use super::{Inner, Seg};
use crate::Error;
use crate::fsutil::{self, IoResultExt};

impl Inner {
    /// Drops whole segments below `keep_from` (see [`Log::delete_before`](super::Log::delete_before)).
    pub(super) fn delete_before(&self, keep_from: u64) -> Result<u64, Error> {
        self.drop_oldest(|seg, _| seg.last_seq < keep_from)
    }

    /// Drops the oldest segments while the log is over `target` bytes.
    pub(super) fn trim_over_bytes(&self, target: u64) -> Result<u64, Error> {
        self.drop_oldest(|_, total| total > target)
    }

    /// Drops the oldest segments whose records are all older than `ts`.
    pub(super) fn delete_older_than(&self, ts: i64) -> Result<u64, Error> {
        self.drop_oldest(|seg, _| seg.max_timestamp < ts)
    }

    /// Drops segments from the front while `drop(segment, current total bytes)` holds and the
    /// segment is not the active one.
    pub(super) fn drop_oldest(
        &self,
        mut should_drop: impl FnMut(&Seg, u64) -> bool,
    ) -> Result<u64, Error> {
        // The append lock orders retention with rolls.
        let _ap = self.appender.lock();
        let victims: Vec<Seg> = {
            let mut st = self.state.write();
            let mut total = st.bytes();
            let mut n = 0;
            while n + 1 < st.segs.len() {
                let Some(seg) = st.segs.get(n) else { break };
                if !should_drop(seg, total) {
                    break;
                }
                total -= seg.size + seg.index_bytes;
                n += 1;
            }
            st.segs.drain(..n).collect()
        };
        if victims.is_empty() {
            return Ok(0);
        }
        let mut freed = 0;
        for seg in victims.iter().filter(|s| s.hole.is_none()) {
            // Index files first: a crash in between leaves a segment whose index is rebuilt.
            for path in [
                &seg.file.index_path,
                &seg.file.time_index_path,
                &seg.file.log_path,
            ] {
                fsutil::remove_if_exists(path).at(path)?;
            }
            self.fds.remove(&seg.file);
            self.counters.segment_deleted();
            freed += seg.size + seg.index_bytes;
        }
        self.fsync_dir()?;
        Ok(freed)
    }
}
