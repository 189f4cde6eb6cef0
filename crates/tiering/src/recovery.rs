//! Disaster recovery: rebuild a partition's durable metadata (and set up its local log) from
//! the remote tier alone, using the
//! [`manifest`](krabka_remote_storage::manifest::encode) every copy writes last.
//!
//! [`recover`] runs the SPI's read-only [`scan`]: it
//! lists the partition's objects through a [`RemoteSegmentLister`] (each backend implements
//! it: a directory read on a filesystem, paginated `ListObjectsV2` on S3), reads the manifests
//! with bounded parallelism, validates them, and chooses the segments that form the log (the
//! rules are in [`krabka_remote_storage::recovery`]). `recover` then installs them as
//! `CopySegmentFinished` in a [`DurableRemoteLogMetadataManager`], and starts an empty local
//! log after the remote end. It reports everything it ignored, and why; it deletes nothing
//! unless [`RecoveryOptions::clean_orphans`] is set.
//!
//! The metadata is installed with one compaction (one fsync), not two events per segment.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use krabka_remote_storage::layout;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::recovery::{RemoteScan, scan};
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageError, TopicIdPartition};
use uuid::Uuid;

use crate::metadata::DurableRemoteLogMetadataManager;

pub use krabka_remote_storage::recovery::{
    IgnoreReason, IgnoredObject, ListedObject, RemoteSegmentLister, find_partitions,
};

/// Default number of manifests read at once.
pub const DEFAULT_RECOVERY_CONCURRENCY: usize = 16;

/// How [`recover`] runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RecoveryOptions {
    /// Manifests read at once (at least 1). Default [`DEFAULT_RECOVERY_CONCURRENCY`].
    pub concurrency: usize,
    /// Delete the objects of interrupted copies and deletes (no manifest) and of superseded
    /// older copies ([`IgnoreReason::IncompleteCopy`], [`IgnoreReason::Superseded`]; a
    /// superseded segment's manifest goes first). Nothing else is ever deleted. Default off.
    pub clean_orphans: bool,
    /// The partition's local log directory: when set, an empty local log there (created if
    /// missing) is started right after the recovered remote end (`Log::start_at`).
    pub local_log_dir: Option<PathBuf>,
    /// Turns the metadata a manifest holds (what the backend stored) into the metadata readers
    /// need, before it is recorded: a decorator over the backend that changes what it stores
    /// (compression, encryption) restores its own sizes and custom metadata here. Default:
    /// none (the manifests' metadata as it is).
    pub map_metadata: Option<MapMetadata>,
}

/// The function of a [`MapMetadata`].
pub type MapMetadataFn = dyn Fn(&RemoteLogSegmentMetadata) -> Result<RemoteLogSegmentMetadata, RemoteStorageError>
    + Send
    + Sync;

/// See [`RecoveryOptions::map_metadata`].
#[derive(Clone)]
pub struct MapMetadata(pub std::sync::Arc<MapMetadataFn>);

impl std::fmt::Debug for MapMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MapMetadata(..)")
    }
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_RECOVERY_CONCURRENCY,
            clean_orphans: false,
            local_log_dir: None,
            map_metadata: None,
        }
    }
}

impl RecoveryOptions {
    /// Sets [`concurrency`](Self::concurrency).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets [`clean_orphans`](Self::clean_orphans).
    #[must_use]
    pub fn clean_orphans(mut self, yes: bool) -> Self {
        self.clean_orphans = yes;
        self
    }

    /// Sets [`local_log_dir`](Self::local_log_dir).
    #[must_use]
    pub fn local_log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.local_log_dir = Some(dir.into());
        self
    }

    /// Sets [`map_metadata`](Self::map_metadata).
    #[must_use]
    pub fn map_metadata(mut self, map: MapMetadata) -> Self {
        self.map_metadata = Some(map);
        self
    }
}

/// What recovery did to the local log.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LocalLogOutcome {
    /// No local log directory was given.
    NotGiven,
    /// The empty local log now continues at this seq (right after the remote end).
    StartedAt(u64),
    /// The local log holds records (`first..=last`); it was left as it is, and the tiering
    /// layer checks on open that it continues the remote tier.
    HoldsRecords {
        /// Its first seq.
        first: u64,
        /// Its last seq.
        last: u64,
    },
    /// The empty local log was already started past the remote end, at this seq.
    AlreadyAt(u64),
}

/// What [`recover`] found and did.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The partition.
    pub partition: TopicIdPartition,
    /// Objects listed under the partition.
    pub objects_listed: u64,
    /// Manifests read.
    pub manifests_read: usize,
    /// Segments that form the recovered log (and are recorded as finished).
    pub segments: usize,
    /// Their seqs, `None` when no segment was recovered.
    pub seq_range: Option<RangeInclusive<u64>>,
    /// Their `.log` bytes.
    pub bytes: u64,
    /// Of `segments`, how many the metadata already recorded identically (a repeated run).
    pub already_recorded: usize,
    /// Every object not used, with why, sorted by key.
    pub ignored: Vec<IgnoredObject>,
    /// Objects deleted ([`RecoveryOptions::clean_orphans`]).
    pub deleted: Vec<String>,
    /// What happened to the local log.
    pub local_log: LocalLogOutcome,
}

