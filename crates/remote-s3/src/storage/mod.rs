//! [`S3RemoteStorage`]: the SPI on aws-sdk-s3.
//!
//! One file per concept: [`client`] builds the SDK client, [`copy`] uploads a segment's files
//! ([`put`] for single objects, [`multipart`] for large ones, [`verify`] checks what was
//! stored), [`get`] reads, [`delete`] removes, [`list`] is recovery's view of the bucket,
//! [`conditional`] the create-only writes of the ownership records.

mod attempt;
mod client;
mod conditional;
mod copy;
mod delete;
mod get;
mod join;
mod list;
mod multipart;
mod put;
mod verify;

use aws_sdk_s3::Client;
use bytes::Bytes;
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteStorageError, RemoteStorageManager, checked_range, layout, manifest,
};
use tokio::runtime::Handle;

use crate::bridge::Bridge;
use crate::config::S3Config;
use crate::errors::{Context, map_sdk};

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
    /// Whether the store enforces `If-None-Match: *` on PutObject, once probed
    /// ([`create_only_enforced`](Self::create_only_enforced)).
    create_only: tokio::sync::OnceCell<bool>,
}

impl std::fmt::Debug for S3RemoteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3RemoteStorage")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl S3RemoteStorage {
    /// Connects with a small runtime of its own ([`S3Config::runtime_threads`] workers, at most
    /// [`S3Config::runtime_blocking_threads`] blocking threads: [`S3Config::max_threads`] in
    /// all) and checks the bucket with HeadBucket.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] for a config below its minimums,
    /// [`RemoteStorageError::StoreUnavailable`] when the bucket does not exist or the endpoint
    /// does not answer, [`RemoteStorageError::AccessDenied`] when the credentials are refused.
    pub fn new(config: S3Config) -> Result<Self, RemoteStorageError> {
        config.validate()?;
        let bridge = Bridge::owned(config.runtime_threads, config.runtime_blocking_threads)?;
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
        let client = bridge.block_on("client setup", client::build_client(&config))??;
        let storage = Self {
            client,
            config,
            endpoint,
            bridge,
            create_only: tokio::sync::OnceCell::new(),
        };
        storage.check_bucket()?;
        Ok(storage)
    }

    /// The configuration in use.
    pub fn config(&self) -> &S3Config {
        &self.config
    }

    /// The SDK client, for tests that inspect or tamper with the bucket behind the backend's
    /// back. Test support only (feature `test-server`): the SDK's types are not part of this
    /// crate's API.
    #[cfg(feature = "test-server")]
    #[doc(hidden)]
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
}

/// The `.log` size recorded in custom metadata by a copy, if this metadata carries it.
fn recorded_size(metadata: &RemoteLogSegmentMetadata) -> Option<u64> {
    let value = metadata.custom_metadata()?.value();
    let rest = value.strip_prefix(CUSTOM_TAG.as_slice())?;
    let bytes: [u8; 8] = rest.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
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
            self.get(&key, Some(segment), Some(range)).await
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
            self.get(&key, Some(metadata.remote_log_segment_id()), None),
        )?
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let keys = layout::data_keys(metadata)?
            .iter()
            .map(|k| self.config.key(k))
            .collect();
        let prefix = self.segment_prefix(metadata)?;
        let manifest_key = self.config.key(&layout::manifest_key(metadata)?);
        self.bridge.block_on("delete", async {
            // First: the deleting manifest in place of whatever manifest is there, so a delete
            // cut short is never taken for a complete or an in-progress copy; the manifest
            // goes last.
            let deleting = Bytes::from(manifest::encode_deleting(metadata));
            self.put_bytes(&manifest_key, deleting).await?;
            self.delete_keys(keys).await?;
            // Multipart uploads of a copy whose abort failed (the store was down): the
            // tiering layer retries a copy under a fresh segment id, so only this delete
            // of the failed attempt's metadata ever looks under its keys again.
            self.abort_uploads_under(&prefix, None).await?;
            self.delete_keys(vec![manifest_key]).await?;
            Ok(())
        })?
    }
}
