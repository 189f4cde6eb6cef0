//! The durable metadata manager: every event appended to a `krabka_storage::Log`, compacted
//! into a snapshot generation when dead events dominate.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use krabka_protocol::Message;
use krabka_storage::segment::{
    LOG_SUFFIX, QUARANTINE_DIR, decode_records, parse_segment_file_name, read_segment_file,
};
use krabka_storage::{Log, Options, Record, RecoveryMode, SyncPolicy};
use parking_lot::{Mutex, RwLock};

use super::event::MetadataEvent;
use super::{MetadataState, RemoteLogMetadataManager};
use crate::error::RemoteStorageError;
use crate::model::{
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState, TopicIdPartition,
};

/// Records read per batch while replaying the log on open, and written per batch by a
/// compaction.
const REPLAY_BATCH: usize = 1024;
/// The generation pointer: `<n> v2\n` (or `<n>\n`, written before generation records).
const CURRENT: &str = "CURRENT";
/// Where the next pointer is written before it is renamed over [`CURRENT`].
const CURRENT_TMP: &str = "CURRENT.tmp";
/// Marks a pointer whose generation's log starts with its generation record.
const POINTER_RECORDED: &str = " v2";
/// More than any valid pointer; a longer `CURRENT` is reported by its first bytes.
const POINTER_MAX_LEN: u64 = 64;
/// Prefix of generation directories: `gen-<20-digit generation>`.
const GEN_PREFIX: &str = "gen-";
/// The manager's own lock file, held while it is open: one manager per directory.
const MANAGER_LOCK: &str = "rlmm.lock";
/// Message key of the generation record, the first record of every generation this version
/// writes (its value is the generation number in decimal). Events have no key.
const GENERATION_RECORD_KEY: &[u8] = b"krabka-rlmm-generation";

/// Options of a [`DurableRemoteLogMetadataManager`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DurableOptions {
    /// Compact automatically after an append once the current generation holds more than
    /// `2 × live segments + compact_min_events` events; `None` compacts only on
    /// [`DurableRemoteLogMetadataManager::compact`]. Default `Some(1024)`.
    pub compact_min_events: Option<u64>,
}

impl Default for DurableOptions {
    fn default() -> Self {
        Self {
            compact_min_events: Some(1024),
        }
    }
}

impl DurableOptions {
    /// Sets [`compact_min_events`](Self::compact_min_events).
    #[must_use]
    pub fn compact_min_events(mut self, min: Option<u64>) -> Self {
        self.compact_min_events = min;
        self
    }
}

/// A genuinely torn last event that [`DurableRemoteLogMetadataManager::open`] cut from the
/// current generation's log: the file ended inside its frame, as a write cut short by a crash
/// leaves it. Such an event was never acknowledged (its append had not returned `Ok`). The cut
/// bytes were saved into the log's quarantine directory, not deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornEventCut {
    /// The `.log` file that was cut.
    pub path: PathBuf,
    /// The byte position it was cut at (the start of the torn frame).
    pub position: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// Where the cut bytes were saved, when the log reported it.
    pub saved_to: Option<PathBuf>,
    /// What was wrong with the frame.
    pub reason: String,
}

/// Where a simulated crash stops a compaction (tests only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Half the snapshot is in the new generation's log.
    PartialSnapshot,
    /// The new generation is complete and synced; the pointer still names the old one.
    GenerationWritten,
    /// The pointer names the new generation; the old one is still on disk.
    Switched,
}

/// The writer side: the current generation's log and its bookkeeping, under one lock.
#[derive(Debug)]
struct Writer {
    /// `None` only once the manager is closed ([`DurableRemoteLogMetadataManager::close`]).
    log: Option<Log>,
    generation: u64,
    /// Events (records) in the current generation's log.
    events: u64,
    /// No automatic compaction before this many events (backs off after a failed one).
    retry_at: u64,
}

/// A [`RemoteLogMetadataManager`] that appends every accepted event (an add or an update, in
/// the [`event`](super::event) encoding) to a `krabka_storage::Log` synced on every append,
/// and rebuilds its state by replaying that log on open.
///
/// Durability: an add or update that returned `Ok` survives a process crash and a power loss.
/// One that returned an error may or may not have been persisted (the write may have reached
/// the disk before its fsync failed): after a failed append the manager refuses further writes
/// (reads still work) and must be reopened, which shows what really is on disk.
///
/// # The metadata store never guesses
/// Events are validated before they are appended, so a replay only ever meets valid events.
/// Open reads the log strictly: the only damage it repairs is a genuinely torn last event (the
/// file ends inside its frame: an append cut short by a crash, never acknowledged), which it
/// cuts, saving the bytes aside, and reports in [`torn_event_cut`](Self::torn_event_cut).
/// A manager that was closed ([`close`](Self::close), or dropped) recorded its log's end as
/// the log's recovery point, so its last event is never taken for a torn one: losing it later
/// is damage, refused like any other.
/// Anything else fails the open with a typed error naming the file, and changes nothing:
/// - a bad frame, an event that does not decode or does not apply, a missing or wrong
///   generation record: [`RemoteStorageError::MetadataLog`] (file, byte or seq);
/// - a missing `CURRENT` while generations exist, an unparsable one, or one naming a missing
///   generation: [`RemoteStorageError::MetadataPointer`];
/// - a generation directory it cannot account for: [`RemoteStorageError::MetadataGeneration`].
///
/// # Compaction
/// The log lives in a generation directory `gen-<20-digit n>` named by the pointer file
/// `CURRENT`; its first record is a generation record naming `n`, so a log that lost its start
/// (emptied, replaced, truncated to nothing) is told from a new one. [`compact`](Self::compact)
/// (run automatically when dead events dominate, see [`DurableOptions`]) writes the generation
/// record and a snapshot of the live segments to generation `n + 1` and syncs it, renames a new
/// pointer over `CURRENT` and fsyncs the directory, then closes and removes generation `n`.
/// A crash at any point leaves `CURRENT` naming a complete generation. Open removes only what
/// the manager itself left: generations older than the current one (superseded by a completed
/// switch), an unrenamed `CURRENT.tmp`, and generation `n + 1` when `CURRENT` never named it and
/// every event it holds is a snapshot of a segment the current generation knows (so removing it
/// loses nothing). So disk use, memory and replay time are bounded by the live segments.
///
/// Dropped ids (`DeleteSegmentFinished`) are remembered, to reject their re-adding, only
/// until the next compaction: after it an add may reuse one. Ids are fresh random UUIDs per
/// copy attempt, so that only lets a caller bug go undetected.
///
/// A directory written before generations existed (the log directly in it, no `CURRENT`) is
/// read as generation 0 and moved into `gen-…1` by the first compaction.
///
/// ```
/// use krabka_remote_storage::*;
/// use krabka_remote_storage::metadata::*;
///
/// let dir = tempfile::tempdir()?;
/// let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
/// let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), 0, 9).build()?;
/// {
///     let rlmm = DurableRemoteLogMetadataManager::open(dir.path())?;
///     rlmm.add_remote_log_segment_metadata(&m)?;
///     rlmm.compact()?;
/// }
/// let reopened = DurableRemoteLogMetadataManager::open(dir.path())?;
/// assert_eq!(reopened.list_remote_log_segments(&tp)?, vec![m]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DurableRemoteLogMetadataManager {
    dir: PathBuf,
    opts: DurableOptions,
    /// Serializes writers: validate, append, commit (and compactions) happen as one step.
    writer: Mutex<Writer>,
    state: RwLock<MetadataState>,
    poisoned: AtomicBool,
    /// The torn last event open cut, if any.
    torn_event_cut: Option<TornEventCut>,
    /// The locked [`MANAGER_LOCK`]; released when the manager is dropped.
    _lock: File,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RemoteStorageError + '_ {
    move |e| RemoteStorageError::io(path.display(), e)
}

