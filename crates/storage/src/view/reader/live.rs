//! The end of a newest segment whose file is longer than its batches: the zeros of its
//! preallocated space ([`Options::preallocate`](crate::Options::preallocate)) after its last
//! batch are its end, as recovery takes them.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use super::{Chunk, Cursor, LogReader, ZeroRun};
use crate::Error;
use crate::segment::{self, BATCH_HEADER_LEN};

impl LogReader {
    /// Whether the segment `base`'s file (`len` bytes) is known to hold only zeros from `from`
    /// on: an earlier look found zeros from a byte up to `from` to its end, and the batch
    /// header at `from` is still zeros (the writer writes at its true end only, so it has not
    /// reached `from`). Costs one read of a header, never a read of the whole space.
    pub(super) fn known_zeros(
        &self,
        file: &File,
        path: &Path,
        base: u64,
        from: u64,
        len: u64,
    ) -> Result<bool, Error> {
        let covered = self
            .zeros
            .is_some_and(|z| z.base == base && z.len == len && z.from <= from);
        if !covered {
            return Ok(false);
        }
        let want = usize::try_from(len.saturating_sub(from))
            .unwrap_or(usize::MAX)
            .min(BATCH_HEADER_LEN);
        let mut head = [0u8; BATCH_HEADER_LEN];
        let head = head.get_mut(..want).unwrap_or_default();
        match file.read_exact_at(head, from) {
            Ok(()) => Ok(head.iter().all(|&b| b == 0)),
            // Cut back under the read (a roll trimmed the space): not known.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// Whether every byte of the segment `base`'s file from `from` to `len` is zero: read
    /// once (holes skipped, [`segment::first_nonzero`]), then remembered as [`ZeroRun`].
    pub(super) fn zeros_to_end(
        &mut self,
        file: &File,
        path: &Path,
        base: u64,
        from: u64,
        len: u64,
    ) -> Result<bool, Error> {
        if from >= len || self.known_zeros(file, path, base, from, len)? {
            return Ok(true);
        }
        if segment::first_nonzero(file, path, from, len)?.is_some() {
            return Ok(false);
        }
        self.zeros = Some(ZeroRun { base, len, from });
        Ok(true)
    }

    /// Whether `file` is now shorter than `len` (a roll cut its preallocated space after its
    /// length was taken).
    pub(super) fn shorter_than(file: &File, len: u64) -> bool {
        file.metadata().is_ok_and(|m| m.len() < len)
    }

    /// A batch at byte `at` of `buf` (read at `cursor` from the newest segment's file of `len`
    /// bytes) that does not decode, when it is the end of the segment rather than damage: its
    /// header and every byte after it to the end of the file are zeros (preallocated space).
    /// The records before it are returned first. `None` otherwise.
    pub(super) fn live_end(
        &mut self,
        buf: &Bytes,
        cursor: Cursor,
        max: usize,
        at: u64,
        (file, path, len): (&File, &Path, u64),
    ) -> Result<Option<Chunk>, Error> {
        let position = cursor.position.saturating_add(at);
        let rest = usize::try_from(at)
            .ok()
            .and_then(|at| buf.get(at..))
            .unwrap_or_default();
        let head = rest.get(..BATCH_HEADER_LEN).unwrap_or(rest);
        if !head.iter().all(|&b| b == 0)
            || !self.zeros_to_end(file, path, cursor.base, position, len)?
        {
            return Ok(None);
        }
        let (got, expect) = self.good_before(buf, cursor, max, at, path)?;
        self.cursor = Some(Cursor {
            base: cursor.base,
            position,
            expect,
            from_index: false,
        });
        Ok(Some(match got {
            Some(got) => Chunk::Got(got),
            None => Chunk::AtEnd(position),
        }))
    }
}
