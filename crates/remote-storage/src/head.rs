//! The **partition head**: one small object per partition, `<partition dir>/_head`
//! ([`layout::head_key`]), that says which finished segments a reader may use, so a read
//! replica serving the partition from the bucket alone refreshes with one conditional read
//! instead of a listing.
//!
//! The writer holding the partition's epoch ([`crate::ownership`]) rewrites it whole
//! ([`OwnershipStore::put_object`]) whenever its set of finished remote segments changes;
//! nobody else writes it. A reader remembers the version of the head it last read and asks
//! for it again only if it changed ([`OwnershipStore::read_if_changed`]: S3's
//! `If-None-Match: <etag>`, answered 304 when unchanged; a filesystem's `fstat`). The head is
//! a hint for readers, never the truth recovery rests on: a head that is missing or damaged
//! ([`HeadRead::Damaged`]) sends the reader back to a full listing ([`crate::recovery`]),
//! and every listing leaves it alone ([`layout::is_ownership_name`]).
//!
//! ```text
//! head: magic "KHED" | version u8 (1, or 2 with a tail) | 3 zero bytes | body length u32
//!       | body | crc32 u32 (of every byte before it)
//! body: topic id [16] | partition i32 | name length u32 | name (UTF-8) | writer epoch u64
//!       | incarnation [16] | serial u64 | written ms i64 | writer last seq u64
//!       | retention point u64 | segment count u32
//!       | count × (segment id [16] | start seq u64 | end seq u64 | writer epoch u64)
//!       | version 2 only: tail count u32 | count × (chain id [16] | from u64)
//! ```
//! All integers little-endian; specified in `docs/format.md` ("Partition head"). Version 1 is
//! written whenever the head lists no tail chain ([`PartitionHead::tail`]), so readers that
//! know only version 1 keep reading those heads; both versions decode.
//!
//! ```
//! use krabka_remote_storage::*;
//! use krabka_remote_storage::head::{HeadSegment, PartitionHead, TailRef};
//!
//! let head = PartitionHead {
//!     partition: TopicIdPartition::new(Uuid::new_v4(), "orders", 0),
//!     writer_epoch: 2,
//!     incarnation: Uuid::new_v4(),
//!     serial: 1,
//!     written_ms: 1_700_000_000_000,
//!     writer_last_seq: 250,
//!     retention_point: 0,
//!     segments: vec![
//!         HeadSegment { id: Uuid::new_v4(), start_seq: 0, end_seq: 99, writer_epoch: 1 },
//!         HeadSegment { id: Uuid::new_v4(), start_seq: 100, end_seq: 199, writer_epoch: 2 },
//!     ],
//!     tail: vec![TailRef { chain: Uuid::new_v4(), from: 1 }],
//! };
//! assert_eq!(PartitionHead::decode(&head.encode(), "k")?, head);
//! assert_eq!(head.end_seq(), Some(199));
//! # Ok::<(), RemoteStorageError>(())
//! ```

use uuid::Uuid;

use crate::error::RemoteStorageError;
use crate::layout;
use crate::model::TopicIdPartition;
pub use crate::ownership::ConditionalRead;
use crate::ownership::OwnershipStore;
use crate::ownership::framing::{Corrupt, Reader, corrupt_at, len_u32};

/// The first four bytes of every partition head.
pub const HEAD_MAGIC: &[u8; 4] = b"KHED";
/// The head format version written when the head lists no tail chain.
pub const HEAD_VERSION: u8 = 1;
/// The head format version written when the head lists tail chains ([`PartitionHead::tail`]).
pub const HEAD_VERSION_TAIL: u8 = 2;
/// Largest head accepted (read bounded): 64 MiB.
pub const MAX_HEAD_LEN: usize = 64 << 20;
/// Magic, version, reserved bytes and body length.
const HEADER_LEN: usize = 4 + 1 + 3 + 4;
/// Bytes of one segment entry: id, start seq, end seq, writer epoch.
const SEGMENT_LEN: usize = 16 + 8 + 8 + 8;
/// Bytes of the body's fixed fields around the topic name.
const FIXED_BODY_LEN: usize = 16 + 4 + 4 + 8 + 16 + 8 + 8 + 8 + 8 + 4;
/// Bytes of one tail chain reference: chain id, first object number.
const TAIL_REF_LEN: usize = 16 + 8;

