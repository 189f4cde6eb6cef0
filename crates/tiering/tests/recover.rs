//! Disaster recovery from the remote tier alone (`krabka_remote_storage::recovery`), end to end
//! through `TieredLog`, on the filesystem backend, the in-process S3 server, and Ceph RGW when
//! `.ci/run` started it (`KRABKA_TEST_CEPH_*`; skipped otherwise, a failure under `CI=true`).
//!
//! A crash (SIGKILL) mid-copy or mid-delete leaves exactly one of these states, which the tests
//! build directly through the backend: mid-copy, some or all of a segment's data and index
//! objects without its manifest (written last); mid-delete, the data objects of a segment whose
//! manifest is gone (removed first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "recover/head.rs"]
mod head;

use std::path::Path;
use std::sync::Arc;

use krabka_protocol::Message;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_s3::{S3Config, S3RemoteStorage};
use krabka_remote_storage::{
    LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition, Uuid, layout,
};
use krabka_storage::Options;
use krabka_tiering::fs::FsRemoteStorage;
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::recovery::{
    IgnoreReason, LocalLogOutcome, Recovery, RecoveryOptions, RemoteSegmentLister, recover,
};
use krabka_tiering::{Error, TieredLog, TieringConfig};

/// Overwrites an object (relative key) with bytes.
type Put = Box<dyn Fn(&str, Vec<u8>)>;

/// A backend under test: the SPI, recovery's lister, and a way to overwrite an object.
struct Backend {
    rsm: Arc<dyn RemoteStorageManager>,
    lister: Arc<dyn RemoteSegmentLister>,
    put: Put,
}

fn fs_backend(root: &Path) -> Backend {
    let store = Arc::new(FsRemoteStorage::new(root).unwrap());
    let root = root.to_path_buf();
    Backend {
        rsm: store.clone(),
        lister: store,
        put: Box::new(move |key, bytes| std::fs::write(root.join(key), bytes).unwrap()),
    }
}

fn s3_backend(config: S3Config) -> Backend {
    let store = Arc::new(S3RemoteStorage::new(config.clone()).unwrap());
    let client = store.client().clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    Backend {
        rsm: store.clone(),
        lister: store,
        put: Box::new(move |key, bytes| {
            let full = if config.prefix.is_empty() {
                key.to_owned()
            } else {
                format!("{}/{key}", config.prefix)
            };
            rt.block_on(
                client
                    .put_object()
                    .bucket(&config.bucket)
                    .key(full)
                    .body(bytes.into())
                    .send(),
            )
            .unwrap();
        }),
    }
}

fn options() -> Options {
    Options {
        max_bytes: 600,
        ..Options::default()
    }
}

fn config() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        ..TieringConfig::default()
    }
}

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(0x4b52_4142), "orders", 0)
}

/// Appends `n` records `"{tag}-{i}"`, tiers every closed segment, closes; returns the remote
/// end (the last tiered seq) and the number of remote segments.
fn tier(backend: &Backend, work: &Path, tag: &str, n: usize) -> (u64, usize) {
    let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(work.join("meta")).unwrap());
    let log = TieredLog::open(
        work.join("log"),
        options(),
        backend.rsm.clone(),
        rlmm.clone(),
        tp(),
        config(),
    )
    .unwrap();
    let msgs: Vec<Message> = (0..n)
        .map(|i| Message::new(format!("{tag}-{i:05}-{}", "x".repeat(80))))
        .collect();
    for chunk in msgs.chunks(50) {
        log.append_batch(chunk).unwrap();
    }
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let segments =
        krabka_remote_storage::metadata::RemoteLogMetadataManager::list_remote_log_segments(
            &*rlmm,
            &tp(),
        )
        .unwrap();
    let end = segments
        .last()
        .map_or(0, RemoteLogSegmentMetadata::end_offset);
    (end, segments.len())
}

fn wipe(work: &Path) {
    for d in ["log", "meta"] {
        let _ = std::fs::remove_dir_all(work.join(d));
    }
}

fn run_recovery(backend: &Backend, work: &Path, clean: bool) -> Recovery {
    let rlmm = DurableRemoteLogMetadataManager::open(work.join("meta")).unwrap();
    recover(
        &*backend.lister,
        &tp(),
        &rlmm,
        &RecoveryOptions::default()
            .local_log_dir(work.join("log"))
            .clean_orphans(clean),
    )
    .unwrap()
}

