//! Tampering, swapping, truncation, replay, wrong and rotated keys: every one is a typed
//! [`TransformError`] naming the segment, never wrong bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::sync::Arc;

use krabka_remote_storage::{
    CustomMetadata, IndexType, RemoteLogSegmentMetadata, RemoteStorageError, RemoteStorageManager,
};
use krabka_remote_transform::{
    ChunkCompression, KeyRing, MasterKey, TransformConfig, TransformError, Transforming,
};
use support::*;

const CHUNK: u32 = 4096;

fn cfg(mode: Mode) -> TransformConfig {
    config(mode).with_chunk_size(CHUNK).unwrap()
}

/// A fresh reader (empty header cache) over `store` with `mode`'s keys.
fn reader(store: &Arc<MapStore>, mode: Mode) -> Transforming {
    Transforming::new(store.clone(), cfg(mode))
}

/// Writes a segment of random bytes (every chunk stored raw, so all full chunks have the same
/// stored length) and returns it with its metadata.
fn written(store: &Arc<MapStore>, mode: Mode, len: usize) -> (Segment, RemoteLogSegmentMetadata) {
    let s = segment_of(&tp(), None, payload(9, len, false), true);
    let m = copy(&reader(store, mode), &s);
    (s, m)
}

fn header_len(store: &Arc<MapStore>, mode: Mode, m: &RemoteLogSegmentMetadata) -> usize {
    reader(store, mode)
        .inspect(m)
        .unwrap()
        .unwrap()
        .header_bytes as usize
}

fn err<T: std::fmt::Debug>(r: Result<T, RemoteStorageError>) -> RemoteStorageError {
    r.expect_err("expected an error")
}

#[test]
fn tampered_chunks_are_corrupt_and_the_others_still_read() {
    for mode in MODES {
        let store = MapStore::new();
        let (s, m) = written(&store, mode, 5 * CHUNK as usize);
        let id = m.remote_log_segment_id();
        let mlen = header_len(&store, mode, &m);
        store.mutate(id, None, |o| {
            o[mlen + 10] ^= 0x01;
        });
        let e = err(reader(&store, mode).fetch_log_segment(&m, 0, Some(99)));
        let t = transform_error(&e, id);
        assert!(
            matches!(t, TransformError::Corrupt { object, .. } if object == "log chunk 0"),
            "{mode:?}: {t}"
        );
        // A whole read fails too; chunks that were not touched still read.
        let e = err(reader(&store, mode).fetch_log_segment(&m, 0, None));
        let t = transform_error(&e, id);
        assert!(
            matches!(t, TransformError::Corrupt { object, .. } if object == "log chunk 0"),
            "{mode:?}: {t}"
        );
        let got = reader(&store, mode)
            .fetch_log_segment(&m, CHUNK, Some(3 * CHUNK - 1))
            .unwrap();
        assert_eq!(got, s.log[CHUNK as usize..3 * CHUNK as usize], "{mode:?}");
    }
}

#[test]
fn swapped_chunks_are_detected() {
    for mode in MODES {
        let store = MapStore::new();
        let (_, m) = written(&store, mode, 4 * CHUNK as usize);
        let id = m.remote_log_segment_id();
        let mlen = header_len(&store, mode, &m);
        let object = store.get(id, None).unwrap();
        let stored_chunk = (object.len() - mlen) / 4;
        store.mutate(id, None, |o| {
            let (a, b) = (mlen, mlen + stored_chunk);
            let first = o[a..b].to_vec();
            o.copy_within(b..b + stored_chunk, a);
            o[b..b + stored_chunk].copy_from_slice(&first);
        });
        let e = err(reader(&store, mode).fetch_log_segment(&m, 0, Some(2 * CHUNK - 1)));
        assert!(
            matches!(transform_error(&e, id), TransformError::Corrupt { .. }),
            "{mode:?}: {e}"
        );
    }
}

/// Where the chunk table starts in a header: after the fixed part, the encryption block and
/// the index table (`docs/format.md`).
fn chunk_table_at(encrypted: bool) -> usize {
    56 + if encrypted { 80 } else { 0 } + 5 * 14
}

