//! Writing to stdout and stderr without ever panicking.
//!
//! `println!` panics when stdout is closed (`krabka tier | head -1`) or full
//! (`krabka produce > /dev/full`). Every line of the command goes through [`line()`] instead,
//! which returns the failure as a [`CliError`]: a closed pipe ends the command quietly (exit 0,
//! nothing printed, like `head` expects), any other failure is one error line (exit 1).
//! Notes on stderr ([`note`]) are best effort: when stderr is gone there is nobody to tell.

use std::fmt;
use std::io::Write;

use crate::error::{CliError, Result};

/// Marker message of a closed stdout; `main` exits 0 on it without printing.
pub const BROKEN_PIPE: &str = "stdout closed";

/// Maps a write error on stdout to a [`CliError`].
pub fn write_error(e: &std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::new(BROKEN_PIPE)
    } else {
        CliError::new(format!("cannot write to stdout: {e}"))
            .hint("check where stdout goes (a full disk or device?)")
    }
}

/// Whether `e` is the quiet end of a closed stdout (see [`write_error`]).
pub fn is_broken_pipe(e: &CliError) -> bool {
    e.to_string() == BROKEN_PIPE
}

/// Writes one line to stdout and flushes it.
///
/// # Errors
/// [`write_error`] of the failure.
pub fn line(args: fmt::Arguments<'_>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|e| write_error(&e))
}

/// Writes one line to stderr, ignoring failures (a closed stderr has no reader to tell).
pub fn note(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// `println!` that returns a [`CliError`] instead of panicking; see [`line`].
macro_rules! outln {
    () => { $crate::output::line(format_args!("")) };
    ($($arg:tt)*) => { $crate::output::line(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics; see [`note`].
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::note(format_args!($($arg)*)) };
}

pub(crate) use {errln, outln};

/// Prints what opening a log found and did (its [`RecoveryReport`](krabka_storage::RecoveryReport),
/// one line per item) on stderr; nothing when there is nothing to say. The files a tiered log
/// keeps next to its segments are tiering's ([`krabka_tiering::partition::is_own_file`]), not
/// news.
pub fn print_recovery(report: &krabka_storage::RecoveryReport) {
    let mut report = report.clone();
    report.ignored_files.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        !krabka_tiering::partition::is_own_file(name)
    });
    for line in report.to_string().lines().filter(|l| !l.trim().is_empty()) {
        note(format_args!("{line}"));
    }
}
