//! Reads: planning a read from the published state, decoding a segment's batches in chunks
//! (falling back to a scan from its start when an index entry lies), the descriptor cache of
//! closed segments, and timestamp lookups.

use std::fs::File;
use std::io;
use std::sync::Arc;

use bytes::Bytes;

use super::LazyIndex;
use super::{Inner, Seg, SegFile, State};
use crate::segment::{First, MIN_BATCH_LEN, Skip, batch_len, decode_chunk};
use crate::{Error, Record};

/// The longest chunk a read asks for at once (a batch longer than that is still read whole).
const MAX_CHUNK: u64 = 2 << 20;

/// An index interval up to this long is read whole by a read that ends within it.
const WHOLE_INTERVAL_BYTES: u64 = 16 << 10;

/// The length of each batch when an index interval of `bytes` holding `seqs` seqs is
/// consistent with `seqs` batches of one record each, all of one length: `bytes` divides
/// evenly, and the batches before the last fall short of `interval` (else the index would
/// have had an entry sooner). Only a guess to size a read by (a wrong one costs a second
/// read, never a wrong record: every batch is still checked where it is decoded).
fn even_batches_of_one(bytes: u64, seqs: u64, interval: u64) -> Option<u64> {
    if seqs < 2 || !bytes.is_multiple_of(seqs) {
        return None;
    }
    let each = bytes / seqs;
    (each >= MIN_BATCH_LEN as u64 && bytes - each < interval).then_some(each)
}

/// A plan (`None`: the read stops here), or the lazy index to load before planning again.
type Planned = Result<Option<ReadPlan>, Arc<LazyIndex>>;

/// Where and how one segment is read, taken from the published state under its lock.
pub(super) struct ReadPlan {
    pub(super) base: u64,
    pub(super) file: Arc<SegFile>,
    /// The active segment's open file; `None` for a closed segment (opened through the cache).
    pub(super) fd: Option<Arc<File>>,
    /// Byte position to start decoding at (an index entry's, or 0).
    pub(super) pos: u64,
    /// The seq of the batch at `pos`.
    pub(super) start_seq: u64,
    pub(super) size: u64,
    pub(super) last_seq: u64,
    avg_batch: u64,
    /// The index entry after the one at `pos` (`(seq, position)`): the batches before its seq
    /// end at its position, which bounds the first chunk of a read that ends before it.
    next: Option<(u64, u64)>,
}

impl ReadPlan {
    /// The plan for reading `seq` from `seg`; `Err` with the lazy index to load first (outside
    /// the state lock) when its entries are not loaded yet.
    fn of(seg: &Seg, seq: u64) -> Result<ReadPlan, Arc<LazyIndex>> {
        let (floor, next) = seg.offset_floor(seq)?;
        let (start_seq, pos) = floor.unwrap_or((seg.base_seq, 0));
        let records = seg.last_seq + 1 - seg.base_seq;
        Ok(ReadPlan {
            base: seg.base_seq,
            file: Arc::clone(&seg.file),
            fd: seg.open.clone(),
            pos,
            start_seq,
            size: seg.size,
            last_seq: seg.last_seq,
            avg_batch: seg.size / records.max(1),
            next,
        })
    }

    /// Whether `carry`, what the last read left over, is where a read of `from_seq` by this
    /// plan continues: the same segment file, from a batch at or before `from_seq` and at or
    /// after the plan's index floor, left by a read that stopped just before `from_seq`.
    fn continues(&self, c: &Carry, from_seq: u64) -> bool {
        c.base == self.base
            && Arc::ptr_eq(&c.file, &self.file)
            && c.pos >= self.pos
            && c.expect >= self.start_seq
            && c.expect <= from_seq
            && c.resume == from_seq
            && c.pos.saturating_add(c.bytes.len() as u64) <= self.size
    }
}

