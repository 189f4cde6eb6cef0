//! Reads across both tiers: records from whichever tier holds them, and timestamp lookups.
//! The remote segment reader itself is in `crate::read`.

use std::sync::atomic::Ordering;

use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteLogSegmentState};
use krabka_storage::Record;

use super::TieredLog;
use crate::error::Error;
use crate::read::holes::HoleRead;

impl TieredLog {
    /// [`read`](Self::read), stepping over seqs no tier holds instead of failing on them: each
    /// hole a recovery reported ([`ReadError::RemoteHole`](crate::ReadError::RemoteHole)) or a repair left locally with no
    /// remote copy (`krabka_storage::Error::Quarantined`) is named in [`HoleRead::lost`] and
    /// the read goes on after it. Up to `max` records; at most 1,024 holes per call (then it
    /// returns what it has, `next` past the last hole, and the caller calls again).
    ///
    /// # Errors
    /// As [`read`](Self::read), holes aside.
    pub fn read_over_holes(&self, from_seq: u64, max: usize) -> Result<HoleRead, Error> {
        crate::read::holes::read_over_holes(from_seq, |seq| self.read(seq, max))
    }

    /// Up to `max` records from `from_seq`, from whichever tier holds them, in order: records
    /// below [`local_first_seq`](Self::local_first_seq) come from the remote tier, and a read
    /// continues across remote segments and into the local log.
    ///
    /// `from_seq` is checked exactly as `Log::read` checks it, over both tiers, whatever `max`
    /// (also 0): `from_seq == last_seq() + 1` returns an empty `Vec`. Every read is exact or an
    /// error: records decoded before a bad batch (local or remote) are returned first, as a
    /// short read, and a read starting in the bad batch returns the error. A local segment
    /// that fails (damaged, or a hole left by a repair) is read from its finished remote copy
    /// when there is one.
    ///
    /// # Errors
    /// [`ReadError::OutOfRange`](crate::ReadError::OutOfRange) when `from_seq < first_seq()` or `from_seq > last_seq() + 1`;
    /// [`Error::Remote`] / [`Error::Metadata`] when the remote tier fails;
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) / [`Error::Storage`] for bad bytes, and
    /// [`ReadError::RemoteNotAMessage`](crate::ReadError::RemoteNotAMessage) / [`Error::Storage`] for a record a `Message` cannot hold
    /// (records before either are returned first); [`ReadError::RemoteHole`](crate::ReadError::RemoteHole) for a seq in a hole a
    /// recovery reported (records before it in the same call are returned first).
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        self.read_with(from_seq, max, false, None)
    }

    /// [`read`](Self::read) without any remote fetch: the local log, the entries `cold` holds
    /// and what the cache holds. Ends at the first remote entry held by neither with the
    /// records before it, noting that entry in `cold` (`crate::read::cold`); with none, an
    /// error (any error: the caller fetches what was missed, or reads again with
    /// [`read`](Self::read), which reports it).
    pub(crate) fn read_cold(
        &self,
        from_seq: u64,
        max: usize,
        cold: &crate::read::cold::ColdRead,
    ) -> Result<Vec<Record>, Error> {
        self.read_with(from_seq, max, true, Some(cold))
    }

    /// Starts getting the entry a [`read_cold`](Self::read_cold) missed without a thread
    /// ([`RemoteReader::fetch_missing`](crate::read::RemoteReader::fetch_missing)).
    pub(crate) fn fetch_missing(
        &self,
        miss: &crate::read::cold::Miss,
    ) -> Option<tokio::sync::oneshot::Receiver<Option<bytes::Bytes>>> {
        self.remote_reader(true, None).fetch_missing(miss)
    }

    fn read_with(
        &self,
        from_seq: u64,
        max: usize,
        cached_only: bool,
        cold: Option<&crate::read::cold::ColdRead>,
    ) -> Result<Vec<Record>, Error> {
        let last = self.log.last_seq();
        // Only failures list the remote segments (for the error's first seq): a read never
        // clones every segment's metadata.
        if from_seq > last.saturating_add(1)
            || from_seq < self.retention_point.load(Ordering::Acquire)
        {
            return Err(self.out_of_range(from_seq, last));
        }
        if max == 0 {
            return self.check_readable(from_seq, last).map(|()| Vec::new());
        }
        let mut out: Vec<Record> = Vec::new();
        let mut seq = from_seq;
        // Retention may move either tier's start while we read; a few retries settle it.
        let mut misses = 0;
        while out.len() < max && seq <= last {
            match self.read_step(seq, max - out.len(), last, &mut misses, (cached_only, cold)) {
                Ok(Some(records)) => {
                    let Some(next) = records.last().map(|r| r.seq + 1) else {
                        break;
                    };
                    // The first step's records are taken as they are (no copy).
                    if out.is_empty() {
                        out = records;
                    } else {
                        out.extend(records);
                    }
                    seq = next;
                }
                Ok(None) => {}
                // What was read before the failure is delivered; the next read from `seq`
                // meets the failure again and returns it.
                Err(e) if !out.is_empty() => {
                    tracing::debug!(partition = %self.tp, seq, error = %e,
                        "short read: the records before the failure are returned");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// One step of [`read`](Self::read) at `seq` (`<= last`): records from the local log or
    /// from one remote segment; `None` to try again (a tier's start moved).
    fn read_step(
        &self,
        seq: u64,
        want: usize,
        last: u64,
        misses: &mut u32,
        (cached_only, cold): (bool, Option<&crate::read::cold::ColdRead>),
    ) -> Result<Option<Vec<Record>>, Error> {
        let mut local_failure = None;
        if seq >= self.log.first_seq() {
            match self.log.read(seq, want) {
                Ok(records) => return Ok(Some(records)),
                Err(krabka_storage::Error::OutOfRange { .. })
                    if seq < self.log.first_seq() && *misses < 3 =>
                {
                    *misses += 1;
                    return Ok(None);
                }
                // A damaged local segment or a repaired hole: its remote copy may hold it.
                Err(
                    e @ (krabka_storage::Error::Corrupt { .. }
                    | krabka_storage::Error::Quarantined { .. }),
                ) => local_failure = Some(Error::storage(format!("reading from seq {seq}"), e)),
                Err(e) => return Err(Error::storage(format!("reading from seq {seq}"), e)),
            }
        }
        let found = self
            .rlmm
            .remote_log_segment_metadata(&self.tp, seq)
            .map_err(|e| Error::metadata("lookup", None, e))?;
        if let Some(failure) = local_failure {
            return match found {
                Some(meta) => {
                    tracing::warn!(partition = %self.tp, seq, error = %failure,
                        "local read failed; reading the finished remote copy instead");
                    self.remote_reader(cached_only, cold)
                        .read_remote(&meta, seq, want)
                        .map(Some)
                }
                None => Err(failure),
            };
        }
        // `None`: not remote (any more). A fetch finding no object: retention deleted the
        // segment between the lookup and the fetch. Either way, re-check the start.
        let gone = match found {
            Some(meta) => match self
                .remote_reader(cached_only, cold)
                .read_remote(&meta, seq, want)
            {
                Ok(records) => return Ok(Some(records)),
                Err(e) if e.is_remote_not_found() => Some(e),
                Err(e) => return Err(e),
            },
            None => None,
        };
        *misses += 1;
        let first = self.first_seq()?;
        if gone.is_none()
            && seq >= first
            && let Some(hole) = self.remote_hole_at(seq)?
        {
            return Err(hole);
        }
        if seq < first || *misses > 3 {
            // Still within the log, yet the remote object is missing: not retention.
            return Err(match gone {
                Some(e) if seq >= first => e,
                _ => Error::Read(crate::error::ReadError::OutOfRange { seq, first, last }),
            });
        }
        Ok(None)
    }

    /// The hole `seq` lies in, when no finished remote segment holds it but one above it (or
    /// the local log) does: seqs a recovery found in no whole segment. `None` otherwise.
    fn remote_hole_at(&self, seq: u64) -> Result<Option<Error>, Error> {
        let local_first = self.log.first_seq();
        let finished: Vec<RemoteLogSegmentMetadata> = self
            .remote_list()?
            .into_iter()
            .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
            .collect();
        if finished.iter().any(|m| m.contains(seq)) {
            return Ok(None);
        }
        let from = finished
            .iter()
            .map(RemoteLogSegmentMetadata::end_offset)
            .filter(|end| *end < seq)
            .max()
            .map_or(seq, |end| end.saturating_add(1));
        let next = finished
            .iter()
            .map(RemoteLogSegmentMetadata::start_offset)
            .filter(|start| *start > seq)
            .chain((local_first > seq).then_some(local_first))
            .min();
        Ok(next.map(|next| {
            Error::Read(crate::error::ReadError::RemoteHole {
                partition: Box::new(self.tp.clone()),
                from,
                to: next.saturating_sub(1),
                objects: Vec::new(),
                reason: None,
            })
        }))
    }

    /// Whether a read of one record at `seq` would find it (`read(seq, 0)`): `Ok` for a seq in
    /// the local log (or `last + 1`) or in a finished remote segment, else `OutOfRange`.
    fn check_readable(&self, seq: u64, last: u64) -> Result<(), Error> {
        if seq >= self.log.first_seq() {
            return Ok(());
        }
        let found = self
            .rlmm
            .remote_log_segment_metadata(&self.tp, seq)
            .map_err(|e| Error::metadata("lookup", None, e))?;
        if found.is_some() || seq >= self.log.first_seq() {
            return Ok(());
        }
        Err(self.out_of_range(seq, last))
    }

    /// The seq of the first record (in seq order) whose timestamp is `>= ts`, over both
    /// tiers; `None` when no record has such a timestamp.
    ///
    /// Finished remote segments below the local first seq are looked at oldest first: the
    /// first whose newest timestamp is `>= ts` is searched through its time index (fetched
    /// once, validated and cached like the offset index), then its batches as stored from the
    /// offset-index entry at the seq that gives (records a `Message` cannot hold included).
    /// When no remote segment has such a record, the local log answers
    /// (`Log::seq_for_timestamp`). Remote costs: one listing of the remote segments, then for
    /// the segment searched one time-index fetch and the reads of one index interval (cached).
    ///
    /// # Errors
    /// [`Error::Metadata`] when the remote segments cannot be listed; [`Error::Remote`] /
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) from the remote segment searched; [`Error::Storage`] from the
    /// local log.
    pub fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, Error> {
        let local_first = self.log.first_seq();
        let retention_point = self.retention_point.load(Ordering::Acquire);
        let mut remote: Vec<RemoteLogSegmentMetadata> = self
            .remote_list()?
            .into_iter()
            .filter(|m| {
                m.state() == RemoteLogSegmentState::CopySegmentFinished
                    && m.end_offset() >= retention_point
                    && m.start_offset() < local_first
            })
            .collect();
        remote.sort_by_key(RemoteLogSegmentMetadata::start_offset);
        for meta in remote.iter().filter(|m| m.max_timestamp_ms() >= ts) {
            let found = match self
                .remote()
                .search_time(meta, ts, retention_point, local_first)
            {
                Err(e) if e.is_remote_not_found() && meta.end_offset() < self.first_seq()? => {
                    continue; // deleted by retention meanwhile
                }
                other => other?,
            };
            if found.is_some() {
                return Ok(found);
            }
        }
        self.log
            .seq_for_timestamp(ts)
            .map_err(|e| Error::storage(format!("looking up timestamp {ts}"), e))
    }

    /// The [`ReadError::OutOfRange`](crate::ReadError::OutOfRange) for a read of `seq` (lists the remote segments).
    fn out_of_range(&self, seq: u64, last: u64) -> Error {
        match self.first_seq() {
            Ok(first) => Error::Read(crate::error::ReadError::OutOfRange { seq, first, last }),
            Err(e) => e,
        }
    }
}
