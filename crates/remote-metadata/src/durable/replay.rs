//! Reading a generation back: opening its log strictly (cutting only a genuinely torn last
//! event), replaying its events into the state, and telling an unfinished generation this
//! manager left from one it cannot account for.

use std::path::{Path, PathBuf};

use crate::MetadataError;
use crate::MetadataState;
use krabka_remote_storage::RemoteStorageError;
use krabka_remote_storage::metadata::event::MetadataEvent;
use krabka_storage::segment::{
    LOG_EXTENSION, QUARANTINE_DIR, decode_records, parse_segment_file_name, read_segment_file,
};
use krabka_storage::{Log, Options, Record, RecoveryMode, SyncPolicy};

use super::TornEventCut;
use super::error::storage_error;
use super::generation::{Listing, entry_names, generation_of, is_install_record};

/// Records read per batch while replaying the log on open, and written per batch by a
/// compaction.
pub(super) const REPLAY_BATCH: usize = 1024;

/// The options of every generation's log: synced on every append.
pub(super) fn log_options(recovery: RecoveryMode) -> Options {
    Options {
        sync: SyncPolicy::EveryAppend,
        recovery,
        ..Options::default()
    }
}

/// Opens a generation's log strictly. A genuinely torn last event (the file ends inside its
/// frame) is the one damage tolerated: the log is reopened cutting it, and the cut is returned.
/// Any other damage is an error naming the file.
pub(super) fn open_log(log_dir: &Path) -> Result<(Log, Option<TornEventCut>), RemoteStorageError> {
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
                return Err(MetadataError::Log {
                    path,
                    position: Some(position),
                    seq: None,
                    reason: format!(
                        "a torn last event was found there, but recovery did not cut exactly it: {report}"
                    ),
                }.into());
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
            Some((base, LOG_EXTENSION)) => Some((base, dir.join(name))),
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
            } => MetadataError::Log {
                path: path.clone(),
                position: Some(position),
                seq: None,
                reason,
            }
            .into(),
            other => storage_error(dir, "read", other),
        })?;
        out.extend(decoded.records);
    }
    Ok(out)
}

