//! Deletes: DeleteObjects of a segment's keys.

use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use krabka_remote_storage::RemoteStorageError;

use super::S3RemoteStorage;
use crate::errors::{Kind, from_kind, map_sdk};

impl S3RemoteStorage {
    /// One DeleteObjects (quiet) of `keys`; an absent key is no error.
    pub(super) async fn delete_keys(&self, keys: Vec<String>) -> Result<(), RemoteStorageError> {
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
