//! Recovery on [`Log::open`](crate::Log::open): list the directory, load or scan every segment,
//! check that seqs are contiguous, and deal with damage as [`RecoveryMode`] says.
//!
//! The rules (invariants I1 and I3 of `docs/ARCHITECTURE.md`):
//! - a byte leaves a segment file only after it was copied into the quarantine directory and
//!   synced there;
//! - a torn tail (damage in the active segment that no valid frame follows) is the only damage
//!   cut by default; anything else fails the open naming the file, the byte and the seqs at
//!   stake, unless the user asked for [`RecoveryMode::Repair`];
//! - seqs are contiguous across segment files, except across an explicit hole that a repair
//!   recorded with a marker file; appends never reuse a seq below or inside a hole.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::index::IndexBuilder;
use crate::log::{
    Seg, fsync_dir, load_indexes, open_rw, remove_if_exists, seg_file, write_indexes,
};
use crate::segment::{
    INDEX_SUFFIX, LOG_SUFFIX, QUARANTINE_DIR, TIME_INDEX_SUFFIX, find_valid_frame_after,
    hole_file_name, parse_hole_file_name, parse_segment_file_name, scan_file, segment_paths,
};
use crate::{
    Error, LOCK_FILE_NAME, Options, QuarantinedPiece, RECOVERY_POINT_FILE_NAME, RecoveryMode,
    RecoveryReport, SyncPolicy, TruncatedTail,
};

/// The largest seq a log accepts (Kafka's offsets are `i64`; this leaves room so that seq
/// arithmetic never overflows). Segment files and hole markers beyond it are damage.
pub(crate) const MAX_SEQ: u64 = i64::MAX as u64;

/// What recovery hands to the log: its segments (the last one active and open) and the index
/// builder of the active segment.
pub(crate) struct Recovered {
    pub(crate) segs: Vec<Seg>,
    pub(crate) active_builder: Option<IndexBuilder>,
    pub(crate) report: RecoveryReport,
}

/// The segment files and hole markers of a log directory.
struct Listing {
    bases: Vec<u64>,
    /// `(first, last, marker path)`, sorted.
    holes: Vec<(u64, u64, PathBuf)>,
}

struct Recoverer<'a> {
    dir: &'a Path,
    opts: &'a Options,
    report: RecoveryReport,
    segs: Vec<Seg>,
    /// Whether the quarantine directory exists and its parent entry is synced.
    quarantine_ready: bool,
    /// The recovery point: every seq up to it was synced (0 when unknown).
    point: u64,
    /// Directories named like segment files.
    bad_entries: Vec<PathBuf>,
    /// Segments (by position in `segs`) whose index files are written once open succeeds.
    index_writes: Vec<usize>,
    /// Stale index files (of the active segment) removed once open succeeds.
    index_removals: Vec<PathBuf>,
}