/// Rebuilds `tp`'s metadata in `metadata` from the remote tier `lister` lists, and sets up
/// the local log (see the [module docs](self) and [`krabka_remote_storage::recovery`] for the
/// rules).
///
/// Running it again gives the same result: segments the metadata already records identically
/// are kept.
///
/// # Errors
/// A listing or a retriable read failure (nothing is recorded then);
/// [`RemoteStorageError::InvalidArgument`] when `metadata` already records segments of `tp`
/// that are not exactly the recovered ones (move the directory aside first); a metadata or
/// local log write failure.
pub fn recover(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    metadata: &DurableRemoteLogMetadataManager,
    options: &RecoveryOptions,
) -> Result<RecoveryReport, RemoteStorageError> {
    let RemoteScan {
        objects_listed,
        manifests_read,
        chosen,
        superseded,
        orphans,
        ignored,
        ..
    } = scan(lister, tp, options.concurrency)?;
    let chosen = match &options.map_metadata {
        Some(MapMetadata(map)) => chosen
            .iter()
            .map(|m| map(m))
            .collect::<Result<Vec<_>, _>>()?,
        None => chosen,
    };
    let already_recorded = install(metadata, tp, &chosen)?;
    let seq_range = match (chosen.first(), chosen.last()) {
        (Some(a), Some(b)) => Some(a.start_offset()..=b.end_offset()),
        _ => None,
    };
    let bytes = chosen.iter().map(|m| m.segment_size_in_bytes()).sum();
    let local_log = match &options.local_log_dir {
        None => LocalLogOutcome::NotGiven,
        Some(d) => setup_local_log(d, seq_range.as_ref().map(|r| *r.end()))?,
    };
    let deleted = if options.clean_orphans {
        delete_unused(lister, &orphans, &superseded)?
    } else {
        Vec::new()
    };
    Ok(RecoveryReport {
        partition: tp.clone(),
        objects_listed,
        manifests_read,
        segments: chosen.len(),
        seq_range,
        bytes,
        already_recorded,
        ignored,
        deleted,
        local_log,
    })
}

/// Records exactly `chosen` as `tp`'s segments in `metadata`, or refuses when it already
/// records others; returns how many it already recorded identically.
fn install(
    metadata: &DurableRemoteLogMetadataManager,
    tp: &TopicIdPartition,
    chosen: &[RemoteLogSegmentMetadata],
) -> Result<usize, RemoteStorageError> {
    let existing = metadata.list_remote_log_segments(tp)?;
    let chosen_ids: std::collections::BTreeMap<Uuid, &RemoteLogSegmentMetadata> = chosen
        .iter()
        .map(|m| (m.remote_log_segment_id().id(), m))
        .collect();
    for m in &existing {
        if chosen_ids.get(&m.remote_log_segment_id().id()) != Some(&m) {
            return Err(RemoteStorageError::invalid_argument(format!(
                "the metadata in {} already records segment {} (seqs {}..={}, {:?}), which the remote tier does not confirm as recovered; move that directory aside and recover again",
                metadata.dir().display(),
                m.remote_log_segment_id(),
                m.start_offset(),
                m.end_offset(),
                m.state()
            )));
        }
    }
    metadata.install_recovered(chosen)?;
    Ok(existing.len())
}

/// Deletes the `orphans`, then every object of the `superseded` segments; returns the keys
/// deleted.
fn delete_unused(
    lister: &dyn RemoteSegmentLister,
    orphans: &[String],
    superseded: &[RemoteLogSegmentMetadata],
) -> Result<Vec<String>, RemoteStorageError> {
    let mut deleted = Vec::new();
    for key in orphans {
        lister.delete_object(key)?;
        deleted.push(key.clone());
    }
    for m in superseded {
        // The manifest first (`all_keys` starts with it), so a crash part-way never
        // leaves one without its data.
        for key in layout::all_keys(m)? {
            lister.delete_object(&key)?;
            deleted.push(key);
        }
    }
    Ok(deleted)
}

/// Opens (creating it if needed) the local log in `dir` and starts it right after
/// `remote_end` when it is empty.
fn setup_local_log(
    dir: &Path,
    remote_end: Option<u64>,
) -> Result<LocalLogOutcome, RemoteStorageError> {
    let local_err = |what: &str, e: krabka_storage::Error| RemoteStorageError::Backend {
        operation: format!("local log {what}"),
        location: dir.display().to_string(),
        message: e.to_string(),
        source: Some(Box::new(e)),
    };
    let log = krabka_storage::Log::open(dir, krabka_storage::Options::default())
        .map_err(|e| local_err("open", e))?;
    let Some(end) = remote_end else {
        let outcome = if log.last_seq() >= log.first_seq() && log.last_seq() > 0 {
            LocalLogOutcome::HoldsRecords {
                first: log.first_seq(),
                last: log.last_seq(),
            }
        } else {
            LocalLogOutcome::AlreadyAt(log.next_seq())
        };
        log.close().map_err(|e| local_err("close", e))?;
        return Ok(outcome);
    };
    let next = end.saturating_add(1);
    let outcome = match log.start_at(next) {
        Ok(()) => LocalLogOutcome::StartedAt(next),
        Err(krabka_storage::Error::NotEmpty { .. }) => LocalLogOutcome::HoldsRecords {
            first: log.first_seq(),
            last: log.last_seq(),
        },
        Err(krabka_storage::Error::InvalidStart { .. }) => {
            LocalLogOutcome::AlreadyAt(log.next_seq())
        }
        Err(e) => return Err(local_err("start", e)),
    };
    log.close().map_err(|e| local_err("close", e))?;
    Ok(outcome)
}
