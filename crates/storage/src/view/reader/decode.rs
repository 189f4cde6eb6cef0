//! Decoding a segment's batches from the cursor on: the records before a bad batch first, then
//! the failure naming the file and byte; no record of a batch past a closed segment's end.

use std::fs::File;
use std::path::Path;

use bytes::Bytes;

use super::{CHUNK, Chunk, Cursor, Got, IndexFallback, LogReader};
use crate::Error;
use crate::segment;

impl LogReader {
    /// Decodes up to `max` records of the segment at `path` (`len` bytes) from `cursor`. No
    /// record of a batch reaching past the segment's last allowed seq (a closed segment ends
    /// where the next one starts) is handed out: such a batch is damage at its byte.
    pub(super) fn decode_from(
        &mut self,
        cursor: Cursor,
        file: &File,
        path: &Path,
        len: u64,
        max: usize,
        batches: bool,
    ) -> Result<Chunk, Error> {
        let last_allowed = self.last_allowed(cursor.base)?;
        if self.old == Some(cursor.base) {
            if batches {
                return Err(Error::OldFormat {
                    path: path.to_path_buf(),
                });
            }
            return self.decode_old(cursor, file, path, len, max, last_allowed);
        }
        // The newest segment may end before its file does (preallocated space).
        let newest = last_allowed == u64::MAX;
        if newest && self.known_zeros(file, path, cursor.base, cursor.position, len)? {
            return Ok(Chunk::AtEnd(cursor.position));
        }
        let buf = match segment::read_chunk(file, path, cursor.position, len, CHUNK) {
            Ok(buf) => buf,
            // Cut back under the read: a roll trimmed its preallocated space. Look again.
            Err(_) if Self::shorter_than(file, len) => return Ok(Chunk::Again),
            Err(e) => return Err(e),
        };
        let decoded = segment::decode_within(
            &buf,
            Some(cursor.expect),
            self.next_seq,
            max,
            last_allowed,
            false,
        );
        // Nothing decodes at the segment's start (damage, or a batch that seems to run past
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
                    self.fallbacks.push(IndexFallback::BadBatch {
                        log: path.to_path_buf(),
                        position: cursor.position,
                        seq: cursor.expect,
                    });
                    self.cursor = Some(Cursor::start_of(cursor.base));
                    return Ok(Chunk::Again);
                }
                if newest {
                    match self.live_end(&buf, cursor, max, at, (file, path, len)) {
                        Ok(Some(chunk)) => return Ok(chunk),
                        Ok(None) => {}
                        // The zeros were being looked through when a roll trimmed them.
                        Err(_) if Self::shorter_than(file, len) => return Ok(Chunk::Again),
                        Err(e) => return Err(e),
                    }
                    // A batch being written into preallocated space reads as a whole batch
                    // that fails its CRC until the write is done: one more read, after a
                    // pause longer than such a write, decides.
                    let here = (cursor.base, cursor.position + at);
                    if self.looked_again != Some(here) {
                        self.looked_again = Some(here);
                        std::thread::sleep(super::LOOK_AGAIN_AFTER);
                        return Ok(Chunk::Again);
                    }
                }
                return self.good_then_bad(&buf, cursor, max, at, reason, path);
            }
        }
        Ok(Chunk::AtEnd(len))
    }

    /// The records of `buf` before the bad batch at `at` (they are valid: returned now), and
    /// the failure naming the file and byte (returned by the next call).
    pub(super) fn good_then_bad(
        &mut self,
        buf: &Bytes,
        cursor: Cursor,
        max: usize,
        at: u64,
        reason: String,
        path: &Path,
    ) -> Result<Chunk, Error> {
        let position = cursor.position + at;
        let (got, expect) = self.good_before(buf, cursor, max, at, path)?;
        self.cursor = Some(Cursor {
            base: cursor.base,
            position,
            expect,
            from_index: false,
        });
        let error = Error::BadBatch {
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

    /// The records of `buf` (read at `cursor`) before byte `at` of it, decoded again (they are
    /// valid), and the seq of the batch at `at`. Moves the next seq to read past them.
    pub(super) fn good_before(
        &mut self,
        buf: &Bytes,
        cursor: Cursor,
        max: usize,
        at: u64,
        path: &Path,
    ) -> Result<(Option<Got>, u64), Error> {
        let last_allowed = self.last_allowed(cursor.base)?;
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
        Ok((got, expect))
    }
}
