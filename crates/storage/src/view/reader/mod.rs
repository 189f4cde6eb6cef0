//! [`LogReader`]: reads a log directory from a seq on, following the segment files as they grow,
//! without the log's lock and without recovery.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::LogView;
use super::found::{IncompleteTail, IndexFallback, PolledBatches};
use crate::segment;
use crate::{Error, Record};

mod decode;
mod follow;
mod live;
mod locate;
mod old;

/// Bytes read from a segment file per step.
const CHUNK: usize = 4 << 20;

/// How long the reader waits before it reads again a batch of the newest segment that does not
/// check (see [`LogReader`]): far longer than the write of a batch into the page cache takes.
const LOOK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_millis(5);

/// Where the reader is: a segment, a byte position in its `.log` and the seq of the batch there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    base: u64,
    position: u64,
    /// The seq the batch at `position` must carry.
    expect: u64,
    /// Whether `position` came from the segment's `.index` and no batch there was read yet (a
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

/// Records (or batches) of a [`LogView`]'s directory from one seq on, following the log as it
/// grows (call [`poll`](Self::poll) again after it returned nothing).
///
/// Every read is exact or an error: each batch must carry the seq that follows the previous
/// one, starting at the segment's base seq (or at the seq of the batch an index entry points to,
/// which is checked against the batch itself: a wrong entry is reported in
/// [`take_fallbacks`](Self::take_fallbacks) and the segment scanned from its start). Records
/// decoded before a bad batch are returned first; the next call fails naming the file and byte
/// ([`Error::BadBatch`]). A closed segment (one a later segment follows) must end exactly where
/// the next one starts: one that ends inside a batch ([`Error::CutShort`]), is empty
/// ([`Error::EmptySegment`]), or is followed by a gap or an overlap in seqs (a deleted segment
/// file, a stray segment-named file: [`Error::SeqGap`], [`Error::SeqOverlap`]) is an error, and
/// so is reading into an explicit hole ([`Error::Quarantined`]) and a newest segment that ends
/// below the recovery point ([`Error::EndsBelowRecoveryPoint`]). An incomplete batch at the end
/// of the newest segment is a write in progress, not damage: the reader stops before it
/// ([`incomplete_tail`](Self::incomplete_tail)).
///
/// A newest segment that was preallocated ([`Options::preallocate`](crate::Options::preallocate))
/// is a file longer than its batches, zeros after them: the reader takes the first byte of
/// those zeros for its end, exactly as recovery does, never the file's size. Zeros followed by
/// other bytes are damage ([`Error::BadBatch`]). A batch being written into that space reads
/// as a whole batch failing its CRC until the write is done, so a batch of the newest segment
/// that does not check is read once more after a short pause before it is reported; one still
/// failing then is [`Error::BadBatch`], a batch torn by a crash included (its bytes cannot be
/// told from damage; [`Log::open`](crate::Log::open) cuts it as a torn tail when no valid
/// batch follows it).
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
    /// Zeros to the end of a newest segment's file, as last checked (see [`ZeroRun`]).
    zeros: Option<ZeroRun>,
    /// A segment and byte this step already looked at twice (once more after a finding that a
    /// concurrent write could explain): the second look decides.
    looked_again: Option<(u64, u64)>,
}

/// Bytes `from..len` of segment `base`'s file (while it is `len` bytes long) were all zero
/// when last read: its preallocated space. The writer only ever writes at its true end, so
/// once the reader stands at a byte past `from` whose batch header is still zeros, it is at
/// that end without reading the rest again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ZeroRun {
    base: u64,
    len: u64,
    from: u64,
}

/// What one step of the reader returns: records and the bytes of their batches.
struct Got {
    records: Vec<Record>,
    batches: Bytes,
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
        while let Some((_, batch_last, len)) = buf.get(pos..).and_then(segment::peek_batch) {
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
            batches: buf.slice(start..stop.min(buf.len())),
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
            zeros: None,
            looked_again: None,
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

    /// When the last [`poll`](Self::poll) found nothing new: the incomplete batch the newest
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
    /// [`Error::BadBatch`] (after the records decoded before it were returned by the previous
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
    pub fn poll_batches(&mut self, max: usize) -> Result<Option<PolledBatches>, Error> {
        let Some(got) = self.step(max, true)? else {
            return Ok(None);
        };
        let (Some(first), Some(last)) = (got.records.first(), got.records.last()) else {
            return Ok(None);
        };
        let (mut first_seq, mut last_seq) = (first.seq, last.seq);
        let mut pos = 0usize;
        while let Some((base, batch_last, len)) =
            got.batches.get(pos..).and_then(segment::peek_batch)
        {
            if pos == 0 {
                first_seq = base;
            }
            last_seq = batch_last;
            pos += len;
        }
        self.next_seq = self.next_seq.max(last_seq.saturating_add(1));
        Ok(Some(PolledBatches {
            path: got.path,
            position: got.position,
            first_seq,
            last_seq,
            bytes: got.batches,
        }))
    }

    /// Renamed [`poll_batches`](Self::poll_batches).
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    #[deprecated(since = "0.1.0", note = "renamed to `poll_batches`")]
    pub fn poll_frames(&mut self, max: usize) -> Result<Option<PolledBatches>, Error> {
        self.poll_batches(max)
    }

    fn log_path(&self, base: u64) -> PathBuf {
        self.view.log_path(base)
    }

    /// The next records (with their batches, when `batches`: then a segment in the old format
    /// is an error, as it holds no record batches), `None` when caught up.
    fn step(&mut self, max: usize, batches: bool) -> Result<Option<Got>, Error> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.tail = None;
        self.looked_again = None;
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
            // The end of the segment's bytes: its file's length, unless the decoder found the
            // zeros of preallocated space (or a batch still being written into it) first.
            let mut end = len;
            if len > cursor.position {
                match self.decode_from(cursor, &file, &path, len, max, batches)? {
                    Chunk::Got(got) => return Ok(Some(got)),
                    Chunk::Again => continue,
                    Chunk::AtEnd(at) => end = at,
                }
            }
            // At the end of the bytes there (or at an incomplete batch): go on to the next
            // segment once the writer has rolled to it, and check the seams.
            let Some(cursor) = self.cursor else { continue };
            match self.next_segment(cursor, end, &path)? {
                Step::Again => continue,
                Step::Next(next) => self.cursor = Some(next),
                Step::CaughtUp => return Ok(None),
            }
        }
    }
}

/// What [`LogReader::decode_from`] found.
enum Chunk {
    /// Records to return.
    Got(Got),
    /// Look again (moved past bytes without a record, or back to the start of the segment).
    Again,
    /// At the end of the readable bytes (or at an incomplete batch), which end at this byte.
    AtEnd(u64),
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
