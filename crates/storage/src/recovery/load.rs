//! Loading one segment: from its index files when it is closed and they describe it, else by a
//! scan; and what to do with damage the scan finds, as the recovery mode says.

use std::fs::{File, Metadata};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::Recoverer;
use super::resync::DamageAt;
use crate::fsutil::{self, IoResultExt};
use crate::index::{IndexBuilder, OffsetIndex, TimeIndex};
use crate::layout::clean::Marker;
use crate::layout::{Seg, SegFile, load_indexes, seg_file};
use crate::segment::{
    SegmentProblem, batch_len, find_valid_batch_after, last_seq_allowed, nonzero_end, scan_file,
};
use crate::{Error, RecoveryMode, TruncatedTail};

/// A closed segment's valid index files: offset index, time index and their total size.
type Indexed = (OffsetIndex, TimeIndex, u64);

/// Damage a scan found in a segment, and the seqs at stake.
struct Damage {
    problem: SegmentProblem,
    file_len: u64,
    first_at_stake: u64,
    last_at_stake: u64,
    /// Damage in the active segment that nothing valid follows, above the recovery point.
    torn: bool,
    /// Whether the file ends inside the bad batch.
    incomplete: bool,
    /// Base seq of the next segment file (`None` for the newest).
    next_base: Option<u64>,
    /// The last seq the segment may hold (see [`last_seq_allowed`]).
    last_allowed: u64,
}

