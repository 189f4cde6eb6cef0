//! Opening a durable metadata directory: the lock, the current generation (created for a new
//! directory), its replay, and the removal of what this manager superseded or never finished.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::MetadataError;
use crate::{MetadataState, SharedMetadataState};
use krabka_remote_storage::RemoteStorageError;
use parking_lot::Mutex;

use super::error::{io_err, storage_error};
use super::generation::{
    CURRENT, CURRENT_TMP, Listing, POINTER_RECORDED, Pointer, fsync_dir, gen_dir,
    generation_record, list_dir, pointer_error, read_current, read_pointer, remove_dir_if_exists,
    remove_file_if_exists, remove_legacy_files, switch_current, write_current_tmp,
};
use super::manager::{DurableOptions, DurableRemoteLogMetadataManager, Writer};
use super::replay::{
    check_unfinished_generation, is_complete_generation, is_unfinished_creation, open_log, replay,
};

/// The manager's own lock file, held while it is open: one manager per directory.
pub(super) const MANAGER_LOCK: &str = "rlmm.lock";

impl DurableRemoteLogMetadataManager {
    /// Opens (creating it if needed) the metadata in `dir` with [`DurableOptions::default`].
    ///
    /// # Errors
    /// As [`open_with`](Self::open_with).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, RemoteStorageError> {
        Self::open_with(dir, DurableOptions::default())
    }

    /// Opens (creating it if needed) the metadata in `dir`: takes the directory's lock, finds
    /// the current generation, replays it, and removes what an interrupted compaction of this
    /// manager left (see the type's docs).
    ///
    /// # Errors
    /// [`MetadataError::Pointer`], [`MetadataError::Generation`] and [`MetadataError::Log`]
    /// naming the damaged file, inside [`RemoteStorageError::Backend`] (nothing is changed or
    /// deleted then); [`RemoteStorageError::Backend`] when another manager has `dir` open;
    /// [`RemoteStorageError::Io`].
    pub fn open_with(
        dir: impl AsRef<Path>,
        opts: DurableOptions,
    ) -> Result<Self, RemoteStorageError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let lock = lock_manager(&dir)?;
        let mut listing = list_dir(&dir)?;
        if pending_switch(&dir, &listing)?.is_some() {
            switch_current(&dir)?;
            listing = list_dir(&dir)?;
        }
        // `fresh`: generation 1 of a new directory (or of a first open that crashed before
        // `CURRENT` existed), made current below.
        let (pointer, fresh) = find_current(&dir, &listing, read_current(&dir)?)?;
        let generation = pointer.generation;
        let unfinished = check_no_newer_generation(&listing, generation)?;
        let log_dir = gen_dir(&dir, generation);
        let (log, torn_event_cut) = open_log(&log_dir)?;
        if fresh {
            if log.last_seq() == 0 {
                log.append(&generation_record(generation))
                    .map_err(|e| storage_error(&log_dir, "append", e))?;
            }
            write_current_tmp(&dir, generation)?;
            switch_current(&dir)?;
        }
        let mut state = MetadataState::new();
        let events = replay(&log, generation, pointer.recorded, &mut state)?;
        let leftover = listing
            .generations
            .get(&unfinished)
            .filter(|_| !fresh)
            .map(|path| check_unfinished_generation(path, unfinished, &state).map(|()| path))
            .transpose()?;
        remove_superseded(&dir, &listing, generation, leftover)?;
        Ok(Self {
            dir,
            opts,
            writer: Mutex::new(Writer {
                log: Some(log),
                generation,
                events,
                retry_at: 0,
            }),
            state: SharedMetadataState::new(state),
            poisoned: AtomicBool::new(false),
            poison_cause: std::sync::OnceLock::new(),
            torn_event_cut,
            _lock: lock,
        })
    }
}

