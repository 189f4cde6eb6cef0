//! The tiering policy as pure functions over plain data: which local segments to copy, which
//! local segments may go, which remote segments retention removes, which stale attempts to clean.
//!
//! Nothing here touches a disk or a network; [`TieredLog`](crate::TieredLog) gathers the inputs
//! from the local log and the metadata manager, asks these functions, and performs the I/O.
//!
//! ```
//! use krabka_tiering::policy::{LocalSegment, segments_to_copy};
//!
//! let local = [
//!     LocalSegment { base_seq: 0, last_seq: 9, size: 100, max_timestamp: 0, active: false },
//!     LocalSegment { base_seq: 10, last_seq: 19, size: 100, max_timestamp: 0, active: false },
//!     LocalSegment { base_seq: 20, last_seq: 25, size: 60, max_timestamp: 0, active: true },
//! ];
//! // Nothing is remote yet and everything is committed: both closed segments, oldest first.
//! let remote: [krabka_tiering::policy::RemoteSegment<u32>; 0] = [];
//! assert_eq!(segments_to_copy(&local, &remote, 0, Some(25)), vec![0, 1]);
//! ```

use krabka_remote_storage::RemoteLogSegmentState;

/// A local segment as the policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalSegment {
    /// First seq of the segment.
    pub base_seq: u64,
    /// Last seq of the segment, inclusive.
    pub last_seq: u64,
    /// Size of the `.log` file in bytes.
    pub size: u64,
    /// Largest record timestamp (ms since the epoch).
    pub max_timestamp: i64,
    /// Whether this is the active (still written) segment; it is never copied or deleted.
    pub active: bool,
}

/// A remote segment (one copy attempt) as the policy sees it. `Id` is whatever identifies the
/// attempt to the caller (a `RemoteLogSegmentId` in the crate, a number in tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSegment<Id> {
    /// The attempt's id.
    pub id: Id,
    /// First seq covered.
    pub start: u64,
    /// Last seq covered, inclusive.
    pub end: u64,
    /// Size of its `.log` data in bytes.
    pub size: u64,
    /// Largest record timestamp (ms since the epoch).
    pub max_timestamp: i64,
    /// Lifecycle state.
    pub state: RemoteLogSegmentState,
}

impl<Id> RemoteSegment<Id> {
    fn is_finished(&self) -> bool {
        self.state == RemoteLogSegmentState::CopySegmentFinished
    }

    fn covers(&self, seg: &LocalSegment) -> bool {
        self.start <= seg.base_seq && self.end >= seg.last_seq
    }
}

/// Whether a finished remote copy covers the whole of `seg`.
pub fn is_safely_remote<Id>(seg: &LocalSegment, remote: &[RemoteSegment<Id>]) -> bool {
    remote.iter().any(|r| r.is_finished() && r.covers(seg))
}

/// The highest seq covered by a finished remote copy, if any.
pub fn highest_finished_seq<Id>(remote: &[RemoteSegment<Id>]) -> Option<u64> {
    remote
        .iter()
        .filter(|r| r.is_finished())
        .map(|r| r.end)
        .max()
}

/// Indexes into `local` of the segments to copy, oldest first.
///
/// A segment is copied when it is closed, lies wholly at or below `commit_seq` (`None`: nothing
/// is committed), starts at or after `log_start` (older data is past retention), and has no
/// finished remote copy. Normally that is exactly "after the highest finished offset"; a segment
/// whose copy failed while a newer one succeeded (concurrent copies) is still picked up, so no
/// gap is ever left behind.
pub fn segments_to_copy<Id>(
    local: &[LocalSegment],
    remote: &[RemoteSegment<Id>],
    log_start: u64,
    commit_seq: Option<u64>,
) -> Vec<usize> {
    let Some(commit) = commit_seq else {
        return Vec::new();
    };
    let mut picked: Vec<usize> = local
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            !s.active
                && s.last_seq >= s.base_seq
                && s.last_seq <= commit
                && s.base_seq >= log_start
                && !is_safely_remote(s, remote)
        })
        .map(|(i, _)| i)
        .collect();
    picked.sort_by_key(|&i| local.get(i).map_or(0, |s| s.base_seq));
    picked
}

