//! The small checksummed text files of a log directory (the split journal here; the topic,
//! the remote binding, the retention point and the lost seqs of a tiered log): one renderer and
//! one parser for their two shapes, so their damage and truncation are handled (and tested)
//! once, and a bounded reader and an atomic writer that tiering's files go through (the split
//! journal is read and written by `recovery/split.rs`, bounded and atomic too, and parsed here).
//!
//! - **Records** ([`render`], [`parse`]): a magic first line, then one `key value` line per
//!   field in a fixed order, then `crc32 <8 lowercase hex digits>\n`, the CRC-32 (IEEE) of
//!   every byte before that line.
//! - **One line** ([`render_line`], [`parse_line`]): `<body> crc32 <8 lowercase hex digits>\n`,
//!   the CRC-32 of the body, for a file holding one value.
//!
//! Both are read bounded ([`read`]: a file longer than its format allows is refused, never
//! read whole) and written atomically ([`write()`]: temporary file, fsync, rename, directory
//! fsync). Every refusal says what is wrong in words, for the caller to name the file.
//!
//! ```
//! use krabka_storage::kvfile;
//! let text = kvfile::render("example 1", &[("seq", "7".to_owned())]);
//! let mut fields = kvfile::parse(&text, "example 1").map_err(std::io::Error::other)?;
//! assert_eq!(fields.next_value("seq"), Ok("7"));
//! assert!(kvfile::parse(&text.replace('7', "8"), "example 1").is_err());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::fsutil;

/// The checksum line's prefix in a records file.
const CRC_LINE: &str = "crc32 ";
/// Between a one-line file's body and its checksum.
pub const LINE_CRC_SEPARATOR: &str = " crc32 ";

/// The text of a records file: `magic`, the `fields` in order, the checksum line.
pub fn render(magic: &str, fields: &[(&str, String)]) -> String {
    let mut body = format!("{magic}\n");
    for (key, value) in fields {
        body.push_str(key);
        body.push(' ');
        body.push_str(value);
        body.push('\n');
    }
    seal(body)
}

/// `body` followed by its checksum line.
pub fn seal(mut body: String) -> String {
    let crc = crc32fast::hash(body.as_bytes());
    body.push_str(&format!("{CRC_LINE}{crc:08x}\n"));
    body
}

/// The body of a records file whose checksum line holds (every byte before it), or why not.
pub fn unseal(text: &str) -> Result<&str, String> {
    let at = text
        .rfind(CRC_LINE)
        .filter(|&at| at == 0 || text[..at].ends_with('\n'))
        .ok_or_else(|| "it has no checksum line (truncated?)".to_owned())?;
    let (body, crc_line) = text.split_at(at);
    let stored = crc_line
        .strip_prefix(CRC_LINE)
        .and_then(|c| c.strip_suffix('\n'))
        .and_then(hex8)
        .ok_or_else(|| "its checksum line is unreadable (truncated?)".to_owned())?;
    let computed = crc32fast::hash(body.as_bytes());
    if computed != stored {
        return Err(format!(
            "its checksum does not match its contents (stored {stored:08x}, computed {computed:08x})"
        ));
    }
    Ok(body)
}

/// Eight lowercase hex digits.
fn hex8(s: &str) -> Option<u32> {
    (s.len() == 8 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

/// The fields of a records file whose checksum holds and whose first line is `magic`, read in
/// order with [`Fields::next_value`].
///
/// # Errors
/// Why the text is refused, in words.
pub fn parse<'a>(text: &'a str, magic: &str) -> Result<Fields<'a>, String> {
    let body = unseal(text)?;
    let mut lines = body.lines();
    if lines.next() != Some(magic) {
        return Err(format!("it does not start with `{magic}`"));
    }
    Ok(Fields { lines })
}

/// The `key value` lines of a records file, in order.
#[derive(Debug)]
pub struct Fields<'a> {
    lines: std::str::Lines<'a>,
}

impl<'a> Fields<'a> {
    /// The value of the next line, which must be `key`'s.
    ///
    /// # Errors
    /// When the next line is missing or is another key's.
    pub fn next_value(&mut self, key: &str) -> Result<&'a str, String> {
        self.lines
            .next()
            .and_then(|l| l.strip_prefix(key))
            .and_then(|v| v.strip_prefix(' '))
            .ok_or_else(|| format!("its `{key}` line is missing"))
    }

    /// The value of the next line when it is `key`'s (an optional field a later version added);
    /// `None` when the fields end here.
    ///
    /// # Errors
    /// When a line follows that is not `key`'s.
    pub fn optional_value(&mut self, key: &str) -> Result<Option<&'a str>, String> {
        match self.lines.clone().next() {
            None => Ok(None),
            Some(_) => self.next_value(key).map(Some),
        }
    }

    /// Checks that no line is left.
    ///
    /// # Errors
    /// When one is, naming it.
    pub fn end(mut self) -> Result<(), String> {
        match self.lines.next() {
            None => Ok(()),
            Some(line) => Err(format!(
                "an unexpected line follows its fields: {:?}",
                line.chars().take(60).collect::<String>()
            )),
        }
    }
}

/// The text of a one-line file holding `body`.
pub fn render_line(body: &str) -> String {
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}{LINE_CRC_SEPARATOR}{crc:08x}\n")
}

