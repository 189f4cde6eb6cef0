//! Shared helpers of the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod setup;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use krabka_protocol::Message;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{RemoteLogSegmentState, TopicIdPartition, Uuid, layout};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::TieredLog;

/// The partition every test stores.
pub fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(42), "orders", 0)
}

/// Local log options: small segments, no fsync (the tests crash processes, not machines).
pub fn options(max_bytes: u64) -> Options {
    Options {
        max_bytes,
        index_interval_bytes: 256,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

/// The message every test stores at `seq`: its content is a function of the seq, so a reader
/// can check any record without remembering what was written.
pub fn message(seq: u64) -> Message {
    Message::new(format!("value-{seq:010}"))
        .with_key(format!("k{}", seq % 97))
        .with_timestamp(krabka_remote_storage::now_ms())
}

/// Records per batch [`append`] writes: small producer batches, so that a small segment holds
/// several batches of several records each.
pub const BATCH_RECORDS: u64 = 4;

/// Appends `n` records in batches of [`BATCH_RECORDS`], checking they get the expected seqs.
pub fn append(log: &TieredLog, n: u64) {
    let mut next = log.last_seq() + 1;
    let end = next + n;
    while next < end {
        let k = BATCH_RECORDS.min(end - next);
        let msgs: Vec<Message> = (next..next + k).map(message).collect();
        assert_eq!(log.append_batch(&msgs).unwrap(), next..=next + k - 1);
        next += k;
    }
}

/// Reads everything from `from` to the end in pages and checks every record's seq and value.
pub fn read_all_and_check(log: &TieredLog, from: u64) -> u64 {
    let last = log.last_seq();
    let mut seq = from;
    while seq <= last {
        let page = log.read(seq, 2000).unwrap();
        assert!(!page.is_empty(), "no progress at seq {seq}");
        for r in &page {
            assert_eq!(r.seq, seq, "records out of order");
            assert_eq!(r.message.value, message(seq).value, "wrong value at {seq}");
            seq += 1;
        }
    }
    seq - from
}

/// Files in the fs root that no live metadata names, and live metadata not finished.
pub fn orphans(fs: &FsRemoteStorage, rlmm: &dyn RemoteLogMetadataManager) -> (Vec<PathBuf>, usize) {
    let live = rlmm.list_remote_log_segments(&tp()).unwrap();
    let unfinished = live
        .iter()
        .filter(|m| m.state() != RemoteLogSegmentState::CopySegmentFinished)
        .count();
    let known: BTreeSet<PathBuf> = live
        .iter()
        .flat_map(|m| layout::all_keys(m).unwrap())
        .map(PathBuf::from)
        .collect();
    let stray = fs
        .list_objects()
        .unwrap()
        .into_iter()
        .filter(|p| !known.contains(p))
        .collect();
    (stray, unfinished)
}

/// Every seq below the local first seq is covered by a finished remote segment.
pub fn assert_below_local_is_remote(log: &TieredLog, rlmm: &dyn RemoteLogMetadataManager) {
    let first = log.first_seq().unwrap();
    let local_first = log.local_first_seq();
    let mut next = first;
    let mut finished: Vec<_> = rlmm
        .list_remote_log_segments(&tp())
        .unwrap()
        .into_iter()
        .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
        .collect();
    finished.sort_by_key(|m| m.start_offset());
    for m in finished {
        if m.start_offset() <= next && m.end_offset() >= next {
            next = m.end_offset() + 1;
        }
    }
    assert!(
        next >= local_first,
        "seqs {next}..{local_first} are neither local nor finished remote"
    );
}

/// Starts this test binary again running only the ignored test `child_test`, with `dir_var`
/// set to `dir`: the process a crash test kills. `stdout` is where the child's output goes
/// (`Stdio::piped()` to read what it acknowledged, `Stdio::null()` otherwise).
pub fn spawn_child(child_test: &str, dir_var: &str, dir: &Path, stdout: Stdio) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            child_test,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(dir_var, dir)
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Ceph RGW as `.ci/run` starts it (`KRABKA_TEST_CEPH_*`), under a fresh prefix starting with
/// `prefix`; `None` (the test is skipped) when it is not running, a failure under `CI=true`.
pub fn ceph_config(prefix: &str) -> Option<krabka_remote_s3::S3Config> {
    let endpoint = std::env::var("KRABKA_TEST_CEPH_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty());
    let Some(endpoint) = endpoint else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but KRABKA_TEST_CEPH_ENDPOINT is not set: .ci/run must start Ceph RGW"
        );
        eprintln!("KRABKA_TEST_CEPH_ENDPOINT not set: skipping the Ceph RGW {prefix} test");
        return None;
    };
    let var = |n: &str| std::env::var(n).unwrap();
    Some(
        krabka_remote_s3::S3Config::new(var("KRABKA_TEST_CEPH_BUCKET"))
            .with_endpoint(endpoint)
            .with_credentials(krabka_remote_s3::S3Credentials::static_keys(
                var("KRABKA_TEST_CEPH_ACCESS_KEY"),
                var("KRABKA_TEST_CEPH_SECRET_KEY"),
            ))
            .with_prefix(format!("{prefix}-{}", Uuid::new_v4())),
    )
}