/// Local retention limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LocalLimits {
    /// Keep at most this many bytes locally (`None`: no size limit).
    pub bytes: Option<u64>,
    /// Keep segments whose newest record is at most this old (`None`: no age limit).
    pub ms: Option<u64>,
}

/// The seq from which local segments are kept: every closed segment below it may be deleted.
/// `None` when nothing is to be deleted.
///
/// Walks closed segments oldest first and stops at the first one that must stay: a segment goes
/// when it lies wholly below `log_start` (past whole-log retention), or when it has a finished
/// remote copy *and* local size or age exceeds `limits`. A segment without a finished copy ends
/// the walk, so only a contiguous oldest prefix of safely remote segments is ever removed.
pub fn local_keep_from<Id>(
    local: &[LocalSegment],
    remote: &[RemoteSegment<Id>],
    log_start: u64,
    limits: LocalLimits,
    now_ms: i64,
) -> Option<u64> {
    let mut ordered: Vec<&LocalSegment> = local.iter().collect();
    ordered.sort_by_key(|s| s.base_seq);
    let mut total: u64 = ordered.iter().map(|s| s.size).sum();
    let mut keep_from = None;
    for seg in ordered {
        if seg.active {
            break;
        }
        let past_retention = seg.last_seq < log_start;
        let over_size = limits.bytes.is_some_and(|b| total > b);
        let too_old = limits
            .ms
            .is_some_and(|ms| age_exceeds(seg.max_timestamp, ms, now_ms));
        let go = past_retention || (is_safely_remote(seg, remote) && (over_size || too_old));
        if !go {
            break;
        }
        total = total.saturating_sub(seg.size);
        keep_from = Some(seg.last_seq.saturating_add(1));
    }
    keep_from
}

/// Whole-log retention limits (both tiers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RetentionLimits {
    /// Keep at most this many bytes across both tiers (`None`: no size limit).
    pub bytes: Option<u64>,
    /// Keep segments whose newest record is at most this old (`None`: no age limit).
    pub ms: Option<u64>,
}

/// Indexes into `remote` of the finished segments whole-log retention deletes, oldest first.
///
/// The log's size is the finished remote segments plus the local segments that have no
/// finished copy (`local_only_bytes`); copies in flight never count. The walk goes over
/// finished segments by start offset and stops at the first one within both limits. Finished
/// segments wholly below `log_start` are past retention already (an earlier deletion that did
/// not complete) and are always deleted.
pub fn remote_to_delete<Id>(
    remote: &[RemoteSegment<Id>],
    local_only_bytes: u64,
    limits: RetentionLimits,
    now_ms: i64,
    log_start: u64,
) -> Vec<usize> {
    let mut finished: Vec<usize> = remote
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_finished())
        .map(|(i, _)| i)
        .collect();
    finished.sort_by_key(|&i| remote.get(i).map_or(0, |r| r.start));
    let mut total = finished
        .iter()
        .filter_map(|&i| remote.get(i))
        .map(|r| r.size)
        .sum::<u64>()
        .saturating_add(local_only_bytes);
    let mut out = Vec::new();
    for i in finished {
        let Some(r) = remote.get(i) else { break };
        let over_size = limits.bytes.is_some_and(|b| total > b);
        let too_old = limits
            .ms
            .is_some_and(|ms| age_exceeds(r.max_timestamp, ms, now_ms));
        if !(over_size || too_old || r.end < log_start) {
            break;
        }
        total = total.saturating_sub(r.size);
        out.push(i);
    }
    out
}