/// The body of a one-line file whose checksum holds; with `legacy`, a line without any
/// checksum is returned whole (a format written before the checksum).
///
/// # Errors
/// Why the text is refused, in words.
pub fn parse_line(text: &str, legacy: bool) -> Result<&str, String> {
    text.strip_suffix('\n')
        .filter(|l| !l.contains('\n'))
        .ok_or_else(|| "it is not one line ending in a newline".to_owned())
        .and_then(|line| match line.split_once(LINE_CRC_SEPARATOR) {
            Some((body, crc)) => {
                let stored = hex8(crc)
                    .ok_or_else(|| "the checksum is not 8 lowercase hex digits".to_owned())?;
                let computed = crc32fast::hash(body.as_bytes());
                if stored == computed {
                    Ok(body)
                } else {
                    Err(format!(
                        "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
                    ))
                }
            }
            None if legacy => Ok(line),
            None => Err(format!("it has no checksum (`{LINE_CRC_SEPARATOR}CRC`)")),
        })
}

/// The value a one-line file's `text` records: its body ([`parse_line`]) read by `value`.
///
/// # Errors
/// Why it is refused (`unreadable: ...`), with the text's first bytes.
pub fn line_value<T>(
    text: &str,
    legacy: bool,
    value: impl Fn(&str) -> Result<T, String>,
) -> Result<T, String> {
    parse_line(text, legacy).and_then(value).map_err(|why| {
        format!(
            "unreadable: {why}; found {:?}",
            text.chars().take(60).collect::<String>()
        )
    })
}

/// A seq in canonical decimal (no sign, no leading zero, no space).
pub fn parse_seq(digits: &str) -> Option<u64> {
    let seq: u64 = digits.parse().ok()?;
    (seq.to_string() == digits).then_some(seq)
}

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Io(#[from] io::Error),
    /// It is longer than its format allows: it was not read whole.
    #[error("it is longer than {max} bytes, more than its format ever holds")]
    TooLong {
        /// The longest valid file.
        max: u64,
    },
    /// It is not UTF-8 text.
    #[error("it is not UTF-8 text")]
    NotText,
}

/// The text of the file at `path`, read bounded: at most `max_len + 1` bytes are read, and a
/// longer file is refused. `None` when there is no file.
///
/// # Errors
/// [`ReadError`] when it cannot be read, is too long or is not text.
pub fn read(path: &Path, max_len: u64) -> Result<Option<String>, ReadError> {
    let mut bytes = Vec::new();
    match File::open(path).and_then(|f| f.take(max_len.saturating_add(1)).read_to_end(&mut bytes)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(e)),
    }
    if bytes.len() as u64 > max_len {
        return Err(ReadError::TooLong { max: max_len });
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| ReadError::NotText)
}

/// The temporary file [`write()`] goes through: the name with `.tmp` appended.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Durably replaces the file at `path` with `text` (through [`tmp_path`], fsynced, renamed,
/// the directory fsynced).
///
/// # Errors
/// When a step fails.
pub fn write(path: &Path, text: &str) -> io::Result<()> {
    fsutil::write_atomic(path, &tmp_path(path), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every changed byte and every truncation of a valid file is refused, in both shapes.
    #[test]
    fn any_flipped_or_truncated_byte_is_refused_in_both_shapes() {
        let records = render(
            "krabka-example 1",
            &[("name", "orders".to_owned()), ("seq", "42".to_owned())],
        );
        let line = render_line("log_start 42");
        let records_ok = |t: &str| {
            parse(t, "krabka-example 1").and_then(|mut f| {
                let name = f.next_value("name")?.to_owned();
                let seq = f.next_value("seq")?.to_owned();
                f.end().map(|()| (name, seq))
            })
        };
        assert_eq!(
            records_ok(&records),
            Ok(("orders".to_owned(), "42".to_owned()))
        );
        assert_eq!(parse_line(&line, false), Ok("log_start 42"));
        for (text, check) in [
            (&records, &records_ok as &dyn Fn(&str) -> Result<_, String>),
            (&line, &|t: &str| {
                parse_line(t, false).map(|b| (b.to_owned(), String::new()))
            }),
        ] {
            let bytes = text.as_bytes();
            for i in 0..bytes.len() {
                for bit in [0x01u8, 0x20, 0x80] {
                    let mut bad = bytes.to_vec();
                    bad[i] ^= bit;
                    let bad = String::from_utf8_lossy(&bad);
                    assert!(check(&bad).is_err(), "byte {i} bit {bit:#x}: {bad:?}");
                }
            }
            for len in 0..bytes.len() {
                let cut = String::from_utf8_lossy(&bytes[..len]);
                assert!(check(&cut).is_err(), "cut at {len}: {cut:?}");
            }
        }
    }

    #[test]
    fn a_legacy_line_without_checksum_is_read_only_when_asked() {
        assert_eq!(parse_line("log_start 7\n", true), Ok("log_start 7"));
        assert!(parse_line("log_start 7\n", false).is_err());
        assert_eq!(parse_seq("007"), None);
        assert_eq!(parse_seq("7"), Some(7));
    }

    #[test]
    fn reads_are_bounded_and_writes_atomic() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        assert!(matches!(read(&path, 16), Ok(None)));
        write(&path, "0123456789abcdef").expect("write");
        assert_eq!(
            read(&path, 16).ok().flatten().as_deref(),
            Some("0123456789abcdef")
        );
        assert!(matches!(
            read(&path, 15),
            Err(ReadError::TooLong { max: 15 })
        ));
        std::fs::write(&path, [0xff, 0xfe]).expect("write");
        assert!(matches!(read(&path, 16), Err(ReadError::NotText)));
        assert!(!tmp_path(&path).exists());
    }
}
