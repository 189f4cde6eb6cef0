//! What a full listing proves beyond the segments it can serve: seqs the bucket's own records
//! show finished that no whole segment holds (a lost or damaged segment, named with its
//! objects), and whether the partition head is older than what the bucket holds.
//!
//! A replica never lets a lost segment pass for one "not copied yet": the head lists the
//! segments its writer finished, an epoch record says which seqs were in the bucket when its
//! writer claimed the partition, and without a head the listing itself shows which seqs a
//! writer used ([`RemoteScan::holes`]). Seqs any of them shows finished that the view cannot
//! serve are [`MissingSeqs`]: the view ends no earlier than they do, and a read of them is a
//! named hole.

use std::collections::HashSet;

use krabka_remote_storage::head::PartitionHead;
use krabka_remote_storage::layout::{self, MANIFEST_SUFFIX};
use krabka_remote_storage::ownership::EpochRecord;
use krabka_remote_storage::recovery::{IgnoreReason, IgnoredObject, RemoteScan};
use krabka_remote_storage::{LOG_SUFFIX, RemoteLogSegmentMetadata, Uuid};

use super::{HeadStatus, MissingSeqs};

/// The view a full listing yields against a head: the segments to serve, the seqs shown
/// finished that cannot be served, and the head's status.
pub(crate) struct Judged {
    pub(crate) served: Vec<RemoteLogSegmentMetadata>,
    pub(crate) missing: Vec<MissingSeqs>,
    pub(crate) status: HeadStatus,
}

/// A segment object the listing did not use, by the segment it belongs to.
struct Damage<'a> {
    start: u64,
    id: Uuid,
    ignored: &'a IgnoredObject,
}

fn damages(ignored: &[IgnoredObject]) -> Vec<Damage<'_>> {
    ignored
        .iter()
        .filter_map(|i| {
            let name = i.key.rsplit('/').next()?;
            let (start, id, _) = layout::parse_segment_object_name(name)?;
            Some(Damage {
                start,
                id,
                ignored: i,
            })
        })
        .collect()
}

/// Whether the listing refused the segment only because the caller's map cannot open it (a
/// key not given, say): the caller reports those itself, as holes.
fn refused_by_map(d: &Damage<'_>) -> bool {
    matches!(d.ignored.reason, IgnoreReason::Unreadable(_))
}

/// Whether the damage is one of a copy that is no loss (in progress, abandoned before it was
/// finished, being deleted, another writer's): it never held finished seqs. A manifest that
/// names another segment than its key is a loss like a corrupt one: the segment its key names
/// has no readable manifest (a segment the head lists then is lost, never "not copied yet").
fn not_a_loss(d: &Damage<'_>) -> bool {
    matches!(
        d.ignored.reason,
        IgnoreReason::CopyInProgress { .. }
            | IgnoreReason::AbandonedCopy { .. }
            | IgnoreReason::DeleteInProgress
            | IgnoreReason::IncompleteCopy
            | IgnoreReason::UnrecognizedName
            | IgnoreReason::Superseded { .. }
            | IgnoreReason::FencedOut { .. }
            | IgnoreReason::CorruptOwnershipRecord(_)
    )
}

/// The key of the object a damage is about, and what is wrong with it.
fn object_of(dir: &str, d: &Damage<'_>) -> (String, String) {
    let key = |suffix: &str| layout::segment_object_key(dir, d.start, d.id, suffix);
    match &d.ignored.reason {
        IgnoreReason::DataMissing => (key(LOG_SUFFIX), "is missing".to_owned()),
        IgnoreReason::DataWrongSize { expected, found } => (
            key(LOG_SUFFIX),
            format!("has {found} bytes, its manifest says {expected}"),
        ),
        IgnoreReason::IndexMissing(t) => (key(t.suffix()), "is missing".to_owned()),
        IgnoreReason::ManifestMissing(why) => (
            key(MANIFEST_SUFFIX),
            format!("is missing (the segment cannot be rebuilt without it: {why})"),
        ),
        IgnoreReason::CorruptManifest(why) => {
            (key(MANIFEST_SUFFIX), format!("does not decode: {why}"))
        }
        other => (d.ignored.key.clone(), other.to_string()),
    }
}

