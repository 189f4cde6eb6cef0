//! The one error type of the command: what failed, on which path, and what to do about it.

use std::fmt;
use std::path::Path;

/// A failure shown to the user as one line: `what failed: why; what to do`.
#[derive(Debug)]
pub struct CliError {
    what: String,
    hint: Option<String>,
    code: u8,
}

impl CliError {
    /// A failure described by `what` (which names the path or value involved).
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            hint: None,
            code: 1,
        }
    }

    /// The command was stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP after `what` (exit code
    /// 130, the shell's convention for a process ended by SIGINT, whichever of the three it
    /// was: the handler cannot tell them apart).
    pub fn interrupted(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            hint: None,
            code: 130,
        }
    }

    /// The process exit code for this failure: 1, or 130 after Ctrl-C, SIGTERM or SIGHUP.
    pub fn exit_code(&self) -> u8 {
        self.code
    }

    /// A failure on `path`: `{action} {path}: {cause}`.
    pub fn at(action: &str, path: &Path, cause: impl fmt::Display) -> Self {
        Self::new(format!("{action} {}: {cause}", path.display()))
    }

    /// The same failure, with `context` said first: `{context}: {what}`.
    #[must_use]
    pub fn prefix(mut self, context: &str) -> Self {
        self.what = format!("{context}: {}", self.what);
        self
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

/// Maps a storage error on the log at `dir` to a one-line error with advice. Damage found on
/// open names the file, the byte and the seqs at stake and points to `krabka repair DIR`.
pub fn storage(action: &str, dir: &Path, e: krabka_storage::Error) -> CliError {
    use krabka_storage::Error as E;
    let d = dir.display();
    match e {
        E::Locked { dir: locked } => in_use(&locked),
        e @ (E::Damaged { .. } | E::TornTail { .. } | E::Corrupt { .. }) => damage(action, dir, e),
        e @ (E::SeqGap { .. } | E::SeqOverlap { .. }) => seam(action, dir, e),
        E::Quarantined {
            first_seq,
            last_seq,
            path,
        } => CliError::new(format!(
            "{action} {d}: seqs {first_seq}..={last_seq} are not in the log: a repair moved them \
             aside ({})",
            path.display()
        ))
        .hint(format!(
            "read from seq {} on, or inspect the quarantined bytes with `krabka dump`",
            last_seq.saturating_add(1)
        )),
        other => other_storage(action, dir, other),
    }
}

/// [`storage`] for damaged bytes in a segment.
fn damage(action: &str, dir: &Path, e: krabka_storage::Error) -> CliError {
    use krabka_storage::Error as E;
    let d = dir.display();
    let repair = repair_hint(dir);
    match e {
        E::Damaged {
            path,
            position,
            reason,
            first_seq,
            last_seq,
        } => CliError::new(format!(
            "{action} {d}: damaged segment {} at byte {position} ({reason}): records \
             {first_seq}..={last_seq} are at stake; nothing was changed",
            path.display()
        ))
        .hint(repair),
        E::TornTail {
            path,
            position,
            bytes_after,
            reason,
            ..
        } => CliError::new(format!(
            "{action} {d}: torn tail in {}: {bytes_after} bytes from byte {position} hold no valid \
             frame ({reason}); nothing was changed",
            path.display()
        ))
        .hint(repair),
        E::Corrupt {
            path,
            position,
            reason,
        } => CliError::new(format!(
            "{action} {d}: corrupt segment {} at byte {position}: {reason}",
            path.display()
        ))
        .hint(format!(
            "run `krabka verify {d}` for a full report; {repair}"
        )),
        other => other_storage(action, dir, other),
    }
}

/// [`storage`] for two segment files that do not follow each other.
fn seam(action: &str, dir: &Path, e: krabka_storage::Error) -> CliError {
    use krabka_storage::Error as E;
    let d = dir.display();
    let repair = repair_hint(dir);
    match e {
        E::SeqGap {
            previous,
            path,
            expected,
            found,
        } => CliError::new(format!(
            "{action} {d}: seq gap: seqs {expected}..={} are missing: {} ends at seq {} and {} \
             starts at seq {found}; nothing was changed",
            found.saturating_sub(1),
            previous.display(),
            expected.saturating_sub(1),
            path.display()
        ))
        .hint(format!(
            "a segment file was deleted or truncated, or {} is a stray file: restore the missing \
             segment from a copy if you have one; else `krabka repair {d}` records the missing \
             seqs as a hole (moving a stray file aside into {}; it deletes nothing)",
            path.display(),
            dir.join(krabka_storage::segment::QUARANTINE_DIR).display()
        )),
        E::SeqOverlap {
            previous,
            path,
            expected,
            found,
        } => CliError::new(format!(
            "{action} {d}: seq overlap: {} starts at seq {found} but {} already holds seqs up to {}; \
             nothing was changed",
            path.display(),
            previous.display(),
            expected.saturating_sub(1)
        ))
        .hint(format!("a stray or copied segment file? {repair}")),
        other => other_storage(action, dir, other),
    }
}

/// What to do about damage in the log at `dir`: `krabka repair`, which deletes nothing.
fn repair_hint(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "`krabka repair {d}` moves the damaged bytes aside into {} (it deletes nothing) and records \
         the missing seqs as a hole; `krabka repair {d} --dry-run` shows what it would move",
        dir.join(krabka_storage::segment::QUARANTINE_DIR).display()
    )
}

/// [`storage`] for every other error: the error itself and a hint by its kind.
fn other_storage(action: &str, dir: &Path, other: krabka_storage::Error) -> CliError {
    use krabka_storage::Error as E;
    let hint = match &other {
        E::Io { .. } => "check that the path exists and that you may read and write it",
        E::NotADirectory { .. } => "pass the log's directory, not a file",
        E::OutOfRange { .. } => "pick a seq inside the range shown",
        E::Poisoned { .. } => "reopen the log; recovery finds what is really on disk",
        _ => "check the arguments",
    };
    CliError::at(action, dir, other).hint(hint)
}

/// Prints what opening a log found and did (its [`RecoveryReport`](krabka_storage::RecoveryReport),
/// one line per item) on stderr; nothing when there is nothing to say. The files a tiered log
/// keeps next to its segments (`remote-metadata/`, the retention checkpoint, the topic file)
/// are not news.
pub fn print_recovery(report: &krabka_storage::RecoveryReport) {
    let mut report = report.clone();
    report.ignored_files.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        name != crate::tiered::METADATA_DIR
            && !name.starts_with(krabka_tiering::LOG_START_FILE)
            && name != crate::tiered::topic::TOPIC_FILE
            && name != format!("{}.tmp", crate::tiered::topic::TOPIC_FILE)
            && !name.starts_with(krabka_tiering::BINDING_FILE)
    });
    for line in report.to_string().lines().filter(|l| !l.trim().is_empty()) {
        crate::output::note(format_args!("{line}"));
    }
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
