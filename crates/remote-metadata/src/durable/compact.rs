//! Compaction: the live segments written as snapshot events to generation `n + 1`, the pointer
//! switched to it, generation `n` removed; and recovery's one-step install, which is a
//! compaction too.

use std::collections::HashSet;

use crate::MetadataState;
use krabka_protocol::Message;
use krabka_remote_storage::metadata::event::MetadataEvent;
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteLogSegmentState, RemoteStorageError};
use krabka_storage::{Log, RecoveryMode};

use super::error::storage_error;
use super::generation::{
    CURRENT_TMP, fsync_dir, gen_dir, generation_record, install_record, remove_dir_if_exists,
    remove_file_if_exists, remove_legacy_files, switch_current, write_current_tmp,
};
use super::manager::{DurableRemoteLogMetadataManager, Writer};
use super::replay::{REPLAY_BATCH, log_options};

/// Where a simulated crash stops a compaction (tests only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Half the snapshot is in the new generation's log.
    PartialSnapshot,
    /// The new generation is complete and synced; the pointer still names the old one.
    GenerationWritten,
    /// The new pointer is written (`CURRENT.tmp`), not yet renamed over `CURRENT`.
    PointerWritten,
    /// The pointer names the new generation; the old one is still on disk.
    Switched,
}

impl DurableRemoteLogMetadataManager {
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

    /// Records segments rebuilt from the remote tier ([`crate::recovery`]), all
    /// `CopySegmentFinished`, in one step: they are checked, then written with a compaction
    /// (a new generation holding every live segment, synced once) rather than as an add and an
    /// update each. Segments already recorded identically are skipped. Returns how many were
    /// new; none makes no write.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] for a segment not `CopySegmentFinished`, listed
    /// twice, recorded differently, or dropped since the last compaction; as
    /// [`compact`](Self::compact) otherwise. A failed write poisons the manager (reopen it:
    /// nothing was recorded).
    pub fn install_recovered(
        &self,
        segments: &[RemoteLogSegmentMetadata],
    ) -> Result<usize, RemoteStorageError> {
        self.install_recovered_with(segments, None)
    }

