//! Recovery's listing of the store ([`RemoteSegmentLister`]).

use std::fs;
use std::io;

use krabka_remote_storage::RemoteStorageError;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};

use crate::{FsRemoteStorage, ownership, sync_dir};

/// Recovery's view of the store: a partition directory's entries are read with one
/// `read_dir`, streamed entry by entry.
impl RemoteSegmentLister for FsRemoteStorage {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let dir = self.path(partition_dir);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(RemoteStorageError::io(dir.display(), e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| RemoteStorageError::io(dir.display(), e))?;
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                // Renamed or removed since the directory was read (a writer's temporary file
                // moved into place, a delete): gone, as from an S3 listing made a moment later.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(RemoteStorageError::io(entry.path().display(), e)),
            };
            if !meta.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            visit(ListedObject {
                key: format!("{partition_dir}/{name}"),
                size: meta.len(),
            })?;
        }
        Ok(())
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let entries =
            fs::read_dir(&self.root).map_err(|e| RemoteStorageError::io(self.root.display(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RemoteStorageError::io(self.root.display(), e))?;
            let is_dir = entry
                .file_type()
                .map_err(|e| RemoteStorageError::io(entry.path().display(), e))?
                .is_dir();
            if is_dir {
                visit(entry.file_name().to_string_lossy().into_owned())?;
            }
        }
        Ok(())
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        let path = self.path(key);
        fs::read(&path).map_err(|e| RemoteStorageError::io(path.display(), e))
    }

    fn read_object_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let path = self.path(key);
        ownership::read_bounded(&path, max_len)?.ok_or_else(|| {
            RemoteStorageError::io(path.display(), std::io::ErrorKind::NotFound.into())
        })
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        let path = self.path(key);
        if Self::remove(&path)?
            && let Some(dir) = path.parent()
        {
            sync_dir(dir)?;
        }
        Ok(())
    }
}