fn log_options(recovery: RecoveryMode) -> Options {
    Options {
        sync: SyncPolicy::EveryAppend,
        recovery,
        ..Options::default()
    }
}

/// The directory of generation `n` (generation 0 is `dir` itself: the pre-generation layout).
fn gen_dir(dir: &Path, n: u64) -> PathBuf {
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

fn fsync_dir(dir: &Path) -> Result<(), RemoteStorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Whether `name` is a `krabka_storage` segment file (`<20 digits>.log|.index|.timeindex`).
fn is_segment_file(name: &str) -> bool {
    name.split_once('.').is_some_and(|(digits, suffix)| {
        digits.len() == 20
            && digits.bytes().all(|b| b.is_ascii_digit())
            && matches!(suffix, "log" | "index" | "timeindex")
    })
}

fn entry_names(dir: &Path) -> Result<Vec<String>, RemoteStorageError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

fn remove_file_if_exists(path: &Path) -> Result<bool, RemoteStorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

fn remove_dir_if_exists(path: &Path) -> Result<bool, RemoteStorageError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

/// Removes the pre-generation log files from `dir` (generation 0 after it was superseded).
fn remove_legacy_files(dir: &Path) -> Result<bool, RemoteStorageError> {
    let mut removed = false;
    for name in entry_names(dir)? {
        if is_segment_file(&name) {
            removed |= remove_file_if_exists(&dir.join(name))?;
        }
    }
    Ok(removed)
}

/// What the metadata directory holds, as far as the manager is concerned.
#[derive(Debug, Default)]
struct Listing {
    /// Generation directories by number.
    generations: BTreeMap<u64, PathBuf>,
    /// Pre-generation log files directly in the directory (generation 0).
    legacy: bool,
    /// An unrenamed pointer left by an interrupted switch.
    current_tmp: bool,
}

impl Listing {
    fn names(&self) -> String {
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
fn list_dir(dir: &Path) -> Result<Listing, RemoteStorageError> {
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
                    return Err(RemoteStorageError::MetadataGeneration {
                        path,
                        reason: format!(
                            "it is named like a generation but is not a {GEN_PREFIX}<20-digit n >= 1> directory the manager writes; move it away"
                        ),
                    });
                }
            }
        } else if is_segment_file(&name) {
            listing.legacy = true;
        }
    }
    Ok(listing)
}

/// The generation `CURRENT` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pointer {
    generation: u64,
    /// The generation's log must start with its generation record (`<n> v2`).
    recorded: bool,
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

fn pointer_error(path: PathBuf, reason: impl Into<String>) -> RemoteStorageError {
    RemoteStorageError::MetadataPointer {
        path,
        reason: reason.into(),
    }
}

