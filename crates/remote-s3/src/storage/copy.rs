//! The copy of a segment: the in-progress manifest first (create-only where the store enforces
//! it: then no earlier attempt's leftovers are looked for), its files uploaded concurrently
//! (bounded), the complete manifest last.

use std::sync::Arc;

use bytes::Bytes;
use krabka_remote_storage::{
    CustomMetadata, IndexSource, IndexType, LogSegmentData, RemoteLogSegmentMetadata,
    RemoteStorageError, layout, manifest,
};
use tokio::sync::Semaphore;

use super::attempt::Earlier;
use super::join::{Task, join_all};
use super::put::acquire;
use super::{CUSTOM_TAG, S3RemoteStorage};

impl S3RemoteStorage {
    /// Writes the in-progress manifest of `metadata` under `manifest_key` (the full key);
    /// says whether an earlier attempt may have left objects under the id.
    ///
    /// On a store that enforces create-only writes ([`create_only_enforced`]) the manifest
    /// goes up create-only first: created, no attempt came before (an attempt writes it before
    /// its first object, a delete removes it last), so the copy skips the cleanup of one
    /// (the ListMultipartUploads of its stale uploads, the DeleteObjects of the optional
    /// indexes it does not have). Refused (HTTP 412, or 409 for a racing write), the manifest
    /// is overwritten and the copy cleans up as every copy did before; so it does on any other
    /// store.
    ///
    /// [`create_only_enforced`]: Self::create_only_enforced
    async fn begin_attempt(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        manifest_key: &str,
    ) -> Result<Earlier, RemoteStorageError> {
        let manifest = Bytes::from(manifest::encode_in_progress(metadata));
        if self.create_only_enforced(metadata).await
            && self.put_if_absent(manifest_key, manifest.clone()).await?
        {
            return Ok(Earlier::None);
        }
        self.put_bytes(manifest_key, manifest).await?;
        Ok(Earlier::Maybe)
    }

    /// Uploads the `.log` and every index at once (each request carrying data holds one of
    /// [`upload_concurrency`](crate::S3Config::upload_concurrency) slots), deletes the optional
    /// indexes this copy no longer has, and only when all of that is stored and verified
    /// writes the manifest that says the copy is complete.
    pub(super) async fn copy_async(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        // Before the first byte: the in-progress manifest (writer and start), so no cleanup
        // takes this copy's objects for an orphan while it may still finish.
        let manifest_key = self.config.key(&layout::manifest_key(metadata)?);
        let earlier = self.begin_attempt(metadata, &manifest_key).await?;
        let permits = Arc::new(Semaphore::new(self.config.upload_concurrency));
        let permits = &permits;
        let log_key = self.object_key(metadata, None)?;
        let mut size = 0u64;
        let mut absent = Vec::new();
        let mut tasks: Vec<Task<'_, Result<(), RemoteStorageError>>> = Vec::new();
        let size_slot = &mut size;
        tasks.push(Box::pin(async move {
            *size_slot = self
                .upload_file(&log_key, &data.log_segment, permits, earlier)
                .await?;
            Ok(())
        }));
        for t in IndexType::ALL {
            let key = self.object_key(metadata, Some(t))?;
            match data.index_source(t) {
                Some(IndexSource::File(path)) => tasks.push(Box::pin(async move {
                    self.upload_file(&key, path, permits, earlier)
                        .await
                        .map(drop)
                })),
                Some(IndexSource::Bytes(bytes)) => tasks.push(Box::pin(async move {
                    let _permit = acquire(permits).await?;
                    self.put_bytes(&key, bytes.clone()).await
                })),
                None => absent.push(key),
            }
        }
        // A copy under an id already present replaces it: drop optional indexes it no longer
        // has (other keys than the uploads, so at the same time). Without an earlier attempt
        // there are none.
        if earlier == Earlier::Maybe {
            tasks.push(Box::pin(self.delete_keys(absent)));
        }
        // The first error in file order, as a copy one file at a time would report.
        join_all(tasks)
            .await
            .into_iter()
            .collect::<Result<(), _>>()?;
        let mut custom = CUSTOM_TAG.to_vec();
        custom.extend_from_slice(&size.to_le_bytes());
        let custom = CustomMetadata::new(custom);
        // Last, once every object above is stored and verified: the manifest that says the
        // copy is complete, with the custom metadata the caller will record.
        let manifest = manifest::encode(&metadata.with_custom_metadata(Some(custom.clone())));
        self.put_bytes(&manifest_key, Bytes::from(manifest)).await?;
        Ok(Some(custom))
    }
}
