//! Remote reads against retention races and tampered remote bytes, what a read costs in
//! metadata calls, leader epochs on copied segments, segment size limits, and the retention
//! point across restarts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use krabka_protocol::{Bytes, Message};
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit::{Counting, Method};
use krabka_remote_storage::{
    IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState, RemoteStorageError, RemoteStorageManager, TopicIdPartition, layout,
};
use krabka_storage::segment::{dump_batches, peek_batch};
use krabka_storage::{Log, Options};
use krabka_tiering::metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
use krabka_tiering::{Error, MAX_SEGMENT_BYTES, TieredLog, TieringConfig, policy};

/// A filesystem remote that, when `armed`, deletes a segment the way retention does
/// (metadata DeleteSegmentStarted, objects, DeleteSegmentFinished) right before the next fetch:
/// after the reader looked the segment up, before its fetch.
fn retention_race(
    fs: Arc<FsRemoteStorage>,
    rlmm: Arc<InMemoryRemoteLogMetadataManager>,
    armed: Arc<Mutex<Option<RemoteLogSegmentMetadata>>>,
) -> Counting<Arc<FsRemoteStorage>> {
    Counting::new(fs.clone()).with_hook(move |call| {
        if !matches!(call.method, Method::FetchLogSegment | Method::FetchIndex) {
            return Ok(());
        }
        let Some(meta) = armed.lock().unwrap().take() else {
            return Ok(());
        };
        let id = meta.remote_log_segment_id().clone();
        for state in [
            RemoteLogSegmentState::DeleteSegmentStarted,
            RemoteLogSegmentState::DeleteSegmentFinished,
        ] {
            if state == RemoteLogSegmentState::DeleteSegmentFinished {
                fs.delete_log_segment_data(&meta).unwrap();
            }
            rlmm.update_remote_log_segment_metadata(&RemoteLogSegmentMetadataUpdate::to_state(
                id.clone(),
                state,
                0,
            ))
            .unwrap();
        }
        Ok(())
    })
}

fn keep_nothing_locally() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        ..TieringConfig::default()
    }
}

fn finished(rlmm: &dyn RemoteLogMetadataManager) -> Vec<RemoteLogSegmentMetadata> {
    let mut list: Vec<_> = rlmm
        .list_remote_log_segments(&tp())
        .unwrap()
        .into_iter()
        .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
        .collect();
    list.sort_by_key(|m| m.start_offset());
    list
}

#[test]
fn a_read_racing_remote_retention_is_out_of_range_not_a_remote_error() {
    let dir = tempfile::tempdir().unwrap();
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let armed = Arc::new(Mutex::new(None));
    let rsm = retention_race(fs.clone(), rlmm.clone(), armed.clone());
    let log = TieredLog::open(
        dir.path().join("local"),
        options(1024),
        Arc::new(rsm),
        rlmm.clone(),
        tp(),
        keep_nothing_locally(),
    )
    .unwrap();
    append(&log, 300);
    log.run_once().unwrap();
    let segs = finished(rlmm.as_ref());
    assert!(segs.len() >= 3, "{} remote segments", segs.len());
    assert!(log.local_first_seq() > segs[2].end_offset());

    // Retention deletes the first segment between the reader's lookup and its fetch.
    *armed.lock().unwrap() = Some(segs[0].clone());
    match log.read(1, 10) {
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { seq, first, .. })) => {
            assert_eq!((seq, first), (1, segs[1].start_offset()));
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    assert_eq!(log.first_seq().unwrap(), segs[1].start_offset());
    let next = log.read(segs[1].start_offset(), 5).unwrap();
    assert_eq!(next[0].seq, segs[1].start_offset());

    // Objects missing while the metadata still says Finished is not retention: a remote error.
    fs.delete_log_segment_data(&segs[2]).unwrap();
    let err = log.read(segs[2].start_offset(), 1).unwrap_err();
    assert!(err.is_remote_not_found(), "{err:?}");
}

/// Rewrites the remote `.log` of `meta`, giving the batch whose first seq is `s` the first seq
/// `map(s)`. The base offset lies outside a batch's CRC, so every batch keeps its length and
/// passes its CRC check, and the remote offset index stays valid: only the seq checks can
/// tell. Returns the first seq of each batch as it was.
fn rewrite_seqs(
    remote_root: &Path,
    meta: &RemoteLogSegmentMetadata,
    map: impl Fn(u64) -> u64,
) -> Vec<u64> {
    let path: PathBuf = remote_root.join(layout::log_key(meta).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    let mut bases = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (base, _, len) = peek_batch(&bytes[at..]).unwrap();
        bases.push(base);
        let shifted = i64::try_from(map(base)).unwrap();
        bytes[at..at + 8].copy_from_slice(&shifted.to_be_bytes());
        at += len;
    }
    let frames: Vec<_> = dump_batches(Bytes::from(bytes.clone())).collect();
    assert!(frames.iter().all(|f| f.crc_ok && f.problem.is_none()));
    std::fs::write(&path, bytes).unwrap();
    bases
}