/// Checks in `st` that a read may start at `from_seq`; returns how many records to make room
/// for, or `None` when the read returns nothing (caught up, or `max == 0`).
fn check_range(st: &State, from_seq: u64, max: usize) -> Result<Option<usize>, Error> {
    let (first, last) = (st.first_seq(), st.last_seq());
    if from_seq < first || from_seq > last.saturating_add(1) {
        return Err(Error::OutOfRange {
            seq: from_seq,
            first,
            last,
        });
    }
    if last == 0 || from_seq > last || max == 0 {
        return Ok(None);
    }
    // Room for every record asked for (bounded: `max` may be `usize::MAX`).
    let available = usize::try_from(last - from_seq + 1).unwrap_or(usize::MAX);
    Ok(Some(max.min(available).min(64 << 10)))
}

/// The plan for reading the segment of `st` holding `seq` (see
/// [`plan_read`](Inner::plan_read)).
fn plan_in(st: &State, seq: u64, first: bool) -> Result<Planned, Error> {
    let i = st.segs.partition_point(|s| s.base_seq <= seq);
    let Some(seg) = i.checked_sub(1).and_then(|i| st.segs.get(i)) else {
        // Dropped by retention since the range check.
        return Err(Error::OutOfRange {
            seq,
            first: st.first_seq(),
            last: st.last_seq(),
        });
    };
    if seq > seg.last_seq {
        return Ok(Ok(None));
    }
    if let Some(marker) = &seg.hole {
        if !first {
            // Deliver what comes before the hole; the next read names it.
            return Ok(Ok(None));
        }
        return Err(Error::Quarantined {
            first_seq: seg.base_seq,
            last_seq: seg.last_seq,
            path: marker.clone(),
        });
    }
    Ok(ReadPlan::of(seg, seq).map(Some))
}

