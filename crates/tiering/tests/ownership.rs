//! Ownership of the shared remote tier through `TieredLog::open_owned` (docs/tiering.md,
//! "Ownership"): the binding (O1), writer epochs and fencing (O2), the lineage recovery follows,
//! and every ownership object lost or damaged one at a time. On the filesystem backend, the
//! in-process S3 server and Ceph RGW when `.ci/run` started it (`KRABKA_TEST_CEPH_*`; skipped
//! otherwise, a failure under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use krabka_protocol::Message;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_s3::{S3Config, S3RemoteStorage};
use krabka_remote_storage::ownership::{EpochRecord, OwnershipStore};
use krabka_remote_storage::{
    RemoteStorageError, RemoteStorageManager, TopicIdPartition, Uuid, layout,
};
use krabka_storage::Options;
use krabka_tiering::fs::FsRemoteStorage;
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::recovery::{IgnoreReason, RecoveryOptions, recover};
use krabka_tiering::{Error, RemoteOwnership, TieredLog, TieringConfig};

/// Overwrites an object (relative key) with bytes.
type Put = Box<dyn Fn(&str, Vec<u8>) + Send + Sync>;

/// A backend under test: the SPI, the ownership store, and a way to overwrite an object.
struct Backend {
    rsm: Arc<dyn RemoteStorageManager>,
    store: Arc<dyn OwnershipStore>,
    location: String,
    put: Put,
}

fn fs_backend(root: &Path) -> Backend {
    let store = Arc::new(FsRemoteStorage::new(root).unwrap());
    let root = root.to_path_buf();
    Backend {
        rsm: store.clone(),
        store,
        location: format!("fs://{}", root.display()),
        put: Box::new(move |key, bytes| std::fs::write(root.join(key), bytes).unwrap()),
    }
}

