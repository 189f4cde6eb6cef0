//! Copy planning: which local segments to copy, which stale attempts to clean, and the first
//! hole copying must not pass.

use std::ops::RangeInclusive;

use krabka_remote_storage::RemoteLogSegmentState;

use super::{LocalSegment, RemoteSegment, covers, is_safely_remote};

/// Indexes into `local` of the segments to copy, oldest first.
///
/// A segment is copied when it is closed, lies wholly at or below `commit_seq` (`None`: nothing
/// is committed), starts at or after `retention_point` (older data is past retention), and has no
/// finished remote copy. Normally that is exactly "after the highest finished offset"; a segment
/// whose copy failed while a newer one succeeded (concurrent copies) is still picked up, so no
/// gap is ever left behind.
pub fn segments_to_copy<Id>(
    local: &[LocalSegment],
    remote: &[RemoteSegment<Id>],
    retention_point: u64,
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
                && s.base_seq >= retention_point
                && !is_safely_remote(s, remote)
        })
        .map(|(i, _)| i)
        .collect();
    picked.sort_by_key(|&i| local.get(i).map_or(0, |s| s.base_seq));
    picked
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

/// The holes of `holes` (seqs a repair moved aside) that no acceptance of `accepted` covers:
/// those that may still block copying ([`hole_barrier`]) and local retention. An accepted hole
/// (`krabka repair DIR --accept-hole`) is one the user declared lost: nothing waits for it.
pub fn blocking_holes(
    holes: &[RangeInclusive<u64>],
    accepted: &[RangeInclusive<u64>],
) -> Vec<RangeInclusive<u64>> {
    holes
        .iter()
        .filter(|h| {
            !accepted
                .iter()
                .any(|a| a.start() <= h.start() && h.end() <= a.end())
        })
        .cloned()
        .collect()
}

/// The first seq copying must not pass: the start of the first hole (seqs a repair moved
/// aside) that no finished remote segment covers. Segments at or after it are not copied, and
/// local retention never deletes past it. `None` when no hole blocks. Pass the holes
/// [`blocking_holes`] leaves: an accepted hole blocks nothing.
pub fn hole_barrier<Id>(
    holes: &[RangeInclusive<u64>],
    remote: &[RemoteSegment<Id>],
) -> Option<u64> {
    let finished = || {
        remote
            .iter()
            .filter(|r| r.is_finished())
            .map(|r| (r.start, r.end))
    };
    holes
        .iter()
        .filter(|h| !covers(finished(), *h.start(), *h.end()))
        .map(|h| *h.start())
        .min()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::testutil::{build, local, remote, scenario};
    use super::*;
    use RemoteLogSegmentState::*;
    use proptest::prelude::*;

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
    fn copy_ignores_segments_below_the_retention_point() {
        let l = local(&[(0, 9), (10, 19), (20, 21)], true);
        let r: [RemoteSegment<u32>; 0] = [];
        assert_eq!(segments_to_copy(&l, &r, 10, Some(21)), vec![1]);
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
    fn hole_barrier_is_the_first_hole_no_finished_copy_covers() {
        let r = [
            remote(1, 1, 10, CopySegmentFinished),
            remote(2, 11, 20, CopySegmentFinished),
            remote(3, 21, 30, CopySegmentStarted),
        ];
        assert_eq!(hole_barrier(&[5..=15], &r), None, "covered by two segments");
        assert_eq!(hole_barrier(&[5..=15, 25..=26], &r), Some(25));
        assert_eq!(hole_barrier(&[40..=41, 18..=22], &r), Some(18));
        assert_eq!(hole_barrier::<u32>(&[], &r), None);
    }

    #[test]
    fn an_accepted_hole_blocks_nothing_and_a_partly_accepted_one_still_blocks() {
        let holes = [5..=5, 9..=12, 20..=20];
        assert_eq!(blocking_holes(&holes, &[]), holes.to_vec());
        assert_eq!(
            blocking_holes(&holes, &[5..=5, 9..=10]),
            vec![9..=12, 20..=20]
        );
        assert_eq!(
            blocking_holes(&holes, &[1..=30]),
            Vec::<RangeInclusive<u64>>::new()
        );
        let r = [remote(1, 1, 4, CopySegmentFinished)];
        let blocking = blocking_holes(&holes, &[5..=5, 9..=12]);
        assert_eq!(hole_barrier(&blocking, &r), Some(20));
        assert_eq!(hole_barrier(&holes, &r), Some(5));
    }

    proptest! {
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
    }
}
