//! Which process holds a log's lock file: so that "in use" names the running `krabka` (its pid
//! and command line) instead of leaving the user to guess.
//!
//! The lock is a `flock` on the file ([`create_and_lock`](crate::create_and_lock)). Linux lists every
//! such lock in `/proc/locks` with the pid that took it and the file's device and inode; the
//! command line is `/proc/PID/cmdline`. Elsewhere, or when the holder cannot be found, nothing
//! is named.

use std::fs::{File, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Longest command line shown, in characters.
const MAX_COMMAND_CHARS: usize = 120;

/// The process holding a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its arguments (the program first), when readable.
    pub args: Option<Vec<String>>,
}

impl Holder {
    /// ` (`krabka tier log --watch`)`, or nothing when its command line is unknown.
    pub fn command(&self) -> String {
        let Some(args) = self.args.as_ref().filter(|a| !a.is_empty()) else {
            return String::new();
        };
        let mut words = args.clone();
        if let Some(program) = words.first_mut()
            && let Some(name) = Path::new(program.as_str()).file_name()
        {
            *program = name.to_string_lossy().into_owned();
        }
        let mut line = words.join(" ");
        if line.chars().count() > MAX_COMMAND_CHARS {
            line = line.chars().take(MAX_COMMAND_CHARS).collect::<String>() + "…";
        }
        format!(" (`{line}`)")
    }
}

/// Whether another process holds the lock on the existing file `path` (never created). A lock
/// this process holds (a log it opened itself) does not count.
pub fn is_held(path: &Path) -> bool {
    if !path.is_file() {
        return false;
    }
    if let Ok(locks) = std::fs::read_to_string("/proc/locks") {
        return std::fs::metadata(path).is_ok_and(|meta| {
            find_pid(&locks, meta.dev(), meta.ino(), std::process::id()).is_some()
        });
    }
    // Without /proc: try it (taken and released at once when free; the file closes here).
    let Ok(file) = File::open(path) else {
        return false;
    };
    matches!(file.try_lock(), Err(TryLockError::WouldBlock))
}

/// The process holding the lock on `lock`, when `/proc/locks` names it.
pub fn holder(lock: &Path) -> Option<Holder> {
    let meta = std::fs::metadata(lock).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = find_pid(&locks, meta.dev(), meta.ino(), std::process::id())?;
    let args = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        })
        .filter(|a| !a.is_empty());
    Some(Holder { pid, args })
}

/// The pid of the lock on the file `dev`/`ino` in the text of `/proc/locks`, not counting
/// `me` and waiters (`->` lines). A line reads `1: FLOCK  ADVISORY  WRITE 30964 fe:00:10298389
/// 0 EOF`: the pid, then `major:minor:inode` (major and minor in hex).
fn find_pid(locks: &str, dev: u64, ino: u64, me: u32) -> Option<u32> {
    // Linux's encoding of a device number (see `gnu_dev_major`/`gnu_dev_minor`).
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0fff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x00ff);
    locks
        .lines()
        .filter(|line| !line.contains("->"))
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.windows(2).find_map(|w| {
                let (pid, file) = (w.first()?, w.get(1)?);
                let mut parts = file.split(':');
                let (ma, mi, i) = (parts.next()?, parts.next()?, parts.next()?);
                let same = u64::from_str_radix(ma, 16).ok()? == major
                    && u64::from_str_radix(mi, 16).ok()? == minor
                    && i.parse::<u64>().ok()? == ino;
                let pid = pid.parse::<u32>().ok()?;
                (same && pid != me && pid != 0).then_some(pid)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_of_the_lock_on_a_file_is_found_by_device_and_inode() {
        let locks = "1: FLOCK  ADVISORY  WRITE 30964 fe:00:10298389 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 41000 fe:00:5308838 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 30938 fe:00:5308838 0 EOF\n";
        let dev = 0xfe << 8;
        assert_eq!(find_pid(locks, dev, 5_308_838, 1), Some(30938));
        assert_eq!(find_pid(locks, dev, 10_298_389, 1), Some(30964));
        // Our own lock, another device, another inode: nobody.
        assert_eq!(find_pid(locks, dev, 10_298_389, 30964), None);
        assert_eq!(find_pid(locks, 0x803, 5_308_838, 1), None);
        assert_eq!(find_pid(locks, dev, 42, 1), None);
    }

    #[test]
    fn a_command_line_is_shown_with_the_program_name_only_and_bounded() {
        let h = Holder {
            pid: 7,
            args: Some(vec![
                "/usr/local/bin/krabka".into(),
                "tier".into(),
                "log".into(),
                "--watch".into(),
            ]),
        };
        assert_eq!(h.command(), " (`krabka tier log --watch`)");
        let long = Holder {
            pid: 7,
            args: Some(vec!["flock".into(), "x".repeat(500)]),
        };
        assert!(long.command().chars().count() < MAX_COMMAND_CHARS + 10);
        let unknown = Holder { pid: 7, args: None };
        assert_eq!(unknown.command(), "");
    }
}
