//! Failures and call sites against the in-process s3s-fs server: a server stopped in the middle
//! of a multipart upload, wrong credentials, a missing bucket, and calls from a plain thread,
//! `spawn_blocking` and async tasks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use krabka_remote_s3::{MAX_KEY_LEN, MAX_PREFIX_LEN, S3Config, S3Credentials, S3RemoteStorage};
use krabka_remote_storage::{
    IndexType, LogSegmentData, MAX_TOPIC_NAME_LEN, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteStorageError, RemoteStorageManager, TopicIdPartition, layout,
};
use support::{BUCKET, TestServer, start_server};

const MIB: usize = 1 << 20;

struct Seg {
    metadata: RemoteLogSegmentMetadata,
    data: LogSegmentData,
    log: Vec<u8>,
    _dir: tempfile::TempDir,
}

fn seg(len: usize) -> Seg {
    seg_of(
        len,
        TopicIdPartition::new(uuid::Uuid::new_v4(), "faults", 0),
    )
}

fn seg_of(len: usize, tp: TopicIdPartition) -> Seg {
    let dir = tempfile::tempdir().unwrap();
    let log: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let paths = ["a.log", "a.index", "a.timeindex"].map(|n| dir.path().join(n));
    std::fs::write(&paths[0], &log).unwrap();
    std::fs::write(&paths[1], b"idx").unwrap();
    std::fs::write(&paths[2], b"tidx").unwrap();
    let [l, o, t] = paths;
    let metadata = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9)
        .segment_size_in_bytes(len as u64)
        .build()
        .unwrap();
    Seg {
        metadata,
        data: LogSegmentData::new(l, o, t),
        log,
        _dir: dir,
    }
}

/// What the store's ListMultipartUploads reports under `prefix`, asked through the backend's
/// own client.
fn open_uploads(storage: &S3RemoteStorage, prefix: &str) -> usize {
    let client = storage.client().clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt
        .block_on(
            client
                .list_multipart_uploads()
                .bucket(BUCKET)
                .prefix(prefix)
                .send(),
        )
        .unwrap();
    out.uploads().len()
}

/// The key prefix of a segment's partition (no storage prefix is configured here).
fn partition_prefix(m: &RemoteLogSegmentMetadata) -> String {
    format!(
        "{}/",
        layout::partition_dir(m.topic_id_partition()).unwrap()
    )
}

