//! Decoded segment headers (chunk table and unwrapped data key), kept per copy so a read
//! after the first costs only the chunks it needs.

use std::num::NonZeroUsize;
use std::sync::Arc;

use krabka_remote_storage::RemoteLogSegmentId;
use lru::LruCache;
use parking_lot::Mutex;

use crate::crypto::DataKey;
use crate::format::Header;

/// A decoded, verified header and what reading needs from it.
#[derive(Debug)]
pub(crate) struct OpenSegment {
    pub header: Header,
    /// Stored offset of each chunk in the `.log` object, plus the object's end.
    pub offsets: Vec<u64>,
    pub key: Option<DataKey>,
}

/// A copy: the segment id and the digest of its header (a re-copy under the same id has
/// another digest, so it never meets a stale entry).
pub(crate) type CacheKey = (RemoteLogSegmentId, [u8; 16]);

/// At most `capacity` [`OpenSegment`]s, least recently used dropped first (bounded by count:
/// a header's size is about its chunk table's). Capacity 0 keeps nothing.
#[derive(Debug)]
pub(crate) struct SegmentCache {
    /// `None` when the capacity is 0.
    entries: Option<Mutex<LruCache<CacheKey, Arc<OpenSegment>>>>,
}

impl SegmentCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: NonZeroUsize::new(capacity).map(|cap| Mutex::new(LruCache::new(cap))),
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<OpenSegment>> {
        self.entries.as_ref()?.lock().get(key).map(Arc::clone)
    }

    pub fn insert(&self, key: CacheKey, value: Arc<OpenSegment>) {
        if let Some(entries) = &self.entries {
            entries.lock().put(key, value);
        }
    }

    /// Drops every copy of `segment` (on delete and re-copy).
    pub fn forget(&self, segment: &RemoteLogSegmentId) {
        if let Some(entries) = &self.entries {
            entries.lock().retain(|(id, _), _| id != segment);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.as_ref().map_or(0, |e| e.lock().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::FLAG_ZSTD;
    use krabka_remote_storage::{TopicIdPartition, Uuid};

    fn open() -> Arc<OpenSegment> {
        Arc::new(OpenSegment {
            header: Header {
                flags: FLAG_ZSTD,
                topic_id: Uuid::nil(),
                partition: 0,
                segment_uuid: Uuid::nil(),
                chunk_size: 1024,
                plaintext_size: 0,
                encryption: None,
                indexes: [None; 5],
                chunks: Vec::new(),
                tag: None,
            },
            offsets: vec![0],
            key: None,
        })
    }

    #[test]
    fn least_recently_used_goes_first() {
        let tp = TopicIdPartition::new(Uuid::new_v4(), "t", 0);
        let ids: Vec<_> = (0..3)
            .map(|_| RemoteLogSegmentId::generate(tp.clone()))
            .collect();
        let c = SegmentCache::new(2);
        c.insert((ids[0].clone(), [0; 16]), open());
        c.insert((ids[1].clone(), [0; 16]), open());
        assert!(c.get(&(ids[0].clone(), [0; 16])).is_some());
        c.insert((ids[2].clone(), [0; 16]), open());
        assert!(c.get(&(ids[1].clone(), [0; 16])).is_none());
        assert!(c.get(&(ids[0].clone(), [0; 16])).is_some());
        assert!(c.get(&(ids[0].clone(), [1; 16])).is_none());
        c.forget(&ids[0]);
        assert_eq!(c.len(), 1);
        let none = SegmentCache::new(0);
        none.insert((ids[0].clone(), [0; 16]), open());
        assert_eq!(none.len(), 0);
    }
}