/// A forger who can rewrite both the bucket and the custom metadata (swaps two chunks and their
/// table entries, fixes the header CRC and the recorded digest) is stopped by the header's
/// GMAC when the segment is encrypted.
#[test]
fn forged_headers_fail_authentication_when_encrypted() {
    for mode in [Mode::Encrypted, Mode::Both] {
        let store = MapStore::new();
        let (_, m) = written(&store, mode, 4 * CHUNK as usize);
        let id = m.remote_log_segment_id();
        let mlen = header_len(&store, mode, &m);
        let mut object = store.get(id, None).unwrap();
        let stored_chunk = (object.len() - mlen) / 4;
        let (a, b) = (mlen, mlen + stored_chunk);
        let first = object[a..b].to_vec();
        object.copy_within(b..b + stored_chunk, a);
        object[b..b + stored_chunk].copy_from_slice(&first);
        let t = chunk_table_at(true);
        let entry0 = object[t..t + 9].to_vec();
        object.copy_within(t + 9..t + 18, t);
        object[t + 9..t + 18].copy_from_slice(&entry0);
        let crc = crc32fast::hash(&object[..mlen - 4]);
        object[mlen - 4..mlen].copy_from_slice(&crc.to_le_bytes());
        store.put(id, None, object.clone());
        let forged_cm = forge_digest(&m, &object[..mlen]);
        let m2 = m.with_custom_metadata(Some(forged_cm));
        let e = err(reader(&store, mode).fetch_log_segment(&m2, 0, Some(10)));
        assert!(
            matches!(
                transform_error(&e, id),
                TransformError::Authentication { object, .. } if object == "transform header"
            ),
            "{mode:?}: {e}"
        );
    }
}

/// The custom metadata with the header digest replaced by that of `header`.
fn forge_digest(m: &RemoteLogSegmentMetadata, header: &[u8]) -> CustomMetadata {
    use sha2::{Digest, Sha256};
    let mut cm = m.custom_metadata().unwrap().value().to_vec();
    let d = Sha256::digest(header);
    cm[17..33].copy_from_slice(&d[..16]);
    CustomMetadata::new(cm)
}

#[test]
fn tampered_or_replaced_headers_and_custom_metadata_are_corrupt() {
    for mode in MODES {
        let store = MapStore::new();
        let (s, m) = written(&store, mode, 3 * CHUNK as usize);
        let id = m.remote_log_segment_id();
        let original = store.get(id, None).unwrap();
        // A flipped byte in the header at the head of the `.log`: the header is read from the
        // intact copy at the head of an index object instead (by a reader that fetched no
        // index before).
        store.mutate(id, None, |o| o[30] ^= 0x80);
        let got = reader(&store, mode)
            .fetch_log_segment(&m, 0, Some(99))
            .unwrap();
        assert_eq!(got, s.log[..100], "{mode:?}");
        // With every copy of it flipped too: the header is corrupt.
        let copies: Vec<IndexType> = s.indexes.iter().map(|(t, _)| *t).collect();
        assert!(copies.contains(&IndexType::Offset), "{copies:?}");
        for t in &copies {
            store.mutate(id, Some(*t), |o| o[30] ^= 0x80);
        }
        let e = err(reader(&store, mode).fetch_log_segment(&m, 0, Some(0)));
        assert!(
            matches!(transform_error(&e, id), TransformError::Corrupt { object, .. } if object == "transform header")
        );
        for t in &copies {
            store.mutate(id, Some(*t), |o| o[30] ^= 0x80);
        }
        store.put(id, None, original);
        // A flipped digest in the custom metadata.
        let mut cm = m.custom_metadata().unwrap().value().to_vec();
        cm[20] ^= 1;
        let bad = m.with_custom_metadata(Some(CustomMetadata::new(cm)));
        let e = err(reader(&store, mode).fetch_log_segment(&bad, 0, Some(0)));
        assert!(
            matches!(transform_error(&e, id), TransformError::Corrupt { reason, .. } if reason.contains("replayed")),
            "{e}"
        );
        let e = err(reader(&store, mode).fetch_index(&bad, IndexType::Offset));
        transform_error(&e, id);
        // Truncated custom metadata.
        let short = m.with_custom_metadata(Some(CustomMetadata::new(
            m.custom_metadata().unwrap().value().slice(..10),
        )));
        let e = err(reader(&store, mode).fetch_log_segment(&short, 0, Some(0)));
        transform_error(&e, id);
        // Delete still works with damaged custom metadata.
        reader(&store, mode)
            .delete_log_segment_data(&short)
            .unwrap();
        assert!(store.get(id, None).is_none());
    }
}

