//! The quarantine directory: where recovery moves damaged bytes, stray files and the markers
//! of explicit holes (never deleting anything), each copy synced before its source changes.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::Recoverer;
use crate::fsutil::{self, IoResultExt};
use crate::segment::{
    INDEX_EXTENSION, LOG_EXTENSION, QUARANTINE_DIR, TIME_INDEX_EXTENSION, hole_file_name,
    segment_file_name,
};
use crate::{Error, QuarantinedPiece};

impl Recoverer<'_> {
    /// The quarantine directory, created and its entry synced on first use.
    pub(super) fn quarantine_dir(&mut self) -> Result<PathBuf, Error> {
        let qdir = self.dir.join(QUARANTINE_DIR);
        if !self.quarantine_ready {
            match fs::create_dir(&qdir) {
                Ok(()) => fsutil::fsync_dir(self.dir).at(self.dir)?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !qdir.is_dir() {
                        return Err(Error::NotADirectory { path: qdir });
                    }
                }
                Err(e) => return Err(Error::io(&qdir, e)),
            }
            self.quarantine_ready = true;
        }
        Ok(qdir)
    }

    /// A name in the quarantine directory that is not taken yet.
    pub(super) fn free_name(&mut self, name: &str) -> Result<PathBuf, Error> {
        let qdir = self.quarantine_dir()?;
        let mut path = qdir.join(name);
        let mut n = 1;
        while fs::symlink_metadata(&path).is_ok() {
            path = qdir.join(format!("{name}.{n}"));
            n += 1;
        }
        Ok(path)
    }

    /// Copies bytes `from..to` of `src` (at `src_path`) into the quarantine directory and syncs
    /// them there, then truncates `src` to `from` and syncs it. With `seqs`, the copy is the
    /// marker of the hole `seqs` (named by [`hole_file_name`]); `src` may then be `None` (no
    /// bytes: seqs found missing).
    pub(super) fn quarantine_bytes(
        &mut self,
        src: Option<&File>,
        src_path: &Path,
        from: u64,
        to: u64,
        seqs: Option<(u64, u64)>,
        reason: &str,
    ) -> Result<(), Error> {
        self.save_bytes(src, src_path, from, to, seqs, reason)?;
        if let Some(src) = src {
            src.set_len(from)
                .and_then(|()| src.sync_all())
                .map_err(|e| Error::io(src_path, e))?;
        }
        if let Some((first, last)) = seqs
            && src.is_none()
        {
            let marker = self.quarantine_dir()?.join(hole_file_name(first, last));
            self.push_hole(first, last, marker);
        }
        Ok(())
    }

    /// The first half of [`quarantine_bytes`](Self::quarantine_bytes): the copy into the
    /// quarantine directory, synced there and reported, leaving `src` as it is.
    pub(super) fn save_bytes(
        &mut self,
        src: Option<&File>,
        src_path: &Path,
        from: u64,
        to: u64,
        seqs: Option<(u64, u64)>,
        reason: &str,
    ) -> Result<(), Error> {
        let name = match seqs {
            Some((first, last)) => hole_file_name(first, last),
            None => format!(
                "{}.at-{from}",
                src_path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("segment")
            ),
        };
        let mut target = self.free_name(&name)?;
        if seqs.is_some() && target.file_name() != Some(name.as_ref()) {
            // An earlier, interrupted repair left the marker: keep it, save these bytes beside
            // it under a free name.
            let keep = self.free_name(&format!("{name}.bytes"))?;
            target = keep;
        }
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| Error::io(&target, e))?;
        if let Some(src) = src {
            copy_range(src, src_path, from..to, &mut out, &target)?;
        }
        out.sync_all().map_err(|e| Error::io(&target, e))?;
        drop(out);
        let qdir = self.quarantine_dir()?;
        fsutil::fsync_dir(&qdir).at(&qdir)?;
        tracing::warn!(
            from = %src_path.display(),
            position = from,
            bytes = to - from,
            to = %target.display(),
            reason,
            "moved damaged bytes into the quarantine directory"
        );
        self.report.quarantined.push(QuarantinedPiece {
            from: src_path.to_path_buf(),
            position: from,
            bytes: to - from,
            to: target,
            seqs,
            reason: reason.to_owned(),
        });
        Ok(())
    }

    /// Moves one file or directory whole into the quarantine directory.
    pub(super) fn move_path_aside(&mut self, path: &Path, reason: &str) -> Result<(), Error> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("entry")
            .to_owned();
        let to = self.free_name(&name)?;
        fs::rename(path, &to).map_err(|e| Error::io(path, e))?;
        let qdir = self.quarantine_dir()?;
        fsutil::fsync_dir(&qdir).at(&qdir)?;
        if let Some(parent) = path.parent() {
            fsutil::fsync_dir(parent).at(parent)?;
        }
        tracing::warn!(from = %path.display(), to = %to.display(), reason, "moved an entry into the quarantine directory");
        self.report.quarantined.push(QuarantinedPiece {
            from: path.to_path_buf(),
            position: 0,
            bytes: 0,
            to,
            seqs: None,
            reason: reason.to_owned(),
        });
        Ok(())
    }

    /// Moves the files of segment `base` whole into the quarantine directory (renames, then
    /// syncs both directories).
    pub(super) fn move_aside(&mut self, base: u64, reason: &str) -> Result<(), Error> {
        for suffix in [LOG_EXTENSION, INDEX_EXTENSION, TIME_INDEX_EXTENSION] {
            let name = segment_file_name(base, suffix);
            let from = self.dir.join(&name);
            let bytes = match fs::symlink_metadata(&from) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&from, e)),
            };
            let to = self.free_name(&name)?;
            fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
            tracing::warn!(from = %from.display(), to = %to.display(), reason, "moved a segment file into the quarantine directory");
            self.report.quarantined.push(QuarantinedPiece {
                from,
                position: 0,
                bytes,
                to,
                seqs: None,
                reason: reason.to_owned(),
            });
        }
        let qdir = self.quarantine_dir()?;
        fsutil::fsync_dir(&qdir).at(&qdir)?;
        fsutil::fsync_dir(self.dir).at(self.dir)
    }
}

/// Copies bytes `range` of `src` (at `src_path`) into `out` (at `target`), 1 MiB at a time.
pub(super) fn copy_range(
    src: &File,
    src_path: &Path,
    range: Range<u64>,
    out: &mut File,
    target: &Path,
) -> Result<(), Error> {
    let mut pos = range.start;
    let mut buf = vec![0u8; 1 << 20];
    while pos < range.end {
        let n = usize::try_from((range.end - pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let chunk = buf.get_mut(..n).unwrap_or_default();
        src.read_exact_at(chunk, pos)
            .map_err(|e| Error::io(src_path, e))?;
        io::Write::write_all(out, chunk).map_err(|e| Error::io(target, e))?;
        pos += n as u64;
    }
    Ok(())
}
