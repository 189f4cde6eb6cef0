//! Recovery over a generated listing (no backend): the whole pipeline — paged listing, bounded
//! parallel manifest reads, validation, one-compaction install into the durable metadata —
//! at 2,000 segments in the normal run, and at 100,000 in an ignored measurement:
//!
//! ```sh
//! cargo test --release -p krabka-remote-metadata --test recovery_scale -- --ignored --nocapture
//! ```
//! which prints the time and the process's peak RSS (`VmHWM`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use krabka_remote_metadata::recovery::{
    IgnoreReason, ListedObject, RecoveryOptions, RemoteSegmentLister, recover,
};
use krabka_remote_metadata::{DurableRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_remote_storage::{
    IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageError, TopicIdPartition,
    Uuid, layout, manifest,
};

const RECORDS_PER_SEGMENT: u64 = 100;
const SEGMENT_BYTES: u64 = 1 << 20;

/// A partition of `n` segments that exists only as a function: listing pages and manifests are
/// generated on demand. Segment `missing_data` (if any) has no `.log` object.
struct Generated {
    tp: TopicIdPartition,
    n: u64,
    missing_data: Option<u64>,
    reads: AtomicUsize,
}

impl Generated {
    fn meta(&self, i: u64) -> RemoteLogSegmentMetadata {
        let start = 1 + i * RECORDS_PER_SEGMENT;
        RemoteLogSegmentMetadata::builder(
            RemoteLogSegmentId::new(self.tp.clone(), Uuid::from_u128(u128::from(i) + 1)),
            start,
            start + RECORDS_PER_SEGMENT - 1,
        )
        .segment_size_in_bytes(SEGMENT_BYTES)
        .event_timestamp_ms(1_700_000_000_000 + i64::try_from(i).unwrap())
        .build()
        .unwrap()
    }

    fn index_of(&self, key: &str) -> u64 {
        let name = key.rsplit('/').next().unwrap();
        let (start, _, _) = layout::parse_segment_object_name(name).unwrap();
        (start - 1) / RECORDS_PER_SEGMENT
    }
}

impl RemoteSegmentLister for Generated {
    fn list_partition(
        &self,
        _partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        for i in 0..self.n {
            let m = self.meta(i);
            let mut keys = vec![(layout::manifest_key(&m)?, 60)];
            if self.missing_data != Some(i) {
                keys.push((layout::log_key(&m)?, SEGMENT_BYTES));
            }
            for t in [
                IndexType::Offset,
                IndexType::Timestamp,
                IndexType::LeaderEpoch,
            ] {
                keys.push((layout::index_key(&m, t)?, 100));
            }
            for (key, size) in keys {
                visit(ListedObject { key, size })?;
            }
        }
        Ok(())
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        visit(layout::partition_dir(&self.tp)?)
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        // Only manifests exist: the partition head a recovery asks for first is absent.
        if !key.ends_with(layout::MANIFEST_SUFFIX) {
            return Err(RemoteStorageError::io(
                key,
                std::io::ErrorKind::NotFound.into(),
            ));
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(manifest::encode(&self.meta(self.index_of(key))))
    }

    fn delete_object(&self, _key: &str) -> Result<(), RemoteStorageError> {
        Ok(())
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn run(n: u64, missing_data: Option<u64>) -> (std::time::Duration, u64) {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicIdPartition::new(Uuid::from_u128(77), "orders", 0);
    let lister = Generated {
        tp: tp.clone(),
        n,
        missing_data,
        reads: AtomicUsize::new(0),
    };
    let started = Instant::now();
    let rlmm = DurableRemoteLogMetadataManager::open(dir.path().join("meta")).unwrap();
    let report = recover(&lister, &tp, &rlmm, &RecoveryOptions::default()).unwrap();
    let took = started.elapsed();
    // A segment whose data is missing costs its own seqs only: a hole, reported.
    assert_eq!(
        report.segments as u64,
        n - u64::from(missing_data.is_some())
    );
    assert_eq!(report.seq_range, Some(1..=n * RECORDS_PER_SEGMENT));
    let holes: Vec<_> = missing_data
        .map(|i| 1 + i * RECORDS_PER_SEGMENT..=(i + 1) * RECORDS_PER_SEGMENT)
        .into_iter()
        .collect();
    assert_eq!(report.holes, holes);
    assert_eq!(lister.reads.load(Ordering::Relaxed) as u64, n);
    assert_eq!(
        report.objects_listed,
        n * 5 - u64::from(missing_data.is_some())
    );
    drop(rlmm);
    // What was installed survives a reopen.
    let reopened = DurableRemoteLogMetadataManager::open(dir.path().join("meta")).unwrap();
    assert_eq!(
        reopened.list_remote_log_segments(&tp).unwrap().len() as u64,
        n - u64::from(missing_data.is_some())
    );
    if missing_data.is_some() {
        assert!(
            report
                .ignored
                .iter()
                .any(|x| x.reason == IgnoreReason::DataMissing)
        );
        assert_eq!(report.ignored.len(), 1);
    }
    (took, report.bytes)
}

#[test]
fn recovers_a_generated_listing() {
    run(2_000, None);
    run(2_000, Some(999));
}

#[test]
#[ignore = "measurement: run with --release --ignored --nocapture"]
fn recover_100k_segments_time_and_memory() {
    let before = peak_rss_kib();
    let (took, bytes) = run(100_000, None);
    println!(
        "recovered 100000 segments ({} GiB of remote data described) in {:.2?}; peak RSS {} MiB (before: {} MiB)",
        bytes >> 30,
        took,
        peak_rss_kib().unwrap_or(0) / 1024,
        before.unwrap_or(0) / 1024
    );
}
