//! Encoding and decoding of one chunk or index body: optional zstd, then optional AES-256-GCM,
//! then a CRC-32 of the stored bytes.

use krabka_remote_storage::RemoteLogSegmentId;

use crate::config::ChunkCompression;
use crate::crypto::{DataKey, Domain, aad};
use crate::error::TransformError;
use crate::format::{ChunkEntry, Encoding, IndexEntry, TAG_LEN};

/// Bytes of a chunk compressed first to decide whether the chunk is worth compressing.
#[cfg_attr(not(feature = "zstd"), allow(dead_code))]
pub(crate) const PROBE_BYTES: usize = 64 << 10;
/// A probe that compresses to more than this percentage of its size marks the chunk as
/// incompressible.
#[cfg_attr(not(feature = "zstd"), allow(dead_code))]
pub(crate) const PROBE_KEEP_PERCENT: usize = 95;

/// A zstd compression context, reused across the chunks one thread encodes.
pub(crate) struct Compressor {
    #[cfg(feature = "zstd")]
    inner: Option<zstd::bulk::Compressor<'static>>,
    /// Whether the last input compressed well: then the next one is compressed without a probe.
    #[cfg(feature = "zstd")]
    last_compressed: bool,
}

impl Compressor {
    /// A context for `compression` (none for [`ChunkCompression::None`]).
    pub fn new(
        compression: ChunkCompression,
        segment: &RemoteLogSegmentId,
    ) -> Result<Self, TransformError> {
        match compression {
            ChunkCompression::None => Ok(Self {
                #[cfg(feature = "zstd")]
                inner: None,
                #[cfg(feature = "zstd")]
                last_compressed: false,
            }),
            #[cfg(feature = "zstd")]
            ChunkCompression::Zstd { level } => zstd::bulk::Compressor::new(level)
                .map(|c| Self {
                    inner: Some(c),
                    last_compressed: false,
                })
                .map_err(|e| {
                    TransformError::unsupported(segment, format!("zstd level {level}: {e}"))
                }),
            #[cfg(not(feature = "zstd"))]
            ChunkCompression::Zstd { .. } => Err(TransformError::unsupported(
                segment,
                "zstd compression was asked for but this build has no zstd support (crate \
                 feature `zstd`)",
            )),
        }
    }

    /// The compressed bytes, or `None` when compression is off or does not shrink `plain`.
    ///
    /// A large input after one that did not compress well is probed first: when its first
    /// [`PROBE_BYTES`] do not shrink below [`PROBE_KEEP_PERCENT`] of their size, the input is
    /// taken as incompressible (random values, already-compressed payloads) and stored as it
    /// is, which saves nearly all of the compression time such data would cost for nothing.
    fn compress(
        &mut self,
        plain: &[u8],
        segment: &RemoteLogSegmentId,
        object: &dyn Fn() -> String,
    ) -> Result<Option<Vec<u8>>, TransformError> {
        #[cfg(feature = "zstd")]
        if let Some(c) = &mut self.inner {
            let zstd_err = |e: std::io::Error| {
                TransformError::corrupt(segment, object(), format!("zstd: {e}"))
            };
            if let Some(sample) = plain
                .get(..PROBE_BYTES)
                .filter(|_| plain.len() >= 2 * PROBE_BYTES && !self.last_compressed)
            {
                let probe = c.compress(sample).map_err(zstd_err)?;
                if probe.len() * 100 > sample.len() * PROBE_KEEP_PERCENT {
                    return Ok(None);
                }
            }
            let out = c.compress(plain).map_err(zstd_err)?;
            self.last_compressed = out.len() * 100 <= plain.len() * PROBE_KEEP_PERCENT;
            return Ok((out.len() < plain.len()).then_some(out));
        }
        let _ = (plain, segment, object);
        Ok(None)
    }
}

/// Decompresses one zstd frame into exactly `out.len()` bytes; anything else is corruption.
fn decompress(
    src: &[u8],
    out: &mut [u8],
    segment: &RemoteLogSegmentId,
    object: &dyn Fn() -> String,
) -> Result<(), TransformError> {
    #[cfg(feature = "zstd")]
    {
        let n = zstd::bulk::decompress_to_buffer(src, out)
            .map_err(|e| TransformError::corrupt(segment, object(), format!("zstd: {e}")))?;
        if n != out.len() {
            return Err(TransformError::corrupt(
                segment,
                object(),
                format!("decompressed to {n} bytes, expected {}", out.len()),
            ));
        }
        Ok(())
    }
    #[cfg(not(feature = "zstd"))]
    {
        let _ = (src, out, object);
        Err(TransformError::unsupported(
            segment,
            "the segment is zstd-compressed but this build has no zstd support (crate feature \
             `zstd`)",
        ))
    }
}

