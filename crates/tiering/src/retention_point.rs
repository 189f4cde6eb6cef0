//! The durable whole-log retention point: a one-line file in the local log's directory.
//!
//! Whole-log retention moves the log's start past the remote segments it deletes. That point
//! must survive a restart: otherwise `first_seq()` could move backwards and local segments
//! already past retention could be copied again. It is written before any data is deleted
//! (write a temporary file, fsync it, rename it over the old one, fsync the directory), and
//! read when a [`TieredLog`](crate::TieredLog) is created. The storage layer ignores files that
//! are not segment files, so the file lives next to the segments.
//!
//! Format (one line): `log_start <seq> crc32 <8 lowercase hex digits>\n`, the CRC-32 (IEEE)
//! of the bytes `log_start <seq>`, the seq in canonical decimal. A file of the format written
//! before the checksum (`log_start <seq>\n`) is still read. Anything else is
//! [`Error::Checkpoint`] naming the file, never a guess.
//!
//! A value read back is trusted only after [`validate`] checked it against the local log and
//! the remote metadata: local retention deletes local segments below the point whether or not
//! they were copied, so a wrong point would lose records from both tiers.

use std::path::{Path, PathBuf};

use crate::error::Error;
use krabka_storage::kvfile;

/// Name of the retention point's file, in the local log's directory (`tiering-log-start`,
/// after Kafka's log start offset, which is what the point is; the name on disk is kept).
pub const RETENTION_POINT_FILE: &str = "tiering-log-start";
const PREFIX: &str = "log_start ";
/// More than any valid file holds (`log_start`, a seq and a checksum); a longer one is refused.
const MAX_FILE_BYTES: u64 = 128;

fn path(dir: &Path) -> PathBuf {
    dir.join(RETENTION_POINT_FILE)
}

fn error(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

#[cfg(test)]
/// The file's text for `seq`.
fn render(seq: u64) -> String {
    kvfile::render_line(&format!("{PREFIX}{seq}"))
}

/// The seq a file's line (without its checksum) records, or why it is refused.
fn parse_body(body: &str) -> Result<u64, String> {
    body.strip_prefix(PREFIX)
        .and_then(kvfile::parse_seq)
        .ok_or_else(|| format!("expected `{PREFIX}SEQ{}CRC`", kvfile::LINE_CRC_SEPARATOR))
}

#[cfg(test)]
/// The seq a file's text records (a line without a checksum is the format written before
/// it, still read), or why it is refused.
fn parse(text: &str) -> Result<u64, String> {
    kvfile::line_value(text, true, parse_body)
}

/// The retention point recorded in the tiered log directory `dir` (its [`RETENTION_POINT_FILE`]):
/// every seq below it was deleted by retention. 0 when there is no file yet. Checked for
/// damage but not against the tiers (a `TieredLog` does that when it opens). Exported as
/// `krabka_tiering::read_retention_point`.
///
/// # Errors
/// [`Error::Checkpoint`] naming the file when it cannot be read or is damaged.
pub fn read(dir: &Path) -> Result<u64, Error> {
    let path = path(dir);
    let parsed = match kvfile::read(&path, MAX_FILE_BYTES) {
        Ok(None) => return Ok(0),
        Ok(Some(text)) => kvfile::line_value(&text, true, parse_body),
        Err(kvfile::ReadError::Io(e)) => return Err(Error::checkpoint_io(&path, "read", e)),
        Err(e) => Err(format!("unreadable: {e}")),
    };
    parsed.map_err(|why| {
        error(
            &path,
            format!(
                "{why}. Restore it, or delete it to let tiering derive the start from the tiers \
                 again (local segments whose remote copies are gone are then copied again)"
            ),
        )
    })
}

/// What a retention point read back is checked against when a tiered log is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// The highest last seq of the partition's remote segments that whole-log retention may
    /// have deleted up to (finished, or being deleted); `None` when no such segment is listed.
    pub(crate) remote_end: Option<u64>,
    /// The first seq the local log holds (a hole a repair recorded counts); `None` when it
    /// holds no record.
    pub(crate) local_first: Option<u64>,
    /// The local log's next seq.
    pub(crate) local_next: u64,
}