/// One finished remote segment a head lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadSegment {
    /// The segment's id (its copy attempt's uuid, as in its object names).
    pub id: Uuid,
    /// Its first seq.
    pub start_seq: u64,
    /// Its last seq (at or above `start_seq`).
    pub end_seq: u64,
    /// The writer epoch that copied it (0: unknown, see
    /// [`superseding_epoch`](crate::ownership::superseding_epoch)).
    pub writer_epoch: u64,
}

/// One tail chain a head lists: a chain ([`crate::tail`]) holding records of the partition not
/// yet in a finished segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailRef {
    /// The chain's id.
    pub chain: Uuid,
    /// The first object number of the chain still needed (1 or more).
    pub from: u64,
}

/// A partition's head: its finished remote segments as its writer last wrote them, and the
/// tail chains holding its records above them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionHead {
    /// The partition (topic id, partition number, topic name).
    pub partition: TopicIdPartition,
    /// The epoch of the writer that wrote it (0 = none).
    pub writer_epoch: u64,
    /// That writer's incarnation (nil = none).
    pub incarnation: Uuid,
    /// Grows with every write by one incarnation: readers order one writer's heads by it (the
    /// writer writes `max(previous + 1, written ms)`, going on after its own head's serial
    /// when it restarts).
    pub serial: u64,
    /// When it was written (ms since the Unix epoch, the writer's clock).
    pub written_ms: i64,
    /// The writer's last appended seq when it wrote this (0: none).
    pub writer_last_seq: u64,
    /// The whole-log retention point: seqs below it are gone.
    pub retention_point: u64,
    /// The finished remote segments readers may use, by start seq, none overlapping.
    pub segments: Vec<HeadSegment>,
    /// The tail chains holding the partition's records not yet in a finished segment, oldest
    /// first, each with the first object number still needed; no chain twice. Empty: the head
    /// is written in version 1.
    pub tail: Vec<TailRef>,
}

