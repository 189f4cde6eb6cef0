//! The split journal: how a repair that keeps intact batches after damage changes several files
//! crash-safely.
//!
//! Keeping the batches after damage means writing new segment files (one per run of intact
//! batches) and then truncating the damaged one. Before the first new file is created, the
//! repair writes [`SPLIT_JOURNAL`] (atomically) naming the damaged segment, the length it is cut
//! to, its length before, and every new file with its length; it removes the journal once the
//! damaged file is cut. The next open of the log, in any mode, finishes what the journal names
//! before anything else: when the damaged file still has its old length, the new files (copies
//! of its bytes) are removed — the log is as it was before the repair; when it has its new
//! length, the new files were complete and synced before the cut — the log is as the repair
//! left it. Either way, no record is lost and no seq is held twice.

use std::fs;
use std::io;
use std::path::Path;

use super::Recoverer;
use crate::Error;
use crate::fsutil::{self, IoResultExt, write_atomic_named};
use crate::kvfile;
use crate::segment::segment_paths;

/// Name of the journal a repair writes while it splits a damaged segment file.
pub(crate) const SPLIT_JOURNAL: &str = "repair-split";

/// The temporary file [`SPLIT_JOURNAL`] is written through.
pub(crate) const SPLIT_JOURNAL_TMP: &str = "repair-split.tmp";

const HEADER: &str = "krabka repair split v1";

/// More than any journal a repair writes (a line per run of intact batches in one segment).
const MAX_JOURNAL_BYTES: u64 = 4 << 20;

/// One split in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Journal {
    /// Base seq of the damaged segment.
    pub(super) base: u64,
    /// The length it is cut to (`0`: its files are removed).
    pub(super) keep_len: u64,
    /// Its length before the repair.
    pub(super) file_len: u64,
    /// The new segment files: base seq and length.
    pub(super) pieces: Vec<(u64, u64)>,
}

impl Journal {
    fn encode(&self) -> String {
        let mut fields = vec![(
            "segment",
            format!("{} {} {}", self.base, self.keep_len, self.file_len),
        )];
        fields.extend(
            self.pieces
                .iter()
                .map(|(base, len)| ("piece", format!("{base} {len}"))),
        );
        kvfile::render(HEADER, &fields)
    }

    /// The journal `text` records, or `None` when it is not one this crate wrote whole: a
    /// checksum over every line before it, pieces after the damaged segment's base in
    /// increasing order, and lengths that fit the damaged file. A damaged journal must never
    /// make an open remove the wrong file.
    fn decode(text: &str) -> Option<Journal> {
        let mut fields = kvfile::parse(text, HEADER).ok()?;
        let numbers = |value: &str| -> Option<Vec<u64>> {
            value.split(' ').map(|n| n.parse().ok()).collect()
        };
        let head = numbers(fields.next_value("segment").ok()?)?;
        let [base, keep_len, file_len] = <[u64; 3]>::try_from(head).ok()?;
        let mut pieces = Vec::new();
        // Bounded by the journal's length, which its reader bounds.
        while let Some(value) = fields.optional_value("piece").ok()? {
            let [piece, len] = <[u64; 2]>::try_from(numbers(value)?).ok()?;
            pieces.push((piece, len));
        }
        let ordered = pieces
            .iter()
            .try_fold(base, |prev, &(piece, len)| {
                (piece > prev && len > 0 && len <= file_len).then_some(piece)
            })
            .is_some();
        (keep_len < file_len && !pieces.is_empty() && ordered).then_some(Journal {
            base,
            keep_len,
            file_len,
            pieces,
        })
    }
}

/// Durably records the split `journal` in `dir` before its first new file is created.
pub(super) fn begin(dir: &Path, journal: &Journal) -> Result<(), Error> {
    write_atomic_named(
        &dir.join(SPLIT_JOURNAL),
        &dir.join(SPLIT_JOURNAL_TMP),
        journal.encode().as_bytes(),
    )
}

/// Removes the journal of `dir` once the split is complete, and syncs the directory.
pub(super) fn end(dir: &Path) -> Result<(), Error> {
    let path = dir.join(SPLIT_JOURNAL);
    fsutil::remove_if_exists(&path).at(&path)?;
    fsutil::fsync_dir(dir).at(dir)
}

