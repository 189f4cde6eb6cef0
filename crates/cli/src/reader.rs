//! A read-only reader of a local log directory that follows the segment files as they grow.
//!
//! It never opens a [`krabka_storage::Log`] (which recovers and so may change files), so it can
//! tail a log another process is writing, the way `tail -f` does with a file.
//!
//! Every read is exact or an error: frames are decoded with
//! [`decode_records_at`](segment::decode_records_at), so each frame must carry the seq that
//! follows the previous one, starting at the segment's base seq (or at the seq of the frame an
//! index entry points to, which is checked against the frame itself). Records decoded before a
//! bad frame are returned first; the next call fails naming the file and byte. A closed segment
//! (one a later segment follows) must end exactly where the next one starts: a closed segment
//! that is empty, ends inside a frame, or is followed by a gap or an overlap in seqs (a deleted
//! segment file, a stray segment-named file) is an error, and so is reading into seqs that a
//! repair moved aside into `DIR/quarantine/`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use krabka_storage::Record;
use krabka_storage::segment::{self, FRAME_HEADER_LEN, INDEX_EXTENSION, LOG_EXTENSION};

use crate::error::{CliError, Result};
use crate::inspect::{Hole, quarantine_holes, segment_bases};
use crate::output::errln;

/// Bytes read from a segment file per step.
const CHUNK: usize = 4 << 20;

/// Where the reader is: a segment, a byte position in its `.log` and the seq of the frame there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    base: u64,
    position: u64,
    /// The seq the frame at `position` must carry.
    expect: u64,
    /// Whether `position` came from the segment's `.index` and no frame there was read yet (a
    /// wrong index entry then falls back to a scan from the segment's start).
    from_index: bool,
}

impl Cursor {
    fn start_of(base: u64) -> Self {
        Self {
            base,
            position: 0,
            expect: base,
            from_index: false,
        }
    }
}

/// An incomplete frame at the end of the newest segment: a write in progress, or a torn write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompleteTail {
    /// The segment's `.log` file.
    pub path: PathBuf,
    /// Where the incomplete frame starts.
    pub position: u64,
    /// Bytes from there to the end of the file.
    pub bytes: u64,
}

/// Reads records from `next_seq` on; see the module docs.
#[derive(Debug)]
pub struct LocalReader {
    dir: PathBuf,
    next_seq: u64,
    cursor: Option<Cursor>,
    /// The failure met right after the records last returned.
    pending: Option<CliError>,
    tail: Option<IncompleteTail>,
}

impl LocalReader {
    /// A reader of the log at `dir` whose first record returned is `from_seq`.
    pub fn new(dir: &Path, from_seq: u64) -> Self {
        Self {
            dir: dir.to_path_buf(),
            next_seq: from_seq,
            cursor: None,
            pending: None,
            tail: None,
        }
    }

    /// When the last [`poll`](Self::poll) found nothing new: the incomplete frame the newest
    /// segment ends with, if any (a writer in the middle of an append, or a torn write).
    pub fn incomplete_tail(&self) -> Option<&IncompleteTail> {
        self.tail.as_ref()
    }

    fn log_path(&self, base: u64) -> PathBuf {
        self.dir
            .join(segment::segment_file_name(base, LOG_EXTENSION))
    }

