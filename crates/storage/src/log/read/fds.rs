//! The descriptors of closed segments a log keeps open (at most `max_open_segments`, bounded
//! by a clock), and the one-slot carry of the bytes the last read read past its records.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use super::clock::Clock;
use crate::Error;
use crate::log::SegFile;
use crate::segment::CheckedAt;

/// Read-only file descriptors of closed segments, at most `cap` of them; and the bytes the
/// last read left over (see [`Carry`]).
///
/// Each descriptor is held in its segment's [`FdSlot`](crate::layout::FdSlot), so a read of a
/// closed segment whose file is open takes that slot's shared lock and sets its `used` bit
/// (when not set yet), and nothing else: no lock shared by all readers, no hash, no list
/// update. The bound is kept by a clock (second chance) over the slots holding a descriptor,
/// run only when a read opens a file: the hand passes over descriptors used since it last
/// passed (clearing their bit) and closes the first one that was not, so the one closed is
/// one not used for a turn of the hand, as a least-recently-used list would choose up to
/// the order within that turn.
#[derive(Debug)]
pub(crate) struct FdCache {
    pub(super) clock: Mutex<Clock>,
    /// What the last [`Log::read`](crate::Log::read) read past the records it returned.
    carry: Mutex<Option<Carry>>,
    /// Whether `carry` may hold something, set and cleared under its lock: a read that finds
    /// it clear (random point reads that read no further than their record) skips the lock.
    has_carry: AtomicBool,
}

/// The bytes a read read but did not consume, from a batch boundary on: the batch its `max`
/// stopped inside (whose records after the last one returned the next sequential read wants
/// first) and whatever followed it in the chunk. The next read, when it continues where this
/// one stopped (a sequential reader), starts from these bytes instead of reading them again.
/// The batch the read stopped inside was checked whole, CRC included, in this very buffer,
/// which the carry keeps alive and no one can change: its checks are not made again (a
/// consumer reading a large batch a few records at a time pays one CRC for it, not one per
/// read), and only in this buffer (`First::Checked` compares its address). Every other batch
/// of it is checked as any chunk's is, and every record handed out still has its seq checked.
/// Bytes of a segment below its published size never change while it is in the log, and the
/// segment is matched by its file identity, so a segment dropped and another made with the
/// same base is never mixed up. One slot for the whole log: readers taking turns only miss it
/// (and read from the index, as without it).
#[derive(Debug)]
pub(super) struct Carry {
    /// The segment's base seq.
    pub(super) base: u64,
    pub(super) file: Arc<SegFile>,
    /// The file position of `bytes`.
    pub(super) pos: u64,
    /// The seq the batch at `pos` starts with.
    pub(super) expect: u64,
    /// The seq after the last record the read returned: only a read from there uses the carry.
    pub(super) resume: u64,
    pub(super) bytes: Bytes,
    /// The batch at the start of `bytes` when the read stopped inside it: that read checked
    /// it whole (CRC, header, every record) in this buffer, so the next does not again (see
    /// `First::Checked`); `None` when the carry starts with a batch no read checked.
    pub(super) checked: Option<CheckedAt>,
}

impl FdCache {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            clock: Mutex::new(Clock::new(cap)),
            carry: Mutex::new(None),
            has_carry: AtomicBool::new(false),
        }
    }

    /// The bytes the last read left over, taken (a read leaves its own): the reader uses them
    /// only when it continues exactly where that read stopped (see `ReadPlan::continues`).
    pub(super) fn take_carry(&self) -> Option<Carry> {
        if !self.has_carry.load(Ordering::Relaxed) {
            return None;
        }
        let mut carry = self.carry.lock();
        self.has_carry.store(false, Ordering::Relaxed);
        carry.take()
    }

    /// Keeps what a read left over for the next one.
    pub(super) fn put_carry(&self, carry: Carry) {
        let mut slot = self.carry.lock();
        *slot = Some(carry);
        self.has_carry.store(true, Ordering::Relaxed);
    }

    /// The open `.log` of the closed segment `seg`, opening it (and closing the one the
    /// clock chooses when `cap` are open) when it is not open.
    pub(crate) fn get(&self, seg: &Arc<SegFile>) -> Result<Arc<File>, Error> {
        let slot = &seg.read_fd;
        if let Some(f) = slot.file.read().as_ref() {
            // Read first: a bit already set is not written again (no cache line bouncing
            // between readers of one segment).
            if !slot.used.load(Ordering::Relaxed) {
                slot.used.store(true, Ordering::Relaxed);
            }
            return Ok(Arc::clone(f));
        }
        // Opened outside the clock's lock: other readers keep reading meanwhile.
        let path = &seg.log_path;
        let file = Arc::new(File::open(path).map_err(|e| Error::io(path, e))?);
        let mut clock = self.clock.lock();
        {
            let mut held = slot.file.write();
            if let Some(f) = held.as_ref() {
                // Another reader opened it meanwhile.
                return Ok(Arc::clone(f));
            }
            *held = Some(Arc::clone(&file));
        }
        clock.admit(seg);
        Ok(file)
    }

    /// Closes the descriptor of segment `seg` (dropped by retention) and drops the carry
    /// from it.
    pub(crate) fn remove(&self, seg: &Arc<SegFile>) {
        {
            let mut clock = self.clock.lock();
            clock.forget(seg);
            seg.read_fd.file.write().take();
        }
        let mut carry = self.carry.lock();
        if carry.as_ref().is_some_and(|c| Arc::ptr_eq(&c.file, seg)) {
            *carry = None;
            self.has_carry.store(false, Ordering::Relaxed);
        }
    }

    /// How many descriptors are open.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.clock.lock().len()
    }
}
