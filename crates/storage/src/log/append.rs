//! Appends: encoding messages into record batches, writing them at the end of the active segment,
//! publishing them to readers, rolling to a new segment, and the index files a roll writes.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::ops::RangeInclusive;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use krabka_protocol::Message;
use krabka_protocol::batch::{
    BatchPiece, Compression, NO_PARTITION_LEADER_EPOCH, max_timestamp_of, record_size,
    set_base_offset, set_partition_leader_epoch,
};
use smallvec::SmallVec;

use super::segment_age::SegmentAge;
use super::{Inner, Seg, SegFile};
use crate::fault::Op;

use crate::index::IndexBuilder;
use crate::layout::{seg_file, write_indexes};
use crate::segment::raw::RawBatchInfo;
use crate::segment::{
    BATCH_HEADER_LEN, MAX_BATCH_RECORD_BYTES, batch_len, encode_batch_from,
    encode_batch_from_split, segment_paths,
};
use crate::{Error, SyncPolicy};

/// Values at least this long are written from where they lie (a vectored write), not copied
/// into the append buffer first. Below it the copy costs less than the slices of the write:
/// batches of 1 KiB values appended 0.7× as fast through 201 slices a batch as copied, 16 KiB
/// values as fast as a raw write of the batch (docs/benchmarks.md).
const BORROW_VALUE_BYTES: usize = 4096;

/// The most slices one `pwritev` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// At least the bytes of `msg`'s batch of one ([`BATCH_HEADER_LEN`] + `record_size(msg, 0,
/// 0)`), cheaper to compute: every varint counted at its largest (5 bytes, a varlong 10).
fn size_bound(msg: &Message) -> u64 {
    let headers: usize = msg
        .headers
        .iter()
        .map(|h| 10 + h.key.len() + h.value.len())
        .sum();
    let key = msg.key.as_ref().map_or(0, |k| k.len());
    // length, attributes, timestamp delta, offset delta, key length, value length, header count
    let fields = 5 + 1 + 10 + 5 + 5 + 5 + 5;
    (BATCH_HEADER_LEN + fields + key + msg.value.len() + headers) as u64
}

/// `slices` emptied, as a list of slices of another lifetime, in the same memory: an empty
/// `Vec` collected through `map` into one of a type of the same layout keeps its allocation
/// (the standard library collects in place), so a write of many pieces allocates its slice list
/// once, not per call.
fn recycle_slices<'b>(mut slices: Vec<IoSlice<'_>>) -> Vec<IoSlice<'b>> {
    slices.clear();
    slices.into_iter().map(|_| IoSlice::new(&[])).collect()
}

/// Counts an appender in [`Inner::writers`] while it lives, for a group commit to wait for
/// (see `wait_for_writers`). Under [`SyncPolicy::Never`] no append fsyncs, so nothing is
/// counted: two locked operations less per append, and an explicit `Log::sync` gathers
/// without them.
struct Writing<'a>(Option<&'a AtomicUsize>);

