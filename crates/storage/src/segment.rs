//! Segment files as plain bytes: record frames, file names, decoding and verification.
//!
//! Everything here works on byte slices (or reads one file start to end), so a segment fetched
//! back from a remote store can be decoded without a [`Log`](crate::Log) or a local directory.
//!
//! A `.log` file is a run of record frames (layout in `docs/format.md`):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | `len`: `u32`, bytes after the CRC field (8 + message length) |
//! | 4 | 4 | `crc`: CRC-32 (IEEE, `crc32fast`) of the `len` bytes that follow |
//! | 8 | 8 | `seq`: `u64` sequence number |
//! | 16 | n | the message in the `krabka-protocol` encoding |
//!
//! ```
//! use krabka_protocol::{Bytes, Message};
//! use krabka_storage::segment::{decode_records, encode_frame};
//!
//! let mut buf = Vec::new();
//! encode_frame(7, &Message::new("a"), &mut buf);
//! encode_frame(8, &Message::new("b"), &mut buf);
//! let whole = buf.len();
//! buf.extend_from_slice(&[1, 2, 3]); // a torn frame at the tail is not an error
//! let decoded = decode_records(&Bytes::from(buf), 8, 10)?;
//! assert_eq!(decoded.records.len(), 1);
//! assert_eq!(decoded.records[0].seq, 8);
//! assert_eq!(decoded.consumed, whole);
//! assert_eq!(decoded.next_seq, Some(9));
//! # Ok::<(), krabka_storage::Error>(())
//! ```

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes};
use krabka_protocol::Message;

use crate::bufs::ReadBufs;
pub use crate::index::{
    IndexSummary, TimeIndexSummary, lookup_position, lookup_time, verify_index, verify_time_index,
};
use crate::{Error, Record};

/// Bytes before the message in every frame: length (4), CRC (4) and seq (8).
pub const FRAME_HEADER_LEN: usize = 16;

/// Bytes of the smallest encoded message (no key, empty value, no headers).
pub const MIN_MESSAGE_LEN: usize = 18;

/// Smallest value a frame's `len` field can hold: seq (8) + the smallest message.
pub(crate) const MIN_BODY_LEN: usize = 8 + MIN_MESSAGE_LEN;

/// File name suffix of a segment's records.
pub const LOG_SUFFIX: &str = "log";
/// File name suffix of a segment's sparse offset index.
pub const INDEX_SUFFIX: &str = "index";
/// File name suffix of a segment's time index.
pub const TIME_INDEX_SUFFIX: &str = "timeindex";

/// The file name of a segment file: the base seq as 20 zero-padded digits, a dot and `suffix`
/// (one of [`LOG_SUFFIX`], [`INDEX_SUFFIX`], [`TIME_INDEX_SUFFIX`]).
///
/// ```
/// assert_eq!(krabka_storage::segment::segment_file_name(1, "log"), "00000000000000000001.log");
/// ```
pub fn segment_file_name(base_seq: u64, suffix: &str) -> String {
    format!("{base_seq:020}.{suffix}")
}

/// Parses a segment file name into its base seq and suffix; `None` for any other name
/// (stray files in a log directory are ignored, not errors).
///
/// ```
/// use krabka_storage::segment::parse_segment_file_name;
/// assert_eq!(parse_segment_file_name("00000000000000000042.index"), Some((42, "index")));
/// assert_eq!(parse_segment_file_name("42.log"), None);
/// ```
pub fn parse_segment_file_name(name: &str) -> Option<(u64, &str)> {
    let (digits, suffix) = name.split_once('.')?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if ![LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX].contains(&suffix) {
        return None;
    }
    Some((digits.parse().ok()?, suffix))
}

/// The total length of the frame at the start of `buf` (header and message), read from its
/// length field; `None` when `buf` is shorter than the 4-byte length field. The length is not
/// validated: a chunked reader uses it to learn how many bytes to fetch.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    let len = buf.get(..4)?;
    let len = u32::from_le_bytes(<[u8; 4]>::try_from(len).ok()?);
    Some(8 + len as usize)
}

/// Reads the bytes at `pos` of a segment's `.log` file for decoding: `chunk` bytes (at most up
/// to `end`, the file's length or the end of the valid data), or more when the frame starting
/// at `pos` is longer than that and ends by `end` — then the whole frame, so a chunk always
/// holds at least one complete frame unless the data is torn or corrupt there.
///
/// Feed the result to [`decode_records`] (or [`decode_records_at`]) and continue at
/// `pos + consumed`. This is the read step of every chunked reader of segment files (the log's
/// own reads, its recovery scan, and read-only tools that follow a log directory).
///
/// ```
/// use krabka_protocol::Message;
/// use krabka_storage::segment::{decode_records, encode_frame, read_chunk};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("00000000000000000001.log");
/// let mut buf = Vec::new();
/// encode_frame(1, &Message::new(vec![7u8; 1000]), &mut buf);
/// std::fs::write(&path, &buf)?;
/// let file = std::fs::File::open(&path)?;
/// // A 64-byte chunk is too short for the frame: the whole frame is read.
/// let chunk = read_chunk(&file, &path, 0, buf.len() as u64, 64)?;
/// assert_eq!(chunk.len(), buf.len());
/// assert_eq!(decode_records(&chunk, 1, 10)?.records.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::Io`] when the file cannot be read (including when it is shorter than `end`).
pub fn read_chunk(
    file: &File,
    path: &Path,
    pos: u64,
    end: u64,
    chunk: usize,
) -> Result<Bytes, Error> {
    read_frame_chunk(pos, end, chunk, |at, len| {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, at)
            .map_err(|e| Error::io(path, e))?;
        Ok(Bytes::from(buf))
    })
}

