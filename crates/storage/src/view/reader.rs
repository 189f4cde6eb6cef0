//! [`LogReader`]: reads a log directory from a seq on, following the segment files as they grow,
//! without the log's lock and without recovery.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::LogView;
use super::found::{Frames, IncompleteTail, IndexFallback};
use crate::segment::{self, FRAME_HEADER_LEN, INDEX_EXTENSION};
use crate::{Error, Record};

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

/// Records (or frames) of a [`LogView`]'s directory from one seq on, following the log as it
/// grows (call [`poll`](Self::poll) again after it returned nothing).
///
/// Every read is exact or an error: each frame must carry the seq that follows the previous
/// one, starting at the segment's base seq (or at the seq of the frame an index entry points to,
/// which is checked against the frame itself: a wrong entry is reported in
/// [`take_fallbacks`](Self::take_fallbacks) and the segment scanned from its start). Records
/// decoded before a bad frame are returned first; the next call fails naming the file and byte
/// ([`Error::BadFrame`]). A closed segment (one a later segment follows) must end exactly where
/// the next one starts: one that ends inside a frame ([`Error::CutShort`]), is empty
/// ([`Error::EmptySegment`]), or is followed by a gap or an overlap in seqs (a deleted segment
/// file, a stray segment-named file: [`Error::SeqGap`], [`Error::SeqOverlap`]) is an error, and
/// so is reading into an explicit hole ([`Error::Quarantined`]) and a newest segment that ends
/// below the recovery point ([`Error::EndsBelowRecoveryPoint`]). An incomplete frame at the end
/// of the newest segment is a write in progress, not damage: the reader stops before it
/// ([`incomplete_tail`](Self::incomplete_tail)).
#[derive(Debug)]
pub struct LogReader {
    view: LogView,
    next_seq: u64,
    cursor: Option<Cursor>,
    /// A segment's base and the base of the segment after it, once one exists: the seq before
    /// it is the last the segment may hold (segments are only ever added after the newest).
    seam: Option<(u64, u64)>,
    /// The base of a segment found in krabka's old per-record format (read by its own decoder).
    old: Option<u64>,
    /// The failure met right after the records last returned.
    pending: Option<Error>,
    tail: Option<IncompleteTail>,
    fallbacks: Vec<IndexFallback>,
}

/// What one step of the reader returns: records and the bytes of their frames.
struct Got {
    records: Vec<Record>,
    frames: Bytes,
    path: PathBuf,
    position: u64,
}

impl Got {
    /// The records of `buf` (read at byte `at` of `path`), which start at the batch of
    /// `expect`: their batches are whole ones of `buf` (checked by the decoder, so their
    /// headers are sound), the last one possibly past `end` when the records stop inside it.
    fn new(records: Vec<Record>, buf: &Bytes, end: usize, at: u64, path: &Path) -> Got {
        let first = records.first().map_or(0, |r| r.seq);
        let last = records.last().map_or(0, |r| r.seq);
        let (mut start, mut stop) = (None, end);
        let mut pos = 0usize;
        while let Some((_, batch_last, len)) = buf.get(pos..).and_then(segment::peek_frame) {
            if start.is_none() && batch_last >= first {
                start = Some(pos);
            }
            pos += len;
            if batch_last >= last {
                stop = pos;
                break;
            }
        }
        let start = start.unwrap_or(0).min(stop);
        Got {
            records,
            frames: buf.slice(start..stop.min(buf.len())),
            path: path.to_path_buf(),
            position: at + start as u64,
        }
    }
}

impl LogReader {
    /// A reader of `view`'s directory whose first record is `from_seq`.
    pub(super) fn new(view: LogView, from_seq: u64) -> Self {
        Self {
            view,
            next_seq: from_seq,
            cursor: None,
            seam: None,
            old: None,
            pending: None,
            tail: None,
            fallbacks: Vec::new(),
        }
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        self.view.dir()
    }

    /// The seq of the next record to return.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// When the last [`poll`](Self::poll) found nothing new: the incomplete frame the newest
    /// segment ends with, if any (a writer in the middle of an append, or a torn write).
    pub fn incomplete_tail(&self) -> Option<&IncompleteTail> {
        self.tail.as_ref()
    }

