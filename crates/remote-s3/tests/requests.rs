//! What a copy sends, against the in-process s3s-fs server: no HeadObject after uploads whose
//! response ETag settles the check, a default-sized 16 MiB segment in parallel parts, the
//! requests of one copy, the cleanup of an earlier attempt's multipart upload kept off the
//! copy's critical path, and skipped when the create-only in-progress manifest shows no earlier
//! attempt (on a store that enforces create-only writes). And a create-only write: one
//! PutObject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::{
    IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager,
    TopicIdPartition,
};

const MIB: usize = 1 << 20;

/// A `len`-byte segment with two small indexes, its files in the returned directory.
fn segment(
    len: usize,
) -> (
    RemoteLogSegmentMetadata,
    LogSegmentData,
    Vec<u8>,
    tempfile::TempDir,
) {
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
    (m, LogSegmentData::new(l, o, t), log, dir)
}

/// Copies a `len`-byte segment with two small indexes and reads it back whole; returns the
/// requests the copy alone sent.
fn copy_and_read(
    server: &TestServer,
    storage: &S3RemoteStorage,
    len: usize,
) -> BTreeMap<String, usize> {
    let (m, data, log, _dir) = segment(len);
    let before = server.requests_received();
    let custom = storage.copy_log_segment_data(&m, &data).unwrap();
    let sent = since(&before, &server.requests_received());
    let m = m.with_custom_metadata(custom);
    assert!(storage.fetch_log_segment(&m, 0, None).unwrap() == log);
    assert_eq!(
        storage.fetch_index(&m, IndexType::Offset).unwrap(),
        b"offsets"
    );
    sent
}

/// The requests in `after` that were not yet in `before`, by operation.
fn since(
    before: &BTreeMap<String, usize>,
    after: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    after
        .iter()
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(op, n)| ((*op).to_owned(), *n)).collect()
}

/// Opens a multipart upload of `key` behind the backend's back: what a copy that crashed in
/// the middle of its multipart upload leaves.
fn open_upload(storage: &S3RemoteStorage, key: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = storage.client();
    let bucket = support::BUCKET;
    rt.block_on(
        client
            .create_multipart_upload()
            .bucket(bucket)
            .key(key)
            .send(),
    )
    .unwrap();
}

#[test]
fn copies_verify_from_upload_responses_without_head_object() {
    let server = support::start_server();
    let storage = S3RemoteStorage::new(server.config().with_prefix("req")).unwrap();
    let (heads, parts) = (server.heads_received(), server.parts_received());
    // Below the multipart threshold: PutObjects only.
    let small = copy_and_read(&server, &storage, 100_000);
    assert_eq!(server.heads_received(), heads, "HeadObject after PutObject");
    assert_eq!(server.parts_received(), parts);
    // The in-progress manifest (create-only, before the first byte), the `.log`, two indexes,
    // the leader-epoch checkpoint, the complete manifest; and, the backend's first copy, the
    // probe of create-only writes: a probe key created twice (PutObject) and removed
    // (DeleteObjects). (Before in-progress manifests a copy was 5 PutObjects: +1 request per
    // copy.)
    assert_eq!(small, counts(&[("DeleteObjects", 1), ("PutObject", 6 + 2)]));
    // A 16 MiB segment under the default configuration: two 8 MiB parts. The manifest was
    // created, so no earlier attempt is cleaned up after: no ListMultipartUploads of stale
    // uploads, no DeleteObjects of the absent optional indexes (-2 requests per copy).
    let large = copy_and_read(&server, &storage, 16 * MIB);
    assert_eq!(server.heads_received(), heads, "HeadObject after multipart");
    assert_eq!(server.parts_received(), parts + 2);
    let expected = counts(&[
        ("CompleteMultipartUpload", 1),
        ("CreateMultipartUpload", 1),
        ("PutObject", 5),
        ("UploadPart", 2),
    ]);
    assert_eq!(large, expected);
}

