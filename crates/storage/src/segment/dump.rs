//! Walking every frame of a segment's bytes for tools, damaged frames included.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use bytes::Bytes;
use krabka_protocol::Message;

use super::decode::decode_message;
use super::frame::{FRAME_HEADER_LEN, MIN_MESSAGE_LEN, Parsed, frame_len, parse_frame};
use crate::Error;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::test_frames as frames;

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
