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
/// # Errors
/// When the file cannot be read or stdout is closed.
pub fn dump(path: &Path, values: Option<usize>, out: &mut impl Write) -> Result<DumpSummary> {
    let buf = segment::read_segment_file(path)
        .map_err(|e| CliError::new(e.to_string()).hint("pass the path of a segment's .log file"))?;
    let size = buf.len() as u64;
    let w = |e: std::io::Error| output::write_error(&e);
    writeln!(out, "Dumping {} ({})", path.display(), human::bytes(size)).map_err(w)?;
    let mut summary = DumpSummary::default();
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
        match &frame.problem {
            Some(p) => {
                summary.bad += 1;
                line.push_str(&format!(" problem: {p}"));
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
    Ok(summary)
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

/// CRC-checks every segment and index of the log at `dir`, printing one line per segment to
/// `out` (or only problems when `quiet`).
///
/// Checks: every frame's length, CRC, message encoding and seq (contiguous, starting at the
/// file's base seq); that segments follow each other without gaps; that every closed segment
/// has a valid `.index` and `.timeindex` agreeing with its `.log`.
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
    for (i, &base) in bases.iter().enumerate() {
        let log_path = path_of(base, LOG_SUFFIX);
        let newest = i + 1 == bases.len();
        let v = segment::verify_segment(&log_path)
            .map_err(|e| CliError::new(e.to_string()).hint("check the file's permissions"))?;
        bar.inc(v.file_bytes);
        report.segments += 1;
        report.records += v.records;
        report.bytes += v.file_bytes;
        let before = report.problems.len();
        if let Some(p) = &v.problem {
            report.problems.push(Problem {
                path: log_path.clone(),
                position: Some(p.position),
                reason: p.reason.clone(),
            });
        }
        if let Some(next) = expected_next
            && next != base
        {
            report.problems.push(Problem {
                path: log_path.clone(),
                position: None,
                reason: format!(
                    "segment starts at seq {base} but the previous one ends at {}",
                    next.saturating_sub(1)
                ),
            });
        }
        let last = v.last_seq.unwrap_or(base.saturating_sub(1));
        // Past a bad frame the seqs of the rest of the file are unknown: do not report the
        // next segment's start or the index's range as further problems.
        expected_next = v.is_ok().then(|| last.saturating_add(1));
        if let Some(first) = v.first_seq {
            report.range = Some(match report.range {
                Some((lo, _)) => (lo, last),
                None => (first, last),
            });
        }
        let mut index_state = "active (indexes written at roll)".to_owned();
        if !newest {
            index_state = check_indexes(
                &path_of(base, INDEX_SUFFIX),
                &path_of(base, TIME_INDEX_SUFFIX),
                base,
                &v,
                &mut report,
            );
        }
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
    for p in &report.problems {
        writeln!(out, "problem: {p}").map_err(w)?;
    }
    Ok(report)
}

/// Verifies a closed segment's `.index` and `.timeindex`; returns a short status for the report.
fn check_indexes(
    index_path: &Path,
    time_index_path: &Path,
    base: u64,
    v: &segment::SegmentVerification,
    report: &mut VerifyReport,
) -> String {
    let mut problem = |path: &Path, position: Option<u64>, reason: String| {
        report.problems.push(Problem {
            path: path.to_path_buf(),
            position,
            reason,
        });
    };
    let mut ok = 0;
    match std::fs::read(index_path) {
        Err(e) => problem(
            index_path,
            None,
            format!("cannot read the offset index: {e}"),
        ),
        Ok(bytes) => match segment::verify_index(&bytes) {
            Err(e) => {
                let (position, reason) = corrupt_parts(e);
                problem(index_path, position, reason);
            }
            Ok(s) => {
                let last = v.last_seq.unwrap_or(base.saturating_sub(1));
                if v.is_ok()
                    && (s.base_seq != base || s.last_seq != last || s.log_size != v.file_bytes)
                {
                    problem(
                        index_path,
                        None,
                        format!(
                            "index describes seq {}..={} in {} bytes, the .log holds {base}..={last} in {} bytes",
                            s.base_seq, s.last_seq, s.log_size, v.file_bytes
                        ),
                    );
                } else {
                    ok += 1;
                }
            }
        },
    }
    match std::fs::read(time_index_path) {
        Err(e) => problem(
            time_index_path,
            None,
            format!("cannot read the time index: {e}"),
        ),
        Ok(bytes) => match segment::verify_time_index(&bytes) {
            Err(e) => {
                let (position, reason) = corrupt_parts(e);
                problem(time_index_path, position, reason);
            }
            Ok(s) if s.base_seq != base => problem(
                time_index_path,
                None,
                format!("time index is for base seq {}, expected {base}", s.base_seq),
            ),
            Ok(_) => ok += 1,
        },
    }
    report.indexes += 2;
    if ok == 2 {
        "index ok, timeindex ok".to_owned()
    } else {
        "index problem".to_owned()
    }
}

fn corrupt_parts(e: krabka_storage::Error) -> (Option<u64>, String) {
    match e {
        krabka_storage::Error::Corrupt {
            position, reason, ..
        } => (Some(position), reason),
        other => (None, other.to_string()),
    }
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
}
