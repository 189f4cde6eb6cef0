//! Helpers of the service tests: partitions on one fs backend and one metadata manager.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{
    RemoteLogSegmentState, RemoteStorageManager, TopicIdPartition, Uuid, layout,
};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_tiering::{RemoteReadCache, TieredLog, TieringConfig};

/// Partition `i` of topic `t`.
pub fn tp(i: i32) -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(7), "t", i)
}

/// The value stored at `seq` of partition `i`.
pub fn value(i: i32, seq: u64) -> String {
    format!("p{i}-v{seq:08}")
}

/// Small segments, no fsync.
pub fn options(max_bytes: u64) -> Options {
    Options {
        max_bytes,
        index_interval_bytes: 256,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

/// Keep locally only what is not remote yet.
pub fn config() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        chunk_bytes: 1024,
        ..TieringConfig::default()
    }
}

/// A test world: a temp dir, the fs backend under it, one metadata manager.
pub struct World {
    pub dir: tempfile::TempDir,
    pub fs: Arc<FsRemoteStorage>,
    pub rlmm: Arc<InMemoryRemoteLogMetadataManager>,
}

impl World {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
        Self {
            dir,
            fs,
            rlmm: Arc::new(InMemoryRemoteLogMetadataManager::new()),
        }
    }

    /// Opens partition `i` on `rsm` and appends `records` records (values from [`value`]).
    pub fn partition(
        &self,
        i: i32,
        rsm: Arc<dyn RemoteStorageManager>,
        max_bytes: u64,
        records: u64,
    ) -> Arc<TieredLog> {
        self.partition_with(i, rsm, max_bytes, records, None)
    }

    /// [`partition`](Self::partition) reading through `cache` (a service's) when given.
    pub fn partition_with(
        &self,
        i: i32,
        rsm: Arc<dyn RemoteStorageManager>,
        max_bytes: u64,
        records: u64,
        cache: Option<&RemoteReadCache>,
    ) -> Arc<TieredLog> {
        let mut log = TieredLog::open(
            self.dir.path().join(format!("p{i}")),
            options(max_bytes),
            rsm,
            self.rlmm.clone(),
            tp(i),
            config(),
        )
        .unwrap();
        if let Some(cache) = cache {
            log = log.with_cache(cache.clone());
        }
        append(&log, i, records);
        Arc::new(log)
    }

    /// Remote files no live metadata names, and live metadata not finished, over all
    /// partitions `0..n`.
    pub fn orphans(&self, n: i32) -> (Vec<PathBuf>, usize) {
        let mut unfinished = 0;
        let mut known = BTreeSet::new();
        for i in 0..n {
            for m in self.rlmm.list_remote_log_segments(&tp(i)).unwrap() {
                if m.state() != RemoteLogSegmentState::CopySegmentFinished {
                    unfinished += 1;
                }
                known.extend(layout::all_keys(&m).unwrap().into_iter().map(PathBuf::from));
            }
        }
        let stray = self
            .fs
            .list_objects()
            .unwrap()
            .into_iter()
            .filter(|p| !known.contains(p))
            .collect();
        (stray, unfinished)
    }
}

/// Records per batch [`append`] writes: small producer batches, so that a small segment holds
/// several batches.
const BATCH_RECORDS: usize = 4;

/// Appends `n` records to partition `i`'s log, in batches of [`BATCH_RECORDS`].
pub fn append(log: &TieredLog, i: i32, n: u64) {
    let next = log.last_seq() + 1;
    let msgs: Vec<Message> = (next..next + n)
        .map(|s| Message::new(value(i, s)))
        .collect();
    for batch in msgs.chunks(BATCH_RECORDS) {
        log.append_batch(batch).unwrap();
    }
}

/// Reads all of partition `i` and checks every record.
pub fn check_all(log: &TieredLog, i: i32) {
    let last = log.last_seq();
    let mut seq = log.first_seq().unwrap();
    assert_eq!(seq, 1, "partition {i} lost its start");
    for _ in 0..10_000 {
        if seq > last {
            return;
        }
        let page = log.read(seq, 500).unwrap();
        assert!(!page.is_empty(), "no progress at {seq}");
        for r in page {
            assert_eq!(r.seq, seq);
            assert_eq!(
                r.message.value.as_ref(),
                value(i, seq).as_bytes(),
                "partition {i} seq {seq}"
            );
            seq += 1;
        }
    }
    panic!("partition {i}: read did not finish");
}

/// Polls `cond` every 10 ms until it holds or `limit` passes; whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}