/// Opens the recovered log and reads every record from its first seq.
fn read_all(backend: &Backend, work: &Path) -> (u64, Vec<(u64, String)>) {
    let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(work.join("meta")).unwrap());
    let log = TieredLog::open(
        work.join("log"),
        options(),
        backend.rsm.clone(),
        rlmm,
        tp(),
        config(),
    )
    .unwrap();
    let first = log.first_seq().unwrap();
    let mut out = Vec::new();
    let mut from = first;
    // Bounded: every pass reads at least one record or skips one hole.
    for _ in 0..1_000_000 {
        let batch = match log.read(from, 500) {
            Ok(batch) => batch,
            // A hole recovery reported: lost seqs, named; the records after it read on.
            Err(krabka_tiering::Error::Read(krabka_tiering::ReadError::RemoteHole {
                from: lost,
                to,
                ..
            })) => {
                assert_eq!(lost, from, "the hole starts where the read did");
                from = to + 1;
                continue;
            }
            Err(e) => panic!("read from seq {from}: {e}"),
        };
        if batch.is_empty() {
            break;
        }
        for r in batch {
            assert_eq!(r.seq, from);
            from += 1;
            out.push((r.seq, String::from_utf8(r.message.value.to_vec()).unwrap()));
        }
    }
    // Appends continue after the remote end.
    assert_eq!(log.append(&Message::new("after")).unwrap(), from);
    (first, out)
}

fn expected(tag: &str, seqs: std::ops::RangeInclusive<u64>) -> Vec<(u64, String)> {
    seqs.map(|s| (s, format!("{tag}-{:05}-{}", s - 1, "x".repeat(80))))
        .collect()
}

fn count(report: &Recovery, pred: impl Fn(&IgnoreReason) -> bool) -> usize {
    report.ignored.iter().filter(|i| pred(&i.reason)).count()
}

/// 100+ segments: wipe the local log and the metadata, recover (twice), read every record.
fn wipe_recover_read(backend: &Backend, work: &Path) {
    let (end, segments) = tier(backend, work, "a", 600);
    assert!(segments >= 100, "{segments} segments");
    wipe(work);
    let report = run_recovery(backend, work, false);
    assert_eq!(report.segments, segments, "{report:?}");
    assert_eq!(report.seq_range, Some(1..=end));
    assert!(report.ignored.is_empty(), "{:?}", report.ignored);
    assert_eq!(report.local_log, LocalLogOutcome::StartedAt(end + 1));
    assert_eq!(report.already_recorded, 0);
    // Twice: the same result, nothing new recorded.
    let again = run_recovery(backend, work, false);
    assert_eq!(
        (again.segments, again.seq_range.clone(), again.bytes),
        (report.segments, report.seq_range.clone(), report.bytes)
    );
    assert_eq!(again.ignored, report.ignored);
    assert_eq!(again.already_recorded, segments);
    let (first, records) = read_all(backend, work);
    assert_eq!(first, 1);
    assert_eq!(records, expected("a", 1..=end));
}

/// A copy of `n` seqs from `start` that fails part-way (its `.timeindex` cannot be read), begun
/// at `started_ms`: its in-progress manifest and `.log` are left, as a SIGKILL mid-copy leaves
/// them.
fn interrupted_copy(backend: &Backend, start: u64, started_ms: i64) -> RemoteLogSegmentMetadata {
    let local = tempfile::tempdir().unwrap();
    for name in ["s.log", "s.index"] {
        std::fs::write(local.path().join(name), b"partial").unwrap();
    }
    let partial =
        RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), start, start + 4)
            .segment_size_in_bytes(7)
            .event_timestamp_ms(started_ms)
            .build()
            .unwrap();
    let data = LogSegmentData::new(
        local.path().join("s.log"),
        local.path().join("s.index"),
        local.path().join("missing.timeindex"),
    );
    let copied = backend.rsm.copy_log_segment_data(&partial, &data);
    assert!(
        matches!(&copied, Err(RemoteStorageError::Io { location, source })
            if location.ends_with("missing.timeindex")
                && source.kind() == std::io::ErrorKind::NotFound),
        "{copied:?}"
    );
    partial
}

