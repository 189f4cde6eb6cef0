//! Explicit holes: seqs a repair moved aside (or found missing), each marked by a file of
//! `DIR/quarantine/` named by [`hole_file_name`](crate::segment::hole_file_name), perhaps
//! accepted as lost by the user (`DIR/accepted-holes`, see [`super::accepted`]).

use std::fs;
use std::io;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::accepted::AcceptedHole;
use crate::Error;
use crate::segment::{QUARANTINE_DIR, parse_hole_file_name};

/// An explicit hole in a log's seqs: seqs a repair
/// ([`RecoveryMode::Repair`](crate::RecoveryMode::Repair)) moved aside or found missing. Reads
/// into one fail with [`Error::Quarantined`]; appends never reuse its seqs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hole {
    /// First seq of the hole.
    pub first_seq: u64,
    /// Last seq of the hole.
    pub last_seq: u64,
    /// Its marker file in the quarantine directory (holding the bytes moved aside, if any).
    pub marker: PathBuf,
    /// When the user accepted it as lost ([`Log::accept_holes`](crate::Log::accept_holes)), in
    /// milliseconds since the Unix epoch; `None` when not accepted.
    pub accepted_at_ms: Option<i64>,
}

impl Hole {
    /// The hole `first_seq..=last_seq` marked by `marker`, not accepted.
    pub fn new(first_seq: u64, last_seq: u64, marker: PathBuf) -> Hole {
        Hole {
            first_seq,
            last_seq,
            marker,
            accepted_at_ms: None,
        }
    }

    /// Its seqs.
    pub fn seqs(&self) -> RangeInclusive<u64> {
        self.first_seq..=self.last_seq
    }

    /// Whether `seq` is in the hole.
    pub fn contains(&self, seq: u64) -> bool {
        self.seqs().contains(&seq)
    }

    /// Whether the user accepted it as lost.
    pub fn is_accepted(&self) -> bool {
        self.accepted_at_ms.is_some()
    }

    /// The error of a read that reached it.
    pub(crate) fn quarantined(&self) -> Error {
        Error::Quarantined {
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            path: self.marker.clone(),
        }
    }
}

/// Whether `holes` (sorted by first seq) cover every seq of `first..=last`.
///
/// ```
/// use krabka_storage::{Hole, holes_cover};
///
/// let holes = [Hole::new(10, 19, "a".into()), Hole::new(20, 29, "b".into())];
/// assert!(holes_cover(&holes, 12, 25));
/// assert!(!holes_cover(&holes, 12, 30));
/// ```
pub fn holes_cover(holes: &[Hole], first: u64, last: u64) -> bool {
    let mut next = first;
    for h in holes {
        if h.first_seq <= next && h.last_seq >= next {
            if h.last_seq >= last {
                return true;
            }
            next = h.last_seq + 1;
        }
    }
    next > last
}

/// Every hole marker in the quarantine directory of `dir`, sorted by seqs, not accepted; none
/// when there is no quarantine directory. Overlapping or absurd markers are listed as they
/// are: recovery decides what they mean.
///
/// # Errors
/// [`Error::Io`] naming the quarantine directory when it exists but cannot be listed (also
/// when it is not a directory).
pub(crate) fn list_hole_markers(dir: &Path) -> Result<Vec<Hole>, Error> {
    let qdir = dir.join(QUARANTINE_DIR);
    let entries = match fs::read_dir(&qdir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&qdir, e)),
    };
    let mut holes = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&qdir, e))?;
        if let Some((first, last)) = entry.file_name().to_str().and_then(parse_hole_file_name) {
            holes.push(Hole::new(first, last, entry.path()));
        }
    }
    holes.sort();
    Ok(holes)
}

/// `holes` with the acceptance of each (the first of `accepted` that covers it whole).
pub(crate) fn with_acceptance(mut holes: Vec<Hole>, accepted: &[AcceptedHole]) -> Vec<Hole> {
    for h in &mut holes {
        h.accepted_at_ms = accepted
            .iter()
            .find(|a| a.covers(h.first_seq, h.last_seq))
            .map(|a| a.accepted_at_ms);
    }
    holes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_holes_cover_a_gap_and_a_partial_one_does_not() {
        let hole = |first, last| Hole::new(first, last, PathBuf::from("q"));
        let holes = [hole(10, 19), hole(20, 29)];
        assert!(holes_cover(&holes, 10, 29));
        assert!(holes_cover(&holes, 15, 22));
        assert!(!holes_cover(&holes, 10, 30));
        assert!(!holes_cover(&holes, 5, 12));
        assert!(!holes_cover(&[], 1, 1));
    }

    #[test]
    fn markers_are_listed_sorted_and_acceptance_is_joined_by_cover() {
        let dir = tempfile::tempdir().unwrap();
        assert!(list_hole_markers(dir.path()).unwrap().is_empty());
        let qdir = dir.path().join(QUARANTINE_DIR);
        fs::create_dir(&qdir).unwrap();
        for (a, b) in [(20, 29), (5, 9)] {
            fs::write(qdir.join(crate::segment::hole_file_name(a, b)), b"").unwrap();
        }
        fs::write(qdir.join("00000000000000000001.log.at-0"), b"x").unwrap();
        let holes = list_hole_markers(dir.path()).unwrap();
        assert_eq!(
            holes.iter().map(Hole::seqs).collect::<Vec<_>>(),
            vec![5..=9, 20..=29]
        );
        let accepted = [AcceptedHole {
            first_seq: 20,
            last_seq: 29,
            accepted_at_ms: 7,
        }];
        let holes = with_acceptance(holes, &accepted);
        assert_eq!(
            holes.iter().map(|h| h.accepted_at_ms).collect::<Vec<_>>(),
            vec![None, Some(7)]
        );
        assert!(holes[1].is_accepted() && holes[1].contains(25) && !holes[1].contains(30));
    }
}
