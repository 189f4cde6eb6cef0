//! Reading a segment in krabka's old per-record format, read-only, every frame proved before
//! its record is handed out.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use super::{CHUNK, Chunk, Cursor, Got, LogReader};
use crate::Error;
use crate::segment;

impl LogReader {
    /// [`decode_from`](Self::decode_from) for a segment in krabka's old per-record format: its
    /// frames are decoded read-only, each proved (CRC, seq, a message that fills it, not past
    /// `last_allowed`) before its record is handed out. A damaged frame ends the read there
    /// ([`Error::OldFormatDamaged`], after the records before it).
    pub(super) fn decode_old(
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
                    batches: Bytes::new(),
                    path: path.to_path_buf(),
                    position: cursor.position,
                }))
            }
            (true, None) if consumed > 0 => Ok(Chunk::Again),
            (true, None) => Ok(Chunk::AtEnd(len)),
        }
    }
}
