//! Segment manifests: the small object every backend writes next to a segment's data, holding
//! the segment's full [`RemoteLogSegmentMetadata`], so the remote tier describes itself and the
//! metadata can be rebuilt from the bucket alone ([`crate::recovery`]).
//!
//! A copy writes the manifest **last**, after the data and every index are durable, so a
//! manifest always means a complete copy; a delete removes it **first**, so a manifest never
//! points at deleted data. Its key is [`layout::manifest_key`](crate::layout::manifest_key).
//!
//! ```text
//! magic "KRSM" | version u8 (=1) | 3 zero bytes | body length u32 | body | crc32 u32
//! ```
//! The body is the segment's metadata encoded as a metadata *add* event (the durable
//! metadata's event encoding, with its own CRC); the trailing CRC-32 covers every byte before
//! it. Specified byte by byte in `docs/format.md`.
//!
//! ```
//! use krabka_remote_storage::*;
//!
//! let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
//! let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9)
//!     .segment_size_in_bytes(100)
//!     .build()?;
//! let bytes = manifest::encode(&m);
//! assert_eq!(manifest::decode(&bytes, "k")?, m);
//! assert!(manifest::decode(&bytes[..bytes.len() - 1], "k").is_err());
//! # Ok::<(), RemoteStorageError>(())
//! ```

use crate::error::RemoteStorageError;
use crate::metadata::event::MetadataEvent;
use crate::model::RemoteLogSegmentMetadata;

/// The first four bytes of every manifest.
pub const MANIFEST_MAGIC: &[u8; 4] = b"KRSM";
/// The manifest format version written by [`encode`].
pub const MANIFEST_VERSION: u8 = 1;
/// Magic, version, reserved bytes and body length.
const HEADER_LEN: usize = 4 + 1 + 3 + 4;
/// The largest manifest [`decode`] accepts: far above any real one (a 249-byte topic name and
/// capped custom metadata), so a listing can never make recovery read a huge object as one.
pub const MAX_MANIFEST_LEN: u64 = 64 * 1024;

/// Encodes the manifest of a segment (as copied, with the custom metadata its copy returned).
pub fn encode(metadata: &RemoteLogSegmentMetadata) -> Vec<u8> {
    let body = MetadataEvent::Add(metadata.clone()).encode();
    let mut out = Vec::with_capacity(HEADER_LEN + body.len() + 4);
    out.extend_from_slice(MANIFEST_MAGIC);
    out.push(MANIFEST_VERSION);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes and checks a manifest read from `location` (named in the error).
///
/// # Errors
/// [`RemoteStorageError::Corrupt`] naming `location` and what is wrong: too short, bad magic,
/// unknown version, non-zero reserved bytes, a body length that does not match, a checksum
/// mismatch, or a body that is not valid segment metadata.
pub fn decode(
    bytes: &[u8],
    location: &str,
) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
    let corrupt = |reason: String| RemoteStorageError::Corrupt {
        location: location.to_owned(),
        reason: format!("manifest: {reason}"),
    };
    if bytes.len() < HEADER_LEN + 4 {
        return Err(corrupt(format!(
            "{} bytes, shorter than a header",
            bytes.len()
        )));
    }
    let (content, crc_bytes) = bytes
        .split_last_chunk::<4>()
        .ok_or_else(|| corrupt("no checksum".to_owned()))?;
    let stored = u32::from_le_bytes(*crc_bytes);
    let computed = crc32fast::hash(content);
    if stored != computed {
        return Err(corrupt(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        )));
    }
    if content.get(..4) != Some(MANIFEST_MAGIC.as_slice()) {
        return Err(corrupt("bad magic".to_owned()));
    }
    let version = content.get(4).copied().unwrap_or(0);
    if version != MANIFEST_VERSION {
        return Err(corrupt(format!("unsupported version {version}")));
    }
    if content.get(5..8) != Some([0u8; 3].as_slice()) {
        return Err(corrupt("reserved bytes are not zero".to_owned()));
    }
    let len_bytes: [u8; 4] = content
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| corrupt("truncated header".to_owned()))?;
    let body = content.get(HEADER_LEN..).unwrap_or_default();
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len != body.len() {
        return Err(corrupt(format!(
            "body length {len} but {} body bytes",
            body.len()
        )));
    }
    match MetadataEvent::decode(body) {
        Ok(MetadataEvent::Add(m)) => Ok(m),
        Ok(other) => Err(corrupt(format!(
            "body is not segment metadata but {other:?}"
        ))),
        Err(e) => Err(corrupt(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CustomMetadata, RemoteLogSegmentId, TopicIdPartition};
    use std::collections::BTreeMap;
    use uuid::Uuid;

    fn sample() -> RemoteLogSegmentMetadata {
        let tp = TopicIdPartition::new(Uuid::from_u128(5), "orders", 2);
        RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::new(tp, Uuid::from_u128(9)), 10, 20)
            .max_timestamp_ms(77)
            .event_timestamp_ms(1234)
            .segment_size_in_bytes(4096)
            .segment_leader_epochs(BTreeMap::from([(3, 10), (4, 15)]))
            .custom_metadata(Some(CustomMetadata::new(&b"etag"[..])))
            .build()
            .unwrap()
    }

    #[test]
    fn round_trips_every_field() {
        let m = sample();
        let bytes = encode(&m);
        assert_eq!(&bytes[..4], MANIFEST_MAGIC);
        assert_eq!(decode(&bytes, "x").unwrap(), m);
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_refused() {
        let bytes = encode(&sample());
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let err = decode(&b, "key-x").unwrap_err();
            assert!(err.to_string().contains("key-x"), "{err}");
            assert!(decode(&bytes[..i], "key-x").is_err());
        }
    }
}
