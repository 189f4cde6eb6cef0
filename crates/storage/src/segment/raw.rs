//! Raw record batches: checking a batch a producer sent before it is stored as it came, and
//! the batches a raw read returns as file bytes.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use krabka_protocol::batch::{BatchError, BatchView, RecordIter, RecordRef};

use super::batch::{MAX_UNCOMPRESSED_BATCH, peek_batch};
use crate::Error;

/// What [`check_raw_batch`] learnt of a valid batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawBatchInfo {
    /// Its records.
    pub(crate) count: u64,
    /// Its largest record timestamp (`maxTimestamp`).
    pub(crate) max_timestamp: i64,
}

/// The header or record field a batch error is about, and its byte.
fn field_of(e: &BatchError) -> (&'static str, usize) {
    match e {
        BatchError::Truncated { at, .. } => ("batchLength", *at),
        BatchError::BadMagic { .. } => ("magic", 16),
        BatchError::BadCrc { .. } => ("crc", 17),
        BatchError::Length { field, at, .. } => (field, *at),
        BatchError::RecordCount { .. } => ("recordCount", 57),
        BatchError::OffsetDelta { at, .. } => ("offsetDelta", *at),
        BatchError::LastOffsetDelta { .. } => ("lastOffsetDelta", 23),
        BatchError::Timestamp { .. } => ("maxTimestamp", 35),
        BatchError::UnsupportedCompression { .. } | BatchError::CodecDisabled { .. } => {
            ("attributes", 21)
        }
        BatchError::Decompress { .. } | BatchError::TooLarge { .. } => ("records", 61),
        BatchError::Varint { at } => ("varint", *at),
        BatchError::Utf8 { at } => ("headerKey", *at),
        _ => ("batch", 0),
    }
}

fn invalid(e: &BatchError) -> Error {
    let (field, at) = field_of(e);
    Error::InvalidBatch {
        field,
        at,
        reason: e.to_string(),
    }
}

/// Checks that `bytes` are exactly one valid v2 record batch a log can store: the length,
/// magic and CRC-32C; at least one record; every record read (decompressed within
/// [`MAX_UNCOMPRESSED_BATCH`]) with its varint lengths inside the batch, offset deltas
/// `0..n-1`, and `recordCount`, `lastOffsetDelta` and (create time) `maxTimestamp` agreeing
/// with the records; a `partitionLeaderEpoch` of -1 or more. The base offset is not checked:
/// the log writes its own.
pub(crate) fn check_raw_batch(bytes: &[u8]) -> Result<RawBatchInfo, Error> {
    let h = BatchView::check_header(bytes).map_err(|e| invalid(&e))?;
    if h.size() != bytes.len() {
        return Err(Error::InvalidBatch {
            field: "batchLength",
            at: 8,
            reason: format!(
                "the batch is {} bytes but {} were given: append one batch at a time",
                h.size(),
                bytes.len()
            ),
        });
    }
    if h.record_count < 1 {
        return Err(Error::InvalidBatch {
            field: "recordCount",
            at: 57,
            reason: format!(
                "recordCount {}: a batch to append holds records",
                h.record_count
            ),
        });
    }
    if h.partition_leader_epoch < krabka_protocol::batch::NO_PARTITION_LEADER_EPOCH {
        return Err(Error::InvalidBatch {
            field: "partitionLeaderEpoch",
            at: 12,
            reason: format!("{} is below -1", h.partition_leader_epoch),
        });
    }
    // Read in place: no copy of the caller's bytes.
    let count =
        BatchView::check_records(&h, bytes, MAX_UNCOMPRESSED_BATCH).map_err(|e| invalid(&e))?;
    Ok(RawBatchInfo {
        count: count as u64,
        max_timestamp: h.max_timestamp,
    })
}

/// Whole record batches of one segment file as a raw read returns them
/// ([`Log::read_batches`](crate::Log::read_batches)): their bytes exactly as stored, in one
/// buffer, each batch's length, magic and CRC-32C checked. Write [`bytes`](Self::bytes) to a
/// socket as they are (a Kafka fetch response's records), or read the records with
/// [`records`](Self::records).
#[derive(Clone, Debug, Default)]
pub struct Batches {
    bytes: Bytes,
    first_seq: u64,
    last_seq: u64,
    count: usize,
    path: PathBuf,
    position: u64,
}