/// [`read_chunk`] with the read itself supplied: `read(pos, len)` reads exactly `len` bytes at
/// `pos` (the log passes one that reuses pooled buffers).
pub(crate) fn read_frame_chunk(
    pos: u64,
    end: u64,
    chunk: usize,
    mut read: impl FnMut(u64, usize) -> Result<Bytes, Error>,
) -> Result<Bytes, Error> {
    let left = end.saturating_sub(pos);
    let want = usize::try_from(left).unwrap_or(usize::MAX).min(chunk);
    let first = read(pos, want)?;
    match frame_len(&first) {
        Some(n) if n > first.len() && n as u64 <= left => {
            // A frame longer than the chunk: read it whole.
            drop(first);
            read(pos, n)
        }
        _ => Ok(first),
    }
}

/// Appends the frame of record `seq` holding `msg` to `buf`; returns the frame's length.
pub fn encode_frame(seq: u64, msg: &Message, buf: &mut Vec<u8>) -> usize {
    encode_frame_sized(seq, msg, msg.encoded_len(), buf)
}

/// [`encode_frame`] for a message whose `encoded_len()` the caller already computed: reserves
/// the frame once, encodes straight into `buf` and CRCs the bytes in place (once).
pub(crate) fn encode_frame_sized(
    seq: u64,
    msg: &Message,
    encoded_len: usize,
    buf: &mut Vec<u8>,
) -> usize {
    let start = buf.len();
    let body = 8 + encoded_len;
    buf.reserve(8 + body);
    buf.put_u32_le(u32::try_from(body).unwrap_or(u32::MAX));
    buf.put_u32_le(0);
    buf.put_u64_le(seq);
    msg.encode(buf);
    let crc = crc32fast::hash(buf.get(start + 8..).unwrap_or(&[]));
    if let Some(slot) = buf.get_mut(start + 4..start + 8) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    buf.len() - start
}

/// Records decoded from the front of a buffer by [`decode_records`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecords {
    /// The decoded records with `seq >= from_seq`, in order.
    pub records: Vec<Record>,
    /// Bytes of complete frames consumed from the start of the buffer (including skipped
    /// frames); a chunked reader continues at this offset.
    pub consumed: usize,
    /// The seq following the last consumed frame; `None` when no frame was consumed.
    pub next_seq: Option<u64>,
}

/// Why a frame could not be decoded, relative to the start of the decoded buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrameError {
    pub(crate) position: usize,
    pub(crate) reason: String,
}

impl FrameError {
    pub(crate) fn into_error(self, path: &Path, base: u64) -> Error {
        Error::Corrupt {
            path: path.to_path_buf(),
            position: base + self.position as u64,
            reason: self.reason,
        }
    }
}

/// One frame whose header, length and CRC were checked.
pub(crate) struct RawFrame {
    pub(crate) seq: u64,
    /// Range of the encoded message within the parsed buffer.
    pub(crate) message: Range<usize>,
    /// The frame's total length.
    pub(crate) len: usize,
}

pub(crate) enum Parsed {
    /// The buffer ends inside the frame.
    Incomplete,
    /// A complete frame that is invalid.
    Bad(String),
    /// A complete, valid frame.
    Frame(RawFrame),
}

/// Checks the frame at the start of `buf` (length and CRC; not the message encoding).
pub(crate) fn parse_frame(buf: &[u8]) -> Parsed {
    let Some(header) = buf.get(..FRAME_HEADER_LEN) else {
        return Parsed::Incomplete;
    };
    let word = |r: Range<usize>| header.get(r).and_then(|s| <[u8; 4]>::try_from(s).ok());
    let (Some(len), Some(crc)) = (word(0..4), word(4..8)) else {
        return Parsed::Incomplete;
    };
    let len = u32::from_le_bytes(len) as usize;
    if len < MIN_BODY_LEN {
        return Parsed::Bad(format!(
            "frame length {len} is below the minimum {MIN_BODY_LEN}"
        ));
    }
    let Some(body) = buf.get(8..8 + len) else {
        return Parsed::Incomplete;
    };
    let actual = crc32fast::hash(body);
    let stored = u32::from_le_bytes(crc);
    if actual != stored {
        return Parsed::Bad(format!(
            "CRC mismatch: stored {stored:#010x}, computed {actual:#010x}"
        ));
    }
    let seq = body
        .get(..8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes);
    Parsed::Frame(RawFrame {
        seq,
        message: FRAME_HEADER_LEN..8 + len,
        len: 8 + len,
    })
}