/// Whether generation 1 is what an interrupted first open leaves: no `CURRENT`, and a log
/// that holds no event (at most its generation record, maybe torn).
pub(super) fn is_unfinished_creation(listing: &Listing) -> Result<bool, RemoteStorageError> {
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

/// Whether generation `n` at `path` is a complete compaction target as
/// `compact_locked` writes it: its generation record first, then only snapshot events, every
/// frame whole.
pub(super) fn is_complete_generation(path: &Path, n: u64) -> bool {
    let Ok(records) = read_generation(path) else {
        return false;
    };
    let Some((first, rest)) = records.split_first() else {
        return false;
    };
    let rest = match rest.split_first() {
        Some((second, after)) if is_install_record(&second.message, n) => after,
        _ => rest,
    };
    generation_of(&first.message) == Some(Some(n))
        && rest.iter().all(|r| {
            generation_of(&r.message).is_none()
                && matches!(
                    MetadataEvent::decode(&r.message.value),
                    Ok(MetadataEvent::Snapshot(_))
                )
        })
}

/// Checks that generation `n` (never named by `CURRENT`) is the manager's own unfinished
/// compaction target: at most its generation record, then only snapshot events of segments the
/// current generation knows. Removing it then loses nothing.
pub(super) fn check_unfinished_generation(
    path: &Path,
    n: u64,
    state: &MetadataState,
) -> Result<(), RemoteStorageError> {
    let unaccounted = |reason: String| {
        MetadataError::Generation {
        path: path.to_path_buf(),
        reason: format!(
            "CURRENT names generation {} and this newer one is not an unfinished compaction of it: {reason}",
            n - 1
        ),
    }.into()
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
    // A recovery's install: its segments come from the remote tier and are not known to the
    // current generation; the install was never committed (no pointer names it), and running
    // the recovery again installs them again.
    let install = records
        .get(1)
        .is_some_and(|r| is_install_record(&r.message, n));
    for (i, record) in records.iter().enumerate() {
        if i == 1 && install {
            continue;
        }
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
                if !install && state.get(id).is_none() && !state.was_dropped(id) {
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
pub(super) fn replay(
    log: &Log,
    n: u64,
    recorded: bool,
    state: &mut MetadataState,
) -> Result<u64, RemoteStorageError> {
    let files = log
        .segments()
        .iter()
        .map(|s| (s.base_seq, s.log_path.clone()))
        .collect();
    let mut replay = Replay::new(log.dir(), files, n, recorded);
    let last = log.last_seq();
    let first = log.first_seq().max(1);
    replay.check_start(first, last)?;
    let mut from = first;
    let mut events = 0u64;
    while from <= last {
        let records = log
            .read(from, REPLAY_BATCH)
            .map_err(|e| storage_error(log.dir(), "replay", e))?;
        if records.is_empty() {
            return Err(replay.damaged(
                Some(from),
                format!("the log claims records up to seq {last} but returns none"),
            ));
        }
        for record in records {
            from = record.seq + 1;
            if replay.apply(&record, state)? {
                events += 1;
            }
        }
    }
    Ok(events)
}

/// One replay of a generation's log.
pub(super) struct Replay {
    /// The log's directory.
    dir: PathBuf,
    /// The log's segment files by base seq, ascending: where damage at a seq is.
    files: Vec<(u64, PathBuf)>,
    generation: u64,
    recorded: bool,
    /// No add or update met yet: snapshot events may still come.
    in_snapshot: bool,
}

impl Replay {
    /// A replay of generation `n`'s log in `dir` (its segment `files`); with `recorded`, the log
    /// must start with generation `n`'s record.
    pub(super) fn new(dir: &Path, files: Vec<(u64, PathBuf)>, n: u64, recorded: bool) -> Self {
        Self {
            dir: dir.to_path_buf(),
            files,
            generation: n,
            recorded,
            in_snapshot: true,
        }
    }

    /// Refuses a recorded generation whose log does not hold seq 1 (it holds `first..=last`,
    /// none when `last < first`): its start was lost.
    pub(super) fn check_start(&self, first: u64, last: u64) -> Result<(), RemoteStorageError> {
        if !self.recorded || (first == 1 && last >= first) {
            return Ok(());
        }
        let n = self.generation;
        let holds = if last < first {
            "no record".to_owned()
        } else {
            format!("seqs {first}..={last}")
        };
        Err(self.damaged(
            None,
            format!(
                "generation {n} was written starting with its generation record at seq 1, but the log holds {holds}: its start was lost (the file was emptied, truncated, deleted or replaced)"
            ),
        ))
    }

    /// A [`MetadataError::Log`] naming the file holding `seq`.
    pub(super) fn damaged(&self, seq: Option<u64>, reason: String) -> RemoteStorageError {
        let at = seq.unwrap_or(1);
        let path = self
            .files
            .iter()
            .rev()
            .find(|(base, _)| *base <= at)
            .or(self.files.first())
            .map_or_else(|| self.dir.clone(), |(_, path)| path.clone());
        MetadataError::Log {
            path,
            position: None,
            seq,
            reason,
        }
        .into()
    }

    /// Applies one record to `state`: `Ok(true)` for an event, `Ok(false)` for the generation
    /// record (or the install record).
    pub(super) fn apply(
        &mut self,
        record: &Record,
        state: &mut MetadataState,
    ) -> Result<bool, RemoteStorageError> {
        let (seq, n) = (record.seq, self.generation);
        if let Some(named) = generation_of(&record.message) {
            if seq == 1 && named == Some(n) {
                return Ok(false);
            }
            return Err(self.damaged(
                Some(seq),
                format!(
                    "a generation record for {named:?} where only generation {n}'s may stand, at seq 1"
                ),
            ));
        }
        if seq == 2 && is_install_record(&record.message, n) {
            return Ok(false);
        }
        if self.recorded && seq == 1 {
            return Err(self.damaged(
                Some(seq),
                format!("generation {n}'s log does not start with its generation record"),
            ));
        }
        let event = MetadataEvent::decode(&record.message.value)
            .map_err(|e| self.damaged(Some(seq), e.to_string()))?;
        let applied = match &event {
            MetadataEvent::Snapshot(_) if !self.in_snapshot => Err(
                RemoteStorageError::invalid_argument("a snapshot record after an add or update"),
            ),
            MetadataEvent::Snapshot(m) => state.restore(m),
            MetadataEvent::Add(m) => state.add(m),
            MetadataEvent::Update(u) => state.update(u).map(drop),
        };
        self.in_snapshot &= matches!(event, MetadataEvent::Snapshot(_));
        applied.map_err(|e| {
            self.damaged(
                Some(seq),
                format!(
                    "event for segment {} does not apply on replay: {e}",
                    event.segment_id()
                ),
            )
        })?;
        Ok(true)
    }
}
