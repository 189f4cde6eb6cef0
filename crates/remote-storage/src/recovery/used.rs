//! Step 5 of the [module docs](super): which seqs the bucket shows a writer used, beyond the
//! whole segments, so a recovered log never gives them again and a read of them is a named
//! hole. What shows them: the partition head ([`crate::head`]), the epoch records, the readable
//! manifests, and, for a segment whose manifest is missing, damaged or names another segment,
//! the head's entry for it or its own offset index. An object that only its name ties to seqs
//! counts only when those seqs continue what the rest shows written; one beyond is a stray.

use std::collections::{BTreeMap, HashSet};
use std::ops::RangeInclusive;

use uuid::Uuid;

use super::unmanifested::Rebuild;
use super::{IgnoreReason, IgnoredObject, RemoteSegmentLister, Unmanifested};
use crate::error::RemoteStorageError;
use crate::head::{self, HeadSegment, PartitionHead};
use crate::layout;
use crate::model::TopicIdPartition;
use crate::ownership::{self, EpochRecord};

/// Seqs the bucket shows used that no recovered segment holds, and what shows it: the causes
/// of [`RemoteScan::holes`](super::RemoteScan::holes), one per segment (or epoch record).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoleCause {
    /// The seqs it shows used (as far as it shows them).
    pub seqs: RangeInclusive<u64>,
    /// The segment it is about (its key stem, `<partition dir>/<start>-<id>`), or the
    /// object (an epoch record, a `.log` object).
    pub key: String,
    /// What shows the seqs used, and why no recovered segment holds them (naming the objects).
    pub reason: String,
}

/// The partition head as [`read`] found it.
pub(super) enum HeadFound {
    /// Not asked for.
    NotRead,
    /// The partition has none.
    Absent,
    /// One that decodes.
    Read(PartitionHead),
    /// One that is there but cannot be used, and why.
    Unusable(String),
    /// A read that failed in a way that does not say whether the head exists: the listing
    /// decides (absent unless it lists the head).
    Failed(String),
}

/// Reads the head of the partition directory `dir`.
///
/// # Errors
/// A retriable read failure; anything else wrong with the head is [`HeadFound::Unusable`].
pub(super) fn read(
    lister: &dyn RemoteSegmentLister,
    dir: &str,
) -> Result<HeadFound, RemoteStorageError> {
    let key = layout::head_key(dir);
    match lister.read_object_bounded(&key, head::MAX_HEAD_LEN) {
        Ok(bytes) => Ok(match PartitionHead::decode(&bytes, &key) {
            Ok(h) => HeadFound::Read(h),
            Err(e) => HeadFound::Unusable(e.to_string()),
        }),
        Err(RemoteStorageError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(HeadFound::Absent)
        }
        Err(e) if e.is_not_found() => Ok(HeadFound::Absent),
        Err(e) if e.is_retriable() => Err(e),
        Err(e) => Ok(HeadFound::Failed(format!("unreadable: {e}"))),
    }
}

/// The head when it is one the writer of its epoch wrote for `tp`: it names `tp` and a writer
/// epoch an epoch record holds (with the record's incarnation, when the record decodes).
/// Anything else is reported in `ignored` ([`IgnoreReason::UnusableHead`]) and not used.
/// `listed`: whether the listing showed the head.
pub(super) fn trusted(
    found: HeadFound,
    listed: bool,
    tp: &TopicIdPartition,
    dir: &str,
    epochs: &[EpochRecord],
    max_epoch: u64,
    ignored: &mut Vec<IgnoredObject>,
) -> Option<PartitionHead> {
    let why = match found {
        HeadFound::NotRead | HeadFound::Absent => return None,
        HeadFound::Failed(_) if !listed => return None,
        HeadFound::Unusable(why) | HeadFound::Failed(why) => why,
        HeadFound::Read(h) => {
            let foreign_incarnation = epochs
                .iter()
                .any(|e| e.epoch == h.writer_epoch && e.incarnation != h.incarnation);
            if h.partition.topic_id() != tp.topic_id() || h.partition.partition() != tp.partition()
            {
                format!("it names partition {}", h.partition)
            } else if h.writer_epoch == 0 || h.writer_epoch > max_epoch || foreign_incarnation {
                format!(
                    "it names writer epoch {} (incarnation {}), which no epoch record of the \
                     partition holds",
                    h.writer_epoch, h.incarnation
                )
            } else {
                return Some(h);
            }
        }
    };
    ignored.push(IgnoredObject {
        key: layout::head_key(dir),
        reason: IgnoreReason::UnusableHead(why),
    });
    None
}

/// The segments of `h` that count as used: at or above its retention point, not taken over by
/// a later writer epoch, and not a copy the listing's lineage superseded or fenced out
/// (`not_counted`).
pub(super) fn counted<'a>(
    h: &'a PartitionHead,
    epochs: &'a [EpochRecord],
    not_counted: &'a HashSet<Uuid>,
) -> impl Iterator<Item = &'a HeadSegment> + 'a {
    h.segments.iter().filter(move |s| {
        s.end_seq >= h.retention_point
            && ownership::superseding_epoch(s.writer_epoch, s.end_seq, epochs).is_none()
            && !not_counted.contains(&s.id)
    })
}

/// A segment with no usable manifest: its seqs are bounded by the head or its objects, or
/// only its name gives its first seq.
pub(super) struct Unsure {
    pub(super) start: u64,
    pub(super) id: Uuid,
    /// The key it is reported under when it is not a stray (its manifest key).
    pub(super) key: String,
    /// Every key of it that exists: what a stray is reported under.
    pub(super) objects: Vec<String>,
    pub(super) reason: IgnoreReason,
    /// Its objects, to read its offset index from, when they are all there and no rebuild was
    /// tried yet.
    pub(super) rebuild_from: Option<Unmanifested>,
}

