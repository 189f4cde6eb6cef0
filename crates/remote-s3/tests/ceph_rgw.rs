//! The conformance kit against a Ceph RGW cluster (3 OSDs, 3-way replication) started by
//! `scripts/ceph-rgw start`, plus an OSD killed mid-run. Reads `KRABKA_TEST_CEPH_*`; without it
//! these tests pass vacuously, except under `CI=true`, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_storage::{
    IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager,
    TopicIdPartition,
};

fn store() -> Option<&'static dyn RemoteStorageManager> {
    static STORE: OnceLock<Option<S3RemoteStorage>> = OnceLock::new();
    STORE
        .get_or_init(|| support::ceph_config().map(|c| S3RemoteStorage::new(c).unwrap()))
        .as_ref()
        .map(|s| s as &dyn RemoteStorageManager)
}

mod ceph_conformance {
    use super::store;
    crate::conformance_tests!(store;
        copy_then_fetch_whole_segment_and_ranges,
        range_past_the_end_is_invalid_argument,
        each_index_type_round_trips,
        missing_optional_index_is_segment_not_found,
        fetch_of_unknown_segment_is_segment_not_found,
        delete_then_fetch_is_segment_not_found,
        delete_twice_is_ok,
        recopy_under_the_same_id_replaces_cleanly,
        partitions_and_topics_never_collide,
        zero_byte_segment,
        large_segment_100_mib,
        eight_threads_copy_and_fetch_at_once,
        custom_metadata_is_passed_back,
    );
}

fn segment(
    dir: &std::path::Path,
    n: u64,
    len: usize,
) -> (RemoteLogSegmentMetadata, LogSegmentData, Vec<u8>) {
    let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "osd-loss", 0);
    let log: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + n) as u8).collect();
    let paths = ["log", "index", "timeindex"].map(|s| dir.join(format!("{n}.{s}")));
    std::fs::write(&paths[0], &log).unwrap();
    std::fs::write(&paths[1], b"offsets").unwrap();
    std::fs::write(&paths[2], b"times").unwrap();
    let [l, o, t] = paths;
    let data = LogSegmentData::new(l, o, t);
    let m =
        RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), n * 100, n * 100 + 99)
            .segment_size_in_bytes(len as u64)
            .build()
            .unwrap();
    (m, data, log)
}

/// Kills one of the three OSDs while segments go up and come back: with 3 replicas and
/// min_size 2, every later write and read still succeeds.
#[test]
fn killing_one_osd_mid_run_keeps_reads_and_writes_working() {
    let Some(config) = support::ceph_config() else {
        return;
    };
    let dir_var = std::env::var("KRABKA_TEST_CEPH_DIR").expect("KRABKA_TEST_CEPH_DIR");
    // Its own config: a multipart upload spans the kill, and reads retry patiently.
    let storage =
        S3RemoteStorage::new(config.with_multipart(6 << 20, 5 << 20).with_max_attempts(6)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let before = segment(tmp.path(), 1, 7 << 20);
    let cm = storage.copy_log_segment_data(&before.0, &before.1).unwrap();
    let before_m = before.0.with_custom_metadata(cm);

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/ceph-rgw");
    let status = Command::new("bash")
        .args([script, "kill-osd", &dir_var, "2"])
        .status()
        .unwrap();
    assert!(status.success(), "kill-osd failed");

    let deadline = Instant::now() + Duration::from_secs(120);
    for n in 2..6u64 {
        assert!(
            Instant::now() < deadline,
            "writes after the OSD loss took too long"
        );
        let (m, data, log) = segment(tmp.path(), n, (n as usize) << 20 | 3);
        let m = m.with_custom_metadata(storage.copy_log_segment_data(&m, &data).unwrap());
        assert_eq!(storage.fetch_log_segment(&m, 0, None).unwrap(), log);
        assert_eq!(
            storage.fetch_index(&m, IndexType::Offset).unwrap(),
            b"offsets"
        );
        storage.delete_log_segment_data(&m).unwrap();
    }
    // Written before the kill, read after it.
    assert_eq!(
        storage.fetch_log_segment(&before_m, 0, None).unwrap(),
        before.2
    );
    assert_eq!(
        storage.fetch_log_segment(&before_m, 5, Some(10)).unwrap(),
        &before.2[5..=10]
    );
    storage.delete_log_segment_data(&before_m).unwrap();
}