/// Decodes the message of a checked frame (zero-copy) and insists it fills the frame exactly.
pub(crate) fn decode_message(chunk: &Bytes, range: Range<usize>) -> Result<Message, String> {
    if range.end > chunk.len() || range.start > range.end {
        return Err("frame extends past the buffer".to_owned());
    }
    if let Some(msg) = decode_plain_message(chunk, range.clone()) {
        return Ok(msg);
    }
    let bytes = chunk.slice(range.clone());
    let (msg, used) = Message::decode_bytes(&bytes).map_err(|e| format!("bad message: {e}"))?;
    if used != bytes.len() {
        return Err(format!(
            "message uses {used} of the frame's {} message bytes",
            bytes.len()
        ));
    }
    Ok(msg)
}

/// The message encoding version the fast path of [`decode_plain_message`] reads.
const PLAIN_VERSION: u8 = 1;
/// The "has key" flag of that version (`docs/format.md`).
const PLAIN_FLAG_HAS_KEY: u8 = 1;

/// Fast path of [`decode_message`] for the common shape: a version-1 message without headers
/// that fills `range` exactly. Its key and value are sliced straight from `chunk` (no
/// intermediate slice, no header bookkeeping). Returns `None` for anything else (headers,
/// another version, any malformation), which then goes through [`Message::decode_bytes`] — the
/// reference decoder, which also produces the error.
fn decode_plain_message(chunk: &Bytes, range: Range<usize>) -> Option<Message> {
    fn u32_at(b: &[u8], at: usize) -> Option<usize> {
        let s = b.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(<[u8; 4]>::try_from(s).ok()?) as usize)
    }
    let base = range.start;
    let b = chunk.get(range)?;
    let (&version, &flags) = (b.first()?, b.get(1)?);
    if version != PLAIN_VERSION {
        return None;
    }
    let timestamp = i64::from_le_bytes(<[u8; 8]>::try_from(b.get(2..10)?).ok()?);
    let mut at = 10usize;
    let key = match flags {
        0 => None,
        PLAIN_FLAG_HAS_KEY => {
            let start = at.checked_add(4)?;
            let end = start.checked_add(u32_at(b, at)?)?;
            at = end;
            Some(start..end)
        }
        _ => return None,
    };
    let value_start = at.checked_add(4)?;
    let value_end = value_start.checked_add(u32_at(b, at)?)?;
    // No headers, and nothing after the header count.
    if u32_at(b, value_end)? != 0 || value_end.checked_add(4)? != b.len() {
        return None;
    }
    Some(Message {
        timestamp,
        key: key.map(|k| chunk.slice(base + k.start..base + k.end)),
        value: chunk.slice(base + value_start..base + value_end),
        headers: Vec::new(),
    })
}

/// Decodes consecutive framed records from the start of `buf`.
///
/// Records with `seq < from_seq` are checked and skipped; decoding stops after `max` records
/// or at an incomplete trailing frame. An incomplete trailing frame is not an error:
/// [`DecodedRecords::consumed`] tells where the complete frames end, so a chunked reader
/// fetches more bytes and continues there. The records share `buf` (no copy).
///
/// Seqs are checked across the buffer: every complete frame must carry the seq after the
/// previous frame's (a buffer spliced from two places of a segment, or from two segments, is
/// rejected). The first frame's seq is not checked; use [`decode_records_at`] when the caller
/// knows which seq the buffer must start with (for example bytes fetched from a remote store
/// at a position an index gave for a seq).
///
/// # Errors
/// [`Error::Corrupt`] (with an empty `path` and `position` relative to `buf`: the start of the
/// offending frame) when a complete frame has a bad length, CRC or message, or its seq does not
/// follow the previous frame's.
pub fn decode_records(buf: &Bytes, from_seq: u64, max: usize) -> Result<DecodedRecords, Error> {
    decode_with(buf, None, from_seq, max)
}

/// [`decode_records`] that also requires the first frame of `buf` to carry
/// `expected_first_seq` (when `buf` holds a complete frame and `max > 0`).
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{decode_records_at, encode_frame};
///
/// let mut buf = Vec::new();
/// encode_frame(7, &Message::new("a"), &mut buf);
/// let buf = Bytes::from(buf);
/// assert_eq!(decode_records_at(&buf, 7, 7, 10)?.records.len(), 1);
/// assert!(decode_records_at(&buf, 6, 6, 10).is_err()); // the bytes do not start at seq 6
/// # Ok::<(), krabka_storage::Error>(())
/// ```
///
/// # Errors
/// As [`decode_records`], and [`Error::Corrupt`] at position 0 when the first frame's seq is
/// not `expected_first_seq`.
pub fn decode_records_at(
    buf: &Bytes,
    expected_first_seq: u64,
    from_seq: u64,
    max: usize,
) -> Result<DecodedRecords, Error> {
    decode_with(buf, Some(expected_first_seq), from_seq, max)
}

