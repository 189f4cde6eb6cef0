//! A mixed bucket: segments written untransformed, with zstd at two levels and chunk sizes,
//! encrypted under two master keys, and both, all on one filesystem root. Each segment records
//! its transform, so one reader with the keys reads them all; a reader without keys reads
//! everything but the encrypted ones, which fail with `MissingKey`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::sync::Arc;

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{RemoteStorageManager, TopicIdPartition, Uuid};
use krabka_remote_transform::{
    ChunkCompression, KeyRing, TransformConfig, TransformError, Transforming,
};
use support::*;

#[test]
fn one_reader_reads_a_bucket_of_mixed_settings() {
    let root = tempfile::tempdir().unwrap();
    let fs: Arc<dyn RemoteStorageManager> = Arc::new(FsRemoteStorage::new(root.path()).unwrap());
    let tp = TopicIdPartition::new(Uuid::new_v4(), "mixed", 0);
    let (a, b) = (key(0xa1), key(0xb2));
    let writers: Vec<(&str, Option<TransformConfig>)> = vec![
        ("untransformed, written straight to the backend", None),
        ("pass-through decorator", Some(TransformConfig::new())),
        (
            "zstd:1, 64 KiB chunks",
            Some(
                TransformConfig::new()
                    .with_compression(ChunkCompression::Zstd { level: 1 })
                    .with_chunk_size(64 << 10)
                    .unwrap(),
            ),
        ),
        (
            "zstd:19, 16 KiB chunks",
            Some(
                TransformConfig::new()
                    .with_compression(ChunkCompression::Zstd { level: 19 })
                    .with_chunk_size(16 << 10)
                    .unwrap(),
            ),
        ),
        (
            "AES-256-GCM under key a",
            Some(TransformConfig::new().with_encryption(Arc::new(KeyRing::new(a.clone())))),
        ),
        (
            "zstd + AES-256-GCM under key b, 4 KiB chunks",
            Some(
                TransformConfig::new()
                    .with_compression(ChunkCompression::Zstd { level: 3 })
                    .with_encryption(Arc::new(KeyRing::new(b.clone())))
                    .with_chunk_size(4 << 10)
                    .unwrap(),
            ),
        ),
    ];
    let mut written = Vec::new();
    for (i, (name, config)) in writers.into_iter().enumerate() {
        let s = segment_of(
            &tp,
            None,
            payload(i as u64, 150_000 + i * 1000, i % 2 == 0),
            true,
        );
        let m = match &config {
            None => copy(fs.as_ref(), &s),
            Some(c) => copy(&Transforming::new(fs.clone(), c.clone()), &s),
        };
        let encrypted = config.as_ref().is_some_and(TransformConfig::encrypts);
        written.push((name, s, m, encrypted));
    }

    let keyed = Transforming::new(
        fs.clone(),
        TransformConfig::new().with_encryption(Arc::new(KeyRing::new(b.clone()).with_old_key(a))),
    );
    let plain = Transforming::new(fs.clone(), TransformConfig::new());
    for (name, s, m, encrypted) in &written {
        let n = s.log.len() as u32;
        assert_eq!(
            keyed.fetch_log_segment(m, 0, None).unwrap(),
            s.log,
            "{name}"
        );
        assert_eq!(
            keyed.fetch_log_segment(m, n / 3, Some(n / 2)).unwrap(),
            s.log[(n / 3) as usize..=(n / 2) as usize],
            "{name}"
        );
        for (t, want) in &s.indexes {
            assert_eq!(&keyed.fetch_index(m, *t).unwrap(), want, "{name} {t}");
        }
        assert_eq!(
            Transforming::is_transformed(m).unwrap(),
            name.contains("zstd") || name.contains("AES"),
            "{name}"
        );
        if *encrypted {
            let e = plain.fetch_log_segment(m, 0, Some(0)).unwrap_err();
            assert!(
                matches!(
                    TransformError::find(&e),
                    Some(TransformError::MissingKey { .. })
                ),
                "{name}: {e}"
            );
        } else {
            assert_eq!(
                plain.fetch_log_segment(m, 0, None).unwrap(),
                s.log,
                "{name}"
            );
        }
    }
    for (_, _, m, _) in &written {
        keyed.delete_log_segment_data(m).unwrap();
    }
}