/// Reads the pointer; `None` when there is no `CURRENT`.
fn read_current(dir: &Path) -> Result<Option<Pointer>, RemoteStorageError> {
    let path = dir.join(CURRENT);
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
fn write_current_tmp(dir: &Path, n: u64) -> Result<(), RemoteStorageError> {
    let tmp = dir.join(CURRENT_TMP);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(format!("{n}{POINTER_RECORDED}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err(&tmp))
}

/// Makes the written pointer current: rename over [`CURRENT`], fsync the directory.
fn switch_current(dir: &Path) -> Result<(), RemoteStorageError> {
    let current = dir.join(CURRENT);
    fs::rename(dir.join(CURRENT_TMP), &current).map_err(io_err(&current))?;
    fsync_dir(dir)
}

fn lock_manager(dir: &Path) -> Result<File, RemoteStorageError> {
    let path = dir.join(MANAGER_LOCK);
    match krabka_storage::create_and_lock(&path) {
        Ok(file) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(RemoteStorageError::Backend {
            operation: "metadata open".to_owned(),
            location: dir.display().to_string(),
            message: "another metadata manager has this directory open".to_owned(),
            source: None,
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(RemoteStorageError::io(path.display(), e)),
    }
}

/// The generation record of generation `n`.
fn generation_record(n: u64) -> Message {
    Message::new(n.to_string()).with_key(GENERATION_RECORD_KEY)
}

/// The generation a record names, if it is a generation record (`Some(None)`: a generation
/// record whose value does not parse).
fn generation_of(message: &Message) -> Option<Option<u64>> {
    (message.key.as_deref() == Some(GENERATION_RECORD_KEY)).then(|| {
        std::str::from_utf8(&message.value)
            .ok()
            .and_then(|s| s.parse().ok())
    })
}

/// Opens a generation's log strictly. A genuinely torn last event (the file ends inside its
/// frame) is the one damage tolerated: the log is reopened cutting it, and the cut is returned.
/// Any other damage is an error naming the file.
fn open_log(log_dir: &Path) -> Result<(Log, Option<TornEventCut>), RemoteStorageError> {
    match Log::open(log_dir, log_options(RecoveryMode::Strict)) {
        Ok(log) => Ok((log, None)),
        Err(krabka_storage::Error::TornTail {
            path,
            position,
            bytes_after,
            incomplete: true,
            reason,
        }) => {
            let log = Log::open(log_dir, log_options(RecoveryMode::TolerateTornTail))
                .map_err(|e| storage_error(log_dir, "open", e))?;
            let report = log.recovery_report();
            let cut_as_reported = report
                .truncated
                .as_ref()
                .is_some_and(|t| t.path == path && t.position == position);
            if !cut_as_reported {
                return Err(RemoteStorageError::MetadataLog {
                    path,
                    position: Some(position),
                    seq: None,
                    reason: format!(
                        "a torn last event was found there, but recovery did not cut exactly it: {report}"
                    ),
                });
            }
            let saved_to = report
                .quarantined
                .iter()
                .find(|q| q.from == path && q.position == position)
                .map(|q| q.to.clone());
            Ok((
                log,
                Some(TornEventCut {
                    path,
                    position,
                    bytes: bytes_after,
                    saved_to,
                    reason,
                }),
            ))
        }
        Err(e) => Err(storage_error(log_dir, "open", e)),
    }
}

/// Every complete record of a generation's `.log` files in seq order, read without opening it
/// as a log (nothing is changed, no lock taken). An incomplete last frame is left out; a bad
/// complete frame is an error.
fn read_generation(dir: &Path) -> Result<Vec<Record>, RemoteStorageError> {
    let mut logs: Vec<(u64, PathBuf)> = entry_names(dir)?
        .iter()
        .filter_map(|name| match parse_segment_file_name(name) {
            Some((base, LOG_SUFFIX)) => Some((base, dir.join(name))),
            _ => None,
        })
        .collect();
    logs.sort();
    let mut out = Vec::new();
    for (_, path) in logs {
        let bytes = read_segment_file(&path).map_err(|e| storage_error(dir, "read", e))?;
        let decoded = decode_records(&bytes, 0, usize::MAX).map_err(|e| match e {
            krabka_storage::Error::Corrupt {
                position, reason, ..
            } => RemoteStorageError::MetadataLog {
                path: path.clone(),
                position: Some(position),
                seq: None,
                reason,
            },
            other => storage_error(dir, "read", other),
        })?;
        out.extend(decoded.records);
    }
    Ok(out)
}

/// Whether generation 1 is what an interrupted first open leaves: no `CURRENT`, and a log
/// that holds no event (at most its generation record, maybe torn).
fn is_unfinished_creation(listing: &Listing) -> Result<bool, RemoteStorageError> {
    let Some(path) = listing.generations.get(&1) else {
        return Ok(false);
    };
    if listing.generations.len() != 1 || listing.legacy {
        return Ok(false);
    }
    let Ok(records) = read_generation(path) else {
        return Ok(false);
    };
    Ok(match records.as_slice() {
        [] => true,
        [only] => generation_of(&only.message) == Some(Some(1)),
        _ => false,
    })
}

/// Checks that generation `n` (never named by `CURRENT`) is the manager's own unfinished
/// compaction target: at most its generation record, then only snapshot events of segments the
/// current generation knows. Removing it then loses nothing.
fn check_unfinished_generation(
    path: &Path,
    n: u64,
    state: &MetadataState,
) -> Result<(), RemoteStorageError> {
    let unaccounted = |reason: String| RemoteStorageError::MetadataGeneration {
        path: path.to_path_buf(),
        reason: format!(
            "CURRENT names generation {} and this newer one is not an unfinished compaction of it: {reason}",
            n - 1
        ),
    };
    // Only what a log writes may be removed with it.
    for name in entry_names(path)? {
        if name != krabka_storage::LOCK_FILE_NAME
            && name != QUARANTINE_DIR
            && parse_segment_file_name(&name).is_none()
        {
            return Err(unaccounted(format!(
                "it holds {name:?}, which no log of the manager writes"
            )));
        }
    }
    let records = read_generation(path).map_err(|e| unaccounted(e.to_string()))?;
    for (i, record) in records.iter().enumerate() {
        if let Some(named) = generation_of(&record.message) {
            if i == 0 && named == Some(n) {
                continue;
            }
            return Err(unaccounted(format!(
                "seq {}: a generation record for {named:?} out of place",
                record.seq
            )));
        }
        match MetadataEvent::decode(&record.message.value) {
            Ok(MetadataEvent::Snapshot(m)) => {
                let id = m.remote_log_segment_id();
                if state.get(id).is_none() && !state.was_dropped(id) {
                    return Err(unaccounted(format!(
                        "seq {}: a snapshot of segment {id}, which the current generation does not know",
                        record.seq
                    )));
                }
            }
            Ok(event) => {
                return Err(unaccounted(format!(
                    "seq {}: an add or update of segment {} (only a current generation gets those; CURRENT may name the wrong generation)",
                    record.seq,
                    event.segment_id()
                )));
            }
            Err(e) => return Err(unaccounted(format!("seq {}: {e}", record.seq))),
        }
    }
    Ok(())
}

/// Replays generation `n`'s log into `state`; returns the number of events (the generation
/// record not counted). With `recorded`, the log must start with generation `n`'s record.
fn replay(
    log: &Log,
    n: u64,
    recorded: bool,
    state: &mut MetadataState,
) -> Result<u64, RemoteStorageError> {
    let segments = log.segments();
    let path_of = |seq: u64| {
        segments
            .iter()
            .rev()
            .find(|s| s.base_seq <= seq)
            .or(segments.first())
            .map_or_else(|| log.dir().to_path_buf(), |s| s.log_path.clone())
    };
    let damaged = |seq: Option<u64>, reason: String| RemoteStorageError::MetadataLog {
        path: path_of(seq.unwrap_or(1)),
        position: None,
        seq,
        reason,
    };
    let last = log.last_seq();
    let first = log.first_seq().max(1);
    if recorded && (first != 1 || last < first) {
        let holds = if last < first {
            "no record".to_owned()
        } else {
            format!("seqs {first}..={last}")
        };
        return Err(damaged(
            None,
            format!(
                "generation {n} was written starting with its generation record at seq 1, but the log holds {holds}: its start was lost (the file was emptied, truncated, deleted or replaced)"
            ),
        ));
    }
    let mut from = first;
    let mut events = 0u64;
    let mut in_snapshot = true;
    while from <= last {
        let records = log
            .read(from, REPLAY_BATCH)
            .map_err(|e| storage_error(log.dir(), "replay", e))?;
        if records.is_empty() {
            return Err(damaged(
                Some(from),
                format!("the log claims records up to seq {last} but returns none"),
            ));
        }
        for record in records {
            let seq = record.seq;
            from = seq + 1;
            if let Some(named) = generation_of(&record.message) {
                if seq == 1 && named == Some(n) {
                    continue;
                }
                return Err(damaged(
                    Some(seq),
                    format!(
                        "a generation record for {named:?} where only generation {n}'s may stand, at seq 1"
                    ),
                ));
            }
            if recorded && seq == 1 {
                return Err(damaged(
                    Some(seq),
                    format!("generation {n}'s log does not start with its generation record"),
                ));
            }
            let event = MetadataEvent::decode(&record.message.value)
                .map_err(|e| damaged(Some(seq), e.to_string()))?;
            let applied = match &event {
                MetadataEvent::Snapshot(_) if !in_snapshot => {
                    Err(RemoteStorageError::invalid_argument(
                        "a snapshot record after an add or update",
                    ))
                }
                MetadataEvent::Snapshot(m) => state.restore(m),
                MetadataEvent::Add(m) => state.add(m),
                MetadataEvent::Update(u) => state.update(u).map(drop),
            };
            in_snapshot &= matches!(event, MetadataEvent::Snapshot(_));
            applied.map_err(|e| {
                damaged(
                    Some(seq),
                    format!(
                        "event for segment {} does not apply on replay: {e}",
                        event.segment_id()
                    ),
                )
            })?;
            events += 1;
        }
    }
    Ok(events)
}

impl DurableRemoteLogMetadataManager {
    /// Opens (creating it if needed) the metadata in `dir` with [`DurableOptions::default`].
    ///
    /// # Errors
    /// As [`open_with`](Self::open_with).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, RemoteStorageError> {
        Self::open_with(dir, DurableOptions::default())
    }

    /// Opens (creating it if needed) the metadata in `dir`: takes the directory's lock, finds
    /// the current generation, replays it, and removes what an interrupted compaction of this
    /// manager left (see the type's docs).
    ///
    /// # Errors
    /// [`RemoteStorageError::MetadataPointer`], [`RemoteStorageError::MetadataGeneration`] and
    /// [`RemoteStorageError::MetadataLog`] naming the damaged file (nothing is changed or
    /// deleted then); [`RemoteStorageError::Backend`] when another manager has `dir` open;
    /// [`RemoteStorageError::Io`].
    pub fn open_with(
        dir: impl AsRef<Path>,
        opts: DurableOptions,
    ) -> Result<Self, RemoteStorageError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let lock = lock_manager(&dir)?;
        let listing = list_dir(&dir)?;
        // `fresh`: generation 1 of a new directory (or of a first open that crashed before
        // `CURRENT` existed), made current below.
        let (pointer, fresh) = match read_current(&dir)? {
            Some(p) => {
                if !listing.generations.contains_key(&p.generation) {
                    return Err(pointer_error(
                        dir.join(CURRENT),
                        format!(
                            "it names generation {}, but {} does not exist (generations present: [{}])",
                            p.generation,
                            gen_dir(&dir, p.generation).display(),
                            listing.names()
                        ),
                    ));
                }
                (p, false)
            }
            None if listing.legacy => (
                Pointer {
                    generation: 0,
                    recorded: false,
                },
                false,
            ),
            None if listing.generations.is_empty() || is_unfinished_creation(&listing)? => (
                Pointer {
                    generation: 1,
                    recorded: true,
                },
                true,
            ),
            None => {
                return Err(pointer_error(
                    dir.join(CURRENT),
                    format!(
                        "it is missing, but the directory holds generations [{}]; refusing to guess which one is current (restore CURRENT as \"<n>{POINTER_RECORDED}\\n\")",
                        listing.names()
                    ),
                ));
            }
        };
        let generation = pointer.generation;
        // Only generation n + 1 can be an unfinished compaction; a newer one is not ours.
        let unfinished = generation + 1;
        if let Some((_, path)) = listing
            .generations
            .range(unfinished.saturating_add(1)..)
            .next()
        {
            return Err(RemoteStorageError::MetadataGeneration {
                path: path.clone(),
                reason: format!(
                    "CURRENT names generation {generation}, and a compaction only ever writes the next one"
                ),
            });
        }
        let log_dir = gen_dir(&dir, generation);
        let (log, torn_event_cut) = open_log(&log_dir)?;
        if fresh {
            if log.last_seq() == 0 {
                log.append(&generation_record(generation))
                    .map_err(|e| storage_error(&log_dir, "append", e))?;
            }
            write_current_tmp(&dir, generation)?;
            switch_current(&dir)?;
        }
        let mut state = MetadataState::new();
        let events = replay(&log, generation, pointer.recorded, &mut state)?;
        let leftover = listing
            .generations
            .get(&unfinished)
            .filter(|_| !fresh)
            .map(|path| check_unfinished_generation(path, unfinished, &state).map(|()| path))
            .transpose()?;
        // Everything is accounted for: remove what this manager superseded or never finished.
        let mut removed = false;
        if listing.current_tmp {
            removed |= remove_file_if_exists(&dir.join(CURRENT_TMP))?;
        }
        for path in listing
            .generations
            .range(..generation)
            .map(|(_, p)| p)
            .chain(leftover)
        {
            removed |= remove_dir_if_exists(path)?;
        }
        if generation >= 1 && listing.legacy {
            removed |= remove_legacy_files(&dir)?;
        }
        if removed {
            fsync_dir(&dir)?;
        }
        Ok(Self {
            dir,
            opts,
            writer: Mutex::new(Writer {
                log: Some(log),
                generation,
                events,
                retry_at: 0,
            }),
            state: RwLock::new(state),
            poisoned: AtomicBool::new(false),
            torn_event_cut,
            _lock: lock,
        })
    }

    /// The torn last event open cut from the current generation's log, if it found one (see
    /// the type's docs); `None` when the log was intact.
    pub fn torn_event_cut(&self) -> Option<&TornEventCut> {
        self.torn_event_cut.as_ref()
    }

    /// The directory of the metadata (holding `CURRENT` and the generation directories).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current generation (0 for a directory in the pre-generation layout).
    pub fn generation(&self) -> u64 {
        self.writer.lock().generation
    }

    /// The directory of the current generation's log.
    pub fn generation_dir(&self) -> PathBuf {
        gen_dir(&self.dir, self.generation())
    }

    /// Events (snapshot records, adds and updates) in the current generation's log: what an
    /// open would replay.
    pub fn events_in_generation(&self) -> u64 {
        self.writer.lock().events
    }

    /// How many dropped ids are remembered (those dropped since the last compaction).
    pub fn dropped_ids_remembered(&self) -> usize {
        self.state.read().dropped_len()
    }

    /// Whether an earlier append failed, so writes are refused until the manager is reopened.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Writes the live segments to a new generation and makes it current, removing the old
    /// one (see the type's docs). Also forgets the dropped ids.
    ///
    /// # Errors
    /// [`RemoteStorageError::Io`] / [`RemoteStorageError::Backend`]. A failure before the
    /// switch leaves the old generation current and the manager usable; one while switching
    /// (the pointer renamed but the directory not synced) poisons the manager, which must be
    /// reopened; one while removing the old generation leaves it for the next open to remove.
    pub fn compact(&self) -> Result<(), RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        self.compact_locked(&mut w, None)
    }

    /// Records segments rebuilt from the remote tier ([`crate::recovery`]), all
    /// `CopySegmentFinished`, in one step: they are checked, then written with a compaction
    /// (a new generation holding every live segment, synced once) rather than as an add and an
    /// update each. Segments already recorded identically are skipped. Returns how many were
    /// new; none makes no write.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] for a segment not `CopySegmentFinished`, listed
    /// twice, recorded differently, or dropped since the last compaction; as
    /// [`compact`](Self::compact) otherwise. A failed write poisons the manager (reopen it:
    /// nothing was recorded).
    pub fn install_recovered(
        &self,
        segments: &[RemoteLogSegmentMetadata],
    ) -> Result<usize, RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        let mut new = Vec::new();
        let mut seen = std::collections::HashSet::new();
        {
            let state = self.state.read();
            for m in segments {
                let id = m.remote_log_segment_id();
                if m.state() != RemoteLogSegmentState::CopySegmentFinished {
                    return Err(RemoteStorageError::invalid_argument(format!(
                        "recovered segment {id} is {:?}, not CopySegmentFinished",
                        m.state()
                    )));
                }
                if !seen.insert(id.clone()) {
                    return Err(RemoteStorageError::invalid_argument(format!(
                        "recovered segment {id} is listed twice"
                    )));
                }
                match state.get(id) {
                    Some(known) if known == m => continue,
                    Some(_) => {
                        return Err(RemoteStorageError::invalid_argument(format!(
                            "remote segment {id} is already recorded differently"
                        )));
                    }
                    None if state.was_dropped(id) => {
                        return Err(RemoteStorageError::invalid_argument(format!(
                            "remote segment {id} was deleted"
                        )));
                    }
                    None => new.push(m.clone()),
                }
            }
        }
        if new.is_empty() {
            return Ok(0);
        }
        let count = new.len();
        {
            let mut state = self.state.write();
            for m in new {
                state.commit(m);
            }
        }
        // On failure the state holds segments that are not on disk: the manager is poisoned
        // and must be reopened, which reads what the disk holds.
        if let Err(e) = self.compact_locked(&mut w, None) {
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(e);
        }
        Ok(count)
    }

    fn compact_locked(
        &self,
        w: &mut Writer,
        crash: Option<Step>,
    ) -> Result<(), RemoteStorageError> {
        let simulated = |step: Step| RemoteStorageError::Backend {
            operation: "metadata compaction".to_owned(),
            location: self.dir.display().to_string(),
            message: format!("simulated crash at {step:?}"),
            source: None,
        };
        let snapshot = self.state.read().snapshot();
        let next = w.generation + 1;
        let next_dir = gen_dir(&self.dir, next);
        let written = (|| {
            remove_dir_if_exists(&next_dir)?;
            let log = Log::open(&next_dir, log_options(RecoveryMode::Strict))
                .map_err(|e| storage_error(&next_dir, "open", e))?;
            log.append(&generation_record(next))
                .map_err(|e| storage_error(&next_dir, "generation record append", e))?;
            let messages: Vec<Message> = snapshot
                .iter()
                .map(|m| {
                    Message::new(MetadataEvent::Snapshot(m.clone()).encode())
                        .with_timestamp(m.event_timestamp_ms())
                })
                .collect();
            let upto = if crash == Some(Step::PartialSnapshot) {
                messages.len() / 2
            } else {
                messages.len()
            };
            for chunk in messages
                .get(..upto)
                .unwrap_or_default()
                .chunks(REPLAY_BATCH)
            {
                log.append_batch(chunk)
                    .map_err(|e| storage_error(&next_dir, "snapshot append", e))?;
            }
            if crash == Some(Step::PartialSnapshot) {
                return Err(simulated(Step::PartialSnapshot));
            }
            log.sync()
                .map_err(|e| storage_error(&next_dir, "snapshot sync", e))?;
            // The new generation's entry in `dir`.
            fsync_dir(&self.dir)?;
            if crash == Some(Step::GenerationWritten) {
                return Err(simulated(Step::GenerationWritten));
            }
            write_current_tmp(&self.dir, next)?;
            Ok(log)
        })();
        let new_log = match written {
            Ok(log) => log,
            Err(e) => {
                if crash.is_none() {
                    // The new log is closed (dropped) by now; the old generation stays current.
                    let _ = remove_file_if_exists(&self.dir.join(CURRENT_TMP));
                    let _ = remove_dir_if_exists(&next_dir);
                }
                return Err(e);
            }
        };
        if let Err(e) = switch_current(&self.dir) {
            // `CURRENT` may name either generation after a crash: only a reopen can tell. The
            // new generation is complete and synced: closed, its end is on record either way.
            self.poisoned.store(true, Ordering::SeqCst);
            let _ = new_log.close();
            return Err(e);
        }
        if crash == Some(Step::Switched) {
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(simulated(Step::Switched));
        }
        let old = w.log.replace(new_log);
        let old_generation = std::mem::replace(&mut w.generation, next);
        w.events = u64::try_from(snapshot.len()).unwrap_or(u64::MAX);
        w.retry_at = 0;
        self.state.write().forget_dropped();
        // The old generation is superseded: it is closed (synced, its recovery point written,
        // its directory lock released) before its files go. A failed close does not matter
        // then: `CURRENT` names the new generation, and the old one is removed.
        if let Some(old) = old {
            let _ = old.close();
        }
        let old_dir = gen_dir(&self.dir, old_generation);
        let removed = if old_generation == 0 {
            remove_legacy_files(&self.dir)
        } else {
            remove_dir_if_exists(&old_dir)
        };
        removed
            .and_then(|_| fsync_dir(&self.dir))
            .map_err(|e| RemoteStorageError::Backend {
                operation: "metadata compaction".to_owned(),
                location: old_dir.display().to_string(),
                message: format!(
                    "generation {next} is current, but generation {old_generation} could not be removed (the next open removes it): {e}"
                ),
                source: Some(Box::new(e)),
            })
    }

    /// Compacts when dead events dominate; a failure is retried after more events.
    fn maybe_compact(&self, w: &mut Writer) {
        let Some(min) = self.opts.compact_min_events else {
            return;
        };
        let live = u64::try_from(self.state.read().len()).unwrap_or(u64::MAX);
        let threshold = live.saturating_mul(2).saturating_add(min);
        if w.events > threshold
            && w.events >= w.retry_at
            && !self.is_poisoned()
            && self.compact_locked(w, None).is_err()
        {
            w.retry_at = w.events.saturating_add(min.max(1));
        }
    }

    /// Appends a validated event, makes `next` current, and compacts if it is due.
    fn persist(
        &self,
        w: &mut Writer,
        event: &MetadataEvent,
        next: RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let message = Message::new(event.encode()).with_timestamp(next.event_timestamp_ms());
        let Some(log) = w.log.as_ref() else {
            return Err(closed_error(&self.dir));
        };
        if let Err(e) = log.append(&message) {
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(storage_error(
                &gen_dir(&self.dir, w.generation),
                "append",
                e,
            ));
        }
        self.state.write().commit(next);
        w.events = w.events.saturating_add(1);
        self.maybe_compact(w);
        Ok(())
    }

    /// Closes the manager: the current generation's log is synced and closed
    /// (`krabka_storage::Log::close`), which records its end as the log's recovery point, so a
    /// later loss of its last, acknowledged event is reported by the next open as damage
    /// instead of being cut as a torn write. Dropping the manager does the same, best effort
    /// (ignoring a failure); `close` reports it.
    ///
    /// # Errors
    /// [`RemoteStorageError::Io`] (and the other storage errors) when the final sync or the
    /// recovery point write fails: the log is closed either way, and the next open reads what
    /// is on disk.
    pub fn close(self) -> Result<(), RemoteStorageError> {
        self.close_log()
    }

    /// Takes the current generation's log out of the writer and closes it (once).
    fn close_log(&self) -> Result<(), RemoteStorageError> {
        let mut w = self.writer.lock();
        let generation = w.generation;
        match w.log.take() {
            Some(log) => log
                .close()
                .map_err(|e| storage_error(&gen_dir(&self.dir, generation), "close", e)),
            None => Ok(()),
        }
    }

    fn check_writable(&self) -> Result<(), RemoteStorageError> {
        if self.is_poisoned() {
            return Err(RemoteStorageError::Backend {
                operation: "metadata append".to_owned(),
                location: self.dir.display().to_string(),
                message: "an earlier append or compaction failed; reopen the metadata manager"
                    .to_owned(),
                source: None,
            });
        }
        Ok(())
    }
}

impl Drop for DurableRemoteLogMetadataManager {
    /// Closes the current generation's log as [`close`](Self::close) does, ignoring a
    /// failure (the log is closed either way; the lock file is released afterwards).
    fn drop(&mut self) {
        let _ = self.close_log();
    }
}

/// The error of a write to a closed manager.
fn closed_error(dir: &Path) -> RemoteStorageError {
    RemoteStorageError::Backend {
        operation: "metadata append".to_owned(),
        location: dir.display().to_string(),
        message: "the metadata manager is closed".to_owned(),
        source: None,
    }
}

/// A storage error as this crate's: damage becomes [`RemoteStorageError::MetadataLog`] naming
/// the file, byte and seqs.
fn storage_error(dir: &Path, operation: &str, e: krabka_storage::Error) -> RemoteStorageError {
    use krabka_storage::Error as E;
    let damaged = |path: PathBuf, position: Option<u64>, seq: Option<u64>, reason: String| {
        RemoteStorageError::MetadataLog {
            path,
            position,
            seq,
            reason,
        }
    };
    match e {
        E::Io { path, source } => RemoteStorageError::Io {
            location: path.display().to_string(),
            source,
        },
        E::Corrupt {
            path,
            position,
            reason,
        } => damaged(path, Some(position), None, reason),
        E::Damaged {
            path,
            position,
            reason,
            first_seq,
            last_seq,
        } => damaged(
            path,
            Some(position),
            None,
            format!("{reason}; events {first_seq}..={last_seq} follow the damage or are missing"),
        ),
        E::TornTail {
            path,
            position,
            bytes_after,
            incomplete,
            reason,
        } => damaged(
            path,
            Some(position),
            None,
            format!(
                "{reason}; {bytes_after} bytes from there to the end{}",
                if incomplete {
                    ""
                } else {
                    " hold a complete frame that fails its checks, not a torn write"
                }
            ),
        ),
        E::SeqGap {
            previous,
            path,
            expected,
            found,
        } => damaged(
            path,
            None,
            Some(found),
            format!(
                "it starts at seq {found}, but {} ends at seq {} (a segment was deleted or truncated, or this file is stray)",
                previous.display(),
                expected.saturating_sub(1)
            ),
        ),
        E::SeqOverlap {
            previous,
            path,
            expected,
            found,
        } => damaged(
            path,
            None,
            Some(found),
            format!(
                "it starts at seq {found}, but {} already holds seqs up to {}",
                previous.display(),
                expected.saturating_sub(1)
            ),
        ),
        E::Quarantined {
            first_seq,
            last_seq,
            path,
        } => damaged(
            path,
            None,
            Some(first_seq),
            format!("events {first_seq}..={last_seq} were moved aside by a repair"),
        ),
        E::NotADirectory { path } => RemoteStorageError::MetadataGeneration {
            path,
            reason: "it is not a directory".to_owned(),
        },
        other => RemoteStorageError::Backend {
            operation: format!("metadata log {operation}"),
            location: dir.display().to_string(),
            message: other.to_string(),
            source: Some(Box::new(other)),
        },
    }
}

impl RemoteLogMetadataManager for DurableRemoteLogMetadataManager {
    fn add_remote_log_segment_metadata(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        self.state.read().check_add(metadata)?;
        self.persist(
            &mut w,
            &MetadataEvent::Add(metadata.clone()),
            metadata.clone(),
        )
    }

    fn update_remote_log_segment_metadata(
        &self,
        update: &RemoteLogSegmentMetadataUpdate,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        let next = self.state.read().check_update(update)?;
        self.persist(&mut w, &MetadataEvent::Update(update.clone()), next.clone())?;
        Ok(next)
    }

    fn remote_log_segment_metadata(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().find(tp, offset))
    }

    fn segment_for_offset_ready(
        &self,
        tp: &TopicIdPartition,
        offset: u64,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        self.state.read().find_ready(tp, offset)
    }

    fn list_remote_log_segments(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Vec<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().list(tp))
    }

    fn highest_remote_offset(
        &self,
        tp: &TopicIdPartition,
    ) -> Result<Option<u64>, RemoteStorageError> {
        Ok(self.state.read().highest_offset(tp))
    }

    fn remote_log_size(&self, tp: &TopicIdPartition) -> Result<u64, RemoteStorageError> {
        Ok(self.state.read().size(tp))
    }

    fn segment_metadata(
        &self,
        id: &RemoteLogSegmentId,
    ) -> Result<Option<RemoteLogSegmentMetadata>, RemoteStorageError> {
        Ok(self.state.read().get(id).cloned())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::model::RemoteLogSegmentState::{self, *};
    use uuid::Uuid;

    fn tp() -> TopicIdPartition {
        TopicIdPartition::new(Uuid::from_u128(9), "meta", 1)
    }

    fn to(
        m: &RemoteLogSegmentMetadata,
        s: RemoteLogSegmentState,
    ) -> RemoteLogSegmentMetadataUpdate {
        RemoteLogSegmentMetadataUpdate::to_state(m.remote_log_segment_id().clone(), s, 3)
    }

    /// Fills a manager with live segments in every live state and some dropped ones; returns
    /// the listing and a dropped segment.
    fn fill(
        rlmm: &DurableRemoteLogMetadataManager,
    ) -> (Vec<RemoteLogSegmentMetadata>, RemoteLogSegmentMetadata) {
        let mut dropped = None;
        for i in 0..12u64 {
            let m = RemoteLogSegmentMetadata::builder(
                RemoteLogSegmentId::generate(tp()),
                i * 10,
                i * 10 + 9,
            )
            .segment_size_in_bytes(5)
            .build()
            .unwrap();
            rlmm.add_remote_log_segment_metadata(&m).unwrap();
            let steps: &[RemoteLogSegmentState] = match i % 4 {
                0 => &[],
                1 => &[CopySegmentFinished],
                2 => &[CopySegmentFinished, DeleteSegmentStarted],
                _ => &[
                    CopySegmentFinished,
                    DeleteSegmentStarted,
                    DeleteSegmentFinished,
                ],
            };
            for s in steps {
                rlmm.update_remote_log_segment_metadata(&to(&m, *s))
                    .unwrap();
            }
            if i % 4 == 3 {
                dropped = Some(m);
            }
        }
        (
            rlmm.list_remote_log_segments(&tp()).unwrap(),
            dropped.unwrap(),
        )
    }

    fn generations(dir: &Path) -> Vec<String> {
        let mut g: Vec<_> = entry_names(dir)
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with(GEN_PREFIX))
            .collect();
        g.sort();
        g
    }

    fn manual() -> DurableOptions {
        DurableOptions::default().compact_min_events(None)
    }

    #[test]
    fn a_crash_at_any_compaction_step_leaves_one_complete_generation() {
        for step in [
            Step::PartialSnapshot,
            Step::GenerationWritten,
            Step::Switched,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let (expected, _) = {
                let rlmm =
                    DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
                let filled = fill(&rlmm);
                let mut w = rlmm.writer.lock();
                let err = rlmm.compact_locked(&mut w, Some(step)).unwrap_err();
                assert!(err.to_string().contains("simulated crash"), "{err}");
                filled
            };
            // The "crashed" process left two generation directories behind.
            assert_eq!(generations(dir.path()).len(), 2, "{step:?}");
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            assert_eq!(
                rlmm.list_remote_log_segments(&tp()).unwrap(),
                expected,
                "{step:?}"
            );
            let want_gen = if step == Step::Switched { 2 } else { 1 };
            assert_eq!(rlmm.generation(), want_gen, "{step:?}");
            assert_eq!(
                generations(dir.path()).len(),
                1,
                "open removes the other: {step:?}"
            );
            assert!(!dir.path().join(CURRENT_TMP).exists());
            // It keeps working, and compacts cleanly afterwards.
            let (more, _) = fill(&rlmm);
            rlmm.compact().unwrap();
            assert_eq!(rlmm.generation(), want_gen + 1);
            assert_eq!(generations(dir.path()).len(), 1);
            drop(rlmm);
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), more);
            assert_eq!(rlmm.events_in_generation(), more.len() as u64);
        }
    }

    #[test]
    fn an_unfinished_compaction_is_removed_only_when_it_holds_nothing_but_known_snapshots() {
        for stray in ["unknown snapshot", "stray file"] {
            let dir = tempfile::tempdir().unwrap();
            {
                let rlmm =
                    DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
                fill(&rlmm);
                let mut w = rlmm.writer.lock();
                rlmm.compact_locked(&mut w, Some(Step::GenerationWritten))
                    .unwrap_err();
            }
            let leftover = gen_dir(dir.path(), 2);
            if stray == "stray file" {
                fs::write(leftover.join("notes"), b"mine").unwrap();
            } else {
                let log = Log::open(&leftover, log_options(RecoveryMode::Strict)).unwrap();
                let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), 0, 1)
                    .build()
                    .unwrap();
                log.append(&Message::new(MetadataEvent::Snapshot(m).encode()))
                    .unwrap();
            }
            let err = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap_err();
            assert!(
                matches!(&err, RemoteStorageError::MetadataGeneration { path, .. } if *path == leftover),
                "{stray}: {err:?}"
            );
            assert!(leftover.is_dir(), "{stray}");
            assert_eq!(generations(dir.path()).len(), 2, "{stray}");
        }
    }

    #[test]
    fn a_crashed_migration_of_a_pre_generation_directory_is_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = Log::open(dir.path(), log_options(RecoveryMode::Strict)).unwrap();
            let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), 0, 9)
                .build()
                .unwrap();
            log.append(&Message::new(MetadataEvent::Add(m).encode()))
                .unwrap();
        }
        let expected = {
            let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
            let mut w = rlmm.writer.lock();
            rlmm.compact_locked(&mut w, Some(Step::GenerationWritten))
                .unwrap_err();
            drop(w);
            rlmm.list_remote_log_segments(&tp()).unwrap()
        };
        assert_eq!(generations(dir.path()).len(), 1);
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.generation(), 0);
        assert!(
            generations(dir.path()).is_empty(),
            "the unfinished gen-1 is removed"
        );
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
        rlmm.compact().unwrap();
        assert_eq!(rlmm.generation(), 1);
    }

    #[test]
    fn compaction_keeps_every_live_state_and_forgets_dropped_ids() {
        let dir = tempfile::tempdir().unwrap();
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        let (expected, dropped) = fill(&rlmm);
        assert!(
            rlmm.add_remote_log_segment_metadata(&dropped).is_err(),
            "dropped id re-added before compaction"
        );
        assert_eq!(rlmm.dropped_ids_remembered(), 3);
        rlmm.compact().unwrap();
        assert_eq!(rlmm.dropped_ids_remembered(), 0);
        assert_eq!(rlmm.events_in_generation(), 9);
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
        drop(rlmm);
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
        assert_eq!(rlmm.events_in_generation(), 9);
        assert_eq!(rlmm.remote_log_size(&tp()).unwrap(), 5 * 3);
        // The documented trade-off: after a compaction a dropped id may be added again.
        rlmm.add_remote_log_segment_metadata(&dropped).unwrap();
    }

    #[test]
    fn a_pre_generation_directory_is_read_and_migrated_by_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), 0, 9)
            .build()
            .unwrap();
        {
            let log = Log::open(dir.path(), log_options(RecoveryMode::Strict)).unwrap();
            log.append(&Message::new(MetadataEvent::Add(m.clone()).encode()))
                .unwrap();
            log.append(&Message::new(
                MetadataEvent::Update(to(&m, CopySegmentFinished)).encode(),
            ))
            .unwrap();
        }
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.generation(), 0);
        let expected = rlmm.list_remote_log_segments(&tp()).unwrap();
        assert_eq!(expected.len(), 1);
        rlmm.compact().unwrap();
        assert_eq!(rlmm.generation(), 1);
        assert!(
            !entry_names(dir.path())
                .unwrap()
                .iter()
                .any(|n| is_segment_file(n))
        );
        drop(rlmm);
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), manual()).unwrap();
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), expected);
    }

    #[test]
    fn a_second_manager_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
        let err = DurableRemoteLogMetadataManager::open(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("another metadata manager"),
            "{err}"
        );
    }

    #[test]
    fn a_malformed_pointer_fails_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(DurableRemoteLogMetadataManager::open(dir.path()).unwrap());
        for text in ["7\n", "7 v2\n", "0 v2\n", "+1 v2\n", "1 v3\n", "1 v2", ""] {
            fs::write(dir.path().join(CURRENT), text).unwrap();
            let err = DurableRemoteLogMetadataManager::open(dir.path()).unwrap_err();
            assert!(
                matches!(&err, RemoteStorageError::MetadataPointer { path, .. } if path.ends_with(CURRENT)),
                "{text:?}: {err:?}"
            );
            assert_eq!(generations(dir.path()).len(), 1, "{text:?}");
        }
        // The pointer of an older version (no " v2") is still read.
        fs::write(dir.path().join(CURRENT), "1\n").unwrap();
        DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
    }
}