fn s3_backend(config: S3Config) -> Backend {
    let store = Arc::new(S3RemoteStorage::new(config.clone()).unwrap());
    let writer = store.clone();
    Backend {
        rsm: store.clone(),
        store,
        location: format!("s3://{}/{}", config.bucket, config.prefix),
        put: Box::new(move |key, bytes| {
            // Replace: delete, then create.
            krabka_remote_storage::recovery::RemoteSegmentLister::delete_object(&*writer, key)
                .unwrap();
            assert!(writer.create_if_absent(key, &bytes).unwrap());
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
    TopicIdPartition::new(Uuid::from_u128(42), "orders", 0)
}

fn ownership(b: &Backend) -> RemoteOwnership {
    RemoteOwnership::new(b.store.clone(), b.location.clone())
}

fn open(b: &Backend, dir: &Path) -> Result<TieredLog, Error> {
    let metadata = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap());
    TieredLog::open_owned(
        dir.join("log"),
        options(),
        b.rsm.clone(),
        metadata,
        tp(),
        config(),
        &ownership(b),
    )
}

fn append(log: &TieredLog, n: usize, tag: &str) {
    let msgs: Vec<Message> = (0..n)
        .map(|i| Message::new(format!("{tag} {i} {}", "x".repeat(40))))
        .collect();
    log.append_batch(&msgs).unwrap();
}

fn dir_key(b: &Backend) -> String {
    let _ = b;
    layout::partition_dir(&tp()).unwrap()
}

/// Recovers `tp()` into `dir` (metadata and an empty log) from the bucket, bound as pending.
fn recover_into(b: &Backend, dir: &Path) -> krabka_tiering::recovery::Recovery {
    std::fs::create_dir_all(dir).unwrap();
    let metadata = DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap();
    let lister: Arc<dyn krabka_remote_storage::recovery::RemoteSegmentLister> = b.store.clone();
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

fn read_all(log: &TieredLog) -> Vec<String> {
    let mut out = Vec::new();
    let mut seq = log.first_seq().unwrap();
    for _ in 0..10_000 {
        if seq > log.last_seq() {
            break;
        }
        let got = log.read(seq, 100).unwrap();
        assert!(!got.is_empty(), "no records at seq {seq}");
        seq = got.last().unwrap().seq + 1;
        out.extend(
            got.into_iter()
                .map(|r| String::from_utf8(r.message.value.to_vec()).unwrap()),
        );
    }
    out
}

/// The whole scenario on one backend.
fn scenario(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");

    // A new log claims epoch 1; copies carry it; a reopen keeps it.
    let log = open(b, &a).unwrap();
    assert_eq!(log.writer_epoch(), Some(1));
    assert_eq!(log.conditional_writes_enforced(), Some(true));
    append(&log, 60, "a");
    log.run_once().unwrap();
    assert!(log.local_first_seq() > 1, "nothing was tiered");
    let copied = 1..=log.local_first_seq() - 1;
    log.close().unwrap();
    let log = open(b, &a).unwrap();
    assert_eq!(log.writer_epoch(), Some(1));
    log.close().unwrap();

    // O1: the same directory with another remote or partition is refused, naming both.
    let other = tempfile::tempdir().unwrap();
    let wrong = fs_backend(other.path());
    match open(&wrong, &a) {
        Err(Error::Ownership(krabka_tiering::OwnershipError::WrongRemote {
            bound, given, ..
        })) => {
            assert_eq!(bound, b.location);
            assert_eq!(given, wrong.location);
        }
        other => panic!("{other:?}"),
    }
    let metadata = Arc::new(DurableRemoteLogMetadataManager::open(a.join("metadata")).unwrap());
    let err = TieredLog::open_owned(
        a.join("log"),
        options(),
        b.rsm.clone(),
        metadata,
        TopicIdPartition::new(Uuid::from_u128(43), "orders", 0),
        config(),
        &ownership(b),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Ownership(krabka_tiering::OwnershipError::WrongPartition { .. })
        ),
        "{err:?}"
    );

    // O2: a copy of the directory (cp -a) is refused before it copies anything.
    let copy = root.path().join("copy");
    copy_dir(&a, &copy);
    match open(b, &copy) {
        Err(Error::Ownership(krabka_tiering::OwnershipError::CopiedDirectory {
            epoch: 1, ..
        })) => {}
        other => panic!("{other:?}"),
    }

    // ... and so is a copy whose binding file was left behind (or deleted): once a writer
    // holds an epoch, an unbound directory never claims one.
    std::fs::remove_file(copy.join("log").join(krabka_tiering::BINDING_FILE)).unwrap();
    match open(b, &copy) {
        Err(Error::Ownership(krabka_tiering::OwnershipError::NotBound { .. })) => {}
        other => panic!("{other:?}"),
    }

    // O1: an empty directory over the populated remote never reads as an empty log.
    match open(b, &root.path().join("empty")) {
        Err(Error::Ownership(krabka_tiering::OwnershipError::RemoteHoldsPartition { .. })) => {}
        other => panic!("{other:?}"),
    }

    // Failover: B recovers from the bucket (a pending claim: A is not fenced yet) ...
    let bdir = root.path().join("b");
    let report = recover_into(b, &bdir);
    assert_eq!(report.seq_range, Some(copied.clone()));
    assert_eq!(report.binding.as_ref().unwrap().epoch, 0);
    let zombie = open(b, &a).unwrap();
    append(&zombie, 30, "zombie");
    // ... then B's first owned open claims epoch 2 from the recovered end on.
    let blog = open(b, &bdir).unwrap();
    assert_eq!(blog.writer_epoch(), Some(2));
    // A's next round is fenced before it copies or deletes anything, locally or remotely.
    let local_before = zombie.log().segments().len();
    match zombie.run_once() {
        Err(Error::Ownership(krabka_tiering::OwnershipError::Fenced {
            epoch: 1,
            by_epoch: 2,
            start_seq,
            ..
        })) => assert_eq!(start_seq, copied.end() + 1),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        zombie.run_once(),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::Fenced { .. }
        ))
    ));
    assert_eq!(zombie.log().segments().len(), local_before);
    zombie.close().unwrap();
    // The zombie coming back is refused at open.
    assert!(matches!(
        open(b, &a),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::Fenced { .. }
        ))
    ));

    // B continues: its records follow the recovered ones.
    append(&blog, 60, "b");
    blog.run_once().unwrap();
    let read = read_all(&blog);
    assert_eq!(
        read.len() as u64,
        blog.last_seq() - blog.first_seq().unwrap() + 1
    );
    assert!(read.iter().all(|r| !r.starts_with("zombie")));
    blog.close().unwrap();

    // A zombie's copy that raced the takeover (made as epoch 1 past B's start) is superseded
    // by the lineage: recovery never serves it.
    let metadata = DurableRemoteLogMetadataManager::open(root.path().join("scan")).unwrap();
    let lister: Arc<dyn krabka_remote_storage::recovery::RemoteSegmentLister> = b.store.clone();
    let late = zombie_copy(b, copied.end() + 1);
    let scan = recover(&*lister, &tp(), &metadata, &RecoveryOptions::default()).unwrap();
    assert!(
        scan.ignored
            .iter()
            .any(|o| o.key.contains(&late.to_string())
                && matches!(
                    o.reason,
                    IgnoreReason::FencedOut {
                        writer_epoch: 1,
                        by_epoch: 2,
                        ..
                    }
                )),
        "{:?}",
        scan.ignored
    );

    // Damaged and lost ownership objects, one at a time, under the live writer B.
    let d = dir_key(b);
    let epoch2 = layout::epoch_key(&d, 2);
    let saved = b.store.read_object(&epoch2).unwrap();
    krabka_remote_storage::recovery::RemoteSegmentLister::delete_object(&*b.store, &epoch2)
        .unwrap();
    let blog = open(b, &bdir).unwrap(); // lost: written again (create-only)
    assert_eq!(
        EpochRecord::decode(&b.store.read_object(&epoch2).unwrap(), "k")
            .unwrap()
            .incarnation,
        EpochRecord::decode(&saved, "k").unwrap().incarnation
    );
    let mut flipped = saved.clone();
    flipped[20] ^= 1;
    (b.put)(&epoch2, flipped);
    match blog.run_once() {
        Err(Error::Ownership(krabka_tiering::OwnershipError::Record { key, .. })) => {
            assert_eq!(key, epoch2)
        }
        other => panic!("{other:?}"),
    }
    (b.put)(&epoch2, saved);
    blog.run_once().unwrap();
    blog.close().unwrap();
    let identity = layout::identity_key(&d);
    let saved = b.store.read_object(&identity).unwrap();
    let mut flipped = saved.clone();
    flipped[10] ^= 1;
    (b.put)(&identity, flipped);
    assert!(matches!(
        open(b, &bdir),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::Record { .. }
        ))
    ));
    krabka_remote_storage::recovery::RemoteSegmentLister::delete_object(&*b.store, &identity)
        .unwrap();
    open(b, &bdir).unwrap().close().unwrap(); // lost: written again
    assert_eq!(b.store.read_object(&identity).unwrap().len(), saved.len());
    // A damaged binding file is an error naming it, never a new claim.
    let binding = bdir.join("log").join(krabka_tiering::BINDING_FILE);
    let text = std::fs::read(&binding).unwrap();
    std::fs::write(&binding, &text[..text.len() - 3]).unwrap();
    assert!(matches!(
        open(b, &bdir),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::Binding { .. }
        ))
    ));
}