fn decode_with(
    buf: &Bytes,
    expect: Option<u64>,
    from_seq: u64,
    max: usize,
) -> Result<DecodedRecords, Error> {
    let mut records = Vec::new();
    let (consumed, next_seq) = decode_chunk(buf, from_seq, max, expect, &mut records)
        .map_err(|e| e.into_error(Path::new(""), 0))?;
    Ok(DecodedRecords {
        records,
        consumed,
        next_seq,
    })
}

/// [`decode_records`] that also insists the first frame carries `expect` (when given) and
/// appends the records to `out`; returns the bytes consumed and the seq after the last
/// consumed frame.
pub(crate) fn decode_chunk(
    buf: &Bytes,
    from_seq: u64,
    max: usize,
    mut expect: Option<u64>,
    out: &mut Vec<Record>,
) -> Result<(usize, Option<u64>), FrameError> {
    let mut pos = 0usize;
    let mut next_seq = None;
    let mut left = max;
    while left > 0 {
        let rest = buf.get(pos..).unwrap_or(&[]);
        let frame = match parse_frame(rest) {
            Parsed::Incomplete => break,
            Parsed::Bad(reason) => {
                return Err(FrameError {
                    position: pos,
                    reason,
                });
            }
            Parsed::Frame(f) => f,
        };
        if let Some(e) = expect
            && frame.seq != e
        {
            return Err(FrameError {
                position: pos,
                reason: format!("frame holds seq {}, expected {e}", frame.seq),
            });
        }
        let after = frame.seq.checked_add(1).ok_or_else(|| FrameError {
            position: pos,
            reason: "seq overflows u64".to_owned(),
        })?;
        if frame.seq >= from_seq {
            let range = pos + frame.message.start..pos + frame.message.end;
            let message = decode_message(buf, range).map_err(|reason| FrameError {
                position: pos,
                reason,
            })?;
            out.push(Record {
                seq: frame.seq,
                message,
            });
            left -= 1;
        }
        pos += frame.len;
        expect = Some(after);
        next_seq = Some(after);
    }
    Ok((pos, next_seq))
}

/// A problem found in a segment: where it starts and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentProblem {
    /// Byte position of the first bad frame in the `.log` file.
    pub position: u64,
    /// What is wrong with it.
    pub reason: String,
}

/// What [`verify_segment`] found in a `.log` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentVerification {
    /// The base seq parsed from the file name (`None` for a name that is not a segment name).
    pub base_seq: Option<u64>,
    /// Number of valid records before the first problem.
    pub records: u64,
    /// Seq of the first valid record.
    pub first_seq: Option<u64>,
    /// Seq of the last valid record.
    pub last_seq: Option<u64>,
    /// Largest timestamp among the valid records.
    pub max_timestamp: Option<i64>,
    /// Bytes of valid frames from the start of the file.
    pub valid_bytes: u64,
    /// Size of the file.
    pub file_bytes: u64,
    /// The first problem (`None` when every byte of the file is a valid frame and, for
    /// [`verify_segment_files`], the index files agree with it).
    pub problem: Option<SegmentProblem>,
    /// The file the problem is in (the `.log`, or an index file for [`verify_segment_files`]).
    pub problem_path: Option<PathBuf>,
}

impl SegmentVerification {
    /// Whether every byte of the file belongs to a valid frame.
    pub fn is_ok(&self) -> bool {
        self.problem.is_none()
    }
}

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

/// Looks for the first valid frame after the damage at `from`: a frame whose length and CRC
/// check and whose seq is at least `expected_next` (and no larger than the frames that fit in
/// the rest of the file allow). Returns its position, its seq and the last seq of the run of
/// contiguous valid frames it starts, or `None` when nothing valid follows the damage (a torn
/// tail). Memory stays bounded: the file is searched in 1 MiB windows and only candidates whose
/// header passes are read whole.
pub(crate) fn find_valid_frame_after(
    file: &File,
    path: &Path,
    from: u64,
    file_len: u64,
    expected_next: u64,
) -> Result<Option<(u64, u64, u64)>, Error> {
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
                return Ok(Some((at, seq, run.last_seq.unwrap_or(seq))));
            }
        }
        pos += WINDOW;
    }
    Ok(None)
}

/// The directory inside a log directory where damaged bytes, stray files and the markers of
/// explicit holes are moved by recovery (never deleted).
pub const QUARANTINE_DIR: &str = "quarantine";

/// File name suffix of a quarantine file that marks an explicit hole in a log's seqs.
pub const HOLE_SUFFIX: &str = "quarantined";

/// The name of the quarantine file marking the explicit hole `first..=last` (the seqs a repair
/// moved aside or found missing); it holds the bytes moved aside, if any.
///
/// ```
/// use krabka_storage::segment::{hole_file_name, parse_hole_file_name};
/// let name = hole_file_name(101, 200);
/// assert_eq!(name, "00000000000000000101-00000000000000000200.quarantined");
/// assert_eq!(parse_hole_file_name(&name), Some((101, 200)));
/// assert_eq!(parse_hole_file_name("00000000000000000101.log"), None);
/// ```
pub fn hole_file_name(first: u64, last: u64) -> String {
    format!("{first:020}-{last:020}.{HOLE_SUFFIX}")
}

