//! Scanning a segment file from its start, in bounded chunks: the state recovery and
//! verification build from it, and the search for a valid batch after damage.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use super::batch::{
    BATCH_HEADER_LEN, MAX_UNCOMPRESSED_BATCH, MIN_BATCH_LEN, MIN_RECORD_LEN, Parsed, batch_len,
    read_batch_chunk,
};
use super::decode::{batch_records, beyond_end};
use super::format::parse_batch;
use super::old::is_old_frame;
use super::problem::SegmentProblem;
use crate::Error;
use crate::bufs::ReadBufs;

/// Scan state shared by recovery and verification: batches are checked one by one from the
/// start of a file, reading it in chunks so memory stays bounded.
pub(crate) struct Scan {
    pub(crate) valid_len: u64,
    pub(crate) first_seq: Option<u64>,
    pub(crate) last_seq: Option<u64>,
    pub(crate) records: u64,
    pub(crate) max_timestamp: i64,
    pub(crate) index: crate::index::IndexBuilder,
    pub(crate) problem: Option<SegmentProblem>,
    /// The file starts with a frame of krabka's old format.
    old_format: bool,
    /// A batch compressed with a codec this build lacks: its position and codec.
    codec_missing: Option<(u64, &'static str)>,
}

const SCAN_CHUNK: usize = 1 << 20;

/// Scans `file` (of `file_len` bytes) from the start. `expect_first`, when given, is the seq the
/// first batch must start at (a segment's base seq). `last_allowed` is the last seq the file may
/// hold: for a closed segment the seq before the next segment's base (`u64::MAX` when no
/// segment follows). A batch reaching past it is damage of this file at its byte (bytes
/// appended to a closed segment), never a record of the log: the next segment holds those seqs.
///
/// A file in krabka's old per-record frame format is [`Error::OldFormat`]: never a damaged
/// file whose tail a recovery would cut.
pub(crate) fn scan_file(
    file: &File,
    path: &Path,
    file_len: u64,
    expect_first: Option<u64>,
    last_allowed: u64,
    index_interval: u64,
) -> Result<Scan, Error> {
    scan_file_from(
        file,
        path,
        0,
        file_len,
        (expect_first, last_allowed),
        index_interval,
        &mut |_| {},
    )
}

impl Scan {
    /// Takes a problem at the end of the valid batches for the end of the data when every byte
    /// from there to `file_len` is zero: the preallocated tail of an active segment
    /// ([`Options::preallocate`](crate::Options::preallocate)), which holds nothing. A zero
    /// run followed by anything else stays a problem (damage, or a torn write). Only for the
    /// newest segment of a log: a closed segment's file ends at its last batch. Zeros shorter
    /// than a batch header stay a problem.
    ///
    /// # Errors
    /// [`Error::Io`] when the tail cannot be read.
    pub(crate) fn accept_zero_tail(
        &mut self,
        file: &File,
        path: &Path,
        file_len: u64,
    ) -> Result<(), Error> {
        let at_end = self
            .problem
            .as_ref()
            .is_some_and(|p| p.position == self.valid_len);
        // Fewer zeros than a batch header are what a write torn inside a header leaves (its
        // high bytes of `baseOffset` are zeros): still a torn tail. Preallocated space that
        // short (a segment within a header of full) is then cut as one: nothing but zeros.
        let long_enough = file_len.saturating_sub(self.valid_len) >= BATCH_HEADER_LEN as u64;
        if at_end
            && long_enough
            && nonzero_end(file, path, self.valid_len, file_len)? == self.valid_len
        {
            self.problem = None;
        }
        Ok(())
    }
}

/// The byte after the last non-zero byte of `file` in `from..file_len` (`from` when they are
/// all zero): where the data of a preallocated file ends. Reads in 1 MiB steps from the end,
/// stopping at the first non-zero byte.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read.
pub(crate) fn nonzero_end(
    file: &File,
    path: &Path,
    from: u64,
    file_len: u64,
) -> Result<u64, Error> {
    let mut buf = vec![0u8; SCAN_CHUNK];
    let mut end = file_len;
    while end > from {
        let step = (end - from).min(SCAN_CHUNK as u64);
        let start = end - step;
        let part = buf.get_mut(..step as usize).unwrap_or_default();
        file.read_exact_at(part, start)
            .map_err(|e| Error::io(path, e))?;
        if let Some(i) = part.iter().rposition(|&b| b != 0) {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(from)
}

/// The first non-zero byte of `file` in `from..len`, `None` when every byte there is zero (the
/// preallocated space of an active segment, [`Options::preallocate`](crate::Options::preallocate)).
/// Ranges the filesystem reports as holes (`SEEK_DATA`/`SEEK_HOLE`: on most, space preallocated
/// and never written) are skipped unread; the rest is read in 1 MiB steps. A filesystem that
/// does not report holes has every byte read. The seeks move `file`'s offset: only for a handle
/// that does positional reads alone.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read.
pub(crate) fn first_nonzero(
    file: &File,
    path: &Path,
    from: u64,
    len: u64,
) -> Result<Option<u64>, Error> {
    use rustix::fs::{SeekFrom, seek};
    use rustix::io::Errno;
    let mut buf = Vec::new();
    let mut pos = from;
    // Each round moves `pos` forward by at least one byte: bounded by the range's length.
    while pos < len {
        let data = match seek(file, SeekFrom::Data(pos)) {
            Ok(d) => d,
            // Nothing but a hole from `pos` to the end of the file.
            Err(Errno::NXIO) => return Ok(None),
            // No hole reporting here: read it all.
            Err(_) => pos,
        };
        if data >= len {
            return Ok(None);
        }
        let data = data.max(pos);
        let hole = seek(file, SeekFrom::Hole(data))
            .ok()
            .filter(|h| *h > data)
            .map_or(len, |h| h.min(len));
        let mut at = data;
        while at < hole {
            let step = (hole - at).min(SCAN_CHUNK as u64);
            buf.resize(step as usize, 0);
            file.read_exact_at(&mut buf, at)
                .map_err(|e| Error::io(path, e))?;
            if let Some(i) = buf.iter().position(|&b| b != 0) {
                return Ok(Some(at + i as u64));
            }
            at += step;
        }
        pos = hole;
    }
    Ok(None)
}

/// One valid batch seen by a scan: its first seq, byte position, and the largest
/// timestamp of the batches scanned before it (`i64::MIN` for the first).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScannedBatch {
    pub(crate) seq: u64,
    pub(crate) position: u64,
    pub(crate) max_timestamp_before: i64,
}

/// [`scan_file`] starting at byte `start` (which must be a batch boundary), calling
/// `on_batch` for every valid batch; `seqs` is `(expect_first, last_allowed)`.
pub(crate) fn scan_file_from(
    file: &File,
    path: &Path,
    start: u64,
    file_len: u64,
    seqs: (Option<u64>, u64),
    index_interval: u64,
    on_batch: &mut dyn FnMut(ScannedBatch),
) -> Result<Scan, Error> {
    let mut scan = Scan {
        valid_len: start,
        first_seq: None,
        last_seq: None,
        records: 0,
        max_timestamp: i64::MIN,
        index: crate::index::IndexBuilder::new(index_interval),
        problem: None,
        old_format: false,
        codec_missing: None,
    };
    let (mut expect, last_allowed) = seqs;
    let mut pos = start;
    // Batches are dropped after checking, so one buffer is reused for every chunk.
    let bufs = ReadBufs::default();
    while pos < file_len {
        let left = file_len - pos;
        let want = SCAN_CHUNK;
        let chunk = read_batch_chunk(pos, file_len, want, |at, len| {
            bufs.read_at(file, path, at, len)
        })?;
        let before = scan.valid_len;
        if !scan_buffer(
            &chunk,
            pos,
            (&mut expect, last_allowed),
            &mut scan,
            on_batch,
        ) {
            if scan.old_format {
                return Err(Error::OldFormat {
                    path: path.to_path_buf(),
                });
            }
            if let Some((position, codec)) = scan.codec_missing {
                // Not damage: never a tail to cut.
                return Err(Error::CodecMissing {
                    path: path.to_path_buf(),
                    position,
                    codec,
                });
            }
            return Ok(scan);
        }
        if scan.valid_len == before {
            scan.problem = Some(SegmentProblem {
                position: pos,
                reason: format!("incomplete batch: {left} bytes left at the end of the file"),
            });
            return Ok(scan);
        }
        pos = scan.valid_len;
    }
    Ok(scan)
}

/// Checks the batches of `chunk` (read at file position `pos`) until it ends or a batch is
/// incomplete, recording them in `scan`; every record of a batch is read and checked. Returns
/// false when a bad batch was found.
fn scan_buffer(
    chunk: &Bytes,
    pos: u64,
    (expect, last_allowed): (&mut Option<u64>, u64),
    scan: &mut Scan,
    on_batch: &mut dyn FnMut(ScannedBatch),
) -> bool {
    let mut off = 0usize;
    loop {
        let rest = chunk.slice(off.min(chunk.len())..);
        if rest.is_empty() {
            return true;
        }
        let at = pos + off as u64;
        let first = *expect;
        let mut problem = |reason: String| {
            scan.old_format = at == 0 && is_old_frame(&rest, first);
            scan.problem = Some(SegmentProblem {
                position: at,
                reason,
            });
            false
        };
        let batch = match parse_batch(&rest) {
            Parsed::Incomplete => {
                if at == 0 && is_old_frame(&rest, first) {
                    return problem("old frame format".to_owned());
                }
                return true;
            }
            Parsed::Bad(reason) => return problem(reason),
            Parsed::Batch(f) => f,
        };
        if let Some(e) = *expect
            && batch.seq != e
        {
            return problem(format!("batch starts at seq {}, expected {e}", batch.seq));
        }
        if batch.last > last_allowed {
            return problem(beyond_end(0, batch.seq, batch.last, last_allowed).reason);
        }
        let checked = batch_records(&batch, 0).and_then(|mut records| {
            records
                .check_rest()
                .map_err(|e| super::batch::BadBytes::of_batch(0, &e))
        });
        if let Err(e) = checked {
            if let super::batch::Fault::CodecMissing(codec) = e.fault {
                scan.codec_missing = Some((at, codec.name()));
            }
            return problem(e.reason);
        }
        let Some(after) = batch.last.checked_add(1) else {
            return problem("seq overflows u64".to_owned());
        };
        let max_ts = batch.view.header().max_timestamp;
        on_batch(ScannedBatch {
            seq: batch.seq,
            position: at,
            max_timestamp_before: scan.max_timestamp,
        });
        scan.index.observe(batch.seq, at, batch.len as u64, max_ts);
        scan.max_timestamp = scan.max_timestamp.max(max_ts);
        scan.first_seq.get_or_insert(batch.seq);
        scan.last_seq = Some(batch.last);
        scan.records += batch.last - batch.seq + 1;
        *expect = Some(after);
        off += batch.len;
        scan.valid_len = pos + off as u64;
    }
}

/// The last seq the segment before the one of `next_base` (in `dir`) may hold: the seq before
/// `next_base` when that segment's file starts with an intact batch of `next_base` (it holds
/// those seqs, so any batch of them in the segment before is that segment's damage: bytes
/// appended to it); otherwise, and for the newest segment (`None`), any seq (`u64::MAX`): an
/// empty, stray or damaged next file proves nothing about where the segment before ends, and
/// the seam between them names it.
///
/// # Errors
/// [`Error::Io`] when the next segment file exists but cannot be read.
pub(crate) fn last_seq_allowed(dir: &Path, next_base: Option<u64>) -> Result<u64, Error> {
    let Some(next) = next_base else {
        return Ok(u64::MAX);
    };
    let path = dir.join(super::segment_file_name(next, super::LOG_EXTENSION));
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(u64::MAX),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
    // A batch no longer than the largest one a log writes (a damaged length field reads as no
    // batch, not as a read of the whole file).
    let most = (MAX_UNCOMPRESSED_BATCH + BATCH_HEADER_LEN) as u64;
    let first = read_batch_chunk(0, len.min(most), BATCH_HEADER_LEN, |at, n| {
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, at)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Bytes::from(buf))
    })?;
    let holds = matches!(parse_batch(&first), Parsed::Batch(f) if f.seq == next);
    Ok(if holds {
        next.saturating_sub(1)
    } else {
        u64::MAX
    })
}