impl<'a> Writing<'a> {
    fn enter(writers: &'a AtomicUsize, policy: SyncPolicy) -> Self {
        if policy == SyncPolicy::Never {
            return Writing(None);
        }
        writers.fetch_add(1, Ordering::AcqRel);
        Writing(Some(writers))
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.0 {
            w.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Appender-private state, under the append lock.
#[derive(Debug)]
pub(super) struct Appender {
    pub(super) active: Arc<SegFile>,
    /// The active segment's `.log`, open for writing.
    pub(super) file: Arc<File>,
    /// The true end of the active segment: the bytes of its batches.
    pub(super) size: u64,
    /// The length of its file, at least `size` (more when preallocated).
    pub(super) file_len: u64,
    /// Whether preallocating failed for this segment (not tried again; see
    /// [`Inner::preallocate`]).
    pub(super) preallocated: bool,
    pub(super) next_seq: u64,
    builder: IndexBuilder,
    /// The record batches being appended (reused).
    buf: Vec<u8>,
    /// With an uncompressed append, the pieces the batches in `buf` are made of: its bytes and
    /// the large values left out of it (reused).
    pieces: Vec<BatchPiece>,
    /// The slice list of a vectored write of more pieces than fit on the stack: always empty
    /// here, kept for its memory ([`recycle_slices`]).
    slices: Vec<IoSlice<'static>>,
    /// The `partitionLeaderEpoch` every batch is stamped with (-1: none).
    pub(super) leader_epoch: i32,
    /// Whether the clean-shutdown marker this open trusted is still on disk: it goes before
    /// the first write.
    pub(super) clean_marker: bool,
    /// Whether the first write has yet to remove what a close or a crash may have left: the
    /// clean-shutdown marker and the active segment's index files.
    pub(super) leftovers: bool,
    /// Since when the active segment holds records (for [`Options::roll_after`](crate::Options::roll_after)).
    pub(super) age: SegmentAge,
}

impl Appender {
    /// The appender of the active (last) segment of `segs`, which must be open; `builder`
    /// holds its index entries so far.
    pub(super) fn on_active(segs: &[Seg], builder: IndexBuilder) -> Option<Appender> {
        let active = segs.last()?;
        Some(Appender {
            active: Arc::clone(&active.file),
            file: active.open.clone()?,
            size: active.size,
            file_len: active.size,
            preallocated: false,
            next_seq: active.last_seq + 1,
            builder,
            buf: Vec::new(),
            pieces: Vec::new(),
            slices: Vec::new(),
            leader_epoch: NO_PARTITION_LEADER_EPOCH,
            clean_marker: false,
            leftovers: true,
            age: SegmentAge::found(active.size),
        })
    }

    /// Moves on to a new, empty active segment.
    pub(super) fn switch_to(&mut self, sf: Arc<SegFile>, file: Arc<File>, index_interval: u64) {
        self.age = SegmentAge::Empty;
        self.active = sf;
        self.file = file;
        self.size = 0;
        self.file_len = 0;
        self.preallocated = false;
        self.builder = IndexBuilder::new(index_interval);
    }
}

impl Inner {
    /// Appends `msgs` with contiguous seqs (see [`Log::append_batch`](super::Log::append_batch)).
    pub(super) fn append_batch(&self, msgs: &[Message]) -> Result<RangeInclusive<u64>, Error> {
        let writing = Writing::enter(&self.writers, self.opts.sync);
        let mut guard = self.appender.lock();
        self.check_poisoned()?;
        let ap = &mut *guard;
        // Check the whole batch first: nothing is written when one message is too large.
        for m in msgs {
            if size_bound(m) <= self.opts.max_message_bytes {
                continue;
            }
            let size = (BATCH_HEADER_LEN + record_size(m, 0, 0)) as u64;
            if size > self.opts.max_message_bytes {
                return Err(Error::MessageTooLarge {
                    size,
                    max: self.opts.max_message_bytes,
                });
            }
        }
        if !msgs.is_empty() {
            let last = ap.next_seq.saturating_add(msgs.len() as u64 - 1);
            if i64::try_from(last).is_err() {
                return Err(Error::SeqOutOfRange { seq: last });
            }
            self.invalidate_clean_shutdown(ap)?;
            self.roll_if_due(ap)?;
        }
        let first = ap.next_seq;
        let mut i = 0;
        while i < msgs.len() {
            ap.buf.clear();
            ap.pieces.clear();
            // Bytes of the batches encoded for this write (borrowed values included).
            let mut pending = 0u64;
            let start = i;
            let mut max_ts = i64::MIN;
            // Batches for the active segment while it has room: each takes the messages that
            // fit the segment and the batch cap.
            while let Some(m) = msgs.get(i) {
                let used = ap.size + pending;
                let room = self.opts.max_bytes.saturating_sub(used);
                let one = (BATCH_HEADER_LEN + record_size(m, 0, 0)) as u64;
                if used > 0 && one > room {
                    break;
                }
                let cap = usize::try_from(room.saturating_sub(BATCH_HEADER_LEN as u64))
                    .unwrap_or(usize::MAX)
                    .min(MAX_BATCH_RECORD_BYTES);
                let seq = ap.next_seq + (i - start) as u64;
                let at = ap.buf.len();
                let rest = msgs.get(i..).unwrap_or_default();
                let encoded = if self.opts.compression == Compression::None {
                    // Large values go to the kernel where they lie (one vectored write).
                    encode_batch_from_split(
                        seq,
                        rest,
                        i,
                        cap,
                        BORROW_VALUE_BYTES,
                        &mut ap.buf,
                        &mut ap.pieces,
                    )
                } else {
                    encode_batch_from(seq, rest, self.opts.compression, cap, &mut ap.buf)
                };
                let taken = match encoded {
                    Ok(n) => n.max(1),
                    Err(e) => {
                        // Nothing of this call is written or published.
                        ap.buf.clear();
                        ap.pieces.clear();
                        if start > 0 {
                            self.poison(&e);
                        }
                        return Err(e);
                    }
                };
                if ap.leader_epoch != NO_PARTITION_LEADER_EPOCH
                    && let Some(batch) = ap.buf.get_mut(at..)
                {
                    // Written by the encoder just now: a whole batch header.
                    let _ = set_partition_leader_epoch(batch, ap.leader_epoch);
                }
                // The whole batch, borrowed values included, as its header gives it.
                let len = ap.buf.get(at..).and_then(batch_len).map_or(0, |n| n as u64);
                pending += len;
                // The encoder's maxTimestamp: the largest of the records it took.
                let batch_max = ap
                    .buf
                    .get(at..)
                    .and_then(|b| max_timestamp_of(b).ok())
                    .unwrap_or(i64::MIN);
                ap.builder.observe(seq, used, len, batch_max);
                max_ts = max_ts.max(batch_max);
                i += taken;
            }
            if i == start {
                self.roll_locked(ap)?;
                continue;
            }
            let count = (i - start) as u64;
            self.write_and_publish(ap, msgs, &[], pending, count, max_ts)?;
        }
        let last = ap.next_seq - 1;
        if !msgs.is_empty() {
            self.counters.batch(ap);
        }
        drop(guard);
        drop(writing);
        if msgs.is_empty() {
            return Ok(first..=last);
        }
        // Outside the append lock: concurrent appenders share the fsync.
        self.sync_after_append(last, msgs.len() as u64)?;
        Ok(first..=last)
    }

    /// Writes the batches encoded in `ap.buf` and `ap.pieces` (`len` bytes; with pieces, the
    /// values they name are `msgs`'; with `raw_rest` not empty, `ap.buf` holds a raw batch's
    /// header and `raw_rest` the bytes after it), `count` records, the largest timestamp `max_ts`, at the
    /// end of the active segment and publishes them to readers. A failed write poisons the log
    /// and cuts the partial write off (best effort).
    fn write_and_publish(
        &self,
        ap: &mut Appender,
        msgs: &[Message],
        raw_rest: &[u8],
        len: u64,
        count: u64,
        max_ts: i64,
    ) -> Result<(), Error> {
        self.preallocate(ap, len);
        // The slices of a vectored write: on the stack for a raw batch or a single append's
        // few pieces, so an append allocates nothing for them.
        let written = if !raw_rest.is_empty() {
            let mut slices = [IoSlice::new(&ap.buf), IoSlice::new(raw_rest)];
            self.write_vectored_at(&ap.file, &mut slices, ap.size, len)
        } else if ap.pieces.iter().any(|p| matches!(p, BatchPiece::Value(_))) {
            let pieces = ap.pieces.iter().map(|p| match p {
                BatchPiece::Bytes(r) => IoSlice::new(ap.buf.get(r.clone()).unwrap_or_default()),
                BatchPiece::Value(i) => {
                    IoSlice::new(msgs.get(*i).map_or(&[][..], |m| &m.value[..]))
                }
            });
            if ap.pieces.len() <= 8 {
                let mut slices: SmallVec<[IoSlice<'_>; 8]> = pieces.collect();
                self.write_vectored_at(&ap.file, &mut slices, ap.size, len)
            } else {
                // A batch of many large values: the list the last such write used.
                let mut slices = recycle_slices(std::mem::take(&mut ap.slices));
                slices.extend(pieces);
                let written = self.write_vectored_at(&ap.file, &mut slices, ap.size, len);
                ap.slices = recycle_slices(slices);
                written
            }
        } else {
            self.write_at(&ap.file, &ap.buf, ap.size)
        };
        if let Err(e) = written {
            let e = Error::io(&ap.active.log_path, e);
            self.poison(&e);
            // Best effort: drop a partial write so the file ends at a batch boundary.
            if ap.file.set_len(ap.size).is_ok() {
                ap.file_len = ap.size;
            }
            return Err(e);
        }
        ap.file_len = ap.file_len.max(ap.size + len);
        self.counters.written(ap, count, len);
        if ap.size == 0 {
            ap.age = SegmentAge::from_now();
        }
        let last = ap.next_seq + count - 1;
        ap.size += len;
        ap.next_seq += count;
        let mut st = self.state.write();
        if let Some(seg) = st.segs.last_mut() {
            seg.last_seq = last;
            seg.size = ap.size;
            seg.max_timestamp = seg.max_timestamp.max(max_ts);
            seg.offsets.append(&mut ap.builder.offsets);
            seg.times.append(&mut ap.builder.times);
        }
        Ok(())
    }

    /// Appends one raw batch that [`check_raw_batch`] passed (see
    /// [`Log::append_raw_batch`](super::Log::append_raw_batch)): stored as given, but for its
    /// base offset (the next seq) and partition leader epoch (the log's), written in place.
    pub(super) fn append_raw(
        &self,
        batch: &[u8],
        info: RawBatchInfo,
    ) -> Result<RangeInclusive<u64>, Error> {
        let len = batch.len() as u64;
        if len > self.opts.max_message_bytes {
            return Err(Error::MessageTooLarge {
                size: len,
                max: self.opts.max_message_bytes,
            });
        }
        let writing = Writing::enter(&self.writers, self.opts.sync);
        let mut guard = self.appender.lock();
        self.check_poisoned()?;
        let ap = &mut *guard;
        let first = ap.next_seq;
        let last = first.saturating_add(info.count - 1);
        let base = i64::try_from(first).map_err(|_| Error::SeqOutOfRange { seq: first })?;
        if i64::try_from(last).is_err() {
            return Err(Error::SeqOutOfRange { seq: last });
        }
        self.invalidate_clean_shutdown(ap)?;
        self.roll_if_due(ap)?;
        if ap.size > 0 && ap.size.saturating_add(len) > self.opts.max_bytes {
            self.roll_locked(ap)?;
        }
        // Only the header is copied (its base offset and leader epoch rewritten); the rest
        // of the caller's bytes go to the kernel where they lie.
        let (header, rest) = batch.split_at(BATCH_HEADER_LEN.min(batch.len()));
        ap.buf.clear();
        ap.buf.extend_from_slice(header);
        let stamped = set_base_offset(&mut ap.buf, base)
            .and_then(|()| set_partition_leader_epoch(&mut ap.buf, ap.leader_epoch));
        if let Err(e) = stamped {
            return Err(Error::InvalidBatch {
                field: "baseOffset",
                at: 0,
                reason: e.to_string(),
            });
        }
        ap.pieces.clear();
        ap.builder.observe(first, ap.size, len, info.max_timestamp);
        self.write_and_publish(ap, &[], rest, len, info.count, info.max_timestamp)?;
        self.counters.batch(ap);
        drop(guard);
        drop(writing);
        self.sync_after_append(last, info.count)?;
        Ok(first..=last)
    }

    /// Writes `slices` (`len` bytes in all) at `pos` of a segment file with `pwritev`, at most
    /// [`IOV_MAX`] slices a call, through the fault seam.
    fn write_vectored_at(
        &self,
        f: &File,
        slices: &mut [IoSlice<'_>],
        pos: u64,
        len: u64,
    ) -> io::Result<()> {
        if let Err(e) = self.faults.check(Op::Write) {
            // A torn write: the first half of the bytes land.
            let mut left = len / 2;
            let mut at = pos;
            for s in slices.iter() {
                let n = (s.len() as u64).min(left);
                let part = s.get(..n as usize).unwrap_or_default();
                let _ = f.write_all_at(part, at);
                at += n;
                left -= n;
            }
            return Err(e);
        }
        let mut rest = slices;
        let mut at = pos;
        while !rest.is_empty() {
            let upto = rest.len().min(IOV_MAX);
            let n = match rustix::io::pwritev(f, rest.get(..upto).unwrap_or_default(), at) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e == rustix::io::Errno::INTR => continue,
                Err(e) => return Err(e.into()),
            };
            at += n as u64;
            IoSlice::advance_slices(&mut rest, n);
        }
        Ok(())
    }

    /// Writes `buf` at `pos` of a segment file (through the fault seam).
    pub(super) fn write_at(&self, f: &File, buf: &[u8], pos: u64) -> io::Result<()> {
        if let Err(e) = self.faults.check(Op::Write) {
            // A torn write: half of the bytes land.
            let _ = f.write_all_at(buf.get(..buf.len() / 2).unwrap_or(&[]), pos);
            return Err(e);
        }
        f.write_all_at(buf, pos)
    }

    /// Closes the active segment (under the append lock): syncs it, writes its index files and
    /// opens a new active segment. A no-op on an empty active segment.
    pub(super) fn roll_locked(&self, ap: &mut Appender) -> Result<(), Error> {
        if ap.size == 0 {
            return Ok(());
        }
        self.invalidate_clean_shutdown(ap)?;
        // Synced, indexed and tiered as its batches only: its preallocated space goes first.
        self.trim_active(ap)?;
        let sync = self.opts.sync != SyncPolicy::Never;
        let index_bytes = self.close_active(ap, sync)?;
        let base = ap.next_seq;
        // A failed creation leaves the log as it was (the closed segment is synced and
        // indexed, and still the active one); the next append retries the roll.
        let file = self.create_segment_file(base)?;
        self.fsync_dir().inspect_err(|e| self.poison(e))?;
        if sync {
            // Every record before `base` is synced: a later open must find them all.
            self.write_recovery_point(base - 1)
                .inspect_err(|e| self.poison(e))?;
        }
        if !sync {
            // Listed before the new segment is published (see `sync_through`).
            self.unsynced_closed.lock().push(Arc::clone(&ap.active));
        }
        let sf = seg_file(&self.dir, base);
        let file = Arc::new(file);
        // The closed segment's entries no longer grow: exact-sized copies (made under the read
        // lock, so readers are not held up by the copy; only this appender changes them) drop
        // the slack of their growth, up to half of their memory.
        let exact = {
            let st = self.state.read();
            st.active()
                .map(|seg| (seg.offsets.to_vec(), seg.times.to_vec()))
        };
        {
            let mut st = self.state.write();
            if let Some(old) = st.segs.last_mut() {
                old.index_bytes = index_bytes;
                // Closed now: readers reopen it through the cache.
                old.open = None;
                if let Some((offsets, times)) = exact {
                    old.offsets = offsets;
                    old.times = times;
                }
            }
            st.segs
                .push(Seg::empty_active(base, Arc::clone(&sf), Arc::clone(&file)));
        }
        if sync {
            self.sync_state.lock().mark_synced(base - 1);
        }
        ap.switch_to(sf, file, self.opts.index_interval_bytes);
        self.counters.rolled();
        Ok(())
    }

    /// The first step of a roll: syncs the active segment's `.log` (when `sync`) and writes its
    /// index files; returns their size. A failure poisons the log.
    fn close_active(&self, ap: &Appender, sync: bool) -> Result<u64, Error> {
        if sync && let Err(e) = self.sync_data(&ap.file, &ap.active.log_path) {
            let e = Error::io(&ap.active.log_path, e);
            self.poison(&e);
            return Err(e);
        }
        let index_bytes = {
            let st = self.state.read();
            match st.active() {
                Some(seg) => write_indexes(
                    seg,
                    sync.then_some(&|f: &File, p: &Path| self.sync_data(f, p)),
                ),
                None => Ok(0),
            }
        };
        index_bytes.inspect_err(|e| self.poison(e))
    }

    /// Creates (truncating) the `.log` of a new segment `base`, through the fault seam; the
    /// caller syncs the directory.
    pub(super) fn create_segment_file(&self, base: u64) -> Result<File, Error> {
        let (log_path, _, _) = segment_paths(&self.dir, base);
        self.faults
            .check(Op::Create)
            .and_then(|()| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&log_path)
            })
            .map_err(|e| Error::io(&log_path, e))
    }

    /// Rolls now (see [`Log::roll`](super::Log::roll)).
    pub(super) fn roll(&self) -> Result<(), Error> {
        let mut ap = self.appender.lock();
        self.check_poisoned()?;
        self.roll_locked(&mut ap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krabka_protocol::Header;

    #[test]
    fn the_size_bound_is_never_below_the_batch_of_one() {
        let big = vec![7u8; 70_000];
        let cases = [
            Message::new(""),
            Message::new("v"),
            Message::new(big.clone()).with_key(big.clone()),
            Message {
                timestamp: i64::MIN,
                key: Some(big.clone().into()),
                value: big.clone().into(),
                headers: (0..300)
                    .map(|i| Header {
                        key: "k".repeat(i),
                        value: big[..i * 200].to_vec().into(),
                    })
                    .collect(),
            },
        ];
        for m in &cases {
            let exact = (BATCH_HEADER_LEN + record_size(m, 0, 0)) as u64;
            assert!(size_bound(m) >= exact, "{} < {exact}", size_bound(m));
            assert!(size_bound(m) <= exact + 64 + 10 * m.headers.len() as u64);
        }
    }
}
