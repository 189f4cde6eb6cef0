//! Following the log past a segment's end: the seam to the next segment (a closed segment ends
//! exactly where the next starts), the newest segment's end against the recovery point, and
//! the last seq a closed segment may hold.

use std::io;
use std::path::Path;

use super::{Cursor, IncompleteTail, LogReader, Step};
use crate::Error;

impl LogReader {
    /// The last seq the segment `base` may hold: the one before the next segment's base, once
    /// a later segment exists (then it is remembered); else none (`u64::MAX`). One listing of
    /// the directory per step while the segment is the newest, none once it is closed.
    pub(super) fn last_allowed(&mut self, base: u64) -> Result<u64, Error> {
        if let Some((b, next)) = self.seam
            && b == base
        {
            return Ok(next.saturating_sub(1));
        }
        match self.view.segment_bases()?.into_iter().find(|b| *b > base) {
            Some(next) => {
                self.seam = Some((base, next));
                Ok(next.saturating_sub(1))
            }
            None => Ok(u64::MAX),
        }
    }

    /// What follows `cursor`, which is at the end of the readable bytes of its segment (`len`
    /// bytes when last looked at).
    pub(super) fn next_segment(
        &mut self,
        cursor: Cursor,
        len: u64,
        path: &Path,
    ) -> Result<Step, Error> {
        let bases = self.view.segment_bases()?;
        let Some(next_base) = bases.into_iter().find(|b| *b > cursor.base) else {
            return self.after_last_segment(cursor, len, path);
        };
        // A later segment exists, so this one is closed: everything it holds was written before
        // the roll that created the next one. Look at its final length.
        let final_len = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.cursor = None;
                return Ok(Step::Again);
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        if final_len != len {
            return Ok(Step::Again);
        }
        let next_path = self.log_path(next_base);
        if cursor.position < final_len {
            return Err(Error::CutShort {
                path: path.to_path_buf(),
                position: cursor.position,
                bytes: final_len - cursor.position,
                seq: cursor.expect,
            });
        }
        if cursor.expect == next_base {
            return Ok(Step::Next(Cursor::start_of(next_base)));
        }
        if cursor.expect > next_base {
            return Err(Error::SeqOverlap {
                previous: path.to_path_buf(),
                path: next_path,
                expected: cursor.expect,
                found: next_base,
            });
        }
        let holes = self.view.holes()?;
        if let Some(hole) = holes.iter().find(|h| h.contains(cursor.expect)) {
            return Err(hole.quarantined());
        }
        Err(if final_len == 0 {
            Error::EmptySegment {
                path: path.to_path_buf(),
                next: next_path,
                expected: cursor.expect,
                found: next_base,
            }
        } else {
            Error::SeqGap {
                previous: path.to_path_buf(),
                path: next_path,
                expected: cursor.expect,
                found: next_base,
            }
        })
    }

    /// `cursor` is at the end of the readable bytes (`len`) of the newest segment, at `path`:
    /// caught up, unless the recovery point says records are missing or the seq asked for is
    /// past the next append's.
    pub(super) fn after_last_segment(
        &mut self,
        cursor: Cursor,
        len: u64,
        path: &Path,
    ) -> Result<Step, Error> {
        // The log held every seq up to its recovery point, synced, when it was last closed
        // or rolled: ending below it is lost data, not a write in progress.
        if let Some(point) = self.view.recovery_point()?.filter(|p| cursor.expect <= *p) {
            // A writer appends (and rolls) before it records the point, so a read of the
            // segment made after this read of the point holds the records, in this file (grown,
            // or written into its preallocated space) or a newer one: look once more.
            let here = (cursor.base, cursor.position);
            if self.looked_again != Some(here) {
                self.looked_again = Some(here);
                return Ok(Step::Again);
            }
            return Err(Error::EndsBelowRecoveryPoint {
                path: path.to_path_buf(),
                position: cursor.position,
                first_seq: cursor.expect,
                recovery_point: point,
            });
        }
        if self.next_seq > cursor.expect {
            // Asked for a seq past the one the next append gets: as `Log::read`, out of range.
            let first = self
                .view
                .segment_bases()?
                .first()
                .copied()
                .unwrap_or(cursor.expect);
            return Err(Error::OutOfRange {
                seq: self.next_seq,
                first,
                last: cursor.expect.saturating_sub(1),
            });
        }
        if cursor.position < len {
            self.tail = Some(IncompleteTail {
                path: path.to_path_buf(),
                position: cursor.position,
                bytes: len - cursor.position,
            });
        }
        Ok(Step::CaughtUp)
    }
}
