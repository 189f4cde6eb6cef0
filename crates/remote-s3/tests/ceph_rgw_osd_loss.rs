//! One of the three Ceph OSDs killed while a multipart copy is in flight. A test binary of its
//! own: cargo runs test binaries one after another, so the peering stall the kill causes never
//! overlaps the conformance tests in `ceph_rgw.rs`. Reads `KRABKA_TEST_CEPH_*` like them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_storage::{
    IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager,
    TopicIdPartition, layout,
};

const MIB: usize = 1 << 20;
/// Parts of the copy in flight at the kill: 5 MiB each, one at a time.
const PART: usize = 5 * MIB;
const BIG: usize = 80 * MIB + 17;

fn segment(
    dir: &std::path::Path,
    tp: &TopicIdPartition,
    n: u64,
    len: usize,
) -> (RemoteLogSegmentMetadata, LogSegmentData, Vec<u8>) {
    let log: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + n) as u8).collect();
    let paths = ["log", "index", "timeindex"].map(|s| dir.join(format!("{n}.{s}")));
    std::fs::write(&paths[0], &log).unwrap();
    std::fs::write(&paths[1], b"offsets").unwrap();
    std::fs::write(&paths[2], b"times").unwrap();
    let [l, o, t] = paths;
    let data = LogSegmentData::new(l, o, t);
    (attempt(tp, n, len), data, log)
}

/// Metadata of segment `n` under a fresh segment id (what a retry of the tiering layer uses).
fn attempt(tp: &TopicIdPartition, n: u64, len: usize) -> RemoteLogSegmentMetadata {
    RemoteLogSegmentMetadata::builder(
        RemoteLogSegmentId::generate(tp.clone()),
        n * 100,
        n * 100 + 99,
    )
    .segment_size_in_bytes(len as u64)
    .build()
    .unwrap()
}

/// Parts the store holds of the open multipart uploads under `key` (0 when none is open yet).
fn parts_stored(rt: &tokio::runtime::Runtime, storage: &S3RemoteStorage, key: &str) -> usize {
    let client = storage.client();
    let bucket = &storage.config().bucket;
    rt.block_on(async {
        let Ok(list) = client
            .list_multipart_uploads()
            .bucket(bucket)
            .prefix(key)
            .send()
            .await
        else {
            return 0;
        };
        let mut n = 0;
        for u in list.uploads() {
            if let (Some(k), Some(id)) = (u.key(), u.upload_id())
                && let Ok(parts) = client
                    .list_parts()
                    .bucket(bucket)
                    .key(k)
                    .upload_id(id)
                    .send()
                    .await
            {
                n += parts.parts().len();
            }
        }
        n
    })
}

fn open_uploads(rt: &tokio::runtime::Runtime, storage: &S3RemoteStorage, prefix: &str) -> usize {
    rt.block_on(
        storage
            .client()
            .list_multipart_uploads()
            .bucket(&storage.config().bucket)
            .prefix(prefix)
            .send(),
    )
    .unwrap()
    .uploads()
    .len()
}