/// Indexes into `remote` of attempts left behind by a crashed or failed process: copies still
/// in `CopySegmentStarted` and deletes still in `DeleteSegmentStarted`, except those `in_flight`
/// says are still running in this process.
pub fn stale_attempts<Id>(
    remote: &[RemoteSegment<Id>],
    in_flight: impl Fn(&Id) -> bool,
) -> Vec<usize> {
    remote
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            matches!(
                r.state,
                RemoteLogSegmentState::CopySegmentStarted
                    | RemoteLogSegmentState::DeleteSegmentStarted
            ) && !in_flight(&r.id)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The earliest readable seq of a log: the smaller of the first finished remote start and the
/// local first seq, never below `log_start`. `None` when neither tier holds a record.
pub fn first_readable_seq<Id>(
    remote: &[RemoteSegment<Id>],
    local_first: Option<u64>,
    log_start: u64,
) -> Option<u64> {
    let remote_first = remote
        .iter()
        .filter(|r| r.is_finished() && r.end >= log_start)
        .map(|r| r.start)
        .min();
    let first = match (remote_first, local_first) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }?;
    Some(first.max(log_start))
}

/// Adds `(epoch, start_seq)` to a leader epoch history (pairs oldest first).
///
/// Setting the latest epoch again is a no-op; a higher epoch starting where the latest one
/// starts replaces it (it covered no records).
///
/// # Errors
/// A message when the epoch is negative or lower than the latest one, or `start_seq` is
/// before the latest epoch's start.
pub fn push_leader_epoch(
    history: &mut Vec<(i32, u64)>,
    epoch: i32,
    start_seq: u64,
) -> Result<(), String> {
    if epoch < 0 {
        return Err(format!("leader epoch {epoch} is negative"));
    }
    let Some(&(latest, latest_start)) = history.last() else {
        history.push((epoch, start_seq));
        return Ok(());
    };
    if epoch == latest {
        return Ok(());
    }
    if epoch < latest {
        return Err(format!(
            "leader epoch {epoch} is lower than the current epoch {latest}"
        ));
    }
    if start_seq < latest_start {
        return Err(format!(
            "leader epoch {epoch} would start at seq {start_seq}, before epoch {latest} \
             (which starts at {latest_start})"
        ));
    }
    if start_seq == latest_start {
        history.pop();
    }
    history.push((epoch, start_seq));
    Ok(())
}

/// The leader epochs of a segment holding seqs `base..=last`, from a history of
/// `(epoch, start seq)` pairs (oldest first): the epoch in force at `base` (mapped to `base`)
/// and every later epoch starting within the segment (mapped to its start). A history with no
/// entry at or below `base` maps its first epoch to `base`; an empty history gives epoch 0.
pub fn segment_leader_epochs(
    history: &[(i32, u64)],
    base: u64,
    last: u64,
) -> std::collections::BTreeMap<i32, u64> {
    let at_base = history
        .iter()
        .rev()
        .find(|(_, start)| *start <= base)
        .or(history.first())
        .map_or(0, |&(epoch, _)| epoch);
    let mut out = std::collections::BTreeMap::from([(at_base, base)]);
    for &(epoch, start) in history {
        if start > base && start <= last {
            out.insert(epoch, start);
        }
    }
    out
}