/// The requests of a 16 MiB copy under `m`'s id, and the copy's custom metadata.
fn copy_counted(
    server: &TestServer,
    storage: &S3RemoteStorage,
    m: &RemoteLogSegmentMetadata,
    data: &LogSegmentData,
) -> BTreeMap<String, usize> {
    let before = server.requests_received();
    storage.copy_log_segment_data(m, data).unwrap();
    since(&before, &server.requests_received())
}

#[test]
fn a_recopy_under_an_id_cleans_up_after_the_earlier_attempt_as_before() {
    let server = support::start_server();
    let storage = S3RemoteStorage::new(server.config().with_prefix("again")).unwrap();
    let (m, data, log, _dir) = segment(16 * MIB);
    // The first copy (and the probe) under a fresh id.
    copy_counted(&server, &storage, &m, &data);
    // The same id again: the create-only manifest is refused (412), so the manifest is
    // overwritten and the earlier attempt's leftovers looked for.
    let again = copy_counted(&server, &storage, &m, &data);
    let expected = counts(&[
        ("CompleteMultipartUpload", 1),
        ("CreateMultipartUpload", 1),
        ("DeleteObjects", 1),
        ("ListMultipartUploads", 1),
        ("PutObject", 5 + 1),
        ("UploadPart", 2),
    ]);
    assert_eq!(again, expected);
    let m = m.with_custom_metadata(storage.copy_log_segment_data(&m, &data).unwrap());
    assert!(storage.fetch_log_segment(&m, 0, None).unwrap() == log);
}

#[test]
fn on_a_store_ignoring_create_only_writes_every_copy_cleans_up_after_earlier_attempts() {
    let server = TestServer::start_ignoring_conditional_writes().unwrap();
    let storage = S3RemoteStorage::new(server.config().with_prefix("ignoring")).unwrap();
    let full = counts(&[
        ("CompleteMultipartUpload", 1),
        ("CreateMultipartUpload", 1),
        ("DeleteObjects", 1),
        ("ListMultipartUploads", 1),
        ("PutObject", 5),
        ("UploadPart", 2),
    ]);
    // The first copy probes: the second create of the probe key succeeds too, so the store's
    // create-only writes are not relied on (and not tried again).
    let (m, data, _log, _dir) = segment(16 * MIB);
    let mut probed = full.clone();
    *probed.get_mut("PutObject").unwrap() += 2;
    *probed.get_mut("DeleteObjects").unwrap() += 1;
    assert_eq!(copy_counted(&server, &storage, &m, &data), probed);
    // Every later copy, under a fresh id or not, cleans up as before create-only manifests.
    let (m2, data2, _log2, _dir2) = segment(16 * MIB);
    assert_eq!(copy_counted(&server, &storage, &m2, &data2), full);
    let key = storage.object_key(&m2, None).unwrap();
    open_upload(&storage, &key);
    let mut aborted = full.clone();
    aborted.insert("AbortMultipartUpload".into(), 1);
    assert_eq!(copy_counted(&server, &storage, &m2, &data2), aborted);
    assert!(
        server.open_uploads("").is_empty(),
        "the interrupted upload was left open"
    );
}

#[test]
fn every_body_a_copy_sends_carries_content_md5_and_is_hashed_once() {
    let server = support::start_server();
    let storage = S3RemoteStorage::new(server.config().with_prefix("md5")).unwrap();
    // The backend's first copy also probes the store's create-only writes (two PutObjects).
    copy_and_read(&server, &storage, 1000);
    let before = server.payloads_received();
    // A 16 MiB segment: two UploadParts; PutObjects of two indexes, the leader-epoch
    // checkpoint and the two manifests.
    copy_and_read(&server, &storage, 16 * MIB);
    let after = server.payloads_received();
    let sent = after.total - before.total;
    assert_eq!(sent, 7);
    // The store checks each body against its Content-MD5 and the ETags are compared with the
    // same MD5s: the SHA-256 a signed payload would add is a second hash of the same bytes.
    assert_eq!(after.content_md5 - before.content_md5, sent);
    assert_eq!(after.unsigned - before.unsigned, sent);
}