/// Associated data of chunk `index` of `count`.
fn chunk_aad(
    segment: &RemoteLogSegmentId,
    index: u32,
    count: u32,
    plaintext_len: u32,
    encoding: Encoding,
) -> Vec<u8> {
    let mut extra = [0u8; 13];
    extra[..4].copy_from_slice(&index.to_be_bytes());
    extra[4..8].copy_from_slice(&count.to_be_bytes());
    extra[8..12].copy_from_slice(&plaintext_len.to_be_bytes());
    extra[12] = encoding as u8;
    aad("chunk ", segment, &extra)
}

/// Associated data of the index body in `slot`.
fn index_aad(
    segment: &RemoteLogSegmentId,
    slot: usize,
    plaintext_len: u32,
    encoding: Encoding,
) -> Vec<u8> {
    let mut extra = [0u8; 6];
    extra[0] = u8::try_from(slot).unwrap_or(u8::MAX);
    extra[1..5].copy_from_slice(&plaintext_len.to_be_bytes());
    extra[5] = encoding as u8;
    aad("index ", segment, &extra)
}

fn len_u32(
    n: usize,
    segment: &RemoteLogSegmentId,
    object: &dyn Fn() -> String,
) -> Result<u32, TransformError> {
    u32::try_from(n).map_err(|_| TransformError::TooLarge {
        segment: segment.clone(),
        object: object(),
        reason: format!("{n} bytes do not fit u32"),
    })
}

/// Encodes the parts of one copy of a segment.
pub(crate) struct Encoder<'a> {
    pub segment: &'a RemoteLogSegmentId,
    pub key: Option<&'a DataKey>,
    pub compressor: Compressor,
    pub chunk_count: u32,
}

impl Encoder<'_> {
    /// Compresses (when it helps) and seals `plain`; returns the stored bytes and encoding.
    fn encode(
        &mut self,
        plain: Vec<u8>,
        seal: impl FnOnce(&DataKey, Encoding, &mut Vec<u8>) -> Result<(), TransformError>,
        object: &dyn Fn() -> String,
    ) -> Result<(Vec<u8>, Encoding), TransformError> {
        let (mut body, encoding) = match self.compressor.compress(&plain, self.segment, object)? {
            Some(c) => (c, Encoding::Zstd),
            None => (plain, Encoding::Raw),
        };
        if let Some(key) = self.key {
            body.reserve_exact(crate::format::TAG_LEN);
            seal(key, encoding, &mut body)?;
        }
        Ok((body, encoding))
    }

    /// Chunk `index`: its stored bytes and table entry.
    pub fn chunk(
        &mut self,
        index: u32,
        plain: Vec<u8>,
    ) -> Result<(Vec<u8>, ChunkEntry), TransformError> {
        let object = || format!("log chunk {index}");
        let plaintext_len = len_u32(plain.len(), self.segment, &object)?;
        let (segment, count) = (self.segment, self.chunk_count);
        let (body, encoding) = self.encode(
            plain,
            |key, encoding, body| {
                let aad = chunk_aad(segment, index, count, plaintext_len, encoding);
                key.seal(Domain::Chunk, u64::from(index), &aad, body, segment)
            },
            &object,
        )?;
        let entry = ChunkEntry {
            encoding,
            stored_len: len_u32(body.len(), self.segment, &object)?,
            crc: crc32fast::hash(&body),
        };
        Ok((body, entry))
    }

    /// The index body in `slot`: its stored bytes and table entry.
    pub fn index(
        &mut self,
        slot: usize,
        object: &str,
        plain: Vec<u8>,
    ) -> Result<(Vec<u8>, IndexEntry), TransformError> {
        let object = || object.to_owned();
        let plaintext_len = len_u32(plain.len(), self.segment, &object)?;
        let segment = self.segment;
        let (body, encoding) = self.encode(
            plain,
            |key, encoding, body| {
                let aad = index_aad(segment, slot, plaintext_len, encoding);
                key.seal(Domain::Index, slot as u64, &aad, body, segment)
            },
            &object,
        )?;
        let entry = IndexEntry {
            encoding,
            plaintext_len,
            stored_len: len_u32(body.len(), self.segment, &object)?,
            crc: crc32fast::hash(&body),
        };
        Ok((body, entry))
    }
}

