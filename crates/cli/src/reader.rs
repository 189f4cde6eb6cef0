//! What the inspection commands (`read` without `--remote`, `verify`, `repair --dry-run`) say
//! about a log directory they look at through [`krabka_storage::view`], which reads the files
//! without opening (and so recovering or changing) the log: the one-line error for each thing
//! the view finds wrong, and the notes for the index entries it stepped around.

use std::path::Path;

use krabka_storage::segment::{FORMAT_NAME, OLD_FORMAT_NAME};
use krabka_storage::view::IndexFallback;
use krabka_storage::{ACCEPTED_HOLES_FILE_NAME, Error as E, RECOVERY_POINT_FILE_NAME};

use crate::error::CliError;
use crate::output::errln;

/// The one-line error for what the view of the log at `dir` found (`e`), with what to do.
pub fn view_error(dir: &Path, e: E) -> CliError {
    let d = dir.display();
    match e {
        E::Quarantined {
            first_seq,
            last_seq,
            path,
        } => quarantined(dir, first_seq, last_seq, &path),
        E::BelowStart { seq: 0, first, .. } => CliError::new(format!(
            "seq 0 is not a seq of {d}: seqs start at 1"
        ))
        .hint(format!(
            "read from {first}, the first seq the local log holds"
        )),
        E::BelowStart { seq, first, .. } => CliError::new(format!(
            "seq {seq} is below the first local seq {first} of {d}"
        ))
        .hint(format!(
            "older records are in the remote tier (pass --remote) or were deleted by retention; read from {first}"
        )),
        E::OutOfRange { seq, first, last } => out_of_range(dir, seq, first, last.saturating_add(1)),
        E::Shrank {
            path,
            len,
            position,
        } => CliError::new(format!(
            "segment {} shrank to {len} bytes while it was read at byte {position}",
            path.display()
        ))
        .hint("another process truncated it; run `krabka verify` on the directory"),
        E::BadBatch {
            path,
            position,
            seq,
            reason,
        } => CliError::new(format!(
            "corrupt segment {} at byte {position}: {reason} (the batch holding seq {seq} or a \
             later one; every record before it was delivered)",
            path.display()
        ))
        .hint(format!(
            "run `krabka verify {d}` for a full report; `krabka repair {d}` moves the damaged part aside"
        )),
        E::CutShort {
            path,
            position,
            bytes,
            seq,
        } => CliError::new(format!(
            "closed segment {} ends inside a batch at byte {position} ({bytes} bytes of an incomplete batch; \
             the batch holding seq {seq} is cut short)",
            path.display()
        ))
        .hint(format!(
            "the file was truncated or torn; `krabka repair {d}` moves the damaged part aside"
        )),
        E::SeqOverlap {
            previous,
            path,
            expected,
            found,
        } => CliError::new(format!(
            "seq overlap: segment {} starts at seq {found} but {} already holds seq {found}..={}",
            path.display(),
            previous.display(),
            expected.saturating_sub(1)
        ))
        .hint(format!(
            "a stray or copied segment file? `krabka repair {d}` moves it aside"
        )),
        E::EmptySegment {
            path,
            next,
            expected,
            found,
        } => gap(
            dir,
            format!(
                "closed segment {} is empty but must hold seq {expected}..={} (the next segment {} starts at seq {found})",
                path.display(),
                found.saturating_sub(1),
                next.display()
            ),
        ),
        E::SeqGap {
            previous,
            path,
            expected,
            found,
        } => gap(
            dir,
            format!(
                "seq gap: seqs {expected}..={} are missing: {} ends at seq {} and the next segment {} starts at seq {found}",
                found.saturating_sub(1),
                previous.display(),
                expected.saturating_sub(1),
                path.display()
            ),
        ),
        E::EndsBelowRecoveryPoint {
            path,
            position,
            first_seq,
            recovery_point,
        } => CliError::new(format!(
            "segment {} ends at byte {position} (seq {first_seq} is not there), but the log held every seq \
             up to {recovery_point} when it was last closed ({}): records {first_seq}..={recovery_point} are missing",
            path.display(),
            dir.join(RECOVERY_POINT_FILE_NAME).display(),
        ))
        .hint(format!(
            "the file was truncated or torn, or a newer segment was deleted; `krabka repair {d}` records the hole"
        )),
        E::OldFormat { path } => old_format(dir, &path, "read"),
        E::OldFormatDamaged {
            path,
            position,
            seq,
            reason,
        } => CliError::new(format!(
            "{} is in {OLD_FORMAT_NAME}, not {FORMAT_NAME}, and its frame at byte {position} \
             (where seq {seq} should start) is damaged: {reason}; every record before it was \
             printed, nothing was changed",
            path.display()
        ))
        .hint(
            "this build neither repairs nor cuts old-format files: restore the file from a copy, \
             or repair it with the krabka release that wrote it, then bring the log over (see \
             `krabka read --help` and docs/format.md)",
        ),
        e @ (E::Io { .. } | E::Corrupt { .. }) => file_error(dir, e),
        other => CliError::new(other.to_string()),
    }
}

