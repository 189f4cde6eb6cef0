//! Reading master keys from files and directories, with bounded effort: a key file is a regular
//! file of at most [`MAX_KEY_FILE_LEN`] bytes; anything else (a directory, a device such as
//! `/dev/zero`, a FIFO, a socket, a larger file) is refused at once, naming the path, without
//! reading more than that many bytes.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::error::TransformError;
use crate::keys::{KeyRing, MasterKey};

/// The largest key file read: 64 hex digits with room for surrounding whitespace (a trailing
/// `\r\n`, spaces). A key file is never read past this many bytes plus one.
pub const MAX_KEY_FILE_LEN: u64 = 128;

/// The most key files a key directory may hold.
pub const MAX_KEY_DIR_ENTRIES: usize = 1024;

fn invalid(path: &Path, reason: impl Into<String>) -> TransformError {
    TransformError::InvalidKey {
        origin: format!("file {}", path.display()),
        reason: reason.into(),
    }
}

/// What a path that is not a regular file is, for an error.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Refuses `meta` unless it is a regular file of at most [`MAX_KEY_FILE_LEN`] bytes.
fn check_kind(path: &Path, meta: &std::fs::Metadata) -> Result<(), TransformError> {
    if !meta.is_file() {
        return Err(invalid(
            path,
            format!(
                "is {}, not a key file (a regular file of 32 raw bytes or 64 hex digits)",
                kind_of(meta)
            ),
        ));
    }
    if meta.len() > MAX_KEY_FILE_LEN {
        return Err(invalid(
            path,
            format!(
                "is {} bytes, too large for a key file (32 raw bytes or 64 hex digits, at most \
                 {MAX_KEY_FILE_LEN} bytes with whitespace)",
                meta.len()
            ),
        ));
    }
    Ok(())
}

/// Reads the key file at `path` (see the [module docs](self)).
pub(crate) fn read_key_file(path: &Path) -> Result<MasterKey, TransformError> {
    // `stat` first: it neither blocks (opening a FIFO would wait for a writer) nor reads.
    let meta = std::fs::metadata(path).map_err(|e| invalid(path, e.to_string()))?;
    check_kind(path, &meta)?;
    let file = File::open(path).map_err(|e| invalid(path, e.to_string()))?;
    // Again on what was opened, in case the path changed in between.
    let meta = file.metadata().map_err(|e| invalid(path, e.to_string()))?;
    check_kind(path, &meta)?;
    let mut bytes = Zeroizing::new(Vec::with_capacity(MAX_KEY_FILE_LEN as usize + 1));
    file.take(MAX_KEY_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid(path, e.to_string()))?;
    if bytes.len() as u64 > MAX_KEY_FILE_LEN {
        return Err(invalid(
            path,
            format!("grew past {MAX_KEY_FILE_LEN} bytes while it was read: not a key file"),
        ));
    }
    MasterKey::parse(&bytes, &format!("file {}", path.display()))
}

/// The key files of `dir`: every entry whose name does not start with `.`, in name order.
fn key_dir_entries(dir: &Path) -> Result<Vec<PathBuf>, TransformError> {
    let bad = |reason: String| TransformError::InvalidKey {
        origin: format!("key directory {}", dir.display()),
        reason,
    };
    let meta = std::fs::metadata(dir).map_err(|e| bad(e.to_string()))?;
    if !meta.is_dir() {
        return Err(bad(format!("is {}, not a directory", kind_of(&meta))));
    }
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| bad(e.to_string()))? {
        let entry = entry.map_err(|e| bad(e.to_string()))?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        if paths.len() == MAX_KEY_DIR_ENTRIES {
            return Err(bad(format!(
                "holds over {MAX_KEY_DIR_ENTRIES} entries: not a key directory"
            )));
        }
        paths.push(entry.path());
    }
    if paths.is_empty() {
        return Err(bad("holds no key file".to_owned()));
    }
    paths.sort();
    Ok(paths)
}

impl MasterKey {
    /// Reads a key file: 32 raw bytes, or 64 hex digits (see [`parse`](Self::parse)). Only a
    /// regular file of at most [`MAX_KEY_FILE_LEN`] bytes is read;
    /// a directory, a device (`/dev/zero`), a FIFO or a larger file is refused at once.
    ///
    /// # Errors
    /// [`TransformError::InvalidKey`] naming the path when it cannot be read or parsed.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TransformError> {
        read_key_file(path.as_ref())
    }
}

