//! Steps 2 and 3 of the [module docs](super): which whole segments form the log (one lineage
//! by writer epoch and copy order, then the run ending at the highest seq in which leader
//! epochs never go back, with the holes between its segments reported). Pure: no I/O.

use std::collections::BTreeMap;

use super::{IgnoreReason, RemoteScan};
use crate::model::RemoteLogSegmentMetadata;
use crate::ownership::{self, EpochRecord};

/// Segments by start seq.
type ByStart = BTreeMap<u64, RemoteLogSegmentMetadata>;
/// Superseded segments, with why.
type Superseded = Vec<(RemoteLogSegmentMetadata, IgnoreReason)>;
/// Whole segments stranded before a hole, with why.
type Stranded = Vec<(RemoteLogSegmentMetadata, String)>;
/// What [`choose`] returns: the log's segments, the superseded ones and the stranded ones
/// ([`holes_of`] gives the holes).
type Chosen = (Vec<RemoteLogSegmentMetadata>, Superseded, Stranded);

/// Steps 2 and 3 of the [module docs](super): the recovered segments in seq order, the
/// superseded ones and the whole ones stranded before a leader epoch that goes back.
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
            // A hole (a segment damaged, lost, never finished, or superseded without a
            // successor): it costs its own seqs only; the run goes on below it. The whole
            // segments on both sides are the only surviving copies of their records.
            Some(_) if m.end_offset().saturating_add(1) < cur.start_offset() => chain.push(m),
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

impl RemoteScan {
    /// The seq a log recovered from this scan continues at: one past
    /// [`claimed_end`](Self::claimed_end), or 1.
    pub fn next_seq(&self) -> u64 {
        self.claimed_end.map_or(1, |e| e.saturating_add(1))
    }
}

/// The holes of a recovered range: the gaps between `chosen` (in seq order) and the seqs after
/// the last one up to `claimed_end`.
pub(super) fn holes_of(
    chosen: &[RemoteLogSegmentMetadata],
    claimed_end: Option<u64>,
) -> Vec<std::ops::RangeInclusive<u64>> {
    let mut holes: Vec<std::ops::RangeInclusive<u64>> = chosen
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let from = a.end_offset().saturating_add(1);
            (from < b.start_offset()).then(|| from..=b.start_offset() - 1)
        })
        .collect();
    let from = chosen
        .last()
        .map_or(1, |m| m.end_offset().saturating_add(1));
    if let Some(end) = claimed_end.filter(|end| *end >= from) {
        holes.push(from..=end);
    }
    holes
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RemoteLogSegmentId, TopicIdPartition};
    use uuid::Uuid;

    fn seg(start: u64, end: u64, at: i64) -> RemoteLogSegmentMetadata {
        let tp = TopicIdPartition::new(Uuid::from_u128(1), "t", 0);
        RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), start, end)
            .event_timestamp_ms(at)
            .build()
            .unwrap()
    }

    fn starts(v: &[RemoteLogSegmentMetadata]) -> Vec<u64> {
        v.iter()
            .map(RemoteLogSegmentMetadata::start_offset)
            .collect()
    }

    #[test]
    fn a_hole_costs_only_its_own_seqs_whatever_left_it() {
        // A writer killed with two copies in flight (21..=30 never finished, 31..=40
        // complete), or a damaged segment: both sides are recovered, the hole reported.
        let whole = vec![seg(1, 10, 1), seg(11, 20, 2), seg(31, 40, 4)];
        let (chain, _, stranded) = choose(whole, &[]);
        assert_eq!(starts(&chain), [1, 11, 31]);
        assert!(stranded.is_empty());
        assert_eq!(holes_of(&chain, Some(40)), [21..=30]);
        // Seqs used past the last whole segment (a damaged newest one) are a hole at the end.
        assert_eq!(holes_of(&chain, Some(45)), [21..=30, 41..=45]);
        assert_eq!(holes_of(&[], Some(3)), [1..=3]);
        assert!(holes_of(&[], None).is_empty());
    }

    #[test]
    fn a_leader_epoch_going_back_still_strands_what_lies_before_it() {
        let tp = TopicIdPartition::new(Uuid::from_u128(1), "t", 0);
        let with_epoch = |start: u64, end: u64, epoch: i32| {
            RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), start, end)
                .segment_leader_epochs(std::collections::BTreeMap::from([(epoch, start)]))
                .build()
                .unwrap()
        };
        let (chain, _, stranded) = choose(vec![with_epoch(1, 10, 5), with_epoch(11, 20, 3)], &[]);
        assert_eq!(starts(&chain), [11]);
        assert_eq!(stranded.len(), 1);
        assert!(holes_of(&chain, Some(20)).is_empty());
    }

    #[test]
    fn a_later_epoch_fences_out_copies_past_its_start() {
        let mut late = seg(11, 20, 9);
        late = RemoteLogSegmentMetadata::builder(late.remote_log_segment_id().clone(), 11, 20)
            .writer_epoch(1)
            .build()
            .unwrap();
        let epochs = [EpochRecord::new(2, 11, Uuid::nil(), 0, "b")];
        let (chain, superseded, _) = choose(vec![seg(1, 10, 1), late], &epochs);
        assert_eq!(starts(&chain), [1]);
        assert!(matches!(
            superseded[0].1,
            IgnoreReason::FencedOut {
                writer_epoch: 1,
                by_epoch: 2,
                at_seq: 11
            }
        ));
    }
}