/// Checks the retention point `point` read from `dir` against the tiers. Only whole-log
/// retention writes it, as the seq after the last remote segment it deletes, so it can never
/// exceed the remote end + 1 while anything is remote, nor the local first seq when nothing
/// is (local retention drops local segments below the point, so a point past the local first
/// seq would delete segments that were never copied), nor the local next seq (unless the local
/// log holds no record: it then continues after the remote end, at the point or later).
///
/// # Errors
/// [`Error::Checkpoint`] naming the file, the point and the bound it exceeds.
pub(crate) fn validate(dir: &Path, point: u64, bounds: Bounds) -> Result<(), Error> {
    let (bound, what) = match (bounds.remote_end, bounds.local_first) {
        (Some(end), _) if point > end.saturating_add(1) => (
            end.saturating_add(1),
            format!("the remote tier ends at seq {end}"),
        ),
        (Some(_), Some(_)) if point > bounds.local_next => (
            bounds.local_next,
            format!("the local log's next seq is {}", bounds.local_next),
        ),
        (None, first) if point > first.unwrap_or(bounds.local_next) => {
            let first = first.unwrap_or(bounds.local_next);
            (
                first,
                format!("nothing is remote and the local log starts at seq {first}"),
            )
        }
        _ => return Ok(()),
    };
    Err(error(
        &path(dir),
        format!(
            "it records retention point {point}, but {what}: a retention point is at most \
             {bound} here. Only remote retention writes this file, so it is damaged or belongs \
             to another log; trusting it would delete local segments that were never copied. \
             Nothing was changed: restore the right file, or delete it to let tiering derive \
             the start from the tiers (local segments whose remote copies are gone are then \
             copied again)"
        ),
    ))
}

/// Durably records `seq` as the retention point in `dir` (a temporary file, fsynced, renamed
/// over the old one, then the directory fsynced).
pub(crate) fn write(dir: &Path, seq: u64) -> Result<(), Error> {
    let path = path(dir);
    kvfile::write(&path, &kvfile::render_line(&format!("{PREFIX}{seq}")))
        .map_err(|e| Error::checkpoint_io(&path, "write", e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::fs;

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
        assert_eq!(names, [RETENTION_POINT_FILE], "no temporary file is left");
    }

    #[test]
    fn the_file_carries_a_crc32_of_its_line() {
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            render(1000),
            format!(
                "log_start 1000 crc32 {:08x}\n",
                crc32fast::hash(b"log_start 1000")
            )
        );
        assert_eq!(parse(&render(u64::MAX)), Ok(u64::MAX));
        assert_eq!(parse(&render(0)), Ok(0));
    }

    #[test]
    fn the_format_without_checksum_is_still_read() {
        assert_eq!(parse("log_start 2965\n"), Ok(2965));
    }

    #[test]
    fn garbage_is_an_error_naming_the_file() {
        let good = render(2965);
        let flipped = good.replace("2965", "2966");
        let bad_crc = good.replace(" crc32 ", " crc32 0");
        for text in [
            "log_start x\n",
            "log_start 12",
            "log_start +12\n",
            "log_start 012\n",
            "log_start 12\n\n",
            "",
            "log_start 12 crc32 zzzzzzzz\n",
            flipped.as_str(),
            bad_crc.as_str(),
            &good[..good.len() - 1],
            &good[..good.len() - 3],
        ] {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join(RETENTION_POINT_FILE), text).unwrap();
            let e = read(dir.path()).unwrap_err();
            assert!(matches!(e, Error::Checkpoint { .. }), "{text:?}: {e}");
            assert!(e.to_string().contains(RETENTION_POINT_FILE), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(RETENTION_POINT_FILE), "x".repeat(1000)).unwrap();
        let too_long = read(dir.path());
        assert!(
            matches!(&too_long, Err(Error::Checkpoint { path, reason })
                if path.ends_with(RETENTION_POINT_FILE) && reason.contains("longer than")),
            "{too_long:?}"
        );
        fs::remove_file(dir.path().join(RETENTION_POINT_FILE)).unwrap();
        fs::create_dir(dir.path().join(RETENTION_POINT_FILE)).unwrap();
        assert!(matches!(
            read(dir.path()).unwrap_err(),
            Error::Checkpoint { .. }
        ));
    }

    #[test]
    fn a_point_past_what_retention_could_have_written_is_refused() {
        let dir = Path::new("/some/log");
        let b = |remote_end, local_first, local_next| Bounds {
            remote_end,
            local_first,
            local_next,
        };
        let ok = |point, bounds| validate(dir, point, bounds).is_ok();
        // Nothing remote: at most the local first seq (or the next seq of an empty log).
        assert!(ok(0, b(None, Some(1), 3001)));
        assert!(ok(1, b(None, Some(1), 3001)));
        assert!(!ok(2000, b(None, Some(1), 3001)));
        assert!(!ok(99_999, b(None, Some(1), 3001)));
        assert!(ok(500, b(None, Some(500), 3001)));
        assert!(ok(7, b(None, None, 7)));
        assert!(!ok(8, b(None, None, 7)));
        // Something remote: at most its end + 1, and the local next seq.
        assert!(ok(1001, b(Some(1000), Some(1), 3001)));
        assert!(!ok(1002, b(Some(1000), Some(1), 3001)));
        assert!(!ok(3002, b(Some(5000), Some(1), 3001)));
        // An empty local log continues after the remote end.
        assert!(ok(1001, b(Some(1000), None, 1)));
        let e = validate(dir, 2000, b(None, Some(1), 3001)).unwrap_err();
        let shown = e.to_string();
        assert!(
            shown.contains(RETENTION_POINT_FILE) && shown.contains("2000"),
            "{shown}"
        );
        assert!(shown.contains("starts at seq 1"), "{shown}");
    }
}