impl KeyRing {
    /// A ring whose current key is read from `path` (32 raw bytes or 64 hex digits): what
    /// `--encryption-key-file PATH` builds.
    ///
    /// # Errors
    /// [`TransformError::InvalidKey`] naming the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TransformError> {
        let path = path.as_ref();
        Ok(Self::new(MasterKey::from_file(path)?).with_origin(path.to_path_buf()))
    }

    /// Adds an old key read from a file.
    ///
    /// # Errors
    /// [`TransformError::InvalidKey`] naming the path.
    pub fn with_old_key_file(self, path: impl AsRef<Path>) -> Result<Self, TransformError> {
        let path = path.as_ref();
        Ok(self.with_old_key_from(MasterKey::from_file(path)?, path.to_path_buf()))
    }

    /// A ring of the keys in `files` (in order) and then of every file of `dir` (names not
    /// starting with `.`, in name order): what `--encryption-key-file` (any number of times)
    /// and `--encryption-key-dir` build. The first key is current (it encrypts new segments);
    /// every key decrypts the segments written under it. `None` when neither gives a key.
    /// The same key given twice counts once.
    ///
    /// ```
    /// use krabka_remote_transform::KeyRing;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let (a, b) = (dir.path().join("a.key"), dir.path().join("b.key"));
    /// std::fs::write(&a, [1u8; 32])?;
    /// std::fs::write(&b, "22".repeat(32) + "\n")?;
    /// let ring = KeyRing::load(&[b.clone(), a.clone()], None)?.unwrap();
    /// assert_eq!(ring.key_ids().len(), 2);
    /// assert_eq!(ring.origin(ring.key_ids()[0]), Some(b.as_path()));
    /// // /dev/zero is no key file: refused at once, naming it.
    /// let e = KeyRing::load(&["/dev/zero".into()], None).unwrap_err();
    /// assert!(e.to_string().contains("/dev/zero"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`TransformError::InvalidKey`] naming the file or directory: a path that is not a
    /// regular file, a file over [`MAX_KEY_FILE_LEN`] bytes or that does not hold a key, a
    /// directory that cannot be listed, holds no key file or over [`MAX_KEY_DIR_ENTRIES`].
    pub fn load(files: &[PathBuf], dir: Option<&Path>) -> Result<Option<Self>, TransformError> {
        let mut paths: Vec<PathBuf> = files.to_vec();
        if let Some(dir) = dir {
            paths.extend(key_dir_entries(dir)?);
        }
        let mut ring: Option<KeyRing> = None;
        for path in paths {
            let key = read_key_file(&path)?;
            ring = Some(match ring {
                None => KeyRing::new(key).with_origin(path),
                Some(r) => r.with_old_key_from(key, path),
            });
        }
        Ok(ring)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn refused(path: &Path, want: &str) {
        let e = read_key_file(path).unwrap_err();
        assert!(matches!(e, TransformError::InvalidKey { .. }), "{e}");
        let shown = e.to_string();
        assert!(shown.contains(&path.display().to_string()), "{shown}");
        assert!(shown.contains(want), "{shown}");
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        refused(Path::new("/dev/zero"), "a device");
        refused(dir.path(), "a directory");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 1 << 20]).unwrap();
        refused(&big, "1048576 bytes, too large");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            refused(&fifo, "a FIFO");
        }
        let padded = dir.path().join("padded");
        std::fs::write(&padded, format!("  {}\r\n", "ab".repeat(32))).unwrap();
        assert!(read_key_file(&padded).is_ok());
        refused(&dir.path().join("missing"), "missing");
    }

    #[test]
    fn a_key_directory_gives_its_keys_in_name_order_after_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        std::fs::create_dir(&keys).unwrap();
        std::fs::write(keys.join("2.key"), [2u8; 32]).unwrap();
        std::fs::write(keys.join("1.key"), [1u8; 32]).unwrap();
        std::fs::write(keys.join(".hidden"), b"not a key").unwrap();
        let first = dir.path().join("first.key");
        std::fs::write(&first, [3u8; 32]).unwrap();
        let ring = KeyRing::load(std::slice::from_ref(&first), Some(&keys))
            .unwrap()
            .unwrap();
        let ids: Vec<_> = [[3u8; 32], [1; 32], [2; 32]]
            .iter()
            .map(crate::keys::KeyId::fingerprint)
            .collect();
        assert_eq!(ring.key_ids(), ids);
        assert_eq!(ring.origin(ids[1]), Some(keys.join("1.key").as_path()));
        // Only the directory: its first key is current.
        let ring = KeyRing::load(&[], Some(&keys)).unwrap().unwrap();
        assert_eq!(ring.key_ids(), ids[1..]);
        assert!(KeyRing::load(&[], None).unwrap().is_none());
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let e = KeyRing::load(&[], Some(&empty)).unwrap_err();
        assert!(e.to_string().contains("holds no key file"), "{e}");
        std::fs::write(keys.join("3.txt"), b"junk").unwrap();
        let e = KeyRing::load(&[], Some(&keys)).unwrap_err();
        assert!(e.to_string().contains("3.txt"), "{e}");
    }
}
