//! Walking every batch of a segment *file* for tools, streaming: memory stays under a fixed
//! ceiling whatever the file holds (its size, a batch length field, a file that never ends).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::batch::{BATCH_HEADER_LEN, MIN_BATCH_LEN, batch_len};
use super::dump::DumpedBatch;
use crate::{DEFAULT_MAX_MESSAGE_BYTES, Error};

/// Bytes read per step.
const CHUNK: u64 = 1 << 20;

/// The largest batch [`DumpFile`] holds in memory: a batch of one record of the default
/// [`Options::max_message_bytes`](crate::Options::max_message_bytes). A longer batch (a log
/// configured for larger messages, or a damaged length field) is checked against its CRC in
/// 1 MiB steps and reported without its records.
pub const DUMP_DECODE_LIMIT: u64 = DEFAULT_MAX_MESSAGE_BYTES + BATCH_HEADER_LEN as u64;

/// Iterator over every batch of a segment file, read in bounded steps; see
/// [`DumpFile::open`].
#[derive(Debug)]
pub struct DumpFile {
    file: File,
    path: PathBuf,
    len: u64,
    pos: u64,
    /// Bytes of the file from `chunk_at`.
    chunk: Bytes,
    chunk_at: u64,
    done: bool,
    /// Whether seqs are checked ([`DumpFile::checking_seqs`]).
    check_seqs: bool,
    /// The seq the next batch must start at, when known.
    expect: Option<u64>,
    /// Where the zeros ending the file start, once the walk reached them.
    zero_tail: Option<u64>,
}

