//! Repairing a damaged segment file without losing the intact batches after the damage.
//!
//! From the first bad batch on, the repair resyncs with the search for the next valid batch
//! ([`find_valid_batch_after`], the one recovery uses to tell a torn tail from damage): the bytes
//! up to that batch are damaged ([`RepairStep::Cut`]: moved into the quarantine directory, the
//! seqs they held recorded as an explicit hole), the run of contiguous valid batches it starts
//! is kept ([`RepairStep::Keep`]: copied into a segment file of its own, named by its first
//! seq), and so on to the end of the file. The intact batches before the first damage stay in the
//! damaged file, which is cut after them. Seqs stay increasing from file to file, every kept
//! file gets its index files, and the files change under the split journal ([`super::split`]),
//! so a crash at any step leaves the log as it was or as repaired.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::Recoverer;
use super::quarantine::copy_range;
use super::split::{self, Journal};
use crate::Error;
use crate::fsutil::{self, IoResultExt};
use crate::layout::index_files::plain_fsync;
use crate::layout::{Seg, seg_file, write_indexes};
use crate::segment::{
    BATCH_HEADER_LEN, MIN_RECORD_LEN, ValidRun, find_valid_batch_after, hole_file_name,
    last_seq_allowed, scan_file, scan_file_from, segment_paths,
};

/// One step of the repair of a damaged segment file, in byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RepairStep {
    /// Bytes `from..to` hold no valid batch: moved into the quarantine directory; the seqs
    /// they held (`seqs`, when any) become an explicit hole.
    Cut {
        /// First damaged byte.
        from: u64,
        /// The byte after the damage (the next valid batch, or the end of the file).
        to: u64,
        /// The seqs lost with them, when any.
        seqs: Option<(u64, u64)>,
    },
    /// Bytes `from..to` are intact batches of seqs `first_seq..=last_seq` after damage: kept in
    /// the log as a segment file of their own, named by `first_seq`.
    Keep {
        /// Position of the first batch.
        from: u64,
        /// The byte after the last batch.
        to: u64,
        /// Seq of the first batch.
        first_seq: u64,
        /// Seq of the last batch.
        last_seq: u64,
    },
}

/// What a repair ([`RecoveryMode::Repair`](crate::RecoveryMode::Repair)) does with one damaged
/// segment file; see [`plan_segment_repair`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentRepair {
    /// The segment's `.log` file.
    pub path: PathBuf,
    /// Its base seq.
    pub base_seq: u64,
    /// Bytes before the first damage: they stay in the file.
    pub intact_len: u64,
    /// What is wrong with the first bad batch.
    pub reason: String,
    /// Whether this is a torn tail (the newest segment, nothing valid after the damage, seqs
    /// above the recovery point): every open cuts it, not only a repair.
    pub torn_tail: bool,
    /// The steps from `intact_len` to the end of the file.
    pub steps: Vec<RepairStep>,
}

/// Intact batches after damage that a repair kept as a segment file of their own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptRun {
    /// The damaged file they were in.
    pub from: PathBuf,
    /// Their byte position there.
    pub position: u64,
    /// How many bytes they are.
    pub bytes: u64,
    /// The segment file that holds them now.
    pub to: PathBuf,
    /// Seq of the first batch.
    pub first_seq: u64,
    /// Seq of the last batch.
    pub last_seq: u64,
}

