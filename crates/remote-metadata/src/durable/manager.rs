//! The durable metadata manager: every event appended to a `krabka_storage::Log`, compacted
//! into a snapshot generation when dead events dominate. Opening it is in `open`, compaction in
//! `compact`, the generation layout in `generation`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use krabka_protocol::Message;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::metadata::event::MetadataEvent;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteStorageError,
};
use krabka_storage::Log;
use parking_lot::Mutex;

use super::error::{closed_error, storage_error};
use super::generation::gen_dir;
use crate::SharedMetadataState;
use crate::shared::reads_from_shared_state;

/// Options of a [`DurableRemoteLogMetadataManager`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DurableOptions {
    /// Compact automatically after an append once the current generation holds more than
    /// `2 × live segments + compact_min_events` events; `None` compacts only on
    /// [`DurableRemoteLogMetadataManager::compact`]. Default `Some(1024)`.
    pub compact_min_events: Option<u64>,
}

impl Default for DurableOptions {
    fn default() -> Self {
        Self {
            compact_min_events: Some(1024),
        }
    }
}

impl DurableOptions {
    /// Sets [`compact_min_events`](Self::compact_min_events).
    #[must_use]
    pub fn compact_min_events(mut self, min: Option<u64>) -> Self {
        self.compact_min_events = min;
        self
    }
}

/// A genuinely torn last event that [`DurableRemoteLogMetadataManager::open`] cut from the
/// current generation's log: the file ended inside its frame, as a write cut short by a crash
/// leaves it. Such an event was never acknowledged (its append had not returned `Ok`). The cut
/// bytes were saved into the log's quarantine directory, not deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornEventCut {
    /// The `.log` file that was cut.
    pub path: PathBuf,
    /// The byte position it was cut at (the start of the torn frame).
    pub position: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// Where the cut bytes were saved, when the log reported it.
    pub saved_to: Option<PathBuf>,
    /// What was wrong with the frame.
    pub reason: String,
}

/// The writer side: the current generation's log and its bookkeeping, under one lock.
#[derive(Debug)]
pub(super) struct Writer {
    /// `None` only once the manager is closed ([`DurableRemoteLogMetadataManager::close`]).
    pub(super) log: Option<Log>,
    pub(super) generation: u64,
    /// Events (records) in the current generation's log.
    pub(super) events: u64,
    /// No automatic compaction before this many events (backs off after a failed one).
    pub(super) retry_at: u64,
}

