//! The backends the replica tests run on (a filesystem root, the in-process S3 server, Ceph
//! RGW), rebuilt in a child process from its environment, and two decorators: a store that
//! counts the requests a replica sends, and a backend that holds a copy in flight until the
//! test releases it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use krabka_remote_s3::test_server::TestServer;
use krabka_remote_s3::{S3Config, S3Credentials, S3RemoteStorage};
use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::layout;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, manifest,
};
use krabka_tiering::fs::FsRemoteStorage;

/// Which backend a child process opens: `fs` or `s3`.
pub const BACKEND_VAR: &str = "KRABKA_REPLICA_TEST_BACKEND";
/// The filesystem root (fs).
const FS_ROOT_VAR: &str = "KRABKA_REPLICA_TEST_FS_ROOT";
/// The S3 endpoint, bucket, keys and prefix (s3).
const S3_ENDPOINT_VAR: &str = "KRABKA_REPLICA_TEST_S3_ENDPOINT";
const S3_BUCKET_VAR: &str = "KRABKA_REPLICA_TEST_S3_BUCKET";
const S3_ACCESS_VAR: &str = "KRABKA_REPLICA_TEST_S3_ACCESS";
const S3_SECRET_VAR: &str = "KRABKA_REPLICA_TEST_S3_SECRET";
const S3_PREFIX_VAR: &str = "KRABKA_REPLICA_TEST_S3_PREFIX";

/// One bucket (or root) the writer and its replicas share.
pub struct Backend {
    /// `fs`, `s3` or `ceph`, for messages.
    pub name: &'static str,
    pub rsm: Arc<dyn RemoteStorageManager>,
    pub store: Arc<dyn OwnershipStore>,
    /// What the writer's binding records.
    pub location: String,
    /// What a child process needs to open the same backend.
    pub child_env: Vec<(String, String)>,
    /// The in-process S3 server (it counts the requests it receives).
    pub server: Option<TestServer>,
    /// The filesystem root or the server's data, removed at the end.
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    /// A filesystem root in a fresh temporary directory.
    pub fn fs() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("remote");
        let mut b = Self::fs_at(&root);
        b._dir = Some(dir);
        b
    }

    fn fs_at(root: &Path) -> Self {
        let store = Arc::new(FsRemoteStorage::new(root).unwrap());
        Self {
            name: "fs",
            rsm: store.clone(),
            store,
            location: format!("fs://{}", root.display()),
            child_env: vec![
                (BACKEND_VAR.into(), "fs".into()),
                (FS_ROOT_VAR.into(), root.display().to_string()),
            ],
            server: None,
            _dir: None,
        }
    }

    /// A fresh in-process S3 server (enforcing create-only writes). A short prefix: the server
    /// keeps each object's attributes in a file named after the base64 of its key, and a
    /// name over 255 bytes fails the upload.
    pub fn s3() -> Self {
        let server = TestServer::start().unwrap();
        let config = server.config().with_prefix("rep");
        let mut b = Self::s3_with(
            "s3",
            config,
            server.access_key().to_owned(),
            server.secret_key().to_owned(),
        );
        b.server = Some(server);
        b
    }

    /// Ceph RGW as `.ci/run` starts it; `None` (skipped) when it is not running, a failure
    /// under `CI=true`.
    pub fn ceph(prefix: &str) -> Option<Self> {
        let config = crate::common::ceph_config(prefix)?;
        let var = |n: &str| std::env::var(n).unwrap();
        Some(Self::s3_with(
            "ceph",
            config,
            var("KRABKA_TEST_CEPH_ACCESS_KEY"),
            var("KRABKA_TEST_CEPH_SECRET_KEY"),
        ))
    }

    fn s3_with(name: &'static str, config: S3Config, access: String, secret: String) -> Self {
        let store = Arc::new(S3RemoteStorage::new(config.clone()).unwrap());
        let endpoint = config.endpoint_url.clone().unwrap_or_default();
        Self {
            name,
            rsm: store.clone(),
            store,
            location: format!("s3://{}/{}", config.bucket, config.prefix),
            child_env: vec![
                (BACKEND_VAR.into(), "s3".into()),
                (S3_ENDPOINT_VAR.into(), endpoint),
                (S3_BUCKET_VAR.into(), config.bucket.clone()),
                (S3_ACCESS_VAR.into(), access),
                (S3_SECRET_VAR.into(), secret),
                (S3_PREFIX_VAR.into(), config.prefix.clone()),
            ],
            server: None,
            _dir: None,
        }
    }

    /// The backend a parent described in [`child_env`](Self::child_env), opened anew (its own
    /// client, as another machine would have).
    pub fn from_env() -> Self {
        let var = |n: &str| std::env::var(n).unwrap_or_else(|_| panic!("{n} is not set"));
        match var(BACKEND_VAR).as_str() {
            "fs" => Self::fs_at(&PathBuf::from(var(FS_ROOT_VAR))),
            "s3" => {
                let config = S3Config::new(var(S3_BUCKET_VAR))
                    .with_endpoint(var(S3_ENDPOINT_VAR))
                    .with_credentials(S3Credentials::static_keys(
                        var(S3_ACCESS_VAR),
                        var(S3_SECRET_VAR),
                    ))
                    .with_prefix(var(S3_PREFIX_VAR));
                Self::s3_with("s3", config, var(S3_ACCESS_VAR), var(S3_SECRET_VAR))
            }
            other => panic!("unknown backend {other}"),
        }
    }

    /// Requests the in-process S3 server received so far, all operations together (`None` on
    /// other backends).
    pub fn server_requests(&self) -> Option<BTreeMap<String, usize>> {
        self.server.as_ref().map(TestServer::requests_received)
    }
}

