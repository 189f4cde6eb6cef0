//! How old the active segment is: [`SegmentAge`], kept by the appender under its lock, and
//! the age of a segment file found non-empty at open, read from the file's evidence.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant, SystemTime};

use krabka_protocol::batch::max_timestamp_of;

use crate::segment::BATCH_HEADER_LEN;

/// Since when the active segment holds records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SegmentAge {
    /// It holds no record.
    Empty,
    /// It held records when the log was opened; its age is read from the file at first need.
    Found,
    /// It was `before` old at `at`.
    Known {
        /// When `before` was measured.
        at: Instant,
        /// Its age at `at`.
        before: Duration,
    },
}

impl SegmentAge {
    /// The age of an active segment of `size` bytes found at open.
    pub(super) fn found(size: u64) -> SegmentAge {
        if size == 0 {
            SegmentAge::Empty
        } else {
            SegmentAge::Found
        }
    }

    /// The age of a segment whose first record is being written now.
    pub(super) fn from_now() -> SegmentAge {
        SegmentAge::Known {
            at: Instant::now(),
            before: Duration::ZERO,
        }
    }

    pub(super) fn known(self) -> Option<Duration> {
        match self {
            SegmentAge::Known { at, before } => Some(before.saturating_add(at.elapsed())),
            SegmentAge::Empty | SegmentAge::Found => None,
        }
    }
}

/// How old the first record of a segment file found non-empty at open is, at the latest: the
/// age of the earliest of its birth time, its first batch's largest timestamp (when not
/// negative) and its modification time, leaving out any later than the wall clock (zero when
/// none is left). The birth time and a create-time timestamp come no later than the first
/// append, so a restart can make the segment look older than it is, never younger.
pub(super) fn found_age(file: &File) -> Duration {
    let now = SystemTime::now();
    let mut evidence = Vec::with_capacity(3);
    if let Ok(meta) = file.metadata() {
        evidence.extend(meta.created().ok());
        evidence.extend(meta.modified().ok());
    }
    let mut header = [0u8; BATCH_HEADER_LEN];
    if file.read_exact_at(&mut header, 0).is_ok()
        && let Ok(ts) = max_timestamp_of(&header)
        && let Ok(ms) = u64::try_from(ts)
    {
        evidence.extend(SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms)));
    }
    evidence
        .into_iter()
        .filter_map(|t| now.duration_since(t).ok())
        .max()
        .unwrap_or(Duration::ZERO)
}