/// Cleanup never guesses: a lost manifest is rebuilt from its segment's objects (never deleted);
/// a copy in progress (in-progress manifest, recent) is kept; an abandoned one (in-progress
/// manifest older than the abandon limit) and objects of a legacy copy with no manifest at all
/// are told apart, and only the abandoned copy is deleted by `clean_orphans`.
fn interrupted_copy_and_delete(backend: &Backend, work: &Path) {
    let (end, segments) = tier(backend, work, "a", 200);
    let rlmm = DurableRemoteLogMetadataManager::open(work.join("meta")).unwrap();
    let listed =
        krabka_remote_storage::metadata::RemoteLogMetadataManager::list_remote_log_segments(
            &rlmm,
            &tp(),
        )
        .unwrap();
    drop(rlmm);
    // The oldest segment's manifest is lost: its data and indexes are intact.
    let oldest = &listed[0];
    backend
        .lister
        .delete_object(&layout::manifest_key(oldest).unwrap())
        .unwrap();
    // A copy in progress right now, and one abandoned long ago, past the end.
    let running = interrupted_copy(backend, end + 1, krabka_remote_storage::now_ms());
    let abandoned = interrupted_copy(backend, end + 1, 1_000);
    // A legacy interrupted copy: objects, no manifest at all.
    let local = tempfile::tempdir().unwrap();
    for name in ["s.log", "s.index", "s.timeindex"] {
        std::fs::write(local.path().join(name), b"partial").unwrap();
    }
    let legacy =
        RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), end + 1, end + 5)
            .segment_size_in_bytes(7)
            .build()
            .unwrap();
    let data = LogSegmentData::new(
        local.path().join("s.log"),
        local.path().join("s.index"),
        local.path().join("s.timeindex"),
    );
    backend.rsm.copy_log_segment_data(&legacy, &data).unwrap();
    backend
        .lister
        .delete_object(&layout::manifest_key(&legacy).unwrap())
        .unwrap();
    wipe(work);
    let report = run_recovery(backend, work, false);
    // Every segment is recovered, the one without a manifest rebuilt from its objects.
    assert_eq!(report.segments, segments, "{report:?}");
    assert_eq!(report.seq_range, Some(1..=end));
    assert_eq!(
        report.rebuilt,
        vec![layout::manifest_key(oldest).unwrap()],
        "{report:?}"
    );
    let reason_of = |report: &Recovery, m: &RemoteLogSegmentMetadata| {
        let key = layout::manifest_key(m).unwrap();
        report
            .ignored
            .iter()
            .find(|i| i.key == key)
            .map(|i| i.reason.clone())
    };
    assert!(
        matches!(reason_of(&report, &running), Some(IgnoreReason::CopyInProgress { started_ms, .. }) if started_ms == running.event_timestamp_ms()),
        "{report:?}"
    );
    assert_eq!(
        reason_of(&report, &abandoned),
        Some(IgnoreReason::AbandonedCopy { started_ms: 1_000 })
    );
    assert!(matches!(
        reason_of(&report, &legacy),
        Some(IgnoreReason::ManifestMissing(_))
    ));
    assert_eq!(report.ignored.len(), 3, "{:?}", report.ignored);
    assert!(report.deleted.is_empty());
    // The abandoned copy and the legacy one held seqs end + 1..=end + 5, acknowledged by a
    // writer that is gone: the recovered log continues after them (the copy in progress
    // does not count: its writer is alive and finishes it), and they are a reported hole.
    assert_eq!(report.holes, vec![end + 1..=end + 5]);
    assert_eq!(report.local_log, LocalLogOutcome::StartedAt(end + 6));
    let (first, records) = read_all(backend, work);
    assert_eq!(first, 1);
    assert_eq!(records, expected("a", 1..=end));
    // --clean-orphans removes exactly the abandoned copy's objects (its .log, then its
    // manifest); the copy in progress, the legacy objects and the log are untouched.
    // Which of its objects the failed copy wrote depends on the backend (S3 uploads them at
    // once).
    let cleaned = run_recovery(backend, work, true);
    let abandoned_keys = layout::all_keys(&abandoned).unwrap();
    assert!(
        cleaned.deleted.iter().all(|k| abandoned_keys.contains(k)),
        "{:?}",
        cleaned.deleted
    );
    assert!(
        cleaned
            .deleted
            .contains(&layout::log_key(&abandoned).unwrap())
    );
    assert_eq!(
        cleaned.deleted.last(),
        Some(&layout::manifest_key(&abandoned).unwrap())
    );
    let after = run_recovery(backend, work, true);
    assert!(after.deleted.is_empty(), "{:?}", after.deleted);
    assert_eq!(after.ignored.len(), 2, "{:?}", after.ignored);
    assert!(reason_of(&after, &running).is_some());
    assert!(reason_of(&after, &legacy).is_some());
    assert_eq!(after.seq_range, Some(1..=end));
    let (first, records) = read_all(backend, work);
    assert_eq!(first, 1);
    // The first read appended one record after the lost seqs.
    assert_eq!(records.len() as u64, end + 1);
    assert_eq!(records.last().map(|r| r.0), Some(end + 6));
    assert_eq!(records[..records.len() - 1], expected("a", 1..=end)[..]);
}

