//! Disaster recovery: rebuild a partition's durable metadata (and set up its local log) from
//! the remote tier alone, using the
//! [`manifest`](krabka_remote_storage::manifest::encode) every copy writes when it is complete.
//! (`krabka_tiering::recovery` runs this and binds the recovered local log to its remote.)
//!
//! [`recover`] runs the SPI's read-only [`scan_with_head`]: it reads the partition head, then
//! lists the partition's objects through a [`RemoteSegmentLister`] (each backend implements
//! it: a directory read on a filesystem, paginated `ListObjectsV2` on S3), reads the manifests
//! with bounded parallelism, validates them, and chooses the segments that form the log (the
//! rules are in [`krabka_remote_storage::recovery`]). `recover` then installs them as
//! `CopySegmentFinished` in a [`DurableRemoteLogMetadataManager`], and starts an empty local
//! log after the remote end. It reports everything it ignored, and why; it deletes nothing
//! unless [`RecoveryOptions::clean_orphans`] is set, and then only last.
//!
//! [`recover`] is [`install`] then [`Installed::finish`]: a caller with a step of its own to
//! take once the metadata is installed and before anything is deleted (the tiering layer's
//! binding of the local log to its remote) calls the two itself.
//!
//! The metadata is installed with one compaction (one fsync), not two events per segment.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::recovery::{RemoteScan, Unmanifested, scan_with_head};
use krabka_remote_storage::{
    IndexType, LOG_SUFFIX, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState,
    RemoteStorageError, TopicIdPartition, layout,
};
use krabka_storage::index::{OffsetIndexView, TimeIndexView};
use uuid::Uuid;

use crate::DurableRemoteLogMetadataManager;

pub use krabka_remote_storage::recovery::{
    HoleCause, IgnoreReason, IgnoredObject, ListedObject, RemoteSegmentLister, find_partitions,
};

/// Default number of manifests read at once.
pub const DEFAULT_RECOVERY_CONCURRENCY: usize = 16;

/// How [`recover`] runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RecoveryOptions {
    /// Manifests read at once (at least 1). Default [`DEFAULT_RECOVERY_CONCURRENCY`].
    pub concurrency: usize,
    /// Delete the objects no writer or reader can need: abandoned copies (an in-progress
    /// manifest older than
    /// [`copy_abandoned_at`](krabka_remote_storage::manifest::copy_abandoned_at)), deletes in
    /// progress, temporary files next to them or to complete segments, and superseded older
    /// copies ([`IgnoreReason::AbandonedCopy`], [`IgnoreReason::DeleteInProgress`],
    /// [`IgnoreReason::IncompleteCopy`], [`IgnoreReason::Superseded`]). A copy in progress and
    /// segment objects without a manifest are never deleted. Default off.
    pub clean_orphans: bool,
    /// The partition's local log directory: when set, an empty local log there (created if
    /// missing) is started right after the recovered remote end (`Log::start_at`).
    pub local_log_dir: Option<PathBuf>,
    /// Turns the metadata a manifest holds (what the backend stored) into the metadata readers
    /// need, before it is recorded: a decorator over the backend that changes what it stores
    /// (compression, encryption) restores its own sizes and custom metadata here, and checks it
    /// can open the segment. Called for every chosen segment, `concurrency` at a time
    /// ([`RemoteScan::map_chosen`](krabka_remote_storage::recovery::RemoteScan::map_chosen)):
    /// a segment it refuses with an error that is not retriable is reported
    /// ([`IgnoreReason::Unreadable`]) and costs its own seqs only (a hole); a retriable error
    /// fails the recovery. Default: none (the manifests' metadata as it is).
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
    /// When the recovery began (ms since the epoch), taken before the remote tier was first
    /// read: a copy that begins later proves its writer alive.
    pub started_ms: i64,
    /// Objects listed under the partition.
    pub objects_listed: u64,
    /// Manifests read.
    pub manifests_read: usize,
    /// Manifest keys of segments whose manifest was missing and whose metadata was rebuilt
    /// from their objects (their indexes and leader-epoch checkpoint); the manifest is not
    /// written back, so a later run rebuilds it again.
    pub rebuilt: Vec<String>,
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
    /// Seq ranges between the recovered segments that no whole segment holds (a damaged or
    /// lost segment, or one [`RecoveryOptions::map_metadata`] cannot open, or seqs past the last
    /// recovered segment up to [`claimed_end`](Self::claimed_end)): lost, each costing its own
    /// seqs only; the tiering layer's reads of them fail naming the hole
    /// (`krabka_tiering::Error::RemoteHole`).
    pub holes: Vec<RangeInclusive<u64>>,
    /// What shows the seqs of [`holes`](Self::holes) used, naming the objects left of each
    /// segment and what is wrong with them (the partition head listing a segment as finished,
    /// a manifest, an offset index, the object names, an epoch record):
    /// [`RemoteScan::causes`](krabka_remote_storage::recovery::RemoteScan::causes).
    pub causes: Vec<HoleCause>,
    /// The highest seq the bucket shows a writer used
    /// ([`RemoteScan::claimed_end`](krabka_remote_storage::recovery::RemoteScan::claimed_end)):
    /// the local log continues after it, so no acknowledged seq is used twice. Above the end
    /// of [`seq_range`](Self::seq_range) when the newest segments are lost (then the last of
    /// [`holes`](Self::holes)).
    pub claimed_end: Option<u64>,
}

