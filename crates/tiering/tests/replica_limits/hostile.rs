//! Hostile objects in the bucket: a manifest, the head and an epoch record of gigabytes. A
//! replica reads each bounded (on the filesystem proven in a child process whose address space
//! is smaller than the objects), reports what it cannot use, and serves every other record
//! exactly.

use std::ops::RangeInclusive;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_remote_storage::{RemoteStorageManager, layout};
use krabka_tiering::fs::FsRemoteStorage;
use krabka_tiering::replica::{HeadStatus, ReadReplica, RefreshOutcome};
use krabka_tiering::{Error, TieringConfig};

use crate::backend::Backend;
use crate::probe::{assert_records, plant_huge};
use crate::util::{
    append, assert_values, config, dir_key, manifests, open_replica, open_writer, read_replica,
    replica_config, round, tp,
};

/// The size of a hostile object: 4 GiB, written sparse (nothing is stored).
const HUGE: u64 = 4 << 30;
/// The address space of the child process reading the filesystem bucket: a quarter of
/// [`HUGE`], so reading one object whole fails.
const CHILD_ADDRESS_SPACE: u64 = 1 << 30;
/// The writer's tag.
const TAG: &str = "h";
const HOUR: Duration = Duration::from_secs(3600);

/// The child test's name (run with `--ignored --exact`).
pub const CHILD_TEST: &str = "hostile_objects_child_under_an_address_space_limit";
const ROOT_VAR: &str = "KRABKA_LIMITS_TEST_FS_ROOT";
const HOLE_VAR: &str = "KRABKA_LIMITS_TEST_HOLE";
const END_VAR: &str = "KRABKA_LIMITS_TEST_END";
const MANIFEST_VAR: &str = "KRABKA_LIMITS_TEST_MANIFEST";

/// A manifest of a middle segment and the head grown to [`HUGE`] bytes: the replica opens,
/// reports the head damaged, serves that segment's seqs as a hole and every other seq exactly;
/// its refreshes list the partition again and serve the same.
pub fn hostile_manifest_and_head(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, TAG, 120);
    round(&w);
    let end = w.local_first_seq() - 1;
    // No writer rewrites what is planted below.
    drop(w);
    let mut segments = manifests(b.store.as_ref());
    segments.sort_by_key(|m| m.start_offset());
    assert!(segments.len() >= 4, "{} segments", segments.len());
    let victim = &segments[2];
    let hole = victim.start_offset()..=victim.end_offset();
    let manifest_key = layout::manifest_key(victim).unwrap();
    plant_huge(b, &manifest_key, HUGE);
    plant_huge(b, &layout::head_key(&dir_key()), HUGE);

    match b.location.strip_prefix("fs://") {
        Some(fs_root) => run_child(fs_root, &hole, end, &manifest_key),
        None => check_hostile_view(b.rsm.clone(), b.store.clone(), &hole, end),
    }
}

/// Runs [`child_checks_the_hostile_view`] in a child process limited to
/// [`CHILD_ADDRESS_SPACE`].
fn run_child(fs_root: &str, hole: &RangeInclusive<u64>, end: u64, manifest_key: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            CHILD_TEST,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROOT_VAR, fs_root)
        .env(HOLE_VAR, format!("{}-{}", hole.start(), hole.end()))
        .env(END_VAR, end.to_string())
        .env(MANIFEST_VAR, manifest_key)
        // Few malloc arenas: each reserves address space the limit counts.
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // The child test ran (and was not filtered out).
    assert!(
        stdout.contains("1 passed"),
        "the child did not run its test:\n{stdout}\n{stderr}"
    );
}

/// The child: limits its address space, shows a whole read of the hostile manifest fails
/// under the limit, then checks the replica as [`check_hostile_view`] does.
pub fn child_checks_the_hostile_view() {
    let Ok(root) = std::env::var(ROOT_VAR) else {
        return;
    };
    let var = |n: &str| std::env::var(n).unwrap();
    let (from, to) = var(HOLE_VAR)
        .split_once('-')
        .map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
        .unwrap();
    let end: u64 = var(END_VAR).parse().unwrap();
    let limit = rustix::process::getrlimit(rustix::process::Resource::As);
    rustix::process::setrlimit(
        rustix::process::Resource::As,
        rustix::process::Rlimit {
            current: Some(CHILD_ADDRESS_SPACE),
            maximum: limit.maximum,
        },
    )
    .unwrap();
    // The limit holds: neither a buffer of the object's size nor a whole read of it fits.
    let mut buffer: Vec<u8> = Vec::new();
    assert!(
        buffer
            .try_reserve_exact(usize::try_from(HUGE).unwrap())
            .is_err()
    );
    let store = Arc::new(FsRemoteStorage::new(&root).unwrap());
    let whole = store.read_object(&var(MANIFEST_VAR));
    assert!(whole.is_err(), "a whole read of 4 GiB fit in the limit");
    check_hostile_view(store.clone(), store, &(from..=to), end);
}

