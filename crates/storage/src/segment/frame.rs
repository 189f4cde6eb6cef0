//! The record frame: layout constants, encoding, the length-and-CRC check, and the chunked read
//! every reader of segment files shares.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::{BufMut, Bytes};
use krabka_protocol::Message;

use crate::Error;

/// Bytes before the message in every frame: length (4), CRC (4) and seq (8).
pub const FRAME_HEADER_LEN: usize = 16;

/// Bytes of the smallest encoded message (no key, empty value, no headers).
pub const MIN_MESSAGE_LEN: usize = 18;

/// Smallest value a frame's `len` field can hold: seq (8) + the smallest message.
pub(crate) const MIN_BODY_LEN: usize = 8 + MIN_MESSAGE_LEN;

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
/// Feed the result to [`decode_records`](super::decode_records) (or
/// [`decode_records_at`](super::decode_records_at)) and continue at
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