/// Rebuilds `tp`'s metadata in `metadata` from the remote tier `lister` lists, sets up the
/// local log, then deletes what no one needs when asked (see the [module docs](self) and
/// [`krabka_remote_storage::recovery`] for the rules): [`install`], then
/// [`Installed::finish`].
///
/// Running it again gives the same result: segments the metadata already records identically
/// are kept.
///
/// # Errors
/// A listing or a retriable read failure (nothing is recorded then);
/// [`RemoteStorageError::InvalidArgument`] when `metadata` already records segments of `tp`
/// that are not exactly the recovered ones (move the directory aside first); a metadata or
/// local log write failure; a failed delete.
pub fn recover(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    metadata: &DurableRemoteLogMetadataManager,
    options: &RecoveryOptions,
) -> Result<RecoveryReport, RemoteStorageError> {
    install(lister, tp, metadata, options)?.finish()
}

/// A recovery whose metadata is installed and whose local log is set up, and that has deleted
/// nothing yet: [`report`](Self::report) says what it found, [`finish`](Self::finish) deletes
/// the unused objects when [`RecoveryOptions::clean_orphans`] is set.
#[must_use = "nothing is deleted until `finish` is called"]
pub struct Installed<'a> {
    lister: &'a dyn RemoteSegmentLister,
    report: RecoveryReport,
    /// Objects no writer or reader can need, in their delete order.
    orphans: Vec<String>,
    /// Superseded segments that have a manifest, whose objects are deleted after the orphans.
    superseded: Vec<RemoteLogSegmentMetadata>,
    clean_orphans: bool,
}

impl std::fmt::Debug for Installed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Installed")
            .field("report", &self.report)
            .field("orphans", &self.orphans.len())
            .field("superseded", &self.superseded.len())
            .field("clean_orphans", &self.clean_orphans)
            .finish_non_exhaustive()
    }
}

impl Installed<'_> {
    /// What the recovery found and did so far ([`RecoveryReport::deleted`] is empty).
    pub fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Deletes the objects no writer or reader can need when
    /// [`RecoveryOptions::clean_orphans`] is set, and returns the whole report.
    ///
    /// # Errors
    /// A failed delete (what was deleted before it stays deleted; a rerun finds the rest).
    pub fn finish(self) -> Result<RecoveryReport, RemoteStorageError> {
        let mut report = self.report;
        if self.clean_orphans {
            report.deleted = delete_unused(self.lister, &self.orphans, &self.superseded)?;
        }
        Ok(report)
    }
}