fn tiered_with_big_records(
    dir: &Path,
    chunk_bytes: u32,
) -> (Arc<InMemoryRemoteLogMetadataManager>, TieredLog) {
    let fs = Arc::new(FsRemoteStorage::new(dir.join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let config = TieringConfig {
        chunk_bytes,
        ..keep_nothing_locally()
    };
    let log = TieredLog::open(
        dir.join("local"),
        options(4096),
        fs,
        rlmm.clone(),
        tp(),
        config,
    )
    .unwrap();
    // Batches of two records of about 220 bytes each: longer than a 64-byte chunk, so every
    // decode step sees at most one whole batch and only the seq check across chunk boundaries
    // links them.
    let msgs: Vec<Message> = (1..=100u64)
        .map(|s| Message::new(format!("{s:0>200}")).with_key(format!("k{s}")))
        .collect();
    for pair in msgs.chunks(2) {
        log.append_batch(pair).unwrap();
    }
    log.run_once().unwrap();
    assert!(log.local_first_seq() > 40);
    (rlmm, log)
}

#[test]
fn a_remote_segment_whose_seqs_are_shifted_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (rlmm, log) = tiered_with_big_records(dir.path(), 1024);
    let seg = finished(rlmm.as_ref()).remove(0);
    rewrite_seqs(&dir.path().join("remote"), &seg, |s| s + 1);
    match log.read(seg.start_offset(), 3) {
        Err(Error::Read(krabka_tiering::ReadError::CorruptRemote { segment, seq, .. })) => {
            assert_eq!(&*segment, seg.remote_log_segment_id());
            assert_eq!(seq, seg.start_offset());
        }
        other => panic!("expected CorruptRemote, got {other:?}"),
    }
}

#[test]
fn a_seq_gap_across_a_chunk_boundary_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (rlmm, log) = tiered_with_big_records(dir.path(), 64);
    let seg = finished(rlmm.as_ref()).remove(0);
    // The third batch and those after it are shifted by one seq.
    let bases = rewrite_seqs(&dir.path().join("remote"), &seg, |s| s);
    assert!(bases.len() >= 4, "{bases:?}");
    let gap_at = bases[2];
    assert!(gap_at >= seg.start_offset() + 4, "{bases:?}");
    rewrite_seqs(&dir.path().join("remote"), &seg, |s| {
        if s >= gap_at { s + 1 } else { s }
    });
    // The records before the gap come first (a short read); a read from the gap fails.
    let before = log.read(seg.start_offset(), 10).unwrap();
    let seqs: Vec<u64> = before.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (seg.start_offset()..gap_at).collect::<Vec<_>>());
    match log.read(gap_at, 10) {
        Err(Error::Read(krabka_tiering::ReadError::CorruptRemote { reason, .. })) => {
            assert!(reason.contains("seq"), "{reason}")
        }
        other => panic!("expected CorruptRemote, got {other:?}"),
    }
}

/// Counts `list_remote_log_segments` calls of an in-memory manager.
struct CountingLists {
    inner: InMemoryRemoteLogMetadataManager,
    lists: AtomicU64,
}

impl RemoteLogMetadataManager for CountingLists {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.inner.add_remote_log_segment_metadata(metadata)
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        self.inner.update_remote_log_segment_metadata(update)
    }

    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.inner.remote_log_segment_metadata(tp, offset)
    }

    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        self.inner.list_remote_log_segments(tp)
    }

    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        self.inner.highest_remote_offset(tp)
    }

    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        self.inner.remote_log_size(tp)
    }

    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.inner.segment_metadata(id)
    }
}

#[test]
fn reads_do_not_list_every_remote_segment() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(CountingLists {
        inner: InMemoryRemoteLogMetadataManager::new(),
        lists: AtomicU64::new(0),
    });
    let log = TieredLog::open(
        dir.path().join("local"),
        options(1024),
        fs,
        rlmm.clone(),
        tp(),
        keep_nothing_locally(),
    )
    .unwrap();
    append(&log, 500);
    log.run_once().unwrap();
    assert!(log.local_first_seq() > 100);
    let before = rlmm.lists.load(Ordering::Relaxed);
    assert_eq!(read_all_and_check(&log, 1), 500);
    for seq in [1, 50, 250, 499] {
        assert_eq!(log.read(seq, 1).unwrap()[0].seq, seq);
    }
    assert_eq!(
        rlmm.lists.load(Ordering::Relaxed),
        before,
        "reads listed segments"
    );
    // Only a failed read lists them, to report the first seq.
    assert!(matches!(
        log.read(0, 1),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange {
            first: 1,
            ..
        }))
    ));
}