/// The difference of two [`Backend::server_requests`] answers: requests of each operation
/// sent in between (only the operations that changed).
pub fn requests_between(
    before: &BTreeMap<String, usize>,
    after: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    after
        .iter()
        .filter_map(|(op, n)| {
            let d = n - before.get(op).copied().unwrap_or(0);
            (d > 0).then(|| (op.clone(), d))
        })
        .collect()
}

/// An [`OwnershipStore`] that counts every call it passes on, by method: the requests a
/// replica's refreshes send (a listing counted once per call).
pub struct CountingStore {
    inner: Arc<dyn OwnershipStore>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn OwnershipStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            calls: Mutex::new(BTreeMap::new()),
        })
    }

    fn count(&self, method: &'static str) {
        *self.calls.lock().unwrap().entry(method).or_default() += 1;
    }

    /// Calls so far, by method.
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls so far, all methods together.
    pub fn total(&self) -> u64 {
        self.calls.lock().unwrap().values().sum()
    }
}

impl RemoteSegmentLister for CountingStore {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.count("list_partition");
        self.inner.list_partition(partition_dir, visit)
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.count("list_partition_dirs");
        self.inner.list_partition_dirs(visit)
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        self.count("read_object");
        self.inner.read_object(key)
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        self.count("delete_object");
        self.inner.delete_object(key)
    }
}

impl OwnershipStore for CountingStore {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        self.count("create_if_absent");
        self.inner.create_if_absent(key, bytes)
    }

    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        self.count("put_object");
        self.inner.put_object(key, bytes)
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        self.count("read_if_changed");
        self.inner.read_if_changed(key, known, max_len)
    }
}

/// How long a held copy waits for its release before it goes on by itself (a test that
/// forgot to release it then fails on its own assertions instead of hanging).
const HOLD_LIMIT: Duration = Duration::from_secs(30);

#[derive(Default)]
struct GateState {
    /// Copies to let through before holding one (`None`: hold none).
    hold_after: Option<u32>,
    /// Whether the copy is held after its upload (its complete manifest in the bucket, the
    /// writer not told yet) instead of before its data.
    uploaded: bool,
    /// The copy held now, or last.
    held: Option<RemoteLogSegmentMetadata>,
    released: bool,
}

/// A backend that holds one chosen copy in flight until [`release`](Self::release): before its
/// data (the copy's in-progress manifest in the bucket, as a real copy writes it first), or
/// after its upload (complete in the bucket, the writer not told yet). Every other call
/// passes through.
pub struct Gate {
    inner: Arc<dyn RemoteStorageManager>,
    store: Arc<dyn OwnershipStore>,
    state: Mutex<GateState>,
    changed: Condvar,
}

impl Gate {
    pub fn new(inner: Arc<dyn RemoteStorageManager>, store: Arc<dyn OwnershipStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            store,
            state: Mutex::new(GateState::default()),
            changed: Condvar::new(),
        })
    }

    /// Holds the copy after the next `n` copies, before its data.
    pub fn hold_after(&self, n: u32) {
        self.hold(n, false);
    }

    /// Holds the copy after the next `n` copies, after its upload.
    pub fn hold_uploaded_after(&self, n: u32) {
        self.hold(n, true);
    }

    fn hold(&self, n: u32, uploaded: bool) {
        let mut s = self.state.lock().unwrap();
        s.hold_after = Some(n);
        s.uploaded = uploaded;
        s.held = None;
        s.released = false;
    }

    /// Waits until a copy is held; its metadata.
    pub fn wait_held(&self) -> RemoteLogSegmentMetadata {
        let deadline = Instant::now() + HOLD_LIMIT;
        let mut s = self.state.lock().unwrap();
        loop {
            if let Some(m) = &s.held {
                return m.clone();
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .expect("no copy was held within the limit");
            s = self.changed.wait_timeout(s, left).unwrap().0;
        }
    }

    /// Says the copy of `metadata` is held, then waits for its release (bounded).
    fn wait_release(&self, metadata: &RemoteLogSegmentMetadata) {
        let deadline = Instant::now() + HOLD_LIMIT;
        let mut s = self.state.lock().unwrap();
        s.held = Some(metadata.clone());
        self.changed.notify_all();
        while !s.released {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            s = self.changed.wait_timeout(s, left).unwrap().0;
        }
    }

    /// Lets the held copy go on.
    pub fn release(&self) {
        self.state.lock().unwrap().released = true;
        self.changed.notify_all();
    }
}

impl RemoteStorageManager for Gate {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let hold = {
            let mut s = self.state.lock().unwrap();
            match s.hold_after {
                Some(0) => {
                    s.hold_after = None;
                    Some(s.uploaded)
                }
                Some(n) => {
                    s.hold_after = Some(n - 1);
                    None
                }
                None => None,
            }
        };
        match hold {
            None => self.inner.copy_log_segment_data(metadata, data),
            Some(false) => {
                // In flight: the in-progress manifest a copy writes before its data.
                self.store.put_object(
                    &layout::manifest_key(metadata)?,
                    &manifest::encode_in_progress(metadata),
                )?;
                self.wait_release(metadata);
                self.inner.copy_log_segment_data(metadata, data)
            }
            Some(true) => {
                let out = self.inner.copy_log_segment_data(metadata, data);
                self.wait_release(metadata);
                out
            }
        }
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
