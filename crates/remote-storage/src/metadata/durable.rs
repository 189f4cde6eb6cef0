//! The durable metadata manager: every event appended to a `krabka_storage::Log`, compacted
//! into a snapshot generation when dead events dominate.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
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

/// Records read per batch while replaying the log on open, and written per batch by a
/// compaction.
const REPLAY_BATCH: usize = 1024;
/// The generation pointer: the decimal number of the current generation and a newline.
const CURRENT: &str = "CURRENT";
/// Where the next pointer is written before it is renamed over [`CURRENT`].
const CURRENT_TMP: &str = "CURRENT.tmp";
/// Prefix of generation directories: `gen-<20-digit generation>`.
const GEN_PREFIX: &str = "gen-";
/// The manager's own lock file, held while it is open: one manager per directory.
const MANAGER_LOCK: &str = "rlmm.lock";

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

/// Where a simulated crash stops a compaction (tests only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Half the snapshot is in the new generation's log.
    PartialSnapshot,
    /// The new generation is complete and synced; the pointer still names the old one.
    GenerationWritten,
    /// The pointer names the new generation; the old one is still on disk.
    Switched,
}

/// The writer side: the current generation's log and its bookkeeping, under one lock.
#[derive(Debug)]
struct Writer {
    log: Log,
    generation: u64,
    /// Events (records) in the current generation's log.
    events: u64,
    /// No automatic compaction before this many events (backs off after a failed one).
    retry_at: u64,
}

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
/// # Compaction
/// The log lives in a generation directory `gen-<20-digit n>` named by the pointer file
/// `CURRENT`. [`compact`](Self::compact) (run automatically when dead events dominate, see
/// [`DurableOptions`]) writes a snapshot of the live segments to generation `n + 1` and syncs
/// it, renames a new pointer over `CURRENT` and fsyncs the directory, then closes and removes
/// generation `n`. A crash at any point leaves `CURRENT` naming a complete generation; open
/// removes any other. So disk use, memory and replay time are bounded by the live segments.
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
/// use krabka_remote_storage::metadata::*;
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
    dir: PathBuf,
    opts: DurableOptions,
    /// Serializes writers: validate, append, commit (and compactions) happen as one step.
    writer: Mutex<Writer>,
    state: RwLock<MetadataState>,
    poisoned: AtomicBool,
    /// The locked [`MANAGER_LOCK`]; released when the manager is dropped.
    _lock: File,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RemoteStorageError + '_ {
    move |e| RemoteStorageError::io(path.display(), e)
}

fn log_options() -> Options {
    Options {
        sync: SyncPolicy::EveryAppend,
        ..Options::default()
    }
}

/// The directory of generation `n` (generation 0 is `dir` itself: the pre-generation layout).
fn gen_dir(dir: &Path, n: u64) -> PathBuf {
    if n == 0 {
        dir.to_path_buf()
    } else {
        dir.join(format!("{GEN_PREFIX}{n:020}"))
    }
}

fn fsync_dir(dir: &Path) -> Result<(), RemoteStorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Whether `name` is a `krabka_storage` segment file (`<20 digits>.log|.index|.timeindex`).
fn is_segment_file(name: &str) -> bool {
    name.split_once('.').is_some_and(|(digits, suffix)| {
        digits.len() == 20
            && digits.bytes().all(|b| b.is_ascii_digit())
            && matches!(suffix, "log" | "index" | "timeindex")
    })
}

fn entry_names(dir: &Path) -> Result<Vec<String>, RemoteStorageError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

fn remove_file_if_exists(path: &Path) -> Result<bool, RemoteStorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

fn remove_dir_if_exists(path: &Path) -> Result<bool, RemoteStorageError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

/// Removes the pre-generation log files from `dir` (generation 0 after it was superseded).
fn remove_legacy_files(dir: &Path) -> Result<bool, RemoteStorageError> {
    let mut removed = false;
    for name in entry_names(dir)? {
        if is_segment_file(&name) {
            removed |= remove_file_if_exists(&dir.join(name))?;
        }
    }
    Ok(removed)
}

