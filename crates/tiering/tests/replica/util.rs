//! What the replica scenarios share: the records (a value derived from the writer's tag and
//! the seq, so any reader checks any record alone), owned writers, replicas, whole reads.

use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteStorageManager, TopicIdPartition, Uuid, layout, manifest,
};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::recovery::{Recovery, RecoveryOptions, recover};
use krabka_tiering::replica::{ReadReplica, ReplicaConfig};
use krabka_tiering::{Error, RemoteOwnership, TieredLog, TieringConfig};

use super::backend::Backend;

/// The partition every scenario writes.
pub fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(0x5e_71ca), "orders", 0)
}

/// The partition's directory in the bucket.
pub fn dir_key() -> String {
    layout::partition_dir(&tp()).unwrap()
}

/// The value a writer tagged `tag` appends at `seq`.
pub fn value(tag: &str, seq: u64) -> String {
    format!("{tag}{seq:08}-{}", "p".repeat(48))
}

/// FNV-1a of `bytes`: what a child process writes for each record it read.
pub fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Small segments (about 20 records each), no fsync.
pub fn options() -> Options {
    Options {
        max_bytes: 2048,
        index_interval_bytes: 256,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

/// Keep only what is not remote yet, locally; no age limits.
pub fn config() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        copy_concurrency: 1,
        ..TieringConfig::default()
    }
}

/// A replica config refreshing every `interval`.
pub fn replica_config(interval: Duration) -> ReplicaConfig {
    let mut c = ReplicaConfig::default();
    c.refresh_interval = interval;
    c
}

/// The messages `from..from + n` of writer `tag`, timestamped now (one Vec appended to two
/// logs cuts identical segments in both).
pub fn messages(tag: &str, from: u64, n: u64) -> Vec<Message> {
    let ts = krabka_remote_storage::now_ms();
    (from..from + n)
        .map(|seq| {
            Message::new(value(tag, seq)).with_timestamp(ts + i64::try_from(seq - from).unwrap())
        })
        .collect()
}

/// Appends `n` records of writer `tag`, in batches of `common::BATCH_RECORDS` (so that a
/// segment holds several batches).
pub fn append(log: &TieredLog, tag: &str, n: u64) -> RangeInclusive<u64> {
    let next = log.last_seq() + 1;
    let msgs = messages(tag, next, n);
    for (i, batch) in msgs
        .chunks(crate::common::BATCH_RECORDS as usize)
        .enumerate()
    {
        let from = next + i as u64 * crate::common::BATCH_RECORDS;
        let got = log.append_batch(batch).unwrap();
        assert_eq!(got, from..=from + batch.len() as u64 - 1);
    }
    next..=next + n - 1
}

/// Opens (or reopens) the owned writer in `dir` over `rsm` (the backend's, or a decorator).
pub fn open_writer(
    b: &Backend,
    dir: &Path,
    rsm: Arc<dyn RemoteStorageManager>,
    config: TieringConfig,
) -> Result<TieredLog, Error> {
    let metadata = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap());
    TieredLog::open_owned(
        dir.join("log"),
        options(),
        rsm,
        metadata,
        tp(),
        config,
        &RemoteOwnership::new(b.store.clone(), b.location.clone()),
    )
}

/// Recovers the partition into `dir` from the bucket, bound as a pending claim (a takeover's
/// first step).
pub fn recover_into(b: &Backend, dir: &Path) -> Recovery {
    std::fs::create_dir_all(dir).unwrap();
    let metadata = DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap();
    let lister: Arc<dyn RemoteSegmentLister> = b.store.clone();
    recover(
        &*lister,
        &tp(),
        &metadata,
        &RecoveryOptions::default()
            .local_log_dir(dir.join("log"))
            .bind_to(b.location.clone()),
    )
    .unwrap()
}

/// A replica of the partition over `store` (the backend's, or a counting one).
pub fn open_replica(
    b: &Backend,
    store: Arc<dyn OwnershipStore>,
    interval: Duration,
) -> ReadReplica {
    ReadReplica::open(
        b.rsm.clone(),
        store,
        tp(),
        TieringConfig::default(),
        replica_config(interval),
    )
    .unwrap()
}

/// Everything `replica` serves, `first_seq()..=last_seq()` in pages of `page`: `(seq, value)`.
/// Fails the test on a gap, an empty page or any error.
pub fn read_replica(replica: &ReadReplica, page: usize) -> Vec<(u64, String)> {
    let first = replica.first_seq().unwrap();
    let last = replica.last_seq().unwrap();
    let mut out = Vec::new();
    let mut seq = first;
    let started = Instant::now();
    while seq <= last {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "reading took too long"
        );
        let got = replica
            .read(seq, page)
            .unwrap_or_else(|e| panic!("reading seq {seq} of {first}..={last}: {e:?}"));
        assert!(
            !got.is_empty(),
            "an empty page at seq {seq} of {first}..={last}"
        );
        for r in got {
            assert_eq!(r.seq, seq, "records out of order");
            out.push((r.seq, String::from_utf8(r.message.value.to_vec()).unwrap()));
            seq += 1;
        }
    }
    out
}

/// Checks `records` hold exactly `range`, each with the value `expect` gives its seq.
pub fn assert_values(
    records: &[(u64, String)],
    range: RangeInclusive<u64>,
    expect: impl Fn(u64) -> String,
) {
    let seqs: Vec<u64> = records.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        (
            seqs.first().copied(),
            seqs.last().copied(),
            seqs.len() as u64
        ),
        (
            Some(*range.start()),
            Some(*range.end()),
            range.end() - range.start() + 1
        ),
        "the seqs read are not {range:?}"
    );
    for (seq, v) in records {
        assert_eq!(*v, expect(*seq), "wrong value at seq {seq}");
    }
}

/// Every manifest in the partition's directory, decoded (those that decode).
pub fn manifests(store: &dyn OwnershipStore) -> Vec<RemoteLogSegmentMetadata> {
    let mut keys = Vec::new();
    store
        .list_partition(&dir_key(), &mut |o| {
            if o.key.ends_with(layout::MANIFEST_SUFFIX) {
                keys.push(o.key);
            }
            Ok(())
        })
        .unwrap();
    keys.iter()
        .filter_map(|k| {
            let bytes = store.read_object(k).ok()?;
            manifest::decode(&bytes, k).ok()
        })
        .collect()
}

/// Runs `f` until it returns true, every 10 ms, for at most `limit`; whether it did.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if f() {
            return true;
        }
        if started.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One round of `log`, which must report no failure.
pub fn round(log: &TieredLog) -> krabka_tiering::TieringReport {
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    report
}
