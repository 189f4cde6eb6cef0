//! The kit's fixtures: segments in temporary files, and assertions that name the check.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;

use bytes::Bytes;
use tempfile::TempDir;
use uuid::Uuid;

use crate::error::RemoteStorageError;
use crate::manager::RemoteStorageManager;
use crate::model::{
    IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition,
};

pub(super) const DEFAULT_SIZE: usize = 64 * 1024 + 7;

/// A segment's local files, in the kit's own temporary directory.
pub(super) struct Segment {
    pub(super) metadata: RemoteLogSegmentMetadata,
    pub(super) data: LogSegmentData,
    pub(super) log: Vec<u8>,
    pub(super) indexes: BTreeMap<IndexType, Vec<u8>>,
    pub(super) _dir: TempDir,
}

pub(super) fn fresh_tp(partition: i32) -> TopicIdPartition {
    let id = Uuid::new_v4();
    let short = id.simple().to_string();
    TopicIdPartition::new(id, format!("kit-{}", &short[..8]), partition)
}

pub(super) fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fastrand::Rng::with_seed(seed).fill(&mut v);
    v
}

pub(super) fn must<T>(check: &str, what: &str, r: Result<T, RemoteStorageError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("conformance check `{check}`: {what} failed: {e} ({e:?})"),
    }
}

pub(super) fn must_io<T>(check: &str, what: &str, r: std::io::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("conformance check `{check}`: local {what} failed: {e}"),
    }
}

pub(super) fn expect_not_found<T: Debug>(
    check: &str,
    what: &str,
    r: Result<T, RemoteStorageError>,
) {
    match r {
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            panic!("conformance check `{check}`: {what}: expected SegmentNotFound, got {e:?}")
        }
        Ok(v) => {
            let shown = format!("{v:?}");
            panic!(
                "conformance check `{check}`: {what}: expected SegmentNotFound, got Ok({})",
                &shown[..shown.len().min(80)]
            )
        }
    }
}

pub(super) fn expect_invalid_argument<T: Debug>(
    check: &str,
    what: &str,
    r: Result<T, RemoteStorageError>,
) {
    match r {
        Err(RemoteStorageError::InvalidArgument { .. }) => {}
        Err(e) => {
            panic!("conformance check `{check}`: {what}: expected InvalidArgument, got {e:?}")
        }
        Ok(v) => {
            let shown = format!("{v:?}");
            panic!(
                "conformance check `{check}`: {what}: expected InvalidArgument, got Ok({})",
                &shown[..shown.len().min(80)]
            )
        }
    }
}

pub(super) fn check_eq(check: &str, what: &str, got: &[u8], want: &[u8]) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "conformance check `{check}`: {what}: got {} bytes, want {} bytes (first difference at {first:?})",
            got.len(),
            want.len()
        );
    }
}

pub(super) fn write_file(check: &str, path: &Path, bytes: &[u8]) {
    must_io(check, "write", std::fs::write(path, bytes));
}

/// Builds a segment of `size` bytes of `tp` (start offset `start`), with or without the
/// optional indexes, under a fresh id unless `id` is given.
pub(super) fn segment(
    check: &str,
    tp: &TopicIdPartition,
    id: Option<Uuid>,
    start: u64,
    size: usize,
    seed: u64,
    optional: bool,
) -> Segment {
    let dir = must_io(check, "tempdir", tempfile::tempdir());
    let log = random_bytes(seed, size);
    let mut indexes = BTreeMap::new();
    indexes.insert(IndexType::Offset, random_bytes(seed ^ 1, 800));
    indexes.insert(IndexType::Timestamp, random_bytes(seed ^ 2, 1200));
    indexes.insert(
        IndexType::LeaderEpoch,
        format!("0\n1\n3 {start}\n").into_bytes(),
    );
    if optional {
        indexes.insert(IndexType::Transaction, random_bytes(seed ^ 3, 340));
        indexes.insert(IndexType::ProducerSnapshot, random_bytes(seed ^ 4, 96));
    }
    let p = |n: &str| dir.path().join(n);
    write_file(check, &p("s.log"), &log);
    write_file(check, &p("s.index"), &indexes[&IndexType::Offset]);
    write_file(check, &p("s.timeindex"), &indexes[&IndexType::Timestamp]);
    let mut data = LogSegmentData::new(p("s.log"), p("s.index"), p("s.timeindex"));
    data.leader_epoch_index = Bytes::from(indexes[&IndexType::LeaderEpoch].clone());
    if optional {
        write_file(check, &p("s.txnindex"), &indexes[&IndexType::Transaction]);
        write_file(
            check,
            &p("s.snapshot"),
            &indexes[&IndexType::ProducerSnapshot],
        );
        data.transaction_index = Some(p("s.txnindex"));
        data.producer_snapshot_index = Some(p("s.snapshot"));
    }
    let id = match id {
        Some(u) => RemoteLogSegmentId::new(tp.clone(), u),
        None => RemoteLogSegmentId::generate(tp.clone()),
    };
    let metadata = must(
        check,
        "building metadata",
        RemoteLogSegmentMetadata::builder(id, start, start + 99)
            .segment_leader_epochs(BTreeMap::from([(3, start)]))
            .segment_size_in_bytes(size as u64)
            .build(),
    );
    Segment {
        metadata,
        data,
        log,
        indexes,
        _dir: dir,
    }
}

/// Copies and returns the metadata carrying what the copy returned (as a caller records it).
pub(super) fn copy(
    check: &str,
    rsm: &dyn RemoteStorageManager,
    s: &Segment,
) -> RemoteLogSegmentMetadata {
    let cm = must(
        check,
        "copy_log_segment_data",
        rsm.copy_log_segment_data(&s.metadata, &s.data),
    );
    if let Some(cm) = &cm
        && let Err(e) = cm.check_size(crate::DEFAULT_CUSTOM_METADATA_MAX_BYTES)
    {
        panic!("conformance check `{check}`: custom metadata over the default cap: {e}");
    }
    s.metadata.with_custom_metadata(cm)
}

pub(super) fn delete(check: &str, rsm: &dyn RemoteStorageManager, m: &RemoteLogSegmentMetadata) {
    must(
        check,
        "delete_log_segment_data",
        rsm.delete_log_segment_data(m),
    );
}

pub(super) fn pos(check: &str, v: usize) -> u32 {
    match u32::try_from(v) {
        Ok(v) => v,
        Err(_) => panic!("conformance check `{check}`: position {v} does not fit u32"),
    }
}

pub(super) fn verify_all(
    check: &str,
    rsm: &dyn RemoteStorageManager,
    m: &RemoteLogSegmentMetadata,
    s: &Segment,
) {
    let whole = must(
        check,
        "fetch whole segment",
        rsm.fetch_log_segment(m, 0, None),
    );
    check_eq(check, "whole segment", &whole, &s.log);
    for (t, want) in &s.indexes {
        let got = must(check, &format!("fetch {t} index"), rsm.fetch_index(m, *t));
        check_eq(check, &format!("{t} index"), &got, want);
    }
}
