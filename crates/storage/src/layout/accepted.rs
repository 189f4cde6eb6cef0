//! Holes the user accepted (`krabka repair DIR --accept-hole`): the explicit holes whose seqs
//! are known lost and may be passed by whoever waits for them (tiering copies and retention),
//! recorded durably in [`ACCEPTED_HOLES_FILE_NAME`]. Reads of an accepted hole still fail
//! naming it ([`Error::Quarantined`]); accepting changes no segment file and no hole marker.
//!
//! The file is text, replaced atomically (temporary file, fsync, rename, directory fsync): a
//! header line `krabka accepted holes v1`, then one line per accepted hole,
//! `FIRST LAST ACCEPTED_AT_MS` (decimal seqs and milliseconds since the Unix epoch), sorted.
//! Anything else fails the open naming the file and the byte (a repair moves the file aside
//! into the quarantine directory).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::Error;
use crate::fsutil::write_atomic_named;

/// Name of the file in a log directory that records which explicit holes the user accepted and
/// when (see [`AcceptedHole`], [`Log::accept_holes`](crate::Log::accept_holes)).
pub const ACCEPTED_HOLES_FILE_NAME: &str = "accepted-holes";

/// The temporary file [`ACCEPTED_HOLES_FILE_NAME`] is written through.
pub(crate) const ACCEPTED_HOLES_TMP: &str = "accepted-holes.tmp";

const HEADER: &str = "krabka accepted holes v1";

/// Largest accepted-holes file read (a line is at most 62 bytes; this is far more than any
/// log has holes).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// An explicit hole the user accepted as lost: tiering copies and retention go on past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AcceptedHole {
    /// First seq of the hole.
    pub first_seq: u64,
    /// Last seq of the hole.
    pub last_seq: u64,
    /// When it was accepted, in milliseconds since the Unix epoch.
    pub accepted_at_ms: i64,
}

impl AcceptedHole {
    /// Whether this acceptance covers every seq of `first..=last`.
    pub fn covers(&self, first: u64, last: u64) -> bool {
        self.first_seq <= first && last <= self.last_seq
    }
}

/// The holes accepted in the log directory `dir` (empty when it has no
/// [`ACCEPTED_HOLES_FILE_NAME`]), sorted by first seq. Reads only that file: for tools that
/// look at a log without opening it.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; [`Error::Corrupt`] naming the file and byte when
/// it does not decode.
pub fn read_accepted_holes(dir: &Path) -> Result<Vec<AcceptedHole>, Error> {
    let path = dir.join(ACCEPTED_HOLES_FILE_NAME);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let mut text = String::new();
    let read = file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text);
    match read {
        Ok(n) if n as u64 > MAX_FILE_BYTES => Err(corrupt(
            &path,
            MAX_FILE_BYTES,
            format!("longer than {MAX_FILE_BYTES} bytes"),
        )),
        Ok(_) => decode(&text, &path),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            Err(corrupt(&path, 0, "not UTF-8 text".into()))
        }
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Durably replaces the accepted-holes file of `dir` with `holes`.
pub(crate) fn write_accepted_holes(dir: &Path, holes: &[AcceptedHole]) -> Result<(), Error> {
    let mut text = format!("{HEADER}\n");
    for h in holes {
        text.push_str(&format!(
            "{} {} {}\n",
            h.first_seq, h.last_seq, h.accepted_at_ms
        ));
    }
    write_atomic_named(
        &dir.join(ACCEPTED_HOLES_FILE_NAME),
        &dir.join(ACCEPTED_HOLES_TMP),
        text.as_bytes(),
    )
}

fn corrupt(path: &Path, position: u64, reason: String) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        position,
        reason: format!("accepted-holes file: {reason}"),
    }
}

fn decode(text: &str, path: &Path) -> Result<Vec<AcceptedHole>, Error> {
    let mut holes = Vec::new();
    let mut position = 0u64;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let at = position;
        position += line.len() as u64;
        let Some(line) = line.strip_suffix('\n') else {
            return Err(corrupt(path, at, "the last line is cut short".into()));
        };
        if n == 0 {
            if line != HEADER {
                return Err(corrupt(
                    path,
                    at,
                    format!("the first line is not `{HEADER}`"),
                ));
            }
            continue;
        }
        let fields: Vec<&str> = line.split(' ').collect();
        let parsed = match fields.as_slice() {
            [first, last, at_ms] => first
                .parse::<u64>()
                .ok()
                .zip(last.parse::<u64>().ok())
                .zip(at_ms.parse::<i64>().ok()),
            _ => None,
        };
        let Some(((first_seq, last_seq), accepted_at_ms)) =
            parsed.filter(|((first, last), _)| *first >= 1 && first <= last)
        else {
            return Err(corrupt(
                path,
                at,
                format!(
                    "line {} is not `FIRST LAST ACCEPTED_AT_MS` with 1 <= FIRST <= LAST",
                    n + 1
                ),
            ));
        };
        holes.push(AcceptedHole {
            first_seq,
            last_seq,
            accepted_at_ms,
        });
    }
    if text.is_empty() {
        return Err(corrupt(path, 0, "empty".into()));
    }
    holes.sort();
    Ok(holes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_holes_round_trip_and_damage_names_the_byte() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_accepted_holes(dir.path()).unwrap().is_empty());
        let holes = [
            AcceptedHole {
                first_seq: 9,
                last_seq: 9,
                accepted_at_ms: 1_700_000_000_000,
            },
            AcceptedHole {
                first_seq: 20,
                last_seq: 31,
                accepted_at_ms: 5,
            },
        ];
        write_accepted_holes(dir.path(), &holes).unwrap();
        assert_eq!(read_accepted_holes(dir.path()).unwrap(), holes);
        assert!(holes[1].covers(20, 31) && !holes[1].covers(19, 20));
        let path = dir.path().join(ACCEPTED_HOLES_FILE_NAME);
        let text = std::fs::read_to_string(&path).unwrap();
        let second = text.find("20 ").unwrap() as u64;
        std::fs::write(&path, text.replace("20 31", "31 20")).unwrap();
        match read_accepted_holes(dir.path()) {
            Err(Error::Corrupt { position, .. }) => assert_eq!(position, second),
            other => panic!("{other:?}"),
        }
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            read_accepted_holes(dir.path()),
            Err(Error::Corrupt { .. })
        ));
        std::fs::write(&path, format!("{HEADER}\n9 9 1")).unwrap();
        assert!(matches!(
            read_accepted_holes(dir.path()),
            Err(Error::Corrupt { .. })
        ));
    }
}
