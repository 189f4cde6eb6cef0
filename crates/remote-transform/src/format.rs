//! Byte layouts: the segment header stored at the head of every object of a transformed
//! segment, and the record this layer keeps in the segment's custom metadata. See
//! `docs/format.md`, "Transformed segments".

use krabka_remote_storage::{CustomMetadata, IndexType, RemoteLogSegmentId, Uuid};
use sha2::{Digest, Sha256};

use crate::error::TransformError;
use crate::keys::KeyId;

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

const RECORD_MAGIC: &[u8; 4] = b"KTX1";
/// Record bytes before the inner store's custom metadata.
pub(crate) const RECORD_LEN: usize = 4 + 1 + 4 + 4 + 4 + 16 + 1;

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

/// The length of the header whose first [`FIXED_LEN`] bytes are `prefix`, or `None` when
/// `prefix` does not start a version-1 transform header (an untransformed `.log` starts with a
/// record frame, whose length field can never read as the magic).
pub(crate) fn header_len_from_prefix(prefix: &[u8]) -> Option<u64> {
    if prefix.len() < FIXED_LEN || !prefix.starts_with(HEADER_MAGIC) {
        return None;
    }
    let flags = prefix[5];
    let mut count = [0u8; 4];
    count.copy_from_slice(&prefix[52..56]);
    Some(header_len(
        flags & FLAG_AES_GCM != 0,
        u64::from(u32::from_le_bytes(count)),
    ))
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

    /// Decodes and checks a header: CRC, magic, version, flags, lengths, and that it belongs
    /// to `segment`. The GMAC is checked by the caller, which has the data key.
    pub fn decode(bytes: &[u8], segment: &RemoteLogSegmentId) -> Result<Self, TransformError> {
        let bad = |reason: String| TransformError::corrupt(segment, "transform header", reason);
        let Some(split) = bytes.len().checked_sub(CRC_LEN) else {
            return Err(bad(format!("{} bytes is too short", bytes.len())));
        };
        let (body, crc) = bytes.split_at(split);
        let stored = u32::from_le_bytes(crc.try_into().unwrap_or([0; 4]));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(bad(format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        let mut r = Reader {
            bytes: body,
            at: 0,
            segment,
        };
        if r.take(4)? != HEADER_MAGIC {
            return Err(bad("bad magic".to_owned()));
        }
        let version = r.u8()?;
        if version != HEADER_VERSION {
            return Err(TransformError::unsupported(
                segment,
                format!("header version {version} is newer than this build reads (1)"),
            ));
        }
        let flags = r.u8()?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(TransformError::unsupported(
                segment,
                format!("unknown transform flags {flags:#04x}"),
            ));
        }
        if r.take(2)? != [0, 0] {
            return Err(bad("reserved bytes are not zero".to_owned()));
        }
        let topic_id = r.uuid()?;
        let partition = r.i32()?;
        let segment_uuid = r.uuid()?;
        let tp = segment.topic_id_partition();
        if (topic_id, partition, segment_uuid) != (tp.topic_id(), tp.partition(), segment.id()) {
            return Err(bad(format!(
                "it belongs to segment {segment_uuid} of partition {partition} of topic \
                 {topic_id}"
            )));
        }
        let chunk_size = r.u32()?;
        let plaintext_size = r.u32()?;
        let count = r.u32()?;
        if chunk_size == 0 {
            return Err(bad("chunk size 0".to_owned()));
        }
        if u64::from(count) != chunk_count(u64::from(plaintext_size), chunk_size) {
            return Err(bad(format!(
                "{count} chunks cannot hold {plaintext_size} bytes in chunks of {chunk_size}"
            )));
        }
        let encrypted = flags & FLAG_AES_GCM != 0;
        let expected = header_len(encrypted, u64::from(count));
        if bytes.len() as u64 != expected {
            return Err(bad(format!(
                "{} bytes, but {count} chunks make a {expected}-byte header",
                bytes.len()
            )));
        }
        let encryption = if encrypted {
            Some(EncryptionHeader {
                key_id: KeyId::from_bytes(r.array()?),
                wrap_nonce: r.array()?,
                wrapped_key: r.array()?,
                nonce_base: r.array()?,
            })
        } else {
            None
        };
        let mut indexes = [None; INDEX_SLOTS];
        for (slot, entry) in indexes.iter_mut().enumerate() {
            let present = r.u8()?;
            let encoding = r.u8()?;
            let plaintext_len = r.u32()?;
            let stored_len = r.u32()?;
            let crc = r.u32()?;
            match present {
                0 if (encoding, plaintext_len, stored_len, crc) == (0, 0, 0, 0) => {}
                1 => {
                    let encoding = r.encoding(encoding, flags, || format!("index slot {slot}"))?;
                    *entry = Some(IndexEntry {
                        encoding,
                        plaintext_len,
                        stored_len,
                        crc,
                    });
                }
                _ => return Err(bad(format!("index slot {slot} is malformed"))),
            }
        }
        // The length check above bounds `count` by the bytes present.
        let mut chunks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let encoding = r.u8()?;
            let encoding = r.encoding(encoding, flags, || format!("chunk {i}"))?;
            chunks.push(ChunkEntry {
                encoding,
                stored_len: r.u32()?,
                crc: r.u32()?,
            });
        }
        let tag = if encrypted { Some(r.array()?) } else { None };
        if r.at != body.len() {
            return Err(bad("trailing bytes".to_owned()));
        }
        Ok(Self {
            flags,
            topic_id,
            partition,
            segment_uuid,
            chunk_size,
            plaintext_size,
            encryption,
            indexes,
            chunks,
            tag,
        })
    }
}

