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

    /// The command was stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP after `what`; the exit
    /// code is the shell's for that signal, 128 + its number ([`crate::interrupt::exit_code`]:
    /// 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
    pub fn interrupted(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            hint: None,
            code: crate::interrupt::exit_code(),
        }
    }

    /// The process exit code for this failure: 1, or 128 + the signal's number after Ctrl-C
    /// (130), SIGTERM (143) or SIGHUP (129).
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

/// The error for a log directory another process holds open (its lock file is taken): names
/// that process when the system says which it is.
pub fn in_use(dir: &Path) -> CliError {
    let lock = dir.join(krabka_storage::LOCK_FILE_NAME);
    let stop = match krabka_storage::lockholder::holder(&lock) {
        Some(h) => format!("stop that process (pid {}) and retry", h.pid),
        None => "stop that process (e.g. `krabka produce` or `krabka tier --watch`) and retry"
            .to_owned(),
    };
    in_use_by(dir, &lock, "").hint(format!(
        "{stop}; `krabka read` without --remote can read a log while it is in use"
    ))
}

/// `{dir} is in use by another krabka process, pid N (`krabka tier …`), which holds its lock
/// file {lock}{context}` (the pid and command when `/proc/locks` names the holder: the command
/// shows what it is, e.g. a program embedding the log).
pub fn in_use_by(dir: &Path, lock: &Path, context: &str) -> CliError {
    let who = match krabka_storage::lockholder::holder(lock) {
        Some(h) => format!("another krabka process, pid {}{}", h.pid, h.command()),
        None => "another krabka process".to_owned(),
    };
    CliError::new(format!(
        "{} is in use by {who}, which holds its lock file {}{context}",
        dir.display(),
        lock.display()
    ))
}

/// The lock file of `dir/remote-metadata/` another process holds, if any.
fn held_metadata_lock(dir: &Path) -> Option<std::path::PathBuf> {
    let entries = std::fs::read_dir(dir.join(krabka_tiering::partition::METADATA_DIR)).ok()?;
    let mut locks: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "lock"))
        .collect();
    locks.sort();
    locks
        .into_iter()
        .find(|p| krabka_storage::lockholder::is_held(p))
}

/// An error opening the durable metadata in `meta_dir` (of the log at `dir`): a directory that
/// a running process holds says so (never advising to move it aside); anything else is
/// `cannot open remote metadata …` with `hint`.
pub fn metadata_open(dir: &Path, meta_dir: &Path, e: impl fmt::Display, hint: &str) -> CliError {
    // Not the log's own lock: the command opening the metadata holds that one itself.
    match held_metadata_lock(dir) {
        Some(lock) => in_use_by(dir, &lock, "").hint(
            "nothing was changed; stop that process and retry (it is not damage: do not move the \
             directory aside)",
        ),
        None => {
            let text = e.to_string();
            let hint = os_error_hint(&text).unwrap_or(hint);
            CliError::at("cannot open remote metadata", meta_dir, text).hint(hint)
        }
    }
}

/// [`io_hint`] for an error known only by its text, which names the operating system's error
/// as `(os error N)` (how `std::io::Error` prints): so a full disk is named as one wherever the
/// error was wrapped.
pub fn os_error_hint(text: &str) -> Option<&'static str> {
    let (_, rest) = text.rsplit_once("(os error ")?;
    let code: i32 = rest.split(')').next()?.parse().ok()?;
    io_hint(std::io::Error::from_raw_os_error(code).kind(), Some(code))
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
             batch ({reason}); nothing was changed",
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
        E::Io { source, .. } => io_hint(source.kind(), source.raw_os_error())
            .unwrap_or("check that the path exists and that you may read and write it"),
        E::NotADirectory { .. } => "pass the log's directory, not a file",
        E::OutOfRange { .. } => "pick a seq inside the range shown",
        E::Poisoned { cause, .. } if cause.kind == std::io::ErrorKind::StorageFull => {
            "the filesystem is full: free space on it, then reopen the log (recovery finds what \
             is really on disk)"
        }
        E::Poisoned { .. } => {
            "fix the cause shown, then reopen the log; recovery finds what is \
             really on disk"
        }
        _ => "check the arguments",
    };
    CliError::at(action, dir, other).hint(hint)
}

/// A hint naming the cause of an I/O error by its kind, for the kinds whose cause is not the
/// path or its permissions.
pub fn io_hint(kind: std::io::ErrorKind, raw: Option<i32>) -> Option<&'static str> {
    use std::io::ErrorKind as K;
    /// `EMFILE` and `ENFILE`: out of file descriptors.
    const TOO_MANY_OPEN_FILES: [i32; 2] = [24, 23];
    match kind {
        K::StorageFull => Some(
            "the filesystem is full: free space on it (or move the log to a larger one) and retry",
        ),
        K::QuotaExceeded => {
            Some("the disk quota is exhausted: free space or raise the quota, and retry")
        }
        K::ReadOnlyFilesystem => Some(
            "the filesystem is mounted read-only: remount it read-write, or use another directory",
        ),
        K::FileTooLarge => {
            Some("the file hit the file size limit (see `ulimit -f`): raise it and retry")
        }
        _ if raw.is_some_and(|r| TOO_MANY_OPEN_FILES.contains(&r)) => {
            Some("the process ran out of file descriptors: raise the limit (`ulimit -n`) and retry")
        }
        _ => None,
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
            line.starts_with(
                "/x/log is in use by another krabka process, which holds its lock file /x/log/.lock"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_full_disk_is_named_by_its_cause_wherever_the_error_was_wrapped() {
        let full = std::io::Error::from_raw_os_error(28);
        let e = storage(
            "cannot append to",
            Path::new("/x"),
            krabka_storage::Error::Io {
                path: Path::new("/x/1.log").to_path_buf(),
                source: full,
            },
        );
        assert!(e.to_string().contains("the filesystem is full"), "{e}");
        let wrapped = "remote binding /x/remote-binding: cannot write it: No space left on \
                       device (os error 28)";
        assert_eq!(
            os_error_hint(wrapped),
            io_hint(std::io::ErrorKind::StorageFull, None)
        );
        assert!(os_error_hint("(os error 24)").is_some_and(|h| h.contains("ulimit -n")));
        assert_eq!(os_error_hint("no such file (os error 2)"), None);
        assert_eq!(os_error_hint("no code here"), None);
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