/// The repair steps for a file of `file_len` bytes whose first bad batch is at `damage_at`,
/// where the batch of `expected` was due. `next_base` is the base seq of the next segment file
/// (`None` for the newest) and `last` the last seq this file may hold ([`last_seq_allowed`]),
/// `point` the recovery point: the seqs a damaged end holds are those up to the next file, or,
/// in the newest one, up to the recovery point.
pub(super) fn plan_steps(
    file: &File,
    path: &Path,
    (file_len, damage_at): (u64, u64),
    expected: u64,
    (next_base, last): (Option<u64>, u64),
    point: u64,
) -> Result<Vec<RepairStep>, Error> {
    let mut steps = Vec::new();
    // The seqs the next segment holds are never this file's: a run is searched for, and ends,
    // below them; bytes holding them (appended to this closed segment) are cut, the next
    // segment kept.
    // Damage at the file's first byte: its first seq is the file's own base, which no kept
    // piece may carry (a piece is a segment file named by its first seq).
    let file_base = (damage_at == 0).then_some(expected);
    let (mut pos, mut expected) = (damage_at, expected);
    // Each turn moves `pos` forward by at least one byte.
    while pos < file_len {
        let run = match run_at(file, path, pos, file_len, expected, last)? {
            Some(run) => Some(run),
            None => match run_after_damaged_frame(file, path, pos, file_len, expected, last)? {
                Some(run) => Some(run),
                None => find_valid_batch_after(file, path, pos, file_len, expected, last)?,
            },
        }
        .filter(|r| next_base.is_none_or(|n| r.last_seq < n))
        .filter(|r| file_base.is_none_or(|b| r.first_seq > b));
        let Some(run) = run else {
            let stake = next_base.map_or(point, |n| n.saturating_sub(1));
            steps.push(RepairStep::Cut {
                from: pos,
                to: file_len,
                seqs: (stake >= expected).then_some((expected, stake)),
            });
            break;
        };
        steps.push(RepairStep::Cut {
            from: pos,
            to: run.position,
            seqs: (run.first_seq > expected).then(|| (expected, run.first_seq - 1)),
        });
        steps.push(RepairStep::Keep {
            from: run.position,
            to: run.end,
            first_seq: run.first_seq,
            last_seq: run.last_seq,
        });
        expected = run.last_seq + 1;
        pos = run.end;
    }
    Ok(steps)
}

/// The run of valid batches right after the damaged batch at `pos` when its length field still
/// holds (damage inside its records, the usual bit flip): the batch there must start at the
/// seq after the damaged one's last. That is `expected + recordCount` when the damaged batch's
/// header still says it starts at `expected` (and its count agrees with its last offset
/// delta); otherwise any seq after `expected` that the records of the damaged batch's bytes
/// could reach. Looked at before any search, so batches that happen to lie inside the damaged
/// batch's own records (a record holding batch bytes) are never taken for the log's.
fn run_after_damaged_frame(
    file: &File,
    path: &Path,
    pos: u64,
    file_len: u64,
    expected: u64,
    last_allowed: u64,
) -> Result<Option<ValidRun>, Error> {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; BATCH_HEADER_LEN];
    if pos.saturating_add(BATCH_HEADER_LEN as u64) > file_len {
        return Ok(None);
    }
    file.read_exact_at(&mut header, pos).at(path)?;
    let Some(n) = crate::segment::batch_len(&header) else {
        return Ok(None);
    };
    let next = pos.saturating_add(n as u64);
    if n < crate::segment::MIN_BATCH_LEN || next >= file_len {
        return Ok(None);
    }
    let field = |r: std::ops::Range<usize>| {
        header
            .get(r)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, i32::from_be_bytes)
    };
    let base = header
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes);
    let (delta, count) = (field(23..27), field(57..61));
    let want = if base == i64::try_from(expected).ok() && count >= 1 && delta == count - 1 {
        let after = expected.saturating_add(count as u64);
        after..=after
    } else {
        expected.saturating_add(1)..=expected.saturating_add((n / MIN_RECORD_LEN).max(1) as u64)
    };
    let here = scan_file_from(
        file,
        path,
        next,
        file_len,
        (None, last_allowed),
        u64::MAX,
        &mut |_| {},
    )?;
    Ok(match (here.first_seq, here.last_seq) {
        (Some(first_seq), Some(last_seq)) if here.records > 0 && want.contains(&first_seq) => {
            Some(ValidRun {
                position: next,
                first_seq,
                last_seq,
                end: here.valid_len,
            })
        }
        _ => None,
    })
}

