//! Reads: HeadObject, and GetObject (whole or ranged) into one buffer.

use std::ops::Range;

use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError};

use super::S3RemoteStorage;
use crate::errors::{Kind, from_kind, kind_of, map_sdk};

/// The most bytes reserved up front from a response's Content-Length alone (a ranged read
/// reserves exactly its range); a larger body grows the buffer as it arrives.
const MAX_PRESIZE: u64 = 256 << 20;

impl S3RemoteStorage {
    /// HeadObject of `key`; `segment` only names the segment in an error.
    pub(super) async fn head(
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

    /// The stored size of `key`.
    pub(super) async fn size_of(
        &self,
        key: &str,
        segment: &RemoteLogSegmentId,
    ) -> Result<u64, RemoteStorageError> {
        let head = self.head(key, Some(segment)).await?;
        Ok(u64::try_from(head.content_length().unwrap_or(0)).unwrap_or(0))
    }

    /// GetObject of `key`, of `range` only when given (then exactly that many bytes must
    /// arrive); `segment` names the segment in a not-found error
    /// ([`RemoteStorageError::SegmentNotFound`]). Without one a missing key is
    /// [`RemoteStorageError::Io`] of kind [`NotFound`](std::io::ErrorKind::NotFound).
    pub(super) async fn get(
        &self,
        key: &str,
        segment: Option<&RemoteLogSegmentId>,
        range: Option<Range<u64>>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let mut req = self
            .client
            .get_object()
            .bucket(&self.config.bucket)
            .key(key);
        if let Some(r) = &range {
            req = req.range(format!("bytes={}-{}", r.start, r.end - 1));
        }
        let out = match req.send().await {
            Ok(out) => out,
            // A read by key alone (recovery, ownership records): a missing object is an I/O
            // error of kind NotFound, what callers test for "absent" (a filesystem backend's
            // missing file is the same).
            Err(e) if segment.is_none() && kind_of(&e) == Kind::NotFound => {
                let message = DisplayErrorContext(&e).to_string();
                return Err(RemoteStorageError::io(
                    self.location(key),
                    std::io::Error::new(std::io::ErrorKind::NotFound, message),
                ));
            }
            Err(e) => return Err(map_sdk(e, &self.cx("GetObject", key, segment))),
        };
        let expected = range.as_ref().map(|r| r.end - r.start);
        let bytes = self.read_body(out, expected, key, segment).await?;
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

    /// Reads a response body chunk by chunk into one buffer sized up front (from the range
    /// asked for, else the Content-Length): one copy per network chunk, no per-byte work.
    async fn read_body(
        &self,
        out: GetObjectOutput,
        expected: Option<u64>,
        key: &str,
        segment: Option<&RemoteLogSegmentId>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let hint = expected.unwrap_or_else(|| {
            u64::try_from(out.content_length().unwrap_or(0))
                .unwrap_or(0)
                .min(MAX_PRESIZE)
        });
        let mut buf = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
        let mut body = out.body;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                from_kind(
                    Kind::Transient,
                    &self.cx("GetObject", key, segment),
                    format!("reading the body failed: {e}"),
                    Some(Box::new(e)),
                )
            })?;
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    }
}