impl PartitionHead {
    /// Encodes the head.
    pub fn encode(&self) -> Vec<u8> {
        let tp = &self.partition;
        let mut body = Vec::with_capacity(
            FIXED_BODY_LEN
                + tp.topic().len()
                + SEGMENT_LEN * self.segments.len()
                + 4
                + TAIL_REF_LEN * self.tail.len(),
        );
        body.extend_from_slice(tp.topic_id().as_bytes());
        body.extend_from_slice(&tp.partition().to_le_bytes());
        body.extend_from_slice(&len_u32(tp.topic().len()).to_le_bytes());
        body.extend_from_slice(tp.topic().as_bytes());
        body.extend_from_slice(&self.writer_epoch.to_le_bytes());
        body.extend_from_slice(self.incarnation.as_bytes());
        body.extend_from_slice(&self.serial.to_le_bytes());
        body.extend_from_slice(&self.written_ms.to_le_bytes());
        body.extend_from_slice(&self.writer_last_seq.to_le_bytes());
        body.extend_from_slice(&self.retention_point.to_le_bytes());
        body.extend_from_slice(&len_u32(self.segments.len()).to_le_bytes());
        for s in &self.segments {
            body.extend_from_slice(s.id.as_bytes());
            body.extend_from_slice(&s.start_seq.to_le_bytes());
            body.extend_from_slice(&s.end_seq.to_le_bytes());
            body.extend_from_slice(&s.writer_epoch.to_le_bytes());
        }
        let version = if self.tail.is_empty() {
            HEAD_VERSION
        } else {
            body.extend_from_slice(&len_u32(self.tail.len()).to_le_bytes());
            for t in &self.tail {
                body.extend_from_slice(t.chain.as_bytes());
                body.extend_from_slice(&t.from.to_le_bytes());
            }
            HEAD_VERSION_TAIL
        };
        let mut out = Vec::with_capacity(HEADER_LEN + body.len() + 4);
        out.extend_from_slice(HEAD_MAGIC);
        out.push(version);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&len_u32(body.len()).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks a head read from `location` (named in the error). Never allocates
    /// more than `bytes` holds.
    ///
    /// # Errors
    /// [`RemoteStorageError::Corrupt`] naming `location` and the field or byte that is wrong:
    /// over [`MAX_HEAD_LEN`], bad magic, version or reserved bytes, a body length or checksum
    /// mismatch, a field running past the body, trailing bytes, an invalid partition, a
    /// segment whose start is above its end, segments not in strictly increasing,
    /// non-overlapping order; in version 2, a tail count the bytes left cannot hold, a tail
    /// chain listed twice or one whose first object number is 0.
    pub fn decode(bytes: &[u8], location: &str) -> Result<Self, RemoteStorageError> {
        let corrupt = corrupt_at(location, "partition head");
        let (version, body) = unframe(bytes, &corrupt)?;
        let mut r = Reader::at(body, HEADER_LEN);
        let id = Uuid::from_bytes(r.array::<16>("topic id", &corrupt)?);
        let partition = i32::from_le_bytes(r.array("partition", &corrupt)?);
        let name_len = u32::from_le_bytes(r.array("name length", &corrupt)?) as usize;
        let name_at = r.offset();
        let name = std::str::from_utf8(r.take(name_len, "name", &corrupt)?)
            .map_err(|_| corrupt(format!("the topic name (byte {name_at}) is not UTF-8")))?
            .to_owned();
        let writer_epoch = u64::from_le_bytes(r.array("writer epoch", &corrupt)?);
        let incarnation = Uuid::from_bytes(r.array::<16>("incarnation", &corrupt)?);
        let serial = u64::from_le_bytes(r.array("serial", &corrupt)?);
        let written_ms = i64::from_le_bytes(r.array("written time", &corrupt)?);
        let writer_last_seq = u64::from_le_bytes(r.array("writer last seq", &corrupt)?);
        let retention_point = u64::from_le_bytes(r.array("retention point", &corrupt)?);
        let count = u32::from_le_bytes(r.array("segment count", &corrupt)?) as usize;
        // Before allocating: the count must fit in what is left, whatever it claims.
        let needed = count.checked_mul(SEGMENT_LEN);
        if needed.is_none_or(|n| n > r.remaining()) {
            return Err(corrupt(format!(
                "segment count {count} needs {} bytes at byte {}, {} left",
                count.saturating_mul(SEGMENT_LEN),
                r.offset(),
                r.remaining()
            )));
        }
        let mut segments: Vec<HeadSegment> = Vec::with_capacity(count);
        for i in 0..count {
            let at = r.offset();
            let segment = HeadSegment {
                id: Uuid::from_bytes(r.array::<16>("segment id", &corrupt)?),
                start_seq: u64::from_le_bytes(r.array("segment start seq", &corrupt)?),
                end_seq: u64::from_le_bytes(r.array("segment end seq", &corrupt)?),
                writer_epoch: u64::from_le_bytes(r.array("segment writer epoch", &corrupt)?),
            };
            if segment.start_seq > segment.end_seq {
                return Err(corrupt(format!(
                    "segment {i} (byte {at}) starts at seq {} after its end seq {}",
                    segment.start_seq, segment.end_seq
                )));
            }
            if let Some(prev) = segments.last()
                && segment.start_seq <= prev.end_seq
            {
                return Err(corrupt(format!(
                    "segment {i} (byte {at}) starts at seq {}, not after the end seq {} of the \
                     segment before it",
                    segment.start_seq, prev.end_seq
                )));
            }
            segments.push(segment);
        }
        let tail = if version == HEAD_VERSION_TAIL {
            decode_tail(&mut r, &corrupt)?
        } else {
            Vec::new()
        };
        r.end(&corrupt)?;
        let tp = TopicIdPartition::new(id, name, partition);
        tp.validate()
            .map_err(|e| corrupt(format!("it names an invalid partition: {e}")))?;
        Ok(Self {
            partition: tp,
            writer_epoch,
            incarnation,
            serial,
            written_ms,
            writer_last_seq,
            retention_point,
            segments,
            tail,
        })
    }

    /// The last segment's end seq; `None` when the head lists no segment.
    pub fn end_seq(&self) -> Option<u64> {
        self.segments.last().map(|s| s.end_seq)
    }
}

/// Decodes the tail chain references of a version 2 head.
fn decode_tail(
    r: &mut Reader<'_>,
    corrupt: &Corrupt<'_>,
) -> Result<Vec<TailRef>, RemoteStorageError> {
    let count = u32::from_le_bytes(r.array("tail count", corrupt)?) as usize;
    // Before allocating: the count must fit in what is left, whatever it claims.
    let needed = count.checked_mul(TAIL_REF_LEN);
    if needed.is_none_or(|n| n > r.remaining()) {
        return Err(corrupt(format!(
            "tail count {count} needs {} bytes at byte {}, {} left",
            count.saturating_mul(TAIL_REF_LEN),
            r.offset(),
            r.remaining()
        )));
    }
    let mut tail: Vec<TailRef> = Vec::with_capacity(count);
    let mut seen = std::collections::HashSet::with_capacity(count);
    for i in 0..count {
        let at = r.offset();
        let t = TailRef {
            chain: Uuid::from_bytes(r.array::<16>("tail chain id", corrupt)?),
            from: u64::from_le_bytes(r.array("tail first object number", corrupt)?),
        };
        if t.from == 0 {
            return Err(corrupt(format!(
                "tail chain {i} (byte {at}, chain {}) starts at object 0; numbers start at 1",
                t.chain
            )));
        }
        if !seen.insert(t.chain) {
            return Err(corrupt(format!(
                "tail chain {i} (byte {at}): chain {} is listed twice",
                t.chain
            )));
        }
        tail.push(t);
    }
    Ok(tail)
}

/// Checks the frame of a head and returns its version and body.
fn unframe<'a>(
    bytes: &'a [u8],
    corrupt: &Corrupt<'_>,
) -> Result<(u8, &'a [u8]), RemoteStorageError> {
    if bytes.len() > MAX_HEAD_LEN {
        return Err(corrupt(format!(
            "{} bytes, over the {MAX_HEAD_LEN}-byte limit",
            bytes.len()
        )));
    }
    let short = || corrupt(format!("{} bytes, shorter than a head", bytes.len()));
    let (content, crc_bytes) = bytes.split_last_chunk::<4>().ok_or_else(short)?;
    let (header, body) = content.split_at_checked(HEADER_LEN).ok_or_else(short)?;
    if header.get(..4) != Some(HEAD_MAGIC.as_slice()) {
        return Err(corrupt("bad magic (bytes 0..4)".to_owned()));
    }
    let version = match header.get(4).copied() {
        Some(v @ (HEAD_VERSION | HEAD_VERSION_TAIL)) => v,
        v => {
            return Err(corrupt(format!(
                "unsupported version {} (byte 4)",
                v.unwrap_or(0)
            )));
        }
    };
    if header.get(5..8) != Some([0u8; 3].as_slice()) {
        return Err(corrupt("reserved bytes 5..8 are not zero".to_owned()));
    }
    let len = header
        .get(8..12)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0) as usize;
    if len != body.len() {
        return Err(corrupt(format!(
            "body length {len} (bytes 8..12) but {} body bytes",
            body.len()
        )));
    }
    let stored = u32::from_le_bytes(*crc_bytes);
    let computed = crc32fast::hash(content);
    if stored != computed {
        return Err(corrupt(format!(
            "checksum mismatch (byte {}): stored {stored:#010x}, computed {computed:#010x}",
            content.len()
        )));
    }
    Ok((version, body))
}

