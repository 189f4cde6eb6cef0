//! The encoding of one tail object ([`TailObject`]): a checksummed header listing one entry per
//! partition, then the entries' data, each with its own checksum.

use std::collections::HashSet;

use bytes::Bytes;
use uuid::Uuid;

use crate::error::RemoteStorageError;
use crate::layout;
use crate::ownership::framing::{Corrupt, Reader, corrupt_at, len_u32};

/// The first four bytes of every tail object.
pub const TAIL_MAGIC: &[u8; 4] = b"KTAL";
/// The tail object format version written and read.
pub const TAIL_VERSION: u8 = 1;
/// The largest tail object written or read (reads are bounded by it): 64 MiB.
pub const MAX_TAIL_OBJECT_LEN: usize = 64 << 20;
/// Kind byte of a data object.
const KIND_DATA: u8 = 1;
/// Kind byte of a fence.
const KIND_FENCE: u8 = 2;
/// Magic, version, kind, reserved, chain id, number, incarnation, written ms, entry count.
const FIXED_LEN: usize = 4 + 1 + 1 + 2 + 16 + 8 + 16 + 8 + 4;
/// Bytes of one entry: topic id, partition, writer epoch, first seq, last seq, max
/// timestamp, data offset, data length, data crc.
const ENTRY_LEN: usize = 16 + 4 + 8 + 8 + 8 + 8 + 8 + 4 + 4;
/// The header checksum.
const CRC_LEN: usize = 4;

/// What a tail object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TailKind {
    /// Records of one or more partitions.
    Data,
    /// The end of its chain: written by a writer that did not create the chain, so that the
    /// chain's writer can create nothing above it. No entries, no data.
    Fence,
}

/// What one entry of a data object holds, before its place in the data is known: the input of
/// [`TailObject::data_object`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailEntryHeader {
    /// The partition's topic id.
    pub topic_id: Uuid,
    /// The partition number (0 or more).
    pub partition: i32,
    /// The writer epoch of the partition's writer ([`crate::ownership`]).
    pub writer_epoch: u64,
    /// The first seq of the entry's batches.
    pub first_seq: u64,
    /// The last seq of the entry's batches (at or above `first_seq`).
    pub last_seq: u64,
    /// The largest record timestamp in the batches (ms since the Unix epoch).
    pub max_timestamp: i64,
}

/// One entry of a data object: one partition's whole Kafka v2 record batches, seqs
/// `first_seq..=last_seq` contiguous, at `data_offset` in the object's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailEntry {
    /// The partition's topic id.
    pub topic_id: Uuid,
    /// The partition number.
    pub partition: i32,
    /// The writer epoch of the partition's writer.
    pub writer_epoch: u64,
    /// The first seq of the entry's batches.
    pub first_seq: u64,
    /// The last seq of the entry's batches.
    pub last_seq: u64,
    /// The largest record timestamp in the batches.
    pub max_timestamp: i64,
    /// Where the entry's bytes start, relative to the first data byte.
    pub data_offset: u64,
    /// How many bytes the entry holds (at least 1).
    pub data_len: u32,
    /// CRC-32 (IEEE, `crc32fast`) of the entry's bytes: checked by
    /// [`TailObject::entry_data`].
    pub data_crc: u32,
}

impl TailEntry {
    /// The entry's [`TailEntryHeader`] (what it says, without where its bytes are).
    pub fn header(&self) -> TailEntryHeader {
        TailEntryHeader {
            topic_id: self.topic_id,
            partition: self.partition,
            writer_epoch: self.writer_epoch,
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            max_timestamp: self.max_timestamp,
        }
    }
}

