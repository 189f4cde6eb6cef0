//! The seqs a recovery from the remote tier found used but could not recover: a one-line file
//! in the local log's directory.
//!
//! When the newest segments the bucket describes are damaged, unreadable or were never copied
//! whole (an abandoned copy), recovery ends its range below them but starts the local log
//! after them, so that no seq a writer acknowledged is ever used again for another record.
//! The seqs between are in neither tier. This file records them so that opening the tiered
//! log accepts that gap (it would otherwise refuse it as
//! [`Mismatch::Gap`](crate::policy::Mismatch::Gap)) and a read of them fails naming them
//! ([`Error::RemoteHole`](crate::ReadError::RemoteHole)).
//!
//! Format (one line): `lost <first>..=<last> crc32 <8 lowercase hex digits>\n`, the CRC-32
//! (IEEE) of the bytes before ` crc32`, the seqs in canonical decimal. Written atomically (a
//! temporary file, fsynced, renamed, the directory fsynced); anything else is
//! [`Error::Checkpoint`] naming the file, never a guess.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use crate::error::Error;
use krabka_storage::kvfile;

/// Name of the file, in the local log's directory.
pub const LOST_SEQS_FILE: &str = "tiering-lost-seqs";
const PREFIX: &str = "lost ";
/// More than any valid file holds; a longer one is refused unread.
const MAX_FILE_BYTES: u64 = 128;

fn path(dir: &Path) -> PathBuf {
    dir.join(LOST_SEQS_FILE)
}

fn error(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

#[cfg(test)]
fn render(seqs: &RangeInclusive<u64>) -> String {
    kvfile::render_line(&body(seqs))
}

fn body(seqs: &RangeInclusive<u64>) -> String {
    format!("{PREFIX}{}..={}", seqs.start(), seqs.end())
}

/// The seqs a file's line (without its checksum) records, or why it is refused.
fn parse_body(body: &str) -> Result<RangeInclusive<u64>, String> {
    body.strip_prefix(PREFIX)
        .and_then(|r| r.split_once("..="))
        .and_then(|(a, b)| Some((kvfile::parse_seq(a)?, kvfile::parse_seq(b)?)))
        .filter(|(a, b)| 0 < *a && a <= b)
        .map(|(a, b)| a..=b)
        .ok_or_else(|| {
            format!(
                "expected `{PREFIX}FIRST..=LAST{}CRC`",
                kvfile::LINE_CRC_SEPARATOR
            )
        })
}

/// The lost seqs recorded in `dir`, if any.
///
/// # Errors
/// [`Error::Checkpoint`] naming the file when it cannot be read or is damaged.
pub fn read(dir: &Path) -> Result<Option<RangeInclusive<u64>>, Error> {
    let path = path(dir);
    let parsed = match kvfile::read(&path, MAX_FILE_BYTES) {
        Ok(None) => return Ok(None),
        Ok(Some(text)) => kvfile::line_value(&text, false, parse_body),
        Err(kvfile::ReadError::Io(e)) => return Err(Error::checkpoint_io(&path, "read", e)),
        Err(e) => Err(format!("unreadable: {e}")),
    };
    parsed.map(Some).map_err(|why| {
        error(
            &path,
            format!("{why}. Restore it, or run `recover` again into a new directory"),
        )
    })
}

/// Durably records `seqs` as lost in `dir`.
pub(crate) fn write(dir: &Path, seqs: &RangeInclusive<u64>) -> Result<(), Error> {
    let path = path(dir);
    kvfile::write(&path, &kvfile::render_line(&body(seqs)))
        .map_err(|e| Error::checkpoint_io(&path, "write", e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::fs;

    use super::*;

    #[test]
    fn round_trips_and_is_absent_by_default() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), &(293..=296)).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(293..=296));
    }

    #[test]
    fn every_damage_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &(10..=20)).unwrap();
        let good = fs::read(path(dir.path())).unwrap();
        let mut cases: Vec<Vec<u8>> = (0..good.len())
            .map(|i| {
                let mut b = good.clone();
                b[i] ^= 0x01;
                b
            })
            .collect();
        cases.extend((0..good.len()).map(|n| good[..n].to_vec()));
        cases.push(render(&RangeInclusive::new(20, 10)).into_bytes());
        cases.push(render(&(0..=3)).into_bytes());
        cases.push(vec![b'x'; 4096]);
        for bytes in cases {
            fs::write(path(dir.path()), &bytes).unwrap();
            let e = read(dir.path()).unwrap_err();
            assert!(
                matches!(&e, Error::Checkpoint { path: p, .. } if p.ends_with(LOST_SEQS_FILE)),
                "{bytes:?}: {e}"
            );
        }
    }
}
