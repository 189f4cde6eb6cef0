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
//!     LocalSegment { base_seq: 0, last_seq: 9, size: 100, disk_bytes: 140, max_timestamp: 0, active: false },
//!     LocalSegment { base_seq: 10, last_seq: 19, size: 100, disk_bytes: 140, max_timestamp: 0, active: false },
//!     LocalSegment { base_seq: 20, last_seq: 25, size: 60, disk_bytes: 60, max_timestamp: 0, active: true },
//! ];
//! // Nothing is remote yet and everything is committed: both closed segments, oldest first.
//! let remote: [krabka_tiering::policy::RemoteSegment<u32>; 0] = [];
//! assert_eq!(segments_to_copy(&local, &remote, 0, Some(25)), vec![0, 1]);
//! ```
//!
//! One module per decision: [`segments_to_copy`], [`stale_attempts`], [`blocking_holes`] and
//! [`hole_barrier`] plan copies; [`FinishOrder`] records a round's copies finished in seq order,
//! never above a failed one; [`local_keep_from`] and [`remote_to_delete`] apply retention; [`continuity`]
//! checks that a local log continues the remote tier; [`push_leader_epoch`] and
//! [`segment_leader_epochs`] keep the leader epoch history.

use krabka_remote_storage::RemoteLogSegmentState;

mod continuity;
mod copy;
mod epochs;
mod finish;
mod retention;
#[cfg(test)]
mod testutil;

pub use continuity::{Continuity, Mismatch, continuity};
pub use copy::{blocking_holes, hole_barrier, segments_to_copy, stale_attempts};
pub use epochs::{push_leader_epoch, segment_leader_epochs};
pub use finish::{FinishOrder, Settle, WAITING_PER_SLOT};
pub use retention::{LocalLimits, RetentionLimits, local_keep_from, remote_to_delete};

/// A local segment as the policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalSegment {
    /// First seq of the segment.
    pub base_seq: u64,
    /// Last seq of the segment, inclusive.
    pub last_seq: u64,
    /// Size of the `.log` file in bytes (what a remote copy holds, and what whole-log retention
    /// counts).
    pub size: u64,
    /// Bytes of all its local files (`.log`, `.index`, `.timeindex`): what local retention
    /// counts.
    pub disk_bytes: u64,
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

/// The earliest readable seq of a log: the smaller of the first finished remote start and the
/// local first seq, never below `retention_point`. `None` when neither tier holds a record.
pub fn first_readable_seq<Id>(
    remote: &[RemoteSegment<Id>],
    local_first: Option<u64>,
    retention_point: u64,
) -> Option<u64> {
    let remote_first = remote
        .iter()
        .filter(|r| r.is_finished() && r.end >= retention_point)
        .map(|r| r.start)
        .min();
    let first = match (remote_first, local_first) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }?;
    Some(first.max(retention_point))
}

/// Whether the union of the inclusive `ranges` covers every seq of `start..=end`.
fn covers(ranges: impl Iterator<Item = (u64, u64)>, start: u64, end: u64) -> bool {
    let mut sorted: Vec<(u64, u64)> = ranges.filter(|(a, b)| a <= b).collect();
    sorted.sort_unstable();
    let mut next = start;
    for (a, b) in sorted {
        if a > next {
            break;
        }
        if b >= next {
            if b >= end {
                return true;
            }
            next = b + 1;
        }
    }
    next > end
}

#[cfg(test)]
mod tests {
    use super::testutil::remote;
    use super::*;
    use RemoteLogSegmentState::*;

    #[test]
    fn first_readable_seq_spans_tiers_and_respects_the_retention_point() {
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
}
