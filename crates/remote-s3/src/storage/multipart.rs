//! Multipart uploads: parts read by position and hashed on the blocking pool, several in
//! flight, the upload aborted on any error; stale uploads of earlier attempts cleaned up beside
//! it.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use krabka_remote_storage::RemoteStorageError;
use md5::{Digest, Md5};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinSet;

use super::S3RemoteStorage;
use super::attempt::Earlier;
use super::join::{Task, join_all};
use super::put::{acquire, run_blocking};
use super::verify::{Reported, hex};
use crate::errors::{Context, Kind, from_kind, map_sdk};

/// A part that went up: its number, the ETag the store gave it, and its MD5.
type UploadedPart = (i32, String, [u8; 16]);

/// Pages of ListMultipartUploads (up to 1000 uploads each) read by one cleanup.
const MAX_UPLOAD_LIST_PAGES: usize = 20;

impl S3RemoteStorage {
    /// Uploads `len` bytes of `file` to `key` as a multipart upload of
    /// [`effective_part_size`](crate::S3Config) parts, at most
    /// [`upload_concurrency`](crate::S3Config::upload_concurrency) at once, and verifies it.
    /// Any failure aborts the upload. Unless `earlier` is [`Earlier::None`], the uploads an
    /// earlier attempt left open under `key` are aborted beside it.
    pub(super) async fn multipart(
        &self,
        key: &str,
        file: Arc<std::fs::File>,
        len: u64,
        permits: &Arc<Semaphore>,
        earlier: Earlier,
    ) -> Result<(), RemoteStorageError> {
        let (own_tx, own_rx) = oneshot::channel();
        if earlier == Earlier::None {
            // No earlier attempt under this segment id: no upload of it to clean up.
            return self.upload(key, file, len, permits, own_tx).await;
        }
        // The cleanup of uploads an earlier attempt left under this key runs beside the upload
        // (no round trip before the first part), and is done before the copy returns.
        let tasks: Vec<Task<'_, Result<(), RemoteStorageError>>> = vec![
            Box::pin(self.upload(key, file, len, permits, own_tx)),
            Box::pin(async move {
                self.abort_stale_uploads(key, own_rx).await;
                Ok(())
            }),
        ];
        join_all(tasks).await.into_iter().collect()
    }

    /// The upload of [`multipart`](Self::multipart): creates it, passes its id to `own` (so
    /// the concurrent cleanup spares it), sends the parts, completes and verifies it.
    async fn upload(
        &self,
        key: &str,
        file: Arc<std::fs::File>,
        len: u64,
        permits: &Arc<Semaphore>,
        own: oneshot::Sender<String>,
    ) -> Result<(), RemoteStorageError> {
        let upload_id = self.create_upload(key).await?;
        // The cleanup may have finished already: then nobody listens, which is fine.
        let _ = own.send(upload_id.clone());
        let result = async {
            let (parts, etag) = self
                .upload_parts(key, &upload_id, file, len, permits)
                .await?;
            let out = self
                .client
                .complete_multipart_upload()
                .bucket(&self.config.bucket)
                .key(key)
                .upload_id(&upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| map_sdk(e, &self.cx("CompleteMultipartUpload", key, None)))?;
            Ok::<_, RemoteStorageError>((etag, out))
        }
        .await;
        match result {
            Ok((etag, out)) => {
                // No SSE-C here: the backend never sends customer keys, and S3 has no SSE-C
                // bucket default.
                let reported = Reported {
                    etag: out.e_tag(),
                    server_side_encryption: out.server_side_encryption().map(|s| s.as_str()),
                    sse_customer_algorithm: None,
                };
                self.verify_upload(key, len, &etag, reported).await
            }
            Err(e) => {
                self.abort_upload(key, &upload_id).await;
                Err(e)
            }
        }
    }

    /// CreateMultipartUpload of `key`; returns the upload id.
    async fn create_upload(&self, key: &str) -> Result<String, RemoteStorageError> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.config.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| map_sdk(e, &self.cx("CreateMultipartUpload", key, None)))?;
        let upload_id = created.upload_id().unwrap_or_default().to_owned();
        if upload_id.is_empty() {
            return Err(from_kind(
                Kind::Permanent,
                &self.cx("CreateMultipartUpload", key, None),
                "the store returned no upload id".into(),
                None,
            ));
        }
        Ok(upload_id)
    }

    /// Aborts a failed upload, best effort: the next copy of this key aborts it via
    /// ListMultipartUploads when this cannot.
    async fn abort_upload(&self, key: &str, upload_id: &str) {
        let abort = self
            .client
            .abort_multipart_upload()
            .bucket(&self.config.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await;
        if let Err(abort_err) = abort {
            tracing::warn!(key, upload_id, error = %aws_sdk_s3::error::DisplayErrorContext(&abort_err), "could not abort a failed multipart upload");
        }
    }

    /// Uploads the parts, at most `upload_concurrency` at once (and each holding one of the
    /// copy's `permits`), each read from the file by a positioned read just before it goes
    /// up. Returns the parts and the expected ETag.
    async fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        file: Arc<std::fs::File>,
        len: u64,
        permits: &Arc<Semaphore>,
    ) -> Result<(Vec<CompletedPart>, String), RemoteStorageError> {
        let part_size = self.config.effective_part_size(len);
        let count = len.div_ceil(part_size);
        let mut tasks: JoinSet<Result<UploadedPart, RemoteStorageError>> = JoinSet::new();
        let mut done: Vec<UploadedPart> = Vec::new();
        let mut next = 0u64;
        loop {
            while next < count && tasks.len() < self.config.upload_concurrency {
                let offset = next * part_size;
                let job = PartJob {
                    client: self.client.clone(),
                    bucket: self.config.bucket.clone(),
                    endpoint: self.endpoint.clone(),
                    key: key.to_owned(),
                    upload_id: upload_id.to_owned(),
                    file: Arc::clone(&file),
                    permits: Arc::clone(permits),
                    number: i32::try_from(next + 1).unwrap_or(i32::MAX),
                    offset,
                    size: part_size.min(len - offset),
                };
                tasks.spawn_on(job.run(), self.bridge.handle());
                next += 1;
            }
            match tasks.join_next().await {
                None => break,
                Some(Ok(Ok(part))) => done.push(part),
                Some(Ok(Err(e))) => return Err(e),
                Some(Err(join)) => {
                    return Err(RemoteStorageError::io(key, std::io::Error::other(join)));
                }
            }
        }
        Ok(completed(done))
    }

    /// Aborts the multipart uploads open under `prefix` (every one when `exact` is `None`,
    /// else only those of that exact key). Returns how many it aborted.
    ///
    /// A store without ListMultipartUploads (a permanent error) is skipped: the abort on error
    /// already covers it. A retriable failure, of the listing or of an abort, is returned so the
    /// caller (a delete the tiering layer retries) tries again.
    pub(super) async fn abort_uploads_under(
        &self,
        prefix: &str,
        exact: Option<&str>,
    ) -> Result<usize, RemoteStorageError> {
        let uploads = self.list_uploads_under(prefix, exact).await?;
        self.abort_listed(uploads).await
    }

    /// The multipart uploads open under `prefix` (only those of key `exact` when given), as
    /// `(key, upload id)`, from at most [`MAX_UPLOAD_LIST_PAGES`] pages of
    /// ListMultipartUploads. None when the store has no ListMultipartUploads (a permanent
    /// error); a retriable failure is returned.
    async fn list_uploads_under(
        &self,
        prefix: &str,
        exact: Option<&str>,
    ) -> Result<Vec<(String, String)>, RemoteStorageError> {
        let mut found = Vec::new();
        let mut key_marker: Option<String> = None;
        let mut upload_id_marker: Option<String> = None;
        for _ in 0..MAX_UPLOAD_LIST_PAGES {
            let list = self
                .client
                .list_multipart_uploads()
                .bucket(&self.config.bucket)
                .prefix(prefix)
                .set_key_marker(key_marker.take())
                .set_upload_id_marker(upload_id_marker.take())
                .send()
                .await;
            let list = match list {
                Ok(list) => list,
                Err(e) => {
                    let err = map_sdk(e, &self.cx("ListMultipartUploads", prefix, None));
                    if err.is_retriable() {
                        return Err(err);
                    }
                    tracing::debug!(prefix, error = %err, "ListMultipartUploads unsupported; skipped");
                    return Ok(found);
                }
            };
            for upload in list.uploads() {
                let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) else {
                    continue;
                };
                if exact.is_some_and(|e| e != key) || !key.starts_with(prefix) {
                    continue;
                }
                found.push((key.to_owned(), id.to_owned()));
            }
            if list.is_truncated() != Some(true) {
                return Ok(found);
            }
            key_marker = list.next_key_marker().map(str::to_owned);
            upload_id_marker = list.next_upload_id_marker().map(str::to_owned);
            if key_marker.is_none() && upload_id_marker.is_none() {
                // Truncated without a marker: a next page would repeat this one.
                return Ok(found);
            }
        }
        tracing::warn!(
            prefix,
            pages = MAX_UPLOAD_LIST_PAGES,
            "stopped listing multipart uploads after the page limit"
        );
        Ok(found)
    }

    /// Aborts each `(key, upload id)`; returns how many it aborted. A retriable failure is
    /// returned; any other (NoSuchUpload: completed or aborted meanwhile) is logged.
    async fn abort_listed(
        &self,
        uploads: Vec<(String, String)>,
    ) -> Result<usize, RemoteStorageError> {
        let mut aborted = 0;
        for (key, id) in &uploads {
            let res = self
                .client
                .abort_multipart_upload()
                .bucket(&self.config.bucket)
                .key(key)
                .upload_id(id)
                .send()
                .await;
            match res {
                Ok(_) => aborted += 1,
                Err(e) => {
                    let err = map_sdk(e, &self.cx("AbortMultipartUpload", key, None));
                    if err.is_retriable() {
                        return Err(err);
                    }
                    tracing::warn!(key, upload_id = id, error = %err, "could not abort a stale multipart upload");
                }
            }
        }
        Ok(aborted)
    }

    /// Aborts uploads a failed earlier attempt left under exactly `key`, best effort: a copy
    /// goes ahead even when this fails (a later delete of the segment retries the cleanup).
    ///
    /// Runs while the copy's own upload starts: it lists first, then waits for that upload's
    /// id from `own` and never aborts it. Every other upload the listing saw was initiated
    /// before this copy's (a copy of one segment id runs once at a time).
    async fn abort_stale_uploads(&self, key: &str, own: oneshot::Receiver<String>) {
        let listed = self.list_uploads_under(key, Some(key)).await;
        // No id when CreateMultipartUpload failed: every upload listed is then stale.
        let own = own.await.ok();
        let result = match listed {
            Ok(uploads) => {
                let stale = uploads
                    .into_iter()
                    .filter(|(_, id)| own.as_deref() != Some(id.as_str()))
                    .collect();
                self.abort_listed(stale).await.map(drop)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(key, error = %e, "could not clean up stale multipart uploads");
        }
    }
}