/// A [`RemoteLogMetadataManager`] that appends every accepted event (an add or an update, in
/// the [`event`](krabka_remote_storage::metadata::event) encoding) to a `krabka_storage::Log`
/// synced on every append, and rebuilds its state by replaying that log on open.
///
/// Durability: an add or update that returned `Ok` survives a process crash and a power loss.
/// One that returned an error may or may not have been persisted (the write may have reached
/// the disk before its fsync failed): after a failed append the manager refuses further writes
/// (reads still work) and must be reopened, which shows what really is on disk.
///
/// # The metadata store never guesses
/// Events are validated before they are appended, so a replay only ever meets valid events.
/// Open reads the log strictly: the only damage it repairs is a genuinely torn last event (the
/// file ends inside its frame: an append cut short by a crash, never acknowledged), which it
/// cuts, saving the bytes aside, and reports in [`torn_event_cut`](Self::torn_event_cut).
/// A manager that was closed ([`close`](Self::close), or dropped) recorded its log's end as
/// the log's recovery point, so its last event is never taken for a torn one: losing it later
/// is damage, refused like any other.
/// Anything else fails the open with a typed [`MetadataError`](crate::MetadataError) naming the
/// file (inside [`RemoteStorageError::Backend`]; found with
/// [`MetadataError::find`](crate::MetadataError::find)), and changes nothing:
/// - a bad frame, an event that does not decode or does not apply, a missing or wrong
///   generation record: [`Log`](crate::MetadataError::Log) (file, byte or seq);
/// - a missing `CURRENT` while generations exist, an unparsable one, or one naming a missing
///   generation: [`Pointer`](crate::MetadataError::Pointer);
/// - a generation directory it cannot account for:
///   [`Generation`](crate::MetadataError::Generation).
///
/// # Compaction
/// The log lives in a generation directory `gen-<20-digit n>` named by the pointer file
/// `CURRENT`; its first record is a generation record naming `n`, so a log that lost its start
/// (emptied, replaced, truncated to nothing) is told from a new one. [`compact`](Self::compact)
/// (run automatically when dead events dominate, see [`DurableOptions`]) writes the generation
/// record and a snapshot of the live segments to generation `n + 1` and syncs it, renames a new
/// pointer over `CURRENT` and fsyncs the directory, then closes and removes generation `n`.
/// A crash at any point leaves `CURRENT` naming a complete generation. Open finishes a switch
/// whose pointer was written (`CURRENT.tmp` names generation `n + 1`, which holds exactly what
/// a compaction writes: the pointer is written only once the generation is complete and
/// synced), and removes only what the manager itself left: generations older than the current
/// one (superseded by a completed switch), an unrenamed `CURRENT.tmp`, and generation `n + 1`
/// when `CURRENT` never named it and every event it holds is a snapshot of a segment the
/// current generation knows, or of a recovery's install (its install record says so; the
/// install was never committed and a rerun of the recovery makes it again), so removing it
/// loses nothing. So disk use, memory and replay time are bounded by the live segments.
///
/// Dropped ids (`DeleteSegmentFinished`) are remembered, to reject their re-adding, only
/// until the next compaction: after it an add may reuse one. Ids are fresh random UUIDs per
/// copy attempt, so that only lets a caller bug go undetected.
///
/// A directory written before generations existed (the log directly in it, no `CURRENT`) is
/// read as generation 0 and moved into `gen-…1` by the first compaction.
///
/// ```
/// use krabka_remote_storage::*;
/// use krabka_remote_metadata::*;
///
/// let dir = tempfile::tempdir()?;
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 9).build()?;
/// {
///     let rlmm = DurableRemoteLogMetadataManager::open(dir.path())?;
///     rlmm.add_remote_log_segment_metadata(&m)?;
///     rlmm.compact()?;
/// }
/// let reopened = DurableRemoteLogMetadataManager::open(dir.path())?;
/// assert_eq!(reopened.list_remote_log_segments(&tp)?, vec![m]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DurableRemoteLogMetadataManager {
    pub(super) dir: PathBuf,
    pub(super) opts: DurableOptions,
    /// Serializes writers: validate, append, commit (and compactions) happen as one step.
    pub(super) writer: Mutex<Writer>,
    pub(super) state: SharedMetadataState,
    pub(super) poisoned: AtomicBool,
    /// The failure that set `poisoned` (the first one), named by every later refusal.
    pub(super) poison_cause: std::sync::OnceLock<String>,
    /// The torn last event open cut, if any.
    pub(super) torn_event_cut: Option<TornEventCut>,
    /// The locked `rlmm.lock`; released when the manager is dropped.
    pub(super) _lock: File,
}

impl DurableRemoteLogMetadataManager {
    /// The torn last event open cut from the current generation's log, if it found one (see
    /// the type's docs); `None` when the log was intact.
    pub fn torn_event_cut(&self) -> Option<&TornEventCut> {
        self.torn_event_cut.as_ref()
    }

    /// The directory of the metadata (holding `CURRENT` and the generation directories).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current generation (0 for a directory in the pre-generation layout).
    pub fn generation(&self) -> u64 {
        self.writer.lock().generation
    }

    /// The directory of the current generation's log.
    pub fn generation_dir(&self) -> PathBuf {
        gen_dir(&self.dir, self.generation())
    }

    /// Events (snapshot records, adds and updates) in the current generation's log: what an
    /// open would replay.
    pub fn events_in_generation(&self) -> u64 {
        self.writer.lock().events
    }

    /// How many dropped ids are remembered (those dropped since the last compaction).
    pub fn dropped_ids_remembered(&self) -> usize {
        self.state.read().dropped_len()
    }