/// What [`read_head`] found.
#[derive(Debug)]
#[non_exhaustive]
pub enum HeadRead {
    /// The head is still at the version the caller knows.
    Unchanged,
    /// The partition has no head.
    Absent,
    /// A head that decodes and names the partition of the directory read.
    Fresh {
        /// The head.
        head: PartitionHead,
        /// Its version, for the next [`read_head`].
        version: String,
    },
    /// A head that does not decode, is over [`MAX_HEAD_LEN`], or names another partition than
    /// the directory's: the caller falls back to a full listing.
    Damaged {
        /// Its version, for the next [`read_head`] (empty when it was too large to read).
        version: String,
        /// What is wrong ([`RemoteStorageError::Corrupt`] naming the key).
        error: RemoteStorageError,
    },
}

/// Writes `head` as the head of the partition directory `dir` (whole, replacing the one
/// there): one [`OwnershipStore::put_object`].
///
/// # Errors
/// [`RemoteStorageError::InvalidArgument`] when `dir` is not the directory of
/// `head.partition` or the head encodes to more than [`MAX_HEAD_LEN`] bytes; a backend error.
pub fn write_head(
    store: &dyn OwnershipStore,
    dir: &str,
    head: &PartitionHead,
) -> Result<(), RemoteStorageError> {
    let own = layout::partition_dir(&head.partition)?;
    if own != dir {
        return Err(RemoteStorageError::invalid_argument(format!(
            "the head of partition {} belongs in {own}, not {dir}",
            head.partition
        )));
    }
    let bytes = head.encode();
    if bytes.len() > MAX_HEAD_LEN {
        return Err(RemoteStorageError::invalid_argument(format!(
            "the head of partition {} is {} bytes, over the {MAX_HEAD_LEN}-byte limit",
            head.partition,
            bytes.len()
        )));
    }
    store.put_object(&layout::head_key(dir), &bytes)
}