/// The length of the file at `path`, `None` when it does not exist.
fn len_of(path: &Path) -> Result<Option<u64>, Error> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Removes the three files of segment `base` in `dir` (those that exist).
fn remove_segment(dir: &Path, base: u64) -> Result<(), Error> {
    let (log, index, time_index) = segment_paths(dir, base);
    for path in [&index, &time_index, &log] {
        fsutil::remove_if_exists(path).at(path)?;
    }
    Ok(())
}

impl Recoverer<'_> {
    /// Finishes a split a repair was interrupted in (see the module docs): back to the log as
    /// it was when the damaged file was not cut yet, else forward to the repaired log.
    pub(super) fn finish_interrupted_split(&mut self) -> Result<(), Error> {
        let dir = self.dir;
        let tmp = dir.join(SPLIT_JOURNAL_TMP);
        fsutil::remove_if_exists(&tmp).at(&tmp)?;
        let path = dir.join(SPLIT_JOURNAL);
        let mut bytes = Vec::new();
        let read = fs::File::open(&path).and_then(|f| {
            use std::io::Read;
            f.take(MAX_JOURNAL_BYTES + 1).read_to_end(&mut bytes)
        });
        match read {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&path, e)),
        }
        let text = String::from_utf8_lossy(&bytes);
        let corrupt = |reason: String| Error::Corrupt {
            path: path.clone(),
            position: 0,
            reason,
        };
        let journal = Journal::decode(&text).ok_or_else(|| {
            corrupt("the journal of an interrupted repair does not decode".into())
        })?;
        let damaged = segment_paths(dir, journal.base).0;
        let now = len_of(&damaged)?;
        if now == Some(journal.file_len) {
            // Not cut yet: every new file is a copy of bytes the damaged file still holds.
            for &(base, _) in &journal.pieces {
                remove_segment(dir, base)?;
            }
            tracing::warn!(path = %damaged.display(),
                "undid a repair interrupted before it cut the damaged segment; repair again");
        } else if now == Some(journal.keep_len) || (journal.keep_len == 0 && now.is_none()) {
            for &(base, len) in &journal.pieces {
                let piece = segment_paths(dir, base).0;
                if len_of(&piece)? != Some(len) {
                    return Err(corrupt(format!(
                        "an interrupted repair cut {} but its new segment file {} is not the {len} bytes it wrote",
                        damaged.display(),
                        piece.display()
                    )));
                }
            }
            if journal.keep_len == 0 {
                remove_segment(dir, journal.base)?;
            }
            tracing::warn!(path = %damaged.display(),
                "finished a repair interrupted after it cut the damaged segment");
        } else {
            return Err(corrupt(format!(
                "the journal of an interrupted repair says {} has {} or {} bytes, it has {}",
                damaged.display(),
                journal.file_len,
                journal.keep_len,
                now.map_or_else(|| "no file".to_owned(), |n| format!("{n} bytes"))
            )));
        }
        fsutil::fsync_dir(dir).at(dir)?;
        end(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_round_trips_and_refuses_what_it_did_not_write() {
        let j = Journal {
            base: 1,
            keep_len: 100,
            file_len: 900,
            pieces: vec![(10, 300), (20, 200)],
        };
        let text = j.encode();
        assert_eq!(Journal::decode(&text), Some(j.clone()));
        assert_eq!(Journal::decode(&text.replace("piece 20", "piece x")), None);
        // One flipped digit (a piece naming a live segment, say) breaks the checksum.
        assert_eq!(Journal::decode(&text.replace("piece 20", "piece 21")), None);
        for cut in 0..text.len() {
            assert_eq!(Journal::decode(&text[..cut]), None, "cut at {cut}");
        }
        // Without its checksum line, or with pieces that are not after the base in order.
        assert_eq!(
            Journal::decode("krabka repair split v1\nsegment 1 100 900\npiece 10 3\n"),
            None
        );
        for pieces in [vec![(1, 300)], vec![(20, 300), (10, 200)], vec![(10, 901)]] {
            let bad = Journal {
                pieces,
                ..j.clone()
            };
            assert_eq!(Journal::decode(&bad.encode()), None, "{bad:?}");
        }
        assert_eq!(Journal::decode(""), None);
    }
}
