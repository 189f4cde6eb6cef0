//! `krabka dump`: every batch of a segment file and every record in it, streamed through
//! [`DumpFile`](segment::DumpFile), in the words of Kafka's `kafka-dump-log --deep-iteration`;
//! and how `dump`, `read` and `verify` print bytes and timestamps. It never opens (and so
//! recovers or changes) the log.

mod lines;

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use krabka_storage::segment::{self, DumpedBatch, LOG_EXTENSION, parse_segment_file_name};

use self::lines::{batch_line, record_line};
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
    /// Records read from the good batches.
    pub records: u64,
    /// Batches whose CRC matched and whose records all read back.
    pub good: u64,
    /// Batches with a problem (bad CRC, bad length, torn tail, a seq out of place, a record
    /// that does not read).
    pub bad: u64,
}

/// Prints every batch of the segment file `path` to `out`, one line each with its header
/// fields, position, size and CRC status, each followed by a line per record (offset,
/// timestamp, key and value sizes, sequence, header names; the key and value too, cut at
/// `values` chars, when given); then a summary line.
///
/// Each batch must start at the seq after the previous one's last, the first one at the base
/// seq in the file's name (when it is a segment name). The file is read batch by batch
/// ([`DumpFile`](segment::DumpFile)) and the records of each batch one at a time: memory stays
/// under a fixed ceiling whatever the file's size or its length fields say. A record that
/// does not read ends its batch's records with a problem line and makes the batch bad.
///
/// # Errors
/// When the file cannot be read, is not a regular file, or is a transformed (compressed or
/// encrypted) remote object; when stdout fails; after printing everything, when any batch is
/// bad (naming the file and the byte of the first bad batch).
pub fn dump(path: &Path, values: Option<usize>, out: &mut impl Write) -> Result<DumpSummary> {
    let base = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_file_name)
        .map(|(base, _)| base);
    let frames = segment::DumpFile::open(path)
        .map_err(|e| cannot_dump(path, &e))?
        .checking_seqs(base);
    if segment::is_old_format_file(path, base).unwrap_or(false) {
        let dir = path.parent().unwrap_or(Path::new("."));
        return Err(crate::reader::old_format(dir, path, "dump"));
    }
    let file = File::open(path).map_err(|e| CliError::at("cannot read", path, e))?;
    if let Some(e) = transformed_object(path, &file)? {
        return Err(e);
    }
    let size = frames.len();
    let w = |e: std::io::Error| output::write_error(&e);
    writeln!(out, "Dumping {} ({})", path.display(), human::bytes(size)).map_err(w)?;
    if let Some(base) = base {
        writeln!(out, "Log starting offset: {base}").map_err(w)?;
    }
    let mut summary = DumpSummary::default();
    let mut first_bad: Option<(u64, String)> = None;
    for frame in frames {
        let frame = frame.map_err(|e| {
            CliError::new(format!("cannot read {}: {e}", path.display()))
                .prefix(&format!("after {} batch(es)", summary.good + summary.bad))
        })?;
        let dumped = dump_batch(&frame, values, out)?;
        match dumped.problem {
            Some(p) => {
                summary.bad += 1;
                first_bad.get_or_insert((frame.position, p));
            }
            None => {
                summary.good += 1;
                summary.records += dumped.records;
            }
        }
    }
    writeln!(
        out,
        "{} records in {} batch(es), {} bad batch(es), {}",
        human::count(summary.records),
        human::count(summary.good),
        summary.bad,
        human::bytes(size)
    )
    .map_err(w)?;
    match first_bad {
        None => Ok(summary),
        Some((position, reason)) => Err(CliError::new(format!(
            "{} bad batch(es) in {}; the first at byte {position}: {reason}",
            summary.bad,
            path.display()
        ))
        .hint(VERIFY_HINT)),
    }
}

/// What [`dump_batch`] printed.
struct PrintedBatch {
    /// Records printed.
    records: u64,
    /// What is wrong with the batch or its records, if anything.
    problem: Option<String>,
}

/// Prints the line of `frame` and the lines of its records.
fn dump_batch(
    frame: &DumpedBatch,
    values: Option<usize>,
    out: &mut impl Write,
) -> Result<PrintedBatch> {
    let w = |e: std::io::Error| output::write_error(&e);
    // A batch too long to hold in memory is only CRC-checked: intact, its records not read.
    let over_limit =
        frame.crc_ok && frame.batch.is_none() && frame.batch_len > segment::DUMP_DECODE_LIMIT;
    let mut problem = frame.problem.clone();
    let mut line = batch_line(frame, problem.as_deref());
    if over_limit {
        line.push_str(&format!(
            " (records not shown: the batch is over the {} dump limit)",
            human::bytes(segment::DUMP_DECODE_LIMIT)
        ));
    }
    writeln!(out, "{line}").map_err(w)?;
    let Some(batch) = &frame.batch else {
        return Ok(PrintedBatch {
            records: 0,
            problem,
        });
    };
    let header = batch.header();
    let mut records = 0u64;
    let failed = match batch.records(segment::MAX_UNCOMPRESSED_BATCH) {
        Ok(iter) => {
            let mut failed = None;
            for record in iter {
                match record {
                    Ok(r) => {
                        writeln!(out, "{}", record_line(header, &r, values)).map_err(w)?;
                        records += 1;
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            failed
        }
        Err(e) => Some(e),
    };
    if let Some(e) = failed {
        let reason = format!("{e} (after {records} record(s) of the batch)");
        writeln!(
            out,
            "| problem: batch at position {}: {reason}",
            frame.position
        )
        .map_err(w)?;
        problem.get_or_insert(reason);
    }
    Ok(PrintedBatch { records, problem })
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
/// (the transform header's magic, `docs/format.md`, "Transformed segments"): a record batch's
/// `baseOffset` never starts with it (it would be a seq past 2^62).
const TRANSFORM_HEADER_MAGIC: &[u8; 4] = b"KTXH";

/// The error for a transformed remote object at `path`, open as `file` (its flags byte says
/// how), `None` for anything else.
fn transformed_object(path: &Path, file: &File) -> Result<Option<CliError>> {
    let mut head = [0u8; 6];
    let n = file
        .read_at(&mut head, 0)
        .map_err(|e| CliError::at("cannot read", path, e))?;
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

/// Runs `krabka dump`.
///
/// # Errors
/// A bad batch (after printing every batch) or a failed write to stdout.
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
}