/// The first step of [`recover`]: scans the remote tier, records the chosen segments in
/// `metadata` and sets up the local log; deletes nothing.
///
/// # Errors
/// As [`recover`], but for the deletes.
pub fn install<'a>(
    lister: &'a dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    metadata: &DurableRemoteLogMetadataManager,
    options: &RecoveryOptions,
) -> Result<Installed<'a>, RemoteStorageError> {
    // Before the remote is read: a copy that begins from now on proves its writer alive when
    // the recovered directory later claims the partition.
    let started_ms = krabka_remote_storage::now_ms();
    let rebuild = |lost: &Unmanifested| rebuild_metadata(lister, lost);
    let mut scan = scan_with_head(
        lister,
        tp,
        options.concurrency,
        krabka_remote_storage::now_ms(),
        Some(&rebuild),
    )?;
    if let Some(MapMetadata(map)) = &options.map_metadata {
        scan = scan.map_chosen(options.concurrency, map.as_ref())?;
    }
    let RemoteScan {
        objects_listed,
        manifests_read,
        chosen,
        superseded,
        orphans,
        rebuilt,
        ignored,
        holes,
        causes,
        claimed_end,
        ..
    } = scan;
    let already_recorded = record_exactly(metadata, tp, &chosen)?;
    let seq_range = match (chosen.first(), chosen.last()) {
        (Some(a), Some(b)) => Some(a.start_offset()..=b.end_offset()),
        _ => None,
    };
    let bytes = chosen.iter().map(|m| m.segment_size_in_bytes()).sum();
    let local_log = match &options.local_log_dir {
        None => LocalLogOutcome::NotGiven,
        // After every seq the bucket shows used, not only the recovered ones: a damaged last
        // segment's seqs become a hole, never seqs of new records.
        Some(d) => setup_local_log(d, claimed_end)?,
    };
    // Objects without a manifest are never deleted, not even when their rebuilt segment is
    // superseded: nothing proves they are unneeded.
    let superseded: Vec<RemoteLogSegmentMetadata> = superseded
        .into_iter()
        .filter(|m| layout::manifest_key(m).map_or(true, |key| !rebuilt.contains(&key)))
        .collect();
    Ok(Installed {
        lister,
        report: RecoveryReport {
            partition: tp.clone(),
            started_ms,
            objects_listed,
            manifests_read,
            rebuilt,
            segments: chosen.len(),
            seq_range,
            bytes,
            already_recorded,
            ignored,
            deleted: Vec::new(),
            local_log,
            holes,
            causes,
            claimed_end,
        },
        orphans,
        superseded,
        clean_orphans: options.clean_orphans,
    })
}

/// Records exactly `chosen` as `tp`'s segments in `metadata`, or refuses when it already
/// records others; returns how many it already recorded identically.
fn record_exactly(
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

/// Deletes the `orphans` (in their order: each segment's manifest after its other objects),
/// then every object of the `superseded` segments; returns the keys deleted.
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
        // The manifest first, so a crash part-way never leaves a complete manifest without its
        // data; what is left then has no manifest and is kept and reported by later runs
        // (rebuilt, superseded, never deleted: see above).
        let mut keys = vec![layout::manifest_key(m)?];
        keys.extend(layout::data_keys(m)?);
        for key in keys {
            lister.delete_object(&key)?;
            deleted.push(key);
        }
    }
    Ok(deleted)
}

/// The largest index object a rebuild reads (an offset index of a 4 GiB segment with an entry
/// per 256 bytes is 256 MiB: far past any segment written with the defaults).
const MAX_REBUILD_INDEX_BYTES: usize = 256 << 20;

/// The event time of rebuilt metadata: the epoch, before any real copy, so a rebuilt segment
/// comes first in copy order and never supersedes a copy with a manifest (any copy overlapping
/// it supersedes it instead).
const REBUILT_EVENT_TIME: i64 = 0;

