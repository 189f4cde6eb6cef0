//! The generations of a durable metadata directory: `gen-<20-digit n>` directories, the
//! `CURRENT` pointer naming one of them, the generation record every generation's log starts
//! with, and the pre-generation layout (generation 0: the log directly in the directory).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::MetadataError;
use krabka_protocol::Message;
use krabka_remote_storage::RemoteStorageError;
use krabka_storage::fsutil;
use krabka_storage::segment::is_segment_file_name;

use super::error::io_err;

/// The generation pointer: `<n> v2\n` (or `<n>\n`, written before generation records).
pub(super) const CURRENT: &str = "CURRENT";
/// Where the next pointer is written before it is renamed over [`CURRENT`].
pub(super) const CURRENT_TMP: &str = "CURRENT.tmp";
/// Marks a pointer whose generation's log starts with its generation record.
pub(super) const POINTER_RECORDED: &str = " v2";
/// More than any valid pointer; a longer `CURRENT` is reported by its first bytes.
const POINTER_MAX_LEN: u64 = 64;
/// Prefix of generation directories: `gen-<20-digit generation>`.
pub(super) const GEN_PREFIX: &str = "gen-";
/// Message key of the generation record, the first record of every generation this version
/// writes (its value is the generation number in decimal). Events have no key.
const GENERATION_RECORD_KEY: &[u8] = b"krabka-rlmm-generation";

/// The directory of generation `n` (generation 0 is `dir` itself: the pre-generation layout).
pub(super) fn gen_dir(dir: &Path, n: u64) -> PathBuf {
    if n == 0 {
        dir.to_path_buf()
    } else {
        dir.join(format!("{GEN_PREFIX}{n:020}"))
    }
}

/// The generation number of a directory name's part after [`GEN_PREFIX`]: exactly 20 digits,
/// at least 1 (the names [`gen_dir`] writes).
fn parse_generation(digits: &str) -> Option<u64> {
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n| n >= 1)
}

/// The names of `dir`'s entries (those that are UTF-8).
pub(super) fn entry_names(dir: &Path) -> Result<Vec<String>, RemoteStorageError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// Removes the file `path`; `Ok(false)` when it was not there.
pub(super) fn remove_file_if_exists(path: &Path) -> Result<bool, RemoteStorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

/// Removes the directory `path` and everything in it; `Ok(false)` when it was not there.
pub(super) fn remove_dir_if_exists(path: &Path) -> Result<bool, RemoteStorageError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

/// Fsyncs the directory `dir`.
pub(super) fn fsync_dir(dir: &Path) -> Result<(), RemoteStorageError> {
    fsutil::fsync_dir(dir).map_err(io_err(dir))
}

/// Removes the pre-generation log files from `dir` (generation 0 after it was superseded).
pub(super) fn remove_legacy_files(dir: &Path) -> Result<bool, RemoteStorageError> {
    let mut removed = false;
    for name in entry_names(dir)? {
        if is_segment_file_name(&name) {
            removed |= remove_file_if_exists(&dir.join(name))?;
        }
    }
    Ok(removed)
}

/// What the metadata directory holds, as far as the manager is concerned.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Generation directories by number.
    pub(super) generations: BTreeMap<u64, PathBuf>,
    /// Pre-generation log files directly in the directory (generation 0).
    pub(super) legacy: bool,
    /// An unrenamed pointer left by an interrupted switch.
    pub(super) current_tmp: bool,
}

impl Listing {
    /// The generation directories, for messages.
    pub(super) fn names(&self) -> String {
        let names: Vec<String> = self
            .generations
            .values()
            .map(|p| p.display().to_string())
            .collect();
        names.join(", ")
    }
}

/// Lists `dir`; an entry named like a generation that is not one the manager writes (a file,
/// or a name other than `gen-<20 digits ≥ 1>`) is an error naming it.
pub(super) fn list_dir(dir: &Path) -> Result<Listing, RemoteStorageError> {
    let mut listing = Listing::default();
    for name in entry_names(dir)? {
        let path = dir.join(&name);
        if name == CURRENT_TMP {
            listing.current_tmp = true;
        } else if let Some(digits) = name.strip_prefix(GEN_PREFIX) {
            match parse_generation(digits) {
                Some(n) if path.is_dir() => {
                    listing.generations.insert(n, path);
                }
                _ => {
                    return Err(MetadataError::Generation {
                        path,
                        reason: format!(
                            "it is named like a generation but is not a {GEN_PREFIX}<20-digit n >= 1> directory the manager writes; move it away"
                        ),
                    }.into());
                }
            }
        } else if is_segment_file_name(&name) {
            listing.legacy = true;
        }
    }
    Ok(listing)
}

