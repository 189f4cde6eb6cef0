//! The record batch as the unit of a segment file: layout constants, encoding, the framing and
//! CRC check, and the chunked read every reader of segment files shares.
//!
//! A `.log` file is a run of Kafka v2 record batches ([`krabka_protocol::batch`] owns the
//! byte format). A batch's `baseOffset` is the krabka seq of its first record. ("Frame" in
//! this crate means only the old format's per-record unit, [`super::old`].)

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;
use krabka_protocol::Message;
use krabka_protocol::batch::{self, BatchError, BatchHeader, BatchView, Compression};

use crate::Error;

/// Bytes of a batch header, before its first record (Kafka's 61).
pub const BATCH_HEADER_LEN: usize = batch::HEADER_LEN;

/// Bytes of the smallest batch: a header and one record with no key, an empty value and no
/// headers.
pub const MIN_BATCH_LEN: usize = batch::HEADER_LEN + MIN_RECORD_LEN;

/// Bytes of the smallest record (uncompressed): length, attributes, two deltas, a null key, an
/// empty value and no headers, one byte each. After damage, a seq found is believed only when
/// the records between it and the last good seq fit in the bytes between.
pub const MIN_RECORD_LEN: usize = 7;

/// Most bytes the records of one compressed batch may decompress to; a batch past it is
/// corrupt (a decompression bomb reads as an error, never as an allocation). Also the largest
/// `max_message_bytes`.
pub const MAX_UNCOMPRESSED_BATCH: usize = 64 << 20;

/// Records an append puts in one batch at most, counted as their encoded bytes before
/// compression: a larger `append_batch` is split into batches of about this size (a single
/// larger record gets a batch of its own). Kafka's producer default `batch.size` is 16 KiB
/// and its broker's `max.message.bytes` 1 MiB; 1 MiB keeps the per-batch cost negligible and a
/// point read within one batch short.
pub const MAX_BATCH_RECORD_BYTES: usize = 1 << 20;

/// The name of the segment format this build writes and reads, for messages.
pub const FORMAT_NAME: &str = "Kafka v2 record batches (magic 2)";

/// The total length of the batch at the start of `buf` (`12 + batchLength`), read from its
/// length field; `None` when `buf` is shorter than the 12 bytes up to and including that field.
/// The length is not validated (a negative one reads as 12): a chunked reader uses it to learn
/// how many bytes to fetch.
pub fn batch_len(buf: &[u8]) -> Option<usize> {
    let len = buf.get(8..12)?;
    let len = i32::from_be_bytes(<[u8; 4]>::try_from(len).ok()?);
    Some(batch::LOG_OVERHEAD + usize::try_from(len).unwrap_or(0))
}

/// Reads the bytes at `pos` of a segment's `.log` file for decoding: `chunk` bytes (at most up
/// to `end`, the file's length or the end of the valid data), or more when the batch starting
/// at `pos` is longer than that and ends by `end` — then the whole batch, so a chunk always
/// holds at least one complete batch unless the data is torn or corrupt there.
///
/// Feed the result to [`decode_records`](super::decode_records) (or
/// [`decode_records_at`](super::decode_records_at)) and continue at
/// `pos + consumed`. This is the read step of every chunked reader of segment files (the log's
/// own reads, its recovery scan, and read-only tools that follow a log directory).
///
/// ```
/// use krabka_protocol::Message;
/// use krabka_storage::segment::{decode_records, encode_batch_of_one, read_chunk};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("00000000000000000001.log");
/// let mut buf = Vec::new();
/// encode_batch_of_one(1, &Message::new(vec![7u8; 1000]), &mut buf)?;
/// std::fs::write(&path, &buf)?;
/// let file = std::fs::File::open(&path)?;
/// // A 64-byte chunk is too short for the batch: the whole batch is read.
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
    read_batch_chunk(pos, end, chunk, |at, len| {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, at)
            .map_err(|e| Error::io(path, e))?;
        Ok(Bytes::from(buf))
    })
}