/// The one-line error of `command` (`verify`, `repair`, `dump`, `read`) for the segment `path`
/// of the log at `dir`, which is in krabka's old per-record format: both formats named, and how
/// to bring the log over (`krabka read` decodes the old format read-only).
pub fn old_format(dir: &Path, path: &Path, command: &str) -> CliError {
    let what = match command {
        "read" => "`krabka read` reads an old-format log only from its start to its end, in order",
        _ => "this build does not open, verify, repair or dump old-format files",
    };
    CliError::new(format!(
        "{} is in {OLD_FORMAT_NAME}, not {FORMAT_NAME}: {what}; nothing was changed",
        path.display()
    ))
    .hint(convert_hint(dir))
}

/// How to bring the old-format log at `dir` over into a new log.
pub fn convert_hint(dir: &Path) -> String {
    format!(
        "bring the log over into a new directory: `krabka read {} --value-chars 1000000000 | \
         cut -f3- | krabka produce NEW_DIR --escaped --key-separator \"$(printf '\\t')\"` appends \
         every record's key and value in order (seqs from 1; timestamps are stamped anew and \
         headers are not carried: docs/format.md says how a program keeps them)",
        dir.display()
    )
}

/// [`view_error`] for a file or directory that cannot be read or decoded.
fn file_error(dir: &Path, e: E) -> CliError {
    let accepted = dir.join(ACCEPTED_HOLES_FILE_NAME);
    let qdir = dir.join(krabka_storage::segment::QUARANTINE_DIR);
    match e {
        E::Io { ref path, .. } | E::Corrupt { ref path, .. } if *path == accepted => {
            CliError::new(e.to_string()).hint(format!(
                "`krabka repair {}` moves a damaged record of accepted holes aside (the holes are \
                 then no longer accepted)",
                dir.display()
            ))
        }
        E::Io { path, source } if path == dir => {
            CliError::at("cannot read log directory", dir, source)
                .hint("pass the directory that holds the .log segment files")
        }
        E::Io { path, source } if path == qdir => {
            CliError::at("cannot read quarantine directory", &path, source)
        }
        E::Io { path, source } => CliError::at("cannot read segment", &path, source),
        other => CliError::new(other.to_string()),
    }
}

/// The error for two segment files that do not follow each other (`what`): a gap.
fn gap(dir: &Path, what: String) -> CliError {
    CliError::new(what).hint(format!(
        "a segment file was deleted or truncated, or a stray segment-named file was added: restore \
         the missing segment from a copy if you have one; else `krabka repair {}` records the \
         missing seqs as a hole (moving a stray file aside)",
        dir.display()
    ))
}

/// Prints a note for each wrong index entry the reader stepped around.
pub fn print_fallbacks(fallbacks: Vec<IndexFallback>) {
    for f in fallbacks {
        match f {
            IndexFallback::NoBatch {
                index,
                seq,
                position,
            } => errln!(
                "note: {} points seq {seq} at byte {position} of its .log, which holds no batch \
                 starting at a seq up to it; scanning the segment from its start (`krabka verify` \
                 checks the index)",
                index.display()
            ),
            IndexFallback::BadBatch { log, position, seq } => errln!(
                "note: the index of {} points at byte {position} where no valid batch of \
                 seq {seq} starts; scanning the segment from its start",
                log.display()
            ),
            other => errln!("note: {other:?}"),
        }
    }
}

/// The error for a read from `seq` beyond `next` (the seq the next append gets) of the log at
/// `dir`, whose first seq is `first`: the range the log holds, and that `next` is the one seq
/// past it that reads (nothing yet, or what is appended).
pub fn out_of_range(dir: &Path, seq: u64, first: u64, next: u64) -> CliError {
    let holds = if next > first {
        format!("the log holds {first}..={}", next - 1)
    } else {
        "the log holds no records".to_owned()
    };
    CliError::new(format!(
        "cannot read {} from seq {seq}: out of range: {holds}",
        dir.display()
    ))
    .hint(format!(
        "read from a seq in {}..={next} (seq {next} is the next to be written; with --follow \
         the read waits for it)",
        first.min(next)
    ))
}

/// The error for a read that reached seqs `first..=last` a repair moved aside (`marker`).
fn quarantined(dir: &Path, first: u64, last: u64, marker: &Path) -> CliError {
    CliError::new(format!(
        "seq {first}..={last} of {} were moved aside by a repair into {}",
        dir.display(),
        marker.display()
    ))
    .hint(format!(
        "those records are not in the log; read from seq {} on, or inspect the file with `krabka dump`",
        last.saturating_add(1)
    ))
}
