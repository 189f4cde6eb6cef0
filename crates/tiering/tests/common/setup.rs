//! What the integrity tests share: tiering configs, a local log joined with a filesystem remote
//! tier, and checks that read across the tiers or damage a segment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteLogSegmentState};
use krabka_storage::segment::{BATCH_HEADER_LEN, dump_batches, read_segment_file};
use krabka_storage::{Options, SegmentInfo};
use krabka_tiering::metadata::{
    DurableRemoteLogMetadataManager, InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager,
};
use krabka_tiering::{Error, TieredLog, TieringConfig};

use super::{message, options, tp};

/// Keep locally only what is not yet remote; no age-based retention.
pub fn keep_nothing_locally() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        ..TieringConfig::default()
    }
}

/// Keep everything in both tiers.
pub fn keep_everything() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: None,
        retention_ms: None,
        ..TieringConfig::default()
    }
}

/// A local log directory and a filesystem remote tier in one temporary directory, with
/// in-memory metadata.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub fs: Arc<FsRemoteStorage>,
    pub rlmm: Arc<InMemoryRemoteLogMetadataManager>,
}

impl Setup {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
        Setup {
            dir,
            fs,
            rlmm: Arc::new(InMemoryRemoteLogMetadataManager::new()),
        }
    }

    pub fn local(&self) -> PathBuf {
        self.dir.path().join("local")
    }

    pub fn remote_root(&self) -> PathBuf {
        self.dir.path().join("remote")
    }

    pub fn open_with(&self, options: Options, config: TieringConfig) -> Result<TieredLog, Error> {
        TieredLog::open(
            self.local(),
            options,
            self.fs.clone(),
            self.rlmm.clone(),
            tp(),
            config,
        )
    }

    pub fn open(&self, config: TieringConfig) -> TieredLog {
        self.open_with(options(1024), config).unwrap()
    }

    pub fn finished(&self) -> Vec<RemoteLogSegmentMetadata> {
        finished(self.rlmm.as_ref())
    }
}

/// The finished remote segments, oldest first.
pub fn finished(rlmm: &dyn RemoteLogMetadataManager) -> Vec<RemoteLogSegmentMetadata> {
    let mut list: Vec<_> = rlmm
        .list_remote_log_segments(&tp())
        .unwrap()
        .into_iter()
        .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
        .collect();
    list.sort_by_key(|m| m.start_offset());
    list
}

/// The batches of a `.log` file, each checked whole: `(position, first seq, last seq, length)`.
pub fn log_batches(path: &Path) -> Vec<(u64, u64, u64, u64)> {
    dump_batches(krabka_protocol::Bytes::from(std::fs::read(path).unwrap()))
        .map(|f| {
            assert!(f.crc_ok && f.problem.is_none(), "{f:?}");
            (f.position, f.seq.unwrap(), f.last_seq.unwrap(), f.batch_len)
        })
        .collect()
}

/// The local log's closed segments.
pub fn closed_segments(log: &TieredLog) -> Vec<SegmentInfo> {
    log.log()
        .segments()
        .into_iter()
        .filter(|s| !s.active)
        .collect()
}

/// Flips a byte inside the records of the third batch of the `.log` at `path` (a byte the
/// batch's CRC covers); returns the first seq of that batch and the batch's byte position.
pub fn flip_third_frame(path: &Path) -> (u64, u64) {
    let frames: Vec<_> = dump_batches(read_segment_file(path).unwrap()).collect();
    assert!(frames.len() >= 4, "{} batches", frames.len());
    let frame = &frames[2];
    let mut bytes = std::fs::read(path).unwrap();
    let at = usize::try_from(frame.position).unwrap() + BATCH_HEADER_LEN + 3;
    bytes[at] ^= 0x55;
    std::fs::write(path, bytes).unwrap();
    (frame.seq.unwrap(), frame.position)
}

/// Reads `from..` in pages, checking every record against [`message`]; returns the seq the
/// reads stopped at and the error that stopped them, if any. An empty page before the end
/// is a failure of the test (a silently short result).
pub fn read_until_error(log: &TieredLog, from: u64) -> (u64, Option<Error>) {
    let last = log.last_seq();
    let mut seq = from;
    while seq <= last {
        match log.read(seq, 37) {
            Ok(page) => {
                assert!(!page.is_empty(), "an empty page at seq {seq} of ..={last}");
                for r in &page {
                    assert_eq!(r.seq, seq, "records out of order");
                    assert_eq!(r.message.value, message(seq).value, "wrong value at {seq}");
                    seq += 1;
                }
            }
            Err(e) => return (seq, Some(e)),
        }
    }
    (seq, None)
}

/// Opens a tiered log in `dir` (`local/`, `remote/`) with durable metadata in `metadata/`.
pub fn durable_open(dir: &Path, config: TieringConfig) -> Result<TieredLog, Error> {
    let fs = Arc::new(FsRemoteStorage::new(dir.join("remote")).unwrap());
    let rlmm = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap());
    TieredLog::open(dir.join("local"), options(1024), fs, rlmm, tp(), config)
}

/// The files of `dir` with their sizes, sorted.
pub fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}
