//! The [`OwnershipStore`] writes and reads: create-only writes for the ownership records
//! (PutObject with `If-None-Match: *`) and for a copy's in-progress manifest (where the store
//! enforces them, found out once), and the whole overwrite (PutObject) and conditional
//! read (GetObject with `If-None-Match: <etag>`) of the partition head.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageError, layout};
use md5::{Digest, Md5};

use super::S3RemoteStorage;
use super::verify::{Reported, hex};
use crate::errors::{HttpStatus, Kind, from_kind, kind_of, map_sdk, status_of};

/// HTTP 412 Precondition Failed: an object was under the key already.
const PRECONDITION_FAILED: u16 = 412;
/// HTTP 409 Conflict: a conflicting write (or delete) of the key raced this one.
const CONFLICT: u16 = 409;
/// HTTP 304 Not Modified: the object's ETag is still the one sent in `If-None-Match`.
const NOT_MODIFIED: u16 = 304;

/// Create-only writes: one PutObject with `If-None-Match: *` and a Content-MD5, verified from
/// the response's ETag (a HeadObject only when that ETag is not MD5-derived, as for every
/// other upload of this backend).
///
/// A refusal is `Ok(false)`: HTTP 412 (`PreconditionFailed`: the key exists) and HTTP 409
/// (`ConditionalRequestConflict`: a concurrent write or delete of the key won). After a 409
/// the key may even be absent (a delete won); the caller lists again either way.
///
/// The store must enforce the header: AWS S3 and Ceph RGW (16.2 and later) do, some
/// S3-compatible servers accept it and overwrite anyway.
/// [`probe`](krabka_remote_storage::ownership::probe) tells them apart.
///
/// A PutObject the SDK retried (its first attempt timed out or lost its connection after the
/// store had created the object) is refused with 412 on the retry: `Ok(false)` then covers the
/// caller's own record too, which it recognises by its contents (an epoch record's
/// incarnation id).
///
/// `put_object` is one PutObject with a Content-MD5, verified like every other upload.
/// `read_if_changed` is one GetObject, with `If-None-Match: <known>` when a version is known:
/// HTTP 304 is [`ConditionalRead::Unchanged`], 404 [`ConditionalRead::Absent`]; the version
/// is the ETag as the store returned it (an empty one when the store sent none, which is
/// never sent back as a condition).
impl OwnershipStore for S3RemoteStorage {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        let key = self.config.key(key);
        self.bridge.block_on(
            "PutObject",
            self.put_if_absent(&key, Bytes::copy_from_slice(bytes)),
        )?
    }

    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        let key = self.config.key(key);
        self.bridge.block_on(
            "PutObject",
            self.put_bytes(&key, Bytes::copy_from_slice(bytes)),
        )?
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        let key = self.config.key(key);
        self.bridge
            .block_on("GetObject", self.get_if_changed(&key, known, max_len))?
    }
}

impl S3RemoteStorage {
    /// Whether the store enforces `If-None-Match: *` on PutObject, found out once per backend
    /// (as [`probe`](krabka_remote_storage::ownership::probe) does: a fresh probe key below
    /// the partition directory of `metadata`, created twice and removed; three requests) and
    /// remembered. Until a probe answers, `false`: a failed probe is tried again by the next
    /// copy, which meanwhile takes the path that does not rely on it.
    pub(super) async fn create_only_enforced(&self, metadata: &RemoteLogSegmentMetadata) -> bool {
        let probed = self
            .create_only
            .get_or_try_init(|| self.probe_create_only(metadata))
            .await;
        match probed {
            Ok(enforced) => *enforced,
            Err(e) => {
                tracing::warn!(error = %e, "could not find out whether the store enforces create-only writes; assuming it does not for this copy");
                false
            }
        }
    }

