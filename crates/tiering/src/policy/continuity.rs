//! Continuity: whether a local log continues the remote tier, so that no seq is used twice.

use std::ops::RangeInclusive;

use super::{LocalSegment, RemoteSegment, covers};

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
/// the remote segments (only finished ones ending at or after `retention_point` count) and
/// `retention_point` the whole-log retention point (Kafka's log start offset).
///
/// - The local log holds no record (and no hole): [`Continuity::StartAt`] the remote end + 1
///   (or `retention_point` when larger) when `next_seq` is below it; a mismatch of kind
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
    holes: &[RangeInclusive<u64>],
    next_seq: u64,
    remote: &[RemoteSegment<Id>],
    retention_point: u64,
) -> Continuity {
    let mut finished: Vec<&RemoteSegment<Id>> = remote
        .iter()
        .filter(|r| r.is_finished() && r.end >= retention_point)
        .collect();
    finished.sort_by_key(|r| r.start);
    let remote_end = finished.iter().map(|r| r.end).max();
    let local_first = local
        .iter()
        .filter(|s| s.last_seq >= s.base_seq)
        .map(|s| s.base_seq)
        .chain(holes.iter().map(|h| *h.start()))
        .min();
    let Some(local_first) = local_first else {
        return continue_empty(next_seq, remote_end, retention_point);
    };
    let Some(remote_end) = remote_end else {
        return Continuity::Consistent;
    };
    let local_last = next_seq.saturating_sub(1);
    if let Some(m) = range_mismatch(local_first, local_last, remote_end) {
        return m;
    }
    finished
        .iter()
        .filter(|r| r.end >= local_first && r.start <= local_last)
        .find_map(|r| segment_mismatch(local, holes, r))
        .unwrap_or(Continuity::Consistent)
}

fn mismatch(kind: Mismatch, reason: String) -> Continuity {
    Continuity::Mismatch { kind, reason }
}

/// [`continuity`] for a local log holding no record (and no hole): start it after the remote
/// end (or at `retention_point` when larger), or refuse a next seq past the remote end + 1.
fn continue_empty(next_seq: u64, remote_end: Option<u64>, retention_point: u64) -> Continuity {
    let start = remote_end
        .map_or(0, |e| e.saturating_add(1))
        .max(retention_point);
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
    Continuity::Consistent
}

/// The local range `local_first..=local_last` must reach the remote end and start at or
/// before the remote end + 1.
fn range_mismatch(local_first: u64, local_last: u64, remote_end: u64) -> Option<Continuity> {
    let after_remote = remote_end.saturating_add(1);
    if local_last < remote_end {
        return Some(mismatch(
            Mismatch::Behind,
            format!(
                "the local log holds seqs {local_first}..={local_last}, but the remote tier \
                 already holds seqs up to {remote_end}: the local log is older than the remote \
                 tier"
            ),
        ));
    }
    if local_first > after_remote {
        return Some(mismatch(
            Mismatch::Gap,
            format!(
                "the local log starts at seq {local_first}, but the remote tier ends at seq \
                 {remote_end}: seqs {after_remote}..={} are in neither tier",
                local_first - 1
            ),
        ));
    }
    None
}

/// How the local segments disagree with the finished remote segment `r` that overlaps the
/// local range, if they do. Next to a hole only a local segment straddling `r` disagrees; one
/// wholly inside holes is not checked.
fn segment_mismatch<Id>(
    local: &[LocalSegment],
    holes: &[RangeInclusive<u64>],
    r: &RemoteSegment<Id>,
) -> Option<Continuity> {
    let touches_hole = holes
        .iter()
        .any(|h| *h.start() <= r.end && *h.end() >= r.start);
    if touches_hole {
        if covers(holes.iter().map(|h| (*h.start(), *h.end())), r.start, r.end) {
            return None;
        }
        let s = local.iter().find(|s| {
            s.last_seq >= s.base_seq
                && s.base_seq <= r.end
                && s.last_seq >= r.start
                && (s.base_seq < r.start || s.last_seq > r.end)
        })?;
        return Some(mismatch(
            Mismatch::Diverged,
            format!(
                "local segment {}..={} straddles remote segment {}..={}",
                s.base_seq, s.last_seq, r.start, r.end
            ),
        ));
    }
    let Some(s) = local.iter().find(|s| s.base_seq == r.start) else {
        return Some(mismatch(
            Mismatch::Diverged,
            format!(
                "remote segment {}..={} has no local segment starting at seq {}",
                r.start, r.end, r.start
            ),
        ));
    };
    if s.last_seq != r.end || s.size != r.size || s.max_timestamp != r.max_timestamp {
        return Some(mismatch(
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
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{remote, seg};
    use super::*;
    use krabka_remote_storage::RemoteLogSegmentState::*;

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
}