/// Kills one of the three OSDs after the first parts of an 80 MiB multipart copy reached the
/// store and before its last: the copy (or, if the kill made it fail, a retry under a fresh
/// id, as the tiering layer does) succeeds, with 3 replicas and min_size 2 every later write
/// and read works, and no multipart upload is left behind. Bounded to a few minutes.
#[test]
fn killing_one_osd_during_a_multipart_copy_keeps_reads_and_writes_working() {
    let Some(config) = support::ceph_config() else {
        return;
    };
    let dir_var = std::env::var("KRABKA_TEST_CEPH_DIR").expect("KRABKA_TEST_CEPH_DIR");
    let deadline = Instant::now() + Duration::from_secs(240);
    // Patient retries and timeouts, so peering after the kill is ridden out, not failed.
    let storage = S3RemoteStorage::new(
        config
            .with_multipart(PART as u64, PART as u64)
            .with_upload_concurrency(1)
            .with_max_attempts(8)
            .with_timeouts(
                Duration::from_secs(5),
                Duration::from_secs(30),
                Duration::from_secs(90),
            ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "osd-loss", 0);
    let partition = storage
        .object_key(&attempt(&tp, 0, 0), None)
        .unwrap()
        .rsplit_once('/')
        .map(|(dir, _)| format!("{dir}/"))
        .unwrap();
    assert!(partition.ends_with(&format!("{}/", layout::partition_dir(&tp).unwrap())));

    // Written before the kill, read after it.
    let before = segment(tmp.path(), &tp, 1, 7 * MIB);
    let cm = storage.copy_log_segment_data(&before.0, &before.1).unwrap();
    let before_m = before.0.with_custom_metadata(cm);

    // The kill lands while the big copy is in flight.
    let (big_m, big_data, big_log) = segment(tmp.path(), &tp, 2, BIG);
    let key = storage.object_key(&big_m, None).unwrap();
    let total_parts = BIG.div_ceil(PART);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/ceph-rgw");
    let (first, parts_at_kill) = std::thread::scope(|scope| {
        let copying = scope.spawn(|| storage.copy_log_segment_data(&big_m, &big_data));
        let parts = loop {
            assert!(
                !copying.is_finished(),
                "the copy finished before 2 parts were seen: make BIG larger"
            );
            assert!(Instant::now() < deadline, "no parts reached the store");
            let n = parts_stored(&rt, &storage, &key);
            if n >= 2 {
                break n;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            !copying.is_finished(),
            "the copy finished before the kill: make BIG larger"
        );
        let status = Command::new("bash")
            .args([script, "kill-osd", &dir_var, "2"])
            .status()
            .unwrap();
        assert!(status.success(), "kill-osd failed");
        (copying.join().unwrap(), parts)
    });
    assert!(
        parts_at_kill < total_parts,
        "the kill came after all {total_parts} parts were stored"
    );
    eprintln!(
        "osd.2 killed with {parts_at_kill} of {total_parts} parts stored; the copy then {}",
        match &first {
            Ok(_) => "succeeded".to_owned(),
            Err(e) => format!("failed: {e}"),
        }
    );

    // The copy, or a retry of it under a fresh id after deleting the failed attempt.
    let mut result = first.map(|cm| big_m.with_custom_metadata(cm));
    let mut failed = big_m.clone();
    let mut tries = 0;
    let big = loop {
        match result {
            Ok(m) => break m,
            Err(e) => {
                tries += 1;
                assert!(
                    e.is_retriable() && tries <= 3 && Instant::now() < deadline,
                    "copy across the OSD kill failed for good: {e}"
                );
                storage.delete_log_segment_data(&failed).unwrap();
                failed = attempt(&tp, 2, BIG);
                result = storage
                    .copy_log_segment_data(&failed, &big_data)
                    .map(|cm| failed.with_custom_metadata(cm));
            }
        }
    };
    assert_eq!(storage.fetch_log_segment(&big, 0, None).unwrap(), big_log);
    assert_eq!(
        storage
            .fetch_log_segment(&big, 5 * MIB as u32 - 3, Some(5 * MIB as u32 + 3))
            .unwrap(),
        &big_log[5 * MIB - 3..=5 * MIB + 3]
    );

    // Writes and reads after the kill.
    for n in 3..5u64 {
        assert!(
            Instant::now() < deadline,
            "writes after the OSD loss took too long"
        );
        let (m, data, log) = segment(tmp.path(), &tp, n, (n as usize) * MIB + 3);
        let m = m.with_custom_metadata(storage.copy_log_segment_data(&m, &data).unwrap());
        assert_eq!(storage.fetch_log_segment(&m, 0, None).unwrap(), log);
        assert_eq!(
            storage.fetch_index(&m, IndexType::Offset).unwrap(),
            b"offsets"
        );
        storage.delete_log_segment_data(&m).unwrap();
    }
    assert_eq!(
        storage.fetch_log_segment(&before_m, 0, None).unwrap(),
        before.2
    );
    assert_eq!(
        storage.fetch_log_segment(&before_m, 5, Some(10)).unwrap(),
        &before.2[5..=10]
    );
    storage.delete_log_segment_data(&before_m).unwrap();
    storage.delete_log_segment_data(&big).unwrap();
    assert_eq!(open_uploads(&rt, &storage, &partition), 0);
    assert!(Instant::now() < deadline, "the test overran its bound");
}