#[test]
fn copied_segments_carry_the_leader_epochs_overlapping_them() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let log = TieredLog::open(
        dir.path().join("local"),
        options(1024),
        fs.clone(),
        rlmm.clone(),
        tp(),
        keep_nothing_locally(),
    )
    .unwrap();
    append(&log, 40);
    log.set_leader_epoch(3, 41).unwrap();
    append(&log, 40);
    log.set_leader_epoch(5, 81).unwrap();
    append(&log, 40);
    assert!(matches!(
        log.set_leader_epoch(4, 200),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        log.set_leader_epoch(6, 80),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(log.leader_epochs(), [(0, 0), (3, 41), (5, 81)]);
    log.run_once().unwrap();
    let segs = finished(rlmm.as_ref());
    assert!(segs.len() > 3);
    let mut spanning = 0;
    for m in &segs {
        let (b, l) = (m.start_offset(), m.end_offset());
        let expected = policy::segment_leader_epochs(&[(0, 0), (3, 41), (5, 81)], b, l);
        assert_eq!(m.segment_leader_epochs(), &expected, "segment {b}..={l}");
        if expected.len() > 1 {
            spanning += 1;
        }
        let epoch_at_base = if b >= 81 {
            5
        } else if b >= 41 {
            3
        } else {
            0
        };
        assert_eq!(expected.first_key_value(), Some((&epoch_at_base, &b)));
        // The uploaded leader-epoch checkpoint says the same.
        let text = String::from_utf8(fs.fetch_index(m, IndexType::LeaderEpoch).unwrap()).unwrap();
        let mut want = format!("0\n{}\n", expected.len());
        for (e, s) in &expected {
            want.push_str(&format!("{e} {s}\n"));
        }
        assert_eq!(text, want);
    }
    assert!(spanning > 0, "no segment spans an epoch change");
}

#[test]
fn segments_the_remote_tier_cannot_address_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let huge = Options {
        max_bytes: MAX_SEGMENT_BYTES + 1,
        ..Options::default()
    };
    let local = dir.path().join("local");
    let e = TieredLog::open(
        &local,
        huge.clone(),
        fs.clone(),
        rlmm.clone(),
        tp(),
        TieringConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    assert!(!local.exists(), "nothing is created for a rejected config");
    // A local log opened on its own with such segments is refused when it is tiered. (The
    // largest batch, `max_message_bytes` at most 64 MiB, always fits.)
    let log = Log::open(&local, huge).unwrap();
    let e = TieredLog::new(log, fs, rlmm, tp(), TieringConfig::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn the_retention_point_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let keep_all = TieringConfig {
        local_retention_bytes: None,
        retention_ms: None,
        retention_bytes: None,
        ..TieringConfig::default()
    };
    let open = |config: TieringConfig| {
        TieredLog::open(
            &local,
            options(1024),
            fs.clone(),
            rlmm.clone(),
            tp(),
            config,
        )
        .unwrap()
    };
    let log = open(keep_all.clone());
    append(&log, 500);
    let copied = log.run_once().unwrap().segments_copied;
    assert!(copied > 10);
    log.close().unwrap();
    let saved = dir.path().join("saved");
    copy_dir(&local, &saved);

    // Whole-log retention of about 4 KiB: the oldest segments go from both tiers.
    let log = open(TieringConfig {
        retention_bytes: Some(4096),
        ..keep_all.clone()
    });
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.remote_segments_deleted > 5);
    let first = log.first_seq().unwrap();
    assert!(first > 100, "first seq {first}");
    assert_eq!(log.local_first_seq(), first);
    log.close().unwrap();

    // A crash between the remote and the local deletion leaves old local segments behind.
    for entry in std::fs::read_dir(&saved).unwrap() {
        let name = entry.unwrap().file_name();
        let base = krabka_storage::segment::parse_segment_file_name(name.to_str().unwrap());
        if base.is_some_and(|(b, _)| b < first) {
            std::fs::copy(saved.join(&name), local.join(&name)).unwrap();
        }
    }

    let log = open(keep_all);
    assert_eq!(log.local_first_seq(), 1, "the old segments are back");
    assert_eq!(log.first_seq().unwrap(), first, "first_seq moved backwards");
    assert!(matches!(
        log.read(first - 1, 1),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(
        report.segments_copied, 0,
        "segments past retention were copied again"
    );
    assert_eq!(
        log.local_first_seq(),
        first,
        "past-retention segments are dropped"
    );
    assert_eq!(log.first_seq().unwrap(), first);
    assert_eq!(read_all_and_check(&log, first), 501 - first);
}