/// One immutable object of a tail chain (`_tail-<chain>/<number>`, see [`crate::tail`]): a
/// data object holding whole record batches of one or more partitions, or a fence closing the
/// chain. Built only by [`data_object`](Self::data_object), [`fence`](Self::fence) and
/// [`decode`](Self::decode), so its entries always tile its data exactly.
///
/// ```
/// use krabka_remote_storage::tail::{TailEntryHeader, TailKind, TailObject};
/// use krabka_remote_storage::Uuid;
///
/// let (chain, writer, topic) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
/// let batches = b"one partition's whole record batches";
/// let header = TailEntryHeader {
///     topic_id: topic,
///     partition: 0,
///     writer_epoch: 3,
///     first_seq: 100,
///     last_seq: 104,
///     max_timestamp: 1_700_000_000_000,
/// };
/// let object = TailObject::data_object(chain, 1, writer, 1_700_000_000_000, &[(header, &batches[..])])?;
/// let key = object.key();
/// let decoded = TailObject::decode(&object.encode(), &key)?;
/// assert_eq!(decoded, object);
/// let i = decoded.entry_for(topic, 0).expect("the partition's entry");
/// assert_eq!(decoded.entry_data(i)?, &batches[..]);
///
/// let fence = TailObject::fence(chain, 2, Uuid::new_v4(), 1_700_000_000_100);
/// assert_eq!(TailObject::decode(&fence.encode(), "k")?.kind(), TailKind::Fence);
/// # Ok::<(), krabka_remote_storage::RemoteStorageError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailObject {
    kind: TailKind,
    chain: Uuid,
    number: u64,
    incarnation: Uuid,
    written_ms: i64,
    entries: Vec<TailEntry>,
    data: Bytes,
}

impl TailObject {
    /// A data object of chain `chain`, number `number` (1 or more), written by writer
    /// incarnation `incarnation` at `written_ms`, holding `parts` in order: each partition's
    /// entry header and its bytes (whole record batches). Computes each entry's offset, length
    /// and CRC.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] for number 0, no parts, two parts of one
    /// partition, a negative partition, a part whose first seq is above its last, an empty
    /// part or one over 4 GiB, or an object over [`MAX_TAIL_OBJECT_LEN`] bytes.
    pub fn data_object(
        chain: Uuid,
        number: u64,
        incarnation: Uuid,
        written_ms: i64,
        parts: &[(TailEntryHeader, &[u8])],
    ) -> Result<Self, RemoteStorageError> {
        let key = layout::tail_object_key(chain, number);
        let invalid =
            |why: String| RemoteStorageError::invalid_argument(format!("tail object {key}: {why}"));
        if number == 0 {
            return Err(invalid("numbers start at 1".to_owned()));
        }
        if parts.is_empty() {
            return Err(invalid("a data object holds at least one entry".to_owned()));
        }
        let data_len: usize = parts.iter().map(|(_, b)| b.len()).sum();
        let total = FIXED_LEN + parts.len().saturating_mul(ENTRY_LEN) + CRC_LEN + data_len;
        if total > MAX_TAIL_OBJECT_LEN {
            return Err(invalid(format!(
                "{total} bytes, over the {MAX_TAIL_OBJECT_LEN}-byte limit"
            )));
        }
        let mut seen = HashSet::with_capacity(parts.len());
        let mut entries = Vec::with_capacity(parts.len());
        let mut data = Vec::with_capacity(data_len);
        for (i, (h, bytes)) in parts.iter().enumerate() {
            let at = format!("entry {i} ({}-{})", h.topic_id, h.partition);
            if h.partition < 0 {
                return Err(invalid(format!("{at}: a negative partition")));
            }
            if h.first_seq > h.last_seq {
                return Err(invalid(format!(
                    "{at}: first seq {} above last seq {}",
                    h.first_seq, h.last_seq
                )));
            }
            if bytes.is_empty() {
                return Err(invalid(format!("{at}: no data bytes")));
            }
            if !seen.insert((h.topic_id, h.partition)) {
                return Err(invalid(format!("{at}: a second entry of that partition")));
            }
            let len = u32::try_from(bytes.len())
                .map_err(|_| invalid(format!("{at}: {} bytes, over 4 GiB", bytes.len())))?;
            entries.push(TailEntry {
                topic_id: h.topic_id,
                partition: h.partition,
                writer_epoch: h.writer_epoch,
                first_seq: h.first_seq,
                last_seq: h.last_seq,
                max_timestamp: h.max_timestamp,
                data_offset: data.len() as u64,
                data_len: len,
                data_crc: crc32fast::hash(bytes),
            });
            data.extend_from_slice(bytes);
        }
        Ok(Self {
            kind: TailKind::Data,
            chain,
            number,
            incarnation,
            written_ms,
            entries,
            data: Bytes::from(data),
        })
    }

