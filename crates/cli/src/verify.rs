//! `krabka verify`: check every segment and index of a log directory without opening (and so
//! without recovering or changing) the log.
//!
//! What the next open of the log repairs by itself is not damage, and is reported as such
//! (exit 0): a closed segment's index files that are missing or do not describe its intact
//! `.log` (what a crash during local retention, which deletes the index files first, leaves)
//! are rebuilt from the `.log`; see [`LogView::indexes_rebuilt_at_open`]; and the active
//! segment's torn tail (a write a crash cut short, with nothing valid after it and above the
//! recovery point) is cut, its bytes saved in `quarantine/` first; see
//! [`LogView::tail_cut_at_open`]. A log that starts
//! above seq 1 after `recover` (or local retention) is not short: its older records are in the
//! remote tier. Every check is storage's ([`LogView::verify_each`]); this module prints what it
//! found.

use std::io::Write;
use std::path::Path;

use krabka_storage::segment;
use krabka_storage::view::{IndexState, LogView, SegmentCheck, VerifyReport};

use crate::args::VerifyArgs;
use crate::error::{CliError, Result};
use crate::inspect::VERIFY_HINT;
use crate::reader::view_error;
use crate::{human, output, progress};

/// What `verify` says about a torn tail the next open cuts.
pub const CUT_AT_OPEN: &str = "a torn tail (a write cut short by a crash; nothing valid follows      and no synced record is at stake): the next open of the log cuts it by itself, saving      the bytes in quarantine/ first; no acknowledged record is lost";

/// What `verify` says about an index file the next open rebuilds.
pub const REBUILT_AT_OPEN: &str = "will be rebuilt at the next open of the log from its intact \
     .log (after a clean close, when the segment is first read); nothing is lost";

/// Checks every segment and index of the log at `dir` ([`LogView::verify_each`]), printing one
/// line per segment to `out` (or only those with a problem when `quiet`), then the holes, the
/// notes and the problems.
///
/// # Errors
/// When the directory holds no segment file, cannot be read or a file cannot be opened.
/// Corruption is not an error here: it is in [`VerifyReport::problems`].
pub fn verify(dir: &Path, quiet: bool, out: &mut impl Write) -> Result<VerifyReport> {
    let view = LogView::new(dir);
    let total: u64 = view
        .segment_bases()
        .map_err(|e| view_error(dir, e))?
        .iter()
        .filter_map(|b| std::fs::metadata(view.log_path(*b)).ok())
        .map(|m| m.len())
        .sum();
    let bar = progress::bytes_bar("verify", total);
    let w = |e: std::io::Error| output::write_error(&e);
    let mut written = Ok(());
    let report = view
        .verify_each(|s| {
            bar.inc(s.bytes);
            if written.is_ok() && (!quiet || s.corrupt) {
                written = bar.suspend(|| writeln!(out, "{}", segment_line(s)));
            }
        })
        .map_err(|e| verify_error(dir, e))?;
    written.map_err(w)?;
    bar.finish_and_clear();
    let Some(first) = report.segments.first() else {
        return Err(no_segment_files(dir));
    };
    if let Some(line) = below_local_start(dir, first.base) {
        writeln!(out, "{line}").map_err(w)?;
    }
    for h in &report.holes {
        let accepted = h.accepted_at_ms.map_or_else(String::new, |at| {
            format!(
                " (accepted hole seq {}..={}, accepted {}: tiering goes on past it)",
                h.first_seq,
                h.last_seq,
                crate::inspect::timestamp(at)
            )
        });
        writeln!(
            out,
            "hole    seq {}..={} moved aside by a repair: {}{accepted}",
            h.first_seq,
            h.last_seq,
            h.marker.display()
        )
        .map_err(w)?;
    }
    for p in &report.rebuilt_at_open {
        writeln!(out, "note: {p}: {REBUILT_AT_OPEN}").map_err(w)?;
    }
    for p in &report.cut_at_open {
        writeln!(out, "note: {p}: {CUT_AT_OPEN}").map_err(w)?;
    }
    for p in &report.problems {
        writeln!(out, "problem: {p}").map_err(w)?;
    }
    Ok(report)
}