/// The pointer of a compaction (or a recovery's install) killed between writing the new
/// pointer and renaming it over `CURRENT`, when open finishes that switch: the pointer is
/// written only once its generation is complete and synced, so when `CURRENT.tmp` names the
/// generation after `CURRENT`'s and that generation holds exactly what a compaction writes,
/// the switch was decided (no guess). `None` leaves anything else to the checks after (an
/// unparseable `CURRENT.tmp` is removed by an open). Reads only: the owner's open renames,
/// the read-only one reads the generation it names instead.
pub(super) fn pending_switch(
    dir: &Path,
    listing: &Listing,
) -> Result<Option<Pointer>, RemoteStorageError> {
    if !listing.current_tmp {
        return Ok(None);
    }
    let Ok(Some(next)) = read_pointer(dir.join(CURRENT_TMP)) else {
        return Ok(None);
    };
    let Some(current) = read_current(dir)? else {
        return Ok(None);
    };
    let Some(path) = listing.generations.get(&next.generation) else {
        return Ok(None);
    };
    if current.generation.checked_add(1) != Some(next.generation)
        || !next.recorded
        || !is_complete_generation(path, next.generation)
    {
        return Ok(None);
    }
    Ok(Some(next))
}

/// Refuses a generation newer than `generation + 1` (only generation n + 1 can be an unfinished
/// compaction; a newer one is not the manager's); returns `generation + 1`.
pub(super) fn check_no_newer_generation(
    listing: &Listing,
    generation: u64,
) -> Result<u64, RemoteStorageError> {
    let unfinished = generation + 1;
    if let Some((_, path)) = listing
        .generations
        .range(unfinished.saturating_add(1)..)
        .next()
    {
        return Err(MetadataError::Generation {
            path: path.clone(),
            reason: format!(
                "CURRENT names generation {generation}, and a compaction only ever writes the next one"
            ),
        }
        .into());
    }
    Ok(unfinished)
}

/// Takes the directory's [`MANAGER_LOCK`].
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

/// The current generation: the one `current` (what `CURRENT` holds) names, generation 0 for
/// the pre-generation layout, or a fresh generation 1 (`true`) for a new directory; never a
/// guess.
pub(super) fn find_current(
    dir: &Path,
    listing: &Listing,
    current: Option<Pointer>,
) -> Result<(Pointer, bool), RemoteStorageError> {
    match current {
        Some(p) => {
            if !listing.generations.contains_key(&p.generation) {
                return Err(pointer_error(
                    dir.join(CURRENT),
                    format!(
                        "it names generation {}, but {} does not exist (generations present: [{}])",
                        p.generation,
                        gen_dir(dir, p.generation).display(),
                        listing.names()
                    ),
                ));
            }
            Ok((p, false))
        }
        None if listing.legacy => Ok((
            Pointer {
                generation: 0,
                recorded: false,
            },
            false,
        )),
        None if listing.generations.is_empty() || is_unfinished_creation(listing)? => Ok((
            Pointer {
                generation: 1,
                recorded: true,
            },
            true,
        )),
        None => Err(pointer_error(
            dir.join(CURRENT),
            format!(
                "it is missing, but the directory holds generations [{}]; refusing to guess which one is current (restore CURRENT as \"<n>{POINTER_RECORDED}\\n\")",
                listing.names()
            ),
        )),
    }
}

/// Everything is accounted for: removes what this manager superseded or never finished (older
/// generations, an unrenamed pointer, the checked `leftover`, pre-generation files once a
/// generation is current), syncing `dir` when anything went.
fn remove_superseded(
    dir: &Path,
    listing: &Listing,
    generation: u64,
    leftover: Option<&PathBuf>,
) -> Result<(), RemoteStorageError> {
    let mut removed = false;
    if listing.current_tmp {
        removed |= remove_file_if_exists(&dir.join(CURRENT_TMP))?;
    }
    for path in listing
        .generations
        .range(..generation)
        .map(|(_, p)| p)
        .chain(leftover)
    {
        removed |= remove_dir_if_exists(path)?;
    }
    if generation >= 1 && listing.legacy {
        removed |= remove_legacy_files(dir)?;
    }
    if removed {
        fsync_dir(dir)?;
    }
    Ok(())
}