#[test]
fn recopy_after_an_interrupted_multipart_upload_aborts_it_off_the_critical_path() {
    let server = support::start_server();
    let config = server
        .config()
        .with_prefix("stale")
        .with_multipart(5 * MIB as u64, 5 * MIB as u64);
    let storage = S3RemoteStorage::new(config).unwrap();
    let (m, data, log, _dir) = segment(10 * MIB + 7);
    let key = storage.object_key(&m, None).unwrap();
    // An earlier attempt under this id: its manifest went up before its first byte, then it
    // was cut short in the middle of its multipart upload.
    storage.copy_log_segment_data(&m, &data).unwrap();
    open_upload(&storage, &key);
    assert_eq!(server.open_uploads("").len(), 1);

    // The cleanup's listing answers only after the copy's own upload is open and its parts
    // went up: the copy did not wait for it, and it spares the copy's own upload.
    server.set_list_uploads_delay(Duration::from_secs(2));
    let parts = server.parts_received();
    let m = m.with_custom_metadata(storage.copy_log_segment_data(&m, &data).unwrap());
    assert!(
        server.parts_when_last_listed() > parts,
        "no part went up before ListMultipartUploads answered"
    );
    assert!(
        server.open_uploads("").is_empty(),
        "the interrupted upload was left open"
    );
    assert!(storage.fetch_log_segment(&m, 0, None).unwrap() == log);

    // An interrupted re-copy under the same id leaves an upload: deleting the segment aborts it.
    server.set_list_uploads_delay(Duration::ZERO);
    open_upload(&storage, &key);
    storage.delete_log_segment_data(&m).unwrap();
    assert!(
        server.open_uploads("").is_empty(),
        "an upload was left open after delete"
    );
}

#[test]
fn a_delete_marks_the_manifest_deleting_first_and_removes_it_last() {
    let server = support::start_server();
    let storage = S3RemoteStorage::new(server.config().with_prefix("del")).unwrap();
    let (m, data, _log, _dir) = segment(1000);
    let m = m.with_custom_metadata(storage.copy_log_segment_data(&m, &data).unwrap());
    let before = server.requests_received();
    storage.delete_log_segment_data(&m).unwrap();
    // The deleting manifest, the data and indexes in one DeleteObjects, the listing of
    // interrupted uploads, the manifest in a DeleteObjects of its own. (Before deleting
    // manifests: 2 DeleteObjects and the listing; +1 request per delete.)
    assert_eq!(
        since(&before, &server.requests_received()),
        counts(&[
            ("DeleteObjects", 2),
            ("ListMultipartUploads", 1),
            ("PutObject", 1)
        ])
    );
    assert!(matches!(
        storage.fetch_log_segment(&m, 0, None),
        Err(krabka_remote_storage::RemoteStorageError::SegmentNotFound { .. })
    ));
}

#[test]
fn a_create_if_absent_is_one_put_object() {
    use krabka_remote_storage::ownership::OwnershipStore;

    let server = support::start_server();
    let storage = S3RemoteStorage::new(server.config().with_prefix("own")).unwrap();
    let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "requests", 0);
    let key = krabka_remote_storage::layout::epoch_key(
        &krabka_remote_storage::layout::partition_dir(&tp).unwrap(),
        1,
    );
    // Created: one PutObject, verified from its response (no HeadObject).
    let before = server.requests_received();
    assert!(storage.create_if_absent(&key, b"epoch 1").unwrap());
    assert_eq!(
        since(&before, &server.requests_received()),
        counts(&[("PutObject", 1)])
    );
    // Refused: one PutObject too.
    let before = server.requests_received();
    assert!(!storage.create_if_absent(&key, b"epoch 1 again").unwrap());
    assert_eq!(
        since(&before, &server.requests_received()),
        counts(&[("PutObject", 1)])
    );
}
