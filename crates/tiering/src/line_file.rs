//! The one-line checksummed files tiering keeps in the local log's directory (the retention
//! point, the lost seqs): `<body> crc32 <8 lowercase hex digits>\n`, the CRC-32 (IEEE) of the
//! body; read bounded, written atomically. One reader and one writer of that shape.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use krabka_storage::fsutil;

/// Between a line's body and its checksum.
pub(crate) const CRC_SEPARATOR: &str = " crc32 ";

/// More than any valid file; a longer one is refused.
const MAX_LEN: u64 = 128;

/// The text of a file holding `body`.
pub(crate) fn render(body: &str) -> String {
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}{CRC_SEPARATOR}{crc:08x}\n")
}

/// A seq in canonical decimal (no sign, no leading zero, no space).
pub(crate) fn parse_seq(digits: &str) -> Option<u64> {
    let seq: u64 = digits.parse().ok()?;
    (seq.to_string() == digits).then_some(seq)
}

/// The one line of `text`, without its newline.
fn line(text: &str) -> Result<&str, String> {
    text.strip_suffix('\n')
        .filter(|l| !l.contains('\n'))
        .ok_or_else(|| "it is not one line ending in a newline".to_owned())
}

/// The body of `line` whose checksum holds; `None` when it has no checksum at all.
fn checked_body(line: &str) -> Option<Result<&str, String>> {
    let (body, crc) = line.split_once(CRC_SEPARATOR)?;
    let stored = (crc.len() == 8 && crc.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u32::from_str_radix(crc, 16).ok())
        .flatten();
    let Some(stored) = stored else {
        return Some(Err("the checksum is not 8 lowercase hex digits".to_owned()));
    };
    let computed = crc32fast::hash(body.as_bytes());
    Some(if stored == computed {
        Ok(body)
    } else {
        Err(format!(
            "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
        ))
    })
}

/// What reading a file gave.
pub(crate) enum Contents {
    /// There is no file.
    Missing,
    /// Its text (lossy), and whether it is longer than any valid file.
    Text(String, bool),
}

/// Reads the file at `path`, at most one byte past the longest valid one (`MAX_LEN`, 128).
pub(crate) fn read(path: &Path) -> io::Result<Contents> {
    let mut bytes = Vec::new();
    match File::open(path).and_then(|f| f.take(MAX_LEN + 1).read_to_end(&mut bytes)) {
        Ok(_) => Ok(Contents::Text(
            String::from_utf8_lossy(&bytes).into_owned(),
            bytes.len() as u64 > MAX_LEN,
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Contents::Missing),
        Err(e) => Err(e),
    }
}

/// The value a file read back records (`text`, `too_long` as [`read`] says), or why it is
/// refused, with its first bytes: one line whose checksum holds, its body as `parse` reads it.
/// A line without a checksum is read as a whole by `parse` only when `legacy` (a format
/// written before the checksum).
pub(crate) fn parse<T>(
    text: &str,
    too_long: bool,
    legacy: bool,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, String> {
    let parsed = if too_long {
        Err(format!("it is longer than {MAX_LEN} bytes"))
    } else {
        line(text).and_then(|l| match checked_body(l) {
            Some(body) => body.and_then(&parse),
            None if legacy => parse(l),
            None => Err(format!("it has no checksum (`{CRC_SEPARATOR}CRC`)")),
        })
    };
    parsed.map_err(|why| {
        format!(
            "unreadable: {why}; found {:?}",
            text.chars().take(60).collect::<String>()
        )
    })
}

/// Durably writes `body` to `path` (through `tmp`, fsynced, renamed, the directory fsynced).
pub(crate) fn write(path: &Path, tmp: &Path, body: &str) -> io::Result<()> {
    fsutil::write_atomic(path, tmp, render(body).as_bytes())
}
