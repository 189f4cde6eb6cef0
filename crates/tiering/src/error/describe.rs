//! How error messages name a byte, a segment and a seq.

use krabka_remote_storage::RemoteLogSegmentId;

pub(super) fn at_byte(position: Option<u64>) -> String {
    position.map_or_else(String::new, |p| format!(" at byte {p}"))
}

pub(super) fn describe(segment: Option<&RemoteLogSegmentId>, seq: Option<u64>) -> String {
    match (segment, seq) {
        (Some(s), Some(q)) => format!(" (segment {s}, seq {q})"),
        (Some(s), None) => format!(" (segment {s})"),
        (None, Some(q)) => format!(" (seq {q})"),
        (None, None) => String::new(),
    }
}