/// A corrupted manifest, a missing data object and a truncated one: each reported; the log is
/// the whole segments after the last damage, and the whole ones before a hole are reported.
fn damaged_objects(backend: &Backend, work: &Path) {
    let (end, segments) = tier(backend, work, "a", 300);
    let rlmm = DurableRemoteLogMetadataManager::open(work.join("meta")).unwrap();
    let listed =
        krabka_remote_storage::metadata::RemoteLogMetadataManager::list_remote_log_segments(
            &rlmm,
            &tp(),
        )
        .unwrap();
    drop(rlmm);
    assert!(segments > 40);
    // Corrupt manifest of segment 5, missing data of 15, truncated data of 25.
    let manifest_key = layout::manifest_key(&listed[5]).unwrap();
    let mut bytes = backend.lister.read_object(&manifest_key).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    (backend.put)(&manifest_key, bytes);
    backend
        .lister
        .delete_object(&layout::log_key(&listed[15]).unwrap())
        .unwrap();
    let log_key = layout::log_key(&listed[25]).unwrap();
    let mut data = backend.lister.read_object(&log_key).unwrap();
    data.truncate(data.len() - 3);
    (backend.put)(&log_key, data);
    wipe(work);
    let report = run_recovery(backend, work, false);
    let start = listed[0].start_offset();
    assert_eq!(report.seq_range, Some(start..=end), "{report:?}");
    // Each damaged segment costs its own seqs only: a hole each, reported.
    assert_eq!(report.segments, segments - 3);
    let lost: Vec<_> = [5, 15, 25]
        .iter()
        .map(|&i| listed[i].start_offset()..=listed[i].end_offset())
        .collect();
    assert_eq!(report.holes, lost);
    assert_eq!(
        count(&report, |r| matches!(r, IgnoreReason::CorruptManifest(_))),
        1
    );
    assert_eq!(count(&report, |r| *r == IgnoreReason::DataMissing), 1);
    assert_eq!(
        count(&report, |r| matches!(r, IgnoreReason::DataWrongSize { .. })),
        1
    );
    assert_eq!(
        count(&report, |r| matches!(r, IgnoreReason::NotContiguous(_))),
        0
    );
    assert_eq!(report.ignored.len(), 3);
    let (first, records) = read_all(backend, work);
    assert_eq!(first, start);
    let kept: Vec<_> = expected("a", start..=end)
        .into_iter()
        .filter(|(seq, _)| !lost.iter().any(|h| h.contains(seq)))
        .collect();
    assert_eq!(records, kept);
    // Twice: the same report.
    let again = run_recovery(backend, work, false);
    assert_eq!(again.ignored, report.ignored);
    assert_eq!(again.seq_range, report.seq_range);
}

/// The last segment's data lost: its seqs are a hole at the end of the recovered range, and the
/// recovered log continues after them, never reusing a seq a writer acknowledged.
fn damaged_last_segment(backend: &Backend, work: &Path) {
    let (end, segments) = tier(backend, work, "a", 300);
    let rlmm = DurableRemoteLogMetadataManager::open(work.join("meta")).unwrap();
    let listed =
        krabka_remote_storage::metadata::RemoteLogMetadataManager::list_remote_log_segments(
            &rlmm,
            &tp(),
        )
        .unwrap();
    drop(rlmm);
    let last = listed.last().unwrap();
    assert_eq!(last.end_offset(), end);
    backend
        .lister
        .delete_object(&layout::log_key(last).unwrap())
        .unwrap();
    wipe(work);
    let report = run_recovery(backend, work, false);
    let recovered_end = last.start_offset() - 1;
    assert_eq!(report.seq_range, Some(1..=recovered_end), "{report:?}");
    assert_eq!(report.segments, segments - 1);
    assert_eq!(report.holes, vec![last.start_offset()..=end]);
    assert_eq!(count(&report, |r| *r == IgnoreReason::DataMissing), 1);
    assert_eq!(report.local_log, LocalLogOutcome::StartedAt(end + 1));
    // Every record before the lost segment reads back; the append after the hole gets end + 1.
    let (first, records) = read_all(backend, work);
    assert_eq!(first, 1);
    assert_eq!(records, expected("a", 1..=recovered_end));
}

