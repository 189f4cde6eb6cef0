//! Segment file names: `<base seq, 20 digits>.<extension>` for the three files of a segment,
//! and the quarantine directory with its hole markers.

use std::path::{Path, PathBuf};

/// File extension of a segment's records: `"log"`, **without** the dot, as
/// [`Path::extension`] returns it (`00000000000000000001.log`). Compare a whole file name with
/// [`parse_segment_file_name`] or [`is_segment_file_name`] rather than by suffix.
pub const LOG_EXTENSION: &str = "log";

/// File extension of a segment's sparse offset index: `"index"`, without the dot.
pub const INDEX_EXTENSION: &str = "index";

/// File extension of a segment's time index: `"timeindex"`, without the dot.
pub const TIME_INDEX_EXTENSION: &str = "timeindex";

/// Digits of the zero-padded base seq that starts every segment file name.
const NAME_DIGITS: usize = 20;

/// The file name of a segment file: the base seq as 20 zero-padded digits, a dot and
/// `extension` (one of [`LOG_EXTENSION`], [`INDEX_EXTENSION`], [`TIME_INDEX_EXTENSION`]).
///
/// ```
/// use krabka_storage::segment::{LOG_EXTENSION, segment_file_name};
/// assert_eq!(segment_file_name(1, LOG_EXTENSION), "00000000000000000001.log");
/// ```
pub fn segment_file_name(base_seq: u64, extension: &str) -> String {
    let mut name = String::with_capacity(21 + extension.len());
    push_padded(&mut name, base_seq);
    name.push('.');
    name.push_str(extension);
    name
}

/// Appends `n` as 20 zero-padded decimal digits (what `{n:020}` gives, without the
/// formatting machinery: an open builds three names per segment).
fn push_padded(out: &mut String, mut n: u64) {
    let mut digits = [b'0'; 20];
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend(digits.iter().map(|&d| char::from(d)));
}

/// Parses a segment file name into its base seq and extension (one of [`LOG_EXTENSION`],
/// [`INDEX_EXTENSION`], [`TIME_INDEX_EXTENSION`]); `None` for any other name (stray files in a
/// log directory are ignored, not errors).
///
/// ```
/// use krabka_storage::segment::{INDEX_EXTENSION, parse_segment_file_name};
/// assert_eq!(parse_segment_file_name("00000000000000000042.index"), Some((42, INDEX_EXTENSION)));
/// assert_eq!(parse_segment_file_name("42.log"), None);
/// ```
pub fn parse_segment_file_name(name: &str) -> Option<(u64, &str)> {
    let (digits, extension) = name.split_once('.')?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if ![LOG_EXTENSION, INDEX_EXTENSION, TIME_INDEX_EXTENSION].contains(&extension) {
        return None;
    }
    Some((digits.parse().ok()?, extension))
}

/// Whether `name` is the name of a segment file (`<20 digits>.log`, `.index` or
/// `.timeindex`), as [`parse_segment_file_name`] accepts it.
///
/// ```
/// use krabka_storage::segment::is_segment_file_name;
/// assert!(is_segment_file_name("00000000000000000007.timeindex"));
/// assert!(!is_segment_file_name("00000000000000000007.log.tmp"));
/// assert!(!is_segment_file_name("CURRENT"));
/// ```
pub fn is_segment_file_name(name: &str) -> bool {
    parse_segment_file_name(name).is_some()
}

/// The directory inside a log directory where damaged bytes, stray files and the markers of
/// explicit holes are moved by recovery (never deleted).
pub const QUARANTINE_DIR: &str = "quarantine";

/// File name suffix of a quarantine file that marks an explicit hole in a log's seqs.
pub const HOLE_SUFFIX: &str = "quarantined";

/// The name of the quarantine file marking the explicit hole `first..=last` (the seqs a repair
/// moved aside or found missing); it holds the bytes moved aside, if any.
///
/// ```
/// use krabka_storage::segment::{hole_file_name, parse_hole_file_name};
/// let name = hole_file_name(101, 200);
/// assert_eq!(name, "00000000000000000101-00000000000000000200.quarantined");
/// assert_eq!(parse_hole_file_name(&name), Some((101, 200)));
/// assert_eq!(parse_hole_file_name("00000000000000000101.log"), None);
/// ```
pub fn hole_file_name(first: u64, last: u64) -> String {
    format!("{first:020}-{last:020}.{HOLE_SUFFIX}")
}

/// Parses a hole marker's file name (see [`hole_file_name`]) into its seq range; `None` for any
/// other name or an empty range.
pub fn parse_hole_file_name(name: &str) -> Option<(u64, u64)> {
    let (range, suffix) = name.split_once('.')?;
    if suffix != HOLE_SUFFIX {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let digits = |d: &str| d.len() == 20 && d.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return None;
    }
    let (first, last) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
    (first >= 1 && first <= last).then_some((first, last))
}

/// Paths of a segment's three files in `dir`.
pub(crate) fn segment_paths(dir: &Path, base_seq: u64) -> (PathBuf, PathBuf, PathBuf) {
    let log = dir.join(segment_file_name(base_seq, LOG_EXTENSION));
    let index = log.with_extension(INDEX_EXTENSION);
    let time_index = log.with_extension(TIME_INDEX_EXTENSION);
    (log, index, time_index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip_and_strays_are_rejected() {
        let n = segment_file_name(123, TIME_INDEX_EXTENSION);
        assert_eq!(
            parse_segment_file_name(&n),
            Some((123, TIME_INDEX_EXTENSION))
        );
        assert_eq!(parse_segment_file_name("00000000000000000001.tmp"), None);
        assert_eq!(parse_segment_file_name("0000000000000000000x.log"), None);
        assert_eq!(parse_segment_file_name("README"), None);
        assert!(is_segment_file_name(&segment_file_name(7, LOG_EXTENSION)));
        assert!(is_segment_file_name(&segment_file_name(7, INDEX_EXTENSION)));
        assert!(!is_segment_file_name("00000000000000000001.tmp"));
        assert!(!is_segment_file_name("99999999999999999999.log")); // beyond u64
        for n in [0, 1, 9, 10, 12345, u64::MAX / 3, u64::MAX] {
            assert_eq!(segment_file_name(n, LOG_EXTENSION), format!("{n:020}.log"));
        }
        let (log, idx, tidx) = segment_paths(Path::new("/d"), 42);
        assert_eq!(log, Path::new("/d/00000000000000000042.log"));
        assert_eq!(idx, Path::new("/d/00000000000000000042.index"));
        assert_eq!(tidx, Path::new("/d/00000000000000000042.timeindex"));
    }
}
