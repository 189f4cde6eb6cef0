//! Raw batches: appending a producer's batch as it came, and reading whole batches as the file
//! holds them.

use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::Bytes;
use krabka_protocol::batch::{BatchError, BatchView};

use super::Inner;
use super::read::ReadPlan;
use crate::Error;
use crate::segment::raw::{Batches, check_raw_batch};
use crate::segment::{
    BATCH_HEADER_LEN, MAX_BATCH_RECORD_BYTES, MAX_UNCOMPRESSED_BATCH, Parsed, batch_len,
    parse_batch, peek_batch,
};

impl Inner {
    /// See [`Log::append_raw_batch`](super::Log::append_raw_batch).
    pub(super) fn append_raw_batch(&self, batch: &[u8]) -> Result<RangeInclusive<u64>, Error> {
        // Checked and written from the caller's bytes: no copy of the batch.
        let info = check_raw_batch(batch)?;
        self.append_raw(batch, info)
    }

    /// See [`Log::read_batches`](super::Log::read_batches).
    pub(super) fn read_batches(&self, from_seq: u64, max_bytes: usize) -> Result<Batches, Error> {
        if self.check_read(from_seq, 1)?.is_none() {
            return Ok(Batches::new(
                Bytes::new(),
                from_seq,
                from_seq,
                0,
                &self.dir,
                0,
            ));
        }
        let Some(plan) = self.plan_read(from_seq, true)? else {
            return Ok(Batches::new(
                Bytes::new(),
                from_seq,
                from_seq,
                0,
                &self.dir,
                0,
            ));
        };
        let from_index = plan.pos != 0;
        match self.read_batches_in(&plan, plan.pos, plan.start_seq, from_seq, max_bytes) {
            // An index entry that does not point at the batch it names: read the segment from
            // its start instead (as `read` does).
            Err(Error::Corrupt { position, .. }) if from_index && position == plan.pos => {
                self.read_batches_in(&plan, 0, plan.base, from_seq, max_bytes)
            }
            other => other,
        }
    }

    /// The first seq in `from..=last` whose record has a timestamp `>= ts`, read batch by
    /// batch: a batch whose largest timestamp is below `ts` is passed over by its header, and
    /// records are read as stored, so a record a `Message` cannot hold (a null value, a
    /// control batch) does not stop the search.
    pub(super) fn first_at_or_after(
        &self,
        from: u64,
        last: u64,
        ts: i64,
    ) -> Result<Option<u64>, Error> {
        let mut seq = from;
        while seq <= last {
            let batches = match self.read_batches(seq, 1 << 20) {
                Ok(b) => b,
                Err(Error::OutOfRange { .. }) => break,
                Err(e) => return Err(e),
            };
            if batches.is_empty() {
                break;
            }
            for (at, batch) in batches.positions() {
                let view = BatchView::parse(&batch).map_err(|e| Error::Corrupt {
                    path: batches.path().to_path_buf(),
                    position: at,
                    reason: e.to_string(),
                })?;
                let header = view.header();
                if header.max_timestamp < ts
                    || u64::try_from(header.last_offset()).is_ok_and(|l| l < seq)
                {
                    continue;
                }
                let records = view
                    .records(MAX_UNCOMPRESSED_BATCH)
                    .map_err(|e| corrupt_at(batches.path(), at, &e))?;
                for r in records {
                    let r = r.map_err(|e| corrupt_at(batches.path(), at, &e))?;
                    let s = u64::try_from(r.offset).unwrap_or(0);
                    if s > last {
                        return Ok(None);
                    }
                    if s >= seq && r.timestamp >= ts {
                        return Ok(Some(s));
                    }
                }
            }
            seq = batches.next_seq();
        }
        Ok(None)
    }