/// Checks the CRC, opens and decompresses a stored body into `out` (exactly its plaintext
/// length).
#[allow(clippy::too_many_arguments)]
fn decode(
    segment: &RemoteLogSegmentId,
    key: Option<&DataKey>,
    object: &dyn Fn() -> String,
    stored: &mut [u8],
    crc: u32,
    encoding: Encoding,
    open: impl FnOnce(&DataKey, &mut [u8]) -> Option<usize>,
    out: &mut [u8],
) -> Result<(), TransformError> {
    let computed = crc32fast::hash(stored);
    if computed != crc {
        return Err(TransformError::corrupt(
            segment,
            object(),
            format!("checksum mismatch (recorded {crc:#010x}, computed {computed:#010x})"),
        ));
    }
    let body: &[u8] = match key {
        Some(key) => {
            let n = open(key, stored).ok_or_else(|| TransformError::Authentication {
                segment: segment.clone(),
                object: object(),
            })?;
            &stored[..n]
        }
        None => stored,
    };
    match encoding {
        Encoding::Raw if body.len() == out.len() => {
            out.copy_from_slice(body);
            Ok(())
        }
        Encoding::Raw => Err(TransformError::corrupt(
            segment,
            object(),
            format!("{} stored bytes, expected {}", body.len(), out.len()),
        )),
        Encoding::Zstd => decompress(body, out, segment, object),
    }
}

/// Decodes chunk `index` of `count` (stored bytes in `stored`, modified in place) into `out`,
/// whose length is the chunk's plaintext length.
pub(crate) fn decode_chunk(
    segment: &RemoteLogSegmentId,
    key: Option<&DataKey>,
    index: u32,
    count: u32,
    entry: &ChunkEntry,
    stored: &mut [u8],
    out: &mut [u8],
) -> Result<(), TransformError> {
    let object = || format!("log chunk {index}");
    let plaintext_len = len_u32(out.len(), segment, &object)?;
    decode(
        segment,
        key,
        &object,
        stored,
        entry.crc,
        entry.encoding,
        |key, buf| {
            let aad = chunk_aad(segment, index, count, plaintext_len, entry.encoding);
            key.open(Domain::Chunk, u64::from(index), &aad, buf)
                .map(|p| p.len())
        },
        out,
    )
}

/// Decodes the index body in `slot` (stored bytes modified in place) into a new buffer.
pub(crate) fn decode_index(
    segment: &RemoteLogSegmentId,
    key: Option<&DataKey>,
    slot: usize,
    object: &str,
    entry: &IndexEntry,
    stored: &mut [u8],
) -> Result<Vec<u8>, TransformError> {
    let object = || object.to_owned();
    if stored.len() as u64 != u64::from(entry.stored_len) {
        return Err(TransformError::corrupt(
            segment,
            object(),
            format!(
                "{} stored bytes after the header, the header says {}",
                stored.len(),
                entry.stored_len
            ),
        ));
    }
    let overhead = if key.is_some() { TAG_LEN as u64 } else { 0 };
    if entry.encoding == Encoding::Raw
        && u64::from(entry.plaintext_len) + overhead != u64::from(entry.stored_len)
    {
        return Err(TransformError::corrupt(
            segment,
            object(),
            format!(
                "a raw body of {} bytes cannot hold {} bytes",
                entry.stored_len, entry.plaintext_len
            ),
        ));
    }
    // A zstd body's plaintext length comes from the header, which is checksummed, matched
    // against the digest recorded at copy time and, when encrypted, authenticated.
    let mut out = vec![0u8; entry.plaintext_len as usize];
    decode(
        segment,
        key,
        &object,
        stored,
        entry.crc,
        entry.encoding,
        |key, buf| {
            let aad = index_aad(segment, slot, entry.plaintext_len, entry.encoding);
            key.open(Domain::Index, slot as u64, &aad, buf)
                .map(|p| p.len())
        },
        &mut out,
    )?;
    Ok(out)
}

/// The GMAC of a header: an AES-GCM tag over no plaintext, with the header's authenticated
/// bytes as associated data.
pub(crate) fn header_tag(
    key: &DataKey,
    segment: &RemoteLogSegmentId,
    authenticated: &[u8],
) -> Result<[u8; TAG_LEN], TransformError> {
    let mut tag = Vec::with_capacity(TAG_LEN);
    key.seal(
        Domain::Header,
        0,
        &aad("header ", segment, authenticated),
        &mut tag,
        segment,
    )?;
    let mut out = [0u8; TAG_LEN];
    if tag.len() != TAG_LEN {
        return Err(TransformError::Crypto {
            segment: segment.clone(),
            operation: "sealing the header",
        });
    }
    out.copy_from_slice(&tag);
    Ok(out)
}

/// Checks a header's GMAC.
pub(crate) fn verify_header_tag(
    key: &DataKey,
    segment: &RemoteLogSegmentId,
    authenticated: &[u8],
    tag: &[u8; TAG_LEN],
) -> Result<(), TransformError> {
    let mut buf = *tag;
    key.open(
        Domain::Header,
        0,
        &aad("header ", segment, authenticated),
        &mut buf,
    )
    .map(|_| ())
    .ok_or_else(|| TransformError::Authentication {
        segment: segment.clone(),
        object: "transform header".to_owned(),
    })
}

