//! [`TestServer`]: an S3 server in-process on 127.0.0.1 for tests and benchmarks (feature
//! `test-server`).
//!
//! It is [s3s-fs](https://crates.io/crates/s3s-fs) served over HTTP with SigV4 checked, plus what
//! s3s-fs lacks for fault tests: ListMultipartUploads (the file system keeps no listing of open
//! uploads, so the server tracks them), a count of the requests it received, and a delay of
//! ListMultipartUploads. It can be stopped (the port then refuses connections and open ones are
//! cut) and restarted on the same data.
//!
//! # Conditional writes
//! A PutObject with `If-None-Match: *` (a create-only write, as
//! [`OwnershipStore::create_if_absent`](krabka_remote_storage::ownership::OwnershipStore::create_if_absent)
//! sends) is treated one of two ways, chosen at start ([`ConditionalWrites`]):
//!
//! - [`TestServer::start`] and [`TestServer::start_in`] **enforce** it as AWS S3 and Ceph RGW
//!   do: when the key exists the answer is 412 `PreconditionFailed` and nothing is written.
//!   s3s-fs 0.14.1 checks the header itself, but between its check and its write another
//!   request could create the key, so the server runs create-only PutObjects one at a time (a
//!   lock around s3s-fs's check and write): of concurrent creators of one key exactly one
//!   succeeds. Unconditional PutObjects do not take the lock.
//! - [`TestServer::start_ignoring_conditional_writes`] **ignores** it, as some S3-compatible
//!   servers do: the header is dropped before s3s-fs sees it, so every PutObject succeeds and
//!   overwrites. For tests showing that
//!   [`ownership::probe`](krabka_remote_storage::ownership::probe) detects such a store.
//!
//! A GetObject with `If-None-Match` (`*` or an ETag) is answered 304 Not Modified when it
//! matches, as AWS S3 and Ceph RGW do (s3s-fs ignores it). Other conditions (`If-Match`, a
//! PutObject's `If-None-Match` with an ETag) are left to s3s-fs in both modes.
//!
//! # Key length
//! s3s-fs keeps each object's attributes in a file named after the base64 of its key, so keys
//! over about 150 bytes fail with 500 InternalError (the name passes 255 bytes) where S3 takes
//! up to 1,024: tests keep their prefixes short.
//!
//! ```no_run
//! use krabka_remote_s3::S3RemoteStorage;
//! use krabka_remote_s3::test_server::TestServer;
//!
//! let server = TestServer::start()?;
//! let storage = S3RemoteStorage::new(server.config().with_prefix("t"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CreateBucketInput, CreateBucketOutput,
    CreateMultipartUploadInput, CreateMultipartUploadOutput, DeleteObjectInput, DeleteObjectOutput,
    DeleteObjectsInput, DeleteObjectsOutput, GetObjectInput, GetObjectOutput, HeadBucketInput,
    HeadBucketOutput, HeadObjectInput, HeadObjectOutput, ListMultipartUploadsInput,
    ListMultipartUploadsOutput, ListObjectsV2Input, ListObjectsV2Output, MultipartUpload,
    PutObjectInput, PutObjectOutput, UploadPartInput, UploadPartOutput,
};
use s3s::{S3, S3Request, S3Response, S3Result};

use crate::{S3Config, S3Credentials};

mod not_modified;
mod probe;

pub use probe::Payloads;
use probe::Probe;

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "krabka-test-access";
/// The secret key the server accepts.
pub const SECRET_KEY: &str = "krabka-test-secret";
/// The bucket the server starts with.
pub const BUCKET: &str = "krabka-tier";

/// How long a restart keeps trying the old port before taking a new one.
const REBIND_TRIES: u32 = 20;
const REBIND_PAUSE: Duration = Duration::from_millis(50);

/// Multipart uploads open on the server: upload id → key.
type Uploads = Arc<Mutex<BTreeMap<String, String>>>;

/// What a [`TestServer`] does with `If-None-Match: *` on PutObject (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConditionalWrites {
    /// 412 `PreconditionFailed` when the key exists; concurrent creators of one key: exactly
    /// one succeeds. What AWS S3 and Ceph RGW do.
    #[default]
    Enforce,
    /// The header is accepted and ignored: the PutObject succeeds and overwrites, as on some
    /// S3-compatible servers.
    Ignore,
}