/// The generation `CURRENT` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pointer {
    pub(super) generation: u64,
    /// The generation's log must start with its generation record (`<n> v2`).
    pub(super) recorded: bool,
}

fn parse_pointer(text: &str) -> Option<Pointer> {
    let line = text.strip_suffix('\n')?;
    let (digits, recorded) = match line.strip_suffix(POINTER_RECORDED) {
        Some(d) => (d, true),
        None => (line, false),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let generation = digits.parse::<u64>().ok().filter(|&n| n >= 1)?;
    Some(Pointer {
        generation,
        recorded,
    })
}

/// A [`MetadataError::Pointer`] about the pointer at `path`.
pub(super) fn pointer_error(path: PathBuf, reason: impl Into<String>) -> RemoteStorageError {
    MetadataError::Pointer {
        path,
        reason: reason.into(),
    }
    .into()
}

/// Reads the pointer; `None` when there is no `CURRENT`.
pub(super) fn read_current(dir: &Path) -> Result<Option<Pointer>, RemoteStorageError> {
    read_pointer(dir.join(CURRENT))
}

/// Reads the pointer file at `path` ([`CURRENT`] or [`CURRENT_TMP`]); `None` when it is absent.
pub(super) fn read_pointer(path: PathBuf) -> Result<Option<Pointer>, RemoteStorageError> {
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RemoteStorageError::io(path.display(), e)),
    };
    if !meta.is_file() {
        return Err(pointer_error(path, "it is not a regular file"));
    }
    let mut bytes = Vec::new();
    File::open(&path)
        .and_then(|f| f.take(POINTER_MAX_LEN).read_to_end(&mut bytes))
        .map_err(io_err(&path))?;
    match std::str::from_utf8(&bytes).ok().and_then(parse_pointer) {
        Some(p) => Ok(Some(p)),
        None => Err(pointer_error(
            path,
            format!(
                "expected a generation number >= 1, \"{POINTER_RECORDED}\" and a newline, found {:?} ({} bytes)",
                String::from_utf8_lossy(&bytes),
                meta.len()
            ),
        )),
    }
}

/// Writes and syncs the pointer to generation `n` under [`CURRENT_TMP`] (not yet current).
pub(super) fn write_current_tmp(dir: &Path, n: u64) -> Result<(), RemoteStorageError> {
    let tmp = dir.join(CURRENT_TMP);
    fsutil::write_synced(&tmp, format!("{n}{POINTER_RECORDED}\n").as_bytes()).map_err(io_err(&tmp))
}

/// Makes the written pointer current: rename over [`CURRENT`], fsync the directory.
pub(super) fn switch_current(dir: &Path) -> Result<(), RemoteStorageError> {
    let current = dir.join(CURRENT);
    fs::rename(dir.join(CURRENT_TMP), &current).map_err(io_err(&current))?;
    fsync_dir(dir)
}

/// The generation record of generation `n`.
pub(super) fn generation_record(n: u64) -> Message {
    Message::new(n.to_string()).with_key(GENERATION_RECORD_KEY)
}

/// Key of the install record: the second record of a generation a recovery's install wrote
/// (`install_recovered`), its value the generation number. It marks the generation's unknown
/// segments as recovered from the remote tier, so an install killed before its pointer was
/// written is told from a generation the manager cannot account for.
const INSTALL_RECORD_KEY: &[u8] = b"krabka-rlmm-recovered-install";

/// The install record of generation `n`.
pub(super) fn install_record(n: u64) -> Message {
    Message::new(n.to_string()).with_key(INSTALL_RECORD_KEY)
}

/// Whether `message` is generation `n`'s install record.
pub(super) fn is_install_record(message: &Message, n: u64) -> bool {
    message.key.as_deref() == Some(INSTALL_RECORD_KEY)
        && std::str::from_utf8(&message.value).ok() == Some(n.to_string().as_str())
}

/// The generation a record names, if it is a generation record (`Some(None)`: a generation
/// record whose value does not parse).
pub(super) fn generation_of(message: &Message) -> Option<Option<u64>> {
    (message.key.as_deref() == Some(GENERATION_RECORD_KEY)).then(|| {
        std::str::from_utf8(&message.value)
            .ok()
            .and_then(|s| s.parse().ok())
    })
}
