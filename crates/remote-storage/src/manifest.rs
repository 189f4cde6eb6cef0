//! Segment manifests: the small object every backend writes next to a segment's data, holding
//! the segment's full [`RemoteLogSegmentMetadata`], so the remote tier describes itself and the
//! metadata can be rebuilt from the bucket alone ([`crate::recovery`]).
//!
//! The manifest also says where the segment's objects stand, by the state it records
//! ([`ManifestState`]), so that cleanup never has to guess:
//! - a copy writes an **in-progress** manifest ([`encode_in_progress`], state
//!   `CopySegmentStarted`, with its writer's broker id, leader epochs and start time) **before**
//!   its first byte, and the **complete** manifest ([`encode`], state `CopySegmentFinished`)
//!   **last**, after the data and every index are durable, in place of the first;
//! - a delete replaces it with a **deleting** manifest ([`encode_deleting`], state
//!   `DeleteSegmentStarted`) **first**, removes the data and indexes, and removes the manifest
//!   **last**.
//!
//! So a complete manifest always means a complete copy; an in-progress one a copy that may still
//! be running until [`copy_abandoned_at`] (its writer never records it as finished after that);
//! a deleting one a delete that may be finished by anyone; and segment objects with no manifest
//! at all are not a state any writer leaves (a lost manifest, or a copy by a version before
//! these states): recovery keeps them. Its key is
//! [`layout::manifest_key`](crate::layout::manifest_key).
//!
//! ```text
//! magic "KRSM" | version u8 (=2) | 3 zero bytes | body length u32 | body | crc32 u32
//! ```
//! The body is the segment's metadata encoded as a metadata *add* event (the durable
//! metadata's event encoding, with its own CRC); the trailing CRC-32 covers every byte before
//! it. Version 1 manifests (written only when a copy was complete) are still read, as complete.
//! Specified byte by byte in `docs/format.md`.
//!
//! ```
//! use krabka_remote_storage::*;
//! use krabka_remote_storage::manifest::{self, ManifestState};
//!
//! let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
//! let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9)
//!     .segment_size_in_bytes(100)
//!     .build()?;
//! let bytes = manifest::encode(&m);
//! let read = manifest::decode(&bytes, "k")?;
//! assert_eq!(ManifestState::of(&read), ManifestState::Complete);
//! assert_eq!(read.start_offset(), 0);
//! let started = manifest::decode(&manifest::encode_in_progress(&m), "k")?;
//! assert_eq!(ManifestState::of(&started), ManifestState::InProgress);
//! let cut = manifest::decode(&bytes[..bytes.len() - 1], "k");
//! assert!(matches!(cut, Err(RemoteStorageError::Corrupt { .. })), "{cut:?}");
//! # Ok::<(), RemoteStorageError>(())
//! ```

use crate::error::RemoteStorageError;
use crate::metadata::event::MetadataEvent;
use crate::model::{RemoteLogSegmentMetadata, RemoteLogSegmentState};

/// The first four bytes of every manifest.
pub const MANIFEST_MAGIC: &[u8; 4] = b"KRSM";
/// The manifest format version written by [`encode`], [`encode_in_progress`] and
/// [`encode_deleting`].
pub const MANIFEST_VERSION: u8 = 2;
/// The first manifest version: written only for complete copies (whatever state its body
/// records); [`decode`] reads it as complete.
pub const MANIFEST_VERSION_1: u8 = 1;

/// How long after its start (the in-progress manifest's event time) a copy may still finish:
/// 6 hours. A writer never records a copy as finished when its upload returns later than this
/// (it discards the attempt instead), so after it the copy's objects are unneeded.
pub const COPY_ABANDON_AFTER_MS: i64 = 6 * 3600 * 1000;

/// How far apart the clocks of a writer and of a cleanup on another machine are assumed to be
/// at most: 1 hour, added to [`COPY_ABANDON_AFTER_MS`] before a cleanup deletes an in-progress
/// copy.
pub const CLOCK_SKEW_ALLOWANCE_MS: i64 = 3600 * 1000;

/// The wall-clock time (ms) from which a cleanup may delete the objects of a copy whose
/// in-progress manifest is `metadata`: its start plus [`COPY_ABANDON_AFTER_MS`] plus
/// [`CLOCK_SKEW_ALLOWANCE_MS`].
pub fn copy_abandoned_at(metadata: &RemoteLogSegmentMetadata) -> i64 {
    metadata
        .event_timestamp_ms()
        .saturating_add(COPY_ABANDON_AFTER_MS)
        .saturating_add(CLOCK_SKEW_ALLOWANCE_MS)
}

/// Where a segment's objects stand, as its manifest says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ManifestState {
    /// A copy has begun and may still be running (until [`copy_abandoned_at`]).
    InProgress,
    /// The copy is complete: the data and every index are durable.
    Complete,
    /// A delete has begun: the segment is gone for every reader, and anyone may finish it.
    Deleting,
}