    /// Finds the segment holding `next_seq` and the position to start scanning from.
    fn locate(&self) -> Result<Option<Cursor>> {
        let bases = segment_bases(&self.dir)?;
        let Some(&first) = bases.first() else {
            return Ok(None);
        };
        // A hole marker speaks only for seqs no segment file holds: before the first one here,
        // between two files at the seam (`next_segment`).
        if self.next_seq < first {
            let holes = quarantine_holes(&self.dir)?;
            if let Some(hole) = holes.iter().find(|h| h.contains(self.next_seq)) {
                return Err(quarantined(&self.dir, hole));
            }
        }
        if self.next_seq == 0 {
            return Err(CliError::new(format!(
                "seq 0 is not a seq of {}: seqs start at 1",
                self.dir.display()
            ))
            .hint(format!(
                "read from {first}, the first seq the local log holds"
            )));
        }
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
    fn ends_before(&self, prev: u64, next: u64) -> bool {
        let index = self
            .dir
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
    /// gives, when the frame there carries a seq in `base..=next_seq`; else its start. A missing
    /// or bad index only costs time.
    fn index_cursor(&self, base: u64) -> Cursor {
        if self.next_seq <= base {
            return Cursor::start_of(base);
        }
        let index = self
            .dir
            .join(segment::segment_file_name(base, INDEX_EXTENSION));
        let Some(position) = std::fs::read(&index)
            .ok()
            .and_then(|b| segment::lookup_position(&b, self.next_seq).ok())
            .filter(|p| *p > 0)
        else {
            return Cursor::start_of(base);
        };
        let mut header = [0u8; FRAME_HEADER_LEN];
        let seq = File::open(self.log_path(base))
            .and_then(|f| f.read_exact_at(&mut header, position))
            .ok()
            .and_then(|()| header.get(8..16))
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_le_bytes);
        match seq {
            Some(seq) if (base..=self.next_seq).contains(&seq) => Cursor {
                base,
                position,
                expect: seq,
                from_index: true,
            },
            _ => {
                errln!(
                    "note: {} points seq {} at byte {position} of its .log, which holds no frame of \
                     a seq up to it; scanning the segment from its start (`krabka verify` checks the index)",
                    index.display(),
                    self.next_seq
                );
                Cursor::start_of(base)
            }
        }
    }

    /// Up to `max` records from the next seq to read; empty when caught up with the
    /// writer (call again later to follow).
    ///
    /// # Errors
    /// When the directory or a segment cannot be read; when a frame is bad (after the records
    /// decoded before it were returned by the previous call), naming the file and byte; when a
    /// closed segment is empty or ends inside a frame; when seqs between two segment files have
    /// a gap or an overlap; when the next seq was moved aside by a repair.
    pub fn poll(&mut self, max: usize) -> Result<Vec<Record>> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.tail = None;
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
            let len = file_len(&file, &path)?;
            if len < cursor.position {
                return Err(CliError::new(format!(
                    "segment {} shrank to {len} bytes while it was read at byte {}",
                    path.display(),
                    cursor.position
                ))
                .hint("another process truncated it; run `krabka verify` on the directory"));
            }
            if len > cursor.position {
                match self.decode_from(cursor, &file, &path, len, max)? {
                    Chunk::Records(records) => return Ok(records),
                    Chunk::Again => continue,
                    Chunk::AtEnd => {}
                }
            }
            // At the end of the bytes there (or at an incomplete frame): go on to the next
            // segment once the writer has rolled to it, and check the seams.
            let Some(cursor) = self.cursor else { continue };
            match self.next_segment(cursor, len, &path)? {
                Step::Again => continue,
                Step::Next(next) => self.cursor = Some(next),
                Step::CaughtUp => return Ok(Vec::new()),
            }
        }
    }

    /// Decodes up to `max` records of the segment at `path` (`len` bytes) from `cursor`.
    fn decode_from(
        &mut self,
        cursor: Cursor,
        file: &File,
        path: &Path,
        len: u64,
        max: usize,
    ) -> Result<Chunk> {
        let buf = segment::read_chunk(file, path, cursor.position, len, CHUNK)
            .map_err(|e| CliError::at("cannot read segment", path, e))?;
        match segment::decode_records_at(&buf, cursor.expect, self.next_seq, max) {
            Ok(decoded) => {
                if let Some(last) = decoded.records.last() {
                    self.next_seq = last.seq.saturating_add(1);
                }
                self.cursor = Some(Cursor {
                    base: cursor.base,
                    position: cursor.position + decoded.consumed as u64,
                    expect: decoded.next_seq.unwrap_or(cursor.expect),
                    from_index: cursor.from_index && decoded.consumed == 0,
                });
                if !decoded.records.is_empty() {
                    return Ok(Chunk::Records(decoded.records));
                }
                if decoded.consumed > 0 {
                    return Ok(Chunk::Again);
                }
            }
            Err(e) => {
                let (at, reason) = match e {
                    krabka_storage::Error::Corrupt {
                        position, reason, ..
                    } => (position, reason),
                    other => (0, other.to_string()),
                };
                if at == 0 && cursor.from_index {
                    errln!(
                        "note: the index of {} points at byte {} where no valid frame of \
                         seq {} starts; scanning the segment from its start",
                        path.display(),
                        cursor.position,
                        cursor.expect
                    );
                    self.cursor = Some(Cursor::start_of(cursor.base));
                    return Ok(Chunk::Again);
                }
                return self
                    .good_then_bad(&buf, cursor, max, at, reason, path)
                    .map(Chunk::Records);
            }
        }
        Ok(Chunk::AtEnd)
    }

    /// The records of `buf` before the bad frame at `at` (they are valid: returned now), and
    /// the failure naming the file and byte (returned by the next call).
    fn good_then_bad(
        &mut self,
        buf: &bytes::Bytes,
        cursor: Cursor,
        max: usize,
        at: u64,
        reason: String,
        path: &Path,
    ) -> Result<Vec<Record>> {
        let position = cursor.position + at;
        let good = usize::try_from(at).ok().filter(|n| *n > 0).and_then(|n| {
            segment::decode_records_at(
                &buf.slice(..n.min(buf.len())),
                cursor.expect,
                self.next_seq,
                max,
            )
            .ok()
        });
        let mut records = Vec::new();
        let mut expect = cursor.expect;
        if let Some(good) = good {
            expect = good.next_seq.unwrap_or(expect);
            records = good.records;
        }
        if let Some(last) = records.last() {
            self.next_seq = last.seq.saturating_add(1);
        }
        self.cursor = Some(Cursor {
            base: cursor.base,
            position,
            expect,
            from_index: false,
        });
        let error = CliError::new(format!(
            "corrupt segment {} at byte {position}: {reason} (the frame of seq {expect} or later; \
             every record before it was delivered)",
            path.display()
        ))
        .hint(format!(
            "run `krabka verify {0}` for a full report; `krabka repair {0}` moves the damaged part aside",
            self.dir.display()
        ));
        if records.is_empty() {
            Err(error)
        } else {
            self.pending = Some(error);
            Ok(records)
        }
    }

    /// What follows `cursor`, which is at the end of the readable bytes of its segment (`len`
    /// bytes when last looked at).
    fn next_segment(&mut self, cursor: Cursor, len: u64, path: &Path) -> Result<Step> {
        let bases = segment_bases(&self.dir)?;
        let Some(next_base) = bases.into_iter().find(|b| *b > cursor.base) else {
            return self.after_last_segment(cursor, len, path);
        };
        // A later segment exists, so this one is closed: everything it holds was written before
        // the roll that created the next one. Look at its final length.
        let final_len = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.cursor = None;
                return Ok(Step::Again);
            }
            Err(e) => return Err(CliError::at("cannot stat segment", path, e)),
        };
        if final_len != len {
            return Ok(Step::Again);
        }
        let next_path = self.log_path(next_base);
        let dir = self.dir.display();
        if cursor.position < final_len {
            return Err(CliError::new(format!(
                "closed segment {} ends inside a frame at byte {} ({} bytes of an incomplete frame; \
                 the frame of seq {} is cut short)",
                path.display(),
                cursor.position,
                final_len - cursor.position,
                cursor.expect
            ))
            .hint(format!(
                "the file was truncated or torn; `krabka repair {dir}` moves the damaged part aside"
            )));
        }
        if cursor.expect == next_base {
            return Ok(Step::Next(Cursor::start_of(next_base)));
        }
        if cursor.expect > next_base {
            return Err(CliError::new(format!(
                "seq overlap: segment {} starts at seq {next_base} but {} already holds seq {}..={}",
                next_path.display(),
                path.display(),
                next_base,
                cursor.expect.saturating_sub(1)
            ))
            .hint(format!(
                "a stray or copied segment file? `krabka repair {dir}` moves it aside"
            )));
        }
        let holes = quarantine_holes(&self.dir)?;
        if let Some(hole) = holes.iter().find(|h| h.contains(cursor.expect)) {
            return Err(quarantined(&self.dir, hole));
        }
        Err(self.gap_error(cursor, path, final_len, next_base, &next_path))
    }

    /// `cursor` is at the end of the closed segment at `path`, `final_len` bytes, and the next
    /// segment, at `next_path`, starts above `cursor.expect`: an empty segment or a seq gap.
    fn gap_error(
        &self,
        cursor: Cursor,
        path: &Path,
        final_len: u64,
        next_base: u64,
        next_path: &Path,
    ) -> CliError {
        let dir = self.dir.display();
        let what = if final_len == 0 {
            format!(
                "closed segment {} is empty but must hold seq {}..={} (the next segment {} starts at seq {next_base})",
                path.display(),
                cursor.expect,
                next_base - 1,
                next_path.display()
            )
        } else {
            format!(
                "seq gap: seqs {}..={} are missing: {} ends at seq {} and the next segment {} starts at seq {next_base}",
                cursor.expect,
                next_base - 1,
                path.display(),
                cursor.expect.saturating_sub(1),
                next_path.display()
            )
        };
        CliError::new(what).hint(format!(
            "a segment file was deleted or truncated, or a stray segment-named file was added: restore \
             the missing segment from a copy if you have one; else `krabka repair {dir}` records the \
             missing seqs as a hole (moving a stray file aside)"
        ))
    }

    /// `cursor` is at the end of the readable bytes (`len`) of the newest segment, at `path`:
    /// caught up, unless the recovery point says records are missing or the seq asked for is
    /// past the next append's.
    fn after_last_segment(&mut self, cursor: Cursor, len: u64, path: &Path) -> Result<Step> {
        // The log held every seq up to its recovery point, synced, when it was last closed
        // or rolled: ending below it is lost data, not a write in progress.
        let point = krabka_storage::read_recovery_point(&self.dir)
            .map_err(|e| CliError::new(e.to_string()))?;
        if let Some(point) = point.filter(|p| cursor.expect <= *p) {
            return Err(CliError::new(format!(
                "segment {} ends at byte {} (seq {} is not there), but the log held every seq \
                 up to {point} when it was last closed ({}): records {}..={point} are missing",
                path.display(),
                cursor.position,
                cursor.expect,
                self.dir.join(krabka_storage::RECOVERY_POINT_FILE_NAME).display(),
                cursor.expect,
            ))
            .hint(format!(
                "the file was truncated or torn, or a newer segment was deleted; `krabka repair {}` records the hole",
                self.dir.display()
            )));
        }
        if self.next_seq > cursor.expect {
            // Asked for a seq past the one the next append gets: as `Log::read`, out of range.
            let first = segment_bases(&self.dir)?
                .first()
                .copied()
                .unwrap_or(cursor.expect);
            return Err(out_of_range(&self.dir, self.next_seq, first, cursor.expect));
        }
        if cursor.position < len {
            self.tail = Some(IncompleteTail {
                path: path.to_path_buf(),
                position: cursor.position,
                bytes: len - cursor.position,
            });
        }
        Ok(Step::CaughtUp)
    }
}