/// [`read_chunk`] with the read itself supplied: `read(pos, len)` reads exactly `len` bytes at
/// `pos` (the log passes one that reuses pooled buffers).
pub(crate) fn read_batch_chunk(
    pos: u64,
    end: u64,
    chunk: usize,
    mut read: impl FnMut(u64, usize) -> Result<Bytes, Error>,
) -> Result<Bytes, Error> {
    let left = end.saturating_sub(pos);
    let want = usize::try_from(left).unwrap_or(usize::MAX).min(chunk);
    let first = read(pos, want)?;
    match batch_len(&first) {
        Some(n) if n > first.len() && n as u64 <= left => {
            // A batch longer than the chunk: read it whole.
            drop(first);
            read(pos, n)
        }
        _ => Ok(first),
    }
}

/// Appends a batch of one record, seq `seq`, holding `msg` to `buf` (uncompressed); returns the
/// batch's length.
///
/// # Errors
/// [`Error::SeqOutOfRange`] when `seq` is past `i64::MAX` (a batch's base offset is an
/// `i64`); [`Error::Encode`] when the message does not fit a v2 record (a value over 2 GiB).
pub fn encode_batch_of_one(seq: u64, msg: &Message, buf: &mut Vec<u8>) -> Result<usize, Error> {
    let start = buf.len();
    encode_batch_from(
        seq,
        std::slice::from_ref(msg),
        Compression::None,
        usize::MAX,
        buf,
    )?;
    Ok(buf.len() - start)
}

/// Appends one batch holding the first records of `msgs`, the first with seq `seq`, to `buf`:
/// as many as keep its records within `max_record_bytes` before compression (at least one);
/// returns how many it took (see [`batch::encode_messages`]).
pub(crate) fn encode_batch_from(
    seq: u64,
    msgs: &[Message],
    compression: Compression,
    max_record_bytes: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, Error> {
    let base = i64::try_from(seq).map_err(|_| Error::SeqOutOfRange { seq })?;
    batch::encode_messages(buf, base, msgs, compression, max_record_bytes).map_err(|source| {
        Error::Encode {
            seq,
            reason: source.to_string(),
        }
    })
}

/// [`encode_batch_from`] uncompressed, with the values of at least `borrow_at_least` bytes left out
/// of `buf` and listed in `pieces` (by their index in `msgs` plus `index_base`; see
/// [`batch::encode_messages_split`]).
pub(crate) fn encode_batch_from_split(
    seq: u64,
    msgs: &[Message],
    index_base: usize,
    max_record_bytes: usize,
    borrow_at_least: usize,
    buf: &mut Vec<u8>,
    pieces: &mut Vec<batch::BatchPiece>,
) -> Result<usize, Error> {
    let base = i64::try_from(seq).map_err(|_| Error::SeqOutOfRange { seq })?;
    batch::encode_messages_split(
        buf,
        pieces,
        base,
        msgs,
        index_base,
        max_record_bytes,
        borrow_at_least,
    )
    .map_err(|source| Error::Encode {
        seq,
        reason: source.to_string(),
    })
}

/// What kind of failure a [`BadBytes`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The bytes are not a valid batch (or not the one expected there).
    Corrupt,
    /// A valid batch holds a record a [`Message`] cannot represent: that record's seq.
    NotAMessage(u64),
    /// A batch compressed with a codec this build lacks: not damage, and never cut.
    CodecMissing(Compression),
}

/// Why a batch could not be decoded, relative to the start of the decoded buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadBytes {
    pub(crate) position: usize,
    pub(crate) reason: String,
    pub(crate) fault: Fault,
}

impl BadBytes {
    pub(crate) fn bad(position: usize, reason: impl Into<String>) -> Self {
        BadBytes {
            position,
            reason: reason.into(),
            fault: Fault::Corrupt,
        }
    }