/// What [`resolve`] makes of the unsure segments.
#[derive(Default)]
pub(super) struct Resolved {
    /// The highest seq they show used, `None` when none does.
    pub(super) claimed: Option<u64>,
    pub(super) ignored: Vec<IgnoredObject>,
    pub(super) causes: Vec<HoleCause>,
}

/// Bounds each unsure segment by the head's entry for it, else by its own offset index (read
/// through `rebuild`); one that nothing bounds is used by its first seq when that seq lies at
/// or right after `written_to` (the highest seq everything else shows used: it continues it,
/// or lies within it) and is a stray otherwise.
pub(super) fn resolve(
    unsure: Vec<Unsure>,
    dir: &str,
    head: Option<&PartitionHead>,
    rebuild: Option<Rebuild<'_>>,
    written_to: Option<u64>,
) -> Resolved {
    let mut out = Resolved::default();
    let mut name_only = Vec::new();
    for u in unsure {
        let stem = layout::segment_object_key(dir, u.start, u.id, "");
        let by_head = head
            .and_then(|h| {
                h.segments
                    .iter()
                    .find(|s| s.id == u.id && s.start_seq == u.start)
            })
            .map(|s| {
                (
                    s.end_seq,
                    "the partition head lists it as finished".to_owned(),
                )
            });
        let by_index = || {
            let lost = u.rebuild_from.as_ref()?;
            let m = rebuild?(lost).ok()?;
            (m.start_offset() == u.start && m.remote_log_segment_id().id() == u.id).then(|| {
                (
                    m.end_offset(),
                    "its offset index (checked against its .log object) holds them".to_owned(),
                )
            })
        };
        match by_head.or_else(by_index) {
            Some((end, shown_by)) => {
                out.claimed = out.claimed.max(Some(end));
                out.causes.push(HoleCause {
                    seqs: u.start..=end,
                    reason: format!(
                        "segment {stem} held seqs {}..={end}: {shown_by}, but {}: {}",
                        u.start, u.key, u.reason
                    ),
                    key: stem,
                });
                out.ignored.push(IgnoredObject {
                    key: u.key,
                    reason: u.reason,
                });
            }
            None => name_only.push((u, stem)),
        }
    }
    // In seq order: one continuing what is written moves the end the next one is judged by.
    name_only.sort_by_key(|(u, _)| u.start);
    let mut written_to = written_to.max(out.claimed);
    for (u, stem) in name_only {
        if written_to.is_some_and(|w| u.start <= w.saturating_add(1)) {
            out.claimed = out.claimed.max(Some(u.start));
            written_to = written_to.max(Some(u.start));
            out.causes.push(HoleCause {
                seqs: u.start..=u.start,
                reason: format!(
                    "segment {stem} starts at seq {} (its object names say so; nothing gives its \
                     end: no partition head lists it, no offset index of it can be read), but \
                     {}: {}",
                    u.start, u.key, u.reason
                ),
                key: stem,
            });
            out.ignored.push(IgnoredObject {
                key: u.key,
                reason: u.reason,
            });
        } else {
            let why = u.reason.to_string();
            out.ignored
                .extend(u.objects.into_iter().map(|key| IgnoredObject {
                    key,
                    reason: IgnoreReason::Stray {
                        written_to,
                        why: why.clone(),
                    },
                }));
        }
    }
    out
}

/// The causes of the seqs the head lists as finished (`counted`) that no chosen segment holds
/// (`chosen_ids`), naming the objects of each that `ignored` reports, or saying none is left.
pub(super) fn head_causes<'a>(
    dir: &str,
    counted: impl Iterator<Item = &'a HeadSegment>,
    chosen_ids: &HashSet<Uuid>,
    ignored: &[IgnoredObject],
) -> Vec<HoleCause> {
    counted
        .filter(|s| !chosen_ids.contains(&s.id))
        .map(|s| {
            let stem = layout::segment_object_key(dir, s.start_seq, s.id, "");
            let of_it: Vec<String> = ignored
                .iter()
                .filter(|i| i.key.starts_with(&stem))
                .map(|i| format!("{}: {}", i.key, i.reason))
                .collect();
            let what = if of_it.is_empty() {
                "no object of it is left in the bucket".to_owned()
            } else {
                of_it.join("; ")
            };
            HoleCause {
                seqs: s.start_seq..=s.end_seq,
                reason: format!(
                    "the partition head lists segment {stem} (seqs {}..={}) as finished, but \
                     {what}",
                    s.start_seq, s.end_seq
                ),
                key: stem,
            }
        })
        .collect()
}

/// `causes` (later ones replacing earlier ones about the same key) that overlap a hole, by
/// first seq.
pub(super) fn of_holes(causes: Vec<HoleCause>, holes: &[RangeInclusive<u64>]) -> Vec<HoleCause> {
    let mut by_key: BTreeMap<String, HoleCause> = BTreeMap::new();
    for c in causes {
        by_key.insert(c.key.clone(), c);
    }
    let mut kept: Vec<HoleCause> = by_key
        .into_values()
        .filter(|c| {
            holes
                .iter()
                .any(|h| c.seqs.start() <= h.end() && h.start() <= c.seqs.end())
        })
        .collect();
    kept.sort_by(|a, b| (a.seqs.start(), &a.key).cmp(&(b.seqs.start(), &b.key)));
    kept
}
