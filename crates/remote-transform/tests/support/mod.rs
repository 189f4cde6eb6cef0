//! Test doubles: a map-backed store whose objects tests can read and damage, segment fixtures
//! and configurations.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use krabka_remote_storage::{
    CustomMetadata, IndexSource, IndexType, LogSegmentData, RemoteLogSegmentId,
    RemoteLogSegmentMetadata, RemoteStorageError, RemoteStorageManager, TopicIdPartition, Uuid,
    checked_range,
};
use krabka_remote_transform::{
    ChunkCompression, KeyRing, MasterKey, TransformConfig, TransformError, Transforming,
};
use parking_lot::Mutex;
use tempfile::TempDir;

/// `None` is the `.log` object.
pub type Object = Option<IndexType>;

/// A store of plain byte vectors, keyed by segment and object.
#[derive(Default)]
pub struct MapStore {
    objects: Mutex<HashMap<(RemoteLogSegmentId, Object), Vec<u8>>>,
}

impl MapStore {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn get(&self, id: &RemoteLogSegmentId, object: Object) -> Option<Vec<u8>> {
        self.objects.lock().get(&(id.clone(), object)).cloned()
    }

    pub fn put(&self, id: &RemoteLogSegmentId, object: Object, bytes: Vec<u8>) {
        self.objects.lock().insert((id.clone(), object), bytes);
    }

    pub fn mutate(&self, id: &RemoteLogSegmentId, object: Object, f: impl FnOnce(&mut Vec<u8>)) {
        let mut o = self.objects.lock();
        f(o.get_mut(&(id.clone(), object)).expect("object present"));
    }

    fn read(src: IndexSource<'_>) -> Result<Vec<u8>, RemoteStorageError> {
        match src {
            IndexSource::File(p) => {
                std::fs::read(p).map_err(|e| RemoteStorageError::io(p.display(), e))
            }
            IndexSource::Bytes(b) => Ok(b.to_vec()),
        }
    }

    fn not_found(m: &RemoteLogSegmentMetadata, what: &str) -> RemoteStorageError {
        RemoteStorageError::SegmentNotFound {
            segment: m.remote_log_segment_id().clone(),
            what: what.to_owned(),
        }
    }
}

impl RemoteStorageManager for MapStore {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let id = metadata.remote_log_segment_id();
        let log = Self::read(IndexSource::File(&data.log_segment))?;
        let mut objects = vec![(None, log)];
        for t in IndexType::ALL {
            if let Some(src) = data.index_source(t) {
                objects.push((Some(t), Self::read(src)?));
            }
        }
        let mut o = self.objects.lock();
        o.retain(|(i, _), _| i != id);
        for (t, bytes) in objects {
            o.insert((id.clone(), t), bytes);
        }
        Ok(None)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let log = self
            .get(metadata.remote_log_segment_id(), None)
            .ok_or_else(|| Self::not_found(metadata, "log"))?;
        let r = checked_range(log.len() as u64, start_position, end_position)?;
        Ok(log[r.start as usize..r.end as usize].to_vec())
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.get(metadata.remote_log_segment_id(), Some(index_type))
            .ok_or_else(|| Self::not_found(metadata, &index_type.to_string()))
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let id = metadata.remote_log_segment_id();
        self.objects.lock().retain(|(i, _), _| i != id);
        Ok(())
    }
}

/// A segment's local files and what they hold.
pub struct Segment {
    pub metadata: RemoteLogSegmentMetadata,
    pub data: LogSegmentData,
    pub log: Vec<u8>,
    pub indexes: Vec<(IndexType, Vec<u8>)>,
    _dir: TempDir,
}

pub fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::new_v4(), "transform-test", 0)
}

