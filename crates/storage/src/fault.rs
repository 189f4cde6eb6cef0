//! Fault injection for tests of the log's failure handling (cargo feature `fault-injection`).
//!
//! Every write, fsync and segment-file creation a [`Log`](crate::Log) does after opening goes
//! through a check of the log's `FaultInjector`; with the feature off the check is an empty
//! inline function. With it on, `Log::faults()` arms a failure of the Nth next operation of a
//! kind (once: the injector disarms itself after firing, so a test can tell poisoning apart from
//! a persistent fault).

use std::io;

/// The kinds of operation a fault can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub(crate) enum Op {
    /// Writing record frames to the active segment. An injected failure writes the first half
    /// of the bytes and then fails, like a torn write.
    Write,
    /// An fsync of a segment file, an index file or the directory.
    Fsync,
    /// Creating a new segment file when rolling.
    Create,
}

#[cfg(feature = "fault-injection")]
pub use enabled::FaultInjector;

#[cfg(feature = "fault-injection")]
mod enabled {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::Op;

    /// Makes the Nth next write, fsync or segment creation of a [`Log`](crate::Log) fail.
    ///
    /// A count of 1 fails the next operation of that kind, 2 the one after, and so on; 0
    /// disarms. Each armed fault fires once.
    #[derive(Debug, Default)]
    pub struct FaultInjector {
        write: AtomicU64,
        fsync: AtomicU64,
        create: AtomicU64,
        /// Fsyncs that went through the seam (including failed ones).
        fsyncs: AtomicU64,
    }

    impl FaultInjector {
        /// Fails the `n`th next write of record frames (after writing half of its bytes).
        pub fn fail_nth_write(&self, n: u64) {
            self.write.store(n, Ordering::SeqCst);
        }

        /// Fails the `n`th next fsync (of a segment, an index file or the directory).
        pub fn fail_nth_fsync(&self, n: u64) {
            self.fsync.store(n, Ordering::SeqCst);
        }

        /// Fails the `n`th next creation of a segment file (a roll).
        pub fn fail_nth_create(&self, n: u64) {
            self.create.store(n, Ordering::SeqCst);
        }

        /// Disarms every fault.
        pub fn clear(&self) {
            for c in [&self.write, &self.fsync, &self.create] {
                c.store(0, Ordering::SeqCst);
            }
        }

        /// How many fsyncs (of segment files, index files or the directory) the log has
        /// attempted since it was opened, failed ones included. Not reset by [`clear`](Self::clear).
        pub fn fsync_count(&self) -> u64 {
            self.fsyncs.load(Ordering::SeqCst)
        }

        pub(crate) fn fires(&self, op: Op) -> bool {
            let counter = match op {
                Op::Write => &self.write,
                Op::Fsync => {
                    self.fsyncs.fetch_add(1, Ordering::SeqCst);
                    &self.fsync
                }
                Op::Create => &self.create,
            };
            counter
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok_and(|before| before == 1)
        }
    }
}

/// Stand-in without the feature: never fails.
#[cfg(not(feature = "fault-injection"))]
#[derive(Debug, Default)]
pub(crate) struct FaultInjector {}

#[cfg(not(feature = "fault-injection"))]
impl FaultInjector {
    #[inline(always)]
    pub(crate) fn fires(&self, _op: Op) -> bool {
        false
    }
}

impl FaultInjector {
    /// `Err` when a fault is armed for this operation and fires now.
    #[inline]
    pub(crate) fn check(&self, op: Op) -> io::Result<()> {
        if self.fires(op) {
            Err(io::Error::other(format!("injected {op:?} fault")))
        } else {
            Ok(())
        }
    }
}