/// The same segment files under a fresh segment id of the same partition: what the tiering
/// layer does when it retries a failed copy.
fn fresh_attempt(m: &RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata {
    let id = RemoteLogSegmentId::generate(m.topic_id_partition().clone());
    RemoteLogSegmentMetadata::builder(id, m.start_offset(), m.end_offset())
        .segment_size_in_bytes(m.segment_size_in_bytes())
        .build()
        .unwrap()
}

/// A backend whose multipart uploads send one 5 MiB part at a time, failing fast.
fn fault_storage(server: &TestServer) -> S3RemoteStorage {
    let config = server
        .config()
        .with_multipart(5 * MIB as u64, 5 * MIB as u64)
        .with_upload_concurrency(1)
        .with_max_attempts(2)
        .with_timeouts(
            Duration::from_secs(1),
            Duration::from_secs(5),
            Duration::from_secs(10),
        );
    S3RemoteStorage::new(config).unwrap()
}

/// Copies `s` on a thread and stops the server once two parts arrived: the copy must fail as
/// retriable. Then restarts the server and returns a backend connected to it (anew when the
/// restart had to take another port).
fn copy_across_a_server_stop(server: &mut TestServer, s: &Seg) -> S3RemoteStorage {
    let storage = fault_storage(server);
    let parts = server.parts_received_counter();
    let before = parts.load(Ordering::SeqCst);
    let copy = std::thread::scope(|scope| {
        let copying = scope.spawn(|| storage.copy_log_segment_data(&s.metadata, &s.data));
        let deadline = Instant::now() + Duration::from_secs(60);
        while parts.load(Ordering::SeqCst) < before + 2 {
            assert!(Instant::now() < deadline, "no part arrived in 60 s");
            assert!(
                !copying.is_finished(),
                "copy finished before the server stopped"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        server.stop();
        copying.join().unwrap()
    });
    let err = copy.expect_err("copy while the server is down must fail");
    assert!(
        err.is_retriable(),
        "a stopped server is a retriable failure: {err}"
    );
    if server.restart().unwrap() {
        storage
    } else {
        fault_storage(server)
    }
}

fn round_trip(storage: &S3RemoteStorage, s: &Seg) {
    let m = s
        .metadata
        .with_custom_metadata(storage.copy_log_segment_data(&s.metadata, &s.data).unwrap());
    assert_eq!(storage.fetch_log_segment(&m, 0, None).unwrap(), s.log);
    assert_eq!(
        storage.fetch_log_segment(&m, 3, Some(7)).unwrap(),
        &s.log[3..=7]
    );
    assert_eq!(
        storage.fetch_index(&m, IndexType::Timestamp).unwrap(),
        b"tidx"
    );
}

#[test]
fn server_stopped_mid_multipart_fails_the_copy_and_a_retry_after_restart_leaves_no_upload() {
    let mut server = start_server();
    let s = seg(40 * MIB + 11);
    let storage = copy_across_a_server_stop(&mut server, &s);
    let partition = partition_prefix(&s.metadata);
    // The abort could not reach the stopped server: the upload is still open...
    assert_eq!(open_uploads(&storage, &partition), 1);
    // ...and a retry under the same id cleans it up before uploading again.
    round_trip(&storage, &s);
    assert_eq!(
        open_uploads(&storage, &partition),
        0,
        "an incomplete multipart upload was left behind"
    );
}

#[test]
fn upload_orphaned_by_a_failed_attempt_is_aborted_by_deleting_that_attempt() {
    let mut server = start_server();
    let s = seg(40 * MIB + 11);
    let storage = copy_across_a_server_stop(&mut server, &s);
    let partition = partition_prefix(&s.metadata);
    assert_eq!(open_uploads(&storage, &partition), 1);

    // The tiering layer retries under a fresh segment id: that copy succeeds, but its own
    // cleanup looks only under its own key, so the failed attempt's upload stays open.
    let retry = Seg {
        metadata: fresh_attempt(&s.metadata),
        data: s.data.clone(),
        log: s.log.clone(),
        _dir: tempfile::tempdir().unwrap(),
    };
    round_trip(&storage, &retry);
    assert_eq!(open_uploads(&storage, &partition), 1);

    // Deleting the failed attempt's metadata aborts it.
    storage.delete_log_segment_data(&s.metadata).unwrap();
    assert_eq!(
        open_uploads(&storage, &partition),
        0,
        "the failed attempt's multipart upload was left behind"
    );
    assert!(server.open_uploads("").is_empty());
    // The successful copy is untouched; deleting again is still fine.
    let m = retry.metadata.clone();
    assert_eq!(storage.fetch_log_segment(&m, 0, None).unwrap(), retry.log);
    storage.delete_log_segment_data(&s.metadata).unwrap();
}

#[test]
fn longest_topic_name_under_the_longest_prefix_keeps_every_key_within_1024_bytes() {
    let server = start_server();
    let mut prefix = ["p".repeat(200), "q".repeat(200), "r".repeat(200)].join("/");
    prefix.push('/');
    prefix.push_str(&"s".repeat(MAX_PREFIX_LEN - prefix.len()));
    assert_eq!(prefix.len(), MAX_PREFIX_LEN);
    let storage = S3RemoteStorage::new(server.config().with_prefix(&*prefix)).unwrap();
    for partition in [0, i32::MAX] {
        let tp = TopicIdPartition::new(
            uuid::Uuid::new_v4(),
            "t".repeat(MAX_TOPIC_NAME_LEN),
            partition,
        );
        let s = seg_of(10, tp);
        let mut keys = vec![storage.object_key(&s.metadata, None).unwrap()];
        for t in IndexType::ALL {
            keys.push(storage.object_key(&s.metadata, Some(t)).unwrap());
        }
        for key in &keys {
            assert!(key.len() <= MAX_KEY_LEN, "{} bytes: {key}", key.len());
            assert!(key.starts_with(&format!("{prefix}/")), "{key}");
        }
    }
    // A round trip of such keys is not possible here: s3s-fs keeps each object's metadata in a
    // file whose single name embeds the whole key, so it fails keys over ~200 bytes. Real S3
    // (and Ceph RGW) take up to 1,024 bytes; a longer prefix is refused by `validate`.
    let too_long = server.config().with_prefix(format!("{prefix}x"));
    let refused = S3RemoteStorage::new(too_long).map(|_| ());
    let over = format!(
        "S3 key prefix is {} bytes, over {MAX_PREFIX_LEN}",
        MAX_PREFIX_LEN + 1
    );
    assert!(
        matches!(&refused, Err(RemoteStorageError::InvalidArgument { message })
            if message.starts_with(&over)),
        "{refused:?}"
    );
}

#[test]
fn wrong_secret_is_access_denied_naming_bucket_and_endpoint() {
    let server = start_server();
    let config = server.config().with_credentials(S3Credentials::static_keys(
        support::ACCESS_KEY,
        "not-the-secret",
    ));
    match S3RemoteStorage::new(config) {
        Err(RemoteStorageError::AccessDenied {
            bucket, endpoint, ..
        }) => {
            assert_eq!(bucket, BUCKET);
            assert_eq!(endpoint, server.endpoint());
        }
        other => panic!("expected AccessDenied, got {other:?}"),
    }
}

#[test]
fn missing_bucket_fails_construction_as_store_unavailable() {
    let server = start_server();
    let mut config = server.config();
    config.bucket = "no-such-bucket".into();
    match S3RemoteStorage::new(config) {
        Err(RemoteStorageError::StoreUnavailable { bucket, .. }) => {
            assert_eq!(bucket, "no-such-bucket")
        }
        other => panic!("expected StoreUnavailable, got {other:?}"),
    }
}

#[test]
fn unreachable_endpoint_fails_construction_as_store_unavailable() {
    let mut server = start_server();
    let config = server.config().with_max_attempts(1).with_timeouts(
        Duration::from_millis(500),
        Duration::from_secs(2),
        Duration::from_secs(3),
    );
    server.stop();
    assert!(matches!(
        S3RemoteStorage::new(config),
        Err(RemoteStorageError::StoreUnavailable { .. })
    ));
}

#[test]
fn config_below_minimums_is_rejected_before_any_request() {
    let config = S3Config::new(BUCKET).with_multipart(1, 1);
    assert!(matches!(
        S3RemoteStorage::new(config),
        Err(RemoteStorageError::InvalidArgument { .. })
    ));
}

#[test]
fn calls_from_a_plain_thread_work() {
    let server = start_server();
    let storage = S3RemoteStorage::new(server.config()).unwrap();
    std::thread::spawn(move || round_trip(&storage, &seg(1000)))
        .join()
        .unwrap();
}

#[test]
fn calls_from_spawn_blocking_on_a_multi_thread_runtime_work() {
    let server = start_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Both an owned runtime and the caller's handle.
    let owned = std::sync::Arc::new(S3RemoteStorage::new(server.config()).unwrap());
    let borrowed = std::sync::Arc::new(
        S3RemoteStorage::with_handle(server.config(), rt.handle().clone()).unwrap(),
    );
    rt.block_on(async {
        for storage in [owned, borrowed] {
            tokio::task::spawn_blocking(move || round_trip(&storage, &seg(2000)))
                .await
                .unwrap();
        }
    });
}

#[test]
fn calls_from_an_async_task_on_a_multi_thread_runtime_work() {
    let server = start_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = server.config();
    rt.block_on(async move {
        tokio::spawn(async move {
            let storage = S3RemoteStorage::new(config).unwrap();
            round_trip(&storage, &seg(3000));
            // Dropping the owned runtime inside a task must not panic either.
            drop(storage);
        })
        .await
        .unwrap();
    });
}

#[test]
fn calls_from_a_current_thread_runtime_return_an_error_instead_of_panicking() {
    let server = start_server();
    let storage = S3RemoteStorage::new(server.config()).unwrap();
    let s = seg(100);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async { storage.copy_log_segment_data(&s.metadata, &s.data) });
    match result {
        Err(RemoteStorageError::InvalidArgument { message }) => {
            assert!(message.contains("current-thread"), "{message}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // A current-thread handle is refused up front.
    assert!(matches!(
        S3RemoteStorage::with_handle(server.config(), rt.handle().clone()),
        Err(RemoteStorageError::InvalidArgument { .. })
    ));
}

#[test]
fn missing_segment_is_segment_not_found() {
    let server = start_server();
    let storage = S3RemoteStorage::new(server.config().with_prefix("p")).unwrap();
    let s = seg(10);
    assert!(
        storage
            .fetch_log_segment(&s.metadata, 0, None)
            .unwrap_err()
            .is_not_found()
    );
    assert!(
        storage
            .fetch_index(&s.metadata, IndexType::Offset)
            .unwrap_err()
            .is_not_found()
    );
    storage.delete_log_segment_data(&s.metadata).unwrap();
}