/// What [`LocalReader::decode_from`] found.
enum Chunk {
    /// Records to return.
    Records(Vec<Record>),
    /// Look again (moved past bytes without a record, or back to the start of the segment).
    Again,
    /// At the end of the readable bytes (or at an incomplete frame).
    AtEnd,
}

/// What comes after the end of a segment's readable bytes.
enum Step {
    /// Look again (the file grew, or was deleted).
    Again,
    /// Continue in the next segment.
    Next(Cursor),
    /// Nothing more yet.
    CaughtUp,
}

fn file_len(file: &File, path: &Path) -> Result<u64> {
    Ok(file
        .metadata()
        .map_err(|e| CliError::at("cannot stat segment", path, e))?
        .len())
}

/// The error for a read from `seq` beyond `next` (the seq the next append gets) of the log at
/// `dir`, whose first seq is `first`: the range the log holds, and that `next` is the one seq
/// past it that reads (nothing yet, or what is appended).
pub fn out_of_range(dir: &Path, seq: u64, first: u64, next: u64) -> CliError {
    let holds = if next > first {
        format!("the log holds {first}..={}", next - 1)
    } else {
        "the log holds no records".to_owned()
    };
    CliError::new(format!(
        "cannot read {} from seq {seq}: out of range: {holds}",
        dir.display()
    ))
    .hint(format!(
        "read from a seq in {}..={next} (seq {next} is the next to be written; with --follow \
         the read waits for it)",
        first.min(next)
    ))
}

/// The error for a read that reached seqs a repair moved aside.
pub fn quarantined(dir: &Path, hole: &Hole) -> CliError {
    CliError::new(format!(
        "seq {}..={} of {} were moved aside by a repair into {}",
        hole.first,
        hole.last,
        dir.display(),
        hole.path.display()
    ))
    .hint(format!(
        "those records are not in the log; read from seq {} on, or inspect the file with `krabka dump`",
        hole.last.saturating_add(1)
    ))
}
