//! Filesystem backend of the krabka [`RemoteStorageManager`] SPI: atomic, fsynced segment copies
//! with ranged reads.
//!
//! Objects live under a root directory with the layout shared by every backend
//! ([`krabka_remote_storage::layout`]):
//!
//! ```text
//! <root>/<topic>-<partition>-<topic id>/<20-digit start offset>-<segment uuid><suffix>
//! ```
//!
//! A partition directory name that would exceed 254 bytes (a topic name near Kafka's
//! 249-character limit) is shortened by the layout to a readable prefix and a digest
//! ([`layout::partition_dir`]), so every valid topic name fits in one path component.
//!
//! - A copy writes each file under a temporary name in its final directory, fsyncs it, renames
//!   it into place and fsyncs the directory: a crash never leaves a partial file under a final
//!   name (a stray temporary file at worst, removed by the segment's delete).
//! - The root is fsynced before the first copy into a partition directory by each instance,
//!   whether or not that directory already existed: one left by a crash between its creation
//!   and the root's fsync, or being created by a racing thread, is not yet durable.
//! - A fetch reads only the requested range, with a positioned read. An inclusive end past the
//!   last byte reads to the end (the SPI's rule); a range reaching past the object's end into
//!   bytes its metadata's `segment_size_in_bytes` records is
//!   [`RemoteStorageError::Corrupt`] (the object was truncated).
//! - A delete is idempotent and removes every file of the segment.
//! - Topic names are checked with Kafka's rules, so no name can escape the root.
//!
//! # Platform
//! Unix only (Linux, macOS, the BSDs): files are read with the positioned reads of
//! `std::os::unix::fs::FileExt`, and directories are fsynced through their file handles.
//!
//! ```
//! use krabka_remote_fs::FsRemoteStorage;
//! use krabka_remote_storage::*;
//!
//! let root = tempfile::tempdir()?;
//! let local = tempfile::tempdir()?;
//! for (name, bytes) in [("s.log", &b"hello world"[..]), ("s.index", b""), ("s.timeindex", b"")] {
//!     std::fs::write(local.path().join(name), bytes)?;
//! }
//! let data = LogSegmentData::new(
//!     local.path().join("s.log"),
//!     local.path().join("s.index"),
//!     local.path().join("s.timeindex"),
//! );
//! let rsm = FsRemoteStorage::new(root.path())?;
//! let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
//! let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9)
//!     .segment_size_in_bytes(11)
//!     .build()?;
//! assert_eq!(rsm.copy_log_segment_data(&m, &data)?, None);
//! assert_eq!(rsm.fetch_log_segment(&m, 6, Some(10))?, b"world");
//! rsm.delete_log_segment_data(&m)?;
//! assert!(rsm.list_objects()?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use krabka_remote_storage::{
    CustomMetadata, IndexSource, IndexType, LogSegmentData, RemoteLogSegmentMetadata,
    RemoteStorageError, RemoteStorageManager, checked_range,
};
use krabka_remote_storage::{layout, manifest};

mod listing;
mod ownership;
mod root;

/// Infix of temporary files: `<final name>.tmp-<pid>-<n>`. A final name never contains it.
const TMP_INFIX: &str = ".tmp-";

/// A [`RemoteStorageManager`] over a local (or mounted) directory.
#[derive(Debug)]
pub struct FsRemoteStorage {
    root: PathBuf,
    /// Makes temporary names unique among concurrent copies of one process.
    tmp_counter: AtomicU64,
    /// Partition directories whose entry in the root this instance has made durable (the root
    /// was fsynced after the directory was seen to exist). A directory not in the set may have
    /// been created by a process that crashed before fsyncing the root, or by a racing thread
    /// still on its way to that fsync, so the next copy into it fsyncs the root first.
    durable_dirs: Mutex<HashSet<PathBuf>>,
    /// How many times the root was fsynced (for tests of the rule above).
    root_syncs: AtomicU64,
}