/// Runs recovery on `dir` (already locked).
pub(crate) fn recover(dir: &Path, opts: &Options) -> Result<Recovered, Error> {
    let mut r = Recoverer {
        dir,
        opts,
        report: RecoveryReport::default(),
        segs: Vec::new(),
        quarantine_ready: false,
        point: 0,
        bad_entries: Vec::new(),
        index_writes: Vec::new(),
        index_removals: Vec::new(),
    };
    r.point = match read_recovery_point(dir) {
        Ok(point) => point.unwrap_or(0),
        Err(e) if opts.recovery == RecoveryMode::Repair => {
            // Without a trustworthy recovery point, a repair goes by the segment files alone.
            let path = dir.join(RECOVERY_POINT_FILE_NAME);
            let to = r.free_name(RECOVERY_POINT_FILE_NAME)?;
            fs::rename(&path, &to).map_err(|e| Error::io(&path, e))?;
            fsync_dir(&r.quarantine_dir()?)?;
            fsync_dir(dir)?;
            r.report.quarantined.push(QuarantinedPiece {
                from: path,
                position: 0,
                bytes: 0,
                to,
                seqs: None,
                reason: e.to_string(),
            });
            0
        }
        Err(e) => return Err(e),
    };
    let listing = r.list()?;
    for path in std::mem::take(&mut r.bad_entries) {
        if r.opts.recovery != RecoveryMode::Repair {
            return Err(Error::Corrupt {
                path,
                position: 0,
                reason: "a directory is named like a segment file".into(),
            });
        }
        r.move_path_aside(&path, "a directory named like a segment file")?;
    }
    let all_holes = listing.holes.clone();
    let mut holes = listing.holes.into_iter().peekable();
    let mut bases = listing.bases;
    // Absurd base seqs first, before anything is changed.
    while let Some(&base) = bases.last().filter(|&&b| b > MAX_SEQ) {
        if r.opts.recovery != RecoveryMode::Repair {
            return Err(Error::Corrupt {
                path: segment_paths(dir, base).0,
                position: 0,
                reason: format!("segment base seq {base} is beyond the largest seq {MAX_SEQ}"),
            });
        }
        r.move_aside(
            base,
            "segment base seq beyond the largest seq a log can reach",
        )?;
        bases.pop();
    }
    let mut active_builder = None;
    for (i, &base) in bases.iter().enumerate() {
        let log_path = segment_paths(dir, base).0;
        if base == 0 {
            return Err(Error::Corrupt {
                path: log_path,
                position: 0,
                reason: "segment base seq 0 (seqs start at 1)".into(),
            });
        }
        let next_base = bases.get(i + 1).copied();
        let is_last = next_base.is_none();
        if let Some(expected) = r.next_seq() {
            // Holes below this file's base that continue the log are part of it.
            while let Some((first, last, _)) = holes.peek() {
                if *last < expected {
                    holes.next();
                } else if *first == r.next_seq().unwrap_or(expected) && *last < base {
                    if let Some((first, last, path)) = holes.next() {
                        r.push_hole(first, last, path);
                    }
                } else {
                    break;
                }
            }
            let expected = r.next_seq().unwrap_or(expected);
            if base < expected {
                if r.opts.recovery == RecoveryMode::Repair {
                    r.move_aside(base, "overlaps the segment before it")?;
                    continue;
                }
                return Err(Error::SeqOverlap {
                    previous: r.last_path(),
                    path: log_path,
                    expected,
                    found: base,
                });
            }
            if base > expected {
                if r.opts.recovery != RecoveryMode::Repair {
                    return Err(Error::SeqGap {
                        previous: r.last_path(),
                        path: log_path,
                        expected,
                        found: base,
                    });
                }
                if is_last && holds_no_frame(&log_path)? {
                    // A stray empty file past the end: nothing of it is at stake.
                    r.move_aside(base, "stray segment file past the end of the log")?;
                    continue;
                }
                r.quarantine_bytes(
                    None,
                    &log_path,
                    0,
                    0,
                    Some((expected, base - 1)),
                    "seqs missing between two segment files",
                )?;
            }
        } else {
            // Holes before the first segment: the chain that ends right before it is part of
            // the log (retention has not passed it yet); older ones were dropped by retention.
            let mut before: Vec<(u64, u64, PathBuf)> = Vec::new();
            while let Some(h) = holes.next_if(|(_, last, _)| *last < base) {
                before.push(h);
            }
            let mut chain = Vec::new();
            let mut end = base.saturating_sub(1);
            while let Some(h) = before.pop() {
                if h.1 == end {
                    end = h.0.saturating_sub(1);
                    chain.push(h);
                } else if h.1 < end {
                    break;
                }
            }
            for (first, last, path) in chain.into_iter().rev() {
                r.push_hole(first, last, path);
            }
        }
        if let Some(builder) = r.load(base, next_base)? {
            active_builder = Some(builder);
        }
    }
    // Holes right after the last segment: their seqs are never reused.
    while let Some((first, last, _)) = holes.peek() {
        let next = r.next_seq().unwrap_or(1);
        if *first == next || (r.segs.is_empty() && *first >= next) {
            if let Some((first, last, path)) = holes.next() {
                // The active segment is a closed one now: a new one starts after the hole.
                if let Some(pos) = r.segs.len().checked_sub(1)
                    && let Some(seg) = r.segs.get_mut(pos)
                    && seg.open.is_some()
                {
                    seg.open = None;
                    active_builder = None;
                    if seg.last_seq >= seg.base_seq {
                        r.index_writes.push(pos);
                    }
                    r.index_removals
                        .retain(|p| p != &seg.file.index_path && p != &seg.file.time_index_path);
                }
                r.push_hole(first, last, path);
            }
        } else if *last < next {
            holes.next();
        } else {
            break;
        }
    }
    // Every seq up to the recovery point was synced: finding fewer is damage, not a torn tail.
    if r.point > 0 {
        let point = r.point;
        let last = r.next_seq().map_or(0, |n| n - 1);
        if last < point {
            let active = r.segs.last().map_or_else(
                || segment_paths(dir, last + 1).0,
                |s| s.file.log_path.clone(),
            );
            if r.opts.recovery != RecoveryMode::Repair {
                return Err(Error::Damaged {
                    path: active,
                    position: r.segs.last().map_or(0, |s| s.size),
                    reason: format!(
                        "the log held every seq up to {point} (its {RECOVERY_POINT_FILE_NAME} file) but its segment files end at seq {last}: a segment file was deleted or truncated (expected {:020}.log to follow)",
                        last + 1
                    ),
                    first_seq: last + 1,
                    last_seq: point,
                });
            }
            if r.segs.last().is_some_and(|s| s.open.is_some()) {
                // The active segment was cut short: it is closed now, the hole follows it.
                if let Some(seg) = r.segs.last_mut() {
                    seg.open = None;
                    active_builder = None;
                    if seg.last_seq >= seg.base_seq {
                        seg.index_bytes =
                            write_indexes(seg, true, &crate::fault::FaultInjector::default())?;
                    }
                }
                if r.segs.last().is_some_and(|s| s.last_seq < s.base_seq) {
                    // An empty active segment file: drop it from the list (the hole covers it).
                    if let Some(seg) = r.segs.pop() {
                        remove_if_exists(&seg.file.log_path)?;
                        fsync_dir(dir)?;
                    }
                }
            }
            r.quarantine_bytes(
                None,
                &active,
                0,
                0,
                Some((last + 1, point)),
                "seqs below the recovery point are missing",
            )?;
        }
    }
    // A hole marker that overlaps records the log holds contradicts the segment files.
    for (first, last, path) in &all_holes {
        let overlaps = r
            .segs
            .iter()
            .filter(|s| s.hole.is_none() && s.last_seq >= s.base_seq)
            .any(|s| s.base_seq <= *last && *first <= s.last_seq);
        if !overlaps {
            continue;
        }
        if r.opts.recovery != RecoveryMode::Repair {
            return Err(Error::Corrupt {
                path: path.clone(),
                position: 0,
                reason: format!(
                    "the hole marker claims seqs {first}..={last} are missing, but segment files hold some of them"
                ),
            });
        }
        r.move_path_aside(path, "hole marker overlapping records the log holds")?;
    }
    // Open succeeds from here on: write what was deferred so that a refused open changes
    // nothing.
    for pos in std::mem::take(&mut r.index_writes) {
        if let Some(seg) = r.segs.get_mut(pos) {
            tracing::warn!(path = %seg.file.log_path.display(), "rebuilt a missing or invalid segment index");
            seg.index_bytes = write_indexes(
                seg,
                sync_files(opts),
                &crate::fault::FaultInjector::default(),
            )?;
            if seg.open.is_none() && !r.report.rebuilt_indexes.contains(&seg.file.log_path) {
                r.report.rebuilt_indexes.push(seg.file.log_path.clone());
            }
        }
    }
    for path in std::mem::take(&mut r.index_removals) {
        // Only the active segment's: a segment closed since (before a hole) keeps its own.
        let active = r.segs.iter().any(|s| {
            s.open.is_some() && (s.file.index_path == path || s.file.time_index_path == path)
        });
        if active {
            remove_if_exists(&path)?;
        }
    }
    let needs_active = r.segs.last().is_none_or(|s| s.open.is_none());
    if needs_active {
        let base = r.next_seq().unwrap_or(1);
        active_builder = None;
        let seg = new_active(dir, base)?;
        r.segs.push(seg);
    }
    r.report.holes = r
        .segs
        .iter()
        .filter_map(|s| s.hole.as_ref().map(|p| (s.base_seq, s.last_seq, p.clone())))
        .collect();
    Ok(Recovered {
        segs: r.segs,
        active_builder,
        report: r.report,
    })
}