#[test]
fn a_replayed_older_copy_is_detected() {
    for mode in MODES {
        let store = MapStore::new();
        let tp = tp();
        let first = segment_of(&tp, None, payload(1, 3 * CHUNK as usize, true), true);
        let w = reader(&store, mode);
        let m1 = copy(&w, &first);
        let id = m1.remote_log_segment_id().clone();
        let old: Vec<_> = [None]
            .into_iter()
            .chain(IndexType::ALL.map(Some))
            .map(|o| (o, store.get(&id, o)))
            .collect();
        let second = segment_of(
            &tp,
            Some(id.id()),
            payload(2, 3 * CHUNK as usize, true),
            true,
        );
        let m2 = copy(&w, &second);
        for (o, bytes) in old {
            if let Some(b) = bytes {
                store.put(&id, o, b);
            }
        }
        let e = err(reader(&store, mode).fetch_log_segment(&m2, 0, Some(10)));
        transform_error(&e, &id);
        let e = err(reader(&store, mode).fetch_index(&m2, IndexType::Timestamp));
        transform_error(&e, &id);
        // With the first copy's metadata, its (replayed) objects read fine.
        assert_eq!(
            reader(&store, mode)
                .fetch_log_segment(&m1, 0, None)
                .unwrap(),
            first.log
        );
    }
}

#[test]
fn truncated_objects_are_corrupt() {
    for mode in MODES {
        let store = MapStore::new();
        let (s, m) = written(&store, mode, 3 * CHUNK as usize + 100);
        let id = m.remote_log_segment_id();
        let mlen = header_len(&store, mode, &m);
        let last = s.log.len() as u32 - 1;
        store.mutate(id, None, |o| {
            o.pop();
        });
        let e = err(reader(&store, mode).fetch_log_segment(&m, last, Some(last)));
        assert!(
            matches!(transform_error(&e, id), TransformError::Corrupt { reason, .. } if reason.contains("truncated")),
            "{mode:?}: {e}"
        );
        store.mutate(id, None, |o| o.truncate(mlen / 2));
        let e = err(reader(&store, mode).fetch_log_segment(&m, 0, Some(0)));
        transform_error(&e, id);
        store.mutate(id, Some(IndexType::Offset), |o| o.truncate(o.len() - 1));
        let e = err(reader(&store, mode).fetch_index(&m, IndexType::Offset));
        transform_error(&e, id);
        store.mutate(id, Some(IndexType::Timestamp), |o| o.truncate(mlen - 1));
        let e = err(reader(&store, mode).fetch_index(&m, IndexType::Timestamp));
        transform_error(&e, id);
    }
}

#[test]
fn tampered_indexes_are_detected() {
    for mode in MODES {
        let store = MapStore::new();
        let (s, m) = written(&store, mode, 2 * CHUNK as usize);
        let id = m.remote_log_segment_id();
        for (t, _) in &s.indexes {
            store.mutate(id, Some(*t), |o| {
                let n = o.len();
                o[n - 1] ^= 0x10;
            });
            let e = err(reader(&store, mode).fetch_index(&m, *t));
            transform_error(&e, id);
        }
        // The index object's own header copy must be the recorded one.
        let store = MapStore::new();
        let (_, m) = written(&store, mode, 2 * CHUNK as usize);
        let id = m.remote_log_segment_id();
        store.mutate(id, Some(IndexType::Offset), |o| o[40] ^= 1);
        let e = err(reader(&store, mode).fetch_index(&m, IndexType::Offset));
        transform_error(&e, id);
        // Also when the header is already cached from the `.log`.
        let r = reader(&store, mode);
        r.fetch_log_segment(&m, 0, Some(0)).unwrap();
        let e = err(r.fetch_index(&m, IndexType::Offset));
        transform_error(&e, id);
    }
}

#[test]
fn a_wrong_or_missing_key_is_missing_key_naming_the_segment() {
    for mode in [Mode::Encrypted, Mode::Both] {
        let store = MapStore::new();
        let (_, m) = written(&store, mode, 2 * CHUNK as usize);
        let id = m.remote_log_segment_id();
        let written_with = key(0x5a).id();
        let wrong = Transforming::new(
            store.clone(),
            TransformConfig::new().with_encryption(ring(0x11)),
        );
        for e in [
            err(wrong.fetch_log_segment(&m, 0, Some(0))),
            err(wrong.fetch_index(&m, IndexType::Offset)),
        ] {
            match transform_error(&e, id) {
                TransformError::MissingKey {
                    key_id, configured, ..
                } => {
                    assert_eq!(*key_id, written_with);
                    assert!(configured);
                }
                other => panic!("{mode:?}: {other}"),
            }
            assert!(e.to_string().contains(&written_with.to_string()), "{e}");
        }
        let none = Transforming::new(store.clone(), TransformConfig::new());
        let e = err(none.fetch_log_segment(&m, 0, Some(0)));
        assert!(matches!(
            transform_error(&e, id),
            TransformError::MissingKey {
                configured: false,
                ..
            }
        ));
        assert!(
            e.to_string().contains("no encryption key is configured"),
            "{e}"
        );
        // A different key registered under the segment's key id.
        let impostor = Transforming::new(
            store.clone(),
            TransformConfig::new().with_encryption(Arc::new(KeyRing::new(MasterKey::with_id(
                written_with,
                [0x11; 32],
            )))),
        );
        let e = err(impostor.fetch_log_segment(&m, 0, Some(0)));
        assert!(matches!(
            transform_error(&e, id),
            TransformError::WrongKey { key_id, .. } if *key_id == written_with
        ));
    }
}

