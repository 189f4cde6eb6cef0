//! Byte layouts: the segment header stored at the head of every object of a transformed
//! segment, and the record this layer keeps in the segment's custom metadata. See
//! `docs/format.md`, "Transformed segments".

mod decode;
mod record;
#[cfg(test)]
mod tests;

use krabka_remote_storage::{IndexType, RemoteLogSegmentId, Uuid};

use crate::keys::KeyId;

pub(crate) use record::{Record, header_digest};

/// Transform flag: chunks and indexes may be zstd-compressed.
pub(crate) const FLAG_ZSTD: u8 = 1;
/// Transform flag: chunks, indexes and the header are protected by AES-256-GCM.
pub(crate) const FLAG_AES_GCM: u8 = 2;
const KNOWN_FLAGS: u8 = FLAG_ZSTD | FLAG_AES_GCM;

const HEADER_MAGIC: &[u8; 4] = b"KTXH";
const HEADER_VERSION: u8 = 1;
/// Fixed part of a header: magic .. chunk count.
pub(crate) const FIXED_LEN: usize = 56;
/// The encryption block: key id, wrap nonce, wrapped data key (+ tag), nonce base.
pub(crate) const ENCRYPTION_LEN: usize = 8 + 12 + 48 + 12;
/// One index entry per `IndexType::ALL` slot.
const INDEX_ENTRY_LEN: usize = 14;
/// One entry per chunk.
const CHUNK_ENTRY_LEN: usize = 9;
/// AES-GCM tag.
pub(crate) const TAG_LEN: usize = 16;
const CRC_LEN: usize = 4;
/// Number of index slots.
pub(crate) const INDEX_SLOTS: usize = 5;

/// The record of a segment without a key id: unencrypted, or written before records carried one.
const RECORD_MAGIC: &[u8; 4] = b"KTX1";
/// The record of an encrypted segment: the `KTX1` fields and the master key's id.
const RECORD_MAGIC_KEYED: &[u8; 4] = b"KTX2";
/// `KTX1` record bytes before the inner store's custom metadata.
pub(crate) const RECORD_LEN: usize = 4 + 1 + 4 + 4 + 4 + 16 + 1;
/// `KTX2` record bytes before the inner store's custom metadata (a key id more).
pub(crate) const RECORD_LEN_KEYED: usize = RECORD_LEN + 8;

/// How one chunk or index body is stored before encryption.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// The plaintext as is.
    Raw = 0,
    /// A zstd frame of the plaintext.
    Zstd = 1,
}

impl Encoding {
    fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Raw),
            1 => Some(Self::Zstd),
            _ => None,
        }
    }
}

/// The slot of an index type in the header (its position in `IndexType::ALL`).
pub(crate) fn index_slot(t: IndexType) -> usize {
    IndexType::ALL
        .iter()
        .position(|x| *x == t)
        .unwrap_or(INDEX_SLOTS)
}

/// A human name of an index type, for errors.
pub(crate) fn index_object(t: IndexType) -> String {
    match t {
        IndexType::Offset => "offset index".to_owned(),
        IndexType::Timestamp => "time index".to_owned(),
        IndexType::ProducerSnapshot => "producer snapshot".to_owned(),
        IndexType::Transaction => "transaction index".to_owned(),
        IndexType::LeaderEpoch => "leader-epoch checkpoint".to_owned(),
        other => format!("{other} index"),
    }
}

/// One stored chunk of the `.log` body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkEntry {
    pub encoding: Encoding,
    pub stored_len: u32,
    pub crc: u32,
}

/// One stored index body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub encoding: Encoding,
    pub plaintext_len: u32,
    pub stored_len: u32,
    pub crc: u32,
}

/// The encryption block of a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EncryptionHeader {
    pub key_id: KeyId,
    pub wrap_nonce: [u8; 12],
    pub wrapped_key: [u8; 48],
    pub nonce_base: [u8; 12],
}

/// A segment's header: its transform, identity, chunk table and index table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub flags: u8,
    pub topic_id: Uuid,
    pub partition: i32,
    pub segment_uuid: Uuid,
    pub chunk_size: u32,
    pub plaintext_size: u32,
    pub encryption: Option<EncryptionHeader>,
    pub indexes: [Option<IndexEntry>; INDEX_SLOTS],
    pub chunks: Vec<ChunkEntry>,
    /// The GMAC over everything before it, when encrypted.
    pub tag: Option<[u8; TAG_LEN]>,
}

/// Number of chunks of a `size`-byte plaintext in `chunk_size` chunks.
pub(crate) fn chunk_count(size: u64, chunk_size: u32) -> u64 {
    size.div_ceil(u64::from(chunk_size.max(1)))
}

