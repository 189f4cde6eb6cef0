//! Create-only writes of the ownership records (`krabka_remote_storage::ownership`), and the
//! whole-file overwrite and conditional read of the partition head
//! (`krabka_remote_storage::head`), on a filesystem.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::{IndexSource, RemoteStorageError};

use super::{FsRemoteStorage, TMP_INFIX, sync_dir};

impl FsRemoteStorage {
    /// The path of `key` and of its directory, after checking that `key` is a relative path
    /// of plain names (no `..`, no root, not empty), so it cannot leave the root.
    fn checked_key(&self, key: &str) -> Result<(PathBuf, PathBuf), RemoteStorageError> {
        let safe = Path::new(key)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe || key.is_empty() {
            return Err(RemoteStorageError::invalid_argument(format!(
                "key `{key}` is not a relative path of plain names"
            )));
        }
        let path = self.path(key);
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.root.clone());
        Ok((path, dir))
    }
}

/// The version [`OwnershipStore::read_if_changed`] gives a file: its size and a hash of its
/// bytes. Neither the inode (a rename alternates between two on ext4) nor the modification
/// time (coarse on some filesystems) tells two writes apart for sure; the bytes do (a head's
/// serial changes with every write). Reading the small file costs no request.
fn version_of(bytes: &[u8]) -> String {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(bytes);
    format!("{}:{hash:016x}", bytes.len())
}

/// Reads `path` whole when it holds at most `max_len` bytes, holding at most `max_len + 1`;
/// `Ok(None)` when it does not exist.
pub(crate) fn read_bounded(
    path: &Path,
    max_len: usize,
) -> Result<Option<Vec<u8>>, RemoteStorageError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RemoteStorageError::io(path.display(), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| RemoteStorageError::io(path.display(), e))?;
    let key = path.display().to_string();
    let limit = u64::try_from(max_len).unwrap_or(u64::MAX);
    if meta.len() > limit {
        return Err(krabka_remote_storage::recovery::object_too_large(
            &key,
            meta.len(),
            max_len,
        ));
    }
    // Bounded even if the file grew since the fstat (written in place by hand).
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| RemoteStorageError::io(path.display(), e))?;
    if bytes.len() > max_len {
        return Err(krabka_remote_storage::recovery::object_too_large(
            &key,
            bytes.len() as u64,
            max_len,
        ));
    }
    Ok(Some(bytes))
}

/// Create-only writes for the ownership records: the object is written and fsynced under a
/// temporary name, then hard-linked to its final name. `link(2)` never replaces an existing
/// name (it fails with `EEXIST`), atomically, so of two processes creating one key exactly one
/// succeeds, whatever machine they run on as long as the filesystem implements `link` (local
/// filesystems and NFS do).
///
/// The partition head is overwritten as a segment's files are copied: a temporary file in the
/// same directory, written and fsynced, renamed over the final name, the directory fsynced. Its
/// conditional read reads the file (bounded) and compares its size and hash with the version
/// known.
impl OwnershipStore for FsRemoteStorage {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        let (final_path, dir) = self.checked_key(key)?;
        self.ensure_partition_dir(&dir)?;
        // A random suffix: a process killed before removing its temporary file never makes a
        // later one (same pid after a restart, e.g. pid 1 in a container) collide with it.
        let mut tmp_name = final_path.as_os_str().to_owned();
        tmp_name.push(format!(
            "{TMP_INFIX}{}",
            krabka_remote_storage::Uuid::new_v4()
        ));
        let tmp = std::path::PathBuf::from(tmp_name);
        let written = (|| {
            let mut out = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| RemoteStorageError::io(tmp.display(), e))?;
            out.write_all(bytes)
                .and_then(|()| out.sync_all())
                .map_err(|e| RemoteStorageError::io(tmp.display(), e))?;
            match fs::hard_link(&tmp, &final_path) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(RemoteStorageError::io(final_path.display(), e)),
            }
        })();
        let removed = fs::remove_file(&tmp);
        let created = written?;
        if let Err(e) = removed
            && e.kind() != io::ErrorKind::NotFound
        {
            return Err(RemoteStorageError::io(tmp.display(), e));
        }
        sync_dir(&dir)?;
        Ok(created)
    }
    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        let (final_path, dir) = self.checked_key(key)?;
        self.ensure_partition_dir(&dir)?;
        let bytes = bytes::Bytes::copy_from_slice(bytes);
        self.put(&final_path, IndexSource::Bytes(&bytes))?;
        sync_dir(&dir)
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        let (path, _) = self.checked_key(key)?;
        let Some(bytes) = read_bounded(&path, max_len)? else {
            return Ok(ConditionalRead::Absent);
        };
        let version = version_of(&bytes);
        if known == Some(version.as_str()) {
            return Ok(ConditionalRead::Unchanged);
        }
        Ok(ConditionalRead::Changed { bytes, version })
    }
}
