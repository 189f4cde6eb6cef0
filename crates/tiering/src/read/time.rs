//! Timestamp lookups within one finished remote segment: its time index gives the floor, then
//! the segment's batches are walked as stored from there (the way the local log's lookup walks
//! its own), so a record a `Message` cannot hold is passed or found like any other.

use bytes::Bytes;
use krabka_protocol::batch::{BatchError, BatchView};
use krabka_remote_storage::RemoteLogSegmentMetadata;
use krabka_storage::segment::MAX_UNCOMPRESSED_BATCH;

use super::fetch::Walk;
use super::{RemoteReader, log_corrupt};
use crate::error::Error;

impl RemoteReader<'_> {
    /// The first record with a timestamp `>= ts` in one finished remote segment, at or after
    /// `from` and below `below` (where the next tier or reader's range starts).
    ///
    /// The time index gives the floor, the offset index the batch to start at; from there the
    /// batches are read as stored, through the cache like every remote read (chunks joined
    /// where a batch crosses a boundary, the next chunks read ahead). Every batch walked has its
    /// length, magic and CRC-32C checked and must start at the seq after the one before it;
    /// a batch whose `maxTimestamp` is below `ts`, or whose records all lie before the floor,
    /// is passed whole; the records of the first other one are read (as stored: a null value,
    /// a control or transactional batch are records like any other) until one has a timestamp
    /// `>= ts`, and that batch's remaining records are checked before its seq is returned. The
    /// walk ends at the segment's last seq (or `below`) at the latest.
    ///
    /// # Errors
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) naming the segment's `.log` and the bad batch's byte when a
    /// batch walked fails a check (or the data ends before the segment's last seq), or naming
    /// an index; the fetch errors of [`read_remote`](Self::read_remote).
    pub(crate) fn search_time(
        &self,
        meta: &RemoteLogSegmentMetadata,
        ts: i64,
        from: u64,
        below: u64,
    ) -> Result<Option<u64>, Error> {
        let Some(floor) = self.remote_time_floor(meta, ts)? else {
            return Ok(None);
        };
        let seq = floor.max(from);
        // The last seq that may be the answer.
        let Some(end) = below.checked_sub(1).map(|b| b.min(meta.end_offset())) else {
            return Ok(None);
        };
        if seq > end {
            return Ok(None);
        }
        let (expect, start) = self
            .remote_index(meta, seq)?
            .floor(seq)
            .unwrap_or((meta.start_offset(), 0));
        let mut search = TimeSearch {
            meta,
            ts,
            seq,
            end,
            expect,
            pending: start,
        };
        let mut walk = Walk::new(self, meta, seq, start, None)?;
        while let Some((buf, buf_start)) = walk.next()? {
            match search.batches(&buf, buf_start)? {
                Step::Done(found) => return Ok(found),
                Step::More(consumed) => walk.advance(&buf, buf_start, consumed),
            }
        }
        // The data ended before the segment's last seq.
        let size = meta.segment_size_in_bytes();
        let why = if search.pending >= size {
            format!("the segment's {size} bytes end before it")
        } else {
            format!("the batch there runs past the segment's end at byte {size}")
        };
        Err(search.corrupt(search.pending, &why))
    }
}

/// What a buffer of batches told a [`TimeSearch`].
enum Step {
    /// The answer (`None`: no record of the range searched has a timestamp `>= ts`).
    Done(Option<u64>),
    /// No answer yet: the buffer's first bytes, complete batches, were consumed.
    More(usize),
}

/// A timestamp search's progress along one segment's batches.
struct TimeSearch<'a> {
    meta: &'a RemoteLogSegmentMetadata,
    /// The timestamp looked for.
    ts: i64,
    /// The first seq that may be the answer (where the search started).
    seq: u64,
    /// The last seq that may be the answer.
    end: u64,
    /// The seq the next batch must start with.
    expect: u64,
    /// The segment byte where the next batch starts.
    pending: u64,
}

impl TimeSearch<'_> {
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) for the batch at segment byte `at`.
    fn corrupt(&self, at: u64, why: &dyn std::fmt::Display) -> Error {
        log_corrupt(
            self.meta,
            self.seq,
            Some(at),
            format!(
                "looking up timestamp {}: expected the batch of seq {}: {why}",
                self.ts, self.expect
            ),
        )
    }

    /// Steps along the complete batches at the start of `buf` (segment byte `buf_start`).
    fn batches(&mut self, buf: &Bytes, buf_start: u64) -> Result<Step, Error> {
        let mut at = 0usize;
        while at < buf.len() {
            let batch_at = buf_start + at as u64;
            self.pending = batch_at;
            let view = match BatchView::parse(&buf.slice(at..)) {
                Ok(view) => view,
                // The batch goes on in the next chunk: the walk joins them.
                Err(BatchError::Truncated { .. }) => break,
                Err(e) => return Err(self.corrupt(batch_at, &e)),
            };
            let h = *view.header();
            let first = u64::try_from(h.base_offset)
                .ok()
                .filter(|&s| s == self.expect);
            let Some(first) = first else {
                return Err(self.corrupt(batch_at, &format!("it starts at {}", h.base_offset)));
            };
            let last = u64::try_from(h.last_offset_delta)
                .ok()
                .filter(|_| i64::from(h.record_count) == i64::from(h.last_offset_delta) + 1)
                .and_then(|d| first.checked_add(d));
            let Some(last) = last else {
                return Err(self.corrupt(
                    batch_at,
                    &format!(
                        "recordCount {} does not follow lastOffsetDelta {}",
                        h.record_count, h.last_offset_delta
                    ),
                ));
            };
            if last > self.meta.end_offset() {
                return Err(self.corrupt(
                    batch_at,
                    &format!(
                        "it holds seq {last}, past the segment's last seq {}",
                        self.meta.end_offset()
                    ),
                ));
            }
            if last >= self.seq
                && h.max_timestamp >= self.ts
                && let Some(found) = self.records(&view, first, batch_at)?
            {
                return Ok(Step::Done(found));
            }
            at += view.size();
            self.expect = last + 1;
            self.pending = buf_start + at as u64;
            if self.expect > self.end {
                return Ok(Step::Done(None));
            }
        }
        Ok(Step::More(at))
    }

    /// Reads the records of a batch that may hold the answer, as stored (none is turned into a
    /// `Message`): `Some(Some(seq))` for the first at or after the search's start with a
    /// timestamp `>= ts` (the batch's remaining records checked), `Some(None)` when a record
    /// past the search's last seq comes first, `None` when the batch holds neither.
    fn records(
        &self,
        view: &BatchView,
        first: u64,
        batch_at: u64,
    ) -> Result<Option<Option<u64>>, Error> {
        let fail = |e: BatchError| self.corrupt(batch_at, &e);
        let mut records = view.records(MAX_UNCOMPRESSED_BATCH).map_err(fail)?;
        // The records before the search's start are checked, not built.
        for _ in 0..self.seq.saturating_sub(first) {
            match records.skip_record() {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(fail(e)),
                None => return Ok(None),
            }
        }
        while let Some(record) = records.next() {
            let record = record.map_err(fail)?;
            let seq = u64::try_from(record.offset).unwrap_or(first);
            if seq > self.end {
                return Ok(Some(None));
            }
            if record.timestamp >= self.ts {
                records.check_rest().map_err(fail)?;
                return Ok(Some(Some(seq)));
            }
        }
        Ok(None)
    }
}
