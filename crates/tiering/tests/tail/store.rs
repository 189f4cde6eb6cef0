//! A filesystem remote tier whose tail-object writes can be made to fail (a bucket that
//! stalls), and readers of what the bucket's tail holds.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};
use krabka_remote_storage::tail::{self as chain, TailKind};
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition, layout,
};

/// The filesystem backend, with a switch that fails every tail-object create.
pub struct Switchable {
    inner: FsRemoteStorage,
    /// While set, creates of tail objects fail (retriable), as a stalled bucket's would.
    pub stalled: AtomicBool,
    /// Tail-object creates that went through.
    pub tail_creates: AtomicU64,
}

impl Switchable {
    pub fn new(root: &Path) -> Arc<Self> {
        std::fs::create_dir_all(root).unwrap();
        Arc::new(Self {
            inner: FsRemoteStorage::new(root).unwrap(),
            stalled: AtomicBool::new(false),
            tail_creates: AtomicU64::new(0),
        })
    }
}

impl RemoteSegmentLister for Switchable {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.inner.list_partition(partition_dir, visit)
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.inner.list_partition_dirs(visit)
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        self.inner.read_object(key)
    }

    fn read_object_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.inner.read_object_bounded(key, max_len)
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        self.inner.delete_object(key)
    }
}

impl OwnershipStore for Switchable {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        if key.starts_with(layout::TAIL_CHAIN_PREFIX) {
            if self.stalled.load(Ordering::SeqCst) {
                return Err(RemoteStorageError::Retriable {
                    operation: "PutObject".to_owned(),
                    location: key.to_owned(),
                    message: "the bucket is stalled (test switch)".to_owned(),
                    source: None,
                });
            }
            self.tail_creates.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.create_if_absent(key, bytes)
    }

    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        self.inner.put_object(key, bytes)
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        self.inner.read_if_changed(key, known, max_len)
    }
}

impl RemoteStorageManager for Switchable {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        self.inner.copy_log_segment_data(metadata, data)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.inner
            .fetch_log_segment(metadata, start_position, end_position)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.inner.fetch_index(metadata, index_type)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.inner.delete_log_segment_data(metadata)
    }
}

/// One object of a chain: its chain dir, number, kind and the seq ranges of one partition.
pub type Listed = (String, u64, TailKind, Vec<(u64, u64)>);

/// Every object in every chain under the root, with the seq ranges `tp` has in it.
pub fn tail_entries(store: &dyn OwnershipStore, tp: &TopicIdPartition) -> Vec<Listed> {
    let mut chains = Vec::new();
    store
        .list_partition_dirs(&mut |d| {
            if let Some(c) = layout::parse_tail_chain_dir(&d) {
                chains.push(c);
            }
            Ok(())
        })
        .unwrap();
    let mut out = Vec::new();
    for c in chains {
        for n in chain::list_numbers(store, c).unwrap() {
            let Some(o) = chain::read_object(store, c, n).unwrap() else {
                continue;
            };
            let mine = o
                .entries()
                .iter()
                .filter(|e| e.topic_id == tp.topic_id() && e.partition == tp.partition())
                .map(|e| (e.first_seq, e.last_seq))
                .collect();
            out.push((layout::tail_chain_dir(c), n, o.kind(), mine));
        }
    }
    out
}

/// The seqs of `tp` the bucket's tail objects hold, sorted.
pub fn seqs_in_tail(store: &dyn OwnershipStore, tp: &TopicIdPartition) -> Vec<u64> {
    let mut seqs: Vec<u64> = tail_entries(store, tp)
        .into_iter()
        .flat_map(|(_, _, _, e)| e)
        .flat_map(|(a, b)| a..=b)
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    seqs
}

/// The remote tier over `backend` (its root `root`), segments untransformed.
pub fn fs_tier(backend: &Arc<Switchable>, root: &Path) -> krabka_tiering::RemoteTier {
    krabka_tiering::RemoteTier::new(
        backend.clone(),
        format!("fs://{}", root.display()),
        krabka_remote_transform::TransformConfig::default(),
    )
}
