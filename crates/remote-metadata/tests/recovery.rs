#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Recovery in two steps: `install` records the recovered segments and starts the local log but
//! deletes nothing, even with `clean_orphans`; `Installed::finish` then deletes exactly the
//! orphans (each segment's manifest last). A caller's step between the two (the tiering layer's
//! binding) therefore always runs before anything is deleted.

use std::collections::BTreeMap;
use std::sync::Mutex;

use krabka_remote_metadata::recovery::{
    IgnoreReason, ListedObject, LocalLogOutcome, RecoveryOptions, RemoteSegmentLister, install,
};
use krabka_remote_metadata::{DurableRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_remote_storage::{
    IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState,
    RemoteStorageError, TopicIdPartition, Uuid, layout, manifest,
};

/// A bucket of one partition: objects by relative key.
struct Bucket {
    tp: TopicIdPartition,
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl Bucket {
    fn keys(&self) -> Vec<String> {
        self.objects.lock().unwrap().keys().cloned().collect()
    }

    fn put(&self, key: String, bytes: Vec<u8>) {
        self.objects.lock().unwrap().insert(key, bytes);
    }
}

impl RemoteSegmentLister for Bucket {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let prefix = format!("{partition_dir}/");
        let listed: Vec<ListedObject> = self
            .objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(key, _)| key.starts_with(&prefix))
            .map(|(key, bytes)| ListedObject {
                key: key.clone(),
                size: bytes.len() as u64,
            })
            .collect();
        listed.into_iter().try_for_each(visit)
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        visit(layout::partition_dir(&self.tp)?)
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        self.objects
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .ok_or_else(|| RemoteStorageError::invalid_argument(format!("no object {key}")))
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        self.objects.lock().unwrap().remove(key);
        Ok(())
    }
}

fn segment(tp: &TopicIdPartition, start: u64, end: u64, event_ms: i64) -> RemoteLogSegmentMetadata {
    RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), start, end)
        .segment_size_in_bytes(8)
        .event_timestamp_ms(event_ms)
        .build()
        .unwrap()
}

/// A bucket holding one whole copy of seqs 1..=10 and an abandoned copy of 11..=15 (an
/// in-progress manifest from long ago and its `.log`); returns the bucket and both segments.
fn bucket() -> (Bucket, RemoteLogSegmentMetadata, RemoteLogSegmentMetadata) {
    let tp = TopicIdPartition::new(Uuid::from_u128(9), "orders", 0);
    let bucket = Bucket {
        tp: tp.clone(),
        objects: Mutex::new(BTreeMap::new()),
    };
    let whole = segment(&tp, 1, 10, krabka_remote_storage::now_ms());
    bucket.put(layout::log_key(&whole).unwrap(), vec![0; 8]);
    for t in [
        IndexType::Offset,
        IndexType::Timestamp,
        IndexType::LeaderEpoch,
    ] {
        bucket.put(layout::index_key(&whole, t).unwrap(), b"index".to_vec());
    }
    bucket.put(
        layout::manifest_key(&whole).unwrap(),
        manifest::encode(&whole),
    );
    let abandoned = segment(&tp, 11, 15, 1_000);
    bucket.put(layout::log_key(&abandoned).unwrap(), vec![0; 3]);
    bucket.put(
        layout::manifest_key(&abandoned).unwrap(),
        manifest::encode_in_progress(&abandoned),
    );
    (bucket, whole, abandoned)
}

#[test]
fn install_records_and_deletes_nothing_until_finish_deletes_the_orphans_manifest_last() {
    let (bucket, whole, abandoned) = bucket();
    let dir = tempfile::tempdir().unwrap();
    let rlmm = DurableRemoteLogMetadataManager::open(dir.path().join("meta")).unwrap();
    let options = RecoveryOptions::default()
        .clean_orphans(true)
        .local_log_dir(dir.path().join("log"));
    let before = krabka_remote_storage::now_ms();
    let keys = bucket.keys();

    let installed = install(&bucket, &bucket.tp, &rlmm, &options).unwrap();
    let report = installed.report();
    assert_eq!(report.segments, 1, "{report:?}");
    assert_eq!(report.seq_range, Some(1..=10));
    // The abandoned copy's seqs were acknowledged by a writer that is gone: the local log
    // continues after them, and they are a hole.
    assert_eq!(report.local_log, LocalLogOutcome::StartedAt(16));
    assert_eq!(report.holes, vec![11..=15]);
    assert_eq!(report.claimed_end, Some(15));
    assert!(report.started_ms >= before, "{report:?}");
    assert_eq!(report.ignored.len(), 1, "{report:?}");
    assert_eq!(
        report.ignored[0].reason,
        IgnoreReason::AbandonedCopy { started_ms: 1_000 }
    );
    assert!(report.deleted.is_empty());
    // Installed and started, but nothing deleted yet.
    assert_eq!(bucket.keys(), keys);
    let recorded = rlmm.list_remote_log_segments(&bucket.tp).unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(
        recorded[0].remote_log_segment_id(),
        whole.remote_log_segment_id()
    );
    assert_eq!(
        recorded[0].state(),
        RemoteLogSegmentState::CopySegmentFinished
    );

    let report = installed.finish().unwrap();
    let manifest_key = layout::manifest_key(&abandoned).unwrap();
    assert_eq!(
        report.deleted,
        vec![layout::log_key(&abandoned).unwrap(), manifest_key.clone()]
    );
    let left: Vec<String> = keys
        .into_iter()
        .filter(|k| !report.deleted.contains(k))
        .collect();
    assert_eq!(bucket.keys(), left);
    assert!(!bucket.keys().contains(&manifest_key));
}

#[test]
fn an_installed_recovery_dropped_before_finish_deletes_nothing_and_a_rerun_finishes_it() {
    let (bucket, _, abandoned) = bucket();
    let dir = tempfile::tempdir().unwrap();
    let rlmm = DurableRemoteLogMetadataManager::open(dir.path().join("meta")).unwrap();
    let options = RecoveryOptions::default().clean_orphans(true);
    let keys = bucket.keys();
    drop(install(&bucket, &bucket.tp, &rlmm, &options).unwrap());
    assert_eq!(bucket.keys(), keys);
    // Running it again finds the segment already recorded, and finishes the clean-up.
    let report = install(&bucket, &bucket.tp, &rlmm, &options)
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(report.already_recorded, 1);
    assert_eq!(report.deleted.len(), 2, "{report:?}");
    assert!(
        !bucket
            .keys()
            .contains(&layout::manifest_key(&abandoned).unwrap())
    );
}
