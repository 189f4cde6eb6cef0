//! Where a store's root really is, before anything is created there: the filesystem root (however
//! spelled) and non-directories are refused by [`FsRemoteStorage::new`](crate::FsRemoteStorage::new).

use std::fs;
use std::path::{Path, PathBuf};

/// The absolute path `root` names once it exists: its longest existing prefix with symlinks,
/// `.` and `..` resolved, then the rest. A `..` after a component that does not exist yet
/// cannot be resolved before it is created, and is refused (as an error message).
pub(crate) fn resolve(root: &Path) -> Result<PathBuf, String> {
    let absolute = if root.is_absolute() {
        root.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot resolve it: no current directory: {e}"))?
            .join(root)
    };
    let parts: Vec<_> = absolute.components().collect();
    // A bounded walk: from the whole path down to the root component, which always exists.
    for existing in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..existing].iter().collect();
        let Ok(mut resolved) = fs::canonicalize(&prefix) else {
            continue;
        };
        for part in &parts[existing..] {
            match part {
                std::path::Component::Normal(name) => resolved.push(name),
                std::path::Component::CurDir => {}
                _ => {
                    return Err(format!(
                        "cannot resolve it: `..` follows {}, which does not exist",
                        resolved.display()
                    ));
                }
            }
        }
        return Ok(resolved);
    }
    Err("cannot resolve it: no part of it exists".to_owned())
}

/// What a non-directory is, for an error message.
pub(crate) fn file_kind(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_file() {
        "a regular file"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a directory"
    }
}
