//! Scanning a segment file from its start, in bounded chunks: the state recovery and
//! verification build from it, and the search for a valid frame after damage.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use super::decode::decode_message;
use super::frame::{
    FRAME_HEADER_LEN, MIN_BODY_LEN, MIN_MESSAGE_LEN, Parsed, parse_frame, read_frame_chunk,
};
use super::verify::SegmentProblem;
use crate::Error;
use crate::bufs::ReadBufs;

/// Scan state shared by recovery and verification: frames are checked one by one from the
/// start of a file, reading it in chunks so memory stays bounded.
pub(crate) struct Scan {
    pub(crate) valid_len: u64,
    pub(crate) first_seq: Option<u64>,
    pub(crate) last_seq: Option<u64>,
    pub(crate) records: u64,
    pub(crate) max_timestamp: i64,
    pub(crate) index: crate::index::IndexBuilder,
    pub(crate) problem: Option<SegmentProblem>,
}

const SCAN_CHUNK: usize = 1 << 20;

/// Scans `file` (of `file_len` bytes) from the start. `expect_first`, when given, is the seq the
/// first frame must carry (a segment's base seq).
pub(crate) fn scan_file(
    file: &File,
    path: &Path,
    file_len: u64,
    expect_first: Option<u64>,
    index_interval: u64,
) -> Result<Scan, Error> {
    scan_file_from(
        file,
        path,
        0,
        file_len,
        expect_first,
        index_interval,
        &mut |_| {},
    )
}

/// One valid frame seen by a scan: its seq, byte position and timestamp, and the largest
/// timestamp of the frames scanned before it (`i64::MIN` for the first).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScannedFrame {
    pub(crate) seq: u64,
    pub(crate) position: u64,
    pub(crate) max_timestamp_before: i64,
}

/// [`scan_file`] starting at byte `start` (which must be a frame boundary), calling
/// `on_frame` for every valid frame.
pub(crate) fn scan_file_from(
    file: &File,
    path: &Path,
    start: u64,
    file_len: u64,
    expect_first: Option<u64>,
    index_interval: u64,
    on_frame: &mut dyn FnMut(ScannedFrame),
) -> Result<Scan, Error> {
    let mut scan = Scan {
        valid_len: start,
        first_seq: None,
        last_seq: None,
        records: 0,
        max_timestamp: i64::MIN,
        index: crate::index::IndexBuilder::new(index_interval),
        problem: None,
    };
    let mut expect = expect_first;
    let mut pos = start;
    // Frames are dropped after checking, so one buffer is reused for every chunk.
    let bufs = ReadBufs::default();
    while pos < file_len {
        let left = file_len - pos;
        let want = SCAN_CHUNK;
        let chunk = read_frame_chunk(pos, file_len, want, |at, len| {
            bufs.read_at(file, path, at, len)
        })?;
        let before = scan.valid_len;
        if !scan_buffer(&chunk, pos, &mut expect, &mut scan, on_frame) {
            return Ok(scan);
        }
        if scan.valid_len == before {
            scan.problem = Some(SegmentProblem {
                position: pos,
                reason: format!("incomplete frame: {left} bytes left at the end of the file"),
            });
            return Ok(scan);
        }
        pos = scan.valid_len;
    }
    Ok(scan)
}

