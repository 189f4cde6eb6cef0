//! Real S3 servers for the tests: s3s-fs served in-process over HTTP on 127.0.0.1 with SigV4
//! checked, and the Ceph RGW cluster started by `scripts/ceph-rgw` (read from the environment).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use krabka_remote_s3::{S3Config, S3Credentials};
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result};

pub const ACCESS_KEY: &str = "krabka-test-access";
pub const SECRET_KEY: &str = "krabka-test-secret";
pub const BUCKET: &str = "krabka-tier";

/// Multipart uploads open on the server: upload id → key.
pub type Uploads = Arc<Mutex<BTreeMap<String, String>>>;

/// s3s-fs plus what it lacks for these tests: ListMultipartUploads (tracked here, since the
/// file system keeps no listing of open uploads) and a count of parts received.
struct Tracked {
    fs: s3s_fs::FileSystem,
    uploads: Uploads,
    parts_received: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl S3 for Tracked {
    async fn create_bucket(
        &self,
        r: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.fs.create_bucket(r).await
    }
    async fn head_bucket(
        &self,
        r: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.fs.head_bucket(r).await
    }
    async fn put_object(
        &self,
        r: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.fs.put_object(r).await
    }
    async fn get_object(
        &self,
        r: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.fs.get_object(r).await
    }
    async fn head_object(
        &self,
        r: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.fs.head_object(r).await
    }
    async fn delete_object(
        &self,
        r: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.fs.delete_object(r).await
    }
    async fn delete_objects(
        &self,
        r: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.fs.delete_objects(r).await
    }
    async fn list_objects_v2(
        &self,
        r: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.fs.list_objects_v2(r).await
    }
    async fn create_multipart_upload(
        &self,
        r: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let key = r.input.key.clone();
        let out = self.fs.create_multipart_upload(r).await?;
        if let Some(id) = &out.output.upload_id {
            self.uploads.lock().unwrap().insert(id.clone(), key);
        }
        Ok(out)
    }
    async fn upload_part(
        &self,
        r: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let out = self.fs.upload_part(r).await?;
        self.parts_received.fetch_add(1, Ordering::SeqCst);
        Ok(out)
    }
    async fn complete_multipart_upload(
        &self,
        r: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let id = r.input.upload_id.clone();
        let out = self.fs.complete_multipart_upload(r).await?;
        self.uploads.lock().unwrap().remove(&id);
        Ok(out)
    }
    async fn abort_multipart_upload(
        &self,
        r: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let id = r.input.upload_id.clone();
        let out = self.fs.abort_multipart_upload(r).await?;
        self.uploads.lock().unwrap().remove(&id);
        Ok(out)
    }
    async fn list_multipart_uploads(
        &self,
        r: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let prefix = r.input.prefix.clone().unwrap_or_default();
        let uploads = self
            .uploads
            .lock()
            .unwrap()
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
            uploads: Some(uploads),
            is_truncated: Some(false),
            ..Default::default()
        }))
    }
}

/// An s3s-fs server on 127.0.0.1 in its own thread and runtime; stop it and start it again on
/// the same port and data.
pub struct S3sServer {
    pub addr: SocketAddr,
    root: PathBuf,
    _dir: Option<tempfile::TempDir>,
    pub uploads: Uploads,
    pub parts_received: Arc<AtomicUsize>,
    running: Option<(
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<()>,
    )>,
}

impl S3sServer {
    /// Starts a server on an ephemeral port with the test bucket created.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(BUCKET)).unwrap();
        let mut server = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            root: dir.path().to_path_buf(),
            _dir: Some(dir),
            uploads: Arc::default(),
            parts_received: Arc::default(),
            running: None,
        };
        server.run();
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A config for the test bucket with the server's keys.
    pub fn config(&self) -> S3Config {
        S3Config::new(BUCKET)
            .with_endpoint(self.endpoint())
            .with_credentials(S3Credentials::static_keys(ACCESS_KEY, SECRET_KEY))
    }

    fn run(&mut self) {
        let fs = s3s_fs::FileSystem::new(&self.root).unwrap();
        let tracked = Tracked {
            fs,
            uploads: Arc::clone(&self.uploads),
            parts_received: Arc::clone(&self.parts_received),
        };
        let mut builder = s3s::service::S3ServiceBuilder::new(tracked);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let want = self.addr;
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                // The port may linger briefly after a stop: bounded retries.
                let mut listener = None;
                for _ in 0..50 {
                    match tokio::net::TcpListener::bind(want).await {
                        Ok(l) => {
                            listener = Some(l);
                            break;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                let listener = listener.expect("bind test server");
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let http = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => break,
                        accepted = listener.accept() => {
                            let Ok((socket, _)) = accepted else { continue };
                            let conn = http
                                .serve_connection(hyper_util::rt::TokioIo::new(socket), service.clone())
                                .into_owned();
                            tokio::spawn(async move {
                                let _ = conn.await;
                            });
                        }
                    }
                }
            });
            // Dropping the runtime cancels every connection: the server is gone at once.
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        self.addr = addr_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        self.running = Some((stop_tx, thread));
    }

    /// Stops the server: the port refuses connections and open ones are cut.
    pub fn stop(&mut self) {
        if let Some((tx, thread)) = self.running.take() {
            let _ = tx.send(());
            thread.join().unwrap();
        }
    }

    /// Starts it again on the same port with the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }
}

impl Drop for S3sServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The Ceph RGW under test, from the variables `scripts/ceph-rgw start` prints. `None` when not
/// set; under `CI=true` a missing Ceph is a failure, not a skip.
pub fn ceph_config() -> Option<S3Config> {
    let endpoint = std::env::var("KRABKA_TEST_CEPH_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty());
    let Some(endpoint) = endpoint else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but KRABKA_TEST_CEPH_ENDPOINT is not set: .ci/run must start Ceph RGW with scripts/ceph-rgw"
        );
        eprintln!(
            "KRABKA_TEST_CEPH_ENDPOINT not set: skipping the Ceph RGW test (see crates/remote-s3/README.md)"
        );
        return None;
    };
    let var = |n: &str| {
        std::env::var(n)
            .unwrap_or_else(|_| panic!("{n} must be set with KRABKA_TEST_CEPH_ENDPOINT"))
    };
    Some(
        S3Config::new(var("KRABKA_TEST_CEPH_BUCKET"))
            .with_endpoint(endpoint)
            .with_credentials(S3Credentials::static_keys(
                var("KRABKA_TEST_CEPH_ACCESS_KEY"),
                var("KRABKA_TEST_CEPH_SECRET_KEY"),
            ))
            .with_prefix(format!("t-{}", uuid::Uuid::new_v4())),
    )
}

/// Defines one `#[test]` per conformance check, each running that check against the store
/// `$store` returns (`Option<&'static dyn RemoteStorageManager>`; `None` skips), plus a test
/// that the list here covers every entry of `testkit::CHECKS`.
#[macro_export]
macro_rules! conformance_tests {
    ($store:path; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let Some(store) = $store() else { return };
                let check = krabka_remote_storage::testkit::CHECKS
                    .iter()
                    .find(|(n, _)| *n == stringify!($name))
                    .map(|(_, c)| *c)
                    .expect("check listed in testkit::CHECKS");
                check(store);
            }
        )*

        #[test]
        fn every_conformance_check_has_a_test() {
            let here = [$(stringify!($name)),*];
            for (name, _) in krabka_remote_storage::testkit::CHECKS {
                assert!(here.contains(name), "conformance check `{name}` has no test here");
            }
        }
    };
}
