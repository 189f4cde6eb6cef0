//! The read-only open of a durable metadata directory: what an owner's open would find, read
//! without changing a byte (no directory, lock file or generation created, no switch finished,
//! no torn event cut, nothing removed), answered by a manager that refuses every write.

use std::fs::{File, TryLockError};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteStorageError,
};
use krabka_storage::segment::{
    BATCH_HEADER_LEN, batch_len, is_old_format_file, parse_segment_file_name,
};
use krabka_storage::view::LogView;

use super::error::storage_error;
use super::generation::{Listing, entry_names, gen_dir, list_dir, read_current};
use super::manager::DurableRemoteLogMetadataManager;
use super::open::{MANAGER_LOCK, check_no_newer_generation, find_current, pending_switch};
use super::replay::{REPLAY_BATCH, Replay, check_unfinished_generation};
use crate::shared::reads_from_shared_state;
use crate::{MetadataError, MetadataState, SharedMetadataState};

/// How long a read-only open waits for a manager that holds the directory's lock to let go (a
/// lock released a moment ago can still be held by a child process being spawned).
const LOCK_WAIT: Duration = Duration::from_millis(500);

/// A torn last event a read-only open found at the end of the current generation's log and
/// left in place: the file ends inside its frame, as an append cut short by a crash leaves it
/// (never acknowledged), and the owner's next open cuts it
/// ([`TornEventCut`](crate::TornEventCut)). The view's segments are those before it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornEventFound {
    /// The `.log` file that ends in it.
    pub path: PathBuf,
    /// The byte position of the torn frame.
    pub position: u64,
    /// Bytes from there to the end of the file.
    pub bytes: u64,
    /// What is wrong with the frame.
    pub reason: String,
}

/// The durable metadata of a directory as
/// [`DurableRemoteLogMetadataManager::open_read_only`] read it: it answers the reads of
/// [`RemoteLogMetadataManager`] exactly as a manager opened on the directory then would, and
/// refuses every write ([`MetadataError::ReadOnly`]). What it holds is a snapshot: it never
/// looks at the directory again.
///
/// ```
/// use krabka_remote_metadata::*;
/// use krabka_remote_storage::*;
///
/// let dir = tempfile::tempdir()?;
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 9).build()?;
/// DurableRemoteLogMetadataManager::open(dir.path())?.add_remote_log_segment_metadata(&m)?;
/// let view = DurableRemoteLogMetadataManager::open_read_only(dir.path())?;
/// assert_eq!(view.list_remote_log_segments(&tp)?, vec![m.clone()]);
/// let refused = view.add_remote_log_segment_metadata(&m).unwrap_err();
/// assert!(matches!(MetadataError::find(&refused), Some(MetadataError::ReadOnly { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ReadOnlyRemoteLogMetadataManager {
    dir: PathBuf,
    generation: Option<u64>,
    events: u64,
    state: SharedMetadataState,
    torn_event: Option<TornEventFound>,
}

impl ReadOnlyRemoteLogMetadataManager {
    /// The metadata directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The generation read (the one an owner's open would make current: the one `CURRENT`
    /// names, or the one a pending switch names; 0 for the pre-generation layout); `None` when
    /// the directory holds none yet (it is missing, empty, or a first open never finished
    /// creating it), which reads as no segment.
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// Events (snapshot records, adds and updates) read from that generation's log.
    pub fn events_in_generation(&self) -> u64 {
        self.events
    }

    /// The torn last event found and left in place, if any (see [`TornEventFound`]).
    pub fn torn_event(&self) -> Option<&TornEventFound> {
        self.torn_event.as_ref()
    }

    fn refuse(&self, operation: &'static str, segment: String) -> RemoteStorageError {
        MetadataError::ReadOnly {
            path: self.dir.clone(),
            operation,
            segment,
        }
        .into()
    }
}

impl RemoteLogMetadataManager for ReadOnlyRemoteLogMetadataManager {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        Err(self.refuse("add", metadata.remote_log_segment_id().to_string()))
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        Err(self.refuse("update", update.remote_log_segment_id().to_string()))
    }

    reads_from_shared_state!(state);
}