/// Text-like bytes (compressible) when `text`, else pseudo-random bytes.
pub fn payload(seed: u64, len: usize, text: bool) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    if !text {
        let mut v = vec![0u8; len];
        rng.fill(&mut v);
        return v;
    }
    let words = [
        "orders",
        "user",
        "status",
        "ok",
        "latency_ms",
        "region",
        "eu-west-1",
        "GET",
    ];
    let mut v = Vec::with_capacity(len + 64);
    while v.len() < len {
        let r = rng.u64(..);
        let line = format!(
            "{{\"{}\":{},\"{}\":\"{}\",\"n\":{}}}\n",
            words[(r % 8) as usize],
            r % 1000,
            words[((r >> 8) % 8) as usize],
            words[((r >> 16) % 8) as usize],
            (r >> 24) % 97
        );
        v.extend_from_slice(line.as_bytes());
    }
    v.truncate(len);
    v
}

/// A segment of `log` with small indexes (and the optional ones when `optional`).
pub fn segment_of(
    tp: &TopicIdPartition,
    id: Option<Uuid>,
    log: Vec<u8>,
    optional: bool,
) -> Segment {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let mut indexes = vec![
        (IndexType::Offset, payload(1, 800, true)),
        (IndexType::Timestamp, payload(2, 1200, false)),
        (IndexType::LeaderEpoch, b"0\n1\n0 0\n".to_vec()),
    ];
    if optional {
        indexes.push((IndexType::Transaction, payload(3, 340, false)));
        indexes.push((IndexType::ProducerSnapshot, payload(4, 96, true)));
    }
    std::fs::write(p("s.log"), &log).unwrap();
    std::fs::write(p("s.index"), &indexes[0].1).unwrap();
    std::fs::write(p("s.timeindex"), &indexes[1].1).unwrap();
    let mut data = LogSegmentData::new(p("s.log"), p("s.index"), p("s.timeindex"));
    data.leader_epoch_index = Bytes::from(indexes[2].1.clone());
    if optional {
        std::fs::write(p("s.txnindex"), &indexes[3].1).unwrap();
        std::fs::write(p("s.snapshot"), &indexes[4].1).unwrap();
        data.transaction_index = Some(p("s.txnindex"));
        data.producer_snapshot_index = Some(p("s.snapshot"));
    }
    let id = match id {
        Some(u) => RemoteLogSegmentId::new(tp.clone(), u),
        None => RemoteLogSegmentId::generate(tp.clone()),
    };
    let metadata = RemoteLogSegmentMetadata::builder(id, 0, 99)
        .segment_size_in_bytes(log.len() as u64)
        .build()
        .unwrap();
    Segment {
        metadata,
        data,
        log,
        indexes,
        _dir: dir,
    }
}

/// Copies and returns the metadata carrying the returned custom metadata.
pub fn copy(rsm: &dyn RemoteStorageManager, s: &Segment) -> RemoteLogSegmentMetadata {
    let cm = rsm.copy_log_segment_data(&s.metadata, &s.data).unwrap();
    s.metadata.with_custom_metadata(cm)
}

pub fn key(byte: u8) -> MasterKey {
    MasterKey::new([byte; 32])
}

pub fn ring(byte: u8) -> Arc<KeyRing> {
    Arc::new(KeyRing::new(key(byte)))
}

/// The three transforms the conformance kit runs over.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Zstd,
    Encrypted,
    Both,
}

pub const MODES: [Mode; 3] = [Mode::Zstd, Mode::Encrypted, Mode::Both];

pub fn config(mode: Mode) -> TransformConfig {
    let c = TransformConfig::new();
    match mode {
        Mode::Zstd => c.with_compression(ChunkCompression::Zstd { level: 3 }),
        Mode::Encrypted => c.with_encryption(ring(0x5a)),
        Mode::Both => c
            .with_compression(ChunkCompression::Zstd { level: 3 })
            .with_encryption(ring(0x5a)),
    }
}

pub fn transforming(inner: Arc<dyn RemoteStorageManager>, config: TransformConfig) -> Transforming {
    Transforming::new(inner, config)
}

/// The transform error behind an SPI error, which must name `segment`.
pub fn transform_error<'a>(
    e: &'a RemoteStorageError,
    segment: &RemoteLogSegmentId,
) -> &'a TransformError {
    let found = TransformError::find(e).unwrap_or_else(|| panic!("not a transform error: {e:?}"));
    assert_eq!(found.segment(), Some(segment), "{found}");
    assert!(e.to_string().contains(&segment.to_string()), "{e}");
    found
}

pub fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}