    /// The error of `e`, met reading the batch at `position`.
    pub(crate) fn of_batch(position: usize, e: &BatchError) -> Self {
        let fault = match e {
            BatchError::CodecDisabled { codec } => Fault::CodecMissing(*codec),
            BatchError::NotAMessage { offset, .. } => {
                Fault::NotAMessage(u64::try_from(*offset).unwrap_or(0))
            }
            _ => Fault::Corrupt,
        };
        BadBytes {
            position,
            reason: batch_reason(e),
            fault,
        }
    }

    pub(crate) fn into_error(self, path: &Path, base: u64) -> Error {
        let position = base + self.position as u64;
        let path = path.to_path_buf();
        match self.fault {
            Fault::NotAMessage(seq) => Error::NotAMessage {
                path,
                position,
                seq,
                reason: self.reason,
            },
            Fault::CodecMissing(codec) => Error::CodecMissing {
                path,
                position,
                codec: codec.name(),
            },
            Fault::Corrupt => Error::Corrupt {
                path,
                position,
                reason: self.reason,
            },
        }
    }
}

/// One batch whose framing, magic and CRC were checked.
pub(crate) struct CheckedBatch {
    /// The seq of its first record (`baseOffset`).
    pub(crate) seq: u64,
    /// The seq of its last record (`baseOffset + lastOffsetDelta`).
    pub(crate) last: u64,
    /// The checked batch.
    pub(crate) view: BatchView,
    /// The batch's total length.
    pub(crate) len: usize,
}

pub(crate) enum Parsed {
    /// The buffer ends inside the batch.
    Incomplete,
    /// A complete batch that is invalid.
    Bad(String),
    /// A complete, valid batch.
    Batch(CheckedBatch),
}

/// Checks the batch at the start of `buf`: its length, magic and CRC-32C, that it holds at
/// least one record, that `recordCount` is `lastOffsetDelta + 1`, that its offsets are seqs
/// and that its `partitionLeaderEpoch` (which the CRC leaves out) is -1 or more.
/// The records themselves are checked as they are read. Bytes of the old format are merely
/// bad here; [`parse_batch`](super::format::parse_batch) names them.
pub(crate) fn parse_v2_batch(buf: &Bytes) -> Parsed {
    parse_v2_batch_at(buf, 0)
}

/// [`parse_v2_batch`] of the batch at byte `at` of `buf` (no handle on `buf` is taken for a
/// batch that does not check out, and only one, the view's, for one that does).
pub(crate) fn parse_v2_batch_at(buf: &Bytes, at: usize) -> Parsed {
    let len = match framed_len(buf.get(at..).unwrap_or_default()) {
        Ok(Some(len)) => len,
        Ok(None) => return Parsed::Incomplete,
        Err(reason) => return Parsed::Bad(reason),
    };
    let view = match BatchView::parse_at(buf, at) {
        Ok(v) => v,
        Err(e) => return Parsed::Bad(batch_reason(&e)),
    };
    match seqs_of(view.header()) {
        Ok((seq, last)) => Parsed::Batch(CheckedBatch {
            seq,
            last,
            view,
            len,
        }),
        Err(reason) => Parsed::Bad(reason),
    }
}

/// One batch checked in place by [`check_v2_batch_at`]: the checks of a [`CheckedBatch`],
/// without a handle on its bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckedHeader {
    /// The seq of its first record (`baseOffset`).
    pub(crate) seq: u64,
    /// The seq of its last record (`baseOffset + lastOffsetDelta`).
    pub(crate) last: u64,
    /// Its checked header.
    pub(crate) header: BatchHeader,
    /// The batch's total length.
    pub(crate) len: usize,
}

/// What [`check_v2_batch_at`] found.
pub(crate) enum Checked {
    /// The buffer ends inside the batch.
    Incomplete,
    /// A complete batch that is invalid.
    Bad(String),
    /// A complete, valid batch.
    Batch(CheckedHeader),
}

