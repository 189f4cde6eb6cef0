//! Where a read starts: the segment holding the seq asked for (never past a seam the earlier
//! segment may cross) and the position its index gives, checked against the batch there.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{Cursor, IndexFallback, LogReader};
use crate::Error;
use crate::segment::{self, BATCH_HEADER_LEN, INDEX_EXTENSION};

impl LogReader {
    /// Finds the segment holding `next_seq` and the position to start scanning from.
    pub(super) fn locate(&mut self) -> Result<Option<Cursor>, Error> {
        let bases = self.view.segment_bases()?;
        let Some(&first) = bases.first() else {
            return Ok(None);
        };
        // A hole marker speaks only for seqs no segment file holds: before the first one here,
        // between two files at the seam (`next_segment`).
        if self.next_seq < first {
            let holes = self.view.holes()?;
            if let Some(hole) = holes.iter().find(|h| h.contains(self.next_seq)) {
                return Err(hole.quarantined());
            }
        }
        if self.next_seq == 0 || self.next_seq < first {
            return Err(Error::BelowStart {
                dir: self.dir().to_path_buf(),
                seq: self.next_seq,
                first,
            });
        }
        let Some(mut i) = bases.iter().rposition(|b| *b <= self.next_seq) else {
            return Ok(None);
        };
        // Start in the segment whose base is the last one up to the seq only when the segment
        // before it ends before it starts (as that segment's index says): else the earlier
        // segment may hold the seq (the later file is stray), so start there, and the scan meets
        // the seam and names what is wrong with it. A gap before the start is not crossed.
        while let (Some(&prev), Some(&base)) = (bases.get(i.wrapping_sub(1)), bases.get(i)) {
            if self.ends_before(prev, base) {
                break;
            }
            i -= 1;
        }
        Ok(bases.get(i).map(|&base| self.index_cursor(base)))
    }

    /// Whether the closed segment `prev` holds no seq from `next` on, as its valid index says of
    /// its unchanged `.log`.
    pub(super) fn ends_before(&self, prev: u64, next: u64) -> bool {
        let index = self
            .dir()
            .join(segment::segment_file_name(prev, INDEX_EXTENSION));
        let Some(summary) = std::fs::read(index)
            .ok()
            .and_then(|b| segment::verify_index(&b).ok())
        else {
            return false;
        };
        let len = std::fs::metadata(self.log_path(prev)).map(|m| m.len()).ok();
        summary.base_seq == prev && len == Some(summary.log_size) && summary.last_seq < next
    }

    /// Where to start reading `base`'s segment for `next_seq`: the position its sparse index
    /// gives, when the batch there carries a seq in `base..=next_seq`; else its start. A missing
    /// or bad index only costs time.
    pub(super) fn index_cursor(&mut self, base: u64) -> Cursor {
        if self.next_seq <= base {
            return Cursor::start_of(base);
        }
        let index = self
            .dir()
            .join(segment::segment_file_name(base, INDEX_EXTENSION));
        let Some(position) = std::fs::read(&index)
            .ok()
            .and_then(|b| segment::lookup_position(&b, self.next_seq).ok())
            .filter(|p| *p > 0)
        else {
            return Cursor::start_of(base);
        };
        let mut header = [0u8; BATCH_HEADER_LEN];
        let seq = File::open(self.log_path(base))
            .and_then(|f| f.read_exact_at(&mut header, position))
            .ok()
            .and_then(|()| header.get(..8))
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .and_then(|b| u64::try_from(i64::from_be_bytes(b)).ok());
        match seq {
            Some(seq) if (base..=self.next_seq).contains(&seq) => Cursor {
                base,
                position,
                expect: seq,
                from_index: true,
            },
            _ => {
                self.fallbacks.push(IndexFallback::NoBatch {
                    index,
                    seq: self.next_seq,
                    position,
                });
                Cursor::start_of(base)
            }
        }
    }
}