/// `objects` and the sentence naming them, for a segment (or seqs) shown finished by
/// `shown_by`.
fn missing(dir: &str, from: u64, to: u64, shown_by: String, found: &[&Damage<'_>]) -> MissingSeqs {
    let named: Vec<(String, String)> = found.iter().map(|d| object_of(dir, d)).collect();
    let what = if named.is_empty() {
        "no object of it is left in the bucket".to_owned()
    } else {
        named
            .iter()
            .map(|(k, why)| format!("{k} {why}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    MissingSeqs {
        from,
        to,
        objects: named.into_iter().map(|(k, _)| k).collect(),
        reason: format!("{shown_by}, but {what}"),
    }
}

/// The parts of `from..=to` no segment of `served` (by start seq, none overlapping) holds.
fn uncovered(from: u64, to: u64, served: &[RemoteLogSegmentMetadata]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = from;
    for m in served {
        if at > to {
            break;
        }
        if m.end_offset() < at {
            continue;
        }
        if m.start_offset() > to {
            break;
        }
        if m.start_offset() > at {
            out.push((at, m.start_offset() - 1));
        }
        at = m.end_offset().saturating_add(1);
        if m.end_offset() == u64::MAX {
            return out;
        }
    }
    if at <= to {
        out.push((at, to));
    }
    out
}

/// The seqs epoch records show were in the bucket when their writer claimed the partition
/// (those below the newest record's first seq, claimed from a recovery of the bucket), that
/// neither `served` nor `missing` accounts for.
fn epoch_missing(
    dir: &str,
    epochs: &[EpochRecord],
    served: &[RemoteLogSegmentMetadata],
    missing_so_far: &[MissingSeqs],
    retention_point: u64,
    found: &[Damage<'_>],
) -> Vec<MissingSeqs> {
    let Some(newest) = epochs.iter().max_by_key(|e| e.epoch) else {
        return Vec::new();
    };
    let Some(below) = newest.start_seq.checked_sub(1) else {
        return Vec::new();
    };
    // Only past what the view holds: a prefix below the first served seq may be the retention
    // the head (or the listing) already accounts for.
    let end = served
        .last()
        .map(RemoteLogSegmentMetadata::end_offset)
        .into_iter()
        .chain(missing_so_far.iter().map(|m| m.to))
        .max()
        .unwrap_or(0);
    let from = end.saturating_add(1).max(retention_point).max(1);
    if from > below || served.is_empty() {
        return Vec::new();
    }
    let in_range: Vec<&Damage<'_>> = found
        .iter()
        .filter(|d| d.start >= from && d.start <= below && !not_a_loss(d))
        .collect();
    vec![missing(
        dir,
        from,
        below,
        format!(
            "writer epoch {}'s record says seqs below {} were in the bucket when it claimed the \
             partition",
            newest.epoch, newest.start_seq
        ),
        &in_range,
    )]
}

/// [`epoch_missing`] alone: for a head applied without a listing (every segment it lists has
/// a complete manifest), the seqs its writer's epoch records show in the bucket past them.
pub(crate) fn epochs_only(
    dir: &str,
    epochs: &[EpochRecord],
    served: &[RemoteLogSegmentMetadata],
    retention_point: u64,
) -> Vec<MissingSeqs> {
    epoch_missing(dir, epochs, served, &[], retention_point, &[])
}

/// Judges the complete copies of a full listing (`chosen`: lineage-checked, none below the
/// retention point) against the head `h`: served are the copies it lists; complete copies
/// after its last seq that it does not list make it [`HeadStatus::Behind`] (an old head put
/// back, or one its writer has not rewritten yet: not served, as the writer may still
/// discard them); missing are the segments it lists that have no
/// whole copy, unless their objects are all gone below what is served (deleted since: the
/// head is behind that too) or only the caller's map refused them.
pub(crate) fn against_head(
    dir: &str,
    h: &PartitionHead,
    chosen: Vec<RemoteLogSegmentMetadata>,
    ignored: &[IgnoredObject],
    epochs: &[EpochRecord],
    status: HeadStatus,
) -> Judged {
    let rp = h.retention_point;
    let listed: HashSet<Uuid> = h.segments.iter().map(|s| s.id).collect();
    let listed_to = h.segments.iter().map(|s| s.end_seq).max();
    let complete: HashSet<Uuid> = chosen
        .iter()
        .map(|m| m.remote_log_segment_id().id())
        .collect();
    let found = damages(ignored);
    // Complete copies after the head's last seq that it does not list.
    let after: Vec<RemoteLogSegmentMetadata> = chosen
        .iter()
        .filter(|m| {
            !listed.contains(&m.remote_log_segment_id().id())
                && listed_to.is_none_or(|t| m.start_offset() > t)
        })
        .cloned()
        .collect();
    // None of them is served: the writer may still discard a copy it has not recorded, and no
    // follower may trim by it. The head's status says the bucket holds more.
    let served: Vec<RemoteLogSegmentMetadata> = chosen
        .into_iter()
        .filter(|m| listed.contains(&m.remote_log_segment_id().id()))
        .collect();
    let first_served = served.first().map(RemoteLogSegmentMetadata::start_offset);
    let mut missing_seqs = Vec::new();
    let mut deleted = 0;
    for s in h.segments.iter().filter(|s| s.end_seq >= rp) {
        if complete.contains(&s.id) {
            continue;
        }
        let of_it: Vec<&Damage<'_>> = found
            .iter()
            .filter(|d| d.id == s.id && d.start == s.start_seq)
            .collect();
        // Refused by the caller's map only (it reports those), or a copy a later writer epoch
        // took the seqs over from (a fenced writer's head names it): no loss.
        let taken_over = epochs
            .iter()
            .any(|e| e.epoch > s.writer_epoch && e.start_seq <= s.end_seq && s.writer_epoch > 0);
        if taken_over || of_it.iter().any(|d| refused_by_map(d) || not_a_loss(d)) {
            continue;
        }
        if of_it.is_empty() && first_served.is_none_or(|f| s.end_seq < f) {
            // Every object gone, below everything served: retention deleted it after this
            // head was written.
            deleted += 1;
            continue;
        }
        let stem = layout::segment_object_key(dir, s.start_seq, s.id, "");
        missing_seqs.push(missing(
            dir,
            s.start_seq.max(rp),
            s.end_seq,
            format!(
                "the partition head lists segment {stem} (seqs {}..={}) as finished",
                s.start_seq, s.end_seq
            ),
            &of_it,
        ));
    }
    let more = epoch_missing(dir, epochs, &served, &missing_seqs, rp, &found);
    missing_seqs.extend(more);
    missing_seqs.sort_by_key(|m| m.from);
    let status = if after.is_empty() && deleted == 0 {
        status
    } else {
        HeadStatus::Behind {
            listed_to,
            bucket_to: after
                .iter()
                .map(RemoteLogSegmentMetadata::end_offset)
                .chain(listed_to)
                .max()
                .unwrap_or(0),
            unlisted: after.len(),
            deleted,
        }
    };
    Judged {
        served,
        missing: missing_seqs,
        status,
    }
}

/// The seqs a full listing without a usable head shows a writer finished that `served` does
/// not hold: the scan's holes (between the whole segments and after them up to the highest
/// seq the bucket shows used), each named with the objects of the segments in it, but not
/// those only the caller's map refused (the caller reports those as holes itself).
pub(crate) fn of_listing(
    dir: &str,
    scan: &RemoteScan,
    served: &[RemoteLogSegmentMetadata],
    retention_point: u64,
) -> Vec<MissingSeqs> {
    let found = damages(&scan.ignored);
    let mut out = Vec::new();
    for hole in &scan.holes {
        let (from, to) = ((*hole.start()).max(retention_point), *hole.end());
        if from > to {
            continue;
        }
        let in_it: Vec<&Damage<'_>> = found
            .iter()
            .filter(|d| d.start >= *hole.start() && d.start <= to && !not_a_loss(d))
            .collect();
        if in_it.iter().any(|d| refused_by_map(d)) {
            continue;
        }
        for (a, b) in uncovered(from, to, served) {
            out.push(missing(
                dir,
                a,
                b,
                format!(
                    "the listing shows seqs {a}..={b} used by a writer (a segment that held \
                     them is not whole)"
                ),
                &in_it,
            ));
        }
    }
    let more = epoch_missing(dir, &scan.epochs, served, &out, retention_point, &found);
    out.extend(more);
    out.sort_by_key(|m| m.from);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use krabka_remote_storage::{RemoteLogSegmentId, TopicIdPartition};

    fn seg(start: u64, end: u64) -> RemoteLogSegmentMetadata {
        let tp = TopicIdPartition::new(Uuid::nil(), "t", 0);
        RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::new(tp, Uuid::new_v4()), start, end)
            .build()
            .unwrap()
    }

    #[test]
    fn uncovered_names_the_gaps_between_before_and_after_served_segments() {
        let served = [seg(5, 9), seg(12, 20)];
        assert_eq!(uncovered(1, 25, &served), vec![(1, 4), (10, 11), (21, 25)]);
        assert_eq!(uncovered(5, 9, &served), vec![]);
        assert_eq!(uncovered(10, 11, &served), vec![(10, 11)]);
        assert_eq!(uncovered(7, 14, &served), vec![(10, 11)]);
        assert_eq!(uncovered(3, 3, &[]), vec![(3, 3)]);
    }
}