/// A bounds-checked little-endian reader over header bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    segment: &'a RemoteLogSegmentId,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TransformError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(TransformError::corrupt(
                self.segment,
                "transform header",
                format!("truncated at byte {}", self.at),
            ));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], TransformError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, TransformError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, TransformError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, TransformError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    fn uuid(&mut self) -> Result<Uuid, TransformError> {
        Ok(Uuid::from_bytes(self.array()?))
    }

    fn encoding(
        &self,
        code: u8,
        flags: u8,
        what: impl Fn() -> String,
    ) -> Result<Encoding, TransformError> {
        match Encoding::from_code(code) {
            Some(Encoding::Zstd) if flags & FLAG_ZSTD == 0 => Err(TransformError::corrupt(
                self.segment,
                "transform header",
                format!("{} is zstd in a segment without zstd", what()),
            )),
            Some(e) => Ok(e),
            None => Err(TransformError::corrupt(
                self.segment,
                "transform header",
                format!("{} has unknown encoding {code}", what()),
            )),
        }
    }
}

/// What this layer records in a transformed segment's custom metadata: enough to validate a
/// range, find the header and check it is the one written by this copy, without a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub flags: u8,
    pub header_len: u32,
    pub stored_size: u32,
    pub plaintext_size: u32,
    pub digest: [u8; 16],
    pub inner: Option<CustomMetadata>,
}