/// Reads the generation `CURRENT` names; `None` when there is no pointer.
fn read_current(dir: &Path) -> Result<Option<u64>, RemoteStorageError> {
    let path = dir.join(CURRENT);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RemoteStorageError::io(path.display(), e)),
    };
    match text.strip_suffix('\n').and_then(|n| n.parse::<u64>().ok()) {
        Some(n) if n >= 1 && gen_dir(dir, n).is_dir() => Ok(Some(n)),
        _ => Err(RemoteStorageError::Corrupt {
            location: path.display().to_string(),
            reason: format!(
                "expected a generation number >= 1 naming an existing {GEN_PREFIX}<n> directory, found {text:?}"
            ),
        }),
    }
}

/// Writes and syncs the pointer to generation `n` under [`CURRENT_TMP`] (not yet current).
fn write_current_tmp(dir: &Path, n: u64) -> Result<(), RemoteStorageError> {
    let tmp = dir.join(CURRENT_TMP);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(format!("{n}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err(&tmp))
}

/// Makes the written pointer current: rename over [`CURRENT`], fsync the directory.
fn switch_current(dir: &Path) -> Result<(), RemoteStorageError> {
    let current = dir.join(CURRENT);
    fs::rename(dir.join(CURRENT_TMP), &current).map_err(io_err(&current))?;
    fsync_dir(dir)
}

/// Removes whatever a crash may have left besides generation `current`: other generation
/// directories, an unrenamed pointer, and (once a generation ≥ 1 is current) the
/// pre-generation log files. Fsyncs `dir` when something was removed.
fn remove_leftovers(dir: &Path, current: Option<u64>) -> Result<(), RemoteStorageError> {
    let keep = current.map(|n| gen_dir(dir, n));
    let mut removed = remove_file_if_exists(&dir.join(CURRENT_TMP))?;
    for name in entry_names(dir)? {
        let path = dir.join(&name);
        if name.starts_with(GEN_PREFIX) && Some(&path) != keep.as_ref() && path.is_dir() {
            removed |= remove_dir_if_exists(&path)?;
        }
    }
    if current.is_some_and(|n| n >= 1) {
        removed |= remove_legacy_files(dir)?;
    }
    if removed {
        fsync_dir(dir)?;
    }
    Ok(())
}

fn lock_manager(dir: &Path) -> Result<File, RemoteStorageError> {
    let path = dir.join(MANAGER_LOCK);
    match krabka_storage::create_and_lock(&path) {
        Ok(file) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(RemoteStorageError::Backend {
            operation: "metadata open".to_owned(),
            location: dir.display().to_string(),
            message: "another metadata manager has this directory open".to_owned(),
            source: None,
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

/// Replays a generation's log into `state`; returns the number of records.
fn replay(log: &Log, dir: &Path, state: &mut MetadataState) -> Result<u64, RemoteStorageError> {
    let last = log.last_seq();
    let mut from = log.first_seq().max(1);
    let mut events = 0u64;
    let mut in_snapshot = true;
    while from <= last {
        let records = log
            .read(from, REPLAY_BATCH)
            .map_err(|e| storage_error(dir, "replay", e))?;
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
                MetadataEvent::Snapshot(_) if !in_snapshot => {
                    Err(RemoteStorageError::invalid_argument(
                        "a snapshot record after an add or update",
                    ))
                }
                MetadataEvent::Snapshot(m) => state.restore(m),
                MetadataEvent::Add(m) => state.add(m),
                MetadataEvent::Update(u) => state.update(u).map(drop),
            };
            in_snapshot &= matches!(event, MetadataEvent::Snapshot(_));
            applied.map_err(|e| RemoteStorageError::Corrupt {
                location: at(),
                reason: format!(
                    "event for segment {} does not apply on replay: {e}",
                    event.segment_id()
                ),
            })?;
            events += 1;
            from = record.seq + 1;
        }
    }
    Ok(events)
}

impl DurableRemoteLogMetadataManager {
    /// Opens (creating it if needed) the metadata in `dir` with [`DurableOptions::default`].
    ///
    /// # Errors
    /// As [`open_with`](Self::open_with).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, RemoteStorageError> {
        Self::open_with(dir, DurableOptions::default())
    }

    /// Opens (creating it if needed) the metadata in `dir`: takes the directory's lock, removes
    /// what an interrupted compaction left, and replays the current generation.
    ///
    /// # Errors
    /// [`RemoteStorageError::Corrupt`] naming the seq of an event that does not decode or does
    /// not apply, or a malformed `CURRENT`; [`RemoteStorageError::Backend`] when another
    /// manager has `dir` open or the log cannot be opened; [`RemoteStorageError::Io`].
    pub fn open_with(
        dir: impl AsRef<Path>,
        opts: DurableOptions,
    ) -> Result<Self, RemoteStorageError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let lock = lock_manager(&dir)?;
        let generation = match read_current(&dir)? {
            Some(n) => n,
            None if entry_names(&dir)?.iter().any(|n| is_segment_file(n)) => 0,
            None => {
                // A new directory (or one whose first open crashed before `CURRENT`).
                remove_leftovers(&dir, None)?;
                drop(
                    Log::open(gen_dir(&dir, 1), log_options())
                        .map_err(|e| storage_error(&dir, "open", e))?,
                );
                write_current_tmp(&dir, 1)?;
                switch_current(&dir)?;
                1
            }
        };
        remove_leftovers(&dir, Some(generation))?;
        let log_dir = gen_dir(&dir, generation);
        let log =
            Log::open(&log_dir, log_options()).map_err(|e| storage_error(&log_dir, "open", e))?;
        let mut state = MetadataState::new();
        let events = replay(&log, &log_dir, &mut state)?;
        Ok(Self {
            dir,
            opts,
            writer: Mutex::new(Writer {
                log,
                generation,
                events,
                retry_at: 0,
            }),
            state: RwLock::new(state),
            poisoned: AtomicBool::new(false),
            _lock: lock,
        })
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

    /// Writes the live segments to a new generation and makes it current, removing the old
    /// one (see the type's docs). Also forgets the dropped ids.
    ///
    /// # Errors
    /// [`RemoteStorageError::Io`] / [`RemoteStorageError::Backend`]. A failure before the
    /// switch leaves the old generation current and the manager usable; one while switching
    /// (the pointer renamed but the directory not synced) poisons the manager, which must be
    /// reopened; one while removing the old generation leaves it for the next open to remove.
    pub fn compact(&self) -> Result<(), RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        self.compact_locked(&mut w, None)
    }

    fn compact_locked(
        &self,
        w: &mut Writer,
        crash: Option<Step>,
    ) -> Result<(), RemoteStorageError> {
        let simulated = |step: Step| RemoteStorageError::Backend {
            operation: "metadata compaction".to_owned(),
            location: self.dir.display().to_string(),
            message: format!("simulated crash at {step:?}"),
            source: None,
        };
        let snapshot = self.state.read().snapshot();
        let next = w.generation + 1;
        let next_dir = gen_dir(&self.dir, next);
        let written = (|| {
            remove_dir_if_exists(&next_dir)?;
            let log = Log::open(&next_dir, log_options())
                .map_err(|e| storage_error(&next_dir, "open", e))?;
            let messages: Vec<Message> = snapshot
                .iter()
                .map(|m| {
                    Message::new(MetadataEvent::Snapshot(m.clone()).encode())
                        .with_timestamp(m.event_timestamp_ms())
                })
                .collect();
            let upto = if crash == Some(Step::PartialSnapshot) {
                messages.len() / 2
            } else {
                messages.len()
            };
            for chunk in messages
                .get(..upto)
                .unwrap_or_default()
                .chunks(REPLAY_BATCH)
            {
                log.append_batch(chunk)
                    .map_err(|e| storage_error(&next_dir, "snapshot append", e))?;
            }
            if crash == Some(Step::PartialSnapshot) {
                return Err(simulated(Step::PartialSnapshot));
            }
            log.sync()
                .map_err(|e| storage_error(&next_dir, "snapshot sync", e))?;
            // The new generation's entry in `dir`.
            fsync_dir(&self.dir)?;
            if crash == Some(Step::GenerationWritten) {
                return Err(simulated(Step::GenerationWritten));
            }
            write_current_tmp(&self.dir, next)?;
            Ok(log)
        })();
        let new_log = match written {
            Ok(log) => log,
            Err(e) => {
                if crash.is_none() {
                    // The new log is closed (dropped) by now; the old generation stays current.
                    let _ = remove_file_if_exists(&self.dir.join(CURRENT_TMP));
                    let _ = remove_dir_if_exists(&next_dir);
                }
                return Err(e);
            }
        };
        if let Err(e) = switch_current(&self.dir) {
            // `CURRENT` may name either generation after a crash: only a reopen can tell.
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(e);
        }
        if crash == Some(Step::Switched) {
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(simulated(Step::Switched));
        }
        let old = std::mem::replace(&mut w.log, new_log);
        let old_generation = std::mem::replace(&mut w.generation, next);
        w.events = u64::try_from(snapshot.len()).unwrap_or(u64::MAX);
        w.retry_at = 0;
        self.state.write().forget_dropped();
        // The old generation is superseded: a failed final sync of it does not matter, but it
        // must be closed (its directory lock released) before its files go.
        let _ = old.close();
        let old_dir = gen_dir(&self.dir, old_generation);
        let removed = if old_generation == 0 {
            remove_legacy_files(&self.dir)
        } else {
            remove_dir_if_exists(&old_dir)
        };
        removed
            .and_then(|_| fsync_dir(&self.dir))
            .map_err(|e| RemoteStorageError::Backend {
                operation: "metadata compaction".to_owned(),
                location: old_dir.display().to_string(),
                message: format!(
                    "generation {next} is current, but generation {old_generation} could not be removed (the next open removes it): {e}"
                ),
                source: Some(Box::new(e)),
            })
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
        if let Err(e) = w.log.append(&message) {
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(storage_error(
                &gen_dir(&self.dir, w.generation),
                "append",
                e,
            ));
        }
        self.state.write().commit(next);
        w.events = w.events.saturating_add(1);
        self.maybe_compact(w);
        Ok(())
    }

    fn check_writable(&self) -> Result<(), RemoteStorageError> {
        if self.is_poisoned() {
            return Err(RemoteStorageError::Backend {
                operation: "metadata append".to_owned(),
                location: self.dir.display().to_string(),
                message: "an earlier append or compaction failed; reopen the metadata manager"
                    .to_owned(),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::model::RemoteLogSegmentState::{self, *};
    use uuid::Uuid;

    fn tp() -> TopicIdPartition {
        TopicIdPartition::new(Uuid::from_u128(9), "meta", 1)
    }

    fn to(
        m: &RemoteLogSegmentMetadata,
        s: RemoteLogSegmentState,
    ) -> RemoteLogSegmentMetadataUpdate {
        RemoteLogSegmentMetadataUpdate::to_state(m.remote_log_segment_id().clone(), s, 3)
    }

    /// Fills a manager with live segments in every live state and some dropped ones; returns
    /// the listing and a dropped segment.
    fn fill(
        rlmm: &DurableRemoteLogMetadataManager,
    ) -> (Vec<RemoteLogSegmentMetadata>, RemoteLogSegmentMetadata) {
        let mut dropped = None;
        for i in 0..12u64 {
            let m = RemoteLogSegmentMetadata::builder(
                RemoteLogSegmentId::generate(tp()),
                i * 10,
                i * 10 + 9,
            )
            .segment_size_in_bytes(5)
            .build()
            .unwrap();
            rlmm.add_remote_log_segment_metadata(&m).unwrap();
            let steps: &[RemoteLogSegmentState] = match i % 4 {
                0 => &[],
                1 => &[CopySegmentFinished],
                2 => &[CopySegmentFinished, DeleteSegmentStarted],
                _ => &[
                    CopySegmentFinished,
                    DeleteSegmentStarted,
                    DeleteSegmentFinished,
                ],
            };
            for s in steps {
                rlmm.update_remote_log_segment_metadata(&to(&m, *s))
                    .unwrap();
            }
            if i % 4 == 3 {
                dropped = Some(m);
            }
        }
        (
            rlmm.list_remote_log_segments(&tp()).unwrap(),
            dropped.unwrap(),
        )
    }

    fn generations(dir: &Path) -> Vec<String> {
        let mut g: Vec<_> = entry_names(dir)
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with(GEN_PREFIX))
            .collect();
        g.sort();
        g
    }

    fn manual() -> DurableOptions {
        DurableOptions::default().compact_min_events(None)
    }

    #[test]
    fn a_crash_at_any_compaction_step_leaves_one_complete_generation() {
        for step in [
            Step::PartialSnapshot,
            Step::GenerationWritten,
            Step::Switched,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let (expected, _) = {
                let rlmm =
                    DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
                let filled = fill(&rlmm);
                let mut w = rlmm.writer.lock();
                let err = rlmm.compact_locked(&mut w, Some(step)).unwrap_err();
                assert!(err.to_string().contains("simulated crash"), "{err}");
                filled
            };
            // The "crashed" process left two generation directories behind.
            assert_eq!(generations(dir.path()).len(), 2, "{step:?}");
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            assert_eq!(
                rlmm.list_remote_log_segments(&tp()).unwrap(),
                expected,
                "{step:?}"
            );
            let want_gen = if step == Step::Switched { 2 } else { 1 };
            assert_eq!(rlmm.generation(), want_gen, "{step:?}");
            assert_eq!(
                generations(dir.path()).len(),
                1,
                "open removes the other: {step:?}"
            );
            assert!(!dir.path().join(CURRENT_TMP).exists());
            // It keeps working, and compacts cleanly afterwards.
            let (more, _) = fill(&rlmm);
            rlmm.compact().unwrap();
            assert_eq!(rlmm.generation(), want_gen + 1);
            assert_eq!(generations(dir.path()).len(), 1);
            drop(rlmm);
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), more);
            assert_eq!(rlmm.events_in_generation(), more.len() as u64);
        }
    }

    #[test]
    fn compaction_keeps_every_live_state_and_forgets_dropped_ids() {
        let dir = tempfile::tempdir().unwrap();
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        let (expected, dropped) = fill(&rlmm);
        assert!(
            rlmm.add_remote_log_segment_metadata(&dropped).is_err(),
            "dropped id re-added before compaction"
        );
        assert_eq!(rlmm.dropped_ids_remembered(), 3);
        rlmm.compact().unwrap();
        assert_eq!(rlmm.dropped_ids_remembered(), 0);
        assert_eq!(rlmm.events_in_generation(), 9);
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
        drop(rlmm);
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
        assert_eq!(rlmm.events_in_generation(), 9);
        assert_eq!(rlmm.remote_log_size(&tp()).unwrap(), 5 * 3);
        // The documented trade-off: after a compaction a dropped id may be added again.
        rlmm.add_remote_log_segment_metadata(&dropped).unwrap();
    }

    #[test]
    fn a_pre_generation_directory_is_read_and_migrated_by_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), 0, 9)
            .build()
            .unwrap();
        {
            let log = Log::open(dir.path(), log_options()).unwrap();
            log.append(&Message::new(MetadataEvent::Add(m.clone()).encode()))
                .unwrap();
            log.append(&Message::new(
                MetadataEvent::Update(to(&m, CopySegmentFinished)).encode(),
            ))
            .unwrap();
        }
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.generation(), 0);
        let expected = rlmm.list_remote_log_segments(&tp()).unwrap();
        assert_eq!(expected.len(), 1);
        rlmm.compact().unwrap();
        assert_eq!(rlmm.generation(), 1);
        assert!(
            !entry_names(dir.path())
                .unwrap()
                .iter()
                .any(|n| is_segment_file(n))
        );
        drop(rlmm);
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
    }

    #[test]
    fn a_second_manager_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
        let err = DurableRemoteLogMetadataManager::open(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("another metadata manager"),
            "{err}"
        );
    }

    #[test]
    fn a_malformed_pointer_fails_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(DurableRemoteLogMetadataManager::open(dir.path()).unwrap());
        fs::write(dir.path().join(CURRENT), "7\n").unwrap();
        let err = DurableRemoteLogMetadataManager::open(dir.path()).unwrap_err();
        assert!(matches!(err, RemoteStorageError::Corrupt { .. }), "{err:?}");
    }
}