/// The parts in order for CompleteMultipartUpload, and the ETag S3 derives from their MD5s:
/// `<md5 of the part md5s>-<parts>`.
fn completed(mut done: Vec<UploadedPart>) -> (Vec<CompletedPart>, String) {
    done.sort_by_key(|p| p.0);
    let mut all_digests = Md5::new();
    let parts = done
        .iter()
        .map(|(n, etag, digest)| {
            all_digests.update(digest);
            CompletedPart::builder().part_number(*n).e_tag(etag).build()
        })
        .collect();
    let etag = format!("{}-{}", hex(all_digests.finalize().as_slice()), done.len());
    (parts, etag)
}

/// One part to upload: everything its task needs, owned.
struct PartJob {
    client: Client,
    bucket: String,
    endpoint: String,
    key: String,
    upload_id: String,
    file: Arc<std::fs::File>,
    permits: Arc<Semaphore>,
    number: i32,
    offset: u64,
    size: u64,
}

impl PartJob {
    /// Reads, hashes and sends the part with Content-MD5 (the store rejects a part that does
    /// not match it), as an unsigned payload like every body (see `put_object`).
    async fn run(self) -> Result<UploadedPart, RemoteStorageError> {
        let _permit = acquire(&self.permits).await?;
        let (file, offset, size) = (Arc::clone(&self.file), self.offset, self.size);
        // Read and hash on the blocking pool: the MD5 of a part costs about as much as sending
        // it, and would otherwise hold a runtime worker that other parts' requests need.
        let (buf, digest) = run_blocking(&self.key, move || {
            let mut buf = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
            file.read_exact_at(&mut buf, offset)?;
            let digest: [u8; 16] = Md5::digest(&buf).into();
            Ok((buf, digest))
        })
        .await?;
        let out = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(&self.key)
            .upload_id(&self.upload_id)
            .part_number(self.number)
            .content_length(i64::try_from(size).unwrap_or(i64::MAX))
            .content_md5(aws_smithy_types::base64::encode(digest))
            .body(ByteStream::from(buf))
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| {
                let cx = Context {
                    operation: "UploadPart",
                    bucket: &self.bucket,
                    endpoint: &self.endpoint,
                    key: &self.key,
                    segment: None,
                };
                map_sdk(e, &cx)
            })?;
        Ok((
            self.number,
            out.e_tag().unwrap_or_default().to_owned(),
            digest,
        ))
    }
}