/// The first 16 bytes of SHA-256 over an encoded header.
pub(crate) fn header_digest(header: &[u8]) -> [u8; 16] {
    let d = Sha256::digest(header);
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

impl Record {
    /// The custom metadata bytes.
    pub fn encode(&self) -> CustomMetadata {
        let inner = self.inner.as_ref().map(|c| c.value().as_ref());
        let mut b = Vec::with_capacity(RECORD_LEN + inner.map_or(0, <[u8]>::len));
        b.extend_from_slice(RECORD_MAGIC);
        b.push(self.flags);
        b.extend_from_slice(&self.header_len.to_le_bytes());
        b.extend_from_slice(&self.stored_size.to_le_bytes());
        b.extend_from_slice(&self.plaintext_size.to_le_bytes());
        b.extend_from_slice(&self.digest);
        match inner {
            Some(inner) => {
                b.push(1);
                b.extend_from_slice(inner);
            }
            None => b.push(0),
        }
        CustomMetadata::new(b)
    }

    /// `Ok(None)` when the custom metadata is not this layer's (an untransformed segment).
    pub fn decode(
        cm: Option<&CustomMetadata>,
        segment: &RemoteLogSegmentId,
    ) -> Result<Option<Self>, TransformError> {
        let Some(cm) = cm else { return Ok(None) };
        let v = cm.value().as_ref();
        if !v.starts_with(RECORD_MAGIC) {
            return Ok(None);
        }
        let bad = |reason: &str| TransformError::corrupt(segment, "custom metadata", reason);
        if v.len() < RECORD_LEN {
            return Err(bad("too short"));
        }
        let u32_at = |at: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&v[at..at + 4]);
            u32::from_le_bytes(a)
        };
        let flags = v[4];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(TransformError::unsupported(
                segment,
                format!("unknown transform flags {flags:#04x}"),
            ));
        }
        let mut digest = [0u8; 16];
        digest.copy_from_slice(&v[17..33]);
        let inner = match v[33] {
            0 if v.len() == RECORD_LEN => None,
            1 => Some(CustomMetadata::new(bytes::Bytes::copy_from_slice(
                &v[RECORD_LEN..],
            ))),
            _ => return Err(bad("malformed inner custom metadata")),
        };
        let record = Self {
            flags,
            header_len: u32_at(5),
            stored_size: u32_at(9),
            plaintext_size: u32_at(13),
            digest,
            inner,
        };
        if u64::from(record.header_len) > u64::from(record.stored_size) {
            return Err(bad("header longer than the stored object"));
        }
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use krabka_remote_storage::TopicIdPartition;
    use krabka_remote_storage::testkit::SplitMix64;

    fn segment() -> RemoteLogSegmentId {
        RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 3))
    }

    fn header(seg: &RemoteLogSegmentId, encrypted: bool) -> Header {
        let tp = seg.topic_id_partition();
        let mut indexes = [None; INDEX_SLOTS];
        indexes[0] = Some(IndexEntry {
            encoding: Encoding::Zstd,
            plaintext_len: 800,
            stored_len: 120,
            crc: 7,
        });
        indexes[4] = Some(IndexEntry {
            encoding: Encoding::Raw,
            plaintext_len: 0,
            stored_len: 16,
            crc: 9,
        });
        Header {
            flags: FLAG_ZSTD | if encrypted { FLAG_AES_GCM } else { 0 },
            topic_id: tp.topic_id(),
            partition: tp.partition(),
            segment_uuid: seg.id(),
            chunk_size: 1024,
            plaintext_size: 2500,
            encryption: encrypted.then_some(EncryptionHeader {
                key_id: KeyId::from_bytes([1; 8]),
                wrap_nonce: [2; 12],
                wrapped_key: [3; 48],
                nonce_base: [4; 12],
            }),
            indexes,
            chunks: vec![
                ChunkEntry {
                    encoding: Encoding::Zstd,
                    stored_len: 300,
                    crc: 1,
                },
                ChunkEntry {
                    encoding: Encoding::Raw,
                    stored_len: 1040,
                    crc: 2,
                },
                ChunkEntry {
                    encoding: Encoding::Zstd,
                    stored_len: 90,
                    crc: 3,
                },
            ],
            tag: encrypted.then_some([5; TAG_LEN]),
        }
    }

    #[test]
    fn headers_round_trip() {
        let seg = segment();
        for encrypted in [false, true] {
            let m = header(&seg, encrypted);
            let bytes = m.encode();
            assert_eq!(bytes.len() as u64, m.len());
            assert_eq!(Header::decode(&bytes, &seg).unwrap(), m);
            // Another segment's id is refused.
            let other = segment();
            let e = Header::decode(&bytes, &other).unwrap_err();
            assert!(e.to_string().contains("belongs to segment"), "{e}");
        }
    }

    #[test]
    fn damaged_headers_are_errors_never_panics() {
        let seg = segment();
        let bytes = header(&seg, true).encode();
        for cut in 0..bytes.len() {
            assert!(Header::decode(&bytes[..cut], &seg).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(Header::decode(&b, &seg).is_err(), "flip at {i}");
        }
        // Random bytes with a valid CRC still never panic.
        let mut rng = SplitMix64::new(5);
        for len in [0usize, 4, 60, 200, 400] {
            for _ in 0..200 {
                let mut b = vec![0u8; len];
                rng.fill(&mut b);
                if len >= 8 {
                    b[..4].copy_from_slice(HEADER_MAGIC);
                    b[4] = HEADER_VERSION;
                    let crc = crc32fast::hash(&b[..len - 4]);
                    b[len - 4..].copy_from_slice(&crc.to_le_bytes());
                }
                let _ = Header::decode(&b, &seg);
            }
        }
    }

    #[test]
    fn records_round_trip_and_foreign_metadata_is_raw() {
        let seg = segment();
        for inner in [
            None,
            Some(CustomMetadata::new(b"s3v1\x01\0\0\0\0\0\0\0".to_vec())),
        ] {
            let r = Record {
                flags: FLAG_AES_GCM,
                header_len: 200,
                stored_size: 5000,
                plaintext_size: 9000,
                digest: [7; 16],
                inner,
            };
            let cm = r.encode();
            assert!(cm.len() <= 128);
            assert_eq!(Record::decode(Some(&cm), &seg).unwrap(), Some(r));
        }
        assert_eq!(Record::decode(None, &seg).unwrap(), None);
        let foreign = CustomMetadata::new(b"s3v1\0\0\0\0\0\0\0\0".to_vec());
        assert_eq!(Record::decode(Some(&foreign), &seg).unwrap(), None);
        let short = CustomMetadata::new(b"KTX1\x01".to_vec());
        assert!(Record::decode(Some(&short), &seg).is_err());
    }
}
