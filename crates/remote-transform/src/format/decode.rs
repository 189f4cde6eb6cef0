//! Decoding a header: every field bounds-checked, the identity and lengths validated.

use krabka_remote_storage::{RemoteLogSegmentId, Uuid};

use super::{
    CRC_LEN, ChunkEntry, Encoding, EncryptionHeader, FLAG_AES_GCM, FLAG_ZSTD, HEADER_MAGIC,
    HEADER_VERSION, Header, INDEX_SLOTS, IndexEntry, KNOWN_FLAGS, chunk_count, header_len,
};
use crate::error::TransformError;
use crate::keys::KeyId;

impl Header {
    /// Decodes and checks a header: CRC, magic, version, flags, lengths, and that it belongs
    /// to `segment`. The GMAC is checked by the caller, which has the data key.
    pub fn decode(bytes: &[u8], segment: &RemoteLogSegmentId) -> Result<Self, TransformError> {
        let body = checked_body(bytes, segment)?;
        let mut r = Reader {
            bytes: body,
            at: 0,
            segment,
        };
        let flags = r.prelude()?;
        let (topic_id, partition, segment_uuid) = r.identity()?;
        let (chunk_size, plaintext_size, count) = r.sizes(flags, bytes.len())?;
        let encrypted = flags & FLAG_AES_GCM != 0;
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
        let indexes = r.indexes(flags)?;
        let chunks = r.chunks(count, flags)?;
        let tag = if encrypted { Some(r.array()?) } else { None };
        if r.at != body.len() {
            return Err(r.bad("trailing bytes".to_owned()));
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

/// The header without its trailing CRC, once the CRC matches.
fn checked_body<'a>(
    bytes: &'a [u8],
    segment: &RemoteLogSegmentId,
) -> Result<&'a [u8], TransformError> {
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
    Ok(body)
}

/// A bounds-checked little-endian reader over header bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    segment: &'a RemoteLogSegmentId,
}

impl<'a> Reader<'a> {
    fn bad(&self, reason: String) -> TransformError {
        TransformError::corrupt(self.segment, "transform header", reason)
    }

    /// Magic, version, flags and the reserved bytes; returns the flags.
    fn prelude(&mut self) -> Result<u8, TransformError> {
        if self.take(4)? != HEADER_MAGIC {
            return Err(self.bad("bad magic".to_owned()));
        }
        let version = self.u8()?;
        if version != HEADER_VERSION {
            return Err(TransformError::unsupported(
                self.segment,
                format!("header version {version} is newer than this build reads (1)"),
            ));
        }
        let flags = self.u8()?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(TransformError::unsupported(
                self.segment,
                format!("unknown transform flags {flags:#04x}"),
            ));
        }
        if self.take(2)? != [0, 0] {
            return Err(self.bad("reserved bytes are not zero".to_owned()));
        }
        Ok(flags)
    }

    /// Topic id, partition and segment id, which must be the reader's segment's.
    fn identity(&mut self) -> Result<(Uuid, i32, Uuid), TransformError> {
        let topic_id = self.uuid()?;
        let partition = self.i32()?;
        let segment_uuid = self.uuid()?;
        let segment = self.segment;
        let tp = segment.topic_id_partition();
        if (topic_id, partition, segment_uuid) != (tp.topic_id(), tp.partition(), segment.id()) {
            return Err(self.bad(format!(
                "it belongs to segment {segment_uuid} of partition {partition} of topic \
                 {topic_id}"
            )));
        }
        Ok((topic_id, partition, segment_uuid))
    }

    /// Chunk size, plaintext size and chunk count, consistent with each other and with the
    /// header's length `total` (CRC included).
    fn sizes(&mut self, flags: u8, total: usize) -> Result<(u32, u32, u32), TransformError> {
        let chunk_size = self.u32()?;
        let plaintext_size = self.u32()?;
        let count = self.u32()?;
        if chunk_size == 0 {
            return Err(self.bad("chunk size 0".to_owned()));
        }
        if u64::from(count) != chunk_count(u64::from(plaintext_size), chunk_size) {
            return Err(self.bad(format!(
                "{count} chunks cannot hold {plaintext_size} bytes in chunks of {chunk_size}"
            )));
        }
        let expected = header_len(flags & FLAG_AES_GCM != 0, u64::from(count));
        if total as u64 != expected {
            return Err(self.bad(format!(
                "{total} bytes, but {count} chunks make a {expected}-byte header"
            )));
        }
        Ok((chunk_size, plaintext_size, count))
    }

    /// The index table: one entry per slot, all zero when absent.
    fn indexes(&mut self, flags: u8) -> Result<[Option<IndexEntry>; INDEX_SLOTS], TransformError> {
        let mut indexes = [None; INDEX_SLOTS];
        for (slot, entry) in indexes.iter_mut().enumerate() {
            let present = self.u8()?;
            let encoding = self.u8()?;
            let plaintext_len = self.u32()?;
            let stored_len = self.u32()?;
            let crc = self.u32()?;
            match present {
                0 if (encoding, plaintext_len, stored_len, crc) == (0, 0, 0, 0) => {}
                1 => {
                    let encoding =
                        self.encoding(encoding, flags, || format!("index slot {slot}"))?;
                    *entry = Some(IndexEntry {
                        encoding,
                        plaintext_len,
                        stored_len,
                        crc,
                    });
                }
                _ => return Err(self.bad(format!("index slot {slot} is malformed"))),
            }
        }
        Ok(indexes)
    }

    /// The chunk table of `count` entries.
    fn chunks(&mut self, count: u32, flags: u8) -> Result<Vec<ChunkEntry>, TransformError> {
        // The length check of `sizes` bounds `count` by the bytes present.
        let mut chunks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let encoding = self.u8()?;
            let encoding = self.encoding(encoding, flags, || format!("chunk {i}"))?;
            chunks.push(ChunkEntry {
                encoding,
                stored_len: self.u32()?,
                crc: self.u32()?,
            });
        }
        Ok(chunks)
    }

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
