//! The read-only part of recovery: list, read the manifests, validate, choose (see the
//! [module docs](super)).

use uuid::Uuid;

use super::choose::{choose, holes_of};
use super::listing::{
    Listed, REQUIRED_INDEXES, check_names, check_whole, index_bit, index_slot, is_temp,
    list_segments, read_manifests, segment_keys, temp_keys,
};
use super::unmanifested::{Rebuild, Unmanifested};
use super::used::{self, HeadFound, Unsure};
use super::{IgnoreReason, IgnoredObject, RemoteSegmentLister};
use crate::error::RemoteStorageError;
use crate::layout;
use crate::manifest::{self, ManifestState};
use crate::model::{IndexType, RemoteLogSegmentMetadata, TopicIdPartition};
use crate::ownership::{self, EpochRecord};

pub use super::used::HoleCause;

/// What [`scan`] found under a partition.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RemoteScan {
    /// Objects listed under the partition.
    pub objects_listed: u64,
    /// Manifests read.
    pub manifests_read: usize,
    /// The segments that form the log, in seq order, as `CopySegmentFinished` metadata (as
    /// their manifests hold it, or as rebuilt from their objects).
    pub chosen: Vec<RemoteLogSegmentMetadata>,
    /// Whole segments superseded by later copies ([`IgnoreReason::Superseded`]).
    pub superseded: Vec<RemoteLogSegmentMetadata>,
    /// Keys of the objects no writer or reader can need, in the order to delete them (each
    /// segment's manifest after its other objects): abandoned copies, deletes in progress,
    /// temporary files next to such segments or complete ones ([`IgnoreReason::AbandonedCopy`],
    /// [`IgnoreReason::DeleteInProgress`], [`IgnoreReason::IncompleteCopy`]). Never a copy in
    /// progress, never objects without a manifest.
    pub orphans: Vec<String>,
    /// Segments whose manifest was missing and was rebuilt from their objects (manifest keys);
    /// they are among `chosen` or `superseded`. The manifest is not written back.
    pub rebuilt: Vec<String>,
    /// Every object not used, with why, sorted by key.
    pub ignored: Vec<IgnoredObject>,
    /// The partition's writer epoch records that decode, oldest first
    /// ([`crate::ownership`]); the lineage `chosen` follows.
    pub epochs: Vec<EpochRecord>,
    /// The highest epoch number among the epoch records listed, readable or not (a claimant
    /// claims above it); 0 when there are none.
    pub max_epoch: u64,
    /// Seq ranges that no chosen segment holds, between the chosen segments and after the last
    /// one up to [`claimed_end`](Self::claimed_end) (a damaged, lost or unrebuildable segment,
    /// or after [`map_chosen`](Self::map_chosen) one that cannot be opened): each costs its
    /// own seqs only, and a read of them fails naming the hole.
    pub holes: Vec<std::ops::RangeInclusive<u64>>,
    /// What shows the seqs of [`holes`](Self::holes) used, one entry per segment (or epoch
    /// record) overlapping a hole, by first seq: the head listing a segment as finished, a
    /// manifest, an offset index, the object names, an epoch record; each names the objects
    /// left of the segment and what is wrong with them.
    pub causes: Vec<HoleCause>,
    /// The highest seq the bucket shows a writer used: the end of the chosen segments or of a
    /// segment that held acknowledged records but is not recovered (damaged, missing data or
    /// an index, unreadable, an abandoned copy, a delete in progress, stranded); the end of a
    /// segment whose manifest is missing, does not decode or names another segment, when the
    /// partition head lists it or its offset index gives it ([`scan_with_head`]), else its
    /// first seq when that continues the rest (see [`IgnoreReason::Stray`]); the last seq of
    /// every segment the partition head lists as finished ([`scan_with_head`]); the seq below
    /// the highest writer epoch's first seq, which a clean-up cannot delete. A recovered log
    /// continues after it, so no seq is ever used twice. Not raised by a copy still in
    /// progress (its writer is alive and finishes it), a fenced-out copy or a superseded one
    /// (a later lineage took those seqs over), or a stray object. `None` when there is none.
    pub claimed_end: Option<u64>,
}

/// Lists `tp`'s objects through `lister`, reads their manifests `concurrency` at a time
/// (at least 1) and chooses the segments that form the log (see the [module docs](super)).
/// Nothing is written or deleted. [`scan_with`] at the current time, without rebuilding lost
/// manifests.
///
/// # Errors
/// An invalid partition ([`layout::partition_dir`]); a listing failure; a retriable manifest
/// read failure (any other read failure only makes that manifest unusable).
pub fn scan(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    concurrency: usize,
) -> Result<RemoteScan, RemoteStorageError> {
    scan_with(lister, tp, concurrency, crate::now_ms(), None)
}

