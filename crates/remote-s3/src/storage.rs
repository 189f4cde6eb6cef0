//! [`S3RemoteStorage`]: the SPI on aws-sdk-s3.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    retry::RetryConfig, timeout::TimeoutConfig,
};
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use bytes::Bytes;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};
use krabka_remote_storage::{
    CustomMetadata, IndexSource, IndexType, LogSegmentData, RemoteLogSegmentId,
    RemoteLogSegmentMetadata, RemoteStorageError, RemoteStorageManager, checked_range, layout,
    manifest,
};
use md5::{Digest, Md5};
use tokio::runtime::Handle;
use tokio::task::JoinSet;

use crate::bridge::Bridge;
use crate::config::{S3Config, S3Credentials};
use crate::errors::{Context, Kind, from_kind, map_sdk};

/// A part that went up: its number, the ETag the store gave it, and its MD5.
type UploadedPart = (i32, String, [u8; 16]);

/// Pages of ListMultipartUploads (up to 1000 uploads each) read by one cleanup.
const MAX_UPLOAD_LIST_PAGES: usize = 20;

/// Tag of the custom metadata a copy returns: `b"s3v1"` then the `.log` size as `u64` LE.
const CUSTOM_TAG: &[u8; 4] = b"s3v1";

/// The S3 backend of [`RemoteStorageManager`].
///
/// Keys follow [`krabka_remote_storage::layout`] under [`S3Config::prefix`]. Every call is
/// blocking; see the crate docs for the threads it may be called from.
pub struct S3RemoteStorage {
    client: Client,
    config: S3Config,
    endpoint: String,
    bridge: Bridge,
}

