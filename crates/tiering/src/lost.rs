//! The seqs a recovery from the remote tier found used but could not recover: a one-line file
//! in the local log's directory.
//!
//! When the newest segments the bucket describes are damaged, unreadable or were never copied
//! whole (an abandoned copy), recovery ends its range below them but starts the local log
//! after them, so that no seq a writer acknowledged is ever used again for another record.
//! The seqs between are in neither tier. This file records them so that opening the tiered
//! log accepts that gap (it would otherwise refuse it as
//! [`Mismatch::Gap`](crate::policy::Mismatch::Gap)) and a read of them fails naming them
//! ([`Error::RemoteHole`](crate::Error::RemoteHole)).
//!
//! Format (one line): `lost <first>..=<last> crc32 <8 lowercase hex digits>\n`, the CRC-32
//! (IEEE) of the bytes before ` crc32`, the seqs in canonical decimal. Written atomically (a
//! temporary file, fsynced, renamed, the directory fsynced); anything else is
//! [`Error::Checkpoint`] naming the file, never a guess.

use std::fs::File;
use std::io::{self, Read};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use krabka_storage::fsutil;

use crate::error::Error;

/// Name of the file, in the local log's directory.
pub const LOST_SEQS_FILE: &str = "tiering-lost-seqs";
const PREFIX: &str = "lost ";
const CRC_SEPARATOR: &str = " crc32 ";
/// More than any valid file.
const MAX_LEN: u64 = 128;

fn path(dir: &Path) -> PathBuf {
    dir.join(LOST_SEQS_FILE)
}

fn error(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn render(seqs: &RangeInclusive<u64>) -> String {
    let body = format!("{PREFIX}{}..={}", seqs.start(), seqs.end());
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}{CRC_SEPARATOR}{crc:08x}\n")
}

fn parse_seq(digits: &str) -> Option<u64> {
    let seq: u64 = digits.parse().ok()?;
    (seq.to_string() == digits).then_some(seq)
}

fn parse(text: &str) -> Result<RangeInclusive<u64>, String> {
    let expected = || format!("expected `{PREFIX}FIRST..=LAST{CRC_SEPARATOR}CRC`");
    let line = text
        .strip_suffix('\n')
        .filter(|l| !l.contains('\n'))
        .ok_or("it is not one line ending in a newline")?;
    let (body, crc) = line.split_once(CRC_SEPARATOR).ok_or_else(expected)?;
    let (first, last) = body
        .strip_prefix(PREFIX)
        .and_then(|r| r.split_once("..="))
        .and_then(|(a, b)| Some((parse_seq(a)?, parse_seq(b)?)))
        .filter(|(a, b)| 0 < *a && a <= b)
        .ok_or_else(expected)?;
    let stored = (crc.len() == 8 && crc.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u32::from_str_radix(crc, 16).ok())
        .flatten()
        .ok_or("the checksum is not 8 lowercase hex digits")?;
    let computed = crc32fast::hash(body.as_bytes());
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
        ));
    }
    Ok(first..=last)
}

/// The lost seqs recorded in `dir`, if any.
///
/// # Errors
/// [`Error::Checkpoint`] naming the file when it cannot be read or is damaged.
pub fn read(dir: &Path) -> Result<Option<RangeInclusive<u64>>, Error> {
    let path = path(dir);
    let mut bytes = Vec::new();
    let read = File::open(&path).and_then(|f| f.take(MAX_LEN + 1).read_to_end(&mut bytes));
    match read {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(&path, format!("cannot read: {e}"))),
    }
    let text = String::from_utf8_lossy(&bytes);
    let parsed = if bytes.len() as u64 > MAX_LEN {
        Err(format!("it is longer than {MAX_LEN} bytes"))
    } else {
        parse(&text)
    };
    parsed.map(Some).map_err(|why| {
        error(
            &path,
            format!(
                "unreadable: {why}; found {:?}. Restore it, or run `recover` again into a new \
                 directory",
                text.chars().take(60).collect::<String>()
            ),
        )
    })
}

/// Durably records `seqs` as lost in `dir`.
pub(crate) fn write(dir: &Path, seqs: &RangeInclusive<u64>) -> Result<(), Error> {
    let path = path(dir);
    let tmp = dir.join(format!("{LOST_SEQS_FILE}.tmp"));
    fsutil::write_atomic(&path, &tmp, render(seqs).as_bytes())
        .map_err(|e| error(&path, format!("cannot write: {e}")))
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
