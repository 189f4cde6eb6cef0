//! Disaster recovery: rebuild a partition's durable metadata (and set up its local log) from
//! the remote tier alone, using the [`manifest`](crate::manifest::encode) every copy writes last.
//!
//! [`recover`] lists the partition's objects through a [`RemoteSegmentLister`] (each backend
//! implements it: a directory read on a filesystem, paginated `ListObjectsV2` on S3), reads
//! the manifests with bounded parallelism, validates them, chooses the segments that form the
//! log, installs them as `CopySegmentFinished` in a
//! [`DurableRemoteLogMetadataManager`], and starts an empty local log after the remote end.
//! It reports everything it ignored, and why; it deletes nothing unless
//! [`RecoveryOptions::clean_orphans`] is set.
//!
//! Which segments form the log:
//! 1. **Whole.** The manifest decodes (checksums, version), names the partition and the
//!    segment its key names, the `.log` object exists with exactly the manifest's size, and the
//!    offset, time and leader-epoch indexes exist. Objects of a segment with no manifest are an
//!    interrupted copy or delete and are never used.
//! 2. **One lineage.** Whole segments are replayed in copy order (the manifest's event time,
//!    then start offset, then id). A copy overlapping seqs already held by earlier copies starts
//!    a newer history from its start offset (a newer incarnation of the log, or a re-copy after
//!    a leader change): every earlier copy holding seqs at or after its start is superseded.
//! 3. **Contiguous.** The log is the run of those segments ending at the highest seq in which
//!    each segment starts right after the previous one ends and leader epochs never go back.
//!    Whole segments before a hole are reported and left in place, not recorded.
//!
//! Memory: the listing is folded, page by page, into one small entry per segment (sizes and
//! which objects exist), which is the only time the listing is held; decoded manifests replace
//! nothing else. The metadata is installed with one compaction (one fsync), not two events per
//! segment.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use uuid::Uuid;

use crate::error::RemoteStorageError;
use crate::layout::{self, SegmentFile};
use crate::manifest;
use crate::metadata::{DurableRemoteLogMetadataManager, RemoteLogMetadataManager};
use crate::model::{
    IndexType, LOG_SUFFIX, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition,
};

/// One object of a listing: its key relative to the backend's root or prefix (as
/// [`layout`] makes them) and its size in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    /// The relative key, `<partition dir>/<file name>`.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// What recovery needs from a backend beyond the [`RemoteStorageManager`](crate::RemoteStorageManager)
/// SPI: listing a partition's objects, reading a small object whole, and deleting one.
/// Keys are relative to the backend's root or prefix.
pub trait RemoteSegmentLister: Send + Sync {
    /// Calls `visit` with every object whose key starts with `<partition_dir>/`, in any order,
    /// a page at a time (an implementation must not collect the whole listing first). An error
    /// from `visit` ends the listing and is returned.
    ///
    /// # Errors
    /// A backend error when listing fails, or `visit`'s error.
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError>;

    /// Calls `visit` with the name of every partition directory (first key component) below
    /// the root or prefix, a page at a time: how a partition is found when its topic id is
    /// not known.
    ///
    /// # Errors
    /// A backend error when listing fails, or `visit`'s error.
    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError>;

    /// Reads the whole object `key`.
    ///
    /// # Errors
    /// A backend error; a missing object is an error that is not retriable.
    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError>;

    /// Deletes the object `key`; absent is success.
    ///
    /// # Errors
    /// A backend error.
    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError>;
}

/// The partitions of topic `topic`, partition `partition` found below the root or prefix (a
/// topic id each), from the full-form partition directory names.
///
/// # Errors
/// As [`RemoteSegmentLister::list_partition_dirs`].
pub fn find_partitions(
    lister: &dyn RemoteSegmentLister,
    topic: &str,
    partition: i32,
) -> Result<Vec<TopicIdPartition>, RemoteStorageError> {
    let mut found = Vec::new();
    lister.list_partition_dirs(&mut |name| {
        if let Some(tp) = layout::parse_partition_dir(&name)
            && tp.topic() == topic
            && tp.partition() == partition
        {
            found.push(tp);
        }
        Ok(())
    })?;
    found.sort_by_key(TopicIdPartition::topic_id);
    found.dedup();
    Ok(found)
}

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