/// [`scan_with`], also reading the partition head ([`crate::head`]) first, before the listing
/// (so every segment it lists was finished before the listing began): what a disaster recovery
/// runs. The seqs a head the partition's writer wrote lists as finished count as used
/// ([`RemoteScan::claimed_end`]): those no whole segment holds are holes, named with the
/// objects left of their segment ([`RemoteScan::causes`]). A head that is damaged or that no
/// epoch record's writer wrote is reported ([`IgnoreReason::UnusableHead`]) and not used; a
/// missing one changes nothing.
///
/// # Errors
/// As [`scan`]; a retriable failure reading the head.
pub fn scan_with_head(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    concurrency: usize,
    now_ms: i64,
    rebuild: Option<Rebuild<'_>>,
) -> Result<RemoteScan, RemoteStorageError> {
    scan_inner(lister, tp, concurrency, now_ms, rebuild, true)
}

/// [`scan`] as of the wall-clock time `now_ms` (which decides whether an in-progress copy is
/// abandoned: [`manifest::copy_abandoned_at`]), rebuilding the metadata of segments with every
/// object but the manifest through `rebuild` when given.
///
/// # Errors
/// As [`scan`].
pub fn scan_with(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    concurrency: usize,
    now_ms: i64,
    rebuild: Option<Rebuild<'_>>,
) -> Result<RemoteScan, RemoteStorageError> {
    scan_inner(lister, tp, concurrency, now_ms, rebuild, false)
}

