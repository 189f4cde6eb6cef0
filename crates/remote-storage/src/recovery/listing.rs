//! Listing a partition's objects and reading their manifests for the scan: the objects by
//! segment, temporary files, and the checks a listed copy must pass to be whole.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use uuid::Uuid;

use super::{IgnoreReason, IgnoredObject, RemoteSegmentLister};
use crate::error::RemoteStorageError;
use crate::layout::{self, SegmentObject};
use crate::manifest;
use crate::model::{
    IndexType, LOG_SUFFIX, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition,
};

/// Whether `key` names a temporary file of the layout.
pub(super) fn is_temp(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    matches!(
        layout::parse_segment_object_name(name),
        Some((_, _, SegmentObject::Temporary))
    )
}

/// The keys of a segment's temporary files.
pub(super) fn temp_keys(dir: &str, listed: Option<&Listed>) -> Vec<String> {
    listed
        .map(|l| l.temps.iter().map(|n| format!("{dir}/{n}")).collect())
        .unwrap_or_default()
}

/// Every listed key of a segment in the order to delete them: data and indexes, temporary
/// files, and (when `manifest`) the manifest last.
pub(super) fn segment_keys(
    dir: &str,
    start: u64,
    id: Uuid,
    listed: Option<&Listed>,
    manifest: bool,
) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some(l) = listed {
        if l.log_size.is_some() {
            keys.push(layout::segment_object_key(dir, start, id, LOG_SUFFIX));
        }
        for t in IndexType::ALL {
            if l.indexes & index_bit(t) != 0 {
                keys.push(layout::segment_object_key(dir, start, id, t.suffix()));
            }
        }
    }
    keys.extend(temp_keys(dir, listed));
    if manifest {
        keys.push(layout::segment_object_key(
            dir,
            start,
            id,
            layout::MANIFEST_SUFFIX,
        ));
    }
    keys
}

/// Folds the listing of `dir` into one entry per segment; names the layout does not write go
/// to `ignored`, epoch records to `epoch_keys`; `head_listed` says whether the head was
/// listed. Returns the entries and how many objects were listed.
pub(super) fn list_segments(
    lister: &dyn RemoteSegmentLister,
    dir: &str,
    ignored: &mut Vec<IgnoredObject>,
    epoch_keys: &mut Vec<(u64, String)>,
    head_listed: &mut bool,
) -> Result<(Segments, u64), RemoteStorageError> {
    let mut listed = Segments::new();
    let mut objects_listed = 0u64;
    let prefix = format!("{dir}/");
    lister.list_partition(dir, &mut |obj| {
        objects_listed += 1;
        let name = obj.key.strip_prefix(&prefix).unwrap_or(&obj.key);
        if layout::is_ownership_name(name) {
            // The identity, epoch records and probe keys: not segments. Epoch records are read
            // for the lineage; the rest (and temporary files of their writes) are left alone.
            if let Some(epoch) = layout::parse_epoch_name(name) {
                epoch_keys.push((epoch, obj.key));
            } else if name == layout::HEAD_NAME {
                *head_listed = true;
            }
            return Ok(());
        }
        let Some((start, id, kind)) = layout::parse_segment_object_name(name) else {
            ignored.push(IgnoredObject {
                key: obj.key,
                reason: IgnoreReason::UnrecognizedName,
            });
            return Ok(());
        };
        let entry = listed.entry((start, id)).or_default();
        match kind {
            SegmentObject::Manifest => entry.manifest = true,
            SegmentObject::Log => entry.log_size = Some(obj.size),
            SegmentObject::Index(t) => {
                entry.indexes |= index_bit(t);
                if let Some(size) = entry.index_sizes.get_mut(index_slot(t)) {
                    *size = obj.size;
                }
            }
            SegmentObject::Temporary => entry.temps.push(name.to_owned()),
        }
        Ok(())
    })?;
    Ok((listed, objects_listed))
}

/// The listing folded by segment: `(start, id)` to what exists of it.
pub(super) type Segments = BTreeMap<(u64, Uuid), Listed>;

/// Per-segment facts gathered from the listing.
#[derive(Debug, Default)]
pub(super) struct Listed {
    pub(super) manifest: bool,
    pub(super) log_size: Option<u64>,
    /// Bit `i` set: index `IndexType::ALL[i]` exists.
    pub(super) indexes: u8,
    /// The size of index `IndexType::ALL[i]` when it exists.
    pub(super) index_sizes: [u64; IndexType::ALL.len()],
    /// Temporary files of interrupted writes (file names).
    pub(super) temps: Vec<String>,
}

/// The position of `t` in [`IndexType::ALL`].
pub(super) fn index_slot(t: IndexType) -> usize {
    IndexType::ALL.iter().position(|x| *x == t).unwrap_or(0)
}

pub(super) fn index_bit(t: IndexType) -> u8 {
    let pos = IndexType::ALL.iter().position(|x| *x == t).unwrap_or(0);
    1u8 << pos
}

/// Indexes a tiering copy always writes.
pub(super) const REQUIRED_INDEXES: [IndexType; 3] = [
    IndexType::Offset,
    IndexType::Timestamp,
    IndexType::LeaderEpoch,
];

/// Reads and decodes `manifests` with `concurrency` threads. A retriable read failure fails
/// the whole recovery; any other failure is that manifest's `Err(reason)`.
#[allow(clippy::type_complexity)]
pub(super) fn read_manifests(
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
                        let key =
                            layout::segment_object_key(dir, *start, *id, layout::MANIFEST_SUFFIX);
                        let max = usize::try_from(manifest::MAX_MANIFEST_LEN).unwrap_or(usize::MAX);
                        match lister.read_object_bounded(&key, max) {
                            Err(RemoteStorageError::Corrupt { reason, .. }) => {
                                out.push((i, Err(format!("too large: {reason}"))));
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

/// Checks that the manifest `m` found under `(start, id)` names that segment of `tp`.
pub(super) fn check_names(
    m: &RemoteLogSegmentMetadata,
    tp: &TopicIdPartition,
    start: u64,
    id: Uuid,
) -> Result<(), IgnoreReason> {
    let sid = m.remote_log_segment_id();
    if sid.topic_id_partition() != tp || sid.id() != id || m.start_offset() != start {
        return Err(IgnoreReason::ForeignManifest(format!(
            "it describes segment {sid} of {} from seq {}",
            sid.topic_id_partition(),
            m.start_offset()
        )));
    }
    Ok(())
}

/// Checks that the complete manifest `m` describes a whole segment (its objects listed as
/// `listed`) and returns it as finished metadata.
pub(super) fn check_whole(
    m: &RemoteLogSegmentMetadata,
    listed: Option<&Listed>,
) -> Result<RemoteLogSegmentMetadata, IgnoreReason> {
    let sid = m.remote_log_segment_id();
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
        .writer_epoch(m.writer_epoch())
        .state(RemoteLogSegmentState::CopySegmentFinished)
        .build_strict()
        .map_err(|e| IgnoreReason::CorruptManifest(e.to_string()))
}
