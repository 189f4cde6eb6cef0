//! Recovery against the partition head an owned writer keeps (`_head`): the seqs it lists as
//! finished are never given again, and the ones no whole segment holds are a named hole; a
//! damaged manifest costs its whole segment's seqs; a stray object beyond everything written
//! is ignored, never a hole. And a replica names a listed segment whose manifest names
//! another segment.

use std::path::Path;
use std::sync::Arc;

use krabka_protocol::Message;
use krabka_remote_storage::{RemoteLogSegmentMetadata, layout};
use krabka_tiering::fs::FsRemoteStorage;
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::recovery::{IgnoreReason, LocalLogOutcome, Recovery, RecoveryOptions, recover};
use krabka_tiering::replica::{ReadReplica, ReplicaConfig};
use krabka_tiering::{Error, ReadError, RemoteOwnership, TieredLog};

use super::{config, options, tp};

/// A bucket an owned writer tiered `n` records to (every closed segment remote, the head
/// written): its store, root, and the finished segments in seq order.
struct Tiered {
    store: Arc<FsRemoteStorage>,
    root: std::path::PathBuf,
    segments: Vec<RemoteLogSegmentMetadata>,
}

fn tier_owned(work: &Path, n: usize) -> Tiered {
    let root = work.join("remote");
    let store = Arc::new(FsRemoteStorage::new(&root).unwrap());
    let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(work.join("w-meta")).unwrap());
    let log = TieredLog::open_owned(
        work.join("w-log"),
        options(),
        store.clone(),
        rlmm.clone(),
        tp(),
        config(),
        &RemoteOwnership::new(store.clone(), format!("fs://{}", root.display())),
    )
    .unwrap();
    let msgs: Vec<Message> = (0..n)
        .map(|i| Message::new(format!("a-{i:05}-{}", "x".repeat(80))))
        .collect();
    for chunk in msgs.chunks(50) {
        log.append_batch(chunk).unwrap();
    }
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    drop(log);
    let segments =
        krabka_remote_storage::metadata::RemoteLogMetadataManager::list_remote_log_segments(
            &*rlmm,
            &tp(),
        )
        .unwrap();
    assert!(segments.len() > 10, "{} segments", segments.len());
    let head = root.join(layout::head_key(&layout::partition_dir(&tp()).unwrap()));
    assert!(head.exists(), "the owned writer wrote no head");
    Tiered {
        store,
        root,
        segments,
    }
}

impl Tiered {
    fn newest(&self) -> &RemoteLogSegmentMetadata {
        self.segments.last().unwrap()
    }

    fn end(&self) -> u64 {
        self.newest().end_offset()
    }

    fn path(&self, key: &str) -> std::path::PathBuf {
        self.root.join(key)
    }

    fn remove_head(&self) {
        let key = layout::head_key(&layout::partition_dir(&tp()).unwrap());
        std::fs::remove_file(self.path(&key)).unwrap();
    }

    /// Recovers into `work/<name>` (metadata and an empty local log).
    fn recover(&self, work: &Path, name: &str) -> Recovery {
        let dir = work.join(name);
        let metadata = DurableRemoteLogMetadataManager::open(dir.join("meta")).unwrap();
        recover(
            &*self.store,
            &tp(),
            &metadata,
            &RecoveryOptions::default().local_log_dir(dir.join("log")),
        )
        .unwrap()
    }

    /// Opens the log recovered into `work/<name>`.
    fn open_recovered(&self, work: &Path, name: &str) -> TieredLog {
        let dir = work.join(name);
        let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("meta")).unwrap());
        TieredLog::open(
            dir.join("log"),
            options(),
            self.store.clone(),
            rlmm,
            tp(),
            config(),
        )
        .unwrap()
    }
}

/// The recovered log reads `lost` as a named hole and appends after it.
fn assert_lost_and_never_reused(t: &Tiered, work: &Path, name: &str, lost: (u64, u64)) {
    let log = t.open_recovered(work, name);
    match log.read(lost.0, 10) {
        Err(Error::Read(ReadError::RemoteHole { from, to, .. })) => {
            assert_eq!((from, to), lost);
        }
        other => panic!("read of the lost seq {}: {other:?}", lost.0),
    }
    assert_eq!(log.append(&Message::new("after")).unwrap(), lost.1 + 1);
}

#[test]
fn a_deleted_newest_segment_the_head_lists_is_a_named_hole_and_its_seqs_are_never_given_again() {
    let work = tempfile::tempdir().unwrap();
    let t = tier_owned(work.path(), 300);
    let newest = t.newest().clone();
    for key in layout::all_keys(&newest).unwrap() {
        let _ = std::fs::remove_file(t.path(&key));
    }
    let r = t.recover(work.path(), "b");
    let lost = newest.start_offset()..=newest.end_offset();
    assert_eq!(r.seq_range, Some(1..=newest.start_offset() - 1), "{r:?}");
    assert_eq!(r.holes, vec![lost.clone()], "{r:?}");
    assert_eq!(r.claimed_end, Some(t.end()));
    assert_eq!(r.local_log, LocalLogOutcome::StartedAt(t.end() + 1));
    assert_eq!(r.causes.len(), 1, "{:?}", r.causes);
    assert_eq!(r.causes[0].seqs, lost);
    assert!(
        r.causes[0]
            .reason
            .contains("the partition head lists segment")
            && r.causes[0].reason.contains("no object of it is left"),
        "{}",
        r.causes[0].reason
    );
    assert_lost_and_never_reused(&t, work.path(), "b", (*lost.start(), *lost.end()));
}