/// Creates (or opens) the empty active segment `base` and syncs the directory.
pub(crate) fn new_active(dir: &Path, base: u64) -> Result<Seg, Error> {
    let (log_path, _, _) = segment_paths(dir, base);
    let file = open_rw(&log_path, true)?;
    fsync_dir(dir)?;
    Ok(Seg {
        base_seq: base,
        file: seg_file(dir, base),
        open: Some(Arc::new(file)),
        last_seq: base - 1,
        size: 0,
        max_timestamp: i64::MIN,
        offsets: Vec::new(),
        times: Vec::new(),
        index_bytes: 0,
        hole: None,
    })
}

/// Whether the file holds no complete valid frame at its start (empty or garbage).
fn holds_no_frame(path: &Path) -> Result<bool, Error> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let scan = scan_file(&file, path, len, None, u64::MAX)?;
    Ok(scan.records == 0)
}

impl Recoverer<'_> {
    /// The seq after the last segment or hole so far.
    fn next_seq(&self) -> Option<u64> {
        self.segs.last().map(|s| s.last_seq + 1)
    }

    fn last_path(&self) -> PathBuf {
        self.segs.last().map_or_else(
            || self.dir.to_path_buf(),
            |s| s.hole.clone().unwrap_or_else(|| s.file.log_path.clone()),
        )
    }

    fn list(&mut self) -> Result<Listing, Error> {
        let dir = self.dir;
        let mut bases = Vec::new();
        let mut index_bases = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name();
            if name == LOCK_FILE_NAME
                || name == QUARANTINE_DIR
                || name == RECOVERY_POINT_FILE_NAME
                || name == RECOVERY_POINT_TMP
            {
                continue;
            }
            let parsed = name.to_str().and_then(parse_segment_file_name);
            if parsed.is_some()
                && entry
                    .file_type()
                    .map_err(|e| Error::io(&entry.path(), e))?
                    .is_dir()
            {
                self.bad_entries.push(entry.path());
                continue;
            }
            match parsed {
                Some((base, LOG_SUFFIX)) => bases.push(base),
                Some((base, _)) => index_bases.push((base, entry.path())),
                None => self.report.ignored_files.push(entry.path()),
            }
        }
        bases.sort_unstable();
        for (base, path) in index_bases {
            if bases.binary_search(&base).is_err() {
                self.report.ignored_files.push(path);
            }
        }
        self.report.ignored_files.sort();
        let mut holes = Vec::new();
        let qdir = dir.join(QUARANTINE_DIR);
        match fs::read_dir(&qdir) {
            Ok(entries) => {
                for entry in entries {
                    let entry = entry.map_err(|e| Error::io(&qdir, e))?;
                    if let Some((first, last)) = entry
                        .file_name()
                        .to_str()
                        .and_then(parse_hole_file_name)
                        .filter(|&(_, last)| last < MAX_SEQ)
                    {
                        holes.push((first, last, entry.path()));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => {}
            Err(e) => return Err(Error::io(&qdir, e)),
        }
        holes.sort();
        // Overlapping markers cannot come from this code; refuse rather than guess.
        for pair in holes.windows(2) {
            if let [(_, a_last, a), (b_first, _, b)] = pair
                && b_first <= a_last
            {
                return Err(Error::Corrupt {
                    path: b.clone(),
                    position: 0,
                    reason: format!("hole marker overlaps {}", a.display()),
                });
            }
        }
        Ok(Listing { bases, holes })
    }

    fn push_hole(&mut self, first: u64, last: u64, path: PathBuf) {
        self.segs.push(Seg {
            base_seq: first,
            file: seg_file(self.dir, first),
            open: None,
            last_seq: last,
            size: 0,
            max_timestamp: i64::MIN,
            offsets: Vec::new(),
            times: Vec::new(),
            index_bytes: 0,
            hole: Some(path),
        });
    }

    /// Loads segment `base`: from its index files when it is closed and they describe it,
    /// else by a scan. Returns the index builder when it became the active segment.
    fn load(&mut self, base: u64, next_base: Option<u64>) -> Result<Option<IndexBuilder>, Error> {
        let dir = self.dir;
        let sf = seg_file(dir, base);
        let log_path = sf.log_path.clone();
        let file = open_rw(&log_path, false)?;
        let file_len = file.metadata().map_err(|e| Error::io(&log_path, e))?.len();
        let indexed = next_base
            .is_some()
            .then(|| load_indexes(&sf, base, file_len))
            .flatten();
        let repair = self.opts.recovery == RecoveryMode::Repair;
        // A repair scans every segment: damage in a closed one behind a valid index must be
        // found too. Otherwise a closed segment with a valid index is not read.
        if !repair && let Some((idx, tidx, index_bytes)) = indexed {
            // A closed segment: its file is closed now and reopened when read.
            drop(file);
            self.segs.push(Seg {
                base_seq: base,
                file: sf,
                open: None,
                last_seq: idx.last_seq,
                size: file_len,
                max_timestamp: idx.max_timestamp,
                offsets: idx.entries,
                times: tidx.entries,
                index_bytes,
                hole: None,
            });
            return Ok(None);
        }
        let scan = scan_file(
            &file,
            &log_path,
            file_len,
            Some(base),
            self.opts.index_interval_bytes,
        )?;
        self.report.scanned_bytes += scan.valid_len.min(file_len);
        let mut builder = scan.index;
        let (offsets, times) = builder.take();
        let scanned_last = scan.last_seq.unwrap_or(base - 1);
        let mut seg = Seg {
            base_seq: base,
            file: Arc::clone(&sf),
            open: None,
            last_seq: scanned_last,
            size: scan.valid_len,
            max_timestamp: scan.max_timestamp,
            offsets,
            times,
            index_bytes: 0,
            hole: None,
        };
        let mode = self.opts.recovery;
        let Some(problem) = scan.problem else {
            match next_base {
                None => {
                    seg.open = Some(Arc::new(file));
                    // Index files of the active segment are stale by definition.
                    self.index_removals.push(sf.index_path.clone());
                    self.index_removals.push(sf.time_index_path.clone());
                    self.segs.push(seg);
                    return Ok(Some(builder));
                }
                Some(next) if scan.records == 0 => {
                    // An empty file between two segments.
                    if mode != RecoveryMode::Repair {
                        return Err(Error::Damaged {
                            path: log_path,
                            position: 0,
                            reason: "the closed segment file holds no record".into(),
                            first_seq: base,
                            last_seq: next.saturating_sub(1).max(base),
                        });
                    }
                    drop(file);
                    self.move_aside(base, "closed segment file holds no record")?;
                    return Ok(None);
                }
                Some(_)
                    if indexed
                        .as_ref()
                        .is_some_and(|(idx, _, _)| idx.last_seq == scanned_last) =>
                {
                    // Scanned by a repair and intact: its index files stay as they are.
                    seg.index_bytes = indexed.map_or(0, |(_, _, b)| b);
                    self.segs.push(seg);
                    return Ok(None);
                }
                Some(_) => {
                    self.index_writes.push(self.segs.len());
                    self.segs.push(seg);
                    return Ok(None);
                }
            }
        };
        // Damage at `problem.position`. Is anything valid after it?
        let first_at_stake = scanned_last + 1;
        let after =
            find_valid_frame_after(&file, &log_path, problem.position, file_len, first_at_stake)?;
        let incomplete =
            crate::segment::frame_len(&read_some(&file, &log_path, problem.position, file_len)?)
                .is_none_or(|n| problem.position + n as u64 > file_len);
        let last_at_stake = match (next_base, after) {
            (Some(next), a) => next.saturating_sub(1).max(a.map_or(0, |(_, _, last)| last)),
            (None, Some((_, _, last))) => last,
            (None, None) => scanned_last,
        };
        // Damage at or below the recovery point hit synced records: not a torn write.
        let torn = next_base.is_none() && after.is_none() && first_at_stake > self.point;
        let last_at_stake = if next_base.is_none() {
            last_at_stake.max(self.point)
        } else {
            last_at_stake
        };
        match (torn, mode) {
            (true, RecoveryMode::Strict) => Err(Error::TornTail {
                path: log_path,
                position: problem.position,
                bytes_after: file_len - problem.position,
                incomplete,
                reason: problem.reason,
            }),
            (true, _) => {
                tracing::warn!(
                    path = %log_path.display(),
                    position = problem.position,
                    bytes_removed = file_len - problem.position,
                    reason = %problem.reason,
                    "cutting the active segment's torn tail (saved in the quarantine directory)"
                );
                self.quarantine_bytes(
                    Some(&file),
                    &log_path,
                    problem.position,
                    file_len,
                    None,
                    &format!("torn tail: {}", problem.reason),
                )?;
                self.report.truncated = Some(TruncatedTail {
                    path: log_path.clone(),
                    position: problem.position,
                    bytes_removed: file_len - problem.position,
                    reason: problem.reason,
                });
                seg.open = Some(Arc::new(file));
                remove_if_exists(&sf.index_path)?;
                remove_if_exists(&sf.time_index_path)?;
                self.segs.push(seg);
                Ok(Some(builder))
            }
            (false, RecoveryMode::Repair) => {
                let seqs =
                    (last_at_stake >= first_at_stake).then_some((first_at_stake, last_at_stake));
                self.quarantine_bytes(
                    Some(&file),
                    &log_path,
                    problem.position,
                    file_len,
                    seqs,
                    &problem.reason,
                )?;
                drop(file);
                if seg.last_seq >= seg.base_seq {
                    // What is left is a closed segment now (a hole or the next file follows).
                    seg.index_bytes =
                        write_indexes(&seg, true, &crate::fault::FaultInjector::default())?;
                    self.segs.push(seg);
                } else {
                    remove_if_exists(&sf.index_path)?;
                    remove_if_exists(&sf.time_index_path)?;
                    remove_if_exists(&log_path)?;
                    fsync_dir(self.dir)?;
                }
                if let Some((first, last)) = seqs {
                    let marker = self.quarantine_dir()?.join(hole_file_name(first, last));
                    self.push_hole(first, last, marker);
                }
                Ok(None)
            }
            (false, _) => Err(Error::Damaged {
                path: log_path,
                position: problem.position,
                reason: problem.reason,
                first_seq: first_at_stake,
                last_seq: last_at_stake.max(first_at_stake),
            }),
        }
    }

    /// The quarantine directory, created and its entry synced on first use.
    fn quarantine_dir(&mut self) -> Result<PathBuf, Error> {
        let qdir = self.dir.join(QUARANTINE_DIR);
        if !self.quarantine_ready {
            match fs::create_dir(&qdir) {
                Ok(()) => fsync_dir(self.dir)?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !qdir.is_dir() {
                        return Err(Error::NotADirectory { path: qdir });
                    }
                }
                Err(e) => return Err(Error::io(&qdir, e)),
            }
            self.quarantine_ready = true;
        }
        Ok(qdir)
    }

    /// A name in the quarantine directory that is not taken yet.
    fn free_name(&mut self, name: &str) -> Result<PathBuf, Error> {
        let qdir = self.quarantine_dir()?;
        let mut path = qdir.join(name);
        let mut n = 1;
        while fs::symlink_metadata(&path).is_ok() {
            path = qdir.join(format!("{name}.{n}"));
            n += 1;
        }
        Ok(path)
    }

    /// Copies bytes `from..to` of `src` (at `src_path`) into the quarantine directory and syncs
    /// them there, then truncates `src` to `from` and syncs it. With `seqs`, the copy is the
    /// marker of the hole `seqs` (named by [`hole_file_name`]); `src` may then be `None` (no
    /// bytes: seqs found missing).
    fn quarantine_bytes(
        &mut self,
        src: Option<&File>,
        src_path: &Path,
        from: u64,
        to: u64,
        seqs: Option<(u64, u64)>,
        reason: &str,
    ) -> Result<(), Error> {
        let name = match seqs {
            Some((first, last)) => hole_file_name(first, last),
            None => format!(
                "{}.at-{from}",
                src_path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("segment")
            ),
        };
        let mut target = self.free_name(&name)?;
        if seqs.is_some() && target.file_name() != Some(name.as_ref()) {
            // An earlier, interrupted repair left the marker: keep it, save these bytes beside
            // it under a free name.
            let keep = self.free_name(&format!("{name}.bytes"))?;
            target = keep;
        }
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| Error::io(&target, e))?;
        if let Some(src) = src {
            let mut pos = from;
            let mut buf = vec![0u8; 1 << 20];
            while pos < to {
                let n = usize::try_from((to - pos).min(buf.len() as u64)).unwrap_or(buf.len());
                let chunk = buf.get_mut(..n).unwrap_or_default();
                src.read_exact_at(chunk, pos)
                    .map_err(|e| Error::io(src_path, e))?;
                io::Write::write_all(&mut out, chunk).map_err(|e| Error::io(&target, e))?;
                pos += n as u64;
            }
        }
        out.sync_all().map_err(|e| Error::io(&target, e))?;
        drop(out);
        let qdir = self.quarantine_dir()?;
        fsync_dir(&qdir)?;
        if let Some(src) = src {
            src.set_len(from)
                .and_then(|()| src.sync_all())
                .map_err(|e| Error::io(src_path, e))?;
        }
        tracing::warn!(
            from = %src_path.display(),
            position = from,
            bytes = to - from,
            to = %target.display(),
            reason,
            "moved damaged bytes into the quarantine directory"
        );
        self.report.quarantined.push(QuarantinedPiece {
            from: src_path.to_path_buf(),
            position: from,
            bytes: to - from,
            to: target,
            seqs,
            reason: reason.to_owned(),
        });
        if let Some((first, last)) = seqs
            && src.is_none()
        {
            let marker = self.quarantine_dir()?.join(hole_file_name(first, last));
            self.push_hole(first, last, marker);
        }
        Ok(())
    }

    /// Moves one file or directory whole into the quarantine directory.
    fn move_path_aside(&mut self, path: &Path, reason: &str) -> Result<(), Error> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("entry")
            .to_owned();
        let to = self.free_name(&name)?;
        fs::rename(path, &to).map_err(|e| Error::io(path, e))?;
        fsync_dir(&self.quarantine_dir()?)?;
        if let Some(parent) = path.parent() {
            fsync_dir(parent)?;
        }
        tracing::warn!(from = %path.display(), to = %to.display(), reason, "moved an entry into the quarantine directory");
        self.report.quarantined.push(QuarantinedPiece {
            from: path.to_path_buf(),
            position: 0,
            bytes: 0,
            to,
            seqs: None,
            reason: reason.to_owned(),
        });
        Ok(())
    }

    /// Moves the files of segment `base` whole into the quarantine directory (renames, then
    /// syncs both directories).
    fn move_aside(&mut self, base: u64, reason: &str) -> Result<(), Error> {
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let name = crate::segment::segment_file_name(base, suffix);
            let from = self.dir.join(&name);
            let bytes = match fs::symlink_metadata(&from) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&from, e)),
            };
            let to = self.free_name(&name)?;
            fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
            tracing::warn!(from = %from.display(), to = %to.display(), reason, "moved a segment file into the quarantine directory");
            self.report.quarantined.push(QuarantinedPiece {
                from,
                position: 0,
                bytes,
                to,
                seqs: None,
                reason: reason.to_owned(),
            });
        }
        let qdir = self.quarantine_dir()?;
        fsync_dir(&qdir)?;
        fsync_dir(self.dir)
    }
}

