//! Reusable read buffers.
//!
//! Records returned by a read share the buffer their batches were read into (zero-copy), so a
//! buffer cannot simply be reused by the next read. Instead a few recently used buffers are
//! kept; a read takes one back once every record sharing it has been dropped (the pool holds
//! the only handle left). That saves allocating, zero-filling and page-faulting a fresh buffer
//! per read, which cost as much as the `pread` itself.
//!
//! Reads of up to [`SMALL_READ`] bytes (point reads, the short chunks of reads of a few
//! records) take no lock: each thread keeps the buffer of its last small read, and the next
//! one reuses it (no allocation, no zero-fill, memory still in cache) when no record shares it
//! any more, else reads into a new one of its own size (the old one goes with the records that
//! share it). The buffer is kept as a shared `BytesMut` (it was split once), so handing it out
//! and taking it back moves a reference count only.

use std::cell::RefCell;
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

/// Reads of at most this many bytes use the thread's own buffer (see the module docs).
pub(crate) const SMALL_READ: usize = 32 << 10;

thread_local! {
    /// This thread's buffer of its last small read (see the module docs).
    static SMALL: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Reads `prefix` followed by up to `len` bytes at `pos` of `file` (see
/// [`ReadBufs::read_after`]) into the thread's small-read buffer, or a new one when it is
/// shared or too short.
fn read_small(
    prefix: &[u8],
    file: &File,
    path: &Path,
    pos: u64,
    len: usize,
) -> Result<Bytes, Error> {
    let total = prefix.len().saturating_add(len);
    SMALL.with_borrow_mut(|slot| {
        let reused = slot
            .take()
            .filter(Bytes::is_unique)
            .and_then(|b| b.try_into_mut().ok())
            .filter(|b| b.capacity() >= total);
        let mut buf = match reused {
            Some(buf) => buf,
            // Rounded up, so that reads of varying sizes settle on one buffer soon (at most
            // twice the bytes a read needs are held with its records).
            None => shared_buffer(total.next_power_of_two()),
        };
        // Bytes initialized by an earlier read are kept (the buffer is handed back whole):
        // only a read longer than every one before zero-fills what it adds.
        if buf.len() < total {
            buf.resize(total, 0);
        }
        let filled = fill(
            buf.get_mut(..total).unwrap_or_default(),
            prefix,
            file,
            path,
            pos,
        )?;
        let whole = buf.freeze();
        let bytes = whole.slice(..filled);
        *slot = Some(whole);
        Ok(bytes)
    })
}

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
        if total <= SMALL_READ {
            return read_small(prefix, file, path, pos, len);
        }
        let mut buf = self.take(total);
        if buf.len() >= total {
            // Already initialized by an earlier read: no zero-fill needed.
            buf.truncate(total);
        } else {
            buf.resize(total, 0);
        }
        let filled = fill(&mut buf, prefix, file, path, pos)?;
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
            _ => shared_buffer(len),
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

/// An empty buffer of at least `capacity` bytes, split once so that it is shared from the
/// start: freezing it, cloning the `Bytes` (a record's view) and taking it back once unique
/// then move a reference count only. (A buffer frozen unshared is promoted at its first clone,
/// an allocation, and taking it back unshares it again: one allocation per read.)
fn shared_buffer(capacity: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(capacity);
    let all = buf.capacity();
    drop(buf.split_off(all));
    buf
}

/// Fills `buf` with `prefix` followed by the bytes at `pos` of `file`, up to its length or the
/// file's end; returns how many bytes of it are filled.
fn fill(buf: &mut [u8], prefix: &[u8], file: &File, path: &Path, pos: u64) -> Result<usize, Error> {
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
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes, byte `i` being `i % 251`, opened for reading.
    fn patterned(dir: &Path, len: usize) -> Result<(File, std::path::PathBuf), Error> {
        let path = dir.join("f");
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        Ok((file, path))
    }

    fn expected(pos: usize, len: usize) -> Vec<u8> {
        (pos..pos + len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn large_buffers_are_reused_only_when_no_record_shares_them() -> Result<(), Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::io(Path::new("tmp"), e))?;
        let big = SMALL_READ + 1;
        let (file, path) = patterned(dir.path(), 3 * big)?;
        let bufs = ReadBufs::default();
        let a = bufs.read_at(&file, &path, 0, big)?;
        let held = a.slice(2..4);
        let a_ptr = a.as_ptr();
        drop(a);
        // `held` still shares the first buffer: the next read must not overwrite it.
        let b = bufs.read_at(&file, &path, big as u64, big)?;
        assert_eq!(held[..], expected(2, 2));
        assert_eq!(b[..], expected(big, big));
        assert_ne!(b.as_ptr(), a_ptr);
        drop((held, b));
        // Both are free now; the next read reuses one of them without zero-filling.
        let c = bufs.read_at(&file, &path, 4, big)?;
        assert_eq!(c[..], expected(4, big));
        assert_eq!(bufs.free.lock().len(), 2);
        Ok(())
    }

    /// Small reads reuse the thread's buffer of the last one once no record shares it, and
    /// never write over bytes a record still holds.
    #[test]
    fn small_reads_reuse_one_buffer_and_never_overwrite_bytes_still_held() -> Result<(), Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::io(Path::new("tmp"), e))?;
        let (file, path) = patterned(dir.path(), 1 << 20)?;
        let bufs = ReadBufs::default();
        // A new thread: its buffer starts empty, whatever other tests did on theirs.
        std::thread::scope(|s| {
            s.spawn(|| -> Result<(), Error> {
                let len = 3000;
                let held: Vec<(usize, Bytes)> = (0..50)
                    .map(|i| {
                        let pos = i * 997;
                        Ok((pos, bufs.read_at(&file, &path, pos as u64, len)?))
                    })
                    .collect::<Result<_, Error>>()?;
                for (pos, bytes) in &held {
                    assert_eq!(bytes[..], expected(*pos, len), "read at {pos}");
                }
                drop(held);
                // Nothing held: every read (shorter ones too) lands in the same buffer.
                let first = bufs.read_at(&file, &path, 10, len)?.as_ptr();
                for i in 0..100 {
                    let b = bufs.read_at(&file, &path, i * 13, len - i as usize)?;
                    assert_eq!(b[..], expected(i as usize * 13, len - i as usize));
                    assert_eq!(b.as_ptr(), first, "read {i} in another buffer");
                }
                // None of them went to the shared pool.
                assert_eq!(bufs.free.lock().len(), 0);
                Ok(())
            })
            .join()
            .unwrap_or_else(|_| {
                Err(Error::io(
                    Path::new("thread"),
                    std::io::Error::other("panicked"),
                ))
            })
        })
    }
}