/// [`parse_v2_batch_at`] that takes no handle on `buf`, for a reader that reads the records
/// in place ([`BatchView::records_in`]): the same checks (length, magic, CRC, record count,
/// seqs, leader epoch), the same outcome.
pub(crate) fn check_v2_batch_at(buf: &[u8], at: usize) -> Checked {
    let rest = buf.get(at..).unwrap_or_default();
    let len = match framed_len(rest) {
        Ok(Some(len)) => len,
        Ok(None) => return Checked::Incomplete,
        Err(reason) => return Checked::Bad(reason),
    };
    let header = match BatchView::check_header(rest) {
        Ok(h) => h,
        Err(e) => return Checked::Bad(batch_reason(&e)),
    };
    match seqs_of(&header) {
        Ok((seq, last)) => Checked::Batch(CheckedHeader {
            seq,
            last,
            header,
            len,
        }),
        Err(reason) => Checked::Bad(reason),
    }
}

/// The length of the batch at the start of `rest` when `rest` holds all of it (`None`: it ends
/// inside the batch, or inside its length); `Err` with the reason when the length is below a
/// batch's least, or the magic byte is not 2 (damage even before the batch is complete).
fn framed_len(rest: &[u8]) -> Result<Option<usize>, String> {
    let Some(len) = batch_len(rest) else {
        return Ok(None);
    };
    if len < MIN_BATCH_LEN {
        return Err(format!(
            "batch length {len} is below the minimum {MIN_BATCH_LEN}"
        ));
    }
    if rest.len() < len {
        if let Some(&magic) = rest.get(16)
            && magic as i8 != batch::MAGIC
        {
            return Err(format!(
                "magic byte {magic} is not 2: not a v2 record batch"
            ));
        }
        return Ok(None);
    }
    Ok(Some(len))
}

/// The checks of a parsed header the CRC does not make, and the batch's first and last seq.
fn seqs_of(h: &BatchHeader) -> Result<(u64, u64), String> {
    if h.partition_leader_epoch < batch::NO_PARTITION_LEADER_EPOCH {
        // Outside the CRC (by Kafka's design): a value no leader writes is damage.
        return Err(format!(
            "partitionLeaderEpoch {} is below -1",
            h.partition_leader_epoch
        ));
    }
    if h.record_count < 1 || h.last_offset_delta != h.record_count - 1 {
        return Err(format!(
            "recordCount {} does not match lastOffsetDelta {}",
            h.record_count, h.last_offset_delta
        ));
    }
    let (Ok(seq), Ok(last)) = (u64::try_from(h.base_offset), u64::try_from(h.last_offset())) else {
        return Err(format!("base offset {} is negative", h.base_offset));
    };
    Ok((seq, last))
}

/// The reason text of a batch error.
pub(crate) fn batch_reason(e: &BatchError) -> String {
    match e {
        BatchError::BadCrc { stored, computed } => {
            format!("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")
        }
        other => other.to_string(),
    }
}

