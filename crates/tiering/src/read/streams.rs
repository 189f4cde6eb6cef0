//! Where a log's sequential readers are: the positions the read-ahead keeps
//! ([`readahead`](super::readahead)) and the read-ahead jobs queued on the read engine
//! consult, so that a chunk every reader has gone past is not fetched.

use std::collections::VecDeque;

use krabka_remote_storage::RemoteLogSegmentMetadata;
use parking_lot::Mutex;
use uuid::Uuid;

/// A reader's position: the segment attempt, the seq its next read starts at, the last
/// chunk queued for it, what was queued of the next segment (its metadata and last chunk
/// queued), and where its last read stopped decoding in `segment`.
#[derive(Clone)]
pub(super) struct Stream {
    pub(super) segment: Uuid,
    pub(super) next_seq: u64,
    pub(super) queued: u64,
    pub(super) ahead: Option<(RemoteLogSegmentMetadata, u64)>,
    /// `(seq, byte)`: the batch of `segment` starting with `seq` at `byte`, the first one the
    /// last read did not finish (its seq at or below `next_seq`). The next read starts
    /// decoding there instead of at an offset-index entry, so a sequential scan needs no
    /// index.
    pub(super) resume: Option<(u64, u64)>,
}

impl Stream {
    /// The stream moved on to `segment`: what was queued of it becomes its `queued`.
    pub(super) fn enter(&mut self, segment: Uuid) {
        if self.segment == segment {
            return;
        }
        self.resume = None;
        self.queued = match self.ahead.take() {
            Some((next, count)) if next.remote_log_segment_id().id() == segment => {
                count.saturating_sub(1)
            }
            _ => 0,
        };
        self.segment = segment;
    }
}

/// The positions of a log's readers (see [`ReadAhead`](super::readahead::ReadAhead)).
#[derive(Default)]
pub(crate) struct Streams(pub(super) Mutex<VecDeque<Stream>>);

impl Streams {
    /// Whether every reader has gone past bytes `..end` of `meta`: it reads a later segment
    /// (its next seq is past the segment's last), or its last read of this one stopped at or
    /// after `end`. A chunk read ahead for readers that have all gone past it would only be
    /// fetched to be evicted unread. `false` without readers.
    pub(crate) fn passed(&self, meta: &RemoteLogSegmentMetadata, end: u64) -> bool {
        let segment = meta.remote_log_segment_id().id();
        let streams = self.0.lock();
        !streams.is_empty()
            && streams.iter().all(|s| {
                s.next_seq > meta.end_offset()
                    || (s.segment == segment && s.resume.is_some_and(|(_, at)| at >= end))
            })
    }
}