/// The run of valid batches starting right at `pos` when the batch there is intact but starts
/// at a seq past `expected` (seqs missing inside the file: the batches before it were cut out),
/// no further than the uncompressed records that fit in the rest of the file allow.
fn run_at(
    file: &File,
    path: &Path,
    pos: u64,
    file_len: u64,
    expected: u64,
    last_allowed: u64,
) -> Result<Option<ValidRun>, Error> {
    let mut batches = 0u64;
    let seqs = (None, last_allowed);
    let here = scan_file_from(file, path, pos, file_len, seqs, u64::MAX, &mut |_| {
        batches += 1;
    })?;
    let most_frames = (file_len - pos) / MIN_RECORD_LEN as u64 + 1;
    // A batch's base offset lies outside its CRC: one intact batch whose base skips ahead may
    // be a batch whose base was damaged, not the first of batches left after others were cut
    // out. Only a run of two batches or more, numbered one after the other, is taken for the
    // latter; a lone one is damage (its seqs become a hole, its bytes go to quarantine).
    Ok(match (here.first_seq, here.last_seq) {
        (Some(first_seq), Some(last_seq))
            if here.records > 0
                && batches >= 2
                && first_seq > expected
                && first_seq <= expected.saturating_add(most_frames) =>
        {
            Some(ValidRun {
                position: pos,
                first_seq,
                last_seq,
                end: here.valid_len,
            })
        }
        _ => None,
    })
}

/// What a repair would do with the segment file at `path` (base seq `base`), found by a
/// read-only scan: `None` when every batch is valid. `next_base` is the base seq of the segment
/// file after it (`None` for the newest) and `recovery_point` the log's recovery point (0 when
/// unknown; [`read_recovery_point`](crate::read_recovery_point)). `krabka repair --dry-run`
/// prints it; the repair itself follows the same plan.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read.
pub fn plan_segment_repair(
    path: &Path,
    base: u64,
    next_base: Option<u64>,
    recovery_point: u64,
) -> Result<Option<SegmentRepair>, Error> {
    let file = File::open(path).at(path)?;
    let len = file.metadata().at(path)?.len();
    let dir = path.parent().unwrap_or(Path::new("."));
    let last_allowed = last_seq_allowed(dir, next_base)?;
    let scan = scan_file(&file, path, len, Some(base), last_allowed, u64::MAX)?;
    let Some(problem) = scan.problem else {
        return Ok(None);
    };
    let expected = scan.last_seq.map_or(base, |s| s + 1);
    let steps = plan_steps(
        &file,
        path,
        (len, problem.position),
        expected,
        (next_base, last_allowed),
        recovery_point,
    )?;
    let torn_tail = next_base.is_none()
        && expected > recovery_point
        && matches!(steps.as_slice(), [RepairStep::Cut { .. }]);
    Ok(Some(SegmentRepair {
        path: path.to_path_buf(),
        base_seq: base,
        intact_len: problem.position,
        reason: problem.reason,
        torn_tail,
        steps,
    }))
}

/// Where the damage of one segment is and what the log expected there.
pub(super) struct DamageAt<'a> {
    /// Position of the first bad batch.
    pub(super) position: u64,
    /// The seq its batch was due to carry.
    pub(super) expected: u64,
    pub(super) file_len: u64,
    pub(super) next_base: Option<u64>,
    /// The last seq the segment may hold ([`last_seq_allowed`]).
    pub(super) last_allowed: u64,
    pub(super) reason: &'a str,
}

