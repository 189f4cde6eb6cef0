//! What the limit scenarios share: a store and backend decorator that sees every request a
//! replica sends (when, which, how many head reads at once), writers of any partition, and
//! hostile objects planted in the bucket.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition, Uuid,
};
use krabka_storage::Record;
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::{RemoteOwnership, TieredLog};

use crate::backend::Backend;
use crate::util::{config, options, value};

/// The partition numbered `n` of the topic the limit scenarios write.
pub fn partition(topic: &str, n: i32) -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(0x11_6175 + n as u128), topic, n)
}

/// Opens the owned writer of `tp` in `dir` over the backend.
pub fn open_writer_of(b: &Backend, dir: &Path, tp: &TopicIdPartition) -> TieredLog {
    let metadata = Arc::new(DurableRemoteLogMetadataManager::open(dir.join("metadata")).unwrap());
    TieredLog::open_owned(
        dir.join("log"),
        options(),
        b.rsm.clone(),
        metadata,
        tp.clone(),
        config(),
        &RemoteOwnership::new(b.store.clone(), b.location.clone()),
    )
    .unwrap()
}

/// Checks that `records` are the consecutive seqs from `from` with writer `tag`'s values.
pub fn assert_records(records: &[Record], from: u64, tag: &str) {
    for (i, r) in records.iter().enumerate() {
        let seq = from + i as u64;
        assert_eq!(r.seq, seq, "records out of order");
        assert_eq!(
            r.message.value.as_ref(),
            value(tag, seq).as_bytes(),
            "wrong value at seq {seq}"
        );
    }
}

/// Which calls a [`Probe`] saw, by method.
pub type Calls = BTreeMap<&'static str, u64>;

/// A store and backend that passes every call on (bounded reads as bounded reads) and records
/// it: when it was sent, by method; and how many head reads (`read_if_changed`) ran at once,
/// each held `head_delay` before it is passed on.
pub struct Probe {
    store: Arc<dyn OwnershipStore>,
    rsm: Arc<dyn RemoteStorageManager>,
    head_delay: Duration,
    /// Every call: when, and the method.
    sent: Mutex<Vec<(Instant, &'static str)>>,
    heads_now: AtomicUsize,
    heads_max: AtomicUsize,
}

/// Decrements the head reads in flight when the read ends, however it ends.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Probe {
    /// A probe over the backend's store and data.
    pub fn new(b: &Backend, head_delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            store: b.store.clone(),
            rsm: b.rsm.clone(),
            head_delay,
            sent: Mutex::new(Vec::new()),
            heads_now: AtomicUsize::new(0),
            heads_max: AtomicUsize::new(0),
        })
    }

    fn record(&self, method: &'static str) {
        self.sent.lock().unwrap().push((Instant::now(), method));
    }

    /// The calls so far, by method.
    pub fn calls(&self) -> Calls {
        let mut out = Calls::new();
        for (_, m) in self.sent.lock().unwrap().iter() {
            *out.entry(m).or_default() += 1;
        }
        out
    }

    /// The calls of `method` so far.
    pub fn count(&self, method: &str) -> u64 {
        self.calls().get(method).copied().unwrap_or(0)
    }

    /// When each call was sent, in order.
    pub fn times(&self) -> Vec<Instant> {
        let mut t: Vec<Instant> = self.sent.lock().unwrap().iter().map(|(t, _)| *t).collect();
        t.sort();
        t
    }

    /// The most head reads seen running at once.
    pub fn max_concurrent_head_reads(&self) -> usize {
        self.heads_max.load(Ordering::SeqCst)
    }
}

impl RemoteSegmentLister for Probe {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.record("list_partition");
        self.store.list_partition(partition_dir, visit)
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.record("list_partition_dirs");
        self.store.list_partition_dirs(visit)
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        self.record("read_object");
        self.store.read_object(key)
    }

    fn read_object_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.record("read_object_bounded");
        self.store.read_object_bounded(key, max_len)
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        self.record("delete_object");
        self.store.delete_object(key)
    }
}

impl OwnershipStore for Probe {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        self.record("create_if_absent");
        self.store.create_if_absent(key, bytes)
    }

    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        self.record("put_object");
        self.store.put_object(key, bytes)
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        self.record("read_if_changed");
        let now = self.heads_now.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&self.heads_now);
        self.heads_max.fetch_max(now, Ordering::SeqCst);
        if !self.head_delay.is_zero() {
            std::thread::sleep(self.head_delay);
        }
        self.store.read_if_changed(key, known, max_len)
    }
}

impl RemoteStorageManager for Probe {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        self.record("copy_log_segment_data");
        self.rsm.copy_log_segment_data(metadata, data)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.record("fetch_log_segment");
        self.rsm
            .fetch_log_segment(metadata, start_position, end_position)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.record("fetch_index");
        self.rsm.fetch_index(metadata, index_type)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.record("delete_log_segment_data");
        self.rsm.delete_log_segment_data(metadata)
    }
}

/// The file holding the object `key` (relative to the backend's root or prefix): on the
/// filesystem backend the file itself, on the in-process S3 server the file its storage keeps
/// the object in (found by walking its root).
pub fn object_file(b: &Backend, key: &str) -> PathBuf {
    if let Some(root) = b.location.strip_prefix("fs://") {
        return Path::new(root).join(key);
    }
    let server = b.server.as_ref().expect("an in-process S3 server");
    let mut dirs = vec![server.root().to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            seen += 1;
            assert!(seen < 100_000, "the server's root is too large to search");
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(&format!("/{key}")) {
                return path;
            }
        }
    }
    panic!("no file of {key} under the server's root");
}

/// Makes the object `key` `len` bytes long without writing them (a sparse file; on S3 the
/// object is written small first, so the server knows it, then its file grows): a hostile or
/// damaged object whose reader must not hold it whole.
pub fn plant_huge(b: &Backend, key: &str, len: u64) {
    b.store.put_object(key, b"hostile").unwrap();
    let path = object_file(b, key);
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
}
