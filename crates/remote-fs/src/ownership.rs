//! Create-only writes of the ownership records (`krabka_remote_storage::ownership`) on a
//! filesystem.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use krabka_remote_storage::RemoteStorageError;
use krabka_remote_storage::ownership::OwnershipStore;

use super::{FsRemoteStorage, TMP_INFIX, sync_dir};

/// Create-only writes for the ownership records: the object is written and fsynced under a
/// temporary name, then hard-linked to its final name. `link(2)` never replaces an existing
/// name (it fails with `EEXIST`), atomically, so of two processes creating one key exactly one
/// succeeds, whatever machine they run on as long as the filesystem implements `link` (local
/// filesystems and NFS do).
impl OwnershipStore for FsRemoteStorage {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        let relative = Path::new(key);
        let safe = relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe || key.is_empty() {
            return Err(RemoteStorageError::invalid_argument(format!(
                "key `{key}` is not a relative path of plain names"
            )));
        }
        let final_path = self.path(key);
        let dir = final_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.root.clone());
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
}
