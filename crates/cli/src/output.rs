//! Writing to stdout: a closed pipe (`krabka dump x.log | head`) ends the command quietly.

use crate::error::CliError;

/// Marker message of a closed stdout; `main` exits 0 on it without printing.
pub const BROKEN_PIPE: &str = "stdout closed";

/// Maps a write error on stdout to a [`CliError`].
pub fn write_error(e: &std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::new(BROKEN_PIPE)
    } else {
        CliError::new(format!("cannot write to stdout: {e}"))
    }
}