impl Batches {
    /// Batches `bytes` read at byte `position` of `path`, from seq `first_seq` to `last_seq`.
    pub(crate) fn new(
        bytes: Bytes,
        first_seq: u64,
        last_seq: u64,
        count: usize,
        path: &Path,
        position: u64,
    ) -> Batches {
        Batches {
            bytes,
            first_seq,
            last_seq,
            count,
            path: path.to_path_buf(),
            position,
        }
    }

    /// The batches' bytes, back to back, exactly as in the segment file.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The batches' bytes, taken.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// How many batches there are.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there is none (the read was at the end of the log).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The first seq of the first batch: at or below the seq the read asked for (a batch is
    /// returned whole, so a read from a seq inside a batch starts at its first record).
    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// The last seq of the last batch.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The seq after the last batch: where the next raw read continues.
    pub fn next_seq(&self) -> u64 {
        if self.count == 0 {
            self.first_seq
        } else {
            self.last_seq.saturating_add(1)
        }
    }

    /// The segment file the batches were read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The byte of that file where the first batch starts.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Each batch's bytes (a slice of [`bytes`](Self::bytes), no copy).
    pub fn iter(&self) -> impl Iterator<Item = Bytes> + '_ {
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            let (_, _, len) = self.bytes.get(pos..).and_then(peek_batch)?;
            let batch = self.bytes.slice(pos..pos + len);
            pos += len;
            Some(batch)
        })
    }

    /// Each batch's byte position in the segment file and its bytes.
    pub fn positions(&self) -> impl Iterator<Item = (u64, Bytes)> + '_ {
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            let (_, _, len) = self.bytes.get(pos..).and_then(peek_batch)?;
            let at = self.position + pos as u64;
            let batch = self.bytes.slice(pos..pos + len);
            pos += len;
            Some((at, batch))
        })
    }

    /// The records of every batch, in order, read lazily (one batch decompressed at a time,
    /// within [`MAX_UNCOMPRESSED_BATCH`]); each record exactly as stored (null keys and
    /// values, header values included). A record that does not read ends the iteration with
    /// [`Error::Corrupt`] naming the file and the batch's byte.
    ///
    /// ```
    /// use krabka_protocol::Message;
    /// use krabka_storage::{Log, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options::default())?;
    /// log.append_batch(&[Message::new("a"), Message::new("b"), Message::new("c")])?;
    /// let batches = log.read_batches(2, 1 << 20)?;
    /// assert_eq!((batches.len(), batches.first_seq(), batches.next_seq()), (1, 1, 4));
    /// let values: Vec<_> = batches
    ///     .records()
    ///     .map(|r| r.map(|r| r.value.unwrap_or_default()))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(values, ["a", "b", "c"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn records(&self) -> BatchRecords<'_> {
        BatchRecords {
            batches: self,
            pos: 0,
            current: None,
            done: false,
        }
    }
}

/// The records of [`Batches`], read lazily; see [`Batches::records`].
pub struct BatchRecords<'a> {
    batches: &'a Batches,
    pos: usize,
    current: Option<(usize, RecordIter)>,
    done: bool,
}

impl std::fmt::Debug for BatchRecords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchRecords")
            .field("path", &self.batches.path)
            .field("pos", &self.pos)
            .field("done", &self.done)
            .finish()
    }
}

impl BatchRecords<'_> {
    fn fail(&mut self, at: usize, e: &BatchError) -> Option<Result<RecordRef, Error>> {
        self.done = true;
        Some(Err(Error::Corrupt {
            path: self.batches.path.clone(),
            position: self.batches.position + at as u64,
            reason: e.to_string(),
        }))
    }
}

impl Iterator for BatchRecords<'_> {
    type Item = Result<RecordRef, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            if let Some((at, records)) = &mut self.current {
                let at = *at;
                match records.next() {
                    Some(Ok(r)) => return Some(Ok(r)),
                    Some(Err(e)) => return self.fail(at, &e),
                    None => self.current = None,
                }
            }
            let bytes = &self.batches.bytes;
            let Some((_, _, len)) = bytes.get(self.pos..).and_then(peek_batch) else {
                self.done = true;
                return None;
            };
            let at = self.pos;
            self.pos += len;
            let view = match BatchView::parse(&bytes.slice(at..at + len)) {
                Ok(v) => v,
                Err(e) => return self.fail(at, &e),
            };
            match view.records(MAX_UNCOMPRESSED_BATCH) {
                Ok(records) => self.current = Some((at, records)),
                Err(e) => return self.fail(at, &e),
            }
        }
    }
}