/// Parses a hole marker's file name (see [`hole_file_name`]) into its seq range; `None` for any
/// other name or an empty range.
pub fn parse_hole_file_name(name: &str) -> Option<(u64, u64)> {
    let (range, suffix) = name.split_once('.')?;
    if suffix != HOLE_SUFFIX {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let digits = |d: &str| d.len() == 20 && d.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return None;
    }
    let (first, last) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
    (first >= 1 && first <= last).then_some((first, last))
}

/// CRC-checks every frame of the `.log` file at `log_path` and reports the first bad position.
///
/// The file's base seq (from its name, when it is a segment name) must be the first frame's seq,
/// and seqs must be contiguous. Reads the file in 1 MiB chunks.
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened or read. A corrupt file is not an error: it is
/// reported in [`SegmentVerification::problem`].
pub fn verify_segment(log_path: &Path) -> Result<SegmentVerification, Error> {
    let file = File::open(log_path).map_err(|e| Error::io(log_path, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(log_path, e))?.len();
    let base_seq = log_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_file_name)
        .map(|(b, _)| b);
    let scan = scan_file(&file, log_path, file_len, base_seq, u64::MAX)?;
    Ok(SegmentVerification {
        base_seq,
        records: scan.records,
        first_seq: scan.first_seq,
        last_seq: scan.last_seq,
        max_timestamp: scan.first_seq.map(|_| scan.max_timestamp),
        valid_bytes: scan.valid_len,
        file_bytes: file_len,
        problem_path: scan.problem.as_ref().map(|_| log_path.to_path_buf()),
        problem: scan.problem,
    })
}