    /// [`install_recovered`](Self::install_recovered); `crash` stops its compaction at a step
    /// (tests).
    pub(super) fn install_recovered_with(
        &self,
        segments: &[RemoteLogSegmentMetadata],
        crash: Option<Step>,
    ) -> Result<usize, RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        let new = not_yet_recorded(&self.state.read(), segments)?;
        if new.is_empty() {
            return Ok(0);
        }
        let count = new.len();
        {
            let mut state = self.state.write();
            for m in new {
                state.commit(m);
            }
        }
        // On failure the state holds segments that are not on disk: the manager is poisoned
        // and must be reopened, which reads what the disk holds.
        if let Err(e) = self.compact_locked_as(&mut w, crash, true) {
            self.poison(&e);
            return Err(e);
        }
        Ok(count)
    }

    /// Compacts with the writer lock held; `crash` stops it at a step (tests).
    pub(super) fn compact_locked(
        &self,
        w: &mut Writer,
        crash: Option<Step>,
    ) -> Result<(), RemoteStorageError> {
        self.compact_locked_as(w, crash, false)
    }

    /// [`compact_locked`](Self::compact_locked); with `install`, the new generation carries an
    /// install record (its snapshot holds segments a recovery installs).
    fn compact_locked_as(
        &self,
        w: &mut Writer,
        crash: Option<Step>,
        install: bool,
    ) -> Result<(), RemoteStorageError> {
        let snapshot = self.state.read().snapshot();
        let next = w.generation + 1;
        let next_dir = gen_dir(&self.dir, next);
        let new_log = match self.write_generation(next, &snapshot, crash, install) {
            Ok(log) => log,
            Err(e) => {
                if crash.is_none() {
                    // The new log is closed (dropped) by now; the old generation stays current.
                    // Were a written pointer and its generation left, the next open would
                    // finish that switch and lose what this generation records from now on:
                    // the manager stops writing instead (a reopen reads what the disk holds).
                    let tmp_gone = remove_file_if_exists(&self.dir.join(CURRENT_TMP)).is_ok();
                    let gen_gone = remove_dir_if_exists(&next_dir).is_ok();
                    if !(tmp_gone && gen_gone) {
                        self.poison(&e);
                    }
                }
                return Err(e);
            }
        };
        if let Err(e) = switch_current(&self.dir) {
            // `CURRENT` may name either generation after a crash: only a reopen can tell. The
            // new generation is complete and synced: closed, its end is on record either way.
            self.poison(&e);
            let _ = new_log.close();
            return Err(e);
        }
        if crash == Some(Step::Switched) {
            let e = self.simulated(Step::Switched);
            self.poison(&e);
            return Err(e);
        }
        let old = w.log.replace(new_log);
        let old_generation = std::mem::replace(&mut w.generation, next);
        w.events = u64::try_from(snapshot.len()).unwrap_or(u64::MAX);
        w.retry_at = 0;
        self.state.write().forget_dropped();
        self.retire(old, old_generation, next)
    }

    /// Writes generation `next` (its generation record and `snapshot`), syncs it and its
    /// directory entry, and writes (not yet renames) the pointer to it.
    fn write_generation(
        &self,
        next: u64,
        snapshot: &[RemoteLogSegmentMetadata],
        crash: Option<Step>,
        install: bool,
    ) -> Result<Log, RemoteStorageError> {
        let next_dir = gen_dir(&self.dir, next);
        remove_dir_if_exists(&next_dir)?;
        let log = Log::open(&next_dir, log_options(RecoveryMode::Strict))
            .map_err(|e| storage_error(&next_dir, "open", e))?;
        log.append(&generation_record(next))
            .map_err(|e| storage_error(&next_dir, "generation record append", e))?;
        if install {
            log.append(&install_record(next))
                .map_err(|e| storage_error(&next_dir, "install record append", e))?;
        }
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
            return Err(self.simulated(Step::PartialSnapshot));
        }
        log.sync()
            .map_err(|e| storage_error(&next_dir, "snapshot sync", e))?;
        // The new generation's entry in `dir`.
        fsync_dir(&self.dir)?;
        if crash == Some(Step::GenerationWritten) {
            return Err(self.simulated(Step::GenerationWritten));
        }
        write_current_tmp(&self.dir, next)?;
        if crash == Some(Step::PointerWritten) {
            return Err(self.simulated(Step::PointerWritten));
        }
        Ok(log)
    }

    /// Closes and removes the superseded generation `old_generation` (`next` is current).
    fn retire(
        &self,
        old: Option<Log>,
        old_generation: u64,
        next: u64,
    ) -> Result<(), RemoteStorageError> {
        // The old generation is superseded: it is closed (synced, its recovery point written,
        // its directory lock released) before its files go. A failed close does not matter
        // then: `CURRENT` names the new generation, and the old one is removed.
        if let Some(old) = old {
            let _ = old.close();
        }
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

    /// The error of a simulated crash at `step`.
    fn simulated(&self, step: Step) -> RemoteStorageError {
        RemoteStorageError::Backend {
            operation: "metadata compaction".to_owned(),
            location: self.dir.display().to_string(),
            message: format!("simulated crash at {step:?}"),
            source: None,
        }
    }
}

/// The segments of `segments` (all `CopySegmentFinished`, each once) that `state` does not
/// record yet; one it records differently, or dropped, is an error.
fn not_yet_recorded(
    state: &MetadataState,
    segments: &[RemoteLogSegmentMetadata],
) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
    let mut new = Vec::new();
    let mut seen = HashSet::new();
    for m in segments {
        let id = m.remote_log_segment_id();
        if m.state() != RemoteLogSegmentState::CopySegmentFinished {
            return Err(RemoteStorageError::invalid_argument(format!(
                "recovered segment {id} is {:?}, not CopySegmentFinished",
                m.state()
            )));
        }
        if !seen.insert(id.clone()) {
            return Err(RemoteStorageError::invalid_argument(format!(
                "recovered segment {id} is listed twice"
            )));
        }
        match state.get(id) {
            Some(known) if known == m => continue,
            Some(_) => {
                return Err(RemoteStorageError::invalid_argument(format!(
                    "remote segment {id} is already recorded differently"
                )));
            }
            None if state.was_dropped(id) => {
                return Err(RemoteStorageError::invalid_argument(format!(
                    "remote segment {id} was deleted"
                )));
            }
            None => new.push(m.clone()),
        }
    }
    Ok(new)
}