    async fn probe_create_only(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<bool, RemoteStorageError> {
        let id = metadata.remote_log_segment_id();
        let dir = layout::partition_dir(id.topic_id_partition())?;
        let key = self
            .config
            .key(&format!("{dir}/{}{}", layout::PROBE_PREFIX, id.id()));
        if !self
            .put_if_absent(&key, Bytes::from_static(b"krabka probe 1"))
            .await?
        {
            tracing::warn!(
                key,
                "the store refused to create a fresh key; its create-only writes are not relied on"
            );
            return Ok(false);
        }
        let second = self
            .put_if_absent(&key, Bytes::from_static(b"krabka probe 2"))
            .await;
        let removed = self.delete_keys(vec![key.clone()]).await;
        let enforced = !second?;
        removed?;
        if !enforced {
            tracing::info!(
                key,
                "the store ignores If-None-Match on PutObject: every copy cleans up after earlier attempts"
            );
        }
        Ok(enforced)
    }

    /// PutObject of `data` under the full key `key` with `If-None-Match: *`; `Ok(false)` when
    /// the store refused it (412 or 409).
    pub(super) async fn put_if_absent(
        &self,
        key: &str,
        data: Bytes,
    ) -> Result<bool, RemoteStorageError> {
        let digest: [u8; 16] = Md5::digest(&data).into();
        let len = data.len() as u64;
        let sent = self
            .client
            .put_object()
            .bucket(&self.config.bucket)
            .key(key)
            .if_none_match("*")
            .content_length(i64::try_from(len).unwrap_or(i64::MAX))
            .content_md5(aws_smithy_types::base64::encode(digest))
            .body(ByteStream::from(data))
            .customize()
            // As every body of this backend: the signature covers the Content-MD5 header, the
            // store checks the body against it.
            .disable_payload_signing()
            .send()
            .await;
        let out = match sent {
            Ok(out) => out,
            Err(e) if is_refusal(&e) => {
                tracing::debug!(key, code = e.code(), "create-only PutObject refused");
                return Ok(false);
            }
            Err(e) => return Err(map_sdk(e, &self.cx("PutObject", key, None))),
        };
        let reported = Reported {
            etag: out.e_tag(),
            server_side_encryption: out.server_side_encryption().map(|s| s.as_str()),
            sse_customer_algorithm: out.sse_customer_algorithm(),
        };
        self.verify_upload(key, len, &hex(&digest), reported)
            .await?;
        Ok(true)
    }
}

impl S3RemoteStorage {
    /// One GetObject of the relative key `key`, its body read bounded (as
    /// [`get_if_changed`](Self::get_if_changed)): what `read_object_bounded` is.
    pub(super) fn read_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let full = self.config.key(key);
        match self
            .bridge
            .block_on("GetObject", self.get_if_changed(&full, None, max_len))??
        {
            ConditionalRead::Changed { bytes, .. } => Ok(bytes),
            // As `read_object` reports it: an I/O error of kind NotFound, what callers test for
            // "absent".
            ConditionalRead::Absent => Err(RemoteStorageError::io(
                self.location(&full),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "NoSuchKey: the object does not exist",
                ),
            )),
            // Asked without a condition, a "not modified" is no answer: never taken for absent.
            other => Err(RemoteStorageError::invalid_argument(format!(
                "GetObject of {} without a condition answered {other:?}",
                self.location(&full)
            ))),
        }
    }

    /// GetObject of the full key `key` unless its ETag is still `known`; the body read is
    /// bounded: its Content-Length is checked first, then at most `max_len + 1` bytes kept.
    async fn get_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        let mut req = self
            .client
            .get_object()
            .bucket(&self.config.bucket)
            .key(key);
        if let Some(etag) = known.filter(|v| !v.is_empty()) {
            req = req.if_none_match(etag);
        }
        let out = match req.send().await {
            Ok(out) => out,
            // The SDK reports a 304 as an error without a code: its status says it all.
            Err(e) if status_of(&e) == Some(NOT_MODIFIED) => {
                return Ok(ConditionalRead::Unchanged);
            }
            Err(e) if kind_of(&e) == Kind::NotFound => return Ok(ConditionalRead::Absent),
            Err(e) => return Err(map_sdk(e, &self.cx("GetObject", key, None))),
        };
        let too_large = |len: u64| RemoteStorageError::Corrupt {
            location: self.location(key),
            reason: format!("{len} bytes or more, over the {max_len}-byte limit"),
        };
        let limit = u64::try_from(max_len).unwrap_or(u64::MAX);
        let declared = out.content_length().and_then(|l| u64::try_from(l).ok());
        if let Some(len) = declared
            && len > limit
        {
            return Err(too_large(len));
        }
        let version = out.e_tag().unwrap_or_default().to_owned();
        let presize = usize::try_from(declared.unwrap_or(0)).unwrap_or(0);
        let mut bytes = Vec::with_capacity(presize);
        let mut body = out.body;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                from_kind(
                    Kind::Transient,
                    &self.cx("GetObject", key, None),
                    format!("reading the body failed: {e}"),
                    Some(Box::new(e)),
                )
            })?;
            // Never more than one byte past the limit: enough to know it is over.
            let room = max_len.saturating_add(1).saturating_sub(bytes.len());
            bytes.extend_from_slice(chunk.get(..room).unwrap_or(&chunk));
            if bytes.len() > max_len {
                return Err(too_large(bytes.len() as u64));
            }
        }
        Ok(ConditionalRead::Changed { bytes, version })
    }
}

/// Whether a failed PutObject is the store refusing the condition: HTTP 412 or 409, or (should
/// a response lack its status) the error codes S3 sends with them.
fn is_refusal<E, R>(err: &SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
    R: HttpStatus,
{
    matches!(err, SdkError::ServiceError(_) | SdkError::ResponseError(_))
        && refused(status_of(err), err.code())
}

/// [`is_refusal`] on the status and error code alone.
fn refused(status: Option<u16>, code: Option<&str>) -> bool {
    match status {
        Some(PRECONDITION_FAILED | CONFLICT) => true,
        Some(_) => false,
        None => matches!(
            code,
            Some("PreconditionFailed" | "ConditionalRequestConflict")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::refused;

    #[test]
    fn precondition_failed_and_conflict_are_refusals() {
        assert!(refused(Some(412), Some("PreconditionFailed")));
        assert!(refused(Some(409), Some("ConditionalRequestConflict")));
        assert!(refused(Some(412), None));
        assert!(refused(None, Some("PreconditionFailed")));
        assert!(!refused(Some(403), Some("AccessDenied")));
        assert!(!refused(Some(503), Some("SlowDown")));
        assert!(!refused(Some(400), Some("BadDigest")));
        assert!(!refused(None, None));
    }
}