fn age_exceeds(max_timestamp: i64, limit_ms: u64, now_ms: i64) -> bool {
    let age = i128::from(now_ms) - i128::from(max_timestamp);
    age > i128::from(limit_ms)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use RemoteLogSegmentState::*;
    use proptest::prelude::*;

    fn local(ranges: &[(u64, u64)], active_last: bool) -> Vec<LocalSegment> {
        let n = ranges.len();
        ranges
            .iter()
            .enumerate()
            .map(|(i, &(b, l))| LocalSegment {
                base_seq: b,
                last_seq: l,
                size: 100,
                max_timestamp: i64::try_from(b).unwrap(),
                active: active_last && i + 1 == n,
            })
            .collect()
    }

    fn remote(id: u32, start: u64, end: u64, state: RemoteLogSegmentState) -> RemoteSegment<u32> {
        RemoteSegment {
            id,
            start,
            end,
            size: 100,
            max_timestamp: i64::try_from(start).unwrap(),
            state,
        }
    }

    #[test]
    fn copy_skips_active_uncommitted_and_finished_segments() {
        let l = local(&[(0, 9), (10, 19), (20, 29), (30, 35)], true);
        let r = [remote(1, 0, 9, CopySegmentFinished)];
        assert_eq!(segments_to_copy(&l, &r, 0, Some(35)), vec![1, 2]);
        assert_eq!(segments_to_copy(&l, &r, 0, Some(25)), vec![1]);
        assert_eq!(segments_to_copy(&l, &r, 0, None), Vec::<usize>::new());
    }

    #[test]
    fn copy_retries_a_started_or_deleted_attempt() {
        let l = local(&[(0, 9), (10, 19), (20, 25)], true);
        let r = [
            remote(1, 0, 9, CopySegmentStarted),
            remote(2, 10, 19, DeleteSegmentFinished),
        ];
        assert_eq!(segments_to_copy(&l, &r, 0, Some(25)), vec![0, 1]);
    }

    #[test]
    fn copy_fills_a_gap_left_by_a_failed_older_copy() {
        let l = local(&[(0, 9), (10, 19), (20, 29), (30, 31)], true);
        let r = [
            remote(1, 0, 9, CopySegmentFinished),
            remote(3, 20, 29, CopySegmentFinished),
        ];
        assert_eq!(segments_to_copy(&l, &r, 0, Some(31)), vec![1]);
    }

    #[test]
    fn copy_ignores_segments_below_log_start() {
        let l = local(&[(0, 9), (10, 19), (20, 21)], true);
        let r: [RemoteSegment<u32>; 0] = [];
        assert_eq!(segments_to_copy(&l, &r, 10, Some(21)), vec![1]);
    }

    #[test]
    fn local_retention_stops_at_first_segment_without_finished_copy() {
        let l = local(&[(0, 9), (10, 19), (20, 29), (30, 39)], true);
        let r = [
            remote(1, 0, 9, CopySegmentFinished),
            remote(2, 10, 19, CopySegmentStarted),
            remote(3, 20, 29, CopySegmentFinished),
        ];
        let limits = LocalLimits {
            bytes: Some(0),
            ms: None,
        };
        assert_eq!(local_keep_from(&l, &r, 0, limits, 0), Some(10));
    }

    #[test]
    fn local_retention_keeps_segments_within_limits() {
        let l = local(&[(0, 9), (10, 19), (20, 29), (30, 39)], true);
        let r = [
            remote(1, 0, 9, CopySegmentFinished),
            remote(2, 10, 19, CopySegmentFinished),
            remote(3, 20, 29, CopySegmentFinished),
        ];
        let by_size = LocalLimits {
            bytes: Some(200),
            ms: None,
        };
        assert_eq!(local_keep_from(&l, &r, 0, by_size, 0), Some(20));
        let none = LocalLimits::default();
        assert_eq!(local_keep_from(&l, &r, 0, none, 0), None);
        let by_age = LocalLimits {
            bytes: None,
            ms: Some(5),
        };
        // Timestamps equal base seqs: at now = 16 only segment 0 (ts 0) and 10 (ts 10) are > 5 old.
        assert_eq!(local_keep_from(&l, &r, 0, by_age, 16), Some(20));
    }

    #[test]
    fn local_retention_drops_segments_past_whole_log_retention() {
        let l = local(&[(0, 9), (10, 19), (20, 21)], true);
        let r: [RemoteSegment<u32>; 0] = [];
        assert_eq!(
            local_keep_from(&l, &r, 10, LocalLimits::default(), 0),
            Some(10)
        );
    }

    #[test]
    fn remote_retention_counts_only_finished_and_stops_within_limits() {
        let r = [
            remote(1, 0, 9, CopySegmentFinished),
            remote(2, 10, 19, CopySegmentFinished),
            remote(9, 20, 29, CopySegmentStarted),
            remote(3, 30, 39, CopySegmentFinished),
        ];
        let limits = RetentionLimits {
            bytes: Some(200),
            ms: None,
        };
        // Finished: 300 bytes (the started copy does not count), plus 50 local-only = 350 > 200:
        // drop 0 (250 left), drop 10 (150 left), stop.
        assert_eq!(remote_to_delete(&r, 50, limits, 0, 0), vec![0, 1]);
        let by_age = RetentionLimits {
            bytes: None,
            ms: Some(15),
        };
        assert_eq!(remote_to_delete(&r, 0, by_age, 20, 0), vec![0]);
        // Below the retention point: deleted whatever the limits say.
        let none = RetentionLimits::default();
        assert_eq!(remote_to_delete(&r, 0, none, 0, 20), vec![0, 1]);
        assert_eq!(remote_to_delete(&r, 0, none, 0, 0), Vec::<usize>::new());
    }

    #[test]
    fn leader_epoch_history_only_moves_forward() {
        let mut h = vec![(0, 0)];
        push_leader_epoch(&mut h, 0, 50).unwrap();
        assert_eq!(h, [(0, 0)], "the current epoch again is a no-op");
        push_leader_epoch(&mut h, 3, 30).unwrap();
        push_leader_epoch(&mut h, 5, 80).unwrap();
        assert!(push_leader_epoch(&mut h, 4, 90).is_err());
        assert!(push_leader_epoch(&mut h, 6, 79).is_err());
        assert!(push_leader_epoch(&mut h, -1, 100).is_err());
        push_leader_epoch(&mut h, 6, 80).unwrap();
        assert_eq!(h, [(0, 0), (3, 30), (6, 80)]);
    }

    #[test]
    fn a_segment_gets_every_epoch_overlapping_it() {
        let h = [(0, 0), (3, 30), (6, 80)];
        let e = |b, l| {
            segment_leader_epochs(&h, b, l)
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(e(1, 20), [(0, 1)]);
        assert_eq!(e(21, 40), [(0, 21), (3, 30)]);
        assert_eq!(e(30, 40), [(3, 30)]);
        assert_eq!(e(25, 100), [(0, 25), (3, 30), (6, 80)]);
        assert_eq!(e(81, 90), [(6, 81)]);
        assert_eq!(
            segment_leader_epochs(&[(2, 50)], 1, 10)
                .into_iter()
                .collect::<Vec<_>>(),
            [(2, 1)]
        );
        assert_eq!(
            segment_leader_epochs(&[], 5, 9)
                .into_iter()
                .collect::<Vec<_>>(),
            [(0, 5)]
        );
    }

    #[test]
    fn stale_attempts_skip_in_flight_ones() {
        let r = [
            remote(1, 0, 9, CopySegmentStarted),
            remote(2, 0, 9, CopySegmentStarted),
            remote(3, 10, 19, DeleteSegmentStarted),
            remote(4, 20, 29, CopySegmentFinished),
        ];
        assert_eq!(stale_attempts(&r, |id| *id == 2), vec![0, 2]);
    }

    #[test]
    fn first_readable_seq_spans_tiers_and_respects_log_start() {
        let r = [
            remote(1, 0, 9, CopySegmentFinished),
            remote(2, 10, 19, CopySegmentFinished),
        ];
        assert_eq!(first_readable_seq(&r, Some(15), 0), Some(0));
        assert_eq!(first_readable_seq(&r, Some(15), 10), Some(10));
        let none: [RemoteSegment<u32>; 0] = [];
        assert_eq!(first_readable_seq(&none, None, 0), None);
        assert_eq!(first_readable_seq(&none, Some(5), 0), Some(5));
    }

    /// A random history: segment sizes, which have finished copies, limits.
    /// Segments as (records, bytes, copied), a size limit, an age limit, and now.
    type Scenario = (Vec<(u64, u64, bool)>, Option<u64>, Option<u64>, i64);

    fn scenario() -> impl Strategy<Value = Scenario> {
        (
            proptest::collection::vec((1u64..20, 1u64..500, any::<bool>()), 1..20),
            proptest::option::of(0u64..5000),
            proptest::option::of(0u64..100),
            0i64..300,
        )
    }

    fn build(spec: &[(u64, u64, bool)]) -> (Vec<LocalSegment>, Vec<RemoteSegment<u32>>) {
        let mut local = Vec::new();
        let mut remote = Vec::new();
        let mut base = 0u64;
        let n = spec.len();
        for (i, &(len, size, copied)) in spec.iter().enumerate() {
            let seg = LocalSegment {
                base_seq: base,
                last_seq: base + len - 1,
                size,
                max_timestamp: i64::try_from(i * 10).unwrap(),
                active: i + 1 == n,
            };
            if copied && !seg.active {
                remote.push(RemoteSegment {
                    id: u32::try_from(i).unwrap(),
                    start: seg.base_seq,
                    end: seg.last_seq,
                    size,
                    max_timestamp: seg.max_timestamp,
                    state: CopySegmentFinished,
                });
            }
            local.push(seg);
            base += len;
        }
        (local, remote)
    }

    proptest! {
        #[test]
        fn local_retention_never_deletes_a_segment_that_is_not_safely_remote(
            (spec, bytes, ms, now) in scenario()
        ) {
            let (local, remote) = build(&spec);
            let limits = LocalLimits { bytes, ms };
            if let Some(keep) = local_keep_from(&local, &remote, 0, limits, now) {
                for s in local.iter().filter(|s| s.last_seq < keep) {
                    prop_assert!(!s.active);
                    prop_assert!(is_safely_remote(s, &remote));
                }
                // Everything kept still forms a contiguous suffix ending at the active segment.
                prop_assert!(local.iter().any(|s| s.base_seq == keep));
            }
        }

        #[test]
        fn copy_plan_is_oldest_first_and_never_picks_the_active_or_copied(
            (spec, _bytes, _ms, _now) in scenario(), commit in 0u64..400
        ) {
            let (local, remote) = build(&spec);
            let picked = segments_to_copy(&local, &remote, 0, Some(commit));
            let bases: Vec<u64> = picked.iter().map(|&i| local[i].base_seq).collect();
            prop_assert!(bases.windows(2).all(|w| w[0] < w[1]));
            for &i in &picked {
                prop_assert!(!local[i].active);
                prop_assert!(local[i].last_seq <= commit);
                prop_assert!(!is_safely_remote(&local[i], &remote));
            }
            // Every closed, committed, uncopied segment is picked.
            let expected = local.iter().filter(|s| !s.active && s.last_seq <= commit
                && !is_safely_remote(s, &remote)).count();
            prop_assert_eq!(picked.len(), expected);
        }

        #[test]
        fn remote_retention_deletes_an_oldest_prefix_within_limits(
            (spec, bytes, ms, now) in scenario()
        ) {
            let (_, remote) = build(&spec);
            let limits = RetentionLimits { bytes, ms };
            let del = remote_to_delete(&remote, 0, limits, now, 0);
            // A prefix of the finished segments ordered by start.
            prop_assert!(del.iter().enumerate().all(|(k, &i)| i == k));
            let kept: u64 = remote.iter().skip(del.len()).map(|r| r.size).sum();
            if let Some(b) = bytes {
                // After deletion either everything is within the size limit, or the walk stopped
                // because the remaining oldest segment was within both limits.
                if kept > b {
                    prop_assert_eq!(del.len(), remote.len());
                }
            }
        }
    }
}