    /// The fence closing chain `chain` at number `number`, written by writer incarnation
    /// `fencer` at `written_ms`.
    pub fn fence(chain: Uuid, number: u64, fencer: Uuid, written_ms: i64) -> Self {
        Self {
            kind: TailKind::Fence,
            chain,
            number,
            incarnation: fencer,
            written_ms,
            entries: Vec::new(),
            data: Bytes::new(),
        }
    }

    /// Data object or fence.
    pub fn kind(&self) -> TailKind {
        self.kind
    }

    /// The chain it belongs to.
    pub fn chain(&self) -> Uuid {
        self.chain
    }

    /// Its number in the chain (1, 2, ...).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The incarnation of the writer that wrote it (a fence: the fencer's).
    pub fn incarnation(&self) -> Uuid {
        self.incarnation
    }

    /// When it was written (ms since the Unix epoch, its writer's clock).
    pub fn written_ms(&self) -> i64 {
        self.written_ms
    }

    /// Its entries, in data order (none for a fence).
    pub fn entries(&self) -> &[TailEntry] {
        &self.entries
    }

    /// Its data: every entry's bytes, in order, without gaps.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// Its key: [`layout::tail_object_key`].
    pub fn key(&self) -> String {
        layout::tail_object_key(self.chain, self.number)
    }

