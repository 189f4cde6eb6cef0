//! Listing a log directory: its segment files, what else is there, and the hole markers in
//! its quarantine directory.

use std::fs;
use std::io;
use std::path::Path;

use super::split::{SPLIT_JOURNAL, SPLIT_JOURNAL_TMP};
use super::{MAX_SEQ, Recoverer};
use crate::Hole;
use crate::layout::accepted::{ACCEPTED_HOLES_FILE_NAME, ACCEPTED_HOLES_TMP};
use crate::layout::clean::CLEAN_SHUTDOWN_TMP;
use crate::layout::hole::list_hole_markers;
use crate::layout::recovery_point::RECOVERY_POINT_TMP;
use crate::segment::{LOG_EXTENSION, QUARANTINE_DIR, parse_segment_file_name};
use crate::{CLEAN_SHUTDOWN_FILE_NAME, Error, LOCK_FILE_NAME, RECOVERY_POINT_FILE_NAME};

/// The segment files and hole markers of a log directory.
pub(super) struct Listing {
    pub(super) bases: Vec<u64>,
    /// Sorted by seqs.
    pub(super) holes: Vec<Hole>,
}

impl Recoverer<'_> {
    /// Lists the segment files (stray files go into the report) and the hole markers.
    pub(super) fn list(&mut self) -> Result<Listing, Error> {
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
                || name == CLEAN_SHUTDOWN_FILE_NAME
                || name == CLEAN_SHUTDOWN_TMP
                || name == ACCEPTED_HOLES_FILE_NAME
                || name == ACCEPTED_HOLES_TMP
                || name == SPLIT_JOURNAL
                || name == SPLIT_JOURNAL_TMP
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
                Some((base, LOG_EXTENSION)) => bases.push(base),
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
        let holes = list_holes(dir)?;
        Ok(Listing { bases, holes })
    }
}

/// The hole markers in the quarantine directory of `dir` that recovery places, sorted (none
/// when `quarantine` is not a directory; markers beyond [`MAX_SEQ`] are not holes);
/// overlapping markers are refused.
fn list_holes(dir: &Path) -> Result<Vec<Hole>, Error> {
    let mut holes = match list_hole_markers(dir) {
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotADirectory => {
            Vec::new()
        }
        other => other?,
    };
    holes.retain(|h| h.last_seq < MAX_SEQ);
    // Overlapping markers cannot come from this code; refuse rather than guess.
    for pair in holes.windows(2) {
        if let [a, b] = pair
            && b.first_seq <= a.last_seq
        {
            return Err(Error::Corrupt {
                path: b.marker.clone(),
                position: 0,
                reason: format!("hole marker overlaps {}", a.marker.display()),
            });
        }
    }
    Ok(holes)
}