/// Rebuilds the finished metadata of a segment whose manifest is missing from its objects:
/// seqs, size and newest timestamp from its offset and time indexes (each checked: CRC, order,
/// base seq, and the `.log` size the offset index records), leader epochs from its
/// leader-epoch checkpoint. The event time is unknown: [`REBUILT_EVENT_TIME`]. Custom
/// metadata (a backend's or a chunk map) is lost: reads then use the offset index. Objects a
/// transform wrote (compressed or encrypted indexes) do not parse: such a segment is reported,
/// not rebuilt.
fn rebuild_metadata(
    lister: &dyn RemoteSegmentLister,
    lost: &Unmanifested,
) -> Result<RemoteLogSegmentMetadata, String> {
    let read = |t: IndexType| -> Result<Vec<u8>, String> {
        let key = lost.key(t.suffix()).map_err(|e| e.to_string())?;
        // Checked on the listed size before reading, and on what was read (it may have grown).
        let listed = lost
            .indexes
            .iter()
            .find(|(i, _)| *i == t)
            .map_or(0, |(_, size)| *size);
        let too_large = |n: u64| format!("{key}: {n} bytes, too large to rebuild from");
        if listed > MAX_REBUILD_INDEX_BYTES as u64 {
            return Err(too_large(listed));
        }
        let bytes = lister
            .read_object_bounded(&key, MAX_REBUILD_INDEX_BYTES)
            .map_err(|e| format!("{key}: {e}"))?;
        if bytes.len() > MAX_REBUILD_INDEX_BYTES {
            return Err(too_large(bytes.len() as u64));
        }
        Ok(bytes)
    };
    let offsets = OffsetIndexView::parse(read(IndexType::Offset)?)
        .map_err(|e| format!("offset index: {e}"))?;
    let times = TimeIndexView::parse(read(IndexType::Timestamp)?)
        .map_err(|e| format!("time index: {e}"))?;
    let size = lost.log_size.ok_or_else(|| "no .log object".to_owned())?;
    if offsets.base_seq() != lost.start || times.base_seq() != lost.start {
        return Err(format!(
            "the indexes start at seqs {} and {}, the object names at {}",
            offsets.base_seq(),
            times.base_seq(),
            lost.start
        ));
    }
    if offsets.log_size() != size {
        return Err(format!(
            "the offset index describes {} bytes of {LOG_SUFFIX} data, the object has {size}",
            offsets.log_size()
        ));
    }
    let epochs = parse_leader_epochs(&read(IndexType::LeaderEpoch)?)?;
    let id = RemoteLogSegmentId::new(lost.partition.clone(), lost.id);
    RemoteLogSegmentMetadata::builder(id, lost.start, offsets.last_seq())
        .max_timestamp_ms(times.max_timestamp())
        .event_timestamp_ms(REBUILT_EVENT_TIME)
        .segment_leader_epochs(epochs)
        .segment_size_in_bytes(size)
        .state(RemoteLogSegmentState::CopySegmentFinished)
        .build_strict()
        .map_err(|e| e.to_string())
}

/// Kafka's leader-epoch checkpoint text as a copy writes it: version `0`, the entry count, then
/// one `epoch start_seq` line per entry.
fn parse_leader_epochs(bytes: &[u8]) -> Result<BTreeMap<i32, u64>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "leader-epoch checkpoint: not UTF-8")?;
    let mut lines = text.lines();
    if lines.next() != Some("0") {
        return Err("leader-epoch checkpoint: not version 0".to_owned());
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("leader-epoch checkpoint: no entry count")?;
    let mut epochs = BTreeMap::new();
    for line in lines.by_ref().take(count) {
        let mut parts = line.split_whitespace();
        let (Some(epoch), Some(start), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("leader-epoch checkpoint: bad line {line:?}"));
        };
        let (Ok(epoch), Ok(start)) = (epoch.parse::<i32>(), start.parse::<u64>()) else {
            return Err(format!("leader-epoch checkpoint: bad line {line:?}"));
        };
        epochs.insert(epoch, start);
    }
    if epochs.len() != count || lines.any(|l| !l.trim().is_empty()) {
        return Err(format!(
            "leader-epoch checkpoint: {} entries for a count of {count}",
            epochs.len()
        ));
    }
    Ok(epochs)
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