impl ManifestState {
    /// The state a decoded manifest's metadata records.
    pub fn of(metadata: &RemoteLogSegmentMetadata) -> Self {
        match metadata.state() {
            RemoteLogSegmentState::CopySegmentStarted => Self::InProgress,
            RemoteLogSegmentState::CopySegmentFinished => Self::Complete,
            RemoteLogSegmentState::DeleteSegmentStarted
            | RemoteLogSegmentState::DeleteSegmentFinished => Self::Deleting,
        }
    }
}
/// Magic, version, reserved bytes and body length.
const HEADER_LEN: usize = 4 + 1 + 3 + 4;
/// The largest manifest [`decode`] accepts: far above any real one (a 249-byte topic name and
/// capped custom metadata), so a listing can never make recovery read a huge object as one.
pub const MAX_MANIFEST_LEN: u64 = 64 * 1024;

/// Encodes the **complete** manifest of a segment (as copied, with the custom metadata its copy
/// returned; state `CopySegmentFinished`), written last by a copy.
pub fn encode(metadata: &RemoteLogSegmentMetadata) -> Vec<u8> {
    encode_in(metadata, RemoteLogSegmentState::CopySegmentFinished)
}

/// Encodes the **in-progress** manifest of a copy (state `CopySegmentStarted`), written before
/// its first byte: the copy's writer (broker id, leader epochs) and start (event time).
pub fn encode_in_progress(metadata: &RemoteLogSegmentMetadata) -> Vec<u8> {
    encode_in(metadata, RemoteLogSegmentState::CopySegmentStarted)
}

/// Encodes the **deleting** manifest of a segment (state `DeleteSegmentStarted`), written
/// first by a delete in place of the manifest there.
pub fn encode_deleting(metadata: &RemoteLogSegmentMetadata) -> Vec<u8> {
    encode_in(metadata, RemoteLogSegmentState::DeleteSegmentStarted)
}

fn encode_in(metadata: &RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> Vec<u8> {
    let body = MetadataEvent::Add(metadata.with_state(state)).encode();
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

/// Decodes and checks a manifest read from `location` (named in the error). The metadata's
/// state is the manifest's ([`ManifestState::of`]); a version 1 manifest's is
/// `CopySegmentFinished`.
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
    if version != MANIFEST_VERSION && version != MANIFEST_VERSION_1 {
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
        Ok(MetadataEvent::Add(m)) if version == MANIFEST_VERSION_1 => {
            Ok(m.with_state(RemoteLogSegmentState::CopySegmentFinished))
        }
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
        assert_eq!(bytes[4], MANIFEST_VERSION);
        let finished = m.with_state(RemoteLogSegmentState::CopySegmentFinished);
        assert_eq!(decode(&bytes, "x").unwrap(), finished);
        for (bytes, state) in [
            (encode_in_progress(&m), ManifestState::InProgress),
            (encode(&m), ManifestState::Complete),
            (encode_deleting(&m), ManifestState::Deleting),
        ] {
            let read = decode(&bytes, "x").unwrap();
            assert_eq!(ManifestState::of(&read), state);
            assert_eq!(read.with_state(m.state()), m);
        }
    }

    #[test]
    fn a_version_1_manifest_reads_as_complete_whatever_state_its_body_holds() {
        // Version 1 copies wrote the metadata as given to the copy (CopySegmentStarted), and
        // only once the copy was complete.
        let m = sample();
        assert_eq!(m.state(), RemoteLogSegmentState::CopySegmentStarted);
        let mut bytes = encode_in_progress(&m);
        bytes[4] = MANIFEST_VERSION_1;
        let len = bytes.len();
        let crc = crc32fast::hash(&bytes[..len - 4]);
        bytes[len - 4..].copy_from_slice(&crc.to_le_bytes());
        let read = decode(&bytes, "x").unwrap();
        assert_eq!(ManifestState::of(&read), ManifestState::Complete);
        bytes[4] = 3;
        let crc = crc32fast::hash(&bytes[..len - 4]);
        bytes[len - 4..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&bytes, "x"),
            Err(RemoteStorageError::Corrupt { .. })
        ));
    }

    #[test]
    fn an_in_progress_copy_is_abandoned_after_its_limit_and_the_skew_allowance() {
        let m = sample();
        assert_eq!(
            copy_abandoned_at(&m),
            1234 + COPY_ABANDON_AFTER_MS + CLOCK_SKEW_ALLOWANCE_MS
        );
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_refused() {
        let bytes = encode(&sample());
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let flipped = decode(&b, "key-x");
            assert!(
                matches!(&flipped, Err(RemoteStorageError::Corrupt { location, .. }) if location == "key-x"),
                "flip at {i}: {flipped:?}"
            );
            let cut = decode(&bytes[..i], "key-x");
            assert!(
                matches!(&cut, Err(RemoteStorageError::Corrupt { location, .. }) if location == "key-x"),
                "cut at {i}: {cut:?}"
            );
        }
    }
}