/// The error for a directory `dir` without segment files.
pub fn no_segment_files(dir: &Path) -> CliError {
    CliError::new(format!("no segment files (*.log) in {}", dir.display()))
        .hint("pass the directory of a krabka log")
}

/// The error of `verify` for what [`LogView::verify_each`] could not read at `dir`.
pub fn verify_error(dir: &Path, e: krabka_storage::Error) -> CliError {
    match e {
        krabka_storage::Error::OldFormat { path } => {
            crate::reader::old_format(dir, &path, "verify")
        }
        krabka_storage::Error::Io { ref path, .. }
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(segment::is_segment_file_name) =>
        {
            CliError::new(e.to_string()).hint("check the file's permissions")
        }
        e => view_error(dir, e),
    }
}

/// The line `verify` prints for a segment.
fn segment_line(s: &SegmentCheck) -> String {
    let status = if s.corrupt { "CORRUPT" } else { "ok" };
    let seqs = match (s.first_seq, s.last_seq) {
        (Some(a), Some(b)) => format!("seq {a}..={b}"),
        _ => "empty".to_owned(),
    };
    let index_state = match s.index {
        IndexState::Active => "active (indexes written at roll)",
        IndexState::RebuiltAtOpen => "index rebuilt at the next open",
        IndexState::Damaged => "index problem",
        _ => "index ok, timeindex ok",
    };
    format!(
        "{status:<7} {}  {seqs} ({} records, {})  {index_state}",
        s.log_path.display(),
        human::count(s.records),
        human::bytes(s.bytes),
    )
}

/// The line saying where the seqs below the first local segment (`first`) are, for a tiered
/// log whose local files start above seq 1 (after `recover`, or local retention): they are not
/// missing.
fn below_local_start(dir: &Path, first: u64) -> Option<String> {
    let tiered = dir.join(krabka_tiering::partition::METADATA_DIR).is_dir();
    (first > 1 && tiered).then(|| {
        format!(
            "remote  seq 1..={} are not in the local files: this is a tiered log ({} records its \
             remote segments), whose older records are in its remote tier or were deleted by \
             retention; verify checks the local files only (`krabka read {} --remote ...` reads \
             both tiers)",
            first - 1,
            dir.join(krabka_tiering::partition::METADATA_DIR).display(),
            dir.display()
        )
    })
}

/// Runs `krabka verify`: a line per segment (unless `--quiet`), then the summary line.
///
/// # Errors
/// The first problem found ([`VerifyReport::first_problem`]), with the count of the others, or
/// a failed write to stdout.
pub fn run(a: &VerifyArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let report = verify(&a.dir, a.quiet, &mut out)?;
    let range = report.range.map_or_else(
        || "no records".to_owned(),
        |(a, b)| format!("seq {a}..={b}"),
    );
    let mut summary = format!(
        "{} segments, {} indexes, {} records ({range}), {}",
        human::count(report.segments.len() as u64),
        report.indexes,
        human::count(report.records),
        human::bytes(report.bytes)
    );
    if !report.holes.is_empty() {
        let holes: Vec<String> = report
            .holes
            .iter()
            .map(|h| format!("{}..={}", h.first_seq, h.last_seq))
            .collect();
        summary.push_str(&format!(
            ", {} hole(s) left by a repair (seq {})",
            holes.len(),
            holes.join(", ")
        ));
    }
    if !report.cut_at_open.is_empty() {
        summary.push_str(", a torn tail to be cut at the next open (listed above; not damage)");
    }
    if !report.rebuilt_at_open.is_empty() {
        summary.push_str(&format!(
            ", {} index file(s) to be rebuilt at the next open (listed above; not damage)",
            report.rebuilt_at_open.len()
        ));
    }
    match report.first_problem() {
        None => output::outln!("verify: OK: {summary}"),
        Some(first) => Err(CliError::new(format!(
            "{} problem(s) in {}: {first}{}",
            report.problems.len(),
            a.dir.display(),
            match report.problems.len() {
                1 => String::new(),
                n => format!(" (and {} more, listed above)", n - 1),
            }
        ))
        .hint(VERIFY_HINT)),
    }
}
