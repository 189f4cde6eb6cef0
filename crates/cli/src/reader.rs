//! A read-only reader of a local log directory that follows the segment files as they grow.
//!
//! It never opens a [`krabka_storage::Log`] (which recovers and so may change files), so it can
//! tail a log another process is writing, the way `tail -f` does with a file.

use std::fs::File;
use std::path::{Path, PathBuf};

use krabka_storage::Record;
use krabka_storage::segment::{self, INDEX_SUFFIX, LOG_SUFFIX};

use crate::error::{CliError, Result};
use crate::inspect::segment_bases;

/// Bytes read from a segment file per step.
const CHUNK: usize = 4 << 20;

/// Where the reader is: a segment, a byte position in its `.log` and the next seq wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    base: u64,
    position: u64,
}

/// Reads records from `next_seq` on; see the module docs.
#[derive(Debug)]
pub struct LocalReader {
    dir: PathBuf,
    next_seq: u64,
    cursor: Option<Cursor>,
}

impl LocalReader {
    /// A reader of the log at `dir` whose first record returned is `from_seq`.
    pub fn new(dir: &Path, from_seq: u64) -> Self {
        Self {
            dir: dir.to_path_buf(),
            next_seq: from_seq,
            cursor: None,
        }
    }

    /// The seq of the next record [`poll`](Self::poll) returns.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn log_path(&self, base: u64) -> PathBuf {
        self.dir.join(segment::segment_file_name(base, LOG_SUFFIX))
    }

    /// Finds the segment holding `next_seq` and the index position to start scanning from.
    fn locate(&self) -> Result<Option<Cursor>> {
        let bases = segment_bases(&self.dir)?;
        let Some(&first) = bases.first() else {
            return Ok(None);
        };
        if self.next_seq < first {
            return Err(CliError::new(format!(
                "seq {} is below the first local seq {first} of {}",
                self.next_seq,
                self.dir.display()
            ))
            .hint(format!(
                "older records are in the remote tier (pass --remote) or were deleted by retention; read from {first}"
            )));
        }
        let Some(&base) = bases.iter().rev().find(|b| **b <= self.next_seq) else {
            return Ok(None);
        };
        // A closed segment's sparse index saves scanning from the start; a missing or bad
        // index only costs time.
        let index = self
            .dir
            .join(segment::segment_file_name(base, INDEX_SUFFIX));
        let position = std::fs::read(&index)
            .ok()
            .and_then(|b| segment::lookup_position(&b, self.next_seq).ok())
            .unwrap_or(0);
        Ok(Some(Cursor { base, position }))
    }

    /// Up to `max` records from [`next_seq`](Self::next_seq); empty when caught up with the
    /// writer (call again later to follow).
    ///
    /// # Errors
    /// When the directory or a segment cannot be read, or a segment is corrupt (with the file
    /// and byte position).
    pub fn poll(&mut self, max: usize) -> Result<Vec<Record>> {
        loop {
            let cursor = match self.cursor {
                Some(c) => c,
                None => match self.locate()? {
                    Some(c) => c,
                    None => return Ok(Vec::new()),
                },
            };
            self.cursor = Some(cursor);
            let path = self.log_path(cursor.base);
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Deleted by retention under us: find where the seq lives now.
                    self.cursor = None;
                    if self.locate()?.is_none() {
                        return Ok(Vec::new());
                    }
                    continue;
                }
                Err(e) => return Err(CliError::at("cannot open segment", &path, e)),
            };
            let len = file
                .metadata()
                .map_err(|e| CliError::at("cannot stat segment", &path, e))?
                .len();
            let buf = segment::read_chunk(&file, &path, cursor.position, len, CHUNK)
                .map_err(|e| CliError::at("cannot read segment", &path, e))?;
            let decoded = segment::decode_records(&buf, self.next_seq, max).map_err(|e| {
                let at = match &e {
                    krabka_storage::Error::Corrupt {
                        position, reason, ..
                    } => {
                        format!("at byte {}: {reason}", cursor.position + position)
                    }
                    other => other.to_string(),
                };
                CliError::new(format!("corrupt segment {} {at}", path.display()))
                    .hint("run `krabka verify` on the directory for a full report")
            })?;
            if let Some(last) = decoded.records.last() {
                self.next_seq = last.seq.saturating_add(1);
            } else if let Some(next) = decoded.next_seq {
                self.next_seq = self.next_seq.max(next);
            }
            self.cursor = Some(Cursor {
                base: cursor.base,
                position: cursor.position + decoded.consumed as u64,
            });
            if !decoded.records.is_empty() {
                return Ok(decoded.records);
            }
            if decoded.consumed > 0 {
                continue;
            }
            // Nothing more in this segment: move on when the writer has rolled to the next one.
            let next_base = segment_bases(&self.dir)?
                .into_iter()
                .find(|b| *b > cursor.base);
            match next_base {
                Some(b) if b <= self.next_seq => {
                    self.cursor = Some(Cursor {
                        base: b,
                        position: 0,
                    });
                }
                _ => return Ok(Vec::new()),
            }
        }
    }
}
