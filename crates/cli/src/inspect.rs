//! `krabka dump` and `krabka verify`: look at segment files without opening (and so without
//! recovering or changing) the log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use krabka_storage::segment::{
    self, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, parse_segment_file_name,
};

use crate::error::{CliError, Result};
use crate::{human, output, progress};

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
        .hint(crate::VERIFY_HINT)),
    }
}

/// One finding of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file with the problem.
    pub path: PathBuf,
    /// Byte position in that file (`None` when the problem is the file's absence or a
    /// disagreement between files).
    pub position: Option<u64>,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.position {
            Some(p) => write!(f, "{} at byte {p}: {}", self.path.display(), self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// What [`verify`] checked and found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segments checked.
    pub segments: u64,
    /// Valid records found.
    pub records: u64,
    /// Bytes of `.log` files checked.
    pub bytes: u64,
    /// Index files checked.
    pub indexes: u64,
    /// First and last seq of the valid records.
    pub range: Option<(u64, u64)>,
    /// Everything found wrong.
    pub problems: Vec<Problem>,
    /// Seqs a repair moved aside (explicit holes; not problems).
    pub holes: Vec<Hole>,
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
        if let Some((base, LOG_SUFFIX)) = name.to_str().and_then(parse_segment_file_name) {
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

/// Checks every segment and index of the log at `dir`, printing one line per segment to
/// `out` (or only problems when `quiet`).
///
/// Checks: every frame's length, CRC, message encoding and seq (contiguous, starting at the
/// file's base seq); that every closed segment has a `.index` and `.timeindex` whose every
/// entry points at the frame of its seq in the `.log`
/// ([`verify_segment_files`](segment::verify_segment_files)); that no closed segment is empty;
/// that segments follow each other without a gap or an overlap, unless a repair recorded the
/// gap as a hole (listed, not a problem).
///
/// # Errors
/// When the directory cannot be read or a file cannot be opened. Corruption is not an error
/// here: it is in [`VerifyReport::problems`].
pub fn verify(dir: &Path, quiet: bool, out: &mut impl Write) -> Result<VerifyReport> {
    let bases = segment_bases(dir)?;
    if bases.is_empty() {
        return Err(
            CliError::new(format!("no segment files (*.log) in {}", dir.display()))
                .hint("pass the directory of a krabka log"),
        );
    }
    let holes = quarantine_holes(dir)?;
    let path_of = |base: u64, suffix: &str| dir.join(segment::segment_file_name(base, suffix));
    let total: u64 = bases
        .iter()
        .filter_map(|b| std::fs::metadata(path_of(*b, LOG_SUFFIX)).ok())
        .map(|m| m.len())
        .sum();
    let bar = progress::bytes_bar("verify", total);
    let w = |e: std::io::Error| output::write_error(&e);
    let mut report = VerifyReport::default();
    let mut expected_next: Option<u64> = None;
    // `(first, last)` seqs each segment file holds.
    let mut held: Vec<(u64, u64)> = Vec::new();
    for (i, &base) in bases.iter().enumerate() {
        let log_path = path_of(base, LOG_SUFFIX);
        let newest = i + 1 == bases.len();
        let (index_path, time_path) = (
            path_of(base, INDEX_SUFFIX),
            path_of(base, TIME_INDEX_SUFFIX),
        );
        let v = if newest {
            segment::verify_segment_files(&log_path, None, None)
        } else {
            segment::verify_segment_files(&log_path, Some(&index_path), Some(&time_path))
        }
        .map_err(|e| CliError::new(e.to_string()).hint("check the file's permissions"))?;
        bar.inc(v.file_bytes);
        report.segments += 1;
        report.records += v.records;
        report.bytes += v.file_bytes;
        let before = report.problems.len();
        let mut problem = |path: &Path, position: Option<u64>, reason: String| {
            report.problems.push(Problem {
                path: path.to_path_buf(),
                position,
                reason,
            });
        };
        if let Some(next) = expected_next {
            if base > next {
                if !holes_cover(&holes, next, base - 1) {
                    problem(
                        &log_path,
                        None,
                        format!(
                            "seqs {next}..={} are missing: the segment starts at seq {base} but the \
                             previous one ends at seq {}",
                            base - 1,
                            next.saturating_sub(1)
                        ),
                    );
                }
            } else if base < next {
                problem(
                    &log_path,
                    None,
                    format!(
                        "seq overlap: the segment starts at seq {base} but the previous one already \
                         holds seqs up to {}",
                        next.saturating_sub(1)
                    ),
                );
            }
        }
        let empty_closed = !newest && v.file_bytes == 0;
        if empty_closed {
            problem(
                &log_path,
                Some(0),
                format!(
                    "closed segment is empty (0 bytes): the seqs from {base} up to the next \
                     segment's start are missing"
                ),
            );
        }
        let log_problem = v.problem_path.as_deref().is_none_or(|p| p == log_path);
        if let Some(p) = &v.problem {
            let path = v.problem_path.clone().unwrap_or_else(|| log_path.clone());
            if !(empty_closed && log_problem) {
                problem(&path, Some(p.position), p.reason.clone());
            }
        }
        // Past a bad frame the seqs of the rest of the file are unknown, and an empty closed
        // segment was reported itself: do not report the next seam as a further problem.
        let last = v.last_seq.unwrap_or(base.saturating_sub(1));
        let records_unknown = empty_closed || (v.problem.is_some() && log_problem);
        expected_next = (!records_unknown).then(|| last.saturating_add(1));
        if let (Some(a), Some(b)) = (v.first_seq, v.last_seq) {
            held.push((a, b));
        }
        if let Some(first) = v.first_seq {
            report.range = Some(match report.range {
                Some((lo, _)) => (lo, last),
                None => (first, last),
            });
        }
        let index_state = if newest {
            "active (indexes written at roll)"
        } else {
            report.indexes += 2;
            if v.problem.is_some() && !log_problem {
                "index problem"
            } else {
                "index ok, timeindex ok"
            }
        };
        if !quiet || report.problems.len() > before {
            let status = if report.problems.len() > before {
                "CORRUPT"
            } else {
                "ok"
            };
            let seqs = match (v.first_seq, v.last_seq) {
                (Some(a), Some(b)) => format!("seq {a}..={b}"),
                _ => "empty".to_owned(),
            };
            let line = format!(
                "{status:<7} {}  {seqs} ({} records, {})  {index_state}",
                log_path.display(),
                human::count(v.records),
                human::bytes(v.file_bytes),
            );
            bar.suspend(|| writeln!(out, "{line}")).map_err(w)?;
        }
    }
    bar.finish_and_clear();
    // A hole marker over records the segment files hold contradicts them (open refuses it).
    for h in &holes {
        if held.iter().any(|&(a, b)| a <= h.last && h.first <= b) {
            report.problems.push(Problem {
                path: h.path.clone(),
                position: None,
                reason: format!(
                    "the hole marker claims seqs {}..={} are missing, but segment files hold some of them",
                    h.first, h.last
                ),
            });
        }
    }
    // Segment files that end below the recovery point have lost records.
    match krabka_storage::read_recovery_point(dir) {
        Ok(Some(point)) => {
            let last = report.range.map_or(0, |(_, last)| last);
            let newest = bases.last().map(|b| path_of(*b, LOG_SUFFIX));
            if report.problems.is_empty() && last < point && !holes_cover(&holes, last + 1, point) {
                report.problems.push(Problem {
                    path: newest.unwrap_or_else(|| dir.to_path_buf()),
                    position: None,
                    reason: format!(
                        "the segment files end at seq {last}, but the log held every seq up to                          {point} when it was last closed ({}): records {}..={point} are missing",
                        krabka_storage::RECOVERY_POINT_FILE_NAME,
                        last + 1
                    ),
                });
            }
        }
        Ok(None) => {}
        Err(e) => report.problems.push(Problem {
            path: dir.join(krabka_storage::RECOVERY_POINT_FILE_NAME),
            position: None,
            reason: e.to_string(),
        }),
    }
    for h in &holes {
        writeln!(
            out,
            "hole    seq {}..={} moved aside by a repair: {}",
            h.first,
            h.last,
            h.path.display()
        )
        .map_err(w)?;
    }
    report.holes = holes;
    for p in &report.problems {
        writeln!(out, "problem: {p}").map_err(w)?;
    }
    Ok(report)
}

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
