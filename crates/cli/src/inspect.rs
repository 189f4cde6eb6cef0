//! `krabka dump`: every frame of a segment file; and what `dump`, `verify` and the reader share
//! (how bytes and timestamps print, the segments and explicit holes of a log directory). Neither
//! opens (and so recovers or changes) the log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use krabka_storage::segment::{self, LOG_EXTENSION, parse_segment_file_name};

use crate::args::DumpArgs;
use crate::error::{CliError, Result};
use crate::{human, output};

/// Formats a record timestamp (ms since the epoch) as RFC 3339, or the raw number when it is
/// before 1970 or out of range.
pub fn timestamp(ms: i64) -> String {
    match u64::try_from(ms) {
        Ok(ms) => UNIX_EPOCH
            .checked_add(Duration::from_millis(ms))
            .map(|t| humantime::format_rfc3339_millis(t).to_string())
            .unwrap_or_else(|| ms.to_string()),
        Err(_) => format!("{ms}ms"),
    }
}

/// Shows opaque bytes as text on one line: control characters escaped (`\n`, `\u{1}`),
/// invalid UTF-8 as U+FFFD; cut at `max` chars.
pub fn show_bytes(b: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(b);
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars().take(max) {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// What [`dump`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DumpSummary {
    /// Frames whose CRC matched and whose message decoded.
    pub good: u64,
    /// Frames with a problem (bad CRC, bad length, torn tail, undecodable message).
    pub bad: u64,
}

/// Prints every frame of the segment file `path` to `out`, one line each, then a summary line.
///
/// Each frame's seq must follow the previous frame's, starting at the base seq in the file's
/// name (when it is a segment name). The file is read frame by frame
/// ([`DumpFile`](segment::DumpFile)): memory stays under a fixed ceiling whatever its size or
/// its length fields say.
///
/// # Errors
/// When the file cannot be read, is not a regular file, or is a transformed (compressed or
/// encrypted) remote object; when stdout fails; after printing everything, when any frame is
/// bad (naming the file and the byte of the first bad frame).
pub fn dump(path: &Path, values: Option<usize>, out: &mut impl Write) -> Result<DumpSummary> {
    let frames = segment::DumpFile::open(path).map_err(|e| cannot_dump(path, &e))?;
    if let Some(e) = transformed_object(path)? {
        return Err(e);
    }
    let size = frames.len();
    let w = |e: std::io::Error| output::write_error(&e);
    writeln!(out, "Dumping {} ({})", path.display(), human::bytes(size)).map_err(w)?;
    let mut summary = DumpSummary::default();
    let mut expect = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_file_name)
        .map(|(base, _)| base);
    let mut first_bad: Option<(u64, String)> = None;
    for frame in frames {
        let frame = frame.map_err(|e| {
            CliError::new(format!("cannot read {}: {e}", path.display()))
                .prefix(&format!("after {} frame(s)", summary.good + summary.bad))
        })?;
        let seq = frame.seq.map_or_else(|| "?".to_owned(), |s| s.to_string());
        let mut line = format!(
            "seq: {seq} position: {} size: {}",
            frame.position, frame.frame_len
        );
        if let Some(m) = &frame.message {
            let key = m
                .key
                .as_ref()
                .map_or_else(|| "null".to_owned(), |k| show_bytes(k, 64));
            line.push_str(&format!(
                " timestamp: {} key: {key} value_size: {} headers: {}",
                timestamp(m.timestamp),
                m.value.len(),
                m.headers.len()
            ));
        }
        line.push_str(if frame.crc_ok {
            " crc: ok"
        } else {
            " crc: BAD"
        });
        if frame.crc_ok && frame.message.is_none() && frame.problem.is_none() {
            line.push_str(&format!(
                " (message not shown: the frame is over the {} dump limit)",
                human::bytes(segment::DUMP_DECODE_LIMIT)
            ));
        }
        let mut problem = frame.problem.clone();
        if problem.is_none()
            && let (Some(e), Some(s)) = (expect, frame.seq)
            && s != e
        {
            problem = Some(format!("frame holds seq {s}, expected {e}"));
        }
        if frame.problem.is_none() {
            expect = frame.seq.and_then(|s| s.checked_add(1));
        }
        match problem {
            Some(p) => {
                summary.bad += 1;
                line.push_str(&format!(" problem: {p}"));
                first_bad.get_or_insert((frame.position, p));
            }
            None => summary.good += 1,
        }
        if let (Some(max), Some(m)) = (values, &frame.message) {
            line.push_str(&format!(" value: {}", show_bytes(&m.value, max)));
        }
        writeln!(out, "{line}").map_err(w)?;
    }
    writeln!(
        out,
        "{} records, {} bad frame(s), {}",
        human::count(summary.good),
        summary.bad,
        human::bytes(size)
    )
    .map_err(w)?;
    match first_bad {
        None => Ok(summary),
        Some((position, reason)) => Err(CliError::new(format!(
            "{} bad frame(s) in {}; the first at byte {position}: {reason}",
            summary.bad,
            path.display()
        ))
        .hint(VERIFY_HINT)),
    }
}