impl Recoverer<'_> {
    /// Loads segment `base`: from its index files when it is closed and they describe it,
    /// else by a scan. Returns the index builder when it became the active segment.
    pub(super) fn load(
        &mut self,
        base: u64,
        next_base: Option<u64>,
    ) -> Result<Option<IndexBuilder>, Error> {
        let sf = seg_file(self.dir, base);
        let log_path = sf.log_path.clone();
        let file = fsutil::open_rw(&log_path, false).at(&log_path)?;
        let meta = file.metadata().at(&log_path)?;
        let file_len = meta.len();
        if next_base.is_none()
            && let Some((idx, tidx)) = self.clean_indexes(&sf, base, &meta)
        {
            return Ok(Some(self.push_clean(sf, file, idx, tidx)));
        }
        let indexed = next_base
            .is_some()
            .then(|| load_indexes(&sf, base, file_len))
            .flatten();
        // A repair scans every segment: damage in a closed one behind a valid index must be
        // found too. Otherwise a closed segment with a valid index is not read.
        if !self.repair()
            && let Some((idx, tidx, index_bytes)) = indexed
        {
            // A closed segment: its file is closed now and reopened when read.
            drop(file);
            self.segs.push(Seg {
                base_seq: base,
                file: sf,
                open: None,
                last_seq: idx.last_seq,
                size: file_len,
                max_timestamp: idx.max_timestamp,
                lazy: None,
                offsets: idx.entries,
                times: tidx.entries,
                index_bytes,
                hole: None,
            });
            return Ok(None);
        }
        // A closed segment ends where the next one starts: a batch past that is damage of this
        // file (bytes appended to it), never a reason to doubt the next one that holds it.
        let last_allowed = last_seq_allowed(self.dir, next_base)?;
        let mut scan = scan_file(
            &file,
            &log_path,
            file_len,
            Some(base),
            last_allowed,
            self.opts.index_interval_bytes,
        )?;
        if next_base.is_none() {
            // Zeros after the last batch of the newest segment are its preallocated space.
            scan.accept_zero_tail(&file, &log_path, file_len)?;
        }
        self.report.scanned_bytes += scan.valid_len.min(file_len);
        let mut builder = scan.index;
        let (offsets, times) = builder.take();
        let scanned_last = scan.last_seq.unwrap_or(base - 1);
        let seg = Seg {
            base_seq: base,
            file: Arc::clone(&sf),
            open: None,
            last_seq: scanned_last,
            size: scan.valid_len,
            max_timestamp: scan.max_timestamp,
            lazy: None,
            offsets,
            times,
            index_bytes: 0,
            hole: None,
        };
        let Some(problem) = scan.problem else {
            return self.loaded_intact(seg, file, builder, scan.records, next_base, indexed);
        };
        let end = (next_base, last_allowed);
        let damage = self.assess(&file, &log_path, problem, file_len, scanned_last, end)?;
        self.on_damage(seg, file, builder, damage)
    }

    /// The index files a clean close wrote for the active segment `base`, when the
    /// clean-shutdown marker is intact, describes the file exactly as it is now (`meta`), and
    /// the index files describe that file and the marker's last seq. Never under a repair.
    fn clean_indexes(
        &self,
        sf: &SegFile,
        base: u64,
        meta: &Metadata,
    ) -> Option<(OffsetIndex, TimeIndex)> {
        let Marker::Intact(marker) = &self.marker else {
            return None;
        };
        if self.repair() || !marker.matches(base, meta) {
            return None;
        }
        let (idx, tidx, _) = load_indexes(sf, base, meta.len())?;
        (idx.last_seq == marker.last_seq).then_some((idx, tidx))
    }

    /// Pushes the active segment exactly as the last clean close left it (no scan); returns its
    /// index builder.
    fn push_clean(
        &mut self,
        sf: Arc<SegFile>,
        file: File,
        idx: OffsetIndex,
        tidx: TimeIndex,
    ) -> IndexBuilder {
        let builder = IndexBuilder::resume(self.opts.index_interval_bytes, &idx);
        self.report.clean_shutdown = true;
        self.segs.push(Seg {
            base_seq: idx.base_seq,
            file: sf,
            open: Some(Arc::new(file)),
            last_seq: idx.last_seq,
            size: idx.log_size,
            max_timestamp: idx.max_timestamp,
            lazy: None,
            offsets: idx.entries,
            times: tidx.entries,
            index_bytes: 0,
            hole: None,
        });
        builder
    }

    /// A segment whose scan found no damage: the active one (when it is the last), an empty
    /// closed one (damage), or a closed one whose index files are kept or rewritten.
    fn loaded_intact(
        &mut self,
        mut seg: Seg,
        file: File,
        builder: IndexBuilder,
        records: u64,
        next_base: Option<u64>,
        indexed: Option<Indexed>,
    ) -> Result<Option<IndexBuilder>, Error> {
        let base = seg.base_seq;
        match next_base {
            None => {
                seg.open = Some(Arc::new(file));
                // Index files of the active segment (left by a close, or by a crash during a
                // roll) are stale once it is written to: the first write removes them, so that
                // open itself changes nothing.
                self.segs.push(seg);
                Ok(Some(builder))
            }
            Some(next) if records == 0 => {
                // An empty file between two segments.
                if !self.repair() {
                    return Err(Error::Damaged {
                        path: seg.file.log_path.clone(),
                        position: 0,
                        reason: "the closed segment file holds no record".into(),
                        first_seq: base,
                        last_seq: next.saturating_sub(1).max(base),
                    });
                }
                drop(file);
                self.move_aside(base, "closed segment file holds no record")?;
                Ok(None)
            }
            Some(_)
                if indexed
                    .as_ref()
                    .is_some_and(|(idx, _, _)| idx.last_seq == seg.last_seq) =>
            {
                // Scanned by a repair and intact: its index files stay as they are.
                seg.index_bytes = indexed.map_or(0, |(_, _, b)| b);
                self.segs.push(seg);
                Ok(None)
            }
            Some(_) => {
                self.index_writes.push(self.segs.len());
                self.segs.push(seg);
                Ok(None)
            }
        }
    }

    /// Damage at `problem.position`: is anything valid after it, and which seqs are at stake?
    /// `end` is the next segment's base (`None` for the newest) and the last seq this one may
    /// hold.
    fn assess(
        &self,
        file: &File,
        log_path: &Path,
        problem: SegmentProblem,
        file_len: u64,
        scanned_last: u64,
        (next_base, last_allowed): (Option<u64>, u64),
    ) -> Result<Damage, Error> {
        let first_at_stake = scanned_last + 1;
        let after = find_valid_batch_after(
            file,
            log_path,
            problem.position,
            file_len,
            first_at_stake,
            last_allowed,
        )?;
        let incomplete = batch_len(&read_some(file, log_path, problem.position, file_len)?)
            .is_none_or(|n| problem.position + n as u64 > file_len);
        let last_at_stake = match (next_base, after) {
            (Some(next), a) => next.saturating_sub(1).max(a.map_or(0, |r| r.last_seq)),
            (None, Some(r)) => r.last_seq,
            (None, None) => scanned_last,
        };
        // Damage at or below the recovery point hit synced records: not a torn write.
        let torn = next_base.is_none() && after.is_none() && first_at_stake > self.point;
        let last_at_stake = if next_base.is_none() {
            last_at_stake.max(self.point)
        } else {
            last_at_stake
        };
        Ok(Damage {
            problem,
            file_len,
            first_at_stake,
            last_at_stake,
            torn,
            incomplete,
            next_base,
            last_allowed,
        })
    }

    /// Deals with damage as the recovery mode says: cut a torn tail, move the damaged suffix
    /// aside (repair), or refuse the open.
    fn on_damage(
        &mut self,
        seg: Seg,
        file: File,
        builder: IndexBuilder,
        d: Damage,
    ) -> Result<Option<IndexBuilder>, Error> {
        match (d.torn, self.opts.recovery) {
            (true, RecoveryMode::Strict) => Err(Error::TornTail {
                path: seg.file.log_path.clone(),
                position: d.problem.position,
                bytes_after: d.file_len - d.problem.position,
                incomplete: d.incomplete,
                reason: d.problem.reason,
            }),
            (true, _) => self.cut_torn_tail(seg, file, d).map(|()| Some(builder)),
            (false, RecoveryMode::Repair) => {
                let at = DamageAt {
                    position: d.problem.position,
                    expected: d.first_at_stake,
                    file_len: d.file_len,
                    next_base: d.next_base,
                    last_allowed: d.last_allowed,
                    reason: &d.problem.reason,
                };
                self.repair_damage(seg, file, &at).map(|()| None)
            }
            (false, _) if d.next_base == Some(d.first_at_stake) => {
                // A closed segment that holds every seq up to the next one's base, then more
                // bytes (appended to it): they hold no record of the log, whose next seqs the
                // next segment holds. They are this file's damage, not the next file's.
                Err(Error::Corrupt {
                    path: seg.file.log_path.clone(),
                    position: d.problem.position,
                    reason: format!(
                        "{}; the closed segment already holds every seq up to {}, so no record \
                         of the log is at stake in the {} bytes from here; nothing was changed \
                         (an open with RecoveryMode::Repair moves them aside and keeps the next \
                         segment)",
                        d.problem.reason,
                        d.first_at_stake.saturating_sub(1),
                        d.file_len - d.problem.position
                    ),
                })
            }
            (false, _) => Err(Error::Damaged {
                path: seg.file.log_path.clone(),
                position: d.problem.position,
                reason: d.problem.reason,
                first_seq: d.first_at_stake,
                last_seq: d.last_at_stake.max(d.first_at_stake),
            }),
        }
    }

    /// Cuts the active segment's torn tail (saving it into the quarantine directory first);
    /// the segment stays the active one.
    fn cut_torn_tail(&mut self, mut seg: Seg, file: File, d: Damage) -> Result<(), Error> {
        let sf = Arc::clone(&seg.file);
        let (position, file_len) = (d.problem.position, d.file_len);
        // A file of a whole segment's length was preallocated (a log never writes one that
        // long but for a batch of its own): the zeros ending it are that space, not torn
        // bytes, and are not copied. Anything shorter is saved whole, zeros and all.
        let saved_end = if file_len >= self.opts.max_bytes {
            nonzero_end(&file, &sf.log_path, position, file_len)?
        } else {
            file_len
        };
        tracing::warn!(
            path = %sf.log_path.display(),
            position,
            bytes_removed = file_len - position,
            bytes_saved = saved_end - position,
            reason = %d.problem.reason,
            "cutting the active segment's torn tail (saved in the quarantine directory)"
        );
        self.quarantine_bytes(
            Some(&file),
            &sf.log_path,
            position,
            saved_end,
            None,
            &format!("torn tail: {}", d.problem.reason),
        )?;
        self.report.truncated = Some(TruncatedTail {
            path: sf.log_path.clone(),
            position,
            bytes_removed: file_len - position,
            reason: d.problem.reason,
        });
        seg.open = Some(Arc::new(file));
        fsutil::remove_if_exists(&sf.index_path).at(&sf.index_path)?;
        fsutil::remove_if_exists(&sf.time_index_path).at(&sf.time_index_path)?;
        self.segs.push(seg);
        Ok(())
    }
}

/// Whether the file holds no complete valid batch at its start (empty or garbage).
pub(super) fn holds_no_frame(path: &Path) -> Result<bool, Error> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let scan = scan_file(&file, path, len, None, u64::MAX, u64::MAX)?;
    Ok(scan.records == 0)
}

/// Up to 16 bytes at `pos` (for a batch header).
fn read_some(file: &File, path: &Path, pos: u64, file_len: u64) -> Result<Vec<u8>, Error> {
    let n = file_len.saturating_sub(pos).min(12) as usize;
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, pos)
        .map_err(|e| Error::io(path, e))?;
    Ok(buf)
}
