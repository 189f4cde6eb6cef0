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

use krabka_remote_storage::RemoteLogSegmentState;

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
/// remote copy *and* local size ([`LocalSegment::disk_bytes`], every file of the segment) or
/// age exceeds `limits`. A segment without a finished copy ends the walk, so only a contiguous
/// oldest prefix of safely remote segments is ever removed. A hole left by a repair is passed
/// in as a closed segment of 0 bytes: unless a finished copy covers it, it ends the walk too.
pub fn local_keep_from<Id>(
    local: &[LocalSegment],
    remote: &[RemoteSegment<Id>],
    log_start: u64,
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
        let past_retention = seg.last_seq < log_start;
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

/// How a local log that does not continue the remote tier differs from it (see [`continuity`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mismatch {
    /// The local log ends before the remote end: it is older than the remote tier (restored
    /// from an old backup, or it lost records the remote tier already holds).
    Behind,
    /// The local log starts after the remote end + 1: the seqs between are in neither tier.
    Gap,
    /// Where both tiers hold the same seqs, their segments disagree (boundaries, size or
    /// newest timestamp): the local log is another log, or another incarnation of this one.
    Diverged,
}

/// What opening a tiered log must do so that the local log continues the remote tier, from
/// [`continuity`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Continuity {
    /// The local log continues or consistently overlaps the remote tier (or nothing is remote).
    Consistent,
    /// The local log holds no record and would reuse seqs the remote tier (or whole-log
    /// retention) has already used: start it at this seq (the remote end + 1, like Kafka's
    /// log start offset).
    StartAt(u64),
    /// The local log cannot be joined with the remote tier.
    Mismatch {
        /// The kind of difference.
        kind: Mismatch,
        /// What was found, in words (names the seqs involved).
        reason: String,
    },
}

