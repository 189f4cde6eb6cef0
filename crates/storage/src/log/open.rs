//! Opening a log: taking the directory lock, recovery (in [`crate::recovery`]), and loading a
//! closed segment's index files.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::append::Appender;
use super::read::FdCache;
use super::stats::Counters;
use super::sync::SyncState;
use super::{Inner, SegFile, State, no_active_segment};
use crate::bufs::ReadBufs;
use crate::fault::FaultInjector;
use crate::fsutil::{self, IoResultExt};
use crate::index::{IndexBuilder, OffsetIndex, TimeIndex};
use crate::{Error, LOCK_FILE_NAME, Options};

/// How long [`try_lock_exclusive`] retries a lock that is held.
pub const LOCK_RETRY_FOR: Duration = Duration::from_millis(500);

/// Takes an exclusive, non-blocking lock on `file`, retrying for up to [`LOCK_RETRY_FOR`]
/// while it is held.
///
/// The retry exists because a lock released a moment ago can still be held by a child process
/// that this process is spawning: the child shares the open lock file until it execs. A lock
/// still held after the retry is held by a live owner.
///
/// # Errors
/// [`TryLockError::WouldBlock`] when another owner holds the lock, or the I/O error.
pub fn try_lock_exclusive(file: &File) -> Result<(), TryLockError> {
    let deadline = Instant::now() + LOCK_RETRY_FOR;
    loop {
        match file.try_lock() {
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Opens (creating it if absent) the lock file at `path` and takes an exclusive, non-blocking
/// lock on it with [`try_lock_exclusive`]. The lock lasts as long as the returned `File`.
///
/// # Errors
/// [`TryLockError::WouldBlock`] when another owner holds the lock, or the I/O error of opening
/// or locking the file.
pub fn create_and_lock(path: &Path) -> Result<File, TryLockError> {
    let file = fsutil::open_rw(path, true).map_err(TryLockError::Error)?;
    try_lock_exclusive(&file)?;
    Ok(file)
}

/// Creates the lock file in `dir` and takes an exclusive, non-blocking lock on it.
fn lock_dir(dir: &Path) -> Result<File, Error> {
    let path = dir.join(LOCK_FILE_NAME);
    match create_and_lock(&path) {
        Ok(file) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}

/// Loads a closed segment's indexes if they are valid for a `.log` of `log_len` bytes; also
/// returns the index files' total size. Reads only the two index files (never the `.log`).
/// Whether the segment continues the one before it and the one after it continues it is
/// checked by recovery.
pub(crate) fn load_indexes(
    sf: &SegFile,
    base: u64,
    log_len: u64,
) -> Option<(OffsetIndex, TimeIndex, u64)> {
    let idx_bytes = fs::read(&sf.index_path).ok()?;
    let tidx_bytes = fs::read(&sf.time_index_path).ok()?;
    let idx = OffsetIndex::decode(&idx_bytes).ok()?;
    let tidx = TimeIndex::decode(&tidx_bytes).ok()?;
    let index_bytes = (idx_bytes.len() + tidx_bytes.len()) as u64;
    let consistent = idx.base_seq == base
        && tidx.base_seq == base
        && idx.log_size == log_len
        && idx.max_timestamp == tidx.max_timestamp
        && idx.entries.len() == tidx.entries.len()
        && idx
            .entries
            .iter()
            .zip(&tidx.entries)
            .all(|(&(seq, _), &(_, tseq))| seq == tseq)
        && idx.last_seq >= base;
    consistent.then_some((idx, tidx, index_bytes))
}

impl Inner {
    /// Opens the log in `dir`: checks the options, makes sure the directory exists, locks it,
    /// runs recovery, and sets up the appender on the active segment recovery left.
    pub(super) fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Inner, Error> {
        let opts = opts.resolve()?;
        let dir = dir.as_ref().to_path_buf();
        ensure_dir(&dir)?;
        // Before recovery, which may truncate files another writer is using.
        let lock = lock_dir(&dir)?;
        let crate::recovery::Recovered {
            segs,
            active_builder,
            report,
            clean_marker,
        } = crate::recovery::recover(&dir, &opts)?;
        let builder =
            active_builder.unwrap_or_else(|| IndexBuilder::new(opts.index_interval_bytes));
        let mut appender =
            Appender::on_active(&segs, builder).ok_or_else(|| no_active_segment(&dir))?;
        appender.clean_marker = clean_marker;
        let last = appender.next_seq - 1;
        let accepted = crate::read_accepted_holes(&dir)?;
        Ok(Inner {
            fds: FdCache::new(opts.max_open_segments),
            dir,
            opts,
            _lock: lock,
            unsynced_closed: Mutex::new(Vec::new()),
            state: RwLock::new(State { segs }),
            appender: Mutex::new(appender),
            sync_state: Mutex::new(SyncState::new(last)),
            sync_done: Condvar::new(),
            flush_wake: Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison_cause: std::sync::OnceLock::new(),
            writers: AtomicUsize::new(0),
            report,
            bufs: ReadBufs::default(),
            faults: FaultInjector::default(),
            counters: Counters::default(),
            accepted: Mutex::new(accepted),
        })
    }
}

/// Creates `dir` when it does not exist; [`Error::NotADirectory`] when it is something else.
fn ensure_dir(dir: &Path) -> Result<(), Error> {
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(Error::NotADirectory {
            path: dir.to_path_buf(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir).at(dir),
        Err(e) => Err(Error::io(dir, e)),
    }
}
