//! [`InMemoryRemoteStorage`]: a reference backend that keeps objects in a map.

use std::collections::BTreeMap;
use std::io::Read;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::error::RemoteStorageError;
use crate::layout;
use crate::manager::{RemoteStorageManager, checked_range};
use crate::model::{
    CustomMetadata, IndexSource, IndexType, LogSegmentData, RemoteLogSegmentMetadata,
};
use crate::ownership::{ConditionalRead, OwnershipStore};
use crate::recovery::{ListedObject, RemoteSegmentLister, object_too_large};

/// A [`RemoteStorageManager`] holding every object in memory under the keys of
/// [`layout`](crate::layout). Fast, for tests of the layers above; it passes the conformance
/// kit, which keeps the kit honest. It is also an [`OwnershipStore`] (create-only writes are
/// atomic under its lock; a version is an object's size and CRC-32) and a
/// [`RemoteSegmentLister`] (a missing object reads as an I/O error of kind `NotFound`, as the
/// other backends report it).
#[derive(Debug, Default)]
pub struct InMemoryRemoteStorage {
    objects: RwLock<BTreeMap<String, Bytes>>,
}

impl InMemoryRemoteStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key present, sorted (to check for orphans).
    pub fn keys(&self) -> Vec<String> {
        self.objects.read().keys().cloned().collect()
    }

    fn get(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        key: String,
        what: &str,
    ) -> Result<Bytes, RemoteStorageError> {
        self.objects
            .read()
            .get(&key)
            .cloned()
            .ok_or_else(|| RemoteStorageError::SegmentNotFound {
                segment: metadata.remote_log_segment_id().clone(),
                what: format!("{what} ({key})"),
            })
    }
}

fn read_file(path: &std::path::Path) -> Result<Bytes, RemoteStorageError> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut buf))
        .map_err(|e| RemoteStorageError::io(path.display(), e))?;
    Ok(Bytes::from(buf))
}

impl RemoteStorageManager for InMemoryRemoteStorage {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let mut staged = vec![(layout::log_key(metadata)?, read_file(&data.log_segment)?)];
        for t in IndexType::ALL {
            let key = layout::index_key(metadata, t)?;
            match data.index_source(t) {
                Some(IndexSource::File(p)) => staged.push((key, read_file(p)?)),
                Some(IndexSource::Bytes(b)) => staged.push((key, b.clone())),
                None => {}
            }
        }
        let mut objects = self.objects.write();
        for key in layout::all_keys(metadata)? {
            objects.remove(&key);
        }
        objects.extend(staged);
        Ok(None)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let data = self.get(metadata, layout::log_key(metadata)?, "log")?;
        let range = checked_range(data.len() as u64, start_position, end_position)
            .map_err(|e| e.for_segment(metadata.remote_log_segment_id()))?;
        // Both ends are within `data.len()`, a usize, after the check above.
        let (start, end) = (range.start as usize, range.end as usize);
        Ok(data.slice(start..end).to_vec())
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let key = layout::index_key(metadata, index_type)?;
        Ok(self.get(metadata, key, &index_type.to_string())?.to_vec())
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let mut objects = self.objects.write();
        for key in layout::all_keys(metadata)? {
            objects.remove(&key);
        }
        Ok(())
    }
}

impl RemoteSegmentLister for InMemoryRemoteStorage {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let prefix = format!("{partition_dir}/");
        // Collected first so `visit` may call back into the store.
        let listed: Vec<ListedObject> = self
            .objects
            .read()
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, b)| ListedObject {
                key: k.clone(),
                size: b.len() as u64,
            })
            .collect();
        listed.into_iter().try_for_each(visit)
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let mut dirs: Vec<String> = self
            .objects
            .read()
            .keys()
            .filter_map(|k| k.split_once('/').map(|(dir, _)| dir.to_owned()))
            .collect();
        dirs.dedup();
        dirs.into_iter().try_for_each(visit)
    }

    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        let found = self.objects.read().get(key).map(|b| b.to_vec());
        found.ok_or_else(|| RemoteStorageError::io(key, std::io::ErrorKind::NotFound.into()))
    }

    fn read_object_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let found = self.objects.read().get(key).cloned();
        match found {
            None => Err(RemoteStorageError::io(
                key,
                std::io::ErrorKind::NotFound.into(),
            )),
            Some(b) if b.len() > max_len => Err(object_too_large(key, b.len() as u64, max_len)),
            Some(b) => Ok(b.to_vec()),
        }
    }

    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        self.objects.write().remove(key);
        Ok(())
    }
}

impl OwnershipStore for InMemoryRemoteStorage {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        let mut objects = self.objects.write();
        if objects.contains_key(key) {
            return Ok(false);
        }
        objects.insert(key.to_owned(), Bytes::copy_from_slice(bytes));
        Ok(true)
    }

    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        self.objects
            .write()
            .insert(key.to_owned(), Bytes::copy_from_slice(bytes));
        Ok(())
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        let Some(bytes) = self.objects.read().get(key).cloned() else {
            return Ok(ConditionalRead::Absent);
        };
        let version = format!("{}:{:08x}", bytes.len(), crc32fast::hash(&bytes));
        if known == Some(version.as_str()) {
            return Ok(ConditionalRead::Unchanged);
        }
        if bytes.len() > max_len {
            return Err(object_too_large(key, bytes.len() as u64, max_len));
        }
        Ok(ConditionalRead::Changed {
            bytes: bytes.to_vec(),
            version,
        })
    }
}