#[test]
fn rotated_keys_keep_old_segments_readable() {
    let store = MapStore::new();
    let (a, b) = (key(0xa1), key(0xb2));
    let old_writer = Transforming::new(
        store.clone(),
        TransformConfig::new()
            .with_compression(ChunkCompression::Zstd { level: 3 })
            .with_encryption(Arc::new(KeyRing::new(a.clone()))),
    );
    let s1 = segment_of(&tp(), None, payload(1, 20_000, true), true);
    let m1 = copy(&old_writer, &s1);
    let rotated = Transforming::new(
        store.clone(),
        TransformConfig::new()
            .with_compression(ChunkCompression::Zstd { level: 3 })
            .with_encryption(Arc::new(KeyRing::new(b.clone()).with_old_key(a.clone()))),
    );
    let s2 = segment_of(&tp(), None, payload(2, 20_000, true), true);
    let m2 = copy(&rotated, &s2);
    assert_eq!(rotated.inspect(&m1).unwrap().unwrap().key_id, Some(a.id()));
    assert_eq!(rotated.inspect(&m2).unwrap().unwrap().key_id, Some(b.id()));
    let fresh = Transforming::new(store.clone(), rotated.config().clone());
    for (m, s) in [(&m1, &s1), (&m2, &s2)] {
        assert_eq!(fresh.fetch_log_segment(m, 0, None).unwrap(), s.log);
        for (t, want) in &s.indexes {
            assert_eq!(&fresh.fetch_index(m, *t).unwrap(), want);
        }
    }
    // Once the old key is dropped, only the new segment reads.
    let new_only = Transforming::new(
        store.clone(),
        TransformConfig::new().with_encryption(Arc::new(KeyRing::new(b.clone()))),
    );
    assert_eq!(new_only.fetch_log_segment(&m2, 0, None).unwrap(), s2.log);
    let e = err(new_only.fetch_log_segment(&m1, 0, None));
    assert!(matches!(
        transform_error(&e, m1.remote_log_segment_id()),
        TransformError::MissingKey { key_id, .. } if *key_id == a.id()
    ));
}

#[test]
fn keys_never_appear_in_debug_output_or_errors() {
    let store = MapStore::new();
    let secret = [0xc3u8; 32];
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("master.key");
    write(&key_file, hex.as_bytes());
    let config = TransformConfig::from_options(Some("zstd:3"), Some(&key_file)).unwrap();
    let w = Transforming::new(store.clone(), config.clone());
    let s = segment_of(&tp(), None, payload(3, 10_000, true), false);
    let m = copy(&w, &s);
    store.mutate(m.remote_log_segment_id(), None, |o| {
        let n = o.len();
        o[n - 1] ^= 1;
    });
    let e = err(Transforming::new(store.clone(), config.clone()).fetch_log_segment(&m, 0, None));
    let wrong = Transforming::new(
        store.clone(),
        TransformConfig::new().with_encryption(ring(1)),
    );
    let e2 = err(wrong.fetch_log_segment(&m, 0, None));
    for shown in [
        format!("{w:?}"),
        format!("{config:?}"),
        format!("{config:#?}"),
        format!("{e}"),
        format!("{e:?}"),
        format!("{e2}"),
        format!("{e2:?}"),
    ] {
        assert!(!shown.contains(&hex[..16]), "{shown}");
        assert!(!shown.contains("195, 195"), "{shown}");
        assert!(!shown.contains("0xc3, 0xc3"), "{shown}");
    }
}

#[test]
fn custom_metadata_over_the_cap_fails_the_copy() {
    let store = MapStore::new();
    let w = Transforming::new(store, config(Mode::Zstd).with_custom_metadata_max_bytes(16));
    let s = segment_of(&tp(), None, payload(3, 1000, true), false);
    let e = err(w.copy_log_segment_data(&s.metadata, &s.data));
    assert!(matches!(
        transform_error(&e, s.metadata.remote_log_segment_id()),
        TransformError::TooLarge { object, .. } if object == "custom metadata"
    ));
}
