//! A read-only view of a log directory: its segments, holes, quarantine and recovery point, a
//! [`LogReader`] that reads records (or their raw batches) from a seq on, every check of a
//! `verify` ([`LogView::verify`]) and what a repair would do ([`LogView::preview_repair`]).
//!
//! A [`LogView`] never takes the log's lock and never runs recovery, so it changes nothing and
//! can look at a log another process is writing: a [`LogReader`] follows the active segment as
//! it grows and the new segments a roll creates, the way `tail -f` follows a file. What it
//! reads is exact or an error, by the same rules as [`Log::read`](crate::Log::read): see
//! [`LogReader`].
//!
//! ```
//! use krabka_protocol::Message;
//! use krabka_storage::view::LogView;
//! use krabka_storage::{Log, Options};
//!
//! let dir = tempfile::tempdir()?;
//! let log = Log::open(dir.path(), Options::default())?;
//! log.append(&Message::new("a"))?;
//! let view = LogView::new(dir.path());
//! let mut reader = view.reader(1);
//! assert_eq!(reader.poll(10)?.len(), 1);
//! assert!(reader.poll(10)?.is_empty()); // caught up with the writer
//! log.append(&Message::new("b"))?;
//! assert_eq!(reader.poll(10)?[0].seq, 2); // and following it
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod found;
mod reader;
mod repair;
mod verify;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[allow(deprecated)]
pub use self::found::Batches;
pub use self::found::{IncompleteTail, IndexFallback, PolledBatches};
pub use self::reader::LogReader;
pub use self::repair::RepairPreview;
pub use self::verify::{IndexState, Problem, SegmentCheck, VerifyReport};
use crate::layout::hole::{list_hole_markers, with_acceptance};
use crate::layout::index_files::{IndexFiles, check_indexes};
use crate::layout::{FdSlot, SegFile};
use crate::segment::{LOG_EXTENSION, QUARANTINE_DIR, parse_segment_file_name, segment_paths};
use crate::{Error, Hole, SegmentRepair, plan_segment_repair};

/// A read-only view of the log directory `dir` (see the [module docs](self)). Cheap: it holds
/// the path only, and every call looks at the files as they are now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogView {
    dir: PathBuf,
}

