//! The one error type of the command: what failed, on which path, and what to do about it.

use std::fmt;
use std::path::Path;

/// A failure shown to the user as one line: `what failed: why; what to do`.
#[derive(Debug)]
pub struct CliError {
    what: String,
    hint: Option<String>,
}

impl CliError {
    /// A failure described by `what` (which names the path or value involved).
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            hint: None,
        }
    }

    /// A failure on `path`: `{action} {path}: {cause}`.
    pub fn at(action: &str, path: &Path, cause: impl fmt::Display) -> Self {
        Self::new(format!("{action} {}: {cause}", path.display()))
    }

    /// Adds what the user can do about it.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the causes contained.
        let what = self.what.replace('\n', " ");
        match &self.hint {
            Some(hint) => write!(f, "{what}; {hint}"),
            None => f.write_str(&what),
        }
    }
}

impl std::error::Error for CliError {}

/// Result of a command.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

/// The error for a log directory another process holds open (its lock file is taken).
pub fn in_use(dir: &Path) -> CliError {
    CliError::new(format!(
        "{} is in use by another krabka process (it holds the log's lock file {})",
        dir.display(),
        krabka_storage::LOCK_FILE_NAME
    ))
    .hint(
        "stop that process (e.g. `krabka produce` or `krabka tier --watch`) and retry; \
         `krabka read` without --remote can read a log while it is in use",
    )
}

/// Maps a storage error on the log at `dir` to a one-line error with advice.
pub fn storage(action: &str, dir: &Path, e: krabka_storage::Error) -> CliError {
    use krabka_storage::Error as E;
    if let E::Locked { dir: locked } = &e {
        return in_use(locked);
    }
    let hint = match &e {
        E::Corrupt { .. } => "run `krabka verify` on the directory for a full report",
        E::Io { .. } => "check that the path exists and that you may read and write it",
        E::NotADirectory { .. } => "pass the log's directory, not a file",
        E::OutOfRange { .. } => "pick a seq inside the range shown",
        E::Poisoned { .. } => "reopen the log; recovery finds what is really on disk",
        _ => "check the arguments",
    };
    CliError::at(action, dir, e).hint(hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_log_says_it_is_in_use() {
        let e = storage(
            "cannot open log",
            Path::new("/x"),
            krabka_storage::Error::Locked {
                dir: Path::new("/x/log").to_path_buf(),
            },
        );
        let line = e.to_string();
        assert!(
            line.starts_with("/x/log is in use by another krabka process"),
            "{line}"
        );
    }

    #[test]
    fn an_error_is_one_line_with_path_and_advice() {
        let e = CliError::at("cannot open log", Path::new("/x/y"), "boom\nsecond line")
            .hint("check it");
        assert_eq!(
            e.to_string(),
            "cannot open log /x/y: boom second line; check it"
        );
    }
}