/// s3s-fs plus the upload tracking, the part and HeadObject counting, and the conditional
/// writes.
struct Tracked {
    fs: s3s_fs::FileSystem,
    conditional: ConditionalWrites,
    /// Held by each create-only PutObject across s3s-fs's existence check and its write.
    create_lock: Arc<tokio::sync::Mutex<()>>,
    uploads: Uploads,
    parts_received: Arc<AtomicUsize>,
    heads_received: Arc<AtomicUsize>,
    probe: Arc<Probe>,
}

impl Tracked {
    /// Records how a request carrying a body vouched for it.
    fn payload<T>(&self, r: &S3Request<T>, content_md5: bool) {
        let unsigned = r
            .headers
            .get("x-amz-content-sha256")
            .is_some_and(|v| v.as_bytes() == b"UNSIGNED-PAYLOAD");
        self.probe.payload(content_md5, unsigned);
    }

    fn count(&self, operation: &'static str) {
        self.probe.count(operation);
    }
}

fn lock(uploads: &Uploads) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
    uploads.lock().unwrap_or_else(PoisonError::into_inner)
}

#[async_trait::async_trait]
impl S3 for Tracked {
    async fn create_bucket(
        &self,
        r: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.count("CreateBucket");
        self.fs.create_bucket(r).await
    }
    async fn head_bucket(
        &self,
        r: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.count("HeadBucket");
        self.fs.head_bucket(r).await
    }
    async fn put_object(
        &self,
        mut r: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.count("PutObject");
        self.payload(&r, r.input.content_md5.is_some());
        let create_only = r.input.if_none_match.as_ref().is_some_and(|c| c.is_any());
        if !create_only {
            return self.fs.put_object(r).await;
        }
        match self.conditional {
            ConditionalWrites::Enforce => {
                // s3s-fs answers 412 when the object exists, before writing anything; one
                // create-only write at a time makes its check and write one step.
                let _one_at_a_time = self.create_lock.lock().await;
                self.fs.put_object(r).await
            }
            ConditionalWrites::Ignore => {
                r.input.if_none_match = None;
                self.fs.put_object(r).await
            }
        }
    }
    async fn get_object(
        &self,
        r: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.count("GetObject");
        not_modified::get_object(&self.fs, r).await
    }
    async fn head_object(
        &self,
        r: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.count("HeadObject");
        self.heads_received.fetch_add(1, Ordering::SeqCst);
        self.fs.head_object(r).await
    }
    async fn delete_object(
        &self,
        r: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.count("DeleteObject");
        self.fs.delete_object(r).await
    }
    async fn delete_objects(
        &self,
        r: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.count("DeleteObjects");
        self.fs.delete_objects(r).await
    }
    async fn list_objects_v2(
        &self,
        r: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.count("ListObjectsV2");
        self.fs.list_objects_v2(r).await
    }
    async fn create_multipart_upload(
        &self,
        r: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.count("CreateMultipartUpload");
        let key = r.input.key.clone();
        let out = self.fs.create_multipart_upload(r).await?;
        if let Some(id) = &out.output.upload_id {
            lock(&self.uploads).insert(id.clone(), key);
        }
        Ok(out)
    }
    async fn upload_part(
        &self,
        r: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.count("UploadPart");
        self.payload(&r, r.input.content_md5.is_some());
        let out = self.fs.upload_part(r).await?;
        self.parts_received.fetch_add(1, Ordering::SeqCst);
        Ok(out)
    }
    async fn complete_multipart_upload(
        &self,
        r: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.count("CompleteMultipartUpload");
        let id = r.input.upload_id.clone();
        let out = self.fs.complete_multipart_upload(r).await?;
        lock(&self.uploads).remove(&id);
        Ok(out)
    }
    async fn abort_multipart_upload(
        &self,
        r: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.count("AbortMultipartUpload");
        let id = r.input.upload_id.clone();
        let out = self.fs.abort_multipart_upload(r).await?;
        lock(&self.uploads).remove(&id);
        Ok(out)
    }
    async fn list_multipart_uploads(
        &self,
        r: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.count("ListMultipartUploads");
        let delay = self.probe.list_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let parts = self.parts_received.load(Ordering::SeqCst);
        self.probe.parts_when_listed.store(parts, Ordering::SeqCst);
        let prefix = r.input.prefix.clone().unwrap_or_default();
        let uploads = lock(&self.uploads)
            .iter()
            .filter(|(_, key)| key.starts_with(&prefix))
            .map(|(id, key)| MultipartUpload {
                key: Some(key.clone()),
                upload_id: Some(id.clone()),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(r.input.bucket),
            prefix: r.input.prefix,
            uploads: Some(uploads),
            is_truncated: Some(false),
            ..Default::default()
        }))
    }
}