    /// Whole batches of `plan`'s segment from the one holding `from_seq`, stepping over the
    /// ones before it from byte `pos` (the batch of seq `expect`), up to `max_bytes` (at least
    /// one batch).
    fn read_batches_in(
        &self,
        plan: &ReadPlan,
        mut pos: u64,
        mut expect: u64,
        from_seq: u64,
        max_bytes: usize,
    ) -> Result<Batches, Error> {
        let path = &plan.file.log_path;
        let fd = match &plan.fd {
            Some(fd) => Arc::clone(fd),
            None => self.fds.get(&plan.file)?,
        };
        let read = |at: u64, len: u64| {
            let len = usize::try_from(len.min(plan.size - at)).unwrap_or(usize::MAX);
            self.bufs.read_available(&fd, path, at, len)
        };
        let corrupt = |position: u64, reason: String| Error::Corrupt {
            path: path.clone(),
            position,
            reason,
        };
        // One read of the budget and then some (the batches before the one holding
        // `from_seq`, at most about an index interval of them): stepped over by their headers.
        let budget = (max_bytes as u64).max(BATCH_HEADER_LEN as u64);
        // Where the whole batches within the budget from `at` end, when the index (or the
        // segment's end) tells: reading only up to there leaves no partial batch to read again
        // by the next call.
        let bounded = |at: u64| self.boundary_within(plan.base, at, at.saturating_add(budget));
        let (start, start_end) = (pos, bounded(pos));
        let first = start_end.map_or(
            budget.saturating_add(self.opts.index_interval_bytes),
            |end| end - pos,
        );
        // A batch longer than this is not one an append wrote (a raw batch is at most
        // `max_message_bytes`, one of `append_batch` at most `MAX_BATCH_RECORD_BYTES` of records
        // whatever `max_message_bytes` is); reading it whole stops there.
        let longest = (MAX_BATCH_RECORD_BYTES + BATCH_HEADER_LEN) as u64;
        let longest = longest
            .max(self.opts.max_message_bytes)
            .max(budget.saturating_add(self.opts.index_interval_bytes));
        let mut buf = read(pos, first)?;
        let mut buf_at = pos;
        while pos < plan.size {
            let off = usize::try_from(pos - buf_at).unwrap_or(usize::MAX);
            let rest = buf.get(off..).unwrap_or_default();
            match batch_len(rest) {
                Some(n) if n <= rest.len() => {}
                // Torn or damaged where this read already starts: the check below names it.
                _ if off == 0 => break,
                n => {
                    let n = n.unwrap_or(0) as u64;
                    buf = read(pos, first.max(n.min(longest)))?;
                    buf_at = pos;
                    continue;
                }
            }
            match peek_batch(rest) {
                Some((base, last, len)) if base == expect && last < from_seq => {
                    pos += len as u64;
                    expect = last + 1;
                }
                Some((base, _, _)) if base == expect => break,
                Some((base, _, _)) => {
                    return Err(corrupt(
                        pos,
                        format!("batch starts at seq {base}, expected {expect}"),
                    ));
                }
                None => break,
            }
        }
        // From here, whole batches up to the budget, each checked: from the bytes read when
        // they hold the budget (or the rest of the segment), else from one more read.
        let off = usize::try_from(pos - buf_at).unwrap_or(usize::MAX);
        let rest = buf.slice(off.min(buf.len())..);
        let first_len = batch_len(&rest).unwrap_or(0) as u64;
        // Looked up again only when batches before `from_seq` were stepped over.
        let end = if pos == start {
            start_end
        } else {
            bounded(pos)
        };
        let span = end.map_or(budget, |end| end - pos);
        let want = span.max(first_len).min(plan.size - pos);
        let data = if rest.len() as u64 >= want {
            rest
        } else {
            read(pos, span.max(first_len.min(longest)))?
        };
        let (mut off, mut count, mut last_seq) = (0usize, 0usize, expect.saturating_sub(1));
        while off < data.len() {
            let rest = data.slice(off..);
            let batch = match parse_batch(&rest) {
                Parsed::Incomplete => break,
                Parsed::Bad(reason) => {
                    if count > 0 {
                        break;
                    }
                    return Err(corrupt(pos + off as u64, reason));
                }
                Parsed::Batch(f) => f,
            };
            if batch.seq != expect {
                if count > 0 {
                    break;
                }
                return Err(corrupt(
                    pos + off as u64,
                    format!("batch starts at seq {}, expected {expect}", batch.seq),
                ));
            }
            if batch.last > plan.last_seq {
                // Past the segment's end: damage, never batches to hand out. Those before it
                // are returned first.
                if count > 0 {
                    break;
                }
                return Err(corrupt(
                    pos + off as u64,
                    crate::segment::beyond_end(0, batch.seq, batch.last, plan.last_seq).reason,
                ));
            }
            if count > 0 && off + batch.len > max_bytes {
                break;
            }
            off += batch.len;
            count += 1;
            last_seq = batch.last;
            expect = batch.last + 1;
        }
        if count == 0 && pos < plan.size {
            return Err(corrupt(
                pos,
                format!("incomplete batch: segment data ends at byte {}", plan.size),
            ));
        }
        let first_seq = if count == 0 {
            from_seq
        } else {
            expect_first(&data)
        };
        Ok(Batches::new(
            data.slice(..off),
            first_seq,
            last_seq,
            count,
            path,
            pos,
        ))
    }
}

impl Inner {
    /// [`Seg::boundary_within`](crate::layout::Seg::boundary_within) of segment `base`, which
    /// retention may have dropped meanwhile (then `None`).
    fn boundary_within(&self, base: u64, pos: u64, limit: u64) -> Option<u64> {
        let st = self.state.read();
        let i = st.segs.partition_point(|s| s.base_seq < base);
        st.segs
            .get(i)
            .filter(|s| s.base_seq == base && s.hole.is_none())?
            .boundary_within(pos, limit)
    }
}

fn corrupt_at(path: &std::path::Path, position: u64, e: &BatchError) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        position,
        reason: e.to_string(),
    }
}

/// The first seq of the batch at the start of `data` (already checked).
fn expect_first(data: &[u8]) -> u64 {
    peek_batch(data).map_or(0, |(base, _, _)| base)
}
