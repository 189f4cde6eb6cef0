//! Reusable read buffers.
//!
//! Records returned by a read share the buffer their batches were read into (zero-copy), so a
//! buffer cannot simply be reused by the next read. Instead a few recently used buffers are
//! kept; a read takes one back once every record sharing it has been dropped (the pool holds
//! the only handle left). That saves allocating, zero-filling and page-faulting a fresh buffer
//! per read, which cost as much as the `pread` itself.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use crate::Error;

/// Buffers kept per pool.
const POOL_LEN: usize = 4;
/// Larger buffers (a chunk holding one huge batch) are not kept.
const MAX_POOLED: usize = 2 << 20;

/// A small pool of read buffers; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct ReadBufs {
    /// `(buffer, capacity)`; a buffer is reusable when `is_unique()`.
    free: Mutex<Vec<(Bytes, usize)>>,
}

impl ReadBufs {
    /// Reads up to `len` bytes at `pos` of `file` (fewer only where the file ends), into a
    /// reused buffer when one is free: a file cut shorter than its records yields the records
    /// before the cut, and the decoder names the byte where they stop.
    pub(crate) fn read_available(
        &self,
        file: &File,
        path: &Path,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, Error> {
        self.read_after(&[], file, path, pos, len)
    }

    /// `prefix` followed by up to `len` bytes at `pos` of `file` (fewer only where the file
    /// ends), in one buffer: a chunked reader that met the start of a batch at the end of its
    /// last chunk keeps those bytes and reads only what follows them.
    pub(crate) fn read_after(
        &self,
        prefix: &[u8],
        file: &File,
        path: &Path,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, Error> {
        let total = prefix.len().saturating_add(len);
        let mut buf = self.take(total);
        if buf.len() >= total {
            // Already initialized by an earlier read: no zero-fill needed.
            buf.truncate(total);
        } else {
            buf.resize(total, 0);
        }
        let mut filled = prefix.len();
        if let Some(head) = buf.get_mut(..filled) {
            head.copy_from_slice(prefix);
        }
        while let Some(rest) = buf.get_mut(filled..).filter(|r| !r.is_empty()) {
            let at = pos + (filled - prefix.len()) as u64;
            match file.read_at(rest, at) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        buf.truncate(filled);
        let cap = buf.capacity();
        let bytes = buf.freeze();
        if cap <= MAX_POOLED {
            self.put(bytes.clone(), cap);
        }
        Ok(bytes)
    }

    /// Reads exactly `len` bytes at `pos` of `file`, into a reused buffer when one is free; a
    /// file that ends sooner (cut since it was written) is [`Error::Corrupt`] naming the byte.
    pub(crate) fn read_at(
        &self,
        file: &File,
        path: &Path,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, Error> {
        let bytes = self.read_available(file, path, pos, len)?;
        if bytes.len() < len {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                position: pos,
                reason: format!(
                    "the file ends inside the {len} bytes of records expected from byte {pos}"
                ),
            });
        }
        Ok(bytes)
    }

    /// A free buffer of at least `len` bytes of capacity (the smallest that fits and is not
    /// wastefully large), or a new one.
    fn take(&self, len: usize) -> BytesMut {
        let limit = len.max(64 << 10).saturating_mul(4);
        let taken = {
            let mut free = self.free.lock();
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, (b, cap))| *cap >= len && *cap <= limit && b.is_unique())
                .min_by_key(|(_, (_, cap))| *cap)
                .map(|(i, _)| i);
            best.map(|i| free.swap_remove(i).0)
        };
        match taken.map(Bytes::try_into_mut) {
            Some(Ok(buf)) => buf,
            _ => BytesMut::with_capacity(len),
        }
    }

    fn put(&self, bytes: Bytes, cap: usize) {
        let mut free = self.free.lock();
        if free.len() >= POOL_LEN {
            // Evict a buffer still shared by records (its memory goes with them), else the
            // oldest.
            let i = free.iter().position(|(b, _)| !b.is_unique()).unwrap_or(0);
            free.remove(i);
        }
        free.push((bytes, cap));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_only_when_no_record_shares_them() -> Result<(), Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::io(Path::new("tmp"), e))?;
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789abcdef").map_err(|e| Error::io(&path, e))?;
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let bufs = ReadBufs::default();
        let a = bufs.read_at(&file, &path, 0, 8)?;
        let held = a.slice(2..4);
        let a_ptr = a.as_ptr();
        drop(a);
        // `held` still shares the first buffer: the next read must not overwrite it.
        let b = bufs.read_at(&file, &path, 8, 8)?;
        assert_eq!(&held[..], b"23");
        assert_eq!(&b[..], b"89abcdef");
        assert_ne!(b.as_ptr(), a_ptr);
        drop((held, b));
        // Both are free now; a shorter read reuses one of them without zero-filling.
        let c = bufs.read_at(&file, &path, 4, 4)?;
        assert_eq!(&c[..], b"4567");
        assert_eq!(bufs.free.lock().len(), 2);
        Ok(())
    }
}
