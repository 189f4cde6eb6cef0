//! The recovery point file: the seq up to which a log held every record, synced (written at
//! close, at a synced roll and by `start_at`).

use std::fs;
use std::io;
use std::path::Path;

use crate::fsutil;
use crate::{Error, RECOVERY_POINT_FILE_NAME};

pub(crate) const RECOVERY_POINT_TMP: &str = "recovery-point.tmp";

const RECOVERY_POINT_MAGIC: [u8; 4] = *b"KRPT";

/// Writes the recovery point file: magic, version, the seq and a CRC, through a synced temporary
/// file renamed into place (then the directory is synced).
pub(crate) fn write_recovery_point(dir: &Path, seq: u64) -> Result<(), Error> {
    let mut buf = Vec::with_capacity(20);
    buf.extend_from_slice(&RECOVERY_POINT_MAGIC);
    buf.extend_from_slice(&[1, 0, 0, 0]);
    buf.extend_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    let tmp = dir.join(RECOVERY_POINT_TMP);
    let path = dir.join(RECOVERY_POINT_FILE_NAME);
    fsutil::write_atomic_named(&path, &tmp, &buf)
}

/// Reads the recovery point of the log in `dir` (its
/// [`RECOVERY_POINT_FILE_NAME`](crate::RECOVERY_POINT_FILE_NAME) file): a seq up to which the
/// log held every record, synced, when it was last closed or rolled. `None` when the file does
/// not exist. Read-only tools use it to tell a torn write from missing data: segment files that
/// end below it have lost records.
///
/// # Errors
/// [`Error::Corrupt`] naming the file when it is damaged; [`Error::Io`].
pub fn read_recovery_point(dir: &Path) -> Result<Option<u64>, Error> {
    let path = dir.join(RECOVERY_POINT_FILE_NAME);
    let buf = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
            return Err(Error::Corrupt {
                path,
                position: 0,
                reason: "the recovery point is a directory".into(),
            });
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    let corrupt = |position: u64, reason: String| Error::Corrupt {
        path: path.clone(),
        position,
        reason,
    };
    if buf.len() != 20 {
        return Err(corrupt(0, format!("{} bytes, expected 20", buf.len())));
    }
    if buf.get(..4) != Some(&RECOVERY_POINT_MAGIC[..]) || buf.get(4) != Some(&1) {
        return Err(corrupt(0, "bad magic or version".into()));
    }
    let word = |r: std::ops::Range<usize>| buf.get(r).unwrap_or_default();
    let crc = u32::from_le_bytes(word(16..20).try_into().unwrap_or_default());
    if crc32fast::hash(word(0..16)) != crc {
        return Err(corrupt(16, "CRC mismatch".into()));
    }
    Ok(Some(u64::from_le_bytes(
        word(8..16).try_into().unwrap_or_default(),
    )))
}