#[cfg(all(test, feature = "encryption"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::keys::{KeyRing, MasterKey};
    use krabka_remote_storage::{TopicIdPartition, Uuid};

    fn segment() -> RemoteLogSegmentId {
        RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 0))
    }

    /// A chunk authenticates only at its own position, in a segment of its own chunk count,
    /// of its own segment: swapped, truncated-away or transplanted chunks fail.
    #[test]
    fn sealed_chunks_are_bound_to_position_count_and_segment() {
        let seg = segment();
        let ring = KeyRing::new(MasterKey::new([3; 32]));
        let (key, _) = DataKey::generate(&ring, &seg).unwrap();
        let mut enc = Encoder {
            segment: &seg,
            key: Some(&key),
            compressor: Compressor::new(ChunkCompression::None, &seg).unwrap(),
            chunk_count: 3,
        };
        let plain = vec![7u8; 100];
        let (c1, e1) = enc.chunk(1, plain.clone()).unwrap();
        let mut out = vec![0u8; 100];
        decode_chunk(&seg, Some(&key), 1, 3, &e1, &mut c1.clone(), &mut out).unwrap();
        assert_eq!(out, plain);
        let auth = |r: Result<(), TransformError>| {
            assert!(
                matches!(r, Err(TransformError::Authentication { .. })),
                "{r:?}"
            );
        };
        auth(decode_chunk(
            &seg,
            Some(&key),
            0,
            3,
            &e1,
            &mut c1.clone(),
            &mut out,
        ));
        auth(decode_chunk(
            &seg,
            Some(&key),
            1,
            2,
            &e1,
            &mut c1.clone(),
            &mut out,
        ));
        auth(decode_chunk(
            &segment(),
            Some(&key),
            1,
            3,
            &e1,
            &mut c1.clone(),
            &mut out,
        ));
        // A flipped byte with a matching CRC (a forger who can rewrite the table) fails too.
        let mut forged = c1.clone();
        forged[5] ^= 1;
        let e = ChunkEntry {
            crc: crc32fast::hash(&forged),
            ..e1
        };
        auth(decode_chunk(
            &seg,
            Some(&key),
            1,
            3,
            &e,
            &mut forged,
            &mut out,
        ));
        // Without a fixed table, the CRC catches it first.
        let mut flipped = c1.clone();
        flipped[5] ^= 1;
        assert!(matches!(
            decode_chunk(&seg, Some(&key), 1, 3, &e1, &mut flipped, &mut out),
            Err(TransformError::Corrupt { .. })
        ));
    }
}

#[cfg(all(test, feature = "zstd"))]
mod zstd_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use krabka_remote_storage::{TopicIdPartition, Uuid};

    #[test]
    fn incompressible_chunks_are_stored_as_they_are_and_text_is_compressed() {
        let seg = RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 0));
        let mut enc = Encoder {
            segment: &seg,
            key: None,
            compressor: Compressor::new(ChunkCompression::Zstd { level: 3 }, &seg).unwrap(),
            chunk_count: 3,
        };
        let mut random = vec![0u8; 4 * PROBE_BYTES];
        fastrand::Rng::with_seed(1).fill(&mut random);
        let (body, entry) = enc.chunk(0, random.clone()).unwrap();
        assert_eq!((entry.encoding, body), (Encoding::Raw, random.clone()));
        // Below the probe size the whole chunk is tried (and kept raw when it does not shrink).
        let (_, entry) = enc.chunk(1, random[..1000].to_vec()).unwrap();
        assert_eq!(entry.encoding, Encoding::Raw);
        let text: Vec<u8> = (0..4 * PROBE_BYTES)
            .map(|i| b"{\"level\":\"INFO\",\"n\":"[i % 20])
            .collect();
        let (mut body, entry) = enc.chunk(2, text.clone()).unwrap();
        assert_eq!(entry.encoding, Encoding::Zstd);
        assert!(body.len() < text.len() / 10);
        let mut out = vec![0u8; text.len()];
        decode_chunk(&seg, None, 2, 3, &entry, &mut body, &mut out).unwrap();
        assert_eq!(out, text);
        // A frame that decodes to more or fewer bytes than the chunk holds is corrupt.
        let mut short = vec![0u8; text.len() - 1];
        let r = decode_chunk(&seg, None, 2, 3, &entry, &mut body.clone(), &mut short);
        assert!(
            matches!(&r, Err(TransformError::Corrupt { segment, object, reason })
                if segment == &seg && object == "log chunk 2" && reason.starts_with("zstd: ")),
            "{r:?}"
        );
    }
}