/// Opens a replica over the hostile bucket and checks what it serves.
fn check_hostile_view(
    rsm: Arc<dyn RemoteStorageManager>,
    store: Arc<dyn OwnershipStore>,
    hole: &RangeInclusive<u64>,
    end: u64,
) {
    let r = ReadReplica::open(
        rsm,
        store,
        tp(),
        TieringConfig::default(),
        replica_config(HOUR),
    )
    .unwrap();
    assert_hostile_view(&r, hole, end);
    // A refresh reads the head bounded again, lists again, and serves the same.
    assert_eq!(r.refresh().unwrap(), RefreshOutcome::FullListing);
    assert_hostile_view(&r, hole, end);
    assert_eq!(r.stats().refresh_failures, 0);
}

/// `r` serves `1..=end` but `hole` (a [`ReadError::RemoteHole`](krabka_tiering::ReadError::RemoteHole) of exactly those seqs), every
/// record with its value, and reports the head damaged.
fn assert_hostile_view(r: &ReadReplica, hole: &RangeInclusive<u64>, end: u64) {
    let stats = r.stats();
    assert!(
        matches!(&stats.head, HeadStatus::Damaged(why) if why.contains("limit")),
        "{:?}",
        stats.head
    );
    assert_eq!((r.first_seq().unwrap(), r.last_seq().unwrap()), (1, end));
    assert!(
        r.segments()
            .iter()
            .all(|m| m.end_offset() < *hole.start() || m.start_offset() > *hole.end()),
        "the segment of the hostile manifest is served"
    );
    read_range(r, 1..=hole.start() - 1);
    for seq in [*hole.start(), *hole.end()] {
        match r.read(seq, 10) {
            Err(Error::Read(krabka_tiering::ReadError::RemoteHole { from, to, .. })) => {
                assert_eq!(from..=to, hole.clone(), "the hole at seq {seq}");
            }
            other => panic!("reading seq {seq} in the hole: {other:?}"),
        }
    }
    read_range(r, hole.end() + 1..=end);
}

/// Reads `range` from `r` in pages of 30 (a page stops short at a hole), checking every value.
fn read_range(r: &ReadReplica, range: RangeInclusive<u64>) {
    let mut seq = *range.start();
    for _ in 0..10_000 {
        if seq > *range.end() {
            return;
        }
        let got = r
            .read(seq, 30)
            .unwrap_or_else(|e| panic!("reading seq {seq}: {e:?}"));
        assert!(!got.is_empty(), "an empty page at seq {seq}");
        let got: Vec<_> = got.into_iter().filter(|x| x.seq <= *range.end()).collect();
        assert_records(&got, seq, TAG);
        seq += got.len() as u64;
    }
    panic!("reading {range:?} did not end");
}

/// An epoch record of a later epoch grown to [`HUGE`] bytes, after the replica opened and the
/// writer wrote a new head: the refresh that learns the epochs reads it bounded, treats it as
/// unreadable (as recovery does a record that does not decode), and serves everything; so
/// does a replica opened afterwards (a full listing).
pub fn hostile_epoch_record(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, TAG, 80);
    round(&w);
    let r = open_replica(b, b.store.clone(), HOUR);
    append(&w, TAG, 60);
    round(&w);
    let end = w.local_first_seq() - 1;
    drop(w);
    plant_huge(b, &layout::epoch_key(&dir_key(), 2), HUGE);

    let outcome = r.refresh().unwrap();
    assert!(
        matches!(
            outcome,
            RefreshOutcome::Applied { .. } | RefreshOutcome::FullListing
        ),
        "{outcome:?}"
    );
    assert_eq!(r.stats().head, HeadStatus::Current);
    assert_values(&read_replica(&r, 50), 1..=end, |s| {
        crate::util::value(TAG, s)
    });
    let fresh = open_replica(b, b.store.clone(), HOUR);
    assert_eq!(fresh.stats().head, HeadStatus::Current);
    assert_values(&read_replica(&fresh, 50), 1..=end, |s| {
        crate::util::value(TAG, s)
    });
}
