//! Counters of what a [`Log`](super::Log) did since it was opened, and their snapshot
//! [`LogStats`]. Plain relaxed atomics: no lock is taken to count.

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::append::Appender;
use crate::RecoveryReport;

/// A snapshot of a [`Log`](crate::Log)'s counters ([`Log::stats`](crate::Log::stats)): what
/// this handle did since [`Log::open`](crate::Log::open), and what open's recovery found.
///
/// The counters only grow while the log is open; a new `Log` on the same directory starts
/// again from zero. Each counter is read on its own, so a snapshot taken while other threads
/// append may mix counts from just before and just after an append.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogStats {
    /// Records appended (written to the active segment).
    pub appends: u64,
    /// Bytes of batches written by appends (headers included; the `.log` bytes appends added).
    pub appended_bytes: u64,
    /// Non-empty `append` and `append_batch` calls whose every record was written.
    pub append_batches: u64,
    /// Completed fsyncs of segment files (`.log`, `.index`, `.timeindex`) by this handle:
    /// group commits, the background flusher, [`Log::sync`](crate::Log::sync), rolls and
    /// [`Log::close`](crate::Log::close). Fsyncs of the directory and of the recovery-point
    /// and clean-shutdown files are not counted, nor those of recovery during open.
    pub fsyncs: u64,
    /// Total time spent in the fsyncs counted by [`fsyncs`](Self::fsyncs).
    pub fsync_time: Duration,
    /// Segments closed by a roll ([`Log::roll`](crate::Log::roll) or a full active segment).
    pub rolls: u64,
    /// Segments deleted by retention (explicit holes not counted).
    pub segments_deleted: u64,
    /// Bytes of `.log` files recovery scanned during open, up to the first bad batch of each
    /// ([`RecoveryReport::scanned_bytes`]).
    pub recovery_scanned_bytes: u64,
    /// Bytes of the torn tail recovery cut from the active segment during open (0 when none;
    /// [`RecoveryReport::truncated`]).
    pub recovery_truncated_bytes: u64,
    /// Whether open trusted the clean-shutdown marker instead of scanning the active segment
    /// ([`RecoveryReport::clean_shutdown`]).
    pub recovery_clean_shutdown: bool,
}

/// A function told the duration of every fsync [`LogStats::fsyncs`] counts
/// ([`Log::set_fsync_observer`](crate::Log::set_fsync_observer)), e.g. to feed a latency
/// histogram. It runs on the thread that made the fsync, so it must be cheap.
pub type FsyncObserver = Box<dyn Fn(Duration) + Send + Sync>;

/// The live counters behind [`LogStats`], shared by every thread of a log.
#[derive(Default)]
pub(crate) struct Counters {
    appends: AtomicU64,
    appended_bytes: AtomicU64,
    append_batches: AtomicU64,
    fsyncs: AtomicU64,
    fsync_nanos: AtomicU64,
    rolls: AtomicU64,
    segments_deleted: AtomicU64,
    fsync_observer: OnceLock<FsyncObserver>,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters")
            .field("appends", &self.appends)
            .field("fsyncs", &self.fsyncs)
            .field("fsync_observer", &self.fsync_observer.get().is_some())
            .finish_non_exhaustive()
    }
}

fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

/// [`bump`] for a counter only one thread at a time changes: a load and a store, no locked
/// read-modify-write on the append path. Readers still see every value whole. The callers
/// below take the [`Appender`], which only the holder of the append lock can lend, so no
/// two of them race.
fn bump_exclusive(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl Counters {
    /// One write of `records` batches taking `bytes` bytes, by the holder of the append lock.
    pub(crate) fn written(&self, _locked: &Appender, records: u64, bytes: u64) {
        bump_exclusive(&self.appends, records);
        bump_exclusive(&self.appended_bytes, bytes);
    }

    /// One batch written in full, by the holder of the append lock.
    pub(crate) fn batch(&self, _locked: &Appender) {
        bump_exclusive(&self.append_batches, 1);
    }

    /// One roll.
    pub(crate) fn rolled(&self) {
        bump(&self.rolls, 1);
    }

    /// One segment deleted by retention.
    pub(crate) fn segment_deleted(&self) {
        bump(&self.segments_deleted, 1);
    }

    /// Runs the fsync `f`, counting it and its time when it succeeds.
    pub(crate) fn fsync(&self, f: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let start = Instant::now();
        f()?;
        let elapsed = start.elapsed();
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        bump(&self.fsyncs, 1);
        bump(&self.fsync_nanos, nanos);
        if let Some(observe) = self.fsync_observer.get() {
            observe(elapsed);
        }
        Ok(())
    }

    /// Installs `observer` unless one is installed; whether it was.
    pub(crate) fn observe_fsyncs(&self, observer: FsyncObserver) -> bool {
        self.fsync_observer.set(observer).is_ok()
    }

    /// The snapshot of these counters, with the recovery figures of `report`.
    pub(crate) fn snapshot(&self, report: &RecoveryReport) -> LogStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LogStats {
            appends: get(&self.appends),
            appended_bytes: get(&self.appended_bytes),
            append_batches: get(&self.append_batches),
            fsyncs: get(&self.fsyncs),
            fsync_time: Duration::from_nanos(get(&self.fsync_nanos)),
            rolls: get(&self.rolls),
            segments_deleted: get(&self.segments_deleted),
            recovery_scanned_bytes: report.scanned_bytes,
            recovery_truncated_bytes: report.truncated.as_ref().map_or(0, |t| t.bytes_removed),
            recovery_clean_shutdown: report.clean_shutdown,
        }
    }
}