impl FsRemoteStorage {
    /// Opens (creating it if needed) a store rooted at `root`.
    ///
    /// The filesystem root (`/`, however spelled: `//`, `/tmp/..`, a symlink to it) is refused,
    /// and so is an existing path that is not a directory, before anything is created or
    /// written: a partition's records (`_identity`, `_epoch`, `_head`) and segment directories
    /// would otherwise land among the system's own. The root of another mount is accepted: a
    /// share mounted for the remote tier is the common setup.
    ///
    /// # Errors
    /// [`RemoteStorageError::StoreUnavailable`] when `root` is the filesystem root, is not a
    /// directory, or cannot be created.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, RemoteStorageError> {
        let root = root.into();
        let unusable = |message: String| RemoteStorageError::StoreUnavailable {
            bucket: root.display().to_string(),
            endpoint: "file://".to_owned(),
            message,
        };
        let resolved = root::resolve(&root).map_err(&unusable)?;
        if resolved.parent().is_none() {
            return Err(unusable(format!(
                "it is the filesystem root ({}): name a directory of its own for the remote tier",
                resolved.display()
            )));
        }
        match fs::metadata(&root) {
            Ok(meta) if !meta.is_dir() => {
                return Err(unusable(format!(
                    "it exists and is not a directory ({})",
                    root::file_kind(&meta)
                )));
            }
            _ => {}
        }
        fs::create_dir_all(&root).map_err(|e| unusable(format!("cannot create it: {e}")))?;
        let meta = fs::metadata(&root).map_err(|e| unusable(format!("cannot stat it: {e}")))?;
        if !meta.is_dir() {
            return Err(unusable("it is not a directory".to_owned()));
        }
        Ok(Self {
            root,
            tmp_counter: AtomicU64::new(0),
            durable_dirs: Mutex::new(HashSet::new()),
            root_syncs: AtomicU64::new(0),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every file under the root, as paths relative to it, sorted — temporary files included,
    /// so tests can check that nothing is orphaned.
    ///
    /// # Errors
    /// [`RemoteStorageError::Io`] when a directory cannot be read.
    pub fn list_objects(&self) -> Result<Vec<PathBuf>, RemoteStorageError> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let entries =
                fs::read_dir(&dir).map_err(|e| RemoteStorageError::io(dir.display(), e))?;
            for entry in entries {
                let entry = entry.map_err(|e| RemoteStorageError::io(dir.display(), e))?;
                let path = entry.path();
                let kind = entry
                    .file_type()
                    .map_err(|e| RemoteStorageError::io(path.display(), e))?;
                if kind.is_dir() {
                    stack.push(path);
                } else if let Ok(rel) = path.strip_prefix(&self.root) {
                    out.push(rel.to_path_buf());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Creates the partition directory `dir` if needed and makes its entry in the root
    /// durable: the root is fsynced unless this instance already did so after `dir` existed.
    ///
    /// Whether `dir` existed before says nothing about its entry being durable (a crash right
    /// after an earlier `mkdir`, or another thread that created it and has not fsynced the root
    /// yet), so the decision rests only on this instance's own fsyncs.
    fn ensure_partition_dir(&self, dir: &Path) -> Result<(), RemoteStorageError> {
        fs::create_dir_all(dir).map_err(|e| RemoteStorageError::io(dir.display(), e))?;
        let known = self
            .durable_dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(dir);
        if !known {
            sync_dir(&self.root)?;
            self.root_syncs.fetch_add(1, Ordering::Relaxed);
            self.durable_dirs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(dir.to_path_buf());
        }
        Ok(())
    }

    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    fn not_found(metadata: &RemoteLogSegmentMetadata, what: String) -> RemoteStorageError {
        RemoteStorageError::SegmentNotFound {
            segment: metadata.remote_log_segment_id().clone(),
            what,
        }
    }

    fn open(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        key: &str,
    ) -> Result<File, RemoteStorageError> {
        let path = self.path(key);
        File::open(&path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Self::not_found(metadata, key.to_owned())
            } else {
                RemoteStorageError::io(path.display(), e)
            }
        })
    }

    fn tmp_path(&self, final_path: &Path) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let mut name = final_path.as_os_str().to_owned();
        name.push(format!("{TMP_INFIX}{}-{n}", std::process::id()));
        PathBuf::from(name)
    }

    /// Writes `source` to `final_path` atomically: temp file, fsync, rename. The caller fsyncs
    /// the directory once for all files.
    fn put(&self, final_path: &Path, source: IndexSource<'_>) -> Result<(), RemoteStorageError> {
        self.put_with(final_path, source, true)
    }

    /// [`put`](Self::put), with the temp file fsynced only when `sync`.
    fn put_with(
        &self,
        final_path: &Path,
        source: IndexSource<'_>,
        sync: bool,
    ) -> Result<(), RemoteStorageError> {
        let tmp = self.tmp_path(final_path);
        let result = (|| {
            let mut out = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| RemoteStorageError::io(tmp.display(), e))?;
            match source {
                IndexSource::File(src) => {
                    let mut input =
                        File::open(src).map_err(|e| RemoteStorageError::io(src.display(), e))?;
                    // `io::copy` between files uses copy_file_range/sendfile where it can.
                    io::copy(&mut input, &mut out)
                        .map_err(|e| RemoteStorageError::io(tmp.display(), e))?;
                }
                IndexSource::Bytes(b) => out
                    .write_all(b)
                    .map_err(|e| RemoteStorageError::io(tmp.display(), e))?,
            }
            if sync {
                out.sync_all()
                    .map_err(|e| RemoteStorageError::io(tmp.display(), e))?;
            }
            fs::rename(&tmp, final_path)
                .map_err(|e| RemoteStorageError::io(final_path.display(), e))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Removes `path`; absent is fine.
    fn remove(path: &Path) -> Result<bool, RemoteStorageError> {
        match fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(RemoteStorageError::io(path.display(), e)),
        }
    }

    /// Removes temporary files left by interrupted copies of the segment with this stem.
    fn remove_stray_temps(dir: &Path, stem: &str) -> Result<bool, RemoteStorageError> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(RemoteStorageError::io(dir.display(), e)),
        };
        let mut removed = false;
        for entry in entries {
            let entry = entry.map_err(|e| RemoteStorageError::io(dir.display(), e))?;
            let name: OsString = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(stem) && name.contains(TMP_INFIX) {
                removed |= Self::remove(&entry.path())?;
            }
        }
        Ok(removed)
    }
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), RemoteStorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| RemoteStorageError::io(dir.display(), e))
}