    /// Whether an earlier append failed, so writes are refused until the manager is reopened.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Refuses every later write until a reopen, after the failure `cause` (the first cause is
    /// kept and named by each refusal: a full disk's "No space left on device").
    pub(super) fn poison(&self, cause: &dyn std::fmt::Display) {
        let _ = self.poison_cause.set(cause.to_string());
        self.poisoned.store(true, Ordering::SeqCst);
    }

    /// Compacts when dead events dominate; a failure is retried after more events.
    fn maybe_compact(&self, w: &mut Writer) {
        let Some(min) = self.opts.compact_min_events else {
            return;
        };
        let live = u64::try_from(self.state.read().len()).unwrap_or(u64::MAX);
        let threshold = live.saturating_mul(2).saturating_add(min);
        if w.events > threshold
            && w.events >= w.retry_at
            && !self.is_poisoned()
            && self.compact_locked(w, None).is_err()
        {
            w.retry_at = w.events.saturating_add(min.max(1));
        }
    }

    /// Appends a validated event, makes `next` current, and compacts if it is due.
    fn persist(
        &self,
        w: &mut Writer,
        event: &MetadataEvent,
        next: RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let message = Message::new(event.encode()).with_timestamp(next.event_timestamp_ms());
        let Some(log) = w.log.as_ref() else {
            return Err(closed_error(&self.dir));
        };
        if let Err(e) = log.append(&message) {
            let e = storage_error(&gen_dir(&self.dir, w.generation), "append", e);
            self.poison(&e);
            return Err(e);
        }
        self.state.write().commit(next);
        w.events = w.events.saturating_add(1);
        self.maybe_compact(w);
        Ok(())
    }

    /// Closes the manager: the current generation's log is synced and closed
    /// (`krabka_storage::Log::close`), which records its end as the log's recovery point, so a
    /// later loss of its last, acknowledged event is reported by the next open as damage
    /// instead of being cut as a torn write. Dropping the manager does the same, best effort
    /// (ignoring a failure); `close` reports it.
    ///
    /// # Errors
    /// [`RemoteStorageError::Io`] (and the other storage errors) when the final sync or the
    /// recovery point write fails: the log is closed either way, and the next open reads what
    /// is on disk.
    pub fn close(self) -> Result<(), RemoteStorageError> {
        self.close_log()
    }

    /// Takes the current generation's log out of the writer and closes it (once).
    fn close_log(&self) -> Result<(), RemoteStorageError> {
        let mut w = self.writer.lock();
        let generation = w.generation;
        match w.log.take() {
            Some(log) => log
                .close()
                .map_err(|e| storage_error(&gen_dir(&self.dir, generation), "close", e)),
            None => Ok(()),
        }
    }

    pub(super) fn check_writable(&self) -> Result<(), RemoteStorageError> {
        if self.is_poisoned() {
            return Err(RemoteStorageError::Backend {
                operation: "metadata append".to_owned(),
                location: self.dir.display().to_string(),
                message: format!(
                    "an earlier append or compaction failed ({}); reopen the metadata manager",
                    self.poison_cause
                        .get()
                        .map_or("cause not recorded", String::as_str)
                ),
                source: None,
            });
        }
        Ok(())
    }
}

impl Drop for DurableRemoteLogMetadataManager {
    /// Closes the current generation's log as [`close`](Self::close) does, ignoring a
    /// failure (the log is closed either way; the lock file is released afterwards).
    fn drop(&mut self) {
        let _ = self.close_log();
    }
}

impl RemoteLogMetadataManager for DurableRemoteLogMetadataManager {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        self.state.read().check_add(metadata)?;
        self.persist(
            &mut w,
            &MetadataEvent::Add(metadata.clone()),
            metadata.clone(),
        )
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        let next = self.state.read().check_update(update)?;
        self.persist(&mut w, &MetadataEvent::Update(update.clone()), next.clone())?;
        Ok(next)
    }

    reads_from_shared_state!(state);
}