/// [`verify_segment`] of a closed segment with its index files: also checks that the
/// `.index` and `.timeindex` decode, describe this `.log` (base seq, last seq, size, max
/// timestamp) and that every index entry points at the start of the frame holding its seq (and
/// every time-index entry carries the largest timestamp before that frame), so an index
/// rewritten with a valid checksum cannot send readers to the wrong record. Pass `None` for an
/// index file that is not expected (the active segment has none); a path that does not exist is
/// a problem ("missing").
///
/// The first problem found is in [`SegmentVerification::problem`], and the file it is in
/// (the `.log` or one of the index files) in [`SegmentVerification::problem_path`].
///
/// # Errors
/// [`Error::Io`] when a file cannot be read (other than a missing index file).
pub fn verify_segment_files(
    log_path: &Path,
    index_path: Option<&Path>,
    time_index_path: Option<&Path>,
) -> Result<SegmentVerification, Error> {
    let file = File::open(log_path).map_err(|e| Error::io(log_path, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(log_path, e))?.len();
    let base_seq = log_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_file_name)
        .map(|(b, _)| b);
    let mut index_problem: Option<(PathBuf, SegmentProblem)> = None;
    let mut offsets: Option<crate::index::OffsetIndex> = None;
    let mut times: Option<crate::index::TimeIndex> = None;
    if let Some(p) = index_path {
        match load_index(p, crate::index::OffsetIndex::decode)? {
            Ok(i) => offsets = Some(i),
            Err(problem) => index_problem = Some((p.to_path_buf(), problem)),
        }
    }
    if let Some(p) = time_index_path
        && index_problem.is_none()
    {
        match load_index(p, crate::index::TimeIndex::decode)? {
            Ok(i) => times = Some(i),
            Err(problem) => index_problem = Some((p.to_path_buf(), problem)),
        }
    }
    // Entries are checked as the scan passes their frames.
    let want: Vec<(u64, u64)> = offsets
        .as_ref()
        .map(|i| i.entries.clone())
        .unwrap_or_default();
    let want_times: Vec<(i64, u64)> = times
        .as_ref()
        .map(|i| i.entries.clone())
        .unwrap_or_default();
    let mut seen: Vec<(u64, u64, i64)> = Vec::new();
    let mut next_entry = 0usize;
    let mut on_frame = |f: ScannedFrame| {
        let hit = want.get(next_entry).is_some_and(|&(s, _)| s == f.seq)
            || want_times.get(next_entry).is_some_and(|&(_, s)| s == f.seq);
        if hit {
            seen.push((f.seq, f.position, f.max_timestamp_before));
            next_entry += 1;
        }
    };
    let scan = scan_file_from(
        &file,
        log_path,
        0,
        file_len,
        base_seq,
        u64::MAX,
        &mut on_frame,
    )?;
    let mut verification = SegmentVerification {
        base_seq,
        records: scan.records,
        first_seq: scan.first_seq,
        last_seq: scan.last_seq,
        max_timestamp: scan.first_seq.map(|_| scan.max_timestamp),
        valid_bytes: scan.valid_len,
        file_bytes: file_len,
        problem_path: scan.problem.as_ref().map(|_| log_path.to_path_buf()),
        problem: scan.problem,
    };
    if verification.problem.is_some() {
        return Ok(verification);
    }
    let fail = |v: &mut SegmentVerification, path: &Path, position: u64, reason: String| {
        v.problem = Some(SegmentProblem { position, reason });
        v.problem_path = Some(path.to_path_buf());
    };
    if let Some((path, problem)) = index_problem {
        fail(&mut verification, &path, problem.position, problem.reason);
        return Ok(verification);
    }
    let last = scan
        .last_seq
        .unwrap_or(base_seq.unwrap_or(1).saturating_sub(1));
    if let (Some(idx), Some(p)) = (&offsets, index_path) {
        let header_ok = Some(idx.base_seq) == base_seq.or(scan.first_seq)
            && idx.last_seq == last
            && idx.log_size == file_len
            && (scan.records == 0 || idx.max_timestamp == scan.max_timestamp);
        if !header_ok {
            fail(
                &mut verification,
                p,
                8,
                format!(
                    "index describes seqs {}..={} in {} bytes (max timestamp {}), the .log holds {}..={last} in {file_len} bytes",
                    idx.base_seq,
                    idx.last_seq,
                    idx.log_size,
                    idx.max_timestamp,
                    scan.first_seq.unwrap_or(idx.base_seq)
                ),
            );
            return Ok(verification);
        }
        for (i, &(seq, pos)) in idx.entries.iter().enumerate() {
            let found = seen.iter().find(|&&(s, _, _)| s == seq);
            if found.map(|&(_, p, _)| p) != Some(pos) {
                let at = (crate::index::INDEX_HEADER_LEN + i * crate::index::ENTRY_LEN) as u64;
                fail(
                    &mut verification,
                    p,
                    at,
                    format!(
                        "index entry {i} points seq {seq} at byte {pos}, but {}",
                        match found {
                            Some(&(_, real, _)) => format!("its frame starts at byte {real}"),
                            None => "no frame of the .log starts there with that seq".to_owned(),
                        }
                    ),
                );
                return Ok(verification);
            }
        }
    }
    if let (Some(tidx), Some(p)) = (&times, time_index_path) {
        let header_ok = Some(tidx.base_seq) == base_seq.or(scan.first_seq)
            && (scan.records == 0 || tidx.max_timestamp == scan.max_timestamp)
            && offsets
                .as_ref()
                .is_none_or(|o| o.entries.len() == tidx.entries.len());
        if !header_ok {
            fail(
                &mut verification,
                p,
                8,
                format!(
                    "time index (base {}, max timestamp {}, {} entries) does not describe this .log",
                    tidx.base_seq,
                    tidx.max_timestamp,
                    tidx.entries.len()
                ),
            );
            return Ok(verification);
        }
        for (i, &(ts, seq)) in tidx.entries.iter().enumerate() {
            let found = seen.iter().find(|&&(s, _, _)| s == seq);
            if found.map(|&(_, _, before)| before) != Some(ts) {
                let at = (crate::index::TIME_INDEX_HEADER_LEN + i * crate::index::ENTRY_LEN) as u64;
                fail(
                    &mut verification,
                    p,
                    at,
                    format!(
                        "time index entry {i} gives seq {seq} timestamp {ts}, the .log says {}",
                        found.map_or("no such frame".to_owned(), |&(_, _, b)| b.to_string())
                    ),
                );
                return Ok(verification);
            }
        }
    }
    Ok(verification)
}

/// Reads and decodes an index file for [`verify_segment_files`]: a missing or undecodable file
/// is a problem found (the inner `Err`), any other read failure an error.
fn load_index<T>(
    path: &Path,
    decode: impl Fn(&[u8]) -> Result<T, FrameError>,
) -> Result<Result<T, SegmentProblem>, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(SegmentProblem {
                position: 0,
                reason: "index file is missing".into(),
            }));
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    Ok(decode(&bytes).map_err(|e| SegmentProblem {
        position: e.position as u64,
        reason: e.reason,
    }))
}

/// One frame as seen by [`dump_frames`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpedFrame {
    /// Byte position of the frame in the buffer.
    pub position: u64,
    /// The frame's total length as its length field says (may run past the buffer's end).
    pub frame_len: u64,
    /// The seq field (`None` when the buffer ends before it).
    pub seq: Option<u64>,
    /// Whether the stored CRC matches the frame's bytes.
    pub crc_ok: bool,
    /// The decoded message (`None` when the CRC is bad or the message does not decode).
    pub message: Option<Message>,
    /// What is wrong with the frame, if anything.
    pub problem: Option<String>,
}

/// Iterator over every frame of a segment's bytes; see [`dump_frames`].
#[derive(Debug, Clone)]
pub struct DumpFrames {
    buf: Bytes,
    pos: usize,
    done: bool,
}