#[allow(clippy::too_many_lines)]
fn scan_inner(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    concurrency: usize,
    now_ms: i64,
    rebuild: Option<Rebuild<'_>>,
    with_head: bool,
) -> Result<RemoteScan, RemoteStorageError> {
    let dir = layout::partition_dir(tp)?;
    // Before the listing: every segment the head lists was finished before the listing began,
    // so a live writer's new copies never show up as lost.
    let head = if with_head {
        used::read(lister, &dir)?
    } else {
        HeadFound::NotRead
    };
    let mut ignored = Vec::new();
    let mut epoch_keys = Vec::new();
    let mut head_listed = false;
    let (listed, objects_listed) = list_segments(
        lister,
        &dir,
        &mut ignored,
        &mut epoch_keys,
        &mut head_listed,
    )?;
    let max_epoch = epoch_keys.iter().map(|(e, _)| *e).max().unwrap_or(0);
    let epochs = read_epochs(lister, epoch_keys, &mut ignored)?;
    let head = used::trusted(
        head,
        head_listed,
        tp,
        &dir,
        &epochs,
        max_epoch,
        &mut ignored,
    );
    let mut unsure: Vec<Unsure> = Vec::new();
    let mut causes: Vec<HoleCause> = Vec::new();
    let manifests: Vec<(u64, Uuid)> = listed
        .iter()
        .filter(|(_, l)| l.manifest)
        .map(|(k, _)| *k)
        .collect();
    let decoded = read_manifests(lister, &dir, &manifests, concurrency.max(1))?;
    let manifests_read = manifests.len();
    let mut whole: Vec<RemoteLogSegmentMetadata> = Vec::new();
    let mut orphans = Vec::new();
    let mut rebuilt = Vec::new();
    let mut claimed: Option<u64> = None;
    let mut claim = |seq: u64| claimed = Some(claimed.map_or(seq, |c| c.max(seq)));
    for ((start, id), result) in manifests.iter().zip(decoded) {
        let key = layout::segment_object_key(&dir, *start, *id, layout::MANIFEST_SUFFIX);
        let entry = listed.get(&(*start, *id));
        let m = match result {
            Ok(m) => m,
            Err(why) => {
                // Its seqs are bounded below, by the head or its own objects, if at all.
                unsure.push(unsure_of(
                    tp,
                    &dir,
                    (*start, *id),
                    entry,
                    IgnoreReason::CorruptManifest(why),
                    true,
                ));
                continue;
            }
        };
        // A manifest naming another segment than its key says nothing of this one: its seqs
        // are bounded below, by the head or its own objects, if at all.
        if let Err(reason) = check_names(&m, tp, *start, *id) {
            unsure.push(unsure_of(tp, &dir, (*start, *id), entry, reason, true));
            continue;
        }
        let in_progress = matches!(ManifestState::of(&m), ManifestState::InProgress)
            && now_ms < manifest::copy_abandoned_at(&m);
        if let ManifestState::Complete = ManifestState::of(&m)
            && let Ok(finished) = check_whole(&m, entry)
        {
            whole.push(finished);
            orphans.extend(temp_keys(&dir, entry));
            continue;
        }
        // Not recovered, but its records were acknowledged: unless a later writer epoch took
        // its seqs over, or its writer is still copying it, they are never used again.
        let counts = !in_progress && ownership::superseded_by(&m, &epochs).is_none();
        if counts {
            claim(m.end_offset());
        }
        let reason = match ManifestState::of(&m) {
            ManifestState::Complete => match check_whole(&m, entry) {
                Ok(_) => continue,
                Err(reason) => reason,
            },
            ManifestState::InProgress if in_progress => IgnoreReason::CopyInProgress {
                started_ms: m.event_timestamp_ms(),
                abandoned_at_ms: manifest::copy_abandoned_at(&m),
            },
            ManifestState::InProgress => {
                orphans.extend(segment_keys(&dir, *start, *id, entry, true));
                IgnoreReason::AbandonedCopy {
                    started_ms: m.event_timestamp_ms(),
                }
            }
            ManifestState::Deleting => {
                orphans.extend(segment_keys(&dir, *start, *id, entry, true));
                IgnoreReason::DeleteInProgress
            }
        };
        if counts {
            causes.push(HoleCause {
                seqs: m.start_offset()..=m.end_offset(),
                key: layout::segment_object_key(&dir, *start, *id, ""),
                reason: format!(
                    "its manifest {key} says seqs {}..={} were copied, but {reason}",
                    m.start_offset(),
                    m.end_offset()
                ),
            });
        }
        ignored.push(IgnoredObject { key, reason });
    }
    for ((start, id), l) in listed.iter().filter(|(_, l)| !l.manifest) {
        if l.log_size.is_none() && l.indexes == 0 {
            // Only temporary files: a write cut short, or the first object of a copy starting
            // right now (its in-progress manifest before the rename). Reported, kept.
            ignored.extend(
                temp_keys(&dir, Some(l))
                    .into_iter()
                    .map(|key| IgnoredObject {
                        key,
                        reason: IgnoreReason::IncompleteCopy,
                    }),
            );
            continue;
        }
        let lost = Unmanifested {
            partition: tp.clone(),
            start: *start,
            id: *id,
            log_size: l.log_size,
            indexes: IndexType::ALL
                .into_iter()
                .filter(|t| l.indexes & index_bit(*t) != 0)
                .map(|t| (t, l.index_sizes.get(index_slot(t)).copied().unwrap_or(0)))
                .collect(),
        };
        let key = layout::segment_object_key(&dir, *start, *id, layout::MANIFEST_SUFFIX);
        let outcome = match rebuild {
            _ if l.log_size.is_none() => Err("no .log object".to_owned()),
            _ if REQUIRED_INDEXES
                .iter()
                .any(|t| !lost.indexes.iter().any(|(i, _)| i == t)) =>
            {
                Err("an index object is missing too".to_owned())
            }
            None => Err("not rebuilt (no rebuild given)".to_owned()),
            Some(rebuild) => rebuild(&lost).and_then(|m| {
                check_names(&m, tp, *start, *id)
                    .and_then(|()| check_whole(&m, Some(l)))
                    .map_err(|e| e.to_string())
            }),
        };
        match outcome {
            Ok(m) => {
                whole.push(m);
                rebuilt.push(key);
            }
            Err(why) => {
                // A rebuild was tried (or cannot be): only the head bounds its seqs.
                let mut u = unsure_of(
                    tp,
                    &dir,
                    (*start, *id),
                    Some(l),
                    IgnoreReason::ManifestMissing(why),
                    false,
                );
                u.rebuild_from = None;
                unsure.push(u);
            }
        }
    }
    drop(listed);
    ignored.extend(
        orphans
            .iter()
            .filter(|k| is_temp(k))
            .map(|k| IgnoredObject {
                key: k.clone(),
                reason: IgnoreReason::IncompleteCopy,
            }),
    );
    let (chosen, superseded, stranded) = choose(whole, &epochs);
    // A writer epoch claimed from `start_seq` on: every seq below it was used, even when no
    // object shows it any more (a clean-up deleted an abandoned copy).
    let newest_epoch = epochs.iter().max_by_key(|e| e.epoch);
    let epochs_below = newest_epoch
        .map(|e| e.start_seq.saturating_sub(1))
        .filter(|seq| *seq > 0);
    // What the head lists as finished was used, unless a later lineage took it over.
    let not_counted: std::collections::HashSet<Uuid> = superseded
        .iter()
        .map(|(m, _)| m.remote_log_segment_id().id())
        .collect();
    let head_end = head.as_ref().and_then(|h| {
        used::counted(h, &epochs, &not_counted)
            .map(|s| s.end_seq)
            .max()
    });
    let segments_end = chosen
        .iter()
        .chain(stranded.iter().map(|(m, _)| m))
        .map(RemoteLogSegmentMetadata::end_offset)
        .max()
        .max(claimed);
    let written_to = segments_end.max(epochs_below).max(head_end);
    let resolved = used::resolve(unsure, &dir, head.as_ref(), rebuild, written_to);
    ignored.extend(resolved.ignored);
    causes.extend(resolved.causes);
    let claimed_end = written_to.max(resolved.claimed);
    let holes = holes_of(&chosen, claimed_end);
    if let (Some(e), Some(below)) = (newest_epoch, epochs_below)
        && Some(below) > segments_end.max(head_end).max(resolved.claimed)
    {
        let from = segments_end
            .max(head_end)
            .max(resolved.claimed)
            .map_or(1, |s| s.saturating_add(1));
        causes.push(HoleCause {
            seqs: from..=below,
            key: layout::epoch_key(&dir, e.epoch),
            reason: format!(
                "writer epoch {}'s record says seqs below {} were in the bucket when it claimed \
                 the partition, but no segment holding seqs {from}..={below} is left",
                e.epoch, e.start_seq
            ),
        });
    }
    let mut superseded_segments = Vec::new();
    for (m, reason) in superseded {
        let key = layout::manifest_key(&m)?;
        superseded_segments.push(m);
        ignored.push(IgnoredObject { key, reason });
    }
    for (m, why) in stranded {
        ignored.push(IgnoredObject {
            key: layout::manifest_key(&m)?,
            reason: IgnoreReason::NotContiguous(why),
        });
    }
    if let Some(h) = &head {
        let chosen_ids: std::collections::HashSet<Uuid> = chosen
            .iter()
            .map(|m| m.remote_log_segment_id().id())
            .collect();
        // Last: they replace what the manifests or objects of the same segment say.
        causes.extend(used::head_causes(
            &dir,
            used::counted(h, &epochs, &not_counted),
            &chosen_ids,
            &ignored,
        ));
    }
    let causes = used::of_holes(causes, &holes);
    ignored.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(RemoteScan {
        objects_listed,
        manifests_read,
        chosen,
        superseded: superseded_segments,
        orphans,
        rebuilt,
        ignored,
        epochs,
        max_epoch,
        holes,
        causes,
        claimed_end,
    })
}