/// Length of a header with `chunks` chunks.
pub(crate) fn header_len(encrypted: bool, chunks: u64) -> u64 {
    let enc = if encrypted {
        (ENCRYPTION_LEN + TAG_LEN) as u64
    } else {
        0
    };
    (FIXED_LEN + INDEX_SLOTS * INDEX_ENTRY_LEN + CRC_LEN) as u64
        + enc
        + chunks * CHUNK_ENTRY_LEN as u64
}

/// What the first [`FIXED_LEN`] bytes of a stored `.log` object say about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Prefix {
    /// A transform header of this many bytes starts the object.
    Header(u64),
    /// Not a transformed object: neither the magic nor the segment's identity is there.
    Plain,
    /// The segment's identity sits where a transform header keeps it, but the magic is not
    /// there: a transformed object whose header is damaged (what is wrong).
    Damaged(String),
}

/// Classifies the first bytes of `segment`'s stored `.log` (see [`Prefix`]). A transform
/// header is recognised by its magic **or** by the segment's own identity (topic id,
/// partition, segment uuid) at bytes 8..44: an untransformed `.log` holds neither (it starts
/// with its first record batch, whose big-endian `baseOffset` reads as the magic only for a
/// first seq among the 2^32 from `0x4B54_5848 << 32`, about 5.4 × 10^18, and its bytes were
/// written before the copy drew the segment's uuid), so a header damaged in either part is
/// still told apart from an untransformed segment.
pub(crate) fn classify_prefix(prefix: &[u8], segment: &RemoteLogSegmentId) -> Prefix {
    if prefix.len() < FIXED_LEN {
        return Prefix::Plain;
    }
    if prefix.starts_with(HEADER_MAGIC) {
        let flags = prefix[5];
        let mut count = [0u8; 4];
        count.copy_from_slice(&prefix[52..56]);
        return Prefix::Header(header_len(
            flags & FLAG_AES_GCM != 0,
            u64::from(u32::from_le_bytes(count)),
        ));
    }
    let tp = segment.topic_id_partition();
    let identity = [
        tp.topic_id().as_bytes().as_slice(),
        &tp.partition().to_le_bytes(),
        segment.id().as_bytes(),
    ]
    .concat();
    if prefix[8..44] == identity[..] {
        return Prefix::Damaged(format!(
            "bad magic {:02x?} (expected {:02x?}), though the bytes after it name this segment",
            &prefix[..4],
            HEADER_MAGIC
        ));
    }
    Prefix::Plain
}

impl Header {
    /// Whether chunks are encrypted.
    pub fn encrypted(&self) -> bool {
        self.flags & FLAG_AES_GCM != 0
    }

    /// The encoded length.
    pub fn len(&self) -> u64 {
        header_len(self.encrypted(), self.chunks.len() as u64)
    }

    /// Everything the GMAC covers: the header up to its tag.
    pub fn authenticated_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(usize::try_from(self.len()).unwrap_or(0));
        b.extend_from_slice(HEADER_MAGIC);
        b.push(HEADER_VERSION);
        b.push(self.flags);
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(self.topic_id.as_bytes());
        b.extend_from_slice(&self.partition.to_le_bytes());
        b.extend_from_slice(self.segment_uuid.as_bytes());
        b.extend_from_slice(&self.chunk_size.to_le_bytes());
        b.extend_from_slice(&self.plaintext_size.to_le_bytes());
        let count = u32::try_from(self.chunks.len()).unwrap_or(u32::MAX);
        b.extend_from_slice(&count.to_le_bytes());
        if let Some(e) = &self.encryption {
            b.extend_from_slice(&e.key_id.to_bytes());
            b.extend_from_slice(&e.wrap_nonce);
            b.extend_from_slice(&e.wrapped_key);
            b.extend_from_slice(&e.nonce_base);
        }
        for slot in &self.indexes {
            match slot {
                Some(e) => {
                    b.push(1);
                    b.push(e.encoding as u8);
                    b.extend_from_slice(&e.plaintext_len.to_le_bytes());
                    b.extend_from_slice(&e.stored_len.to_le_bytes());
                    b.extend_from_slice(&e.crc.to_le_bytes());
                }
                None => b.extend_from_slice(&[0; INDEX_ENTRY_LEN]),
            }
        }
        for c in &self.chunks {
            b.push(c.encoding as u8);
            b.extend_from_slice(&c.stored_len.to_le_bytes());
            b.extend_from_slice(&c.crc.to_le_bytes());
        }
        b
    }

    /// The full encoding: the authenticated bytes, the tag when encrypted, and the CRC.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.authenticated_bytes();
        if let Some(tag) = &self.tag {
            b.extend_from_slice(tag);
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }
}
