//! Explicit holes: placing the hole markers a repair left between, before and after the
//! segments, checking the end of the log against the recovery point, and refusing markers
//! that contradict the segment files.

use std::path::PathBuf;

use super::{Holes, Recoverer};
use crate::fsutil::{self, IoResultExt};
use crate::index::IndexBuilder;
use crate::layout::index_files::plain_fsync;
use crate::layout::{Seg, seg_file, write_indexes};
use crate::segment::segment_paths;
use crate::{Error, Hole, RECOVERY_POINT_FILE_NAME};

impl Recoverer<'_> {
    /// Appends the hole `first..=last` (marker `path`) to the recovered segments.
    pub(super) fn push_hole(&mut self, first: u64, last: u64, path: PathBuf) {
        self.segs.push(Seg {
            base_seq: first,
            file: seg_file(self.dir, first),
            open: None,
            last_seq: last,
            size: 0,
            max_timestamp: i64::MIN,
            lazy: None,
            offsets: Vec::new(),
            times: Vec::new(),
            index_bytes: 0,
            hole: Some(path),
        });
    }

    /// Holes before the first segment `base`: the chain that ends right before it is part of
    /// the log (retention has not passed it yet); older ones were dropped by retention.
    pub(super) fn take_holes_before_first(&mut self, base: u64, holes: &mut Holes) {
        let mut before: Vec<Hole> = Vec::new();
        while let Some(h) = holes.next_if(|h| h.last_seq < base) {
            before.push(h);
        }
        let mut chain = Vec::new();
        let mut end = base.saturating_sub(1);
        while let Some(h) = before.pop() {
            if h.last_seq == end {
                end = h.first_seq.saturating_sub(1);
                chain.push(h);
            } else if h.last_seq < end {
                break;
            }
        }
        for h in chain.into_iter().rev() {
            self.push_hole(h.first_seq, h.last_seq, h.marker);
        }
    }

    /// Holes below segment `base` that continue the log (which would go on at `expected`) are
    /// part of it; older ones are skipped.
    pub(super) fn take_holes_between(&mut self, expected: u64, base: u64, holes: &mut Holes) {
        while let Some(h) = holes.peek() {
            if h.last_seq < expected {
                holes.next();
            } else if h.first_seq == self.next_seq().unwrap_or(expected) && h.last_seq < base {
                if let Some(h) = holes.next() {
                    self.push_hole(h.first_seq, h.last_seq, h.marker);
                }
            } else {
                break;
            }
        }
    }

    /// Holes right after the last segment: their seqs are never reused.
    pub(super) fn take_trailing_holes(
        &mut self,
        holes: &mut Holes,
        active_builder: &mut Option<IndexBuilder>,
    ) {
        while let Some(h) = holes.peek() {
            let next = self.next_seq().unwrap_or(1);
            if h.first_seq == next || (self.segs.is_empty() && h.first_seq >= next) {
                if let Some(h) = holes.next() {
                    // The active segment is a closed one now: a new one starts after the hole.
                    if let Some(pos) = self.segs.len().checked_sub(1)
                        && let Some(seg) = self.segs.get_mut(pos)
                        && seg.open.is_some()
                    {
                        seg.open = None;
                        *active_builder = None;
                        if seg.last_seq >= seg.base_seq {
                            self.index_writes.push(pos);
                        }
                    }
                    self.push_hole(h.first_seq, h.last_seq, h.marker);
                }
            } else if h.last_seq < next {
                holes.next();
            } else {
                break;
            }
        }
    }

    /// Every seq up to the recovery point was synced: finding fewer is damage, not a torn
    /// tail. A repair records the missing seqs as a hole.
    pub(super) fn check_recovery_point(
        &mut self,
        active_builder: &mut Option<IndexBuilder>,
    ) -> Result<(), Error> {
        let point = self.point;
        let last = self.next_seq().map_or(0, |n| n - 1);
        if point == 0 || last >= point {
            return Ok(());
        }
        let active = self.segs.last().map_or_else(
            || segment_paths(self.dir, last + 1).0,
            |s| s.file.log_path.clone(),
        );
        if !self.repair() {
            return Err(Error::Damaged {
                path: active,
                position: self.segs.last().map_or(0, |s| s.size),
                reason: format!(
                    "the log held every seq up to {point} (its {RECOVERY_POINT_FILE_NAME} file) but its segment files end at seq {last}: a segment file was deleted or truncated (expected {:020}.log to follow)",
                    last + 1
                ),
                first_seq: last + 1,
                last_seq: point,
            });
        }
        if self.segs.last().is_some_and(|s| s.open.is_some()) {
            self.close_short_active(active_builder)?;
        }
        self.quarantine_bytes(
            None,
            &active,
            0,
            0,
            Some((last + 1, point)),
            "seqs below the recovery point are missing",
        )
    }

    /// The active segment was cut short of the recovery point: it is closed now (the hole
    /// follows it), or dropped from the list when it holds no record.
    fn close_short_active(
        &mut self,
        active_builder: &mut Option<IndexBuilder>,
    ) -> Result<(), Error> {
        if let Some(seg) = self.segs.last_mut() {
            seg.open = None;
            *active_builder = None;
            if seg.last_seq >= seg.base_seq {
                seg.index_bytes = write_indexes(seg, Some(&plain_fsync))?;
            }
        }
        if self.segs.last().is_some_and(|s| s.last_seq < s.base_seq) {
            // An empty active segment file: drop it from the list (the hole covers it).
            if let Some(seg) = self.segs.pop() {
                fsutil::remove_if_exists(&seg.file.log_path).at(&seg.file.log_path)?;
                fsutil::fsync_dir(self.dir).at(self.dir)?;
            }
        }
        Ok(())
    }

    /// A hole marker that overlaps records the log holds contradicts the segment files.
    pub(super) fn check_hole_markers(&mut self, all_holes: &[Hole]) -> Result<(), Error> {
        for h in all_holes {
            let (first, last, path) = (h.first_seq, h.last_seq, &h.marker);
            let overlaps = self
                .segs
                .iter()
                .filter(|s| s.hole.is_none() && s.last_seq >= s.base_seq)
                .any(|s| s.base_seq <= last && first <= s.last_seq);
            if !overlaps {
                continue;
            }
            if !self.repair() {
                return Err(Error::Corrupt {
                    path: path.clone(),
                    position: 0,
                    reason: format!(
                        "the hole marker claims seqs {first}..={last} are missing, but segment files hold some of them"
                    ),
                });
            }
            self.move_path_aside(path, "hole marker overlapping records the log holds")?;
        }
        Ok(())
    }
}
