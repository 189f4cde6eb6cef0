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

/// A [`RemoteStorageManager`] holding every object in memory under the keys of
/// [`layout`](crate::layout). Fast, for tests of the layers above; it passes the conformance
/// kit, which keeps the kit honest.
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