impl Inner {
    /// Up to `max` records from `from_seq` (see [`Log::read`](super::Log::read)).
    pub(super) fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        // The range check and the first segment's plan under one hold of the state lock.
        let Some((room, mut planned)) = self.start_read(from_seq, max)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(room);
        let mut seq = from_seq;
        while let Some(plan) = planned.take() {
            let before = out.len();
            let next = match self.read_planned(plan, seq, max - out.len(), &mut out) {
                Ok(next) => next,
                Err(Error::Io { source, .. })
                    if source.kind() == io::ErrorKind::NotFound && self.first_seq() > seq =>
                {
                    // The segment was dropped by retention before its file was opened.
                    let st = self.state.read();
                    return Err(Error::OutOfRange {
                        seq,
                        first: st.first_seq(),
                        last: st.last_seq(),
                    });
                }
                // Records decoded before a bad batch are delivered first; a read starting at
                // the bad batch returns the error.
                Err(_) if !out.is_empty() => break,
                Err(e) => return Err(e),
            };
            if out.len() >= max || (out.len() == before && next <= seq) {
                break;
            }
            seq = next;
            planned = self.plan_read(seq, out.is_empty())?;
        }
        Ok(out)
    }

    /// [`check_read`](Self::check_read) and the [`plan_read`](Self::plan_read) of `from_seq`
    /// under one hold of the state lock (loading lazy index entries outside it, as
    /// `plan_read` does): how many records to make room for and the first plan (`None`: the
    /// read stops at once), or `None` when the read returns nothing.
    fn start_read(
        &self,
        from_seq: u64,
        max: usize,
    ) -> Result<Option<(usize, Option<ReadPlan>)>, Error> {
        loop {
            let lazy = {
                let st = self.state.read();
                let Some(room) = check_range(&st, from_seq, max)? else {
                    return Ok(None);
                };
                match plan_in(&st, from_seq, true)? {
                    Ok(plan) => return Ok(Some((room, plan))),
                    Err(lazy) => lazy,
                }
            };
            lazy.load()?;
        }
    }

    /// Checks that a read may start at `from_seq`; returns how many records to make room for,
    /// or `None` when the read returns nothing (caught up, or `max == 0`).
    pub(super) fn check_read(&self, from_seq: u64, max: usize) -> Result<Option<usize>, Error> {
        check_range(&self.state.read(), from_seq, max)
    }

    /// The plan for reading the segment holding `seq`; `None` when the read stops here (past
    /// the end, or at a hole after some records were read). `first` tells whether nothing
    /// was read yet: a read that starts in a hole fails with [`Error::Quarantined`].
    pub(super) fn plan_read(&self, seq: u64, first: bool) -> Result<Option<ReadPlan>, Error> {
        // Index entries not loaded yet are loaded outside the state lock, so that appends do
        // not wait for the file reads. Each pass that does not return loads one lazy index for
        // good, and no lazy index is created after open, so this ends.
        loop {
            match self.try_plan_read(seq, first)? {
                Ok(plan) => return Ok(plan),
                Err(lazy) => {
                    lazy.load()?;
                }
            }
        }
    }

    /// [`plan_read`](Self::plan_read) under one hold of the state lock.
    fn try_plan_read(&self, seq: u64, first: bool) -> Result<Planned, Error> {
        plan_in(&self.state.read(), seq, first)
    }

    /// [`read_segment`](Self::read_segment) by `plan`, again from the segment's start when a
    /// read from an index entry fails before giving a record (a lying entry shows anywhere on
    /// the way); damage the read from the start meets too is reported where it lies.
    fn read_planned(
        &self,
        plan: ReadPlan,
        seq: u64,
        max: usize,
        out: &mut Vec<Record>,
    ) -> Result<u64, Error> {
        let before = out.len();
        let result = self.read_segment(&plan, seq, max, out);
        if let Err(Error::Corrupt { position, .. }) = &result
            && plan.pos != 0
            && out.len() == before
        {
            // The index entry may not point at the batch it names (an index rewritten with a
            // valid checksum, or bit rot in it): never trust it over the `.log`, read the
            // segment from its start instead.
            tracing::warn!(
                path = %plan.file.index_path.display(),
                seq = plan.start_seq,
                position = plan.pos,
                failed_at = *position,
                "a read from an index entry failed; reading the segment from its start"
            );
            // The entry after the floor is from the same index: it does not size these reads.
            let from_start = ReadPlan {
                pos: 0,
                start_seq: plan.base,
                next: None,
                ..plan
            };
            return self.read_segment(&from_start, seq, max, out);
        }
        result
    }

    /// Reads records `seq..` of one segment into `out`; returns the seq after the last one read.
    ///
    /// Each byte is read once: a chunk that ends inside a batch keeps that batch's first bytes
    /// and the next chunk reads only what follows them, and the bytes a read leaves over (the
    /// batch its `max` stopped inside, and what followed it) are where the next sequential
    /// read starts (see [`Carry`]). Every batch a record comes from is checked (CRC, seq):
    /// in the read that returns it, or, for the carried batch a read stopped inside, in that
    /// read, on the same buffer (`First::Checked`); its records and seqs are checked again.
    fn read_segment(
        &self,
        plan: &ReadPlan,
        from_seq: u64,
        max: usize,
        out: &mut Vec<Record>,
    ) -> Result<u64, Error> {
        let path = &plan.file.log_path;
        let fd = match &plan.fd {
            Some(fd) => Arc::clone(fd),
            None => self.fds.get(&plan.file)?,
        };
        let mut pos = plan.pos;
        let mut expect = plan.start_seq;
        // Bytes at `pos` already read, from a batch boundary on.
        let mut carried = Bytes::new();
        // The carried batch the last read checked whole (see [`Carry::checked`]).
        let mut checked = None;
        if let Some(c) = self
            .fds
            .take_carry()
            .filter(|c| plan.continues(c, from_seq))
        {
            pos = c.pos;
            expect = c.expect;
            carried = c.bytes;
            checked = c.checked.filter(|h| h.batch.seq == c.expect);
        }
        let mut inside = None;
        let mut need = max;
        // The seq after the last record read (a batch `need` stopped inside is read again
        // from its start, so `expect` may lag behind it).
        let mut read_to = from_seq;
        let skip = from_seq.saturating_sub(expect);
        // Batches to reach: when batches are about `avg_batch` long, the chunk ends just past
        // the last one asked for (a little slack, not a whole extra batch: a short chunk only
        // costs one more read, of what follows the bytes already read).
        let mut want_frames = (need as u64).saturating_add(skip);
        // When every batch asked for comes before the next index entry, the first chunk need
        // not go past that entry's position, and ends exactly there when the last batch asked
        // for is the one just before it (a point read through a dense index reads one batch).
        //
        // The chunk also ends at the entry when the interval is short (up to
        // `WHOLE_INTERVAL_BYTES`: a few pages cost less than a second read, which a batch cut
        // short would take), or at least twice `index_interval_bytes` (then it is mostly its
        // last batch: the batches before it hold fewer bytes than one interval, or an entry
        // would have come sooner). In a longer interval of many batches, the chunk ends where
        // the last batch asked for ends when the interval's bytes are spread evenly over its
        // seqs (a log of like-sized appends), plus a quarter of a batch.
        let interval = self.opts.index_interval_bytes;
        // The segment's end serves as the entry after the last one.
        let next = plan
            .next
            .or(Some((plan.last_seq.saturating_add(1), plan.size)));
        let mut bound = next.and_then(|(next_seq, next_pos)| {
            let past_wanted = from_seq.saturating_add(need as u64);
            if past_wanted > next_seq || next_pos <= pos || pos != plan.pos {
                return None;
            }
            let to_next = next_pos - pos;
            if past_wanted == next_seq || to_next >= interval.saturating_mul(2) {
                return Some(to_next);
            }
            let seqs = next_seq.saturating_sub(plan.start_seq).max(1);
            if let Some(each) = even_batches_of_one(to_next, seqs, interval) {
                // Likely like-sized batches of one record (single appends of like-sized
                // values): the chunk ends exactly where the last batch asked for ends, as
                // an index entry at it would say. A wrong guess costs a second read only.
                let wanted = past_wanted.saturating_sub(plan.start_seq);
                return Some(wanted.saturating_mul(each).min(to_next));
            }
            if to_next <= WHOLE_INTERVAL_BYTES {
                return Some(to_next);
            }
            let per_seq = to_next / seqs;
            let to_wanted = past_wanted
                .saturating_sub(plan.start_seq)
                .saturating_mul(per_seq)
                .saturating_add(per_seq / 4 + 64);
            Some(to_wanted.min(to_next))
        });
        while need > 0 && pos < plan.size {
            let left = plan.size - pos;
            let have = carried.len();
            let first_len = batch_len(&carried);
            let (chunk, first) = if first_len.is_some_and(|n| n <= have) {
                // At least one whole batch is already read: decode it before reading more.
                bound = None;
                let first = checked.take().map_or(First::Seq(expect), First::Checked);
                (std::mem::take(&mut carried), first)
            } else {
                checked = None;
                let avg = plan.avg_batch.max(64);
                let bytes = want_frames.saturating_mul(avg);
                let estimate = bytes
                    .saturating_add((bytes / 8).min(avg) + 256)
                    .clamp(1 << 10, MAX_CHUNK);
                let want = match bound.take() {
                    Some(first) => first.clamp(64, MAX_CHUNK),
                    // Ends at the first batch boundary the index knows past the estimate
                    // (at most an interval and a batch further), so the batch holding the
                    // last record asked for is read whole, in this one read; what it reads
                    // past that is what a sequential reader's next read starts from.
                    None => self
                        .boundary_from(plan.base, pos, pos.saturating_add(estimate))
                        .map(|end| end - pos)
                        .filter(|&to| to <= MAX_CHUNK.max(estimate))
                        .unwrap_or(estimate),
                };
                // The batch whose start was carried is read whole.
                let want = first_len
                    .map_or(want, |n| want.max(n as u64))
                    .max(have as u64)
                    .min(left);
                let more = usize::try_from(want).unwrap_or(usize::MAX) - have;
                let chunk = self
                    .bufs
                    .read_after(&carried, &fd, path, pos + have as u64, more)?;
                let chunk = match batch_len(&chunk) {
                    // A batch longer than the chunk: read the rest of it.
                    Some(n) if n > chunk.len() && n as u64 <= left => {
                        let more = n - chunk.len();
                        let at = pos + chunk.len() as u64;
                        self.bufs.read_after(&chunk, &fd, path, at, more)?
                    }
                    _ => chunk,
                };
                (chunk, First::Seq(expect))
            };
            let before = out.len();
            let end = decode_chunk(
                &chunk,
                from_seq,
                need,
                first,
                plan.last_seq,
                // The entry's batch too (`read_planned` reads again from the start on failure).
                Skip::All,
                out,
            )
            .map_err(|e| e.into_error(path, pos))?;
            let (consumed, next_seq) = (end.consumed, end.next_seq);
            let got = out.len() - before;
            // Kept only when this decode ends the read (`max` stopped inside the batch, so
            // the carry is the rest of this chunk, that batch first).
            inside = end.inside.filter(|_| got == need);
            if let Some(last) = out.last().filter(|_| got > 0) {
                read_to = last.seq + 1;
            }
            if consumed == 0 && got == 0 {
                return Err(Error::Corrupt {
                    path: path.clone(),
                    position: pos,
                    reason: format!("incomplete batch: segment data ends at byte {}", plan.size),
                });
            }
            pos += consumed as u64;
            if let Some(n) = next_seq {
                expect = n;
            }
            carried = chunk.slice(consumed.min(chunk.len())..);
            need -= got;
            want_frames = need as u64;
        }
        if need > 0 && expect <= plan.last_seq {
            return Err(Error::Corrupt {
                path: path.clone(),
                position: pos,
                reason: format!(
                    "segment data ends before seq {expect} (its last seq is {})",
                    plan.last_seq
                ),
            });
        }
        if !carried.is_empty() {
            self.fds.put_carry(Carry {
                base: plan.base,
                file: Arc::clone(&plan.file),
                pos,
                expect,
                resume: read_to.max(expect),
                bytes: carried,
                checked: inside,
            });
        }
        Ok(read_to.max(expect))
    }

    /// The first batch boundary at or after byte `limit` of segment `base`, past `pos`,
    /// known without reading the file: the position of the first indexed batch there, or the
    /// end of the segment's published batches. `None` when the segment is gone or its index
    /// entries are not loaded (a later entry could be far past the first boundary).
    fn boundary_from(&self, base: u64, pos: u64, limit: u64) -> Option<u64> {
        let st = self.state.read();
        let i = st.segs.partition_point(|s| s.base_seq < base);
        let seg = st
            .segs
            .get(i)
            .filter(|s| s.base_seq == base && s.hole.is_none())?;
        if seg.size <= limit {
            return Some(seg.size).filter(|&end| end > pos);
        }
        let first_from = |entries: &[(u64, u64)]| {
            let i = entries.partition_point(|&(_, at)| at < limit);
            entries.get(i).map(|&(_, at)| at)
        };
        let loaded = match &seg.lazy {
            None => None,
            Some(lazy) => Some(first_from(&lazy.get()?.offsets)),
        };
        loaded
            .flatten()
            .or_else(|| first_from(&seg.offsets))
            .or(Some(seg.size))
            .filter(|&end| end > pos)
    }
}

mod clock;
mod fds;
#[cfg(test)]
mod tests;
mod time;

use self::fds::Carry;
pub(super) use self::fds::FdCache;