/// Two incarnations under one prefix: the later one is the log; the older one's segments are
/// reported as superseded and never mixed in.
fn two_incarnations(backend: &Backend, work: &Path) {
    let (_, old_segments) = tier(backend, work, "old", 300);
    wipe(work);
    std::thread::sleep(std::time::Duration::from_millis(20));
    // A new log under the same topic id, knowing nothing of the old objects.
    let (end, segments) = tier(backend, work, "new", 150);
    assert!(old_segments > segments);
    wipe(work);
    let report = run_recovery(backend, work, false);
    assert_eq!(report.seq_range, Some(1..=end), "{report:?}");
    assert_eq!(report.segments, segments);
    assert_eq!(
        count(&report, |r| matches!(r, IgnoreReason::Superseded { .. })),
        old_segments
    );
    let (_, records) = read_all(backend, work);
    assert_eq!(records, expected("new", 1..=end));
}

/// The binding of the recovered directory comes before the clean-up: a recovery whose binding
/// is refused (the directory is bound to another remote) deletes nothing; the same run with the
/// remote the directory is bound to deletes the abandoned copy.
fn a_refused_binding_deletes_nothing(backend: &Backend, work: &Path) {
    let (end, _) = tier(backend, work, "a", 100);
    let abandoned = interrupted_copy(backend, end + 1, 1_000);
    let manifest = layout::manifest_key(&abandoned).unwrap();
    wipe(work);
    let run = |location: &str, clean: bool| {
        let rlmm = DurableRemoteLogMetadataManager::open(work.join("meta")).unwrap();
        recover(
            &*backend.lister,
            &tp(),
            &rlmm,
            &RecoveryOptions::default()
                .local_log_dir(work.join("log"))
                .bind_to(location)
                .clean_orphans(clean),
        )
    };
    let bound = run("fs://first", false).unwrap();
    assert!(bound.binding.is_some());
    assert!(bound.deleted.is_empty());
    let refused = run("fs://second", true).map(|_| ()).unwrap_err();
    assert!(
        matches!(&refused, RemoteStorageError::Backend { operation, source: Some(source), .. }
            if operation == "binding the recovered log"
                && matches!(source.downcast_ref::<Error>(), Some(Error::Ownership(krabka_tiering::OwnershipError::WrongRemote { .. })))),
        "{refused:?}"
    );
    assert!(backend.lister.read_object(&manifest).is_ok());
    let cleaned = run("fs://first", true).unwrap();
    assert_eq!(cleaned.deleted.last(), Some(&manifest), "{cleaned:?}");
    let gone = backend.lister.read_object(&manifest);
    assert!(
        matches!(&gone, Err(RemoteStorageError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound),
        "the cleaned manifest is gone: {gone:?}"
    );
}

fn on_fs(scenario: fn(&Backend, &Path)) {
    let dir = tempfile::tempdir().unwrap();
    let backend = fs_backend(&dir.path().join("remote"));
    scenario(&backend, dir.path());
}

fn on_s3(scenario: fn(&Backend, &Path)) {
    let server = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Each test has a server of its own; s3s-fs refuses keys whose internal names get long.
    let backend = s3_backend(server.config().with_prefix("t"));
    scenario(&backend, dir.path());
}

fn on_ceph(scenario: fn(&Backend, &Path)) {
    if let Some(config) = common::ceph_config("recover") {
        let dir = tempfile::tempdir().unwrap();
        scenario(&s3_backend(config), dir.path());
    }
}

#[test]
fn fs_wipe_recover_read() {
    on_fs(wipe_recover_read);
}

#[test]
fn fs_a_refused_binding_deletes_nothing() {
    on_fs(a_refused_binding_deletes_nothing);
}

#[test]
fn fs_interrupted_copy_and_delete() {
    on_fs(interrupted_copy_and_delete);
}

#[test]
fn fs_damaged_objects() {
    on_fs(damaged_objects);
}

#[test]
fn fs_damaged_last_segment() {
    on_fs(damaged_last_segment);
}

#[test]
fn s3_damaged_last_segment() {
    on_s3(damaged_last_segment);
}

#[test]
fn fs_two_incarnations() {
    on_fs(two_incarnations);
}

#[test]
fn s3_wipe_recover_read() {
    on_s3(wipe_recover_read);
}

#[test]
fn s3_interrupted_copy_and_delete() {
    on_s3(interrupted_copy_and_delete);
}

#[test]
fn s3_damaged_objects() {
    on_s3(damaged_objects);
}

#[test]
fn s3_two_incarnations() {
    on_s3(two_incarnations);
}

#[test]
fn ceph_wipe_recover_read() {
    on_ceph(wipe_recover_read);
}

#[test]
fn ceph_damaged_objects_and_incarnations() {
    on_ceph(damaged_objects);
    on_ceph(two_incarnations);
    on_ceph(interrupted_copy_and_delete);
}