/// A serving thread and the way to stop it.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// An s3s-fs server on 127.0.0.1 in a thread and runtime of its own, with the bucket
/// [`BUCKET`] and the keys [`ACCESS_KEY`] / [`SECRET_KEY`]. Stopped when dropped.
pub struct TestServer {
    addr: SocketAddr,
    root: PathBuf,
    _dir: Option<tempfile::TempDir>,
    conditional: ConditionalWrites,
    create_lock: Arc<tokio::sync::Mutex<()>>,
    uploads: Uploads,
    parts_received: Arc<AtomicUsize>,
    heads_received: Arc<AtomicUsize>,
    probe: Arc<Probe>,
    running: Option<Running>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .field("root", &self.root)
            .field("conditional", &self.conditional)
            .field("running", &self.running.is_some())
            .finish_non_exhaustive()
    }
}

impl TestServer {
    /// Starts a server on an ephemeral port, storing objects in a temporary directory removed
    /// when the server is dropped. It enforces `If-None-Match: *` ([`ConditionalWrites::Enforce`]).
    ///
    /// # Errors
    /// The directory, the runtime or the listener could not be created.
    pub fn start() -> io::Result<Self> {
        Self::start_temporary(ConditionalWrites::Enforce)
    }

    /// Like [`start`](Self::start), but the server accepts `If-None-Match: *` on PutObject and
    /// ignores it ([`ConditionalWrites::Ignore`]): a second create of a key succeeds and
    /// overwrites, as on S3-compatible servers that do not implement conditional writes.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_ignoring_conditional_writes() -> io::Result<Self> {
        Self::start_temporary(ConditionalWrites::Ignore)
    }

    /// Starts a server on an ephemeral port storing objects under `root` (created if needed,
    /// kept afterwards). It enforces `If-None-Match: *` ([`ConditionalWrites::Enforce`]).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_in(root: impl AsRef<Path>) -> io::Result<Self> {
        Self::start_with(
            root.as_ref().to_path_buf(),
            None,
            ConditionalWrites::Enforce,
        )
    }

    fn start_temporary(conditional: ConditionalWrites) -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let root = dir.path().to_path_buf();
        Self::start_with(root, Some(dir), conditional)
    }

    fn start_with(
        root: PathBuf,
        dir: Option<tempfile::TempDir>,
        conditional: ConditionalWrites,
    ) -> io::Result<Self> {
        std::fs::create_dir_all(root.join(BUCKET))?;
        let mut server = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            root,
            _dir: dir,
            conditional,
            create_lock: Arc::default(),
            uploads: Arc::default(),
            parts_received: Arc::default(),
            heads_received: Arc::default(),
            probe: Arc::default(),
            running: None,
        };
        server.run(None)?;
        Ok(server)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The access key it accepts ([`ACCESS_KEY`]).
    pub fn access_key(&self) -> &'static str {
        ACCESS_KEY
    }

    /// The secret key it accepts ([`SECRET_KEY`]).
    pub fn secret_key(&self) -> &'static str {
        SECRET_KEY
    }

    /// The bucket it starts with ([`BUCKET`]).
    pub fn bucket(&self) -> &'static str {
        BUCKET
    }

    /// The directory holding the objects.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What it does with `If-None-Match: *` on PutObject (kept across restarts).
    pub fn conditional_writes(&self) -> ConditionalWrites {
        self.conditional
    }

    /// A config for [`BUCKET`] at [`endpoint`](Self::endpoint) with the server's keys.
    pub fn config(&self) -> S3Config {
        S3Config::new(BUCKET)
            .with_endpoint(self.endpoint())
            .with_credentials(S3Credentials::static_keys(ACCESS_KEY, SECRET_KEY))
    }

    /// The multipart uploads open on the server whose key starts with `prefix`, as
    /// `(key, upload id)`; what its ListMultipartUploads answers.
    pub fn open_uploads(&self, prefix: &str) -> Vec<(String, String)> {
        lock(&self.uploads)
            .iter()
            .filter(|(_, key)| key.starts_with(prefix))
            .map(|(id, key)| (key.clone(), id.clone()))
            .collect()
    }

    /// How many UploadPart requests it has stored since it was first started.
    pub fn parts_received(&self) -> usize {
        self.parts_received.load(Ordering::SeqCst)
    }

    /// A shared counter of the parts received, readable while another thread holds the server.
    pub fn parts_received_counter(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.parts_received)
    }

    /// How many HeadObject requests it has answered since it was first started.
    pub fn heads_received(&self) -> usize {
        self.heads_received.load(Ordering::SeqCst)
    }

    /// Whether it is serving.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Binds `want` (retrying briefly while the old socket lingers), falling back to any free
    /// port; any free port at once when `want` is `None`.
    fn bind(
        rt: &tokio::runtime::Runtime,
        want: Option<SocketAddr>,
    ) -> io::Result<tokio::net::TcpListener> {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let Some(want) = want else {
            return rt.block_on(tokio::net::TcpListener::bind(any));
        };
        for _ in 0..REBIND_TRIES {
            match rt.block_on(tokio::net::TcpListener::bind(want)) {
                Ok(l) => return Ok(l),
                Err(_) => std::thread::sleep(REBIND_PAUSE),
            }
        }
        // Someone else took the port meanwhile: a new one (see `restart`).
        rt.block_on(tokio::net::TcpListener::bind(any))
    }

    fn run(&mut self, want: Option<SocketAddr>) -> io::Result<()> {
        let fs = s3s_fs::FileSystem::new(&self.root)
            .map_err(|e| io::Error::other(format!("s3s-fs on {}: {e:?}", self.root.display())))?;
        let tracked = Tracked {
            fs,
            conditional: self.conditional,
            create_lock: Arc::clone(&self.create_lock),
            uploads: Arc::clone(&self.uploads),
            parts_received: Arc::clone(&self.parts_received),
            heads_received: Arc::clone(&self.heads_received),
            probe: Arc::clone(&self.probe),
        };
        let mut builder = s3s::service::S3ServiceBuilder::new(tracked);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("krabka-test-s3")
            .enable_all()
            .build()?;
        let listener = Self::bind(&rt, want)?;
        let addr = listener.local_addr()?;
        let (stop, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("krabka-test-s3".into())
            .spawn(move || {
                rt.block_on(async move {
                    let http = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => break,
                            accepted = listener.accept() => {
                                let Ok((socket, _)) = accepted else { continue };
                                // As production stores do: without it a small response's tail
                                // waits for the client's delayed ACK (~40 ms on loopback).
                                let _ = socket.set_nodelay(true);
                                let conn = http
                                    .serve_connection(
                                        hyper_util::rt::TokioIo::new(socket),
                                        service.clone(),
                                    )
                                    .into_owned();
                                tokio::spawn(async move {
                                    let _ = conn.await;
                                });
                            }
                        }
                    }
                    // The listener drops here: the port refuses connections at once.
                });
                // Dropping the runtime cancels every connection: the server is gone at once.
                rt.shutdown_timeout(Duration::from_secs(1));
            })?;
        self.addr = addr;
        self.running = Some(Running { stop, thread });
        Ok(())
    }

    /// Stops the server: the port refuses connections and open ones are cut. Does nothing when
    /// stopped already.
    pub fn stop(&mut self) {
        if let Some(Running { stop, thread }) = self.running.take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }

    /// Starts it again with the same data and open uploads, on the same port when that is
    /// still free, else on a new one: compare [`endpoint`](Self::endpoint) (or
    /// [`addr`](Self::addr)) before and after, and build clients anew from
    /// [`config`](Self::config) if it changed. Returns whether the port is the old one.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn restart(&mut self) -> io::Result<bool> {
        self.stop();
        let old = self.addr;
        self.run(Some(old))?;
        Ok(self.addr == old)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn restart_moves_to_a_new_port_when_the_old_one_is_taken() {
        let mut server = TestServer::start().unwrap();
        let old = server.addr();
        server.stop();
        // Someone else binds the port while the server is down.
        let squatter = std::net::TcpListener::bind(old).unwrap();
        let same = server.restart().unwrap();
        assert!(!same);
        assert_ne!(server.addr(), old);
        assert!(std::net::TcpStream::connect(server.addr()).is_ok());
        drop(squatter);
        // With the port free again, a restart keeps it.
        let now = server.addr();
        assert!(server.restart().unwrap());
        assert_eq!(server.addr(), now);
    }
}
