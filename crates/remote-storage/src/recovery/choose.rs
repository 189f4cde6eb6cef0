//! Steps 2 and 3 of the [module docs](super): which whole segments form the log (one lineage
//! in copy order, then the contiguous run ending at the highest seq). Pure: no I/O.

use std::collections::BTreeMap;

use super::IgnoreReason;
use crate::model::RemoteLogSegmentMetadata;
use crate::ownership::{self, EpochRecord};

/// Segments by start seq.
type ByStart = BTreeMap<u64, RemoteLogSegmentMetadata>;
/// Superseded segments, with why.
type Superseded = Vec<(RemoteLogSegmentMetadata, IgnoreReason)>;
/// Whole segments stranded before a hole, with why.
type Stranded = Vec<(RemoteLogSegmentMetadata, String)>;
/// What [`choose`] returns: the log's segments, the superseded ones, the stranded ones.
type Chosen = (Vec<RemoteLogSegmentMetadata>, Superseded, Stranded);

/// Steps 2 and 3 of the [module docs](super): the recovered segments in seq order, the
/// superseded ones, and the whole ones stranded before a hole.
pub(super) fn choose(whole: Vec<RemoteLogSegmentMetadata>, epochs: &[EpochRecord]) -> Chosen {
    let (whole, fenced) = fenced_out(whole, epochs);
    let (accepted, mut superseded) = one_lineage(whole);
    superseded.extend(fenced);
    let (chain, stranded) = contiguous(accepted);
    (chain, superseded, stranded)
}

/// Step 2, first part: drops every copy a later writer epoch superseded (it holds seqs at or
/// above that epoch's start: a fenced writer's copy; [`ownership::superseded_by`]).
fn fenced_out(
    whole: Vec<RemoteLogSegmentMetadata>,
    epochs: &[EpochRecord],
) -> (Vec<RemoteLogSegmentMetadata>, Superseded) {
    let mut kept = Vec::with_capacity(whole.len());
    let mut fenced = Vec::new();
    for m in whole {
        match ownership::superseded_by(&m, epochs) {
            Some(by) => {
                let reason = IgnoreReason::FencedOut {
                    writer_epoch: m.writer_epoch(),
                    by_epoch: by.epoch,
                    at_seq: by.start_seq,
                };
                fenced.push((m, reason));
            }
            None => kept.push(m),
        }
    }
    (kept, fenced)
}

/// Step 2: replays `whole` in copy order (writer epoch first); a copy overlapping earlier ones supersedes every
/// earlier copy holding seqs at or after its start. Returns the survivors by start seq.
fn one_lineage(mut whole: Vec<RemoteLogSegmentMetadata>) -> (ByStart, Superseded) {
    whole.sort_by_key(|m| {
        (
            m.writer_epoch(),
            m.event_timestamp_ms(),
            m.start_offset(),
            m.remote_log_segment_id().id(),
        )
    });
    let mut accepted = ByStart::new();
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
    (accepted, superseded)
}

/// Step 3: the run of `accepted` ending at the highest seq without a hole or a leader epoch
/// going back, in seq order; the segments before the break, with why.
fn contiguous(accepted: ByStart) -> (Vec<RemoteLogSegmentMetadata>, Stranded) {
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
        match break_between(&m, cur) {
            Some(why) => {
                stranded.push((m, why.clone()));
                broken = Some(why);
            }
            None => chain.push(m),
        }
    }
    chain.reverse();
    (chain, stranded)
}

/// Why `prev` does not join `cur` (the next segment): a hole or a leader epoch going back.
fn break_between(
    prev: &RemoteLogSegmentMetadata,
    cur: &RemoteLogSegmentMetadata,
) -> Option<String> {
    let prev_epoch = prev.segment_leader_epochs().keys().next_back().copied();
    let cur_epoch = cur.segment_leader_epochs().keys().next().copied();
    if prev.end_offset().checked_add(1) != Some(cur.start_offset()) {
        Some(format!(
            "seqs {}..={} are missing before seq {}",
            prev.end_offset().saturating_add(1),
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
    }
}