/// The error for a file `dump` cannot open as a segment file.
fn cannot_dump(path: &Path, e: &krabka_storage::Error) -> CliError {
    let (what, invalid) = match e {
        krabka_storage::Error::Io { path, source } => (
            format!("cannot dump {}: {source}", path.display()),
            source.kind() == std::io::ErrorKind::InvalidInput,
        ),
        other => (format!("cannot dump {}: {other}", path.display()), false),
    };
    let e = CliError::new(what);
    if invalid {
        e.hint(format!(
            "pass the path of a segment's .log file (a regular file, such as DIR/{})",
            segment::segment_file_name(1, LOG_EXTENSION)
        ))
    } else {
        e.hint(format!(
            "pass the path of a segment's .log file; {} is not readable",
            path.display()
        ))
    }
}

/// The first bytes of every object of a segment the remote tier stores compressed or encrypted
/// (the transform header's magic, `docs/format.md`, "Transformed segments"): a record frame's
/// length field never reads as it (it would claim over 1 GiB).
const TRANSFORM_HEADER_MAGIC: &[u8; 4] = b"KTXH";

/// The error for a transformed remote object at `path` (its flags byte says how), `None` for
/// anything else.
fn transformed_object(path: &Path) -> Result<Option<CliError>> {
    let mut head = [0u8; 6];
    let read = std::fs::File::open(path).and_then(|f| {
        use std::os::unix::fs::FileExt;
        f.read_at(&mut head, 0)
    });
    let n = read.map_err(|e| CliError::at("cannot read", path, e))?;
    if n < head.len() || !head.starts_with(TRANSFORM_HEADER_MAGIC) {
        return Ok(None);
    }
    let how = match head[5] & 3 {
        1 => "compressed",
        2 => "encrypted",
        3 => "compressed and encrypted",
        _ => "transformed",
    };
    Ok(Some(
        CliError::new(format!(
            "{} is a transformed remote object ({how}), not a segment file: its bytes are the \
             remote tier's transform header and chunks, which only the remote reader decodes",
            path.display()
        ))
        .hint(
            "read its records through the log: `krabka read DIR --remote REMOTE --from SEQ` \
             (with `--encryption-key-file FILE` for an encrypted one); `dump` shows segment \
             files of a log directory, or remote objects copied without compression or encryption",
        ),
    ))
}

/// The segments of a log directory, by base seq.
pub fn segment_bases(dir: &Path) -> Result<Vec<u64>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        CliError::at("cannot read log directory", dir, e)
            .hint("pass the directory that holds the .log segment files")
    })?;
    let mut bases = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CliError::at("cannot read log directory", dir, e))?;
        let name = entry.file_name();
        if let Some((base, LOG_EXTENSION)) = name.to_str().and_then(parse_segment_file_name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Seqs a repair moved out of the log (or found missing), marked by a file of
/// `DIR/quarantine/` named by [`segment::hole_file_name`]: an explicit hole in the log's seqs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    /// First seq of the hole.
    pub first: u64,
    /// Last seq of the hole.
    pub last: u64,
    /// Its marker file (holding the bytes moved aside, if any).
    pub path: PathBuf,
    /// When the user accepted it as lost (`krabka repair --accept-hole`), in ms since the
    /// epoch; `None` when not accepted.
    pub accepted_at_ms: Option<i64>,
}

