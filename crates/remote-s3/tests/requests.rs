//! What a copy sends, against the in-process s3s-fs server: no HeadObject after uploads whose
//! response ETag settles the check, and a default-sized 16 MiB segment in parallel parts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_storage::{
    IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager,
    TopicIdPartition,
};

const MIB: usize = 1 << 20;

/// Copies a `len`-byte segment with two small indexes and reads it back whole.
fn copy_and_read(storage: &S3RemoteStorage, len: usize) {
    let dir = tempfile::tempdir().unwrap();
    let log: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let paths = ["r.log", "r.index", "r.timeindex"].map(|n| dir.path().join(n));
    std::fs::write(&paths[0], &log).unwrap();
    std::fs::write(&paths[1], b"offsets").unwrap();
    std::fs::write(&paths[2], b"times").unwrap();
    let [l, o, t] = paths;
    let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "requests", 0);
    let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9)
        .segment_size_in_bytes(len as u64)
        .build()
        .unwrap();
    let data = LogSegmentData::new(l, o, t);
    let m = m.with_custom_metadata(storage.copy_log_segment_data(&m, &data).unwrap());
    assert!(storage.fetch_log_segment(&m, 0, None).unwrap() == log);
    assert_eq!(
        storage.fetch_index(&m, IndexType::Offset).unwrap(),
        b"offsets"
    );
}

#[test]
fn copies_verify_from_upload_responses_without_head_object() {
    let server = support::start_server();
    let storage = S3RemoteStorage::new(server.config().with_prefix("req")).unwrap();
    let (heads, parts) = (server.heads_received(), server.parts_received());
    // Below the multipart threshold: PutObjects only.
    copy_and_read(&storage, 100_000);
    assert_eq!(server.heads_received(), heads, "HeadObject after PutObject");
    assert_eq!(server.parts_received(), parts);
    // A 16 MiB segment under the default configuration: two 8 MiB parts.
    copy_and_read(&storage, 16 * MIB);
    assert_eq!(server.heads_received(), heads, "HeadObject after multipart");
    assert_eq!(server.parts_received(), parts + 2);
}