/// Checks that a local log continues the remote tier, so that no seq is ever used twice.
///
/// `local` holds the local segments (real ones; [`LocalSegment::active`] marks the newest),
/// `holes` the seq ranges a repair moved aside, `next_seq` the seq of the next append, `remote`
/// the remote segments (only finished ones ending at or after `log_start` count) and
/// `log_start` the whole-log retention point.
///
/// - The local log holds no record (and no hole): [`Continuity::StartAt`] the remote end + 1
///   (or `log_start` when larger) when `next_seq` is below it; a mismatch of kind
///   [`Mismatch::Gap`] when `next_seq` is past the remote end + 1.
/// - Nothing remote: [`Continuity::Consistent`].
/// - Otherwise the local range (first record or hole to `next_seq - 1`) must reach the remote
///   end ([`Mismatch::Behind`]) and start at or before the remote end + 1 ([`Mismatch::Gap`]),
///   and every finished remote segment overlapping it must have a local segment with the same
///   first and last seq, `.log` size and newest timestamp ([`Mismatch::Diverged`]). A remote
///   segment overlapping a hole only needs the local segments within it to lie inside it (a
///   repair may have cut the local one short); one wholly inside holes is not checked.
///
/// ```
/// use krabka_remote_storage::RemoteLogSegmentState::CopySegmentFinished;
/// use krabka_tiering::policy::{Continuity, LocalSegment, RemoteSegment, continuity};
///
/// let remote = [RemoteSegment {
///     id: 1, start: 1, end: 100, size: 4000, max_timestamp: 7, state: CopySegmentFinished,
/// }];
/// // A wiped local directory: an empty log that would start again at 1.
/// let empty = [LocalSegment {
///     base_seq: 1, last_seq: 0, size: 0, disk_bytes: 0, max_timestamp: i64::MIN, active: true,
/// }];
/// assert_eq!(continuity(&empty, &[], 1, &remote, 0), Continuity::StartAt(101));
/// ```
pub fn continuity<Id>(
    local: &[LocalSegment],
    holes: &[std::ops::RangeInclusive<u64>],
    next_seq: u64,
    remote: &[RemoteSegment<Id>],
    log_start: u64,
) -> Continuity {
    let mut finished: Vec<&RemoteSegment<Id>> = remote
        .iter()
        .filter(|r| r.is_finished() && r.end >= log_start)
        .collect();
    finished.sort_by_key(|r| r.start);
    let remote_end = finished.iter().map(|r| r.end).max();
    let local_first = local
        .iter()
        .filter(|s| s.last_seq >= s.base_seq)
        .map(|s| s.base_seq)
        .chain(holes.iter().map(|h| *h.start()))
        .min();
    let mismatch = |kind, reason: String| Continuity::Mismatch { kind, reason };
    let Some(local_first) = local_first else {
        let start = remote_end.map_or(0, |e| e.saturating_add(1)).max(log_start);
        if next_seq < start {
            return Continuity::StartAt(start);
        }
        if let Some(end) = remote_end
            && next_seq > end.saturating_add(1)
        {
            return mismatch(
                Mismatch::Gap,
                format!(
                    "the local log holds no record and its next seq is {next_seq}, but the \
                     remote tier ends at seq {end}: seqs {}..={} are in neither tier",
                    end.saturating_add(1),
                    next_seq - 1
                ),
            );
        }
        return Continuity::Consistent;
    };
    let Some(remote_end) = remote_end else {
        return Continuity::Consistent;
    };
    let after_remote = remote_end.saturating_add(1);
    let local_last = next_seq.saturating_sub(1);
    if local_last < remote_end {
        return mismatch(
            Mismatch::Behind,
            format!(
                "the local log holds seqs {local_first}..={local_last}, but the remote tier \
                 already holds seqs up to {remote_end}: the local log is older than the remote \
                 tier"
            ),
        );
    }
    if local_first > after_remote {
        return mismatch(
            Mismatch::Gap,
            format!(
                "the local log starts at seq {local_first}, but the remote tier ends at seq \
                 {remote_end}: seqs {after_remote}..={} are in neither tier",
                local_first - 1
            ),
        );
    }
    let hole_ranges = || holes.iter().map(|h| (*h.start(), *h.end()));
    for r in finished
        .iter()
        .filter(|r| r.end >= local_first && r.start <= local_last)
    {
        let touches_hole = holes
            .iter()
            .any(|h| *h.start() <= r.end && *h.end() >= r.start);
        if touches_hole {
            if covers(hole_ranges(), r.start, r.end) {
                continue;
            }
            if let Some(s) = local.iter().find(|s| {
                s.last_seq >= s.base_seq
                    && s.base_seq <= r.end
                    && s.last_seq >= r.start
                    && (s.base_seq < r.start || s.last_seq > r.end)
            }) {
                return mismatch(
                    Mismatch::Diverged,
                    format!(
                        "local segment {}..={} straddles remote segment {}..={}",
                        s.base_seq, s.last_seq, r.start, r.end
                    ),
                );
            }
            continue;
        }
        let Some(s) = local.iter().find(|s| s.base_seq == r.start) else {
            return mismatch(
                Mismatch::Diverged,
                format!(
                    "remote segment {}..={} has no local segment starting at seq {}",
                    r.start, r.end, r.start
                ),
            );
        };
        if s.last_seq != r.end || s.size != r.size || s.max_timestamp != r.max_timestamp {
            return mismatch(
                Mismatch::Diverged,
                format!(
                    "remote segment {}..={} ({} bytes, newest timestamp {}) differs from local \
                     segment {}..={} ({} bytes, newest timestamp {})",
                    r.start,
                    r.end,
                    r.size,
                    r.max_timestamp,
                    s.base_seq,
                    s.last_seq,
                    s.size,
                    s.max_timestamp
                ),
            );
        }
    }
    Continuity::Consistent
}