/// Reads the head of the partition directory `dir` unless it is still at version `known`:
/// one [`OwnershipStore::read_if_changed`], bounded by [`MAX_HEAD_LEN`].
///
/// # Errors
/// A backend error. A head that is there but unusable is [`HeadRead::Damaged`], not an error.
pub fn read_head(
    store: &dyn OwnershipStore,
    dir: &str,
    known: Option<&str>,
) -> Result<HeadRead, RemoteStorageError> {
    let key = layout::head_key(dir);
    let (bytes, version) = match store.read_if_changed(&key, known, MAX_HEAD_LEN) {
        Ok(ConditionalRead::Unchanged) => return Ok(HeadRead::Unchanged),
        Ok(ConditionalRead::Absent) => return Ok(HeadRead::Absent),
        Ok(ConditionalRead::Changed { bytes, version }) => (bytes, version),
        // Over the limit: not read, so no version to give.
        Err(error @ RemoteStorageError::Corrupt { .. }) => {
            return Ok(HeadRead::Damaged {
                version: String::new(),
                error,
            });
        }
        Err(e) => return Err(e),
    };
    let head = match PartitionHead::decode(&bytes, &key) {
        Ok(head) => head,
        Err(error) => return Ok(HeadRead::Damaged { version, error }),
    };
    match layout::partition_dir(&head.partition) {
        Ok(own) if own == dir => Ok(HeadRead::Fresh { head, version }),
        _ => Ok(HeadRead::Damaged {
            error: RemoteStorageError::Corrupt {
                location: key,
                reason: format!("partition head: it names partition {}", head.partition),
            },
            version,
        }),
    }
}

#[cfg(test)]
mod tests;