impl DumpFile {
    /// Opens the segment file at `path` for a batch-by-batch walk, like
    /// [`dump_batches`](super::dump_batches) but never holding more than [`DUMP_DECODE_LIMIT`]
    /// bytes of it (1 MiB at a time for batches up to that size). The walk covers the bytes
    /// the file had when it was opened. A batch with a bad CRC is reported and skipped by its
    /// length; the walk ends after a batch whose length field is below the minimum or runs
    /// past the end of the file (reported with its byte position), and after an I/O error.
    /// Batches longer than [`DUMP_DECODE_LIMIT`] are reported with their CRC status and no
    /// records. Any file of v2 batches walks, a segment Kafka wrote included.
    ///
    /// ```
    /// use krabka_protocol::Message;
    /// use krabka_storage::segment::{DumpFile, encode_batch_of_one};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("00000000000000000001.log");
    /// let mut buf = Vec::new();
    /// encode_batch_of_one(1, &Message::new("a"), &mut buf)?;
    /// encode_batch_of_one(2, &Message::new("b"), &mut buf)?;
    /// std::fs::write(&path, &buf)?;
    /// let batches: Vec<_> = DumpFile::open(&path)?.collect::<Result<_, _>>()?;
    /// assert_eq!(batches.len(), 2);
    /// assert!(batches.iter().all(|f| f.crc_ok && f.problem.is_none()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened, or is not a regular file (a directory, a
    /// device such as `/dev/zero`, a pipe: never opened, so never waited on).
    pub fn open(path: &Path) -> Result<DumpFile, Error> {
        let not_regular = |kind: &str| {
            Error::io(
                path,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{kind}, not a regular file (a segment's .log file)"),
                ),
            )
        };
        let meta = fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(not_regular(file_kind(&meta)));
        }
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(not_regular(file_kind(&meta)));
        }
        Ok(DumpFile {
            file,
            path: path.to_path_buf(),
            len: meta.len(),
            pos: 0,
            chunk: Bytes::new(),
            chunk_at: 0,
            done: false,
            check_seqs: false,
            expect: None,
            zero_tail: None,
        })
    }

    /// Also checks seqs, as every reader of a log does: each batch must start at the seq after
    /// the previous intact batch's last, the first one at `first_seq` when given (the base seq
    /// a segment file's name gives). A batch that does not is reported with the problem `batch
    /// starts at seq S, expected E`, and the walk expects the seq after its own last next.
    ///
    /// ```
    /// use krabka_protocol::Message;
    /// use krabka_storage::segment::{DumpFile, encode_batch_of_one};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("00000000000000000001.log");
    /// let mut buf = Vec::new();
    /// encode_batch_of_one(1, &Message::new("a"), &mut buf)?;
    /// encode_batch_of_one(3, &Message::new("b"), &mut buf)?;
    /// std::fs::write(&path, &buf)?;
    /// let batches: Vec<_> = DumpFile::open(&path)?.checking_seqs(Some(1)).collect::<Result<_, _>>()?;
    /// assert_eq!(batches[1].problem.as_deref(), Some("batch starts at seq 3, expected 2"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn checking_seqs(mut self, first_seq: Option<u64>) -> DumpFile {
        self.check_seqs = true;
        self.expect = first_seq;
        self
    }

    /// Adds the seq problem of `batch`, if any, and moves the expected seq past it.
    fn check_seq(&mut self, batch: &mut DumpedBatch) {
        if !self.check_seqs || batch.problem.is_some() {
            return;
        }
        if let (Some(e), Some(s)) = (self.expect, batch.seq)
            && s != e
        {
            batch.problem = Some(format!("batch starts at seq {s}, expected {e}"));
        }
        self.expect = batch.last_seq.or(batch.seq).and_then(|s| s.checked_add(1));
    }

    /// Where the zeros that end the file start, once the walk reached them: from there to the
    /// end every byte is zero (the preallocated space of an active segment,
    /// [`Options::preallocate`](crate::Options::preallocate)), walked as no batch. A run of
    /// zeros followed by anything else is a batch with a problem, as any damage.
    pub fn zero_tail(&self) -> Option<u64> {
        self.zero_tail
    }

    /// The file's length when it was opened: the bytes the walk covers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file was empty when it was opened.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `pos..pos + need` (which must lie within the file) as a slice of the chunk,
    /// reading a new chunk of at least `need` bytes from `pos` when the current one ends
    /// before.
    fn bytes_at(&mut self, need: u64) -> Result<Bytes, Error> {
        let end = self.chunk_at + self.chunk.len() as u64;
        if self.pos < self.chunk_at || self.pos + need > end {
            let want = need.max(CHUNK).min(self.len - self.pos);
            let mut buf = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
            self.file
                .read_exact_at(&mut buf, self.pos)
                .map_err(|e| Error::io(&self.path, e))?;
            self.chunk = Bytes::from(buf);
            self.chunk_at = self.pos;
        }
        let from = usize::try_from(self.pos - self.chunk_at).unwrap_or(usize::MAX);
        let to = usize::try_from(need).map_or(usize::MAX, |n| from.saturating_add(n));
        Ok(self
            .chunk
            .slice(from.min(self.chunk.len())..to.min(self.chunk.len())))
    }

    /// The next batch, or `None` at the end of the walk.
    fn step(&mut self) -> Result<Option<DumpedBatch>, Error> {
        if self.done || self.pos >= self.len {
            return Ok(None);
        }
        let rest = self.len - self.pos;
        let head = self.bytes_at(rest.min(BATCH_HEADER_LEN as u64))?;
        if head.iter().all(|&b| b == 0)
            && super::scan::nonzero_end(&self.file, &self.path, self.pos, self.len)? == self.pos
        {
            // Zeros to the end: an active segment's preallocated space, not a batch.
            self.zero_tail = Some(self.pos);
            self.done = true;
            return Ok(None);
        }
        let mut out = DumpedBatch::at(self.pos, &head);
        out.batch_len = rest;
        let total = batch_len(&head).map(|n| n as u64);
        match total {
            Some(n) if head.len() == BATCH_HEADER_LEN && n >= MIN_BATCH_LEN as u64 => {
                out.batch_len = n;
                if n > rest {
                    out.problem = Some(format!(
                        "the batch's length field says {n} bytes but {rest} bytes are left in \
                         the file (a torn write, or a damaged length field)"
                    ));
                    self.done = true;
                } else if n <= DUMP_DECODE_LIMIT {
                    let bytes = self.bytes_at(n)?;
                    out.parsed(&bytes);
                    self.pos += n;
                } else {
                    self.crc_checked(&mut out, &head, n)?;
                }
            }
            Some(n) if head.len() == BATCH_HEADER_LEN => {
                out.batch_len = n;
                out.problem = Some(format!(
                    "batch length {n} is below the minimum {MIN_BATCH_LEN}"
                ));
                self.done = true;
            }
            _ => {
                out.problem = Some(format!("incomplete batch: {rest} bytes left at the end"));
                self.done = true;
            }
        }
        Ok(Some(out))
    }

    /// The batch of `n` bytes at `pos`, longer than [`DUMP_DECODE_LIMIT`]: its CRC-32C computed
    /// in steps of 1 MiB, its records not read (`batch` stays `None`, with no problem when the
    /// CRC matches).
    fn crc_checked(&mut self, out: &mut DumpedBatch, head: &[u8], n: u64) -> Result<(), Error> {
        let stored = head
            .get(17..21)
            .and_then(|s| <[u8; 4]>::try_from(s).ok())
            .map_or(0, u32::from_be_bytes);
        let mut crc = krabka_protocol::batch::Crc32c::new();
        let mut buf = vec![0u8; CHUNK as usize];
        let (mut at, end) = (self.pos + 21, self.pos + n);
        while at < end {
            let step = usize::try_from((end - at).min(CHUNK)).unwrap_or(buf.len());
            let part = buf.get_mut(..step).unwrap_or_default();
            self.file
                .read_exact_at(part, at)
                .map_err(|e| Error::io(&self.path, e))?;
            crc.update(part);
            at += step as u64;
        }
        let crc = crc.finish();
        out.crc_ok = crc == stored;
        if out.crc_ok {
            // The header is covered from `attributes` on; the seqs it gives are the batch's.
            out.last_seq = super::batch::peek_batch_header(head).map(|(_, last)| last);
        } else {
            out.problem = Some(format!(
                "CRC mismatch: stored {stored:#010x}, computed {crc:#010x}"
            ));
        }
        self.pos += n;
        Ok(())
    }
}