impl std::fmt::Debug for S3RemoteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3RemoteStorage")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl S3RemoteStorage {
    /// Connects with a small runtime of its own ([`S3Config::runtime_threads`] workers) and
    /// checks the bucket with HeadBucket.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] for a config below its minimums,
    /// [`RemoteStorageError::StoreUnavailable`] when the bucket does not exist or the endpoint
    /// does not answer, [`RemoteStorageError::AccessDenied`] when the credentials are refused.
    pub fn new(config: S3Config) -> Result<Self, RemoteStorageError> {
        config.validate()?;
        let bridge = Bridge::owned(config.runtime_threads)?;
        Self::connect(config, bridge)
    }

    /// Like [`new`](Self::new) but runs the SDK on the caller's multi-thread runtime.
    ///
    /// # Errors
    /// As [`new`](Self::new), plus [`RemoteStorageError::InvalidArgument`] for a
    /// current-thread runtime's handle.
    pub fn with_handle(config: S3Config, handle: Handle) -> Result<Self, RemoteStorageError> {
        config.validate()?;
        let bridge = Bridge::borrowed(handle)?;
        Self::connect(config, bridge)
    }

    fn connect(config: S3Config, bridge: Bridge) -> Result<Self, RemoteStorageError> {
        let endpoint = config.endpoint_display();
        let client = bridge.block_on("client setup", build_client(&config))??;
        let storage = Self {
            client,
            config,
            endpoint,
            bridge,
        };
        storage.check_bucket()?;
        Ok(storage)
    }

    /// The configuration in use.
    pub fn config(&self) -> &S3Config {
        &self.config
    }

    /// The SDK client, configured as described in [`S3Config`].
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The full object key of a segment's `.log` (`index == None`) or of one of its indexes.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] for a topic name the layout rejects.
    pub fn object_key(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index: Option<IndexType>,
    ) -> Result<String, RemoteStorageError> {
        let relative = match index {
            None => layout::log_key(metadata)?,
            Some(t) => layout::index_key(metadata, t)?,
        };
        Ok(self.config.key(&relative))
    }

    /// The key prefix every object (and multipart upload) of one segment starts with:
    /// `<prefix>/<partition dir>/<offset>-<uuid>`.
    fn segment_prefix(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<String, RemoteStorageError> {
        let dir = layout::partition_dir(metadata.topic_id_partition())?;
        Ok(self
            .config
            .key(&format!("{dir}/{}", layout::segment_stem(metadata))))
    }

    fn cx<'a>(
        &'a self,
        operation: &'static str,
        key: &'a str,
        segment: Option<&'a RemoteLogSegmentId>,
    ) -> Context<'a> {
        Context {
            operation,
            bucket: &self.config.bucket,
            endpoint: &self.endpoint,
            key,
            segment,
        }
    }

    /// HeadObject of `key`; `segment` only names the segment in an error.
    async fn head(
        &self,
        key: &str,
        segment: Option<&RemoteLogSegmentId>,
    ) -> Result<HeadObjectOutput, RemoteStorageError> {
        self.client
            .head_object()
            .bucket(&self.config.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| map_sdk(e, &self.cx("HeadObject", key, segment)))
    }

    /// `s3://<bucket>/<key>`: where a [`RemoteStorageError::Corrupt`] object is.
    fn location(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.config.bucket)
    }

    fn check_bucket(&self) -> Result<(), RemoteStorageError> {
        let bucket = self.config.bucket.clone();
        let res = self.bridge.block_on(
            "HeadBucket",
            self.client.head_bucket().bucket(&bucket).send(),
        )?;
        match res {
            Ok(_) => Ok(()),
            Err(e) => {
                let cx = self.cx("HeadBucket", &bucket, None);
                match map_sdk(e, &cx) {
                    // HEAD has no body: a 404 on the bucket means no bucket.
                    RemoteStorageError::Backend { message, .. }
                    | RemoteStorageError::Retriable { message, .. } => {
                        Err(RemoteStorageError::StoreUnavailable {
                            bucket: bucket.clone(),
                            endpoint: self.endpoint.clone(),
                            message: format!("HeadBucket failed: {message}"),
                        })
                    }
                    other => Err(other),
                }
            }
        }
    }

    /// Uploads `path` to `key` (PutObject or multipart) and verifies it; returns its size.
    async fn upload_file(&self, key: &str, path: &Path) -> Result<u64, RemoteStorageError> {
        let file =
            std::fs::File::open(path).map_err(|e| RemoteStorageError::io(path.display(), e))?;
        let len = file
            .metadata()
            .map_err(|e| RemoteStorageError::io(path.display(), e))?
            .len();
        if len < self.config.multipart_threshold {
            let data = tokio::fs::read(path)
                .await
                .map_err(|e| RemoteStorageError::io(path.display(), e))?;
            if data.len() as u64 != len {
                return Err(RemoteStorageError::io(
                    path.display(),
                    std::io::Error::other("file changed size while being copied"),
                ));
            }
            self.put_bytes(key, Bytes::from(data)).await?;
        } else {
            self.multipart(key, Arc::new(file), len).await?;
        }
        Ok(len)
    }

    /// One PutObject with Content-MD5 (the store rejects a body that does not match), then
    /// verification of what was stored.
    async fn put_bytes(&self, key: &str, data: Bytes) -> Result<(), RemoteStorageError> {
        let digest = Md5::digest(&data);
        let len = data.len() as u64;
        self.client
            .put_object()
            .bucket(&self.config.bucket)
            .key(key)
            .content_length(i64::try_from(len).unwrap_or(i64::MAX))
            .content_md5(aws_smithy_types::base64::encode(digest.as_slice()))
            .body(ByteStream::from(data))
            .send()
            .await
            .map_err(|e| map_sdk(e, &self.cx("PutObject", key, None)))?;
        self.verify(key, len, &hex(digest.as_slice())).await
    }

    /// Checks the stored object's size, and its ETag when [`etag_check`] says it is derived
    /// from MD5 (not under SSE-KMS or SSE-C). The bytes themselves were already checked by the
    /// store against the Content-MD5 of each request.
    async fn verify(
        &self,
        key: &str,
        len: u64,
        expected_etag: &str,
    ) -> Result<(), RemoteStorageError> {
        let head = self.head(key, None).await?;
        let stored = head.content_length().unwrap_or(-1);
        if u64::try_from(stored).ok() != Some(len) {
            return Err(RemoteStorageError::Corrupt {
                location: self.location(key),
                reason: format!("stored {stored} bytes, uploaded {len}"),
            });
        }
        let check = etag_check(
            head.e_tag(),
            head.server_side_encryption().map(|s| s.as_str()),
            head.sse_customer_algorithm(),
        );
        match check {
            EtagCheck::Compare(etag) if !etag.eq_ignore_ascii_case(expected_etag) => {
                Err(RemoteStorageError::Corrupt {
                    location: self.location(key),
                    reason: format!("stored ETag {etag}, expected {expected_etag}"),
                })
            }
            EtagCheck::Compare(_) => Ok(()),
            EtagCheck::Skip(why) => {
                tracing::trace!(key, why, "stored ETag not compared");
                Ok(())
            }
        }
    }

    /// Aborts the multipart uploads open under `prefix` (every one when `exact` is `None`,
    /// else only those of that exact key), reading at most [`MAX_UPLOAD_LIST_PAGES`] pages of
    /// ListMultipartUploads. Returns how many it aborted.
    ///
    /// A store without ListMultipartUploads (a permanent error) is skipped: the abort on error
    /// already covers it. A retriable failure, of the listing or of an abort, is returned so the
    /// caller (a delete the tiering layer retries) tries again.
    async fn abort_uploads_under(
        &self,
        prefix: &str,
        exact: Option<&str>,
    ) -> Result<usize, RemoteStorageError> {
        let mut aborted = 0;
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
                    return Ok(aborted);
                }
            };
            for upload in list.uploads() {
                let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) else {
                    continue;
                };
                if exact.is_some_and(|e| e != key) || !key.starts_with(prefix) {
                    continue;
                }
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
                        // NoSuchUpload: it completed or was aborted meanwhile.
                        tracing::warn!(key, upload_id = id, error = %err, "could not abort a stale multipart upload");
                    }
                }
            }
            if list.is_truncated() != Some(true) {
                return Ok(aborted);
            }
            key_marker = list.next_key_marker().map(str::to_owned);
            upload_id_marker = list.next_upload_id_marker().map(str::to_owned);
            if key_marker.is_none() && upload_id_marker.is_none() {
                // Truncated without a marker: a next page would repeat this one.
                return Ok(aborted);
            }
        }
        tracing::warn!(
            prefix,
            pages = MAX_UPLOAD_LIST_PAGES,
            "stopped listing multipart uploads after the page limit"
        );
        Ok(aborted)
    }

    /// Aborts uploads a failed earlier attempt left under exactly `key`, best effort: a copy
    /// goes ahead even when this fails (a later delete of the segment retries the cleanup).
    async fn abort_stale_uploads(&self, key: &str) {
        if let Err(e) = self.abort_uploads_under(key, Some(key)).await {
            tracing::warn!(key, error = %e, "could not clean up stale multipart uploads");
        }
    }

    async fn multipart(
        &self,
        key: &str,
        file: Arc<std::fs::File>,
        len: u64,
    ) -> Result<(), RemoteStorageError> {
        self.abort_stale_uploads(key).await;
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
        let result = async {
            let (parts, etag) = self.upload_parts(key, &upload_id, file, len).await?;
            self.client
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
            Ok::<_, RemoteStorageError>(etag)
        }
        .await;
        match result {
            Ok(etag) => self.verify(key, len, &etag).await,
            Err(e) => {
                let abort = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.config.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                if let Err(abort_err) = abort {
                    // The next copy of this key aborts it via ListMultipartUploads.
                    tracing::warn!(key, upload_id, error = %aws_sdk_s3::error::DisplayErrorContext(&abort_err), "could not abort a failed multipart upload");
                }
                Err(e)
            }
        }
    }

    /// Uploads the parts, at most `upload_concurrency` at once, each read from the file by a
    /// positioned read just before it goes up. Returns the parts and the expected ETag.
    async fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        file: Arc<std::fs::File>,
        len: u64,
    ) -> Result<(Vec<CompletedPart>, String), RemoteStorageError> {
        let part_size = self.config.effective_part_size(len);
        let count = len.div_ceil(part_size);
        let mut tasks: JoinSet<Result<UploadedPart, RemoteStorageError>> = JoinSet::new();
        let mut done: Vec<UploadedPart> = Vec::new();
        let mut next = 0u64;
        loop {
            while next < count && tasks.len() < self.config.upload_concurrency {
                let offset = next * part_size;
                let size = part_size.min(len - offset);
                let part_number = i32::try_from(next + 1).unwrap_or(i32::MAX);
                let client = self.client.clone();
                let bucket = self.config.bucket.clone();
                let key = key.to_owned();
                let upload_id = upload_id.to_owned();
                let file = Arc::clone(&file);
                let endpoint = self.endpoint.clone();
                tasks.spawn_on(
                    async move {
                        // Read and hash on the blocking pool: the MD5 of a part costs about
                        // as much as sending it, and would otherwise hold a runtime worker that
                        // other parts' requests need.
                        let (buf, digest) = tokio::task::spawn_blocking(move || {
                            let mut buf = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
                            file.read_exact_at(&mut buf, offset)?;
                            let digest: [u8; 16] = Md5::digest(&buf).into();
                            Ok::<_, std::io::Error>((buf, digest))
                        })
                        .await
                        .map_err(|e| RemoteStorageError::io(&key, std::io::Error::other(e)))?
                        .map_err(|e| RemoteStorageError::io(&key, e))?;
                        let out = client
                            .upload_part()
                            .bucket(&bucket)
                            .key(&key)
                            .upload_id(&upload_id)
                            .part_number(part_number)
                            .content_length(i64::try_from(size).unwrap_or(i64::MAX))
                            .content_md5(aws_smithy_types::base64::encode(digest))
                            .body(ByteStream::from(buf))
                            .send()
                            .await
                            .map_err(|e| {
                                map_sdk(
                                    e,
                                    &Context {
                                        operation: "UploadPart",
                                        bucket: &bucket,
                                        endpoint: &endpoint,
                                        key: &key,
                                        segment: None,
                                    },
                                )
                            })?;
                        Ok((
                            part_number,
                            out.e_tag().unwrap_or_default().to_owned(),
                            digest,
                        ))
                    },
                    self.bridge.handle(),
                );
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
        Ok((parts, etag))
    }

    async fn get(
        &self,
        key: &str,
        segment: &RemoteLogSegmentId,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let mut req = self
            .client
            .get_object()
            .bucket(&self.config.bucket)
            .key(key);
        if let Some(r) = &range {
            req = req.range(format!("bytes={}-{}", r.start, r.end - 1));
        }
        let out = req
            .send()
            .await
            .map_err(|e| map_sdk(e, &self.cx("GetObject", key, Some(segment))))?;
        let body = out.body.collect().await.map_err(|e| {
            from_kind(
                Kind::Transient,
                &self.cx("GetObject", key, Some(segment)),
                format!("reading the body failed: {e}"),
                Some(Box::new(e)),
            )
        })?;
        let bytes = body.to_vec();
        if let Some(r) = range
            && bytes.len() as u64 != r.end - r.start
        {
            return Err(RemoteStorageError::Corrupt {
                location: self.location(key),
                reason: format!(
                    "asked for bytes {}..{}, got {} bytes",
                    r.start,
                    r.end,
                    bytes.len()
                ),
            });
        }
        Ok(bytes)
    }

    async fn size_of(
        &self,
        key: &str,
        segment: &RemoteLogSegmentId,
    ) -> Result<u64, RemoteStorageError> {
        let head = self.head(key, Some(segment)).await?;
        Ok(u64::try_from(head.content_length().unwrap_or(0)).unwrap_or(0))
    }

    async fn copy_async(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let log_key = self.object_key(metadata, None)?;
        let size = self.upload_file(&log_key, &data.log_segment).await?;
        let mut absent = Vec::new();
        for t in IndexType::ALL {
            let key = self.object_key(metadata, Some(t))?;
            match data.index_source(t) {
                Some(IndexSource::File(path)) => {
                    self.upload_file(&key, path).await?;
                }
                Some(IndexSource::Bytes(bytes)) => self.put_bytes(&key, bytes.clone()).await?,
                None => absent.push(key),
            }
        }
        // A copy under an id already present replaces it: drop optional indexes it no longer has.
        self.delete_keys(absent).await?;
        let mut custom = CUSTOM_TAG.to_vec();
        custom.extend_from_slice(&size.to_le_bytes());
        let custom = CustomMetadata::new(custom);
        // Last, once every object above is stored and verified: the manifest that says the
        // copy is complete, with the custom metadata the caller will record.
        let manifest = manifest::encode(&metadata.with_custom_metadata(Some(custom.clone())));
        let key = self.config.key(&layout::manifest_key(metadata)?);
        self.put_bytes(&key, Bytes::from(manifest)).await?;
        Ok(Some(custom))
    }

    async fn delete_keys(&self, keys: Vec<String>) -> Result<(), RemoteStorageError> {
        if keys.is_empty() {
            return Ok(());
        }
        let first = keys.first().cloned().unwrap_or_default();
        let objects = keys
            .iter()
            .map(|k| ObjectIdentifier::builder().key(k).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RemoteStorageError::invalid_argument(e.to_string()))?;
        let delete = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(|e| RemoteStorageError::invalid_argument(e.to_string()))?;
        let out = self
            .client
            .delete_objects()
            .bucket(&self.config.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(|e| map_sdk(e, &self.cx("DeleteObjects", &first, None)))?;
        for err in out.errors() {
            // Deleting an absent key is success: delete is idempotent.
            if err.code() == Some("NoSuchKey") {
                continue;
            }
            let key = err.key().unwrap_or(&first).to_owned();
            let kind = crate::errors::classify(None, err.code());
            let kind = if kind == Kind::Transient && err.code().is_none() {
                Kind::Permanent
            } else {
                kind
            };
            return Err(from_kind(
                kind,
                &self.cx("DeleteObjects", &key, None),
                format!(
                    "{}: {}",
                    err.code().unwrap_or("unknown"),
                    err.message().unwrap_or_default()
                ),
                None,
            ));
        }
        Ok(())
    }
}

/// The `.log` size recorded in custom metadata by a copy, if this metadata carries it.
fn recorded_size(metadata: &RemoteLogSegmentMetadata) -> Option<u64> {
    let value = metadata.custom_metadata()?.value();
    let rest = value.strip_prefix(CUSTOM_TAG.as_slice())?;
    let bytes: [u8; 8] = rest.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a stored object's ETag can be compared with the MD5-derived one a copy expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EtagCheck<'a> {
    /// Compare: the ETag (quotes trimmed) is MD5-derived.
    Compare(&'a str),
    /// Do not compare, for this reason.
    Skip(&'static str),
}

/// Decides from a HeadObject response whether its ETag is MD5-derived.
///
/// Under SSE-KMS (`aws:kms`, `aws:kms:dsse`) and SSE-C (a customer algorithm is reported) S3's
/// ETags, single-part and multipart alike, are not the MD5 of the data, so they are skipped; so
/// is an ETag of neither MD5 form (other stores). Plain and SSE-S3 (`AES256`) objects are
/// compared. Skipping loses nothing the store did not already check: every PutObject and
/// UploadPart carries a Content-MD5 the store verifies, and the size is always checked.
fn etag_check<'a>(
    etag: Option<&'a str>,
    server_side_encryption: Option<&str>,
    sse_customer_algorithm: Option<&str>,
) -> EtagCheck<'a> {
    if sse_customer_algorithm.is_some_and(|a| !a.is_empty()) {
        return EtagCheck::Skip("SSE-C: the ETag is not the MD5 of the data");
    }
    if server_side_encryption.is_some_and(|s| s.starts_with("aws:kms")) {
        return EtagCheck::Skip("SSE-KMS: the ETag is not the MD5 of the data");
    }
    let Some(etag) = etag else {
        return EtagCheck::Skip("no ETag reported");
    };
    let etag = etag.trim_matches('"');
    if looks_like_md5_etag(etag) {
        EtagCheck::Compare(etag)
    } else {
        EtagCheck::Skip("the ETag is not of an MD5 form")
    }
}

/// `<32 hex>` (PutObject) or `<32 hex>-<parts>` (multipart): the forms S3 derives from MD5.
fn looks_like_md5_etag(etag: &str) -> bool {
    let (digest, parts) = match etag.split_once('-') {
        Some((d, p)) => (d, Some(p)),
        None => (etag, None),
    };
    digest.len() == 32
        && digest.bytes().all(|b| b.is_ascii_hexdigit())
        && parts.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

async fn build_client(config: &S3Config) -> Result<Client, RemoteStorageError> {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut b = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .http_client(http.clone())
        .force_path_style(config.force_path_style)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .retry_config(RetryConfig::standard().with_max_attempts(config.max_attempts))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(config.connect_timeout)
                .operation_attempt_timeout(config.attempt_timeout)
                .operation_timeout(config.operation_timeout)
                .build(),
        );
    if let Some(endpoint) = &config.endpoint_url {
        b = b.endpoint_url(endpoint);
    }
    match &config.credentials {
        S3Credentials::Static {
            access_key_id,
            secret_access_key,
            session_token,
        } => {
            b = b.credentials_provider(Credentials::new(
                access_key_id,
                secret_access_key,
                session_token.clone(),
                None,
                "krabka-static",
            ));
        }
        S3Credentials::DefaultChain => {
            #[cfg(feature = "default-credentials")]
            {
                let shared = aws_config::defaults(BehaviorVersion::latest())
                    .region(Region::new(config.region.clone()))
                    .http_client(http)
                    .load()
                    .await;
                if let Some(provider) = shared.credentials_provider() {
                    b = b.credentials_provider(provider);
                }
            }
            #[cfg(not(feature = "default-credentials"))]
            {
                drop(http);
                return Err(RemoteStorageError::invalid_argument(
                    "the default AWS credential chain needs the `default-credentials` feature; \
                     configure S3Credentials::Static instead",
                ));
            }
        }
    }
    Ok(Client::from_conf(b.build()))
}

impl RemoteStorageManager for S3RemoteStorage {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        self.bridge
            .block_on("copy", self.copy_async(metadata, data))?
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        let key = self.object_key(metadata, None)?;
        self.bridge.block_on("fetch", async {
            let size = match recorded_size(metadata) {
                Some(size) => size,
                None => self.size_of(&key, segment).await?,
            };
            let range = checked_range(size, start_position, end_position)?;
            if range.is_empty() {
                // No bytes to read, but a missing segment is still SegmentNotFound.
                self.size_of(&key, segment).await?;
                return Ok(Vec::new());
            }
            self.get(&key, segment, Some(range)).await
        })?
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let key = self.object_key(metadata, Some(index_type))?;
        self.bridge.block_on(
            "fetch index",
            self.get(&key, metadata.remote_log_segment_id(), None),
        )?
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let keys = layout::all_keys(metadata)?
            .iter()
            .map(|k| self.config.key(k))
            .collect();
        let prefix = self.segment_prefix(metadata)?;
        let manifest = self.config.key(&layout::manifest_key(metadata)?);
        self.bridge.block_on("delete", async {
            // The manifest first, in a request of its own: a delete cut short never leaves a
            // manifest pointing at deleted data.
            self.delete_keys(vec![manifest]).await?;
            self.delete_keys(keys).await?;
            // Multipart uploads of a copy whose abort failed (the store was down): the
            // tiering layer retries a copy under a fresh segment id, so only this delete
            // of the failed attempt's metadata ever looks under its keys again.
            self.abort_uploads_under(&prefix, None).await?;
            Ok(())
        })?
    }
}

/// Recovery's view of the bucket: `ListObjectsV2` under `<prefix>/<partition dir>/`, one page
/// (up to 1,000 keys) at a time, GetObject and DeleteObjects.
impl RemoteSegmentLister for S3RemoteStorage {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let full_prefix = self.config.key(&format!("{partition_dir}/"));
        let strip = self.config.key("");
        let mut token: Option<String> = None;
        loop {
            let request = self
                .client
                .list_objects_v2()
                .bucket(&self.config.bucket)
                .prefix(&full_prefix)
                .set_continuation_token(token.take());
            let page = self
                .bridge
                .block_on("ListObjectsV2", request.send())?
                .map_err(|e| map_sdk(e, &self.cx("ListObjectsV2", &full_prefix, None)))?;
            for object in page.contents() {
                let Some(key) = object.key() else { continue };
                let relative = key.strip_prefix(strip.as_str()).unwrap_or(key);
                visit(ListedObject {
                    key: relative.to_owned(),
                    size: u64::try_from(object.size().unwrap_or(0)).unwrap_or(0),
                })?;
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated().unwrap_or(false) => {
                    token = Some(next.to_owned());
                }
                _ => return Ok(()),
            }
        }
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let prefix = self.config.key("");
        let mut token: Option<String> = None;
        loop {
            let request = self
                .client
                .list_objects_v2()
                .bucket(&self.config.bucket)
                .prefix(&prefix)
                .delimiter("/")
                .set_continuation_token(token.take());
            let page = self
                .bridge
                .block_on("ListObjectsV2", request.send())?
                .map_err(|e| map_sdk(e, &self.cx("ListObjectsV2", &prefix, None)))?;
            for common in page.common_prefixes() {
                let Some(p) = common.prefix() else { continue };
                let name = p.strip_prefix(prefix.as_str()).unwrap_or(p);
                visit(name.trim_end_matches('/').to_owned())?;
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated().unwrap_or(false) => {
                    token = Some(next.to_owned());
                }
                _ => return Ok(()),
            }
        }
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        let key = self.config.key(key);
        self.bridge.block_on("GetObject", async {
            let out = self
                .client
                .get_object()
                .bucket(&self.config.bucket)
                .key(&key)
                .send()
                .await
                .map_err(|e| map_sdk(e, &self.cx("GetObject", &key, None)))?;
            let body = out.body.collect().await.map_err(|e| {
                from_kind(
                    Kind::Transient,
                    &self.cx("GetObject", &key, None),
                    format!("reading the body failed: {e}"),
                    Some(Box::new(e)),
                )
            })?;
            Ok(body.to_vec())
        })?
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        let key = self.config.key(key);
        self.bridge
            .block_on("DeleteObjects", self.delete_keys(vec![key]))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_etag_forms_are_recognised() {
        assert!(looks_like_md5_etag("9e107d9d372bb6826bd81d3542a419d6"));
        assert!(looks_like_md5_etag("9e107d9d372bb6826bd81d3542a419d6-3"));
        assert!(!looks_like_md5_etag("9e107d9d372bb6826bd81d3542a419d6-"));
        assert!(!looks_like_md5_etag("opaque-etag"));
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }

    #[test]
    fn etag_is_compared_only_when_md5_derived() {
        let md5 = "\"9e107d9d372bb6826bd81d3542a419d6\"";
        let multi = "\"9e107d9d372bb6826bd81d3542a419d6-3\"";
        // Plain and SSE-S3: compared, quotes trimmed, both forms.
        for sse in [None, Some("AES256")] {
            assert_eq!(
                etag_check(Some(md5), sse, None),
                EtagCheck::Compare("9e107d9d372bb6826bd81d3542a419d6")
            );
            assert_eq!(
                etag_check(Some(multi), sse, None),
                EtagCheck::Compare("9e107d9d372bb6826bd81d3542a419d6-3")
            );
        }
        // SSE-KMS (and dual-layer KMS) and SSE-C: never compared, whatever the ETag looks like.
        for etag in [md5, multi] {
            for sse in ["aws:kms", "aws:kms:dsse"] {
                assert!(matches!(
                    etag_check(Some(etag), Some(sse), None),
                    EtagCheck::Skip(_)
                ));
            }
            assert!(matches!(
                etag_check(Some(etag), None, Some("AES256")),
                EtagCheck::Skip(_)
            ));
            assert!(matches!(
                etag_check(Some(etag), Some("AES256"), Some("AES256")),
                EtagCheck::Skip(_)
            ));
        }
        // Opaque or missing ETags: skipped.
        assert!(matches!(
            etag_check(Some("\"opaque\""), None, None),
            EtagCheck::Skip(_)
        ));
        assert!(matches!(etag_check(None, None, None), EtagCheck::Skip(_)));
        // An empty customer algorithm is no SSE-C.
        assert!(matches!(
            etag_check(Some(md5), None, Some("")),
            EtagCheck::Compare(_)
        ));
    }
}