/// A run of contiguous valid batches that [`find_valid_batch_after`] found after damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValidRun {
    /// Byte position of its first batch.
    pub(crate) position: u64,
    /// Seq of its first record.
    pub(crate) first_seq: u64,
    /// Seq of its last record.
    pub(crate) last_seq: u64,
    /// The byte after its last batch (the end of the file, or where the next damage starts).
    pub(crate) end: u64,
}

/// Looks for the first valid batch after the damage at `from`: a batch whose length, magic and
/// CRC check, whose records read, and whose base seq is at least `expected_next` (and no larger
/// than the batches that fit in the rest of the file allow, nor than `last_allowed`, the last seq
/// the file may hold). Returns the run of contiguous valid batches it starts, which ends before
/// any batch past `last_allowed`, or `None` when nothing valid follows the damage (a torn tail).
/// Memory stays bounded: the file is searched in 1 MiB windows and only candidates whose
/// header passes are read whole.
pub(crate) fn find_valid_batch_after(
    file: &File,
    path: &Path,
    from: u64,
    file_len: u64,
    expected_next: u64,
    last_allowed: u64,
) -> Result<Option<ValidRun>, Error> {
    const WINDOW: u64 = 1 << 20;
    let min_frame = MIN_BATCH_LEN as u64;
    let most_frames = file_len.saturating_sub(from) / MIN_RECORD_LEN as u64 + 1;
    let highest = expected_next.saturating_add(most_frames).min(last_allowed);
    let mut pos = from.saturating_add(1);
    while pos.saturating_add(BATCH_HEADER_LEN as u64) <= file_len {
        let len = (file_len - pos).min(WINDOW + BATCH_HEADER_LEN as u64);
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, pos)
            .map_err(|e| Error::io(path, e))?;
        let last_start = (buf.len() - BATCH_HEADER_LEN).min(WINDOW as usize - 1);
        for off in 0..=last_start {
            let Some(header) = buf.get(off..off + BATCH_HEADER_LEN) else {
                break;
            };
            if header.get(16) != Some(&2) {
                continue;
            }
            let seq = header
                .get(..8)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .map_or(-1, i64::from_be_bytes);
            let Ok(seq) = u64::try_from(seq) else {
                continue;
            };
            if seq < expected_next || seq > highest {
                continue;
            }
            let at = pos + off as u64;
            let Some(size) = batch_len(header).map(|n| n as u64) else {
                continue;
            };
            if size < min_frame || at + size > file_len {
                continue;
            }
            let mut batch = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
            file.read_exact_at(&mut batch, at)
                .map_err(|e| Error::io(path, e))?;
            if let Parsed::Batch(f) = parse_batch(&Bytes::from(batch))
                && f.seq == seq
            {
                let run = scan_file_from(
                    file,
                    path,
                    at,
                    file_len,
                    (Some(seq), last_allowed),
                    u64::MAX,
                    &mut |_| {},
                )?;
                // A batch whose CRC matches but whose records do not read starts no run.
                if let Some(last_seq) = run.last_seq.filter(|_| run.records > 0) {
                    return Ok(Some(ValidRun {
                        position: at,
                        first_seq: seq,
                        last_seq,
                        end: run.valid_len,
                    }));
                }
            }
        }
        pos += WINDOW;
    }
    Ok(None)
}
