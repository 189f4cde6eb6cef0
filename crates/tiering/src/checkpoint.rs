//! The durable whole-log retention point: a one-line file in the local log's directory.
//!
//! Whole-log retention moves the log's start past the remote segments it deletes. That point
//! must survive a restart: otherwise `first_seq()` could move backwards and local segments
//! already past retention could be copied again. It is written before any data is deleted
//! (write a temporary file, fsync it, rename it over the old one, fsync the directory), and
//! read when a [`TieredLog`](crate::TieredLog) is created. The storage layer ignores files that
//! are not segment files, so the checkpoint lives next to the segments.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::Error;

/// Name of the checkpoint file, in the local log's directory.
pub const LOG_START_FILE: &str = "tiering-log-start";
const TMP_SUFFIX: &str = ".tmp";
const PREFIX: &str = "log_start ";

fn path(dir: &Path) -> PathBuf {
    dir.join(LOG_START_FILE)
}

fn error(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The retention point recorded in `dir`; 0 when there is no checkpoint yet.
pub(crate) fn read(dir: &Path) -> Result<u64, Error> {
    let path = path(dir);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(error(&path, format!("cannot read: {e}"))),
    };
    text.strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_suffix('\n'))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            error(
                &path,
                format!(
                    "unexpected content {:?} (expected `{PREFIX}SEQ`); restore it, or delete it \
                     to let tiering derive the start from the remote tier again",
                    text.chars().take(60).collect::<String>()
                ),
            )
        })
}

/// Durably records `seq` as the retention point in `dir`.
pub(crate) fn write(dir: &Path, seq: u64) -> Result<(), Error> {
    let path = path(dir);
    let tmp = dir.join(format!("{LOG_START_FILE}{TMP_SUFFIX}"));
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(format!("{PREFIX}{seq}\n").as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    })();
    written.map_err(|e| error(&path, format!("cannot write: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trips_and_defaults_to_zero() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), 0);
        write(dir.path(), 42).unwrap();
        assert_eq!(read(dir.path()).unwrap(), 42);
        write(dir.path(), 1000).unwrap();
        assert_eq!(read(dir.path()).unwrap(), 1000);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [LOG_START_FILE], "no temporary file is left");
    }

    #[test]
    fn garbage_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(LOG_START_FILE), "log_start x\n").unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(matches!(e, Error::Checkpoint { .. }), "{e}");
        assert!(e.to_string().contains(LOG_START_FILE));
    }
}
