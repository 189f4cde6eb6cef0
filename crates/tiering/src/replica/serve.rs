//! A replica's reads: records, the first and last seq served, timestamp lookups, through the
//! reader the writer's tiered log uses for its remote range (`crate::read`).

use krabka_remote_storage::{RemoteLogSegmentMetadata, Uuid};
use krabka_storage::Record;
use krabka_storage::segment::decode_records_skipping;

use super::tail::{PieceKind, TailPiece};
use super::{ReadReplica, View};
use crate::error::Error;
use crate::read::RemoteReader;

impl ReadReplica {
    /// The reader of the served segments, for one call.
    fn reader(&self) -> RemoteReader<'_> {
        RemoteReader {
            rsm: &self.rsm,
            rlmm: self.metadata.as_ref(),
            tp: &self.tp,
            config: &self.config,
            cache: &self.cache,
            counters: &self.counters,
            readahead: &self.readahead,
            remote_below: u64::MAX,
            cached_only: false,
            cold: None,
        }
    }

    /// The first seq served (the view refreshed first when due).
    ///
    /// Infallible today; a `Result` so that a refresh failing may be reported later without
    /// an API change.
    ///
    /// # Errors
    /// None yet.
    pub fn first_seq(&self) -> Result<u64, Error> {
        self.refresh_if_due();
        Ok(self.view.read().first_seq())
    }

    /// The last seq served: the end of the last remote segment the view holds, or of the
    /// records of the tail objects its head lists above them (`first_seq - 1` when it holds
    /// none). The view is refreshed first when due.
    ///
    /// # Errors
    /// None yet (see [`first_seq`](Self::first_seq)).
    pub fn last_seq(&self) -> Result<u64, Error> {
        self.refresh_if_due();
        Ok(self.view.read().next_seq().saturating_sub(1))
    }

    /// [`read`](Self::read), stepping over seqs no served segment holds instead of failing on
    /// them: each [`ReadError::RemoteHole`](crate::ReadError::RemoteHole) is named in
    /// [`HoleRead::lost`](crate::HoleRead::lost), with its objects and reason, and the read goes
    /// on after it (at most 1,024 holes per call).
    ///
    /// # Errors
    /// As [`read`](Self::read), holes aside.
    pub fn read_over_holes(&self, from_seq: u64, max: usize) -> Result<crate::HoleRead, Error> {
        crate::read::holes::read_over_holes(from_seq, |seq| self.read(seq, max))
    }

    /// Up to `max` records from `from_seq`, exactly as the writer's
    /// [`TieredLog::read`](crate::TieredLog::read) serves its remote range: every record's
    /// seq checked, records before a bad batch returned first (a short read), a read starting
    /// in it failing naming the object and byte. The view is refreshed first when due.
    ///
    /// # Errors
    /// [`ReadError::OutOfRange`](crate::ReadError::OutOfRange) when `from_seq` is outside `first_seq()..=last_seq() + 1`, also
    /// when retention deleted the segment between the view and the read (the view is refreshed
    /// then); [`ReadError::RemoteHole`](crate::ReadError::RemoteHole) for seqs no served segment holds between two that do;
    /// [`Error::Remote`] / [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) / [`ReadError::RemoteNotAMessage`](crate::ReadError::RemoteNotAMessage) /
    /// [`ReadError::FetchWaitExceeded`](crate::ReadError::FetchWaitExceeded) from the remote tier.
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        self.refresh_if_due();
        let mut out: Vec<Record> = Vec::new();
        let mut seq = from_seq;
        // A segment retention deleted under the view: refreshed once, then out of range.
        let mut refreshed = false;
        loop {
            let view = self.view.read().clone();
            let (first, next) = (view.first_seq(), view.next_seq());
            if out.is_empty() && (seq < first || seq > next) {
                return Err(Error::Read(crate::error::ReadError::OutOfRange {
                    seq,
                    first,
                    last: next.saturating_sub(1),
                }));
            }
            if out.len() >= max || seq >= next {
                return Ok(out);
            }
            let step = match segment_at(&view, seq) {
                Some(meta) => self.reader().read_remote(meta, seq, max - out.len()),
                None => match view.tail.piece_at(seq) {
                    Some(piece) => self.read_tail(piece, seq, max - out.len()),
                    None => Err(hole_at(self, &view, seq)),
                },
            };
            match step {
                Ok(records) => {
                    let Some(after) = records.last().map(|r| r.seq + 1) else {
                        return Ok(out);
                    };
                    if out.is_empty() {
                        out = records;
                    } else {
                        out.extend(records);
                    }
                    seq = after;
                }
                Err(e) if !out.is_empty() => {
                    tracing::debug!(partition = %self.tp, seq, error = %e,
                        "short replica read: the records before the failure are returned");
                    return Ok(out);
                }
                Err(e) if e.is_remote_not_found() && !refreshed => {
                    refreshed = true;
                    self.refresh_after_missing()?;
                }
                Err(e) if e.is_remote_not_found() => {
                    let view = self.view.read();
                    if seq < view.first_seq() {
                        return Err(Error::Read(crate::error::ReadError::OutOfRange {
                            seq,
                            first: view.first_seq(),
                            last: view.next_seq().saturating_sub(1),
                        }));
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The seq of the first record whose timestamp is `>= ts` among the seqs served; `None`
    /// when no record has such a timestamp. Costs as
    /// [`TieredLog::seq_for_timestamp`](crate::TieredLog::seq_for_timestamp)'s remote part.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, Error> {
        self.refresh_if_due();
        let mut view = self.view.read().clone();
        // A segment retention deleted under the view: refreshed, then searched again in the
        // new view (whose segments may all be newer than the old one's). Each such refresh
        // drops a segment of the first view: at most that many.
        let mut retries = view.segments.len();
        loop {
            let (e, id) = match self.search_time_in(&view, ts)? {
                Search::Done(found) => return Ok(found),
                Search::Deleted(e, id) if retries > 0 => (e, id),
                Search::Deleted(e, _) => return Err(e),
            };
            retries -= 1;
            self.refresh_after_missing()?;
            view = self.view.read().clone();
            // A segment still served is missing, not deleted.
            if view
                .segments
                .iter()
                .any(|m| m.remote_log_segment_id().id() == id)
            {
                return Err(e);
            }
        }
    }

    /// The timestamp search over `view`'s segments, stopped by a segment not found in the
    /// bucket (for the caller to refresh).
    fn search_time_in(&self, view: &View, ts: i64) -> Result<Search, Error> {
        let first = view.first_seq();
        for meta in view.segments.iter().filter(|m| m.max_timestamp_ms() >= ts) {
            match self.reader().search_time(meta, ts, first, u64::MAX) {
                Ok(Some(seq)) => return Ok(Search::Done(Some(seq))),
                Ok(None) => {}
                Err(e) if e.is_remote_not_found() => {
                    return Ok(Search::Deleted(e, meta.remote_log_segment_id().id()));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Search::Done(None))
    }
}

impl ReadReplica {
    /// Up to `max` records from `seq` of a tail piece: its batches were checked when it was
    /// read (CRC-32C, seqs), and are checked again as they are decoded.
    fn read_tail(&self, piece: &TailPiece, seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        match &piece.kind {
            PieceKind::Data { base, bytes } => decode_records_skipping(bytes, *base, seq, max)
                .map(|d| {
                    d.records
                        .into_iter()
                        .filter(|r| r.seq <= piece.last)
                        .collect()
                })
                .map_err(|e| {
                    Error::Read(crate::error::ReadError::RemoteHole {
                        partition: Box::new(self.tp.clone()),
                        from: piece.first,
                        to: piece.last,
                        objects: Vec::new(),
                        reason: Some(format!("a tail entry checked when read fails now: {e}")),
                    })
                }),
            PieceKind::Gap(m) => Err(Error::Read(crate::error::ReadError::RemoteHole {
                partition: Box::new(self.tp.clone()),
                from: m.from,
                to: m.to,
                objects: m.objects.clone(),
                reason: Some(m.reason.clone()),
            })),
        }
    }
}

/// How a timestamp search over one view ended.
enum Search {
    /// The answer.
    Done(Option<u64>),
    /// A segment of the view is not in the bucket: its error and id.
    Deleted(Error, Uuid),
}

/// The served segment holding `seq`.
fn segment_at(view: &View, seq: u64) -> Option<&RemoteLogSegmentMetadata> {
    let i = view.segments.partition_point(|m| m.start_offset() <= seq);
    view.segments
        .get(i.checked_sub(1)?)
        .filter(|m| m.end_offset() >= seq)
}

/// The [`ReadError::RemoteHole`](crate::ReadError::RemoteHole) of `seq`, which no served segment holds but one after it (or
/// seqs shown finished and missing) does: the missing seqs' objects and reason when the view
/// knows them.
fn hole_at(replica: &ReadReplica, view: &View, seq: u64) -> Error {
    if let Some(m) = view.missing.iter().find(|m| m.from <= seq && seq <= m.to) {
        return Error::Read(crate::error::ReadError::RemoteHole {
            partition: Box::new(replica.tp.clone()),
            from: m.from,
            to: m.to,
            objects: m.objects.clone(),
            reason: Some(m.reason.clone()),
        });
    }
    let i = view.segments.partition_point(|m| m.start_offset() <= seq);
    let from = i
        .checked_sub(1)
        .and_then(|j| view.segments.get(j))
        .map_or(seq, |m| m.end_offset().saturating_add(1));
    let next_missing = view
        .missing
        .iter()
        .map(|m| m.from)
        .filter(|f| *f > seq)
        .min();
    let to = view
        .segments
        .get(i)
        .map(|m| m.start_offset())
        .into_iter()
        .chain(next_missing)
        .min()
        .map_or(seq, |next| next.saturating_sub(1));
    let from = view
        .missing
        .iter()
        .map(|m| m.to.saturating_add(1))
        .filter(|t| *t <= seq)
        .max()
        .map_or(from, |t| t.max(from));
    Error::Read(crate::error::ReadError::RemoteHole {
        partition: Box::new(replica.tp.clone()),
        from,
        to,
        objects: Vec::new(),
        reason: None,
    })
}