/// Why an object was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IgnoreReason {
    /// The name is not one the layout writes.
    UnrecognizedName,
    /// An object of a segment with no manifest: a copy that never finished, or a delete that
    /// had begun (a delete removes the manifest first).
    IncompleteCopy,
    /// The manifest does not decode (checksum, version, fields).
    CorruptManifest(String),
    /// The manifest decodes but names another partition or segment than its key.
    ForeignManifest(String),
    /// The manifest's `.log` data object is missing.
    DataMissing,
    /// The `.log` data object's size is not the manifest's.
    DataWrongSize {
        /// The manifest's size.
        expected: u64,
        /// The object's size.
        found: u64,
    },
    /// A mandatory index object is missing.
    IndexMissing(IndexType),
    /// A later copy (of a newer incarnation of the log, or a re-copy) holds seqs from
    /// `at_seq` on, and this older copy holds seqs at or after it.
    Superseded {
        /// The later segment.
        by: Uuid,
        /// Where the later history starts.
        at_seq: u64,
    },
    /// A whole segment that does not join the recovered range: a hole (or a leader epoch that
    /// goes back) lies between it and the recovered end.
    NotContiguous(String),
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnrecognizedName => f.write_str("not an object name the layout writes"),
            Self::IncompleteCopy => {
                f.write_str("no manifest: an interrupted copy or delete (never used)")
            }
            Self::CorruptManifest(why) => write!(f, "corrupt manifest: {why}"),
            Self::ForeignManifest(why) => write!(f, "manifest does not match its key: {why}"),
            Self::DataMissing => f.write_str("manifest whose .log data object is missing"),
            Self::DataWrongSize { expected, found } => write!(
                f,
                "manifest says {expected} bytes of .log data, the object has {found}"
            ),
            Self::IndexMissing(t) => write!(f, "manifest whose {t} index object is missing"),
            Self::Superseded { by, at_seq } => write!(
                f,
                "superseded by the later copy {by} holding seqs from {at_seq} (an older incarnation)"
            ),
            Self::NotContiguous(why) => write!(f, "not contiguous with the recovered range: {why}"),
        }
    }
}

/// One object recovery did not use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredObject {
    /// Its relative key (a segment's manifest key for reasons about the whole segment).
    pub key: String,
    /// Why.
    pub reason: IgnoreReason,
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

/// Per-segment facts gathered from the listing.
#[derive(Debug, Default)]
struct Listed {
    manifest: bool,
    log_size: Option<u64>,
    /// Bit `i` set: index `IndexType::ALL[i]` exists.
    indexes: u8,
    /// Temporary files of interrupted writes (file names).
    temps: Vec<String>,
}

fn index_bit(t: IndexType) -> u8 {
    let pos = IndexType::ALL.iter().position(|x| *x == t).unwrap_or(0);
    1u8 << pos
}

/// Indexes a tiering copy always writes.
const REQUIRED_INDEXES: [IndexType; 3] = [
    IndexType::Offset,
    IndexType::Timestamp,
    IndexType::LeaderEpoch,
];

fn key_of(dir: &str, start: u64, id: Uuid, suffix: &str) -> String {
    format!("{dir}/{start:020}-{id}{suffix}")
}