    /// The wrong index entries met since the last call (each cost a scan of its segment from
    /// the start, nothing else).
    pub fn take_fallbacks(&mut self) -> Vec<IndexFallback> {
        std::mem::take(&mut self.fallbacks)
    }

    /// Up to `max` records from the next seq to read; empty when caught up with the writer
    /// (call again later to follow).
    ///
    /// # Errors
    /// See the type's docs: [`Error::Io`] when the directory or a segment cannot be read;
    /// [`Error::BadFrame`] (after the records decoded before it were returned by the previous
    /// call), [`Error::CutShort`], [`Error::EmptySegment`], [`Error::SeqGap`],
    /// [`Error::SeqOverlap`], [`Error::Quarantined`], [`Error::EndsBelowRecoveryPoint`],
    /// [`Error::Shrank`] naming the file (and byte); [`Error::BelowStart`] and
    /// [`Error::OutOfRange`] for a seq the directory does not hold.
    pub fn poll(&mut self, max: usize) -> Result<Vec<Record>, Error> {
        Ok(self
            .step(max, false)?
            .map(|g| g.records)
            .unwrap_or_default())
    }

    /// [`poll`](Self::poll) that returns the raw batches of up to `max` records (from one
    /// segment file) instead of decoding them for the caller; `None` when caught up. The
    /// batches are whole: `first_seq` is the first seq of the first one, `last_seq` the last
    /// of the last one, so they may hold records before the next seq to read (a batch entered
    /// in the middle) and more than `max`. The reader moves on past the last batch.
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub fn poll_frames(&mut self, max: usize) -> Result<Option<Frames>, Error> {
        let Some(got) = self.step(max, true)? else {
            return Ok(None);
        };
        let (Some(first), Some(last)) = (got.records.first(), got.records.last()) else {
            return Ok(None);
        };
        let (mut first_seq, mut last_seq) = (first.seq, last.seq);
        let mut pos = 0usize;
        while let Some((base, batch_last, len)) =
            got.frames.get(pos..).and_then(segment::peek_frame)
        {
            if pos == 0 {
                first_seq = base;
            }
            last_seq = batch_last;
            pos += len;
        }
        self.next_seq = self.next_seq.max(last_seq.saturating_add(1));
        Ok(Some(Frames {
            path: got.path,
            position: got.position,
            first_seq,
            last_seq,
            bytes: got.frames,
        }))
    }

    fn log_path(&self, base: u64) -> PathBuf {
        self.view.log_path(base)
    }

    /// Finds the segment holding `next_seq` and the position to start scanning from.
    fn locate(&mut self) -> Result<Option<Cursor>, Error> {
        let bases = self.view.segment_bases()?;
        let Some(&first) = bases.first() else {
            return Ok(None);
        };
        // A hole marker speaks only for seqs no segment file holds: before the first one here,
        // between two files at the seam (`next_segment`).
        if self.next_seq < first {
            let holes = self.view.holes()?;
            if let Some(hole) = holes.iter().find(|h| h.contains(self.next_seq)) {
                return Err(hole.quarantined());
            }
        }
        if self.next_seq == 0 || self.next_seq < first {
            return Err(Error::BelowStart {
                dir: self.dir().to_path_buf(),
                seq: self.next_seq,
                first,
            });
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
            .dir()
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
    fn index_cursor(&mut self, base: u64) -> Cursor {
        if self.next_seq <= base {
            return Cursor::start_of(base);
        }
        let index = self
            .dir()
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
            .and_then(|()| header.get(..8))
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .and_then(|b| u64::try_from(i64::from_be_bytes(b)).ok());
        match seq {
            Some(seq) if (base..=self.next_seq).contains(&seq) => Cursor {
                base,
                position,
                expect: seq,
                from_index: true,
            },
            _ => {
                self.fallbacks.push(IndexFallback::NoFrame {
                    index,
                    seq: self.next_seq,
                    position,
                });
                Cursor::start_of(base)
            }
        }
    }

    /// The last seq the segment `base` may hold: the one before the next segment's base, once
    /// a later segment exists (then it is remembered); else none (`u64::MAX`). One listing of
    /// the directory per step while the segment is the newest, none once it is closed.
    fn last_allowed(&mut self, base: u64) -> Result<u64, Error> {
        if let Some((b, next)) = self.seam
            && b == base
        {
            return Ok(next.saturating_sub(1));
        }
        match self.view.segment_bases()?.into_iter().find(|b| *b > base) {
            Some(next) => {
                self.seam = Some((base, next));
                Ok(next.saturating_sub(1))
            }
            None => Ok(u64::MAX),
        }
    }

    /// The next records (with their frames, when `frames`: then a segment in the old format
    /// is an error, as it holds no record batches), `None` when caught up.
    fn step(&mut self, max: usize, frames: bool) -> Result<Option<Got>, Error> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.tail = None;
        if max == 0 {
            return Ok(None);
        }
        loop {
            let cursor = match self.cursor {
                Some(c) => c,
                None => match self.locate()? {
                    Some(c) => c,
                    None => return Ok(None),
                },
            };
            self.cursor = Some(cursor);
            let path = self.log_path(cursor.base);
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // Deleted by retention under us: find where the seq lives now.
                    self.cursor = None;
                    if self.locate()?.is_none() {
                        return Ok(None);
                    }
                    continue;
                }
                Err(e) => return Err(Error::io(&path, e)),
            };
            let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
            if len < cursor.position {
                return Err(Error::Shrank {
                    path,
                    len,
                    position: cursor.position,
                });
            }
            if len > cursor.position {
                match self.decode_from(cursor, &file, &path, len, max, frames)? {
                    Chunk::Got(got) => return Ok(Some(got)),
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
                Step::CaughtUp => return Ok(None),
            }
        }
    }