impl Hole {
    /// Whether `seq` is in the hole.
    pub fn contains(&self, seq: u64) -> bool {
        (self.first..=self.last).contains(&seq)
    }
}

/// Whether `holes` (sorted by first seq) cover every seq of `first..=last`.
pub fn holes_cover(holes: &[Hole], first: u64, last: u64) -> bool {
    let mut next = first;
    for h in holes {
        if h.first <= next && h.last >= next {
            if h.last >= last {
                return true;
            }
            next = h.last + 1;
        }
    }
    next > last
}

/// The explicit holes of the log at `dir` (files of `DIR/quarantine/`), by first seq, each with
/// its acceptance (`DIR/accepted-holes`) if any; none when the directory does not exist.
///
/// # Errors
/// When `DIR/quarantine/` exists but cannot be listed, or `DIR/accepted-holes` cannot be read.
pub fn quarantine_holes(dir: &Path) -> Result<Vec<Hole>> {
    let accepted = krabka_storage::read_accepted_holes(dir).map_err(|e| {
        CliError::new(e.to_string()).hint(format!(
            "`krabka repair {}` moves a damaged record of accepted holes aside (the holes are \
             then no longer accepted)",
            dir.display()
        ))
    })?;
    let qdir = dir.join(segment::QUARANTINE_DIR);
    let entries = match std::fs::read_dir(&qdir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CliError::at("cannot read quarantine directory", &qdir, e)),
    };
    let mut holes = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| CliError::at("cannot read quarantine directory", &qdir, e))?;
        let name = entry.file_name();
        if let Some((first, last)) = name.to_str().and_then(segment::parse_hole_file_name) {
            holes.push(Hole {
                first,
                last,
                path: entry.path(),
                accepted_at_ms: accepted
                    .iter()
                    .find(|a| a.covers(first, last))
                    .map(|a| a.accepted_at_ms),
            });
        }
    }
    holes.sort_by_key(|h| (h.first, h.last));
    Ok(holes)
}

/// Runs `krabka dump`.
///
/// # Errors
/// A bad frame (after printing every frame before it) or a failed write to stdout.
pub fn run_dump(a: &DumpArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let dumped = dump(&a.file, a.values, &mut out);
    // Everything printed reaches stdout before any failure is reported.
    let flushed = std::io::Write::flush(&mut out).map_err(|e| output::write_error(&e));
    dumped.and(flushed)
}

/// What `krabka verify` advises on corruption. Deleting segments would lose their records (and
/// every later one), so it never suggests that.
pub const VERIFY_HINT: &str = "copy the directory aside before changing anything, and restore the named file from a copy \
     if you have one; otherwise `krabka repair DIR` moves the damaged bytes aside into \
     DIR/quarantine/ (they are kept there), keeps every intact record after them and records \
     the seqs of the damaged ones as a hole; reads return every record before the damage and \
     fail naming the position";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_bytes_print_readably() {
        assert_eq!(timestamp(1_704_067_200_000), "2024-01-01T00:00:00.000Z");
        assert_eq!(timestamp(-5), "-5ms");
        assert_eq!(show_bytes(b"user-1", 64), "user-1");
        assert_eq!(show_bytes(b"a\nb", 64), "a\\nb");
        assert_eq!(show_bytes(br#"{"a":1}"#, 64), r#"{"a":1}"#);
        assert_eq!(show_bytes(b"abcdef", 3), "abc…");
    }

    #[test]
    fn adjacent_holes_cover_a_gap_and_a_partial_one_does_not() {
        let hole = |first, last| Hole {
            first,
            last,
            path: PathBuf::from("q"),
            accepted_at_ms: None,
        };
        let holes = [hole(10, 19), hole(20, 29)];
        assert!(holes_cover(&holes, 10, 29));
        assert!(holes_cover(&holes, 15, 22));
        assert!(!holes_cover(&holes, 10, 30));
        assert!(!holes_cover(&holes, 5, 12));
        assert!(!holes_cover(&[], 1, 1));
    }
}
