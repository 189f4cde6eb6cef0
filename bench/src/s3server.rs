//! The local S3 server the tiering benchmark uploads to: s3s-fs served in-process over HTTP on
//! 127.0.0.1 with SigV4 checked (the same server `krabka-remote-s3`'s tests use; theirs is
//! test-only code, so this is a minimal copy without the fault-injection hooks).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use krabka_remote_s3::{S3Config, S3Credentials};

use crate::Result;

const ACCESS_KEY: &str = "krabka-bench-access";
const SECRET_KEY: &str = "krabka-bench-secret";
/// The bucket the server starts with.
pub const BUCKET: &str = "krabka-bench";

/// A running server; stopped when dropped.
pub struct S3sServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl S3sServer {
    /// Serves `root` (created with the bucket in it) on an ephemeral port.
    pub fn start(root: &Path) -> Result<Self> {
        std::fs::create_dir_all(root.join(BUCKET))?;
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| format!("s3s-fs: {e:?}"))?;
        let mut builder = s3s::service::S3ServiceBuilder::new(fs);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))))?;
        let addr = listener.local_addr()?;
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
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
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        Ok(Self {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// A krabka S3 config for the bucket, with the server's keys.
    pub fn config(&self) -> S3Config {
        S3Config::new(BUCKET)
            .with_endpoint(format!("http://{}", self.addr))
            .with_credentials(S3Credentials::static_keys(ACCESS_KEY, SECRET_KEY))
    }
}

impl Drop for S3sServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