impl RemoteStorageManager for FsRemoteStorage {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let dir = self.path(&layout::partition_dir(metadata.topic_id_partition())?);
        self.ensure_partition_dir(&dir)?;
        let manifest_path = self.path(&layout::manifest_key(metadata)?);
        // Before the first byte: the in-progress manifest (writer and start), so no cleanup
        // takes this copy's objects for an orphan while it may still finish. Visible at once
        // to any process; not fsynced on its own: after a power loss it may be lost or torn
        // (the directory fsync below makes its name durable), and objects with no manifest or
        // an unreadable one are kept by every cleanup, never deleted.
        let started = Bytes::from(manifest::encode_in_progress(metadata));
        self.put_with(&manifest_path, IndexSource::Bytes(&started), false)?;
        self.put(
            &self.path(&layout::log_key(metadata)?),
            IndexSource::File(&data.log_segment),
        )?;
        for t in IndexType::ALL {
            let path = self.path(&layout::index_key(metadata, t)?);
            match data.index_source(t) {
                Some(source) => self.put(&path, source)?,
                // A re-copy without this optional index must not leave the old one behind.
                None => {
                    Self::remove(&path)?;
                }
            }
        }
        // The data and indexes are durable (each fsynced, their renames by this directory
        // fsync) before the manifest that says the copy is complete appears.
        sync_dir(&dir)?;
        let manifest = Bytes::from(manifest::encode(metadata));
        self.put(&manifest_path, IndexSource::Bytes(&manifest))?;
        sync_dir(&dir)?;
        Ok(None)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let key = layout::log_key(metadata)?;
        let file = self.open(metadata, &key)?;
        let size = file
            .metadata()
            .map_err(|e| RemoteStorageError::io(&key, e))?
            .len();
        // An end past the object's last byte reads to its end, by the SPI's rule; but an
        // object shorter than its metadata records was truncated, and a range reaching into
        // the missing bytes must not come back short as if the segment ended there.
        let recorded = metadata.segment_size_in_bytes();
        let asked_end = end_position.map_or(recorded, |e| (u64::from(e) + 1).min(recorded));
        if size < recorded && asked_end > size {
            return Err(RemoteStorageError::Corrupt {
                location: self.path(&key).display().to_string(),
                reason: format!(
                    "the object is {size} bytes, its metadata records {recorded} (truncated?): \
                     cannot read bytes {start_position}..{asked_end} of segment {}",
                    metadata.remote_log_segment_id()
                ),
            });
        }
        let range = checked_range(size, start_position, end_position)
            .map_err(|e| e.for_segment(metadata.remote_log_segment_id()))?;
        let len = usize::try_from(range.end - range.start).map_err(|_| {
            RemoteStorageError::invalid_argument(format!(
                "range {range:?} of {key} does not fit in memory"
            ))
        })?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, range.start)
            .map_err(|e| RemoteStorageError::io(&key, e))?;
        Ok(buf)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let key = layout::index_key(metadata, index_type)?;
        let file = self.open(metadata, &key)?;
        let size = file
            .metadata()
            .map_err(|e| RemoteStorageError::io(&key, e))?
            .len();
        let len = usize::try_from(size).map_err(|_| {
            RemoteStorageError::invalid_argument(format!(
                "index {key} of {size} bytes does not fit in memory"
            ))
        })?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| RemoteStorageError::io(&key, e))?;
        Ok(buf)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let dir = self.path(&layout::partition_dir(metadata.topic_id_partition())?);
        if !dir.is_dir() {
            return Ok(());
        }
        // First, durably: the deleting manifest in place of whatever manifest is there, so a
        // delete cut short is never taken for a complete or an in-progress copy.
        let manifest_path = self.path(&layout::manifest_key(metadata)?);
        let deleting = Bytes::from(manifest::encode_deleting(metadata));
        match self.put(&manifest_path, IndexSource::Bytes(&deleting)) {
            Ok(()) => {}
            // A full disk must not stop the delete that frees it: the manifest goes first
            // instead, and a crash before the data is gone leaves objects with no manifest,
            // which recovery keeps (nothing of a live segment is lost).
            Err(RemoteStorageError::Io { source, .. })
                if source.kind() == io::ErrorKind::StorageFull =>
            {
                Self::remove(&manifest_path)?;
            }
            Err(e) => return Err(e),
        }
        sync_dir(&dir)?;
        for key in layout::data_keys(metadata)? {
            Self::remove(&self.path(&key))?;
        }
        Self::remove_stray_temps(&dir, &layout::segment_stem(metadata))?;
        sync_dir(&dir)?;
        // Last: the manifest.
        Self::remove(&manifest_path)?;
        sync_dir(&dir)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use krabka_remote_storage::{RemoteLogSegmentId, TopicIdPartition, Uuid};

    fn segment(
        dir: &Path,
        tp: &TopicIdPartition,
        start: u64,
    ) -> (RemoteLogSegmentMetadata, LogSegmentData) {
        for name in ["s.log", "s.index", "s.timeindex"] {
            fs::write(dir.join(name), b"abc").unwrap();
        }
        let m = RemoteLogSegmentMetadata::builder(
            RemoteLogSegmentId::generate(tp.clone()),
            start,
            start + 9,
        )
        .segment_size_in_bytes(3)
        .build()
        .unwrap();
        let data = LogSegmentData::new(
            dir.join("s.log"),
            dir.join("s.index"),
            dir.join("s.timeindex"),
        );
        (m, data)
    }

    /// A partition directory left by a crash between its `mkdir` and the root's fsync (or made
    /// by a racing thread) already exists; the next copy must still fsync the root, once.
    #[test]
    fn an_existing_partition_dir_still_gets_the_root_fsynced_once() {
        let root = tempfile::tempdir().unwrap();
        let local = tempfile::tempdir().unwrap();
        let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 3);
        fs::create_dir_all(root.path().join(layout::partition_dir(&tp).unwrap())).unwrap();
        let rsm = FsRemoteStorage::new(root.path()).unwrap();
        let (a, data) = segment(local.path(), &tp, 0);
        rsm.copy_log_segment_data(&a, &data).unwrap();
        assert_eq!(rsm.root_syncs.load(Ordering::Relaxed), 1);
        let (b, data) = segment(local.path(), &tp, 10);
        rsm.copy_log_segment_data(&b, &data).unwrap();
        assert_eq!(
            rsm.root_syncs.load(Ordering::Relaxed),
            1,
            "one root fsync per partition dir"
        );
        let other = TopicIdPartition::new(Uuid::new_v4(), "orders", 4);
        let (c, data) = segment(local.path(), &other, 0);
        rsm.copy_log_segment_data(&c, &data).unwrap();
        assert_eq!(rsm.root_syncs.load(Ordering::Relaxed), 2);
        // A new instance (a restarted process) cannot prove the entry durable: it fsyncs again.
        let again = FsRemoteStorage::new(root.path()).unwrap();
        let (d, data) = segment(local.path(), &tp, 20);
        again.copy_log_segment_data(&d, &data).unwrap();
        assert_eq!(again.root_syncs.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_range_error_names_the_segment() {
        let root = tempfile::tempdir().unwrap();
        let local = tempfile::tempdir().unwrap();
        let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
        let rsm = FsRemoteStorage::new(root.path()).unwrap();
        let (m, data) = segment(local.path(), &tp, 0);
        rsm.copy_log_segment_data(&m, &data).unwrap();
        let err = rsm.fetch_log_segment(&m, 3, Some(3)).unwrap_err();
        assert!(
            matches!(err, RemoteStorageError::InvalidArgument { .. }),
            "{err:?}"
        );
        let id = m.remote_log_segment_id().to_string();
        assert!(err.to_string().contains(&id), "{err}");
    }
}
