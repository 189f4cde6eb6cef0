//! Small durable-filesystem helpers: the one place the workspace syncs directories, opens files
//! for in-place writes, removes files that may be gone and replaces files atomically.
//!
//! They return plain [`std::io::Result`]s so that every crate can map a failure into its own
//! error type with the path it cares about. Inside this crate, `IoResultExt::at` turns them
//! into [`Error::Io`] naming a path.
//!
//! ```
//! use krabka_storage::fsutil;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("state");
//! fsutil::write_atomic(&path, &dir.path().join("state.tmp"), b"v1")?;
//! fsutil::write_atomic(&path, &dir.path().join("state.tmp"), b"v2")?;
//! assert_eq!(std::fs::read(&path)?, b"v2");
//! assert_eq!(fsutil::remove_if_exists(&path)?, 2);
//! assert_eq!(fsutil::remove_if_exists(&path)?, 0);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::Error;

/// Fsyncs the directory `dir`, making the creations, renames and removals of its entries
/// durable (a file's own fsync does not cover its directory entry).
///
/// # Errors
/// The error of opening or syncing `dir`.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}

/// Opens `path` for reading and writing without truncating it; creates it (empty) when
/// `create` is set and it does not exist.
///
/// # Errors
/// The error of opening the file (`NotFound` when it is absent and `create` is unset).
pub fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
}

/// Removes the file at `path` and returns the bytes it held; `Ok(0)` when there is no such file.
/// The directory is not synced (see [`fsync_dir`]).
///
/// # Errors
/// Any error of removing the file other than `NotFound`.
pub fn remove_if_exists(path: &Path) -> io::Result<u64> {
    let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    match fs::remove_file(path) {
        Ok(()) => Ok(len),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// Creates (or truncates) the file at `path`, writes `bytes` into it and fsyncs it. The first
/// step of [`write_atomic`], for callers that report each step's path separately.
///
/// # Errors
/// The error of creating, writing or syncing the file.
pub fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Durably replaces the file at `path` with `bytes`: writes them into `tmp` (a path in the same
/// directory, overwritten if present) and fsyncs it, renames `tmp` over `path`, then fsyncs the
/// directory. A crash at any point leaves either the old file or the new one at `path`, never a
/// mix (a stale `tmp` may remain).
///
/// # Errors
/// The error of the step that failed (the file is then either the old one or the new one).
pub fn write_atomic(path: &Path, tmp: &Path, bytes: &[u8]) -> io::Result<()> {
    write_synced(tmp, bytes)?;
    fs::rename(tmp, path)?;
    fsync_dir(parent_dir(path))
}

/// [`write_atomic`], with each step's error naming its own path (the temporary file, the final
/// path, the directory) as this crate's [`Error::Io`].
pub(crate) fn write_atomic_named(path: &Path, tmp: &Path, bytes: &[u8]) -> Result<(), Error> {
    write_synced(tmp, bytes).at(tmp)?;
    fs::rename(tmp, path).at(path)?;
    let dir = parent_dir(path);
    fsync_dir(dir).at(dir)
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Maps an [`io::Result`] into this crate's [`Error::Io`] naming a path.
pub(crate) trait IoResultExt<T> {
    /// The error, if any, as [`Error::Io`] on `path`.
    fn at(self, path: &Path) -> Result<T, Error>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T, Error> {
        self.map_err(|e| Error::io(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let tmp = dir.path().join("f.tmp");
        write_atomic(&path, &tmp, b"one").unwrap();
        write_atomic(&path, &tmp, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert!(!tmp.exists());
        assert_eq!(parent_dir(Path::new("x")), Path::new("."));
    }

    #[test]
    fn open_rw_creates_only_when_asked_and_never_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let absent = open_rw(&path, false);
        assert!(
            matches!(&absent, Err(e) if e.kind() == io::ErrorKind::NotFound),
            "{absent:?}"
        );
        open_rw(&path, true).unwrap().write_all(b"abc").unwrap();
        drop(open_rw(&path, true).unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"abc");
        fsync_dir(dir.path()).unwrap();
    }
}