/// Copies a segment into the bucket as writer epoch 1 starting at `start`, as a zombie that
/// passed its check just before the takeover would; returns the attempt's id.
fn zombie_copy(b: &Backend, start: u64) -> Uuid {
    let dir = tempfile::tempdir().unwrap();
    for n in ["s.log", "s.index", "s.timeindex"] {
        std::fs::write(dir.path().join(n), b"zzz").unwrap();
    }
    let id = krabka_remote_storage::RemoteLogSegmentId::generate(tp());
    let m = krabka_remote_storage::RemoteLogSegmentMetadata::builder(id.clone(), start, start + 4)
        .segment_size_in_bytes(3)
        .writer_epoch(1)
        .build()
        .unwrap();
    let data = krabka_remote_storage::LogSegmentData::new(
        dir.path().join("s.log"),
        dir.path().join("s.index"),
        dir.path().join("s.timeindex"),
    );
    b.rsm.copy_log_segment_data(&m, &data).unwrap();
    id.id()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != ".lock" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn fs_ownership_binding_fencing_and_lost_records() {
    let remote = tempfile::tempdir().unwrap();
    scenario(&fs_backend(remote.path()));
}

#[test]
fn s3_ownership_binding_fencing_and_lost_records() {
    let server = TestServer::start().unwrap();
    scenario(&s3_backend(server.config().with_prefix("own")));
}

#[test]
fn ceph_ownership_binding_fencing_and_lost_records() {
    if let Some(config) = common::ceph_config("ownership") {
        scenario(&s3_backend(config));
    }
}

#[test]
fn two_new_logs_racing_for_one_partition_leave_exactly_one_writer() {
    let remote = tempfile::tempdir().unwrap();
    let b = Arc::new(fs_backend(remote.path()));
    let root = tempfile::tempdir().unwrap();
    let (d1, d2) = (root.path().join("one"), root.path().join("two"));
    let b1 = b.clone();
    let one = std::thread::spawn(move || open(&b1, &d1).map(|l| (l.writer_epoch(), l)));
    let two = open(&b, &d2).map(|l| (l.writer_epoch(), l));
    let one = one.join().unwrap();
    // Either the second saw the first's records and was refused (an empty log over a remote
    // holding the partition), or both claimed, with distinct epochs, and the older is fenced
    // at its first round, before any copy. Never two writers.
    let mut logs = Vec::new();
    for opened in [one, two] {
        match opened {
            Ok(log) => logs.push(log),
            // Saw the other's records, or lost the race for the epoch: refused, never an
            // outbid of the winner.
            Err(
                Error::Ownership(krabka_tiering::OwnershipError::RemoteHoldsPartition { .. })
                | Error::Ownership(krabka_tiering::OwnershipError::Fenced { .. }),
            ) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    let epochs: Vec<_> = logs.iter().map(|(e, _)| *e).collect();
    assert_eq!(epochs, [Some(1)]);
    let mut writers = 0;
    for (_, log) in &logs {
        append(log, 60, "racer");
        match log.run_once() {
            Ok(_) => writers += 1,
            Err(Error::Ownership(krabka_tiering::OwnershipError::Fenced { .. })) => {
                assert_eq!(log.stats().segments_copied, 0)
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(writers, 1);
}

#[test]
fn racing_opens_repeated() {
    // The race above, many times (bounded): never two writers.
    for _ in 0..20 {
        two_new_logs_racing_for_one_partition_leave_exactly_one_writer();
    }
}

#[test]
fn a_service_driven_log_is_fenced_by_a_takeover_and_copies_nothing_more() {
    use krabka_tiering::{ServiceConfig, TieringService};
    use std::time::{Duration, Instant};
    let remote = tempfile::tempdir().unwrap();
    let b = fs_backend(remote.path());
    let root = tempfile::tempdir().unwrap();
    let a = Arc::new(open(&b, &root.path().join("a")).unwrap());
    append(&a, 60, "a");
    let svc = TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        ..ServiceConfig::default()
    })
    .unwrap();
    svc.add(a.clone()).unwrap();
    let started = Instant::now();
    while a.stats().copy_lag_segments > 0 && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(a.stats().copy_lag_segments, 0, "the service copied nothing");
    // A takeover from the bucket while the service drives A.
    recover_into(&b, &root.path().join("b"));
    let taker = open(&b, &root.path().join("b")).unwrap();
    assert_eq!(taker.writer_epoch(), Some(2));
    // The next round (or any check) finds the takeover; from then on A acknowledges nothing
    // more, and copies and deletes nothing.
    assert!(matches!(
        a.check_owner(),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::Fenced { .. }
        ))
    ));
    assert!(matches!(
        a.append(&Message::new("late")),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::Fenced { .. }
        ))
    ));
    let copied = a.stats().segments_copied;
    let local = a.log().segments().len();
    let last = a.last_seq();
    // Rounds keep coming (20 ms apart); none copies or deletes anything.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(a.stats().segments_copied, copied);
    assert_eq!(a.log().segments().len(), local);
    assert_eq!(a.last_seq(), last);
    let report = svc.shutdown(Duration::from_secs(5));
    assert!(report.clean, "{report:?}");
    taker.close().unwrap();
}

