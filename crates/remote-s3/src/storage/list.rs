//! Recovery's view of the bucket: listing, whole-object reads and deletes by key.

use krabka_remote_storage::RemoteStorageError;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};

use super::S3RemoteStorage;
use crate::errors::map_sdk;

/// Recovery's view of the bucket: `ListObjectsV2` under `<prefix>/<partition dir>/`, one page
/// (up to 1,000 keys) at a time, GetObject and DeleteObjects. A missing object's
/// `read_object` is [`RemoteStorageError::Io`] of kind
/// [`NotFound`](std::io::ErrorKind::NotFound), which
/// [`ownership::read_record`](krabka_remote_storage::ownership::read_record) takes for absent.
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
        self.bridge
            .block_on("GetObject", self.get(&key, None, None))?
    }

    fn read_object_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.read_bounded(key, max_len)
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        let key = self.config.key(key);
        self.bridge
            .block_on("DeleteObjects", self.delete_keys(vec![key]))?
    }
}