/// Walks every frame of a segment's bytes, reporting each frame's seq, CRC status and message,
/// for tools such as a `dump` command. A frame with a bad CRC is reported and skipped by its
/// length; the walk ends after a frame whose length is invalid or runs past the buffer.
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{dump_frames, encode_frame};
///
/// let mut buf = Vec::new();
/// encode_frame(1, &Message::new("x").with_key("k"), &mut buf);
/// let frames: Vec<_> = dump_frames(Bytes::from(buf)).collect();
/// assert_eq!(frames.len(), 1);
/// assert!(frames[0].crc_ok);
/// assert_eq!(frames[0].seq, Some(1));
/// ```
pub fn dump_frames(buf: Bytes) -> DumpFrames {
    DumpFrames {
        buf,
        pos: 0,
        done: false,
    }
}

/// Reads a whole `.log` file for [`dump_frames`].
///
/// # Errors
/// [`Error::Io`] when the file cannot be read.
pub fn read_segment_file(log_path: &Path) -> Result<Bytes, Error> {
    let mut file = File::open(log_path).map_err(|e| Error::io(log_path, e))?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)
        .map_err(|e| Error::io(log_path, e))?;
    Ok(Bytes::from(buf))
}

impl Iterator for DumpFrames {
    type Item = DumpedFrame;

    fn next(&mut self) -> Option<DumpedFrame> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        let position = self.pos as u64;
        let total = frame_len(rest);
        let seq = rest
            .get(8..16)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_le_bytes);
        let mut out = DumpedFrame {
            position,
            frame_len: total.unwrap_or(rest.len()) as u64,
            seq,
            crc_ok: false,
            message: None,
            problem: None,
        };
        match parse_frame(rest) {
            Parsed::Incomplete => {
                out.problem = Some(format!(
                    "incomplete frame: {} bytes left at the end",
                    rest.len()
                ));
                self.done = true;
            }
            Parsed::Bad(reason) => {
                out.problem = Some(reason);
                match total {
                    Some(n) if n >= FRAME_HEADER_LEN + MIN_MESSAGE_LEN && n <= rest.len() => {
                        self.pos += n;
                    }
                    _ => self.done = true,
                }
            }
            Parsed::Frame(frame) => {
                out.crc_ok = true;
                let range = self.pos + frame.message.start..self.pos + frame.message.end;
                match decode_message(&self.buf, range) {
                    Ok(m) => out.message = Some(m),
                    Err(reason) => out.problem = Some(reason),
                }
                self.pos += frame.len;
            }
        }
        Some(out)
    }
}

