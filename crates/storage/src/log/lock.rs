//! The directory lock of a log (`DIR/.lock`, one process per log): [`lock_dir`], which
//! [`Log::open`](crate::Log::open) takes before recovery, through [`create_and_lock`] (public
//! for other lock files beside a log).

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::fsutil;
use crate::{Error, LOCK_FILE_NAME};

/// How long [`try_lock_exclusive`] retries a lock that is held.
const LOCK_RETRY_FOR: Duration = Duration::from_millis(500);

/// Takes an exclusive, non-blocking lock on `file`, retrying for up to [`LOCK_RETRY_FOR`]
/// while it is held.
///
/// The retry exists because a lock released a moment ago can still be held by a child process
/// that this process is spawning: the child shares the open lock file until it execs. A lock
/// still held after the retry is held by a live owner.
///
/// # Errors
/// [`TryLockError::WouldBlock`] when another owner holds the lock, or the I/O error.
fn try_lock_exclusive(file: &File) -> Result<(), TryLockError> {
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
/// lock on it, retrying for up to half a second while it is held (a lock released a moment ago
/// can still be held by a child process this one is spawning, until it execs). The lock lasts
/// as long as the returned `File`. [`Log::open`](crate::Log::open) locks its directory with
/// it; other stores beside a log (the tiered layer's metadata) lock theirs the same way.
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
pub(super) fn lock_dir(dir: &Path) -> Result<File, Error> {
    let path = dir.join(LOCK_FILE_NAME);
    match create_and_lock(&path) {
        Ok(file) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}