/// Rebuilds `tp`'s metadata in `metadata` from the remote tier `lister` lists, and sets up
/// the local log (see the [module docs](self) for the rules).
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
    let dir = layout::partition_dir(tp)?;
    let mut ignored = Vec::new();
    let mut listed: BTreeMap<(u64, Uuid), Listed> = BTreeMap::new();
    let mut objects_listed = 0u64;
    let prefix = format!("{dir}/");
    lister.list_partition(&dir, &mut |obj| {
        objects_listed += 1;
        let name = obj.key.strip_prefix(&prefix).unwrap_or(&obj.key);
        let Some((start, id, kind)) = layout::parse_segment_file_name(name) else {
            ignored.push(IgnoredObject {
                key: obj.key,
                reason: IgnoreReason::UnrecognizedName,
            });
            return Ok(());
        };
        let entry = listed.entry((start, id)).or_default();
        match kind {
            SegmentFile::Manifest => entry.manifest = true,
            SegmentFile::Log => entry.log_size = Some(obj.size),
            SegmentFile::Index(t) => entry.indexes |= index_bit(t),
            SegmentFile::Temporary => entry.temps.push(name.to_owned()),
        }
        Ok(())
    })?;

    // Segments without a manifest: every object of theirs is an orphan.
    let mut orphans: Vec<String> = Vec::new();
    for ((start, id), l) in &listed {
        if l.manifest {
            continue;
        }
        let mut keys = Vec::new();
        if l.log_size.is_some() {
            keys.push(key_of(&dir, *start, *id, LOG_SUFFIX));
        }
        for t in IndexType::ALL {
            if l.indexes & index_bit(t) != 0 {
                keys.push(key_of(&dir, *start, *id, t.suffix()));
            }
        }
        keys.extend(l.temps.iter().map(|n| format!("{dir}/{n}")));
        orphans.extend(keys);
    }
    for ((_, _), l) in listed.iter().filter(|(_, l)| l.manifest) {
        orphans.extend(l.temps.iter().map(|n| format!("{dir}/{n}")));
    }
    ignored.extend(orphans.iter().map(|k| IgnoredObject {
        key: k.clone(),
        reason: IgnoreReason::IncompleteCopy,
    }));

    let manifests: Vec<(u64, Uuid)> = listed
        .iter()
        .filter(|(_, l)| l.manifest)
        .map(|(k, _)| *k)
        .collect();
    let decoded = read_manifests(lister, &dir, &manifests, options.concurrency.max(1))?;
    let manifests_read = manifests.len();

    // Whole segments, as finished metadata.
    let mut whole: Vec<RemoteLogSegmentMetadata> = Vec::new();
    for ((start, id), result) in manifests.iter().zip(decoded) {
        let key = key_of(&dir, *start, *id, layout::MANIFEST_SUFFIX);
        let reason = match result {
            Err(why) => Some(IgnoreReason::CorruptManifest(why)),
            Ok(m) => match check_whole(&m, tp, *start, *id, listed.get(&(*start, *id))) {
                Err(reason) => Some(reason),
                Ok(finished) => {
                    whole.push(finished);
                    None
                }
            },
        };
        if let Some(reason) = reason {
            ignored.push(IgnoredObject { key, reason });
        }
    }
    drop(listed);

    let (chosen, superseded, stranded) = choose(whole);
    let chosen = match &options.map_metadata {
        Some(MapMetadata(map)) => chosen
            .iter()
            .map(|m| map(m))
            .collect::<Result<Vec<_>, _>>()?,
        None => chosen,
    };
    let mut superseded_keys = Vec::new();
    for (m, reason) in superseded {
        let key = layout::manifest_key(&m)?;
        superseded_keys.push(m);
        ignored.push(IgnoredObject { key, reason });
    }
    for (m, why) in stranded {
        ignored.push(IgnoredObject {
            key: layout::manifest_key(&m)?,
            reason: IgnoreReason::NotContiguous(why),
        });
    }

    // The metadata: exactly the chosen segments, or refuse.
    let existing = metadata.list_remote_log_segments(tp)?;
    let chosen_ids: BTreeMap<Uuid, &RemoteLogSegmentMetadata> = chosen
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
    let already_recorded = existing.len();
    metadata.install_recovered(&chosen)?;

    let seq_range = match (chosen.first(), chosen.last()) {
        (Some(a), Some(b)) => Some(a.start_offset()..=b.end_offset()),
        _ => None,
    };
    let bytes = chosen.iter().map(|m| m.segment_size_in_bytes()).sum();

    let local_log = match &options.local_log_dir {
        None => LocalLogOutcome::NotGiven,
        Some(d) => setup_local_log(d, seq_range.as_ref().map(|r| *r.end()))?,
    };

    let mut deleted = Vec::new();
    if options.clean_orphans {
        for key in &orphans {
            lister.delete_object(key)?;
            deleted.push(key.clone());
        }
        for m in &superseded_keys {
            // The manifest first (`all_keys` starts with it), so a crash part-way never
            // leaves one without its data.
            for key in layout::all_keys(m)? {
                lister.delete_object(&key)?;
                deleted.push(key);
            }
        }
    }

    ignored.sort_by(|a, b| a.key.cmp(&b.key));
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