impl LogView {
    /// The view of the log directory `dir` (nothing is read yet).
    pub fn new(dir: impl Into<PathBuf>) -> LogView {
        LogView { dir: dir.into() }
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the `.log` file of the segment `base`.
    pub fn log_path(&self, base: u64) -> PathBuf {
        segment_paths(&self.dir, base).0
    }

    /// The base seqs of the segment files (`*.log`) of the directory, sorted.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory when it cannot be listed.
    pub fn segment_bases(&self) -> Result<Vec<u64>, Error> {
        let dir = &self.dir;
        let mut bases = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name();
            if let Some((base, LOG_EXTENSION)) = name.to_str().and_then(parse_segment_file_name) {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        Ok(bases)
    }

    /// The explicit holes (the hole markers of the quarantine directory), by first seq, each
    /// with its acceptance ([`ACCEPTED_HOLES_FILE_NAME`](crate::ACCEPTED_HOLES_FILE_NAME));
    /// none when there is no quarantine directory.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Corrupt`] naming the accepted-holes file when it cannot be read
    /// or decoded; [`Error::Io`] naming the quarantine directory when it cannot be listed.
    pub fn holes(&self) -> Result<Vec<Hole>, Error> {
        let accepted = crate::read_accepted_holes(&self.dir)?;
        Ok(with_acceptance(list_hole_markers(&self.dir)?, &accepted))
    }

    /// Every entry of the quarantine directory ([`QUARANTINE_DIR`]: damaged bytes, stray files
    /// and hole markers a recovery moved there), sorted; none when there is none.
    ///
    /// # Errors
    /// [`Error::Io`] naming the quarantine directory when it cannot be listed.
    pub fn quarantine(&self) -> Result<Vec<PathBuf>, Error> {
        let qdir = self.dir.join(QUARANTINE_DIR);
        let entries = match fs::read_dir(&qdir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&qdir, e)),
        };
        let mut paths = entries
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::io(&qdir, e))?;
        paths.sort();
        Ok(paths)
    }

    /// The log's recovery point: every seq up to it was in the log, synced, when it was last
    /// closed or rolled ([`read_recovery_point`](crate::read_recovery_point)).
    ///
    /// # Errors
    /// As [`read_recovery_point`](crate::read_recovery_point).
    pub fn recovery_point(&self) -> Result<Option<u64>, Error> {
        crate::read_recovery_point(&self.dir)
    }

    /// Whether the next [`Log::open`](crate::Log::open) rebuilds the index files of the closed
    /// segment `base`, whose `.log` is intact and `log_len` bytes long, by itself instead of
    /// trusting them: by the very check open makes. Open trusts them only when both can be read
    /// and decode, both name `base`, the offset index describes a `.log` of exactly `log_len`
    /// bytes holding at least one record, and the two agree on the largest timestamp and on the
    /// seq of every entry; it rebuilds missing or other ones from the `.log`. Index files it
    /// cannot read at all (a directory in their place) it cannot replace either: `false`. Index
    /// files that pass those checks but point at the wrong batches are trusted by open (a read
    /// falls back to a scan), so `segment::verify_segment_files` still names them.
    pub fn indexes_rebuilt_at_open(&self, base: u64, log_len: u64) -> bool {
        let (log_path, index_path, time_index_path) = segment_paths(&self.dir, base);
        let files = SegFile {
            log_path,
            index_path,
            time_index_path,
            read_fd: FdSlot::default(),
        };
        matches!(check_indexes(&files, base, log_len), IndexFiles::Rebuilt)
    }

    /// Whether the next [`Log::open`](crate::Log::open) (with the default
    /// [`RecoveryMode::TolerateTornTail`](crate::RecoveryMode::TolerateTornTail)) cuts the
    /// newest segment `base` at `position` as a torn tail by itself, by the very rule open
    /// applies: no valid batch follows the damage, and the first seq it costs
    /// (`last_intact + 1`, the seq after the last intact batch before it) is above the
    /// recovery point (records at or below it were synced: damage there is never a torn
    /// write). The bytes open cuts are saved in the quarantine directory first.
    ///
    /// # Errors
    /// [`Error::Io`] when the segment or the recovery point cannot be read.
    pub fn tail_cut_at_open(
        &self,
        base: u64,
        position: u64,
        last_intact: u64,
    ) -> Result<bool, Error> {
        let path = self.log_path(base);
        let file = fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        let first_at_stake = last_intact.saturating_add(1);
        let point = self.recovery_point()?.unwrap_or(0);
        if first_at_stake <= point {
            return Ok(false);
        }
        let after = crate::segment::find_valid_batch_after(
            &file,
            &path,
            position,
            file_len,
            first_at_stake,
            u64::MAX,
        )?;
        Ok(after.is_none())
    }

    /// What a repair ([`RecoveryMode::Repair`](crate::RecoveryMode::Repair)) would do with
    /// each damaged segment file, by a read-only scan of each
    /// ([`plan_segment_repair`] against the recovery point).
    ///
    /// # Errors
    /// As [`segment_bases`](Self::segment_bases), [`recovery_point`](Self::recovery_point) and
    /// [`plan_segment_repair`].
    pub fn plan_repair(&self) -> Result<Vec<SegmentRepair>, Error> {
        let bases = self.segment_bases()?;
        let point = self.recovery_point()?.unwrap_or(0);
        let mut plans = Vec::new();
        for (i, &base) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied();
            plans.extend(plan_segment_repair(
                &self.log_path(base),
                base,
                next,
                point,
            )?);
        }
        Ok(plans)
    }

    /// A reader whose first record is `from_seq` (see [`LogReader`]).
    pub fn reader(&self, from_seq: u64) -> LogReader {
        LogReader::new(self.clone(), from_seq)
    }
}
