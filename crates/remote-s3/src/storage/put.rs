//! Single-object uploads: PutObject with Content-MD5, files read and hashed off the runtime's
//! workers, verified from the PutObject response.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use krabka_remote_storage::RemoteStorageError;
use md5::{Digest, Md5};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::S3RemoteStorage;
use super::attempt::Earlier;
use super::verify::{Reported, hex};
use crate::errors::map_sdk;

/// Bodies up to this size are hashed in place; larger ones on the blocking pool, so the hash
/// overlaps other requests of the same copy instead of holding up their task.
const INLINE_HASH_MAX: usize = 256 << 10;

impl S3RemoteStorage {
    /// Uploads `path` to `key` (one PutObject below [`multipart_threshold`], else a multipart
    /// upload) and verifies it; returns its size. Each request carrying data holds one of
    /// `permits` while its body is read, hashed and sent.
    ///
    /// [`multipart_threshold`]: crate::S3Config::multipart_threshold
    ///
    /// `earlier` says whether an earlier attempt may have left multipart uploads of `key`
    /// open: only then does a multipart upload look for them (ListMultipartUploads).
    pub(super) async fn upload_file(
        &self,
        key: &str,
        path: &Path,
        permits: &Arc<Semaphore>,
        earlier: Earlier,
    ) -> Result<u64, RemoteStorageError> {
        let file =
            std::fs::File::open(path).map_err(|e| RemoteStorageError::io(path.display(), e))?;
        let len = file
            .metadata()
            .map_err(|e| RemoteStorageError::io(path.display(), e))?
            .len();
        if len < self.config.multipart_threshold {
            let _permit = acquire(permits).await?;
            let (data, digest) =
                run_blocking(path.display(), move || read_and_hash(file, len)).await?;
            self.put_object(key, data, digest).await?;
        } else {
            self.multipart(key, Arc::new(file), len, permits, earlier)
                .await?;
        }
        Ok(len)
    }

    /// Uploads bytes already in memory with one PutObject and verifies them.
    pub(super) async fn put_bytes(&self, key: &str, data: Bytes) -> Result<(), RemoteStorageError> {
        let digest = if data.len() <= INLINE_HASH_MAX {
            Md5::digest(&data).into()
        } else {
            let body = data.clone();
            run_blocking(key, move || Ok(Md5::digest(&body).into())).await?
        };
        self.put_object(key, data, digest).await
    }

    /// One PutObject with Content-MD5 (the store rejects a body that does not match), then
    /// verification of what was stored, from the response when its ETag settles it.
    ///
    /// The body is sent as an unsigned payload: the signature covers the Content-MD5 header,
    /// and a signed payload would add a SHA-256 of the same bytes on both ends (on a store
    /// sharing the client's cores, about 0.5 ms of CPU per MB each) without checking anything
    /// the MD5 and the ETag comparison do not.
    async fn put_object(
        &self,
        key: &str,
        data: Bytes,
        digest: [u8; 16],
    ) -> Result<(), RemoteStorageError> {
        let len = data.len() as u64;
        let out = self
            .client
            .put_object()
            .bucket(&self.config.bucket)
            .key(key)
            .content_length(i64::try_from(len).unwrap_or(i64::MAX))
            .content_md5(aws_smithy_types::base64::encode(digest))
            .body(ByteStream::from(data))
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| map_sdk(e, &self.cx("PutObject", key, None)))?;
        let reported = Reported {
            etag: out.e_tag(),
            server_side_encryption: out.server_side_encryption().map(|s| s.as_str()),
            sse_customer_algorithm: out.sse_customer_algorithm(),
        };
        self.verify_upload(key, len, &hex(&digest), reported).await
    }
}

/// Waits for one of the copy's request slots.
pub(super) async fn acquire(
    permits: &Semaphore,
) -> Result<SemaphorePermit<'_>, RemoteStorageError> {
    permits
        .acquire()
        .await
        .map_err(|e| RemoteStorageError::io("upload slots", std::io::Error::other(e)))
}

/// Runs `f` on the blocking pool; `what` names the file or key in an error.
pub(super) async fn run_blocking<T, F>(
    what: impl std::fmt::Display,
    f: F,
) -> Result<T, RemoteStorageError>
where
    T: Send + 'static,
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RemoteStorageError::io(&what, std::io::Error::other(e)))?
        .map_err(|e| RemoteStorageError::io(&what, e))
}

/// Reads a whole file of `len` bytes (an error if it has another size by now) and its MD5.
fn read_and_hash(mut file: std::fs::File, len: u64) -> std::io::Result<(Bytes, [u8; 16])> {
    let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut data)?;
    if data.len() as u64 != len {
        return Err(std::io::Error::other(
            "file changed size while being copied",
        ));
    }
    let digest = Md5::digest(&data).into();
    Ok((Bytes::from(data), digest))
}