/// The documented fallback on a store that accepts `If-None-Match` and ignores it: the probe
/// finds out, a second claimant of the partition still fences the first at its next check (by
/// incarnation, when the same epoch was claimed twice), and a lost epoch record stops the
/// writer instead of being written again.
#[test]
fn on_a_store_that_ignores_create_only_writes_the_probe_tells_and_a_second_writer_is_fenced() {
    let server = TestServer::start_ignoring_conditional_writes().unwrap();
    let b = s3_backend(server.config().with_prefix("ignoring"));
    let root = tempfile::tempdir().unwrap();
    let a = open(&b, &root.path().join("a")).unwrap();
    assert_eq!(a.conditional_writes_enforced(), Some(false));
    append(&a, 60, "a");
    a.run_once().unwrap();
    // A second claimant of the same epoch (it listed before A's record existed): simulated
    // by overwriting A's epoch record with another incarnation, as the ignoring store allows.
    let d = dir_key(&b);
    let key = layout::epoch_key(&d, 1);
    let mine = EpochRecord::decode(&b.store.read_object(&key).unwrap(), "k").unwrap();
    let theirs = EpochRecord::new(1, mine.start_seq, Uuid::new_v4(), 0, "the other claimant");
    assert!(
        b.store.create_if_absent(&key, &theirs.encode()).unwrap(),
        "the store ignored it"
    );
    append(&a, 60, "late");
    let copied = a.stats().segments_copied;
    match a.run_once() {
        Err(Error::Ownership(krabka_tiering::OwnershipError::Fenced {
            epoch: 1,
            by_epoch: 1,
            claimant,
            ..
        })) => {
            assert_eq!(claimant, "the other claimant");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(a.stats().segments_copied, copied);
    a.close().unwrap();
    // A lost own epoch record cannot be written again safely here: the writer stops.
    let other = s3_backend(server.config().with_prefix("ignoring-lost"));
    let x = open(&other, &root.path().join("x")).unwrap();
    append(&x, 60, "x");
    krabka_remote_storage::recovery::RemoteSegmentLister::delete_object(
        &*other.store,
        &layout::epoch_key(&dir_key(&other), 1),
    )
    .unwrap();
    match x.run_once() {
        Err(Error::Ownership(krabka_tiering::OwnershipError::Record { key, .. })) => {
            assert!(key.ends_with("_epoch-00000000000000000001"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(x.stats().segments_copied, 0);
}

/// A drill recovered while the old writer had a copy in flight; the copy finished after the
/// recovery: the writer is alive, and the recovered directory's first open must not take the
/// partition over (it would supersede acknowledged records the writer then deleted locally).
/// The same after a crash between the claiming binding and the epoch record.
#[test]
fn a_copy_finished_after_the_recovery_blocks_the_takeover_even_after_a_crash_mid_claim() {
    use krabka_remote_storage::manifest;
    let remote = tempfile::tempdir().unwrap();
    let b = fs_backend(remote.path());
    let root = tempfile::tempdir().unwrap();
    let a = open(&b, &root.path().join("a")).unwrap();
    append(&a, 60, "a");
    a.run_once().unwrap();
    let end = a.local_first_seq() - 1;
    // A copy of end+1.. in flight (its in-progress manifest) while the drill recovers.
    let dir = tempfile::tempdir().unwrap();
    for n in ["s.log", "s.index", "s.timeindex"] {
        std::fs::write(dir.path().join(n), b"zzz").unwrap();
    }
    let m = krabka_remote_storage::RemoteLogSegmentMetadata::builder(
        krabka_remote_storage::RemoteLogSegmentId::generate(tp()),
        end + 1,
        end + 5,
    )
    .segment_size_in_bytes(3)
    .writer_epoch(1)
    .event_timestamp_ms(krabka_remote_storage::now_ms() - 1000)
    .build()
    .unwrap();
    (b.put)(
        &layout::manifest_key(&m).unwrap(),
        manifest::encode_in_progress(&m),
    );
    let drill = root.path().join("drill");
    let report = recover_into(&b, &drill);
    assert_eq!(report.seq_range, Some(1..=end));
    // The copy finishes after the recovery.
    let data = krabka_remote_storage::LogSegmentData::new(
        dir.path().join("s.log"),
        dir.path().join("s.index"),
        dir.path().join("s.timeindex"),
    );
    b.rsm.copy_log_segment_data(&m, &data).unwrap();
    match open(&b, &drill) {
        Err(Error::Ownership(krabka_tiering::OwnershipError::RemoteMovedOn {
            remote_seq, ..
        })) => assert_eq!(remote_seq, end + 1),
        other => panic!("{other:?}"),
    }
    // A crash between the claiming binding and the epoch record: the next open checks again.
    let binding_dir = drill.join("log");
    let mut claiming = krabka_tiering::ownership::binding::read(&binding_dir)
        .unwrap()
        .unwrap();
    assert_eq!(
        claiming.state,
        krabka_tiering::ownership::BindingState::Pending
    );
    claiming.epoch = 2;
    claiming.incarnation = Uuid::new_v4();
    claiming.state = krabka_tiering::ownership::BindingState::Claiming;
    krabka_tiering::ownership::binding::write(&binding_dir, &claiming).unwrap();
    assert!(matches!(
        open(&b, &drill),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::RemoteMovedOn { .. }
        ))
    ));
    let epoch_2 = b.store.read_object(&layout::epoch_key(&dir_key(&b), 2));
    assert!(
        matches!(&epoch_2, Err(RemoteStorageError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound),
        "no epoch was claimed: {epoch_2:?}"
    );
    // The old writer was never fenced.
    append(&a, 30, "more");
    a.run_once().unwrap();
}

#[test]
fn a_partition_an_older_build_wrote_in_frames_is_refused_naming_its_format() {
    let tmp = tempfile::tempdir().unwrap();
    let b = fs_backend(&tmp.path().join("remote"));
    drop(open(&b, &tmp.path().join("a")).unwrap());
    let key = layout::identity_key(&dir_key(&b));
    let old = krabka_remote_storage::ownership::IdentityRecord {
        log_format: krabka_remote_storage::ownership::LOG_FORMAT_KRABKA_FRAMES,
        ..krabka_remote_storage::ownership::IdentityRecord::new(tp(), 1)
    };
    (b.put)(&key, old.encode());
    match open(&b, &tmp.path().join("b")) {
        Err(Error::Ownership(krabka_tiering::OwnershipError::Record { source, .. })) => assert!(
            matches!(*source, RemoteStorageError::UnsupportedFormat { ref format, .. } if format.contains("old per-record frames")),
            "{source:?}"
        ),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A writer `a` in the bucket of `b` with its first records copied, then a copy of its
/// `first..=first + 4` in flight (an in-progress manifest, no data) carrying event time `at`.
fn writer_with_a_copy_in_flight(b: &Backend, root: &std::path::Path, at: i64) -> (TieredLog, u64) {
    let a = open(b, &root.join("a")).unwrap();
    append(&a, 60, "a");
    a.run_once().unwrap();
    let end = a.local_first_seq() - 1;
    put_copy_in_flight(b, end + 1, at);
    (a, end)
}

fn put_copy_in_flight(b: &Backend, first: u64, at: i64) {
    let m = krabka_remote_storage::RemoteLogSegmentMetadata::builder(
        krabka_remote_storage::RemoteLogSegmentId::generate(tp()),
        first,
        first + 4,
    )
    .segment_size_in_bytes(3)
    .writer_epoch(1)
    .event_timestamp_ms(at)
    .build()
    .unwrap();
    (b.put)(
        &layout::manifest_key(&m).unwrap(),
        krabka_remote_storage::manifest::encode_in_progress(&m),
    );
}

/// A writer that plans several copies in one millisecond stamps them ahead of its clock: a
/// copy it left in flight when it died can carry a time after the recovery began. That copy
/// began before the recovery (it listed it): the takeover goes ahead. A copy with a later
/// time still proves the writer alive.
#[test]
fn a_dead_writers_copy_stamped_ahead_of_the_clock_does_not_block_the_takeover() {
    let ahead = krabka_remote_storage::now_ms() + 60_000;
    let remote = tempfile::tempdir().unwrap();
    let b = fs_backend(remote.path());
    let root = tempfile::tempdir().unwrap();
    let (a, end) = writer_with_a_copy_in_flight(&b, root.path(), ahead);
    drop(a);
    let drill = root.path().join("drill");
    let report = recover_into(&b, &drill);
    assert_eq!(report.seq_range, Some(1..=end));
    let claimed = open(&b, &drill).unwrap();
    drop(claimed);
    // The same, but the writer starts its next copy after the recovery: refused.
    let remote = tempfile::tempdir().unwrap();
    let b = fs_backend(remote.path());
    let root = tempfile::tempdir().unwrap();
    let (_a, end) = writer_with_a_copy_in_flight(&b, root.path(), ahead);
    let drill = root.path().join("drill");
    recover_into(&b, &drill);
    put_copy_in_flight(&b, end + 6, ahead + 1);
    match open(&b, &drill) {
        Err(Error::Ownership(krabka_tiering::OwnershipError::RemoteMovedOn {
            remote_seq, ..
        })) => assert_eq!(remote_seq, end + 6),
        other => panic!("{:?}", other.map(|_| ())),
    }
}