    /// The index of the entry of partition `partition` of topic `topic_id` (an object holds
    /// at most one per partition).
    pub fn entry_for(&self, topic_id: Uuid, partition: i32) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.topic_id == topic_id && e.partition == partition)
    }

    /// The bytes of entry `index`, after checking their CRC: a damaged entry costs only its
    /// own seqs.
    ///
    /// # Errors
    /// [`RemoteStorageError::Corrupt`] naming the object's key, the entry, its partition and
    /// seqs when the CRC does not match; [`RemoteStorageError::InvalidArgument`] for an index
    /// past the last entry.
    pub fn entry_data(&self, index: usize) -> Result<&[u8], RemoteStorageError> {
        let entry = self.entries.get(index).ok_or_else(|| {
            RemoteStorageError::invalid_argument(format!(
                "tail object {} has {} entries, no entry {index}",
                self.key(),
                self.entries.len()
            ))
        })?;
        let start = usize::try_from(entry.data_offset).unwrap_or(usize::MAX);
        let bytes = start
            .checked_add(entry.data_len as usize)
            .and_then(|end| self.data.get(start..end))
            .unwrap_or_default();
        let computed = crc32fast::hash(bytes);
        if bytes.len() != entry.data_len as usize || computed != entry.data_crc {
            return Err(RemoteStorageError::Corrupt {
                location: self.key(),
                reason: format!(
                    "tail object: entry {index} (partition {}-{}, seqs {}..={}, data bytes \
                     {}..{}): data checksum mismatch, stored {:#010x}, computed {computed:#010x}",
                    entry.topic_id,
                    entry.partition,
                    entry.first_seq,
                    entry.last_seq,
                    entry.data_offset,
                    entry.data_offset.saturating_add(u64::from(entry.data_len)),
                    entry.data_crc
                ),
            });
        }
        Ok(bytes)
    }

    /// How many bytes [`encode`](Self::encode) gives.
    pub fn encoded_len(&self) -> usize {
        FIXED_LEN + self.entries.len() * ENTRY_LEN + CRC_LEN + self.data.len()
    }

    /// Encodes the object (see the [module docs](crate::tail) for the layout).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(TAIL_MAGIC);
        out.push(TAIL_VERSION);
        out.push(match self.kind {
            TailKind::Data => KIND_DATA,
            TailKind::Fence => KIND_FENCE,
        });
        out.extend_from_slice(&[0; 2]);
        out.extend_from_slice(self.chain.as_bytes());
        out.extend_from_slice(&self.number.to_le_bytes());
        out.extend_from_slice(self.incarnation.as_bytes());
        out.extend_from_slice(&self.written_ms.to_le_bytes());
        out.extend_from_slice(&len_u32(self.entries.len()).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(e.topic_id.as_bytes());
            out.extend_from_slice(&e.partition.to_le_bytes());
            out.extend_from_slice(&e.writer_epoch.to_le_bytes());
            out.extend_from_slice(&e.first_seq.to_le_bytes());
            out.extend_from_slice(&e.last_seq.to_le_bytes());
            out.extend_from_slice(&e.max_timestamp.to_le_bytes());
            out.extend_from_slice(&e.data_offset.to_le_bytes());
            out.extend_from_slice(&e.data_len.to_le_bytes());
            out.extend_from_slice(&e.data_crc.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&self.data);
        out
    }

    /// Decodes and checks an object read from `key` (named in every error). Never allocates
    /// more than `bytes` holds. The entries' data CRCs are checked later, by
    /// [`entry_data`](Self::entry_data).
    ///
    /// # Errors
    /// [`RemoteStorageError::Corrupt`] naming `key` and the field or byte that is wrong: over
    /// [`MAX_TAIL_OBJECT_LEN`], bad magic, version, kind or reserved bytes, an entry count the
    /// bytes cannot hold, a header CRC mismatch, number 0, a fence with entries or data, a data
    /// object without entries, a negative partition, two entries of one partition, an entry
    /// whose first seq is above its last, an empty entry, entries that do not tile the data
    /// exactly (a gap, an overlap, data missing or trailing bytes).
    pub fn decode(bytes: &[u8], key: &str) -> Result<Self, RemoteStorageError> {
        let corrupt = corrupt_at(key, "tail object");
        let header_len = check_header(bytes, &corrupt)?;
        let data = bytes.get(header_len..).unwrap_or_default();
        Self::decode_parts(bytes, header_len, Bytes::copy_from_slice(data), &corrupt)
    }

    /// [`decode`](Self::decode) of a whole object read into `bytes`, keeping its data without
    /// copying it.
    pub(crate) fn decode_owned(bytes: Vec<u8>, key: &str) -> Result<Self, RemoteStorageError> {
        let corrupt = corrupt_at(key, "tail object");
        let header_len = check_header(&bytes, &corrupt)?;
        let all = Bytes::from(bytes);
        let data = all.slice(header_len.min(all.len())..);
        Self::decode_parts(&all, header_len, data, &corrupt)
    }

    /// Decodes the fields of a header [`check_header`] passed; `data` is what follows it.
    fn decode_parts(
        bytes: &[u8],
        header_len: usize,
        data: Bytes,
        corrupt: &Corrupt<'_>,
    ) -> Result<Self, RemoteStorageError> {
        let header = bytes.get(..header_len - CRC_LEN).unwrap_or_default();
        let mut r = Reader::at(header.get(5..).unwrap_or_default(), 5);
        let kind = match r.array::<1>("kind", corrupt)? {
            [KIND_DATA] => TailKind::Data,
            [KIND_FENCE] => TailKind::Fence,
            [k] => return Err(corrupt(format!("unknown kind {k} (byte 5)"))),
        };
        r.array::<2>("reserved bytes", corrupt)?;
        let chain = Uuid::from_bytes(r.array::<16>("chain id", corrupt)?);
        let number = u64::from_le_bytes(r.array("number", corrupt)?);
        let incarnation = Uuid::from_bytes(r.array::<16>("incarnation", corrupt)?);
        let written_ms = i64::from_le_bytes(r.array("written time", corrupt)?);
        let count = u32::from_le_bytes(r.array("entry count", corrupt)?) as usize;
        if number == 0 {
            return Err(corrupt(
                "number 0 (bytes 24..32); numbers start at 1".to_owned(),
            ));
        }
        match kind {
            TailKind::Fence if count != 0 || !data.is_empty() => {
                return Err(corrupt(format!(
                    "a fence with {count} entries and {} data bytes",
                    data.len()
                )));
            }
            TailKind::Data if count == 0 => {
                return Err(corrupt("a data object without entries".to_owned()));
            }
            _ => {}
        }
        // `check_header` proved the count fits in the bytes: this allocation is bounded.
        let mut entries: Vec<TailEntry> = Vec::with_capacity(count);
        let mut seen = HashSet::with_capacity(count);
        let mut next_offset = 0u64;
        for i in 0..count {
            let at = r.offset();
            let entry = TailEntry {
                topic_id: Uuid::from_bytes(r.array::<16>("entry topic id", corrupt)?),
                partition: i32::from_le_bytes(r.array("entry partition", corrupt)?),
                writer_epoch: u64::from_le_bytes(r.array("entry writer epoch", corrupt)?),
                first_seq: u64::from_le_bytes(r.array("entry first seq", corrupt)?),
                last_seq: u64::from_le_bytes(r.array("entry last seq", corrupt)?),
                max_timestamp: i64::from_le_bytes(r.array("entry max timestamp", corrupt)?),
                data_offset: u64::from_le_bytes(r.array("entry data offset", corrupt)?),
                data_len: u32::from_le_bytes(r.array("entry data length", corrupt)?),
                data_crc: u32::from_le_bytes(r.array("entry data crc", corrupt)?),
            };
            let bad = |why: String| {
                corrupt(format!(
                    "entry {i} (byte {at}, partition {}-{}): {why}",
                    entry.topic_id, entry.partition
                ))
            };
            if entry.partition < 0 {
                return Err(bad("a negative partition".to_owned()));
            }
            if !seen.insert((entry.topic_id, entry.partition)) {
                return Err(bad("a second entry of that partition".to_owned()));
            }
            if entry.first_seq > entry.last_seq {
                return Err(bad(format!(
                    "first seq {} above last seq {}",
                    entry.first_seq, entry.last_seq
                )));
            }
            if entry.data_len == 0 {
                return Err(bad("no data bytes".to_owned()));
            }
            if entry.data_offset != next_offset {
                return Err(bad(format!(
                    "data at offset {} where the entries before end at {next_offset}",
                    entry.data_offset
                )));
            }
            next_offset += u64::from(entry.data_len);
            entries.push(entry);
        }
        r.end(corrupt)?;
        if next_offset != data.len() as u64 {
            return Err(corrupt(format!(
                "the entries hold {next_offset} data bytes but {} follow the header (byte {header_len})",
                data.len()
            )));
        }
        Ok(Self {
            kind,
            chain,
            number,
            incarnation,
            written_ms,
            entries,
            data,
        })
    }
}