impl Recoverer<'_> {
    /// A repair of damage that is not a torn tail (see the module docs): moves the damaged
    /// bytes aside, keeps every run of intact batches after them as a segment file of its own,
    /// cuts the damaged file after its intact head (or drops it when that holds no record), and
    /// records the seqs lost as holes.
    pub(super) fn repair_damage(
        &mut self,
        mut seg: Seg,
        file: File,
        d: &DamageAt<'_>,
    ) -> Result<(), Error> {
        let path = seg.file.log_path.clone();
        let steps = plan_steps(
            &file,
            &path,
            (d.file_len, d.position),
            d.expected,
            (d.next_base, d.last_allowed),
            self.point,
        )?;
        // 1. The damaged bytes into the quarantine directory, synced: nothing changed yet.
        for step in &steps {
            if let RepairStep::Cut { from, to, seqs } = *step {
                self.save_bytes(Some(&file), &path, from, to, seqs, d.reason)?;
            }
        }
        // 2. The intact runs into new segment files, under the split journal; then the cut.
        let keeps: Vec<(u64, u64, u64)> = steps
            .iter()
            .filter_map(|s| match *s {
                RepairStep::Keep {
                    from,
                    to,
                    first_seq,
                    ..
                } => Some((from, to, first_seq)),
                RepairStep::Cut { .. } => None,
            })
            .collect();
        if !keeps.is_empty() {
            let journal = Journal {
                base: seg.base_seq,
                keep_len: d.position,
                file_len: d.file_len,
                pieces: keeps.iter().map(|&(f, t, base)| (base, t - f)).collect(),
            };
            split::begin(self.dir, &journal)?;
            for &(from, to, base) in &keeps {
                self.write_piece(&file, &path, from, to, base)?;
            }
            fsutil::fsync_dir(self.dir).at(self.dir)?;
        }
        file.set_len(d.position)
            .and_then(|()| file.sync_all())
            .at(&path)?;
        drop(file);
        let head = seg.last_seq >= seg.base_seq;
        if !head {
            for p in [&seg.file.index_path, &seg.file.time_index_path, &path] {
                fsutil::remove_if_exists(p).at(p)?;
            }
            fsutil::fsync_dir(self.dir).at(self.dir)?;
        }
        if !keeps.is_empty() {
            split::end(self.dir)?;
        }
        // 3. What the log holds now, in seq order.
        if head {
            // What is left is a closed segment now (a hole or a kept run follows).
            seg.index_bytes = write_indexes(&seg, Some(&plain_fsync))?;
            self.segs.push(seg);
        }
        for step in steps {
            match step {
                RepairStep::Cut {
                    seqs: Some((first, last)),
                    ..
                } => {
                    let marker = self.quarantine_dir()?.join(hole_file_name(first, last));
                    self.push_hole(first, last, marker);
                }
                RepairStep::Cut { seqs: None, .. } => {}
                RepairStep::Keep {
                    from,
                    to,
                    first_seq,
                    ..
                } => self.push_piece(&path, from, to, first_seq)?,
            }
        }
        Ok(())
    }

    /// Copies bytes `from..to` of the damaged `src` into the new segment file `base`, synced.
    fn write_piece(
        &self,
        src: &File,
        src_path: &Path,
        from: u64,
        to: u64,
        base: u64,
    ) -> Result<(), Error> {
        let log_path = segment_paths(self.dir, base).0;
        // Never over an existing file (the damaged one, or any other): an undone split removed
        // its own pieces first.
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&log_path)
            .at(&log_path)?;
        copy_range(src, src_path, from..to, &mut out, &log_path)?;
        out.sync_all().at(&log_path)
    }

    /// Adds the segment file `base` a repair wrote for bytes `from..to` of `src_path` (a closed
    /// segment: scanned for its index, whose files are written).
    fn push_piece(&mut self, src_path: &Path, from: u64, to: u64, base: u64) -> Result<(), Error> {
        let sf = seg_file(self.dir, base);
        let log_path = sf.log_path.clone();
        let file = File::open(&log_path).at(&log_path)?;
        let len = file.metadata().at(&log_path)?.len();
        let scan = scan_file(
            &file,
            &log_path,
            len,
            Some(base),
            u64::MAX,
            self.opts.index_interval_bytes,
        )?;
        let last_seq = match scan.last_seq {
            Some(last) if scan.problem.is_none() && scan.valid_len == len && len == to - from => {
                last
            }
            _ => {
                return Err(Error::Corrupt {
                    path: log_path,
                    position: scan.valid_len,
                    reason:
                        "the segment file a repair just wrote does not hold the batches it copied"
                            .into(),
                });
            }
        };
        let mut builder = scan.index;
        let (offsets, times) = builder.take();
        let mut seg = Seg {
            base_seq: base,
            file: sf,
            open: None,
            last_seq,
            size: len,
            max_timestamp: scan.max_timestamp,
            lazy: None,
            offsets,
            times,
            index_bytes: 0,
            hole: None,
        };
        seg.index_bytes = write_indexes(&seg, Some(&plain_fsync))?;
        tracing::warn!(from = %src_path.display(), position = from, to = %log_path.display(),
            first_seq = base, last_seq, "kept the intact batches after damage as a segment file");
        self.report.kept.push(KeptRun {
            from: src_path.to_path_buf(),
            position: from,
            bytes: len,
            to: log_path,
            first_seq: base,
            last_seq,
        });
        self.segs.push(seg);
        Ok(())
    }
}
