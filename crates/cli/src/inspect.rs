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
/// name (when it is a segment name).
///
/// # Errors
/// When the file cannot be read or stdout fails; after printing everything, when any frame is
/// bad (naming the file and the byte of the first bad frame).
pub fn dump(path: &Path, values: Option<usize>, out: &mut impl Write) -> Result<DumpSummary> {
    let buf = segment::read_segment_file(path)
        .map_err(|e| CliError::new(e.to_string()).hint("pass the path of a segment's .log file"))?;
    let size = buf.len() as u64;
    let w = |e: std::io::Error| output::write_error(&e);
    writeln!(out, "Dumping {} ({})", path.display(), human::bytes(size)).map_err(w)?;
    let mut summary = DumpSummary::default();
    let mut expect = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_file_name)
        .map(|(base, _)| base);
    let mut first_bad: Option<(u64, String)> = None;
    for frame in segment::dump_frames(buf) {
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

/// The explicit holes of the log at `dir` (files of `DIR/quarantine/`), by first seq; none when
/// the directory does not exist.
///
/// # Errors
/// When `DIR/quarantine/` exists but cannot be listed.
pub fn quarantine_holes(dir: &Path) -> Result<Vec<Hole>> {
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
     if you have one; otherwise `krabka repair DIR` moves the damaged part aside into \
     DIR/quarantine/ (the bytes are kept there) and records the missing seqs as a hole; reads \
     return every record before the damage and fail naming the position";

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
        };
        let holes = [hole(10, 19), hole(20, 29)];
        assert!(holes_cover(&holes, 10, 29));
        assert!(holes_cover(&holes, 15, 22));
        assert!(!holes_cover(&holes, 10, 30));
        assert!(!holes_cover(&holes, 5, 12));
        assert!(!holes_cover(&[], 1, 1));
    }
}