/// A segment with no usable manifest, as [`used::resolve`] needs it: `manifest` says whether
/// a manifest object exists; the objects are read for its offset index when they are all
/// there.
fn unsure_of(
    tp: &TopicIdPartition,
    dir: &str,
    (start, id): (u64, Uuid),
    listed: Option<&Listed>,
    reason: IgnoreReason,
    manifest: bool,
) -> Unsure {
    let rebuild_from = listed
        .filter(|l| {
            l.log_size.is_some()
                && REQUIRED_INDEXES
                    .iter()
                    .all(|t| l.indexes & index_bit(*t) != 0)
        })
        .map(|l| Unmanifested {
            partition: tp.clone(),
            start,
            id,
            log_size: l.log_size,
            indexes: IndexType::ALL
                .into_iter()
                .filter(|t| l.indexes & index_bit(*t) != 0)
                .map(|t| (t, l.index_sizes.get(index_slot(t)).copied().unwrap_or(0)))
                .collect(),
        });
    Unsure {
        start,
        id,
        key: layout::segment_object_key(dir, start, id, layout::MANIFEST_SUFFIX),
        objects: segment_keys(dir, start, id, listed, manifest),
        reason,
        rebuild_from,
    }
}

/// Reads the epoch records listed (`(epoch, key)`), oldest first; one that does not decode (or
/// holds another epoch than its key) is reported in `ignored` and left out.
fn read_epochs(
    lister: &dyn RemoteSegmentLister,
    keys: Vec<(u64, String)>,
    ignored: &mut Vec<IgnoredObject>,
) -> Result<Vec<EpochRecord>, RemoteStorageError> {
    let mut epochs = Vec::with_capacity(keys.len());
    for (_, key, decoded) in ownership::read_epochs(lister, keys)? {
        match decoded {
            Ok(r) => epochs.push(r),
            Err(e) => ignored.push(IgnoredObject {
                key,
                reason: IgnoreReason::CorruptOwnershipRecord(e.to_string()),
            }),
        }
    }
    Ok(epochs)
}