    /// Decodes up to `max` records of the segment at `path` (`len` bytes) from `cursor`. No
    /// record of a batch reaching past the segment's last allowed seq (a closed segment ends
    /// where the next one starts) is handed out: such a batch is damage at its byte.
    fn decode_from(
        &mut self,
        cursor: Cursor,
        file: &File,
        path: &Path,
        len: u64,
        max: usize,
        frames: bool,
    ) -> Result<Chunk, Error> {
        let last_allowed = self.last_allowed(cursor.base)?;
        if self.old == Some(cursor.base) {
            if frames {
                return Err(Error::OldFormat {
                    path: path.to_path_buf(),
                });
            }
            return self.decode_old(cursor, file, path, len, max, last_allowed);
        }
        let buf = segment::read_chunk(file, path, cursor.position, len, CHUNK)?;
        let decoded = segment::decode_within(
            &buf,
            Some(cursor.expect),
            self.next_seq,
            max,
            last_allowed,
            false,
        );
        // Nothing decodes at the segment's start (damage, or a frame that seems to run past
        // the end): an old-format file is read by its own decoder.
        let stuck = decoded
            .as_ref()
            .map_or(true, |d| d.consumed == 0 && d.records.is_empty());
        if stuck && cursor.position == 0 && segment::is_old_frame(&buf, Some(cursor.base)) {
            self.old = Some(cursor.base);
            return Ok(Chunk::Again);
        }
        match decoded {
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
                    let got = Got::new(
                        decoded.records,
                        &buf,
                        decoded.consumed,
                        cursor.position,
                        path,
                    );
                    return Ok(Chunk::Got(got));
                }
                if decoded.consumed > 0 {
                    return Ok(Chunk::Again);
                }
            }
            Err(e) => {
                let (at, mut reason) = match e {
                    Error::Corrupt {
                        position, reason, ..
                    } => (position, reason),
                    other => (0, other.to_string()),
                };
                if reason.contains(segment::BEYOND_END) {
                    // Either bytes were added to this closed segment or the next file is stray:
                    // both files are named.
                    let next = self.log_path(last_allowed.saturating_add(1));
                    reason.push_str(&format!(
                        ": bytes added to this closed segment, or {} is a stray segment file",
                        next.display()
                    ));
                }
                if at == 0 && cursor.from_index {
                    self.fallbacks.push(IndexFallback::BadFrame {
                        log: path.to_path_buf(),
                        position: cursor.position,
                        seq: cursor.expect,
                    });
                    self.cursor = Some(Cursor::start_of(cursor.base));
                    return Ok(Chunk::Again);
                }
                return self.good_then_bad(&buf, cursor, max, at, reason, path);
            }
        }
        Ok(Chunk::AtEnd)
    }

    /// The records of `buf` before the bad frame at `at` (they are valid: returned now), and
    /// the failure naming the file and byte (returned by the next call).
    fn good_then_bad(
        &mut self,
        buf: &Bytes,
        cursor: Cursor,
        max: usize,
        at: u64,
        reason: String,
        path: &Path,
    ) -> Result<Chunk, Error> {
        let last_allowed = self.last_allowed(cursor.base)?;
        let position = cursor.position + at;
        let n = usize::try_from(at).ok().filter(|n| *n > 0);
        let good = n.and_then(|n| {
            let before = buf.slice(..n.min(buf.len()));
            segment::decode_within(
                &before,
                Some(cursor.expect),
                self.next_seq,
                max,
                last_allowed,
                false,
            )
            .ok()
            .map(|d| (before, d))
        });
        let mut got = None;
        let mut expect = cursor.expect;
        if let Some((before, good)) = good {
            expect = good.next_seq.unwrap_or(expect);
            if let Some(last) = good.records.last() {
                self.next_seq = last.seq.saturating_add(1);
                got = Some(Got::new(
                    good.records,
                    &before,
                    good.consumed,
                    cursor.position,
                    path,
                ));
            }
        }
        self.cursor = Some(Cursor {
            base: cursor.base,
            position,
            expect,
            from_index: false,
        });
        let error = Error::BadFrame {
            path: path.to_path_buf(),
            position,
            seq: expect,
            reason,
        };
        match got {
            None => Err(error),
            Some(got) => {
                self.pending = Some(error);
                Ok(Chunk::Got(got))
            }
        }
    }

    /// [`decode_from`](Self::decode_from) for a segment in krabka's old per-record format: its
    /// frames are decoded read-only, each proved (CRC, seq, a message that fills it, not past
    /// `last_allowed`) before its record is handed out. A damaged frame ends the read there
    /// ([`Error::OldFormatDamaged`], after the records before it).
    fn decode_old(
        &mut self,
        cursor: Cursor,
        file: &File,
        path: &Path,
        len: u64,
        max: usize,
        last_allowed: u64,
    ) -> Result<Chunk, Error> {
        let read = |at: u64, n: u64| {
            let mut buf = vec![0u8; usize::try_from(n).unwrap_or(usize::MAX)];
            file.read_exact_at(&mut buf, at)
                .map_err(|e| Error::io(path, e))?;
            Ok::<_, Error>(Bytes::from(buf))
        };
        let left = len - cursor.position;
        let mut buf = read(cursor.position, left.min(CHUNK as u64))?;
        // A frame longer than the chunk is read whole (when the file holds it).
        if let Some(whole) = segment::old_frame_len(&buf)
            && whole > buf.len() as u64
            && whole <= left
        {
            buf = read(cursor.position, whole)?;
        }
        let mut records = Vec::new();
        let decoded = segment::decode_old_chunk(
            &buf,
            cursor.expect,
            self.next_seq,
            max,
            last_allowed,
            &mut records,
        );
        let (consumed, expect, failure) = match decoded {
            // A frame that runs past the end of the file: no writer appends to an old file, so
            // it is a torn write or a damaged length, never a write in progress.
            Ok(d) if d.consumed == 0 && records.is_empty() => {
                let error = Error::OldFormatDamaged {
                    path: path.to_path_buf(),
                    position: cursor.position,
                    seq: cursor.expect,
                    reason: format!(
                        "its length field says {} bytes, {left} are left in the file (a torn \
                         write or a damaged length)",
                        segment::old_frame_len(&buf).unwrap_or(0)
                    ),
                };
                (0, cursor.expect, Some(error))
            }
            Ok(d) => (d.consumed, d.next_seq, None),
            Err(e) => {
                // The records before the damaged frame are proved: handed out first.
                let position = cursor.position + e.position as u64;
                let expect = records.last().map_or(cursor.expect, |r| r.seq + 1);
                let error = Error::OldFormatDamaged {
                    path: path.to_path_buf(),
                    position,
                    seq: expect,
                    reason: e.reason,
                };
                (e.position, expect, Some(error))
            }
        };
        self.cursor = Some(Cursor {
            base: cursor.base,
            position: cursor.position + consumed as u64,
            expect,
            from_index: false,
        });
        if let Some(last) = records.last() {
            self.next_seq = last.seq.saturating_add(1);
        }
        match (records.is_empty(), failure) {
            (true, Some(e)) => Err(e),
            (false, failure) => {
                self.pending = failure;
                Ok(Chunk::Got(Got {
                    records,
                    frames: Bytes::new(),
                    path: path.to_path_buf(),
                    position: cursor.position,
                }))
            }
            (true, None) if consumed > 0 => Ok(Chunk::Again),
            (true, None) => Ok(Chunk::AtEnd),
        }
    }

    /// What follows `cursor`, which is at the end of the readable bytes of its segment (`len`
    /// bytes when last looked at).
    fn next_segment(&mut self, cursor: Cursor, len: u64, path: &Path) -> Result<Step, Error> {
        let bases = self.view.segment_bases()?;
        let Some(next_base) = bases.into_iter().find(|b| *b > cursor.base) else {
            return self.after_last_segment(cursor, len, path);
        };
        // A later segment exists, so this one is closed: everything it holds was written before
        // the roll that created the next one. Look at its final length.
        let final_len = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.cursor = None;
                return Ok(Step::Again);
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        if final_len != len {
            return Ok(Step::Again);
        }
        let next_path = self.log_path(next_base);
        if cursor.position < final_len {
            return Err(Error::CutShort {
                path: path.to_path_buf(),
                position: cursor.position,
                bytes: final_len - cursor.position,
                seq: cursor.expect,
            });
        }
        if cursor.expect == next_base {
            return Ok(Step::Next(Cursor::start_of(next_base)));
        }
        if cursor.expect > next_base {
            return Err(Error::SeqOverlap {
                previous: path.to_path_buf(),
                path: next_path,
                expected: cursor.expect,
                found: next_base,
            });
        }
        let holes = self.view.holes()?;
        if let Some(hole) = holes.iter().find(|h| h.contains(cursor.expect)) {
            return Err(hole.quarantined());
        }
        Err(if final_len == 0 {
            Error::EmptySegment {
                path: path.to_path_buf(),
                next: next_path,
                expected: cursor.expect,
                found: next_base,
            }
        } else {
            Error::SeqGap {
                previous: path.to_path_buf(),
                path: next_path,
                expected: cursor.expect,
                found: next_base,
            }
        })
    }

    /// `cursor` is at the end of the readable bytes (`len`) of the newest segment, at `path`:
    /// caught up, unless the recovery point says records are missing or the seq asked for is
    /// past the next append's.
    fn after_last_segment(&mut self, cursor: Cursor, len: u64, path: &Path) -> Result<Step, Error> {
        // The log held every seq up to its recovery point, synced, when it was last closed
        // or rolled: ending below it is lost data, not a write in progress.
        if let Some(point) = self.view.recovery_point()?.filter(|p| cursor.expect <= *p) {
            // A writer appends (and rolls) before it records the point: if the file grew or a
            // newer segment appeared since `len` was taken, the records are there; look again.
            let grown = match std::fs::metadata(path) {
                Ok(m) => m.len() > len,
                // Deleted since (retention): locate the seq again.
                Err(_) => true,
            };
            let rolled = self
                .view
                .segment_bases()?
                .into_iter()
                .any(|b| b > cursor.base);
            if grown || rolled {
                return Ok(Step::Again);
            }
            return Err(Error::EndsBelowRecoveryPoint {
                path: path.to_path_buf(),
                position: cursor.position,
                first_seq: cursor.expect,
                recovery_point: point,
            });
        }
        if self.next_seq > cursor.expect {
            // Asked for a seq past the one the next append gets: as `Log::read`, out of range.
            let first = self
                .view
                .segment_bases()?
                .first()
                .copied()
                .unwrap_or(cursor.expect);
            return Err(Error::OutOfRange {
                seq: self.next_seq,
                first,
                last: cursor.expect.saturating_sub(1),
            });
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

/// What [`LogReader::decode_from`] found.
enum Chunk {
    /// Records to return.
    Got(Got),
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
