//! Walking every batch of a segment's bytes for tools, damaged batches included.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use bytes::Bytes;
use krabka_protocol::batch::BatchView;

use super::batch::{MIN_BATCH_LEN, Parsed, batch_len};
use super::format::parse_batch;
use crate::Error;
use krabka_protocol::batch::StoredHeader;

/// One batch as seen by [`dump_batches`] or [`DumpFile`](super::DumpFile).
#[derive(Clone, Debug)]
pub struct DumpedBatch {
    /// Byte position of the batch in the buffer or file.
    pub position: u64,
    /// The batch's total length as its length field says (may run past the end).
    pub batch_len: u64,
    /// The `baseOffset` field as a seq (`None` when the bytes end before it or it is negative).
    pub seq: Option<u64>,
    /// The header fields as the bytes hold them, decoded whether or not the batch is valid
    /// (`None` when fewer than a header's bytes are there or the magic byte is not 2). For a
    /// batch that failed its checks they are what the bytes say, not known to be true.
    pub header: Option<StoredHeader>,
    /// The seq of the batch's last record by its header (`None` when the header is not valid).
    pub last_seq: Option<u64>,
    /// Whether the stored CRC-32C matches the batch's bytes.
    pub crc_ok: bool,
    /// The checked batch: its header, and its records to read one by one with
    /// [`BatchView::records`] (each record is checked as it is read). `None` when the batch is
    /// not valid, or too long to hold in memory ([`DUMP_DECODE_LIMIT`](super::DUMP_DECODE_LIMIT)).
    pub batch: Option<BatchView>,
    /// What is wrong with the batch, if anything.
    pub problem: Option<String>,
}

impl DumpedBatch {
    /// The batch at `position` as far as its first bytes `rest` tell: seq and length.
    pub(crate) fn at(position: u64, rest: &[u8]) -> DumpedBatch {
        DumpedBatch {
            position,
            batch_len: batch_len(rest).unwrap_or(rest.len()) as u64,
            seq: rest
                .get(..8)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .and_then(|b| u64::try_from(i64::from_be_bytes(b)).ok()),
            header: StoredHeader::read(rest),
            last_seq: None,
            crc_ok: false,
            batch: None,
            problem: None,
        }
    }

    /// Fills in what parsing the batch's `n` bytes found.
    pub(crate) fn parsed(&mut self, bytes: &Bytes) {
        match parse_batch(bytes) {
            Parsed::Batch(f) => {
                self.crc_ok = true;
                self.last_seq = Some(f.last);
                self.batch = Some(f.view);
            }
            Parsed::Bad(reason) => {
                self.crc_ok =
                    !reason.starts_with("CRC mismatch") && BatchView::parse(bytes).is_ok();
                self.problem = Some(reason);
            }
            Parsed::Incomplete => {
                self.problem = Some(format!("incomplete batch: {} bytes", bytes.len()));
            }
        }
    }
}

/// Iterator over every batch of a segment's bytes; see [`dump_batches`].
#[derive(Debug, Clone)]
pub struct DumpBatches {
    buf: Bytes,
    pos: usize,
    done: bool,
}

/// Walks every batch of a segment's bytes, reporting each batch's seqs, CRC status and
/// records, for tools such as a `dump` command. A batch with a bad CRC is reported and skipped
/// by its length; the walk ends after a batch whose length is invalid or runs past the buffer,
/// and before bytes that are all zeros to the end of the buffer (the preallocated space of an
/// active segment, [`Options::preallocate`](crate::Options::preallocate), walked as no batch,
/// as [`DumpFile`](super::DumpFile) walks it; a zero run followed by anything else is a batch
/// with a problem).
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{dump_batches, encode_batch_of_one};
///
/// let mut buf = Vec::new();
/// encode_batch_of_one(1, &Message::new("x").with_key("k"), &mut buf)?;
/// let batches: Vec<_> = dump_batches(Bytes::from(buf)).collect();
/// assert_eq!(batches.len(), 1);
/// assert!(batches[0].crc_ok);
/// assert_eq!(batches[0].seq, Some(1));
/// let batch = batches[0].batch.as_ref().unwrap();
/// let record = batch.records(1 << 20)?.next().unwrap()?;
/// assert_eq!(record.value.as_deref(), Some(&b"x"[..]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn dump_batches(buf: Bytes) -> DumpBatches {
    DumpBatches {
        buf,
        pos: 0,
        done: false,
    }
}

/// Reads a whole `.log` file for [`dump_batches`].
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

impl Iterator for DumpBatches {
    type Item = DumpedBatch;

    fn next(&mut self) -> Option<DumpedBatch> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        let rest = self.buf.slice(self.pos..);
        if rest.iter().all(|&b| b == 0) {
            // Zeros to the end: an active segment's preallocated space, not a batch.
            self.done = true;
            return None;
        }
        let mut out = DumpedBatch::at(self.pos as u64, &rest);
        match batch_len(&rest) {
            Some(n) if n >= MIN_BATCH_LEN && n <= rest.len() => {
                out.parsed(&rest.slice(..n));
                self.pos += n;
            }
            Some(n) if n < MIN_BATCH_LEN => {
                out.problem = Some(format!(
                    "batch length {n} is below the minimum {MIN_BATCH_LEN}"
                ));
                self.done = true;
            }
            _ => {
                out.problem = Some(format!(
                    "incomplete batch: {} bytes left at the end",
                    rest.len()
                ));
                self.done = true;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::test_batches as batches;

    #[test]
    fn dump_reports_bad_crc_and_continues() {
        let mut buf = batches(1..=3);
        let first = batch_len(&buf).unwrap();
        buf[first + 62] ^= 1;
        let dumped: Vec<_> = dump_batches(Bytes::from(buf)).collect();
        assert_eq!(dumped.len(), 3);
        assert!(dumped[0].crc_ok && !dumped[1].crc_ok && dumped[2].crc_ok);
        assert_eq!(dumped[2].seq, Some(3));
        // The damaged batch's header fields are still handed out, as its bytes hold them.
        let header = dumped[1].header.expect("a whole header with magic 2");
        assert_eq!((header.base_offset, header.record_count), (2, 1));
        assert!(
            dumped[1]
                .problem
                .as_deref()
                .unwrap()
                .starts_with("CRC mismatch")
        );
    }
}
