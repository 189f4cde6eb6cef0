//! Retention: which local segments may go (local retention) and which remote segments
//! whole-log retention deletes.

use super::{LocalSegment, RemoteSegment, is_safely_remote};

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
/// when it lies wholly below `retention_point` (past whole-log retention), or when it has a finished
/// remote copy *and* local size ([`LocalSegment::disk_bytes`], every file of the segment) or
/// age exceeds `limits`. A segment without a finished copy ends the walk, so only a contiguous
/// oldest prefix of safely remote segments is ever removed. A hole left by a repair is passed
/// in as a closed segment of 0 bytes: unless a finished copy covers it, it ends the walk too.
pub fn local_keep_from<Id>(
    local: &[LocalSegment],
    remote: &[RemoteSegment<Id>],
    retention_point: u64,
    limits: LocalLimits,
    now_ms: i64,
) -> Option<u64> {
    let mut ordered: Vec<&LocalSegment> = local.iter().collect();
    ordered.sort_by_key(|s| s.base_seq);
    let mut total: u64 = ordered.iter().map(|s| s.disk_bytes).sum();
    let mut keep_from = None;
    for seg in ordered {
        if seg.active {
            break;
        }
        let past_retention = seg.last_seq < retention_point;
        let over_size = limits.bytes.is_some_and(|b| total > b);
        let too_old = limits
            .ms
            .is_some_and(|ms| age_exceeds(seg.max_timestamp, ms, now_ms));
        let go = past_retention || (is_safely_remote(seg, remote) && (over_size || too_old));
        if !go {
            break;
        }
        total = total.saturating_sub(seg.disk_bytes);
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
/// segments wholly below `retention_point` are past retention already (an earlier deletion that did
/// not complete) and are always deleted.
pub fn remote_to_delete<Id>(
    remote: &[RemoteSegment<Id>],
    local_only_bytes: u64,
    limits: RetentionLimits,
    now_ms: i64,
    retention_point: u64,
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
        if !(over_size || too_old || r.end < retention_point) {
            break;
        }
        total = total.saturating_sub(r.size);
        out.push(i);
    }
    out
}

fn age_exceeds(max_timestamp: i64, limit_ms: u64, now_ms: i64) -> bool {
    let age = i128::from(now_ms) - i128::from(max_timestamp);
    age > i128::from(limit_ms)
}
#[cfg(test)]
mod tests {
    use super::super::testutil::{build, local, remote, scenario};
    use super::*;
    use krabka_remote_storage::RemoteLogSegmentState::*;
    use proptest::prelude::*;

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
