//! The durable metadata manager: every event appended to a `krabka_storage::Log`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};
use parking_lot::{Mutex, RwLock};

use super::event::MetadataEvent;
use super::{MetadataState, RemoteLogMetadataManager};
use crate::error::RemoteStorageError;
use crate::model::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, TopicIdPartition,
};

/// Records read per batch while replaying the log on open.
const REPLAY_BATCH: usize = 1024;

/// A [`RemoteLogMetadataManager`] that appends every accepted event (an add or an update, in
/// the [`event`](super::event) encoding) to a `krabka_storage::Log` synced on every append,
/// and rebuilds its state by replaying that log on open.
///
/// Durability: an add or update that returned `Ok` survives a process crash and a power loss.
/// One that returned an error may or may not have been persisted (the write may have reached
/// the disk before its fsync failed): after a failed append the manager refuses further writes
/// (reads still work) and must be reopened, which shows what really is on disk.
///
/// Events are validated before they are appended, so a replay only ever meets valid events;
/// a corrupt event, or one whose transition does not apply, makes [`open`](Self::open) fail
/// with [`RemoteStorageError::Corrupt`] naming the log and the seq — never silently skipped.
///
/// The log keeps every event (no compaction yet): its size grows with the number of segment
/// state changes ever made.
///
/// ```
/// use krabka_remote_storage::*;
/// use krabka_remote_storage::metadata::*;
///
/// let dir = tempfile::tempdir()?;
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 9).build()?;
/// {
///     let rlmm = DurableRemoteLogMetadataManager::open(dir.path())?;
///     rlmm.add_remote_log_segment_metadata(&m)?;
/// }
/// let reopened = DurableRemoteLogMetadataManager::open(dir.path())?;
/// assert_eq!(reopened.list_remote_log_segments(&tp)?, vec![m]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DurableRemoteLogMetadataManager {
    dir: PathBuf,
    log: Log,
    /// Serializes writers: validate, append, commit happen as one step.
    writer: Mutex<()>,
    state: RwLock<MetadataState>,
    poisoned: AtomicBool,
}

impl DurableRemoteLogMetadataManager {
    /// Opens (creating it if needed) the metadata log in `dir` and replays it.
    ///
    /// # Errors
    /// [`RemoteStorageError::Corrupt`] naming the seq of an event that does not decode or does
    /// not apply; [`RemoteStorageError::Io`] / [`RemoteStorageError::Backend`] when the log
    /// cannot be opened or read.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, RemoteStorageError> {
        let dir = dir.as_ref().to_path_buf();
        let log = Log::open(
            &dir,
            Options {
                sync: SyncPolicy::EveryAppend,
                ..Options::default()
            },
        )
        .map_err(|e| storage_error(&dir, "open", e))?;
        let mut state = MetadataState::new();
        let last = log.last_seq();
        let mut from = log.first_seq().max(1);
        while from <= last {
            let records = log
                .read(from, REPLAY_BATCH)
                .map_err(|e| storage_error(&dir, "replay", e))?;
            if records.is_empty() {
                return Err(RemoteStorageError::Corrupt {
                    location: format!("{} seq {from}", dir.display()),
                    reason: format!("the log claims records up to seq {last} but returns none"),
                });
            }
            for record in records {
                let at = || format!("{} seq {}", dir.display(), record.seq);
                let event = MetadataEvent::decode(&record.message.value).map_err(|e| {
                    RemoteStorageError::Corrupt {
                        location: at(),
                        reason: e.to_string(),
                    }
                })?;
                let applied = match &event {
                    MetadataEvent::Add(m) => state.add(m),
                    MetadataEvent::Update(u) => state.update(u).map(drop),
                };
                applied.map_err(|e| RemoteStorageError::Corrupt {
                    location: at(),
                    reason: format!(
                        "event for segment {} does not apply on replay: {e}",
                        event.segment_id()
                    ),
                })?;
                from = record.seq + 1;
            }
        }
        Ok(Self {
            dir,
            log,
            writer: Mutex::new(()),
            state: RwLock::new(state),
            poisoned: AtomicBool::new(false),
        })
    }

    /// The directory of the metadata log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether an earlier append failed, so writes are refused until the manager is reopened.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Appends a validated event and makes `next` current.
    fn persist(
        &self,
        event: &MetadataEvent,
        next: RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let message = Message::new(event.encode()).with_timestamp(next.event_timestamp_ms());
        if let Err(e) = self.log.append(&message) {
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(storage_error(&self.dir, "append", e));
        }
        self.state.write().commit(next);
        Ok(())
    }

    fn check_writable(&self) -> Result<(), RemoteStorageError> {
        if self.is_poisoned() {
            return Err(RemoteStorageError::Backend {
                operation: "metadata append".to_owned(),
                location: self.dir.display().to_string(),
                message: "an earlier append failed; reopen the metadata manager".to_owned(),
                source: None,
            });
        }
        Ok(())
    }
}

fn storage_error(dir: &Path, operation: &str, e: krabka_storage::Error) -> RemoteStorageError {
    match e {
        krabka_storage::Error::Io { path, source } => RemoteStorageError::Io {
            location: path.display().to_string(),
            source,
        },
        krabka_storage::Error::Corrupt {
            path,
            position,
            reason,
        } => RemoteStorageError::Corrupt {
            location: format!("{} at byte {position}", path.display()),
            reason,
        },
        other => RemoteStorageError::Backend {
            operation: format!("metadata log {operation}"),
            location: dir.display().to_string(),
            message: other.to_string(),
            source: Some(Box::new(other)),
        },
    }
}

impl RemoteLogMetadataManager for DurableRemoteLogMetadataManager {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let _writer = self.writer.lock();
        self.check_writable()?;
        self.state.read().check_add(metadata)?;
        self.persist(&MetadataEvent::Add(metadata.clone()), metadata.clone())
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let _writer = self.writer.lock();
        self.check_writable()?;
        let next = self.state.read().check_update(update)?;
        self.persist(&MetadataEvent::Update(update.clone()), next.clone())?;
        Ok(next)
    }

    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().find(tp, offset))
    }

    fn segment_for_offset_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.state.read().find_ready(tp, offset)
    }

    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().list(tp))
    }

    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        Ok(self.state.read().highest_offset(tp))
    }

    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        Ok(self.state.read().size(tp))
    }

    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().get(id).cloned())
    }
}