/// Reads and decodes `manifests` with `concurrency` threads. A retriable read failure fails
/// the whole recovery; any other failure is that manifest's `Err(reason)`.
#[allow(clippy::type_complexity)]
fn read_manifests(
    lister: &dyn RemoteSegmentLister,
    dir: &str,
    manifests: &[(u64, Uuid)],
    concurrency: usize,
) -> Result<Vec<Result<RemoteLogSegmentMetadata, String>>, RemoteStorageError> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let workers = concurrency.min(manifests.len()).max(1);
    let outcomes: Vec<
        Result<Vec<(usize, Result<RemoteLogSegmentMetadata, String>)>, RemoteStorageError>,
    > = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((start, id)) = manifests.get(i) else {
                            break;
                        };
                        let key = key_of(dir, *start, *id, layout::MANIFEST_SUFFIX);
                        match lister.read_object(&key) {
                            Ok(bytes) if bytes.len() as u64 > manifest::MAX_MANIFEST_LEN => {
                                out.push((i, Err(format!("{} bytes, too large", bytes.len()))));
                            }
                            Ok(bytes) => out.push((
                                i,
                                manifest::decode(&bytes, &key).map_err(|e| e.to_string()),
                            )),
                            Err(e) if e.is_retriable() => {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                            Err(e) => out.push((i, Err(format!("unreadable: {e}")))),
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(RemoteStorageError::invalid_argument(
                        "a manifest reader thread panicked",
                    ))
                })
            })
            .collect()
    });
    let mut results: Vec<Option<Result<RemoteLogSegmentMetadata, String>>> =
        (0..manifests.len()).map(|_| None).collect();
    for outcome in outcomes {
        for (i, r) in outcome? {
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(r);
            }
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("not read".to_owned())))
        .collect())
}

/// Checks that the manifest `m` found under `(start, id)` describes a whole segment of `tp`
/// and returns it as finished metadata.
fn check_whole(
    m: &RemoteLogSegmentMetadata,
    tp: &TopicIdPartition,
    start: u64,
    id: Uuid,
    listed: Option<&Listed>,
) -> Result<RemoteLogSegmentMetadata, IgnoreReason> {
    let sid = m.remote_log_segment_id();
    if sid.topic_id_partition() != tp || sid.id() != id || m.start_offset() != start {
        return Err(IgnoreReason::ForeignManifest(format!(
            "it describes segment {sid} of {} from seq {}",
            sid.topic_id_partition(),
            m.start_offset()
        )));
    }
    if m.state() == RemoteLogSegmentState::DeleteSegmentFinished {
        return Err(IgnoreReason::CorruptManifest(
            "state DeleteSegmentFinished".to_owned(),
        ));
    }
    let l = listed.ok_or(IgnoreReason::DataMissing)?;
    match l.log_size {
        None => return Err(IgnoreReason::DataMissing),
        Some(found) if found != m.segment_size_in_bytes() => {
            return Err(IgnoreReason::DataWrongSize {
                expected: m.segment_size_in_bytes(),
                found,
            });
        }
        Some(_) => {}
    }
    for t in REQUIRED_INDEXES {
        if l.indexes & index_bit(t) == 0 {
            return Err(IgnoreReason::IndexMissing(t));
        }
    }
    RemoteLogSegmentMetadata::builder(sid.clone(), m.start_offset(), m.end_offset())
        .max_timestamp_ms(m.max_timestamp_ms())
        .broker_id(m.broker_id())
        .event_timestamp_ms(m.event_timestamp_ms())
        .segment_leader_epochs(m.segment_leader_epochs().clone())
        .segment_size_in_bytes(m.segment_size_in_bytes())
        .custom_metadata(m.custom_metadata().cloned())
        .state(RemoteLogSegmentState::CopySegmentFinished)
        .build_strict()
        .map_err(|e| IgnoreReason::CorruptManifest(e.to_string()))
}

