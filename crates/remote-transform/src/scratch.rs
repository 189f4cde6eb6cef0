//! Scratch directories of copies: `krabka-transform-*` under the scratch root, each holding a
//! lock file its process keeps locked while the directory lives, so that a directory left by a
//! process that was killed (SIGKILL, a crash, a power loss) is told apart from one in use and
//! removed by the next copy that runs there.

use std::fs::{File, TryLockError};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use krabka_remote_storage::RemoteLogSegmentId;
use tempfile::TempDir;

use crate::error::TransformError;

/// The name prefix of every scratch directory.
pub(crate) const SCRATCH_PREFIX: &str = "krabka-transform-";

/// The lock file in a scratch directory: the owner's process id, locked (`flock`) by it for
/// as long as the directory is in use. The lock goes with the process, however it ends.
pub(crate) const LOCK_NAME: &str = "owner.lock";

/// A scratch directory without a lock file (left by a version that wrote none, or by a process
/// killed between creating the directory and its lock file, which it creates right after) is
/// removed only after this long: far longer than that step takes in a live process.
const UNLOCKED_STALE_AFTER: Duration = Duration::from_secs(10 * 60);

/// A scratch directory in use: removed when dropped; its lock is released with it.
#[derive(Debug)]
pub(crate) struct Scratch {
    dir: TempDir,
    _lock: File,
}

impl Scratch {
    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Creates a locked scratch directory under `root` for a copy of `segment`.
pub(crate) fn create(root: &Path, segment: &RemoteLogSegmentId) -> Result<Scratch, TransformError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: std::io::Error| TransformError::io(segment, path, e)
    };
    let dir = tempfile::Builder::new()
        .prefix(SCRATCH_PREFIX)
        .tempdir_in(root)
        .map_err(io(root))?;
    // Locked under a temporary name and renamed into place, so a sweep never finds the lock
    // file of a live directory unlocked.
    let tmp = dir.path().join(format!("{LOCK_NAME}.tmp"));
    let mut lock = File::create(&tmp).map_err(io(&tmp))?;
    lock.try_lock().map_err(|e| match e {
        TryLockError::Error(e) => TransformError::io(segment, tmp.clone(), e),
        TryLockError::WouldBlock => TransformError::io(
            segment,
            tmp.clone(),
            std::io::Error::other("a new lock file is locked by another process"),
        ),
    })?;
    writeln!(lock, "{}", std::process::id()).map_err(io(&tmp))?;
    let path = dir.path().join(LOCK_NAME);
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(Scratch { dir, _lock: lock })
}

/// Removes the scratch directories under `root` that no process uses any more: those whose
/// lock file is not locked (its process is gone), and those without a lock file older than
/// ten minutes. Only real directories (never symlinks) owned by the same user as `ours` (a scratch
/// directory this process just created) are looked at; failures leave a directory in place.
/// Returns the directories removed.
pub(crate) fn sweep(root: &Path, ours: &Path) -> Vec<PathBuf> {
    let Ok(me) = std::fs::symlink_metadata(ours).map(|m| m.uid()) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let named = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(SCRATCH_PREFIX));
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !named || !meta.is_dir() || meta.uid() != me || path == ours {
            continue;
        }
        if is_stale(&path, &meta) && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// Whether the scratch directory `dir` is no longer used by any process.
fn is_stale(dir: &Path, meta: &std::fs::Metadata) -> bool {
    match File::open(dir.join(LOCK_NAME)) {
        // Locked by nobody: its process is gone. (The lock taken here is released before the
        // removal; that is safe, as no process ever takes over an existing directory: each
        // copy creates a fresh one.)
        Ok(lock) => matches!(lock.try_lock(), Ok(())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > UNLOCKED_STALE_AFTER),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use krabka_remote_storage::{TopicIdPartition, Uuid};

    #[test]
    fn a_sweep_removes_only_directories_whose_owner_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let segment = RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 0));
        let live = create(root.path(), &segment).unwrap();
        let pid = std::fs::read_to_string(live.path().join(LOCK_NAME)).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        // A dead owner's directory: its lock file exists and is not locked.
        let dead = root.path().join(format!("{SCRATCH_PREFIX}dead"));
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join(LOCK_NAME), "1\n").unwrap();
        std::fs::write(dead.join("segment.log"), vec![0u8; 4096]).unwrap();
        // A fresh directory without a lock file, and other names: kept.
        let fresh = root.path().join(format!("{SCRATCH_PREFIX}fresh"));
        std::fs::create_dir(&fresh).unwrap();
        let other = root.path().join("other-dir");
        std::fs::create_dir(&other).unwrap();
        let ours = create(root.path(), &segment).unwrap();
        let removed = sweep(root.path(), ours.path());
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists());
        for kept in [live.path(), ours.path(), &fresh, &other] {
            assert!(kept.exists(), "{}", kept.display());
        }
        // Dropping a scratch directory removes it.
        let gone = live.path().to_path_buf();
        drop(live);
        assert!(!gone.exists());
    }
}