/// Checks the size, magic, version, reserved bytes, that the entry count fits and the header
/// CRC; returns the header's length (CRC included), where the data starts.
fn check_header(bytes: &[u8], corrupt: &Corrupt<'_>) -> Result<usize, RemoteStorageError> {
    if bytes.len() > MAX_TAIL_OBJECT_LEN {
        return Err(corrupt(format!(
            "{} bytes, over the {MAX_TAIL_OBJECT_LEN}-byte limit",
            bytes.len()
        )));
    }
    let mut r = Reader::new(bytes);
    if &r.array::<4>("magic", corrupt)? != TAIL_MAGIC {
        return Err(corrupt("bad magic (bytes 0..4)".to_owned()));
    }
    match r.array::<1>("version", corrupt)? {
        [TAIL_VERSION] => {}
        [v] => return Err(corrupt(format!("unsupported version {v} (byte 4)"))),
    }
    r.array::<1>("kind", corrupt)?;
    if r.array::<2>("reserved bytes", corrupt)? != [0; 2] {
        return Err(corrupt("reserved bytes 6..8 are not zero".to_owned()));
    }
    r.take(FIXED_LEN - 4 - 8, "fixed header fields", corrupt)?;
    let count = u32::from_le_bytes(r.array("entry count", corrupt)?) as usize;
    // Before anything is allocated: the count must fit in what is there, whatever it claims.
    let needed = count
        .checked_mul(ENTRY_LEN)
        .and_then(|n| n.checked_add(CRC_LEN));
    if needed.is_none_or(|n| n > r.remaining()) {
        return Err(corrupt(format!(
            "entry count {count} needs {} bytes at byte {}, {} left",
            count.saturating_mul(ENTRY_LEN).saturating_add(CRC_LEN),
            r.offset(),
            r.remaining()
        )));
    }
    let header_len = FIXED_LEN + count * ENTRY_LEN + CRC_LEN;
    let (content, rest) = bytes
        .split_at_checked(header_len - CRC_LEN)
        .ok_or_else(|| {
            corrupt(format!(
                "truncated before its header checksum ({header_len} bytes)"
            ))
        })?;
    let stored = rest
        .first_chunk::<CRC_LEN>()
        .map(|b| u32::from_le_bytes(*b))
        .ok_or_else(|| {
            corrupt(format!(
                "truncated at its header checksum (byte {})",
                content.len()
            ))
        })?;
    let computed = crc32fast::hash(content);
    if stored != computed {
        return Err(corrupt(format!(
            "header checksum mismatch (byte {}): stored {stored:#010x}, computed {computed:#010x}",
            header_len - CRC_LEN
        )));
    }
    Ok(header_len)
}