impl DurableRemoteLogMetadataManager {
    /// Reads the metadata in `dir` as [`open`](Self::open) would find it, changing nothing on
    /// disk: no directory, lock file or generation is created, a pending switch is not
    /// finished but its generation read (as open would finish it), a torn last event is not
    /// cut but left out and reported ([`ReadOnlyRemoteLogMetadataManager::torn_event`]), and
    /// nothing open would remove is removed. The current generation's log is read through
    /// `krabka_storage::view::LogView`, which neither locks nor recovers it.
    ///
    /// A missing directory (or one no open finished creating) reads as no segment.
    ///
    /// Locking: when the directory's lock file (`rlmm.lock`) exists, a shared lock is taken on
    /// it while the files are read and released before this returns, so the read never meets
    /// a manager writing or compacting (a manager's open waits for it, then fails if it is
    /// still held; this fails while a manager is open). When the lock file does not exist no
    /// manager ever opened the directory with it, and creating it would be a write: nothing
    /// is locked.
    ///
    /// # Errors
    /// As [`open_with`](Self::open_with) for the same directory, each a
    /// [`MetadataError`] naming the file inside [`RemoteStorageError::Backend`] for damage
    /// (and [`MetadataError::Log`] for a torn last event open would refuse to cut: one a
    /// valid frame follows, or one below the log's recovery point); [`RemoteStorageError::Backend`]
    /// while a manager has `dir` open; [`RemoteStorageError::Io`].
    pub fn open_read_only(
        dir: impl AsRef<Path>,
    ) -> Result<ReadOnlyRemoteLogMetadataManager, RemoteStorageError> {
        let dir = dir.as_ref().to_path_buf();
        let empty = |dir: PathBuf| ReadOnlyRemoteLogMetadataManager {
            dir,
            generation: None,
            events: 0,
            state: SharedMetadataState::new(MetadataState::new()),
            torn_event: None,
        };
        match std::fs::metadata(&dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(empty(dir)),
            Err(e) => return Err(RemoteStorageError::io(dir.display(), e)),
            Ok(_) => {}
        }
        let _lock = lock_shared_if_present(&dir)?;
        let listing = list_dir(&dir)?;
        // A switch open would finish: its pointer is what `CURRENT` will hold, and the
        // unrenamed pointer is gone from the listing.
        let (current, listing) = match pending_switch(&dir, &listing)? {
            Some(next) => (
                Some(next),
                Listing {
                    current_tmp: false,
                    ..listing
                },
            ),
            None => (read_current(&dir)?, listing),
        };
        let (pointer, fresh) = find_current(&dir, &listing, current)?;
        let generation = pointer.generation;
        let unfinished = check_no_newer_generation(&listing, generation)?;
        if fresh {
            // Open would create generation 1 with no event in it.
            return Ok(empty(dir));
        }
        let view = LogView::new(gen_dir(&dir, generation));
        let mut state = MetadataState::new();
        let (events, torn_event) = replay_view(&view, generation, pointer.recorded, &mut state)?;
        if let Some(path) = listing.generations.get(&unfinished) {
            // Open removes it only after this check; a generation it cannot account for fails.
            check_unfinished_generation(path, unfinished, &state)?;
        }
        Ok(ReadOnlyRemoteLogMetadataManager {
            dir,
            generation: Some(generation),
            events,
            state: SharedMetadataState::new(state),
            torn_event,
        })
    }
}

/// A shared lock on the directory's [`MANAGER_LOCK`] when the file exists (opened read-only,
/// so nothing is created), waiting up to [`LOCK_WAIT`] for a manager to let go; `None` when
/// there is no lock file.
fn lock_shared_if_present(dir: &Path) -> Result<Option<File>, RemoteStorageError> {
    let path = dir.join(MANAGER_LOCK);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RemoteStorageError::io(path.display(), e)),
    };
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock_shared() {
            Ok(()) => return Ok(Some(file)),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(RemoteStorageError::Backend {
                    operation: "metadata open (read-only)".to_owned(),
                    location: dir.display().to_string(),
                    message: "a metadata manager has this directory open; read it once that manager is closed".to_owned(),
                    source: None,
                });
            }
            Err(TryLockError::Error(e)) => {
                return Err(RemoteStorageError::io(path.display(), e));
            }
        }
    }
}

