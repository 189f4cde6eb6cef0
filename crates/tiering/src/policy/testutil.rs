//! Builders shared by the policy tests.
#![allow(clippy::unwrap_used)]

use krabka_remote_storage::RemoteLogSegmentState::{self, CopySegmentFinished};
use proptest::prelude::*;

use super::{LocalSegment, RemoteSegment};

pub(super) fn local(ranges: &[(u64, u64)], active_last: bool) -> Vec<LocalSegment> {
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

pub(super) fn remote(
    id: u32,
    start: u64,
    end: u64,
    state: RemoteLogSegmentState,
) -> RemoteSegment<u32> {
    RemoteSegment {
        id,
        start,
        end,
        size: 100,
        max_timestamp: i64::try_from(start).unwrap(),
        state,
    }
}

pub(super) fn seg(base: u64, last: u64, active: bool) -> LocalSegment {
    LocalSegment {
        base_seq: base,
        last_seq: last,
        size: 100,
        disk_bytes: 100,
        max_timestamp: i64::try_from(base).unwrap(),
        active,
    }
}

/// A random history: segment sizes, which have finished copies, limits.
/// Segments as (records, bytes, copied), a size limit, an age limit, and now.
pub(super) type Scenario = (Vec<(u64, u64, bool)>, Option<u64>, Option<u64>, i64);

pub(super) fn scenario() -> impl Strategy<Value = Scenario> {
    (
        proptest::collection::vec((1u64..20, 1u64..500, any::<bool>()), 1..20),
        proptest::option::of(0u64..5000),
        proptest::option::of(0u64..100),
        0i64..300,
    )
}

pub(super) fn build(spec: &[(u64, u64, bool)]) -> (Vec<LocalSegment>, Vec<RemoteSegment<u32>>) {
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