impl Iterator for DumpFile {
    type Item = Result<DumpedBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut step = self.step();
        match &mut step {
            Ok(Some(batch)) => self.check_seq(batch),
            Ok(None) => {}
            Err(_) => self.done = true,
        }
        step.transpose()
    }
}

/// What kind of file `meta` describes, for an error message.
fn file_kind(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a pipe"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::test_batches as batches;

    fn walk(bytes: &[u8]) -> Vec<DumpedBatch> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000001.log");
        fs::write(&path, bytes).unwrap();
        DumpFile::open(&path)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_file_walks_like_its_bytes_and_an_absurd_length_ends_the_walk_naming_its_byte() {
        let key = |f: &DumpedBatch| {
            (
                f.position,
                f.batch_len,
                f.seq,
                f.last_seq,
                f.crc_ok,
                f.problem.clone(),
            )
        };
        let mut buf = batches(1..=5);
        let second = batch_len(&buf).unwrap();
        buf[second + 17] ^= 1;
        let from_bytes: Vec<_> = crate::segment::dump_batches(Bytes::from(buf.clone()))
            .map(|f| key(&f))
            .collect();
        assert_eq!(walk(&buf).iter().map(key).collect::<Vec<_>>(), from_bytes);
        // A length field of 2 GiB at the last batch: reported there, nothing allocated for it.
        let last = batches(1..=4).len();
        buf[last + 8..last + 12].copy_from_slice(&i32::MAX.to_be_bytes());
        let walked = walk(&buf);
        assert_eq!(walked.len(), 5);
        let bad = walked.last().unwrap();
        assert_eq!(bad.position, last as u64);
        assert!(
            bad.problem.as_ref().unwrap().contains("length field"),
            "{bad:?}"
        );
        // Zeros followed by a non-zero byte: one batch of length 12, then the end.
        let mut zeros = [0u8; 100];
        zeros[99] = 1;
        let zeros = walk(&zeros);
        assert_eq!(zeros.len(), 1);
        assert!(
            zeros[0]
                .problem
                .as_ref()
                .unwrap()
                .contains("below the minimum")
        );
    }

    #[test]
    fn a_batch_over_the_decode_limit_is_crc_checked_without_its_records() {
        let msg = krabka_protocol::Message::new(vec![7u8; DUMP_DECODE_LIMIT as usize]);
        let mut buf = Vec::new();
        crate::segment::encode_batch_of_one(1, &msg, &mut buf).unwrap();
        crate::segment::encode_batch_of_one(2, &krabka_protocol::Message::new("b"), &mut buf)
            .unwrap();
        let walked = walk(&buf);
        assert_eq!(walked.len(), 2);
        assert!(
            walked[0].crc_ok && walked[0].batch.is_none(),
            "{:?}",
            walked[0]
        );
        assert!(walked[1].batch.is_some());
        buf[100] ^= 1;
        assert!(!walk(&buf)[0].crc_ok);
    }

    #[test]
    fn devices_and_directories_are_refused_before_they_are_read() {
        for path in ["/dev/zero", "/"] {
            assert!(matches!(
                DumpFile::open(Path::new(path)),
                Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::InvalidInput
            ));
        }
    }
}
