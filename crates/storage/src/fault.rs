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
    /// Writing record batches to the active segment. An injected failure writes the first half
    /// of the bytes and then fails, like a torn write.
    Write,
    /// An fsync of a segment file, an index file or the directory.
    Fsync,
    /// Creating a new segment file when rolling.
    Create,
}

/// With the `fault-injection` feature (every test build of this crate), an environment
/// variable that sets the default of [`Options::preallocate`](crate::Options::preallocate)
/// (`Options::default()`; a log whose options say it explicitly keeps it): `0` turns it off,
/// anything else on. `KRABKA_TEST_PREALLOCATE=1 cargo test -p krabka-storage` runs every suite
/// (crash, power loss, corruption and repair included) on preallocated segment files, `=0` (or
/// unset: the default) on files that grow with each append.
#[cfg(feature = "fault-injection")]
pub const PREALLOCATE_ENV: &str = "KRABKA_TEST_PREALLOCATE";

/// The default of [`Options::preallocate`](crate::Options::preallocate): `false` (a reader of
/// a segment file that is not this crate's, as a backup tool or the remote metadata's own
/// generation check, would meet the preallocated zeros), unless [`PREALLOCATE_ENV`] (test
/// builds) says otherwise.
pub fn preallocate_by_default() -> bool {
    #[cfg(feature = "fault-injection")]
    if let Some(v) = std::env::var_os(PREALLOCATE_ENV) {
        return v != "0";
    }
    false
}

#[cfg(feature = "fault-injection")]
pub use enabled::FaultInjector;

#[cfg(feature = "fault-injection")]
mod enabled {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
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
        /// For the power-loss model: each file's length at its last successful fsync.
        durable: parking_lot::Mutex<HashMap<PathBuf, u64>>,
    }

    impl FaultInjector {
        /// Fails the `n`th next write of record batches (after writing half of its bytes).
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

        /// The power-loss model: every file the log fsynced, with its length when the last
        /// successful fsync began — what a power loss would leave of it (segment files are
        /// only appended to, so the bytes past that length are exactly the writes made after
        /// the fsync). A file missing here was never synced.
        pub fn durable_lengths(&self) -> HashMap<PathBuf, u64> {
            self.durable.lock().clone()
        }

        pub(crate) fn note_synced(&self, path: &Path, len: u64) {
            let mut d = self.durable.lock();
            let e = d.entry(path.to_path_buf()).or_insert(0);
            *e = (*e).max(len);
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
    /// Fsyncs `file` (at `path`) through the seam: fails when a fault fires, and records the
    /// length it made durable for the power-loss model.
    pub(crate) fn sync_file(&self, file: &std::fs::File, path: &std::path::Path) -> io::Result<()> {
        self.check(Op::Fsync)?;
        // Only the model needs the length (one more syscall per fsync).
        #[cfg(feature = "fault-injection")]
        let len = file.metadata()?.len();
        file.sync_data()?;
        #[cfg(feature = "fault-injection")]
        self.note_synced(path, len);
        #[cfg(not(feature = "fault-injection"))]
        let _ = path;
        Ok(())
    }

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