/// Paths of a segment's three files in `dir`.
pub(crate) fn segment_paths(dir: &Path, base_seq: u64) -> (PathBuf, PathBuf, PathBuf) {
    (
        dir.join(segment_file_name(base_seq, LOG_SUFFIX)),
        dir.join(segment_file_name(base_seq, INDEX_SUFFIX)),
        dir.join(segment_file_name(base_seq, TIME_INDEX_SUFFIX)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference decoder's verdict on `bytes` as one whole message.
    fn reference(bytes: &Bytes) -> Option<Message> {
        match Message::decode_bytes(bytes) {
            Ok((m, used)) if used == bytes.len() => Some(m),
            _ => None,
        }
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        (
            any::<i64>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::collection::vec(
                ("[a-z]{0,3}", proptest::collection::vec(any::<u8>(), 0..4)),
                0..2,
            ),
        )
            .prop_map(|(ts, key, value, headers)| {
                let mut m = Message::new(value).with_timestamp(ts);
                m.key = key.map(Bytes::from);
                for (k, v) in headers {
                    m = m.with_header(k, v);
                }
                m
            })
    }

    proptest! {
        /// The fast path never disagrees with `Message::decode_bytes`: on any bytes (a valid
        /// encoding, or one with a byte changed, cut or extended) it either declines or returns
        /// exactly what the reference decoder returns.
        #[test]
        fn plain_fast_path_agrees_with_reference_decoder(
            msg in arb_message(),
            edit in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
            cut in 0usize..3,
            extra in proptest::collection::vec(any::<u8>(), 0..3),
            prefix in 0usize..3,
        ) {
            let mut enc = vec![0xAA; prefix];
            msg.encode(&mut enc);
            if let Some((i, b)) = edit {
                let i = prefix + i.index(enc.len() - prefix);
                enc[i] = b;
            }
            enc.truncate(enc.len() - cut.min(enc.len() - prefix));
            enc.extend(&extra);
            let chunk = Bytes::from(enc);
            let fast = decode_plain_message(&chunk, prefix..chunk.len());
            let slow = reference(&chunk.slice(prefix..));
            if let Some(f) = fast {
                prop_assert_eq!(Some(f), slow);
            }
            if edit.is_none() && cut == 0 && extra.is_empty() && msg.headers.is_empty() {
                prop_assert_eq!(decode_plain_message(&chunk, prefix..chunk.len()), Some(msg));
            }
        }
    }

    fn frames(seqs: std::ops::RangeInclusive<u64>) -> Vec<u8> {
        let mut buf = Vec::new();
        for s in seqs {
            encode_frame(
                s,
                &Message::new(format!("v{s}")).with_timestamp(s as i64),
                &mut buf,
            );
        }
        buf
    }

    #[test]
    fn decode_records_skips_below_from_seq_and_stops_at_max() {
        let buf = Bytes::from(frames(1..=5));
        let d = decode_records(&buf, 3, 2).unwrap();
        assert_eq!(
            d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(d.next_seq, Some(5));
    }

    #[test]
    fn torn_tail_is_not_an_error_and_consumed_marks_complete_frames() {
        let full = frames(1..=3);
        let cut = full.len() - 3;
        let d = decode_records(&Bytes::from(full[..cut].to_vec()), 1, 10).unwrap();
        assert_eq!(d.records.len(), 2);
        assert_eq!(
            frame_len(&full[d.consumed..]),
            Some(full.len() - d.consumed)
        );
    }

    #[test]
    fn flipped_byte_in_complete_frame_is_corrupt_with_position() {
        let mut buf = frames(1..=3);
        let second = frame_len(&buf).unwrap();
        buf[second + 20] ^= 0xff;
        match decode_records(&Bytes::from(buf), 1, 10) {
            Err(Error::Corrupt { position, .. }) => assert_eq!(position, second as u64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_contiguous_seqs_are_corrupt() {
        let mut buf = frames(1..=1);
        buf.extend(frames(3..=3));
        assert!(matches!(
            decode_records(&Bytes::from(buf), 1, 10),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn seq_gap_between_complete_frames_is_corrupt_at_the_second_frame() {
        let mut buf = frames(5..=6);
        let second_at = buf.len();
        buf.extend(frames(8..=8));
        match decode_records(&Bytes::from(buf.clone()), 1, 10) {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, second_at as u64);
                assert!(reason.contains("expected 7"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // A backwards step (a duplicated frame) is rejected the same way.
        let mut dup = frames(5..=6);
        dup.extend(frames(6..=6));
        assert!(matches!(
            decode_records(&Bytes::from(dup), 1, 10),
            Err(Error::Corrupt { position, .. }) if position == second_at as u64
        ));
    }

    #[test]
    fn decode_records_at_checks_the_first_seq() {
        let buf = Bytes::from(frames(5..=7));
        let d = decode_records_at(&buf, 5, 6, 10).unwrap();
        assert_eq!(
            d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![6, 7]
        );
        assert_eq!(d.next_seq, Some(8));
        match decode_records_at(&buf, 4, 4, 10) {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, 0);
                assert!(reason.contains("expected 4"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // A skipped (below from_seq) first frame is still checked.
        assert!(decode_records_at(&buf, 6, 7, 10).is_err());
        // A buffer without a complete frame has nothing to check.
        let torn = buf.slice(..10);
        let d = decode_records_at(&torn, 4, 4, 10).unwrap();
        assert_eq!((d.consumed, d.next_seq), (0, None));
    }

    #[test]
    fn read_chunk_reads_a_whole_frame_longer_than_the_chunk_but_not_past_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000001.log");
        let mut buf = Vec::new();
        encode_frame(1, &Message::new(vec![1u8; 500]), &mut buf);
        let first = buf.len();
        encode_frame(2, &Message::new("b"), &mut buf);
        std::fs::write(&path, &buf).unwrap();
        let file = File::open(&path).unwrap();
        let end = buf.len() as u64;
        // Longer frame than the chunk: exactly that frame.
        let c = read_chunk(&file, &path, 0, end, 32).unwrap();
        assert_eq!(c.len(), first);
        // A chunk is capped by `end`.
        let c = read_chunk(&file, &path, first as u64, end, 1 << 20).unwrap();
        assert_eq!(c.len(), buf.len() - first);
        // A frame running past `end` (torn) is not read past it.
        let c = read_chunk(&file, &path, 0, 100, 32).unwrap();
        assert_eq!(c.len(), 32);
        // Past the end of the file is an I/O error.
        assert!(matches!(
            read_chunk(&file, &path, 0, end + 10, 1 << 20),
            Err(Error::Io { .. })
        ));
    }

    #[test]
    fn file_names_round_trip_and_strays_are_rejected() {
        let n = segment_file_name(123, TIME_INDEX_SUFFIX);
        assert_eq!(parse_segment_file_name(&n), Some((123, TIME_INDEX_SUFFIX)));
        assert_eq!(parse_segment_file_name("00000000000000000001.tmp"), None);
        assert_eq!(parse_segment_file_name("0000000000000000000x.log"), None);
        assert_eq!(parse_segment_file_name("README"), None);
    }

    #[test]
    fn dump_reports_bad_crc_and_continues() {
        let mut buf = frames(1..=3);
        let first = frame_len(&buf).unwrap();
        buf[first + 17] ^= 1;
        let dumped: Vec<_> = dump_frames(Bytes::from(buf)).collect();
        assert_eq!(dumped.len(), 3);
        assert!(dumped[0].crc_ok && !dumped[1].crc_ok && dumped[2].crc_ok);
        assert_eq!(dumped[2].seq, Some(3));
    }
}