/// The first and last seq and the length of the batch at the start of `buf`, read from its
/// header alone (no CRC check) when it is complete and its fields are plausible; `None`
/// otherwise. A read steps over batches before the seq it wants with this; whatever it says is
/// checked again when the batch is decoded.
///
/// ```
/// use krabka_protocol::Message;
/// use krabka_storage::segment::{encode_batch_of_one, peek_batch};
///
/// let mut buf = Vec::new();
/// let len = encode_batch_of_one(5, &Message::new("v"), &mut buf)?;
/// assert_eq!(peek_batch(&buf), Some((5, 5, len)));
/// assert_eq!(peek_batch(&buf[..len - 1]), None);
/// # Ok::<(), krabka_storage::Error>(())
/// ```
#[inline]
pub fn peek_batch(buf: &[u8]) -> Option<(u64, u64, usize)> {
    // A fixed-size header: the fields below are read without a bounds check each (a read
    // stepping over the batches of an index interval calls this once per batch).
    let header: &[u8; BATCH_HEADER_LEN] = buf.get(..BATCH_HEADER_LEN)?.try_into().ok()?;
    let int = |at: usize| {
        i32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let len = batch::LOG_OVERHEAD + usize::try_from(int(8)).ok()?;
    if len < MIN_BATCH_LEN || len > buf.len() || header[16] != 2 {
        return None;
    }
    let (seq, last) = peek_batch_header(header)?;
    (last < i64::MAX as u64).then_some((seq, last, len))
}

/// The first and last seq a batch header (the first 61 bytes of `header`) gives, when its
/// record count and last offset delta agree; nothing else is checked.
#[inline]
pub(crate) fn peek_batch_header(header: &[u8]) -> Option<(u64, u64)> {
    // Fixed-size: each field is read without a bounds check of its own.
    let header: &[u8; BATCH_HEADER_LEN] = header.get(..BATCH_HEADER_LEN)?.try_into().ok()?;
    let int = |at: usize| {
        i32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let base = i64::from_be_bytes([
        header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7],
    ]);
    let (delta, count) = (int(23), int(57));
    if count < 1 || delta != count - 1 {
        return None;
    }
    let seq = u64::try_from(base).ok()?;
    Some((seq, seq.checked_add(u64::try_from(delta).ok()?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_chunk_reads_a_whole_batch_longer_than_the_chunk_but_not_past_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000001.log");
        let mut buf = Vec::new();
        encode_batch_of_one(1, &Message::new(vec![1u8; 500]), &mut buf).unwrap();
        let first = buf.len();
        encode_batch_of_one(2, &Message::new("b"), &mut buf).unwrap();
        std::fs::write(&path, &buf).unwrap();
        let file = File::open(&path).unwrap();
        let end = buf.len() as u64;
        // Longer batch than the chunk: exactly that batch.
        let c = read_chunk(&file, &path, 0, end, 32).unwrap();
        assert_eq!(c.len(), first);
        // A chunk is capped by `end`.
        let c = read_chunk(&file, &path, first as u64, end, 1 << 20).unwrap();
        assert_eq!(c.len(), buf.len() - first);
        // A batch running past `end` (torn) is not read past it.
        let c = read_chunk(&file, &path, 0, 100, 32).unwrap();
        assert_eq!(c.len(), 32);
        // Past the end of the file is an I/O error.
        assert!(matches!(
            read_chunk(&file, &path, 0, end + 10, 1 << 20),
            Err(Error::Io { .. })
        ));
    }

    #[test]
    fn peek_agrees_with_parse_on_valid_batches_and_declines_implausible_headers() {
        let mut buf = Vec::new();
        let msgs: Vec<Message> = (0..5).map(|i| Message::new(format!("v{i}"))).collect();
        encode_batch_from(10, &msgs, Compression::None, usize::MAX, &mut buf).unwrap();
        let bytes = Bytes::from(buf.clone());
        let Parsed::Batch(f) = parse_v2_batch(&bytes) else {
            panic!("not a batch")
        };
        assert_eq!(peek_batch(&buf), Some((f.seq, f.last, f.len)));
        assert_eq!((f.seq, f.last), (10, 14));
        // A record count that disagrees with the last offset delta.
        let mut lie = buf.clone();
        lie[60] ^= 1;
        assert_eq!(peek_batch(&lie), None);
        // Torn.
        assert_eq!(peek_batch(&buf[..buf.len() - 1]), None);
        assert!(matches!(
            parse_v2_batch(&bytes.slice(..bytes.len() - 1)),
            Parsed::Incomplete
        ));
    }

    #[test]
    fn seqs_past_i64_max_are_refused() {
        let mut buf = Vec::new();
        assert!(matches!(
            encode_batch_of_one(u64::MAX, &Message::new("x"), &mut buf),
            Err(Error::SeqOutOfRange { seq: u64::MAX })
        ));
        assert!(buf.is_empty());
    }
}
