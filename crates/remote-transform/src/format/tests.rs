//! Round trips and damage of headers and records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use krabka_remote_storage::{CustomMetadata, RemoteLogSegmentId, TopicIdPartition};

use crate::error::TransformError;

/// Whether `r` is a [`TransformError::Corrupt`] of `object` of `seg` whose reason contains
/// `why`.
fn is_corrupt<T>(
    r: &Result<T, TransformError>,
    seg: &RemoteLogSegmentId,
    object: &str,
    why: &str,
) -> bool {
    matches!(r, Err(TransformError::Corrupt { segment, object: o, reason })
        if segment == seg && o == object && reason.contains(why))
}

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
        let r = Header::decode(&bytes[..cut], &seg);
        let why = if cut < 4 {
            "is too short"
        } else {
            "checksum mismatch"
        };
        assert!(
            is_corrupt(&r, &seg, "transform header", why),
            "cut at {cut}: {r:?}"
        );
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x40;
        let r = Header::decode(&b, &seg);
        assert!(
            is_corrupt(&r, &seg, "transform header", "checksum mismatch"),
            "flip at {i}: {r:?}"
        );
    }
    // Random bytes with a valid CRC still never panic.
    let mut rng = fastrand::Rng::with_seed(5);
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
        for key_id in [None, Some(KeyId::from_bytes([9; 8]))] {
            let r = Record {
                flags: FLAG_AES_GCM,
                header_len: 200,
                stored_size: 5000,
                plaintext_size: 9000,
                digest: [7; 16],
                key_id,
                inner: inner.clone(),
            };
            let cm = r.encode();
            assert!(cm.len() <= 128);
            let magic: &[u8] = if key_id.is_some() { b"KTX2" } else { b"KTX1" };
            assert!(cm.value().starts_with(magic));
            assert_eq!(Record::decode(Some(&cm), &seg).unwrap(), Some(r));
        }
    }
    // A key id only with encryption.
    let plain = Record {
        flags: FLAG_ZSTD,
        header_len: 200,
        stored_size: 5000,
        plaintext_size: 9000,
        digest: [7; 16],
        key_id: Some(KeyId::from_bytes([9; 8])),
        inner: None,
    };
    let r = Record::decode(Some(&plain.encode()), &seg);
    assert!(
        is_corrupt(
            &r,
            &seg,
            "custom metadata",
            "a key id recorded for an unencrypted segment"
        ),
        "{r:?}"
    );
    assert_eq!(Record::decode(None, &seg).unwrap(), None);
    let foreign = CustomMetadata::new(b"s3v1\0\0\0\0\0\0\0\0".to_vec());
    assert_eq!(Record::decode(Some(&foreign), &seg).unwrap(), None);
    for short in [
        &b"KTX1\x01"[..],
        &[b"KTX2\x02".as_slice(), &[0; 34]].concat(),
    ] {
        let short = CustomMetadata::new(short.to_vec());
        let r = Record::decode(Some(&short), &seg);
        assert!(
            is_corrupt(&r, &seg, "custom metadata", "too short"),
            "{r:?}"
        );
    }
}