#[test]
fn a_damaged_newest_manifest_costs_its_whole_segment_with_or_without_the_head() {
    let work = tempfile::tempdir().unwrap();
    let t = tier_owned(work.path(), 300);
    let newest = t.newest().clone();
    let key = layout::manifest_key(&newest).unwrap();
    let good = std::fs::read(t.path(&key)).unwrap();
    let lost = newest.start_offset()..=newest.end_offset();
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0xff;
    let truncated = good[..good.len() / 2].to_vec();
    for (i, (what, bytes, head)) in [
        ("flipped", &flipped, true),
        ("truncated", &truncated, true),
        ("flipped, no head", &flipped, false),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(t.path(&key), bytes).unwrap();
        if !head {
            t.remove_head();
        }
        let name = format!("r{i}");
        let r = t.recover(work.path(), &name);
        assert_eq!(r.holes, vec![lost.clone()], "{what}: {r:?}");
        assert_eq!(
            r.local_log,
            LocalLogOutcome::StartedAt(t.end() + 1),
            "{what}"
        );
        assert!(
            r.ignored
                .iter()
                .any(|i| i.key == key && matches!(i.reason, IgnoreReason::CorruptManifest(_))),
            "{what}: {:?}",
            r.ignored
        );
        assert!(
            r.causes
                .iter()
                .any(|c| c.seqs == lost && c.reason.contains(&key)),
            "{what}: {:?}",
            r.causes
        );
        assert_lost_and_never_reused(&t, work.path(), &name, (*lost.start(), *lost.end()));
    }
}

#[test]
fn a_newest_manifest_replaced_by_the_previous_one_is_a_hole_and_the_replica_names_it() {
    let work = tempfile::tempdir().unwrap();
    let t = tier_owned(work.path(), 300);
    let n = t.segments.len();
    let (previous, newest) = (t.segments[n - 2].clone(), t.segments[n - 1].clone());
    let key = layout::manifest_key(&newest).unwrap();
    std::fs::copy(
        t.path(&layout::manifest_key(&previous).unwrap()),
        t.path(&key),
    )
    .unwrap();
    let lost = newest.start_offset()..=newest.end_offset();
    // A replica serving the bucket names the seqs the head lists and it cannot serve.
    let replica = ReadReplica::open(
        t.store.clone(),
        t.store.clone(),
        tp(),
        config(),
        ReplicaConfig::default(),
    )
    .unwrap();
    let missing = replica.missing();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(
        (missing[0].from, missing[0].to),
        (*lost.start(), *lost.end())
    );
    assert!(missing[0].objects.contains(&key), "{missing:?}");
    assert!(replica.last_seq().unwrap() >= t.end());
    match replica.read(newest.start_offset(), 10) {
        Err(Error::Read(ReadError::RemoteHole { from, to, .. })) => {
            assert_eq!((from, to), (*lost.start(), *lost.end()));
        }
        other => panic!("replica read of the lost seqs: {other:?}"),
    }
    // Recovery: the whole segment is a hole, the local log continues after the head's end.
    let r = t.recover(work.path(), "b");
    assert_eq!(r.holes, vec![lost.clone()], "{r:?}");
    assert_eq!(r.local_log, LocalLogOutcome::StartedAt(t.end() + 1));
    assert!(
        r.ignored
            .iter()
            .any(|i| i.key == key && matches!(i.reason, IgnoreReason::ForeignManifest(_))),
        "{:?}",
        r.ignored
    );
    assert_lost_and_never_reused(&t, work.path(), "b", (*lost.start(), *lost.end()));
}

#[test]
fn a_stray_object_beyond_everything_written_is_ignored_never_a_hole() {
    let work = tempfile::tempdir().unwrap();
    let t = tier_owned(work.path(), 300);
    let dir = layout::partition_dir(&tp()).unwrap();
    let stray = format!("{dir}/00000000000000009999-11111111-2222-4333-8444-555555555555.log");
    std::fs::copy(
        t.path(&layout::log_key(t.newest()).unwrap()),
        t.path(&stray),
    )
    .unwrap();
    // A segment whose manifest is lost and whose objects are whole is still rebuilt.
    let oldest = t.segments[0].clone();
    std::fs::remove_file(t.path(&layout::manifest_key(&oldest).unwrap())).unwrap();
    for (i, head) in [true, false].into_iter().enumerate() {
        if !head {
            t.remove_head();
        }
        let name = format!("r{i}");
        let r = t.recover(work.path(), &name);
        assert!(r.holes.is_empty(), "head {head}: {r:?}");
        assert_eq!(r.seq_range, Some(1..=t.end()), "head {head}");
        assert_eq!(r.claimed_end, Some(t.end()), "head {head}");
        assert_eq!(r.segments, t.segments.len(), "head {head}");
        assert_eq!(
            r.rebuilt,
            vec![layout::manifest_key(&oldest).unwrap()],
            "head {head}"
        );
        assert_eq!(r.local_log, LocalLogOutcome::StartedAt(t.end() + 1));
        assert_eq!(r.ignored.len(), 1, "head {head}: {:?}", r.ignored);
        assert_eq!(r.ignored[0].key, stray);
        assert!(
            matches!(&r.ignored[0].reason, IgnoreReason::Stray { written_to, .. } if *written_to == Some(t.end())),
            "head {head}: {:?}",
            r.ignored
        );
        // Every record reads back; the next append follows the last one.
        let log = t.open_recovered(work.path(), &name);
        let mut from = 1;
        for _ in 0..10_000 {
            let batch = log.read(from, 500).unwrap();
            if batch.is_empty() {
                break;
            }
            from = batch.last().unwrap().seq + 1;
        }
        assert_eq!(from, t.end() + 1);
        assert_eq!(log.append(&Message::new("after")).unwrap(), t.end() + 1);
    }
}