type Chosen = (
    Vec<RemoteLogSegmentMetadata>,
    Vec<(RemoteLogSegmentMetadata, IgnoreReason)>,
    Vec<(RemoteLogSegmentMetadata, String)>,
);

/// Steps 2 and 3 of the [module docs](self): the recovered segments in seq order, the
/// superseded ones, and the whole ones stranded before a hole.
fn choose(mut whole: Vec<RemoteLogSegmentMetadata>) -> Chosen {
    whole.sort_by_key(|m| {
        (
            m.event_timestamp_ms(),
            m.start_offset(),
            m.remote_log_segment_id().id(),
        )
    });
    let mut accepted: BTreeMap<u64, RemoteLogSegmentMetadata> = BTreeMap::new();
    let mut superseded = Vec::new();
    for m in whole {
        let overlaps = accepted
            .range(..=m.end_offset())
            .next_back()
            .is_some_and(|(_, prev)| prev.end_offset() >= m.start_offset());
        if overlaps {
            // A newer history from m's start: drop every accepted copy holding seqs at or after it.
            let doomed: Vec<u64> = accepted
                .iter()
                .filter(|(_, a)| a.end_offset() >= m.start_offset())
                .map(|(k, _)| *k)
                .collect();
            for k in doomed {
                if let Some(a) = accepted.remove(&k) {
                    superseded.push((
                        a,
                        IgnoreReason::Superseded {
                            by: m.remote_log_segment_id().id(),
                            at_seq: m.start_offset(),
                        },
                    ));
                }
            }
        }
        accepted.insert(m.start_offset(), m);
    }
    let mut chain: Vec<RemoteLogSegmentMetadata> = Vec::new();
    let mut stranded = Vec::new();
    let mut rev = accepted.into_values().rev();
    if let Some(last) = rev.next() {
        chain.push(last);
    }
    let mut broken: Option<String> = None;
    for m in rev {
        if let Some(why) = &broken {
            stranded.push((m, why.clone()));
            continue;
        }
        let Some(cur) = chain.last() else {
            break;
        };
        let prev_epoch = m.segment_leader_epochs().keys().next_back().copied();
        let cur_epoch = cur.segment_leader_epochs().keys().next().copied();
        let why = if m.end_offset().checked_add(1) != Some(cur.start_offset()) {
            Some(format!(
                "seqs {}..={} are missing before seq {}",
                m.end_offset().saturating_add(1),
                cur.start_offset().saturating_sub(1),
                cur.start_offset()
            ))
        } else if prev_epoch > cur_epoch {
            Some(format!(
                "leader epoch {} at seq {} goes back to {}",
                prev_epoch.unwrap_or_default(),
                cur.start_offset(),
                cur_epoch.unwrap_or_default()
            ))
        } else {
            None
        };
        match why {
            Some(why) => {
                stranded.push((m, why.clone()));
                broken = Some(why);
            }
            None => chain.push(m),
        }
    }
    chain.reverse();
    (chain, superseded, stranded)
}

fn setup_local_log(
    dir: &std::path::Path,
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