/// Up to 16 bytes at `pos` (for a frame header).
fn read_some(file: &File, path: &Path, pos: u64, file_len: u64) -> Result<Vec<u8>, Error> {
    let n = file_len.saturating_sub(pos).min(16) as usize;
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, pos)
        .map_err(|e| Error::io(path, e))?;
    Ok(buf)
}

const RECOVERY_POINT_TMP: &str = "recovery-point.tmp";
const RECOVERY_POINT_MAGIC: [u8; 4] = *b"KRPT";

/// Writes the recovery point file: magic, version, the seq and a CRC, through a synced temporary
/// file renamed into place (then the directory is synced).
pub(crate) fn write_recovery_point(dir: &Path, seq: u64) -> Result<(), Error> {
    let mut buf = Vec::with_capacity(20);
    buf.extend_from_slice(&RECOVERY_POINT_MAGIC);
    buf.extend_from_slice(&[1, 0, 0, 0]);
    buf.extend_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    let tmp = dir.join(RECOVERY_POINT_TMP);
    let path = dir.join(RECOVERY_POINT_FILE_NAME);
    let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    io::Write::write_all(&mut f, &buf).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    fsync_dir(dir)
}

/// Reads the recovery point of the log in `dir` (its
/// [`RECOVERY_POINT_FILE_NAME`](crate::RECOVERY_POINT_FILE_NAME) file): a seq up to which the
/// log held every record, synced, when it was last closed or rolled. `None` when the file does
/// not exist. Read-only tools use it to tell a torn write from missing data: segment files that
/// end below it have lost records.
///
/// # Errors
/// [`Error::Corrupt`] naming the file when it is damaged; [`Error::Io`].
pub fn read_recovery_point(dir: &Path) -> Result<Option<u64>, Error> {
    let path = dir.join(RECOVERY_POINT_FILE_NAME);
    let buf = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
            return Err(Error::Corrupt {
                path,
                position: 0,
                reason: "the recovery point is a directory".into(),
            });
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    let corrupt = |position: u64, reason: String| Error::Corrupt {
        path: path.clone(),
        position,
        reason,
    };
    if buf.len() != 20 {
        return Err(corrupt(0, format!("{} bytes, expected 20", buf.len())));
    }
    if buf.get(..4) != Some(&RECOVERY_POINT_MAGIC[..]) || buf.get(4) != Some(&1) {
        return Err(corrupt(0, "bad magic or version".into()));
    }
    let word = |r: std::ops::Range<usize>| buf.get(r).unwrap_or_default();
    let crc = u32::from_le_bytes(word(16..20).try_into().unwrap_or_default());
    if crc32fast::hash(word(0..16)) != crc {
        return Err(corrupt(16, "CRC mismatch".into()));
    }
    Ok(Some(u64::from_le_bytes(
        word(8..16).try_into().unwrap_or_default(),
    )))
}

fn sync_files(opts: &Options) -> bool {
    opts.sync != SyncPolicy::Never
}