/// Replays generation `n`'s log, read through `view`, into `state` as
/// [`replay`](super::replay::replay) replays an opened one; returns the number of events and
/// the torn last event left out. A torn last event is tolerated exactly when the owner's open
/// would cut it (it is the newest segment's, the file ends inside its frame, no valid frame
/// follows it and it is above the recovery point); other damage is an error naming the file.
fn replay_view(
    view: &LogView,
    n: u64,
    recorded: bool,
    state: &mut MetadataState,
) -> Result<(u64, Option<TornEventFound>), RemoteStorageError> {
    let dir = view.dir();
    let read_err = |e| storage_error(dir, "read", e);
    // Open refuses a directory named like a segment file (`.log` or an index) first.
    for name in entry_names(dir)? {
        let path = dir.join(&name);
        if parse_segment_file_name(&name).is_some() && path.is_dir() {
            return Err(MetadataError::Log {
                path,
                position: Some(0),
                seq: None,
                reason: "a directory is named like a segment file".to_owned(),
            }
            .into());
        }
    }
    let bases = view.segment_bases().map_err(read_err)?;
    for &base in &bases {
        let path = view.log_path(base);
        // Open refuses a log in the old format (a read-only reader could read it).
        if is_old_format_file(&path, Some(base)).map_err(read_err)? {
            return Err(storage_error(
                dir,
                "open",
                krabka_storage::Error::OldFormat { path },
            ));
        }
    }
    let mut files: Vec<_> = bases.iter().map(|&b| (b, view.log_path(b))).collect();
    if files.is_empty() {
        // Damage is named by the file the first event belongs in (open creates it empty).
        files.push((1, view.log_path(1)));
    }
    let mut replay = Replay::new(dir, files, n, recorded);
    let first = bases.first().copied().unwrap_or(1).max(1);
    let newest = bases.last().copied().unwrap_or(1);
    let mut reader = view.reader(first);
    if recorded && first != 1 {
        let mut last = first - 1;
        loop {
            let records = reader.poll(REPLAY_BATCH).map_err(read_err)?;
            let Some(r) = records.last() else { break };
            last = r.seq;
        }
        replay.check_start(first, last)?;
    }
    let mut events = 0u64;
    let mut last = first - 1;
    let mut torn = None;
    loop {
        let records = match reader.poll(REPLAY_BATCH) {
            Ok(records) => records,
            // A complete header whose frame runs past the end of the file but that the reader
            // already finds wrong (a magic byte): open still cuts it as torn.
            Err(krabka_storage::Error::BadBatch {
                path,
                position,
                seq,
                reason,
            }) if path == view.log_path(newest)
                && cut_at_open(view, newest, &path, position, seq.saturating_sub(1))? =>
            {
                torn = Some(torn_event(&path, position, reason)?);
                break;
            }
            Err(e) => return Err(storage_error(dir, "replay", e)),
        };
        if records.is_empty() {
            break;
        }
        for record in records {
            last = record.seq;
            if replay.apply(&record, state)? {
                events += 1;
            }
        }
    }
    if torn.is_none()
        && let Some(tail) = reader.incomplete_tail().cloned()
    {
        let last_intact = reader.next_seq().saturating_sub(1);
        if !cut_at_open(view, newest, &tail.path, tail.position, last_intact)? {
            return Err(MetadataError::Log {
                path: tail.path,
                position: Some(tail.position),
                seq: Some(reader.next_seq()),
                reason: format!(
                    "the file ends inside a frame ({} bytes of it) that is not a torn last event: a valid frame follows it, or the events from seq {} were synced (the log's recovery point covers them)",
                    tail.bytes,
                    reader.next_seq()
                ),
            }
            .into());
        }
        torn = Some(TornEventFound {
            path: tail.path,
            position: tail.position,
            bytes: tail.bytes,
            reason: "the file ends inside this frame (an append cut short)".to_owned(),
        });
    }
    replay.check_start(first, last)?;
    Ok((events, torn))
}

/// Whether the owner's open cuts the newest segment `base` (at `path`) at `position` as a torn
/// last event, by its rule: the file ends inside the frame there (its header is incomplete or
/// its length runs past the end), and `LogView::tail_cut_at_open` (no valid frame after, the
/// seqs at stake above the recovery point).
fn cut_at_open(
    view: &LogView,
    base: u64,
    path: &Path,
    position: u64,
    last_intact: u64,
) -> Result<bool, RemoteStorageError> {
    let io_err = |e: io::Error| RemoteStorageError::io(path.display(), e);
    let file = File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    // The length field ends at byte 12 of a frame, well inside its header.
    let header_len = len.saturating_sub(position).min(BATCH_HEADER_LEN as u64);
    let mut header = vec![0u8; usize::try_from(header_len).unwrap_or(0)];
    file.read_exact_at(&mut header, position).map_err(io_err)?;
    let incomplete = batch_len(&header).is_none_or(|n| position.saturating_add(n as u64) > len);
    Ok(incomplete
        && view
            .tail_cut_at_open(base, position, last_intact)
            .map_err(|e| storage_error(view.dir(), "read", e))?)
}

/// The report of a torn last event at `position` of `path`.
fn torn_event(
    path: &Path,
    position: u64,
    reason: String,
) -> Result<TornEventFound, RemoteStorageError> {
    let len = std::fs::metadata(path)
        .map_err(|e| RemoteStorageError::io(path.display(), e))?
        .len();
    Ok(TornEventFound {
        path: path.to_path_buf(),
        position,
        bytes: len.saturating_sub(position),
        reason,
    })
}