/// Checks the frames of `chunk` (read at file position `pos`) until it ends or a frame is
/// incomplete, recording them in `scan`. Returns false when a bad frame was found.
fn scan_buffer(
    chunk: &Bytes,
    pos: u64,
    expect: &mut Option<u64>,
    scan: &mut Scan,
    on_frame: &mut dyn FnMut(ScannedFrame),
) -> bool {
    let mut off = 0usize;
    loop {
        let rest = chunk.get(off..).unwrap_or(&[]);
        if rest.is_empty() {
            return true;
        }
        let at = pos + off as u64;
        let frame = match parse_frame(rest) {
            Parsed::Incomplete => return true,
            Parsed::Bad(reason) => {
                scan.problem = Some(SegmentProblem {
                    position: at,
                    reason,
                });
                return false;
            }
            Parsed::Frame(f) => f,
        };
        if let Some(e) = *expect
            && frame.seq != e
        {
            scan.problem = Some(SegmentProblem {
                position: at,
                reason: format!("frame holds seq {}, expected {e}", frame.seq),
            });
            return false;
        }
        let range = off + frame.message.start..off + frame.message.end;
        let msg = match decode_message(chunk, range) {
            Ok(m) => m,
            Err(reason) => {
                scan.problem = Some(SegmentProblem {
                    position: at,
                    reason,
                });
                return false;
            }
        };
        on_frame(ScannedFrame {
            seq: frame.seq,
            position: at,
            max_timestamp_before: scan.max_timestamp,
        });
        scan.index
            .observe(frame.seq, at, frame.len as u64, msg.timestamp);
        scan.max_timestamp = scan.max_timestamp.max(msg.timestamp);
        scan.first_seq.get_or_insert(frame.seq);
        scan.last_seq = Some(frame.seq);
        scan.records += 1;
        *expect = frame.seq.checked_add(1);
        off += frame.len;
        scan.valid_len = pos + off as u64;
    }
}

/// A run of contiguous valid frames that [`find_valid_frame_after`] found after damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValidRun {
    /// Byte position of its first frame.
    pub(crate) position: u64,
    /// Seq of its first frame.
    pub(crate) first_seq: u64,
    /// Seq of its last frame.
    pub(crate) last_seq: u64,
    /// The byte after its last frame (the end of the file, or where the next damage starts).
    pub(crate) end: u64,
}

/// Looks for the first valid frame after the damage at `from`: a frame whose length and CRC
/// check, whose message decodes and whose seq is at least `expected_next` (and no larger than
/// the frames that fit in the rest of the file allow). Returns the run of contiguous valid
/// frames it starts, or `None` when nothing valid follows the damage (a torn tail). Memory
/// stays bounded: the file is searched in 1 MiB windows and only candidates whose header passes
/// are read whole.
pub(crate) fn find_valid_frame_after(
    file: &File,
    path: &Path,
    from: u64,
    file_len: u64,
    expected_next: u64,
) -> Result<Option<ValidRun>, Error> {
    const WINDOW: u64 = 1 << 20;
    let min_frame = (FRAME_HEADER_LEN + MIN_MESSAGE_LEN) as u64;
    let most_frames = file_len.saturating_sub(from) / min_frame + 1;
    let highest = expected_next.saturating_add(most_frames);
    let mut pos = from.saturating_add(1);
    while pos.saturating_add(FRAME_HEADER_LEN as u64) <= file_len {
        let len = (file_len - pos).min(WINDOW + FRAME_HEADER_LEN as u64);
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, pos)
            .map_err(|e| Error::io(path, e))?;
        let last_start = (buf.len() - FRAME_HEADER_LEN).min(WINDOW as usize - 1);
        for off in 0..=last_start {
            let Some(header) = buf.get(off..off + FRAME_HEADER_LEN) else {
                break;
            };
            let seq = header
                .get(8..16)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .map_or(0, u64::from_le_bytes);
            if seq < expected_next || seq > highest {
                continue;
            }
            let body = header
                .get(..4)
                .and_then(|s| <[u8; 4]>::try_from(s).ok())
                .map_or(0, u32::from_le_bytes) as u64;
            let at = pos + off as u64;
            if body < MIN_BODY_LEN as u64 || at + 8 + body > file_len {
                continue;
            }
            let mut frame = vec![0u8; 8 + body as usize];
            file.read_exact_at(&mut frame, at)
                .map_err(|e| Error::io(path, e))?;
            if let Parsed::Frame(f) = parse_frame(&frame)
                && f.seq == seq
            {
                let run =
                    scan_file_from(file, path, at, file_len, Some(seq), u64::MAX, &mut |_| {})?;
                // A frame whose CRC matches but whose message does not decode starts no run.
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