/// The first seq copying must not pass: the start of the first hole (seqs a repair moved
/// aside) that no finished remote segment covers. Segments at or after it are not copied, and
/// local retention never deletes past it. `None` when no hole blocks.
pub fn hole_barrier<Id>(
    holes: &[std::ops::RangeInclusive<u64>],
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
                disk_bytes: 100,
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

    fn seg(base: u64, last: u64, active: bool) -> LocalSegment {
        LocalSegment {
            base_seq: base,
            last_seq: last,
            size: 100,
            disk_bytes: 100,
            max_timestamp: i64::try_from(base).unwrap(),
            active,
        }
    }

    fn kind(c: Continuity) -> Option<Mismatch> {
        match c {
            Continuity::Mismatch { kind, .. } => Some(kind),
            _ => None,
        }
    }

    #[test]
    fn continuity_starts_an_empty_log_after_the_remote_end() {
        let r = [
            remote(1, 1, 10, CopySegmentFinished),
            remote(2, 11, 20, CopySegmentFinished),
            remote(3, 21, 30, CopySegmentStarted),
        ];
        let empty = [seg(1, 0, true)];
        assert_eq!(continuity(&empty, &[], 1, &r, 0), Continuity::StartAt(21));
        // The retention point counts when it is past the remote end.
        assert_eq!(continuity(&empty, &[], 1, &r, 40), Continuity::StartAt(40));
        // Already continuing: an empty active segment right after the remote end.
        assert_eq!(
            continuity(&[seg(21, 20, true)], &[], 21, &r, 0),
            Continuity::Consistent
        );
        assert_eq!(
            kind(continuity(&[seg(25, 24, true)], &[], 25, &r, 0)),
            Some(Mismatch::Gap)
        );
        // Nothing remote: anything goes.
        let none: [RemoteSegment<u32>; 0] = [];
        assert_eq!(continuity(&empty, &[], 1, &none, 0), Continuity::Consistent);
    }

    #[test]
    fn continuity_accepts_a_log_that_continues_or_overlaps_consistently() {
        let r = [
            remote(1, 1, 10, CopySegmentFinished),
            remote(2, 11, 20, CopySegmentFinished),
        ];
        // Local retention dropped the first; the second is in both tiers.
        let l = [seg(11, 20, false), seg(21, 25, true)];
        assert_eq!(continuity(&l, &[], 26, &r, 0), Continuity::Consistent);
        // Everything in both tiers.
        let l = [seg(1, 10, false), seg(11, 20, false), seg(21, 21, true)];
        assert_eq!(continuity(&l, &[], 22, &r, 0), Continuity::Consistent);
        // Starts right after the remote end.
        let l = [seg(21, 30, true)];
        assert_eq!(continuity(&l, &[], 31, &r, 0), Continuity::Consistent);
    }

    #[test]
    fn continuity_refuses_every_shape_of_mismatch() {
        let r = [
            remote(1, 1, 10, CopySegmentFinished),
            remote(2, 11, 20, CopySegmentFinished),
        ];
        // Behind: an old backup ending inside the remote range.
        let l = [seg(1, 10, false), seg(11, 15, true)];
        assert_eq!(kind(continuity(&l, &[], 16, &r, 0)), Some(Mismatch::Behind));
        // Gap: starts after the remote end + 1.
        let l = [seg(30, 35, true)];
        assert_eq!(kind(continuity(&l, &[], 36, &r, 0)), Some(Mismatch::Gap));
        // Diverged: other boundaries.
        let l = [seg(1, 12, false), seg(13, 25, true)];
        assert_eq!(
            kind(continuity(&l, &[], 26, &r, 0)),
            Some(Mismatch::Diverged)
        );
        // Diverged: same boundaries, another size or newest timestamp.
        for change in [
            |s: &mut LocalSegment| s.size += 1,
            |s: &mut LocalSegment| s.max_timestamp += 1,
        ] {
            let mut l = [seg(11, 20, false), seg(21, 22, true)];
            change(&mut l[0]);
            assert_eq!(
                kind(continuity(&l, &[], 23, &r, 0)),
                Some(Mismatch::Diverged)
            );
        }
        // Diverged: the active segment runs over a remote boundary.
        let l = [seg(11, 25, true)];
        assert_eq!(
            kind(continuity(&l, &[], 26, &r, 0)),
            Some(Mismatch::Diverged)
        );
    }

    #[test]
    fn continuity_allows_holes_a_repair_left() {
        let r = [
            remote(1, 1, 10, CopySegmentFinished),
            remote(2, 11, 20, CopySegmentFinished),
        ];
        // A remote segment wholly inside a hole, and one cut short by a repair.
        let l = [seg(1, 4, false), seg(21, 22, true)];
        let holes = [5..=20];
        assert_eq!(continuity(&l, &holes, 23, &r, 0), Continuity::Consistent);
        // A hole at the end of an otherwise empty log continues the remote tier.
        let l = [seg(31, 30, true)];
        let holes = [21..=30];
        assert_eq!(continuity(&l, &holes, 31, &r, 0), Continuity::Consistent);
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
                disk_bytes: size,
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
