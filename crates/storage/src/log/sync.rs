//! Durability: group commit of fsyncs, poisoning after a failed write or fsync, the recovery
//! point, and the background flusher of [`SyncPolicy::Interval`].

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Inner, Log, SegFile, no_active_segment};
use crate::fault::Op;
use crate::fsutil::{self, IoResultExt};
use crate::{Error, PoisonCause, SyncPolicy};

/// At most this many yields of a sync leader waiting for appenders still writing.
const GATHER_YIELDS: usize = 16;

/// The longest a sync leader waits for the appenders the previous fsync released to come back
/// (see [`Inner::gather`]), whatever that fsync took: a disk stall of milliseconds does not make
/// the next group wait as long.
const MAX_GATHER_WAIT: Duration = Duration::from_micros(500);

/// Group-commit state, under `Inner::sync_state`.
#[derive(Debug)]
pub(super) struct SyncState {
    /// Every record up to this seq is on stable storage.
    pub(super) synced_seq: u64,
    /// A leader is running an fsync; the others wait on `sync_done`.
    in_progress: bool,
    /// Callers of `sync_through` waiting on `sync_done` for a leader's fsync.
    waiting: usize,
    /// Whether the leader is gathering (waiting on `sync_arrived` for callers to arrive).
    gathering: bool,
    /// The callers the last group commit took part in (its leader and the waiters its fsync
    /// released): how many the next leader waits for.
    last_group: usize,
    /// How long the last group commit's fsync took: the next leader waits at most half of it.
    last_fsync: Duration,
    /// Records appended since the last sync (for [`SyncPolicy::EveryN`]).
    unsynced: u64,
    last_sync: Instant,
    /// Under [`SyncPolicy::Interval`]: the highest seq whose append reported it here.
    written_seq: u64,
    /// Under [`SyncPolicy::Interval`]: when the oldest append not yet covered by a sync was
    /// reported; `None` when everything reported is synced.
    dirty_since: Option<Instant>,
    /// Tells the flusher thread to exit.
    pub(super) stop_flusher: bool,
}

impl SyncState {
    /// The state of a log just opened, whose records up to `last` are all on disk.
    pub(super) fn new(last: u64) -> Self {
        SyncState {
            synced_seq: last,
            in_progress: false,
            waiting: 0,
            gathering: false,
            last_group: 1,
            last_fsync: Duration::ZERO,
            unsynced: 0,
            last_sync: Instant::now(),
            written_seq: last,
            dirty_since: None,
            stop_flusher: false,
        }
    }

    /// After the log was restarted at seq `upto + 1` (empty): nothing is left to sync.
    pub(super) fn restart_at(&mut self, upto: u64) {
        self.synced_seq = upto;
        self.written_seq = upto;
        self.dirty_since = None;
    }

    /// Records that every seq up to `upto` is durable.
    pub(super) fn mark_synced(&mut self, upto: u64) {
        self.synced_seq = self.synced_seq.max(upto);
        if self.written_seq <= self.synced_seq {
            self.dirty_since = None;
        }
    }
}

impl Inner {
    /// After an append of `count` records ending at seq `last`: syncs before the append
    /// returns when the [`SyncPolicy`] says so (and under [`SyncPolicy::Interval`] tells the
    /// flusher there is something to sync).
    pub(super) fn sync_after_append(&self, last: u64, count: u64) -> Result<(), Error> {
        let due = match self.opts.sync {
            SyncPolicy::Never => false,
            SyncPolicy::EveryAppend => true,
            SyncPolicy::EveryN(n) => {
                let mut s = self.sync_state.lock();
                s.unsynced += count;
                s.unsynced >= n
            }
            SyncPolicy::Interval(d) => {
                let mut s = self.sync_state.lock();
                s.written_seq = s.written_seq.max(last);
                if s.synced_seq < last && s.dirty_since.is_none() {
                    // The flusher syncs this no later than `d` from now.
                    s.dirty_since = Some(Instant::now());
                    self.flush_wake.notify_one();
                }
                s.last_sync.elapsed() >= d
            }
        };
        if due { self.sync_through(last) } else { Ok(()) }
    }

    /// `fdatasync` of a segment file (through the fault seam), counted in [`Log::stats`].
    pub(super) fn sync_data(&self, f: &File, path: &Path) -> io::Result<()> {
        self.counters.fsync(|| self.faults.sync_file(f, path))
    }

    /// Fsyncs the log directory (through the fault seam).
    pub(super) fn fsync_dir(&self) -> Result<(), Error> {
        self.faults
            .check(Op::Fsync)
            .and_then(|()| fsutil::fsync_dir(&self.dir))
            .at(&self.dir)
    }

    /// [`Error::Poisoned`] once a write or fsync failed, carrying that first failure.
    pub(super) fn check_poisoned(&self) -> Result<(), Error> {
        if self.poisoned.load(Ordering::Acquire) {
            let cause = self
                .poison_cause
                .get()
                .cloned()
                .unwrap_or_else(|| PoisonCause {
                    kind: io::ErrorKind::Other,
                    message: "an earlier write or fsync failed".to_owned(),
                });
            Err(Error::Poisoned {
                dir: self.dir.clone(),
                cause: Box::new(cause),
            })
        } else {
            Ok(())
        }
    }

    /// Refuses every later append and sync after the failure `cause` (see
    /// [`Error::Poisoned`]); the first cause is kept.
    pub(super) fn poison(&self, cause: &Error) {
        // The cause first: a thread that sees the flag finds it.
        let _ = self.poison_cause.set(PoisonCause::of(cause));
        self.poisoned.store(true, Ordering::Release);
        tracing::warn!(dir = %self.dir.display(), error = %cause, "log poisoned after a failed write or fsync");
    }

    /// Makes every record up to `target` durable, sharing one fsync among concurrent callers.
    pub(super) fn sync_through(&self, target: u64) -> Result<(), Error> {
        let mut s = self.sync_state.lock();
        loop {
            self.check_poisoned()?;
            if s.synced_seq >= target && self.unsynced_closed.lock().is_empty() {
                return Ok(());
            }
            if s.in_progress {
                s.waiting += 1;
                if s.gathering {
                    self.sync_arrived.notify_one();
                }
                self.sync_done.wait(&mut s);
                s.waiting -= 1;
                continue;
            }
            s.in_progress = true;
            self.gather(&mut s);
            drop(s);
            self.wait_for_writers();
            // Segments before the active one were synced when they were rolled, except under
            // `SyncPolicy::Never`, where they are listed in `unsynced_closed`. The active
            // segment is read first: a roll adds the segment it closes to that list before
            // publishing the new active segment, so every record up to `upto` is in the file
            // synced here or in a listed one.
            let active = {
                let st = self.state.read();
                st.active()
                    .and_then(|a| Some((a.open.clone()?, Arc::clone(&a.file), a.last_seq)))
            };
            let started = Instant::now();
            let result = match active {
                Some((fd, paths, upto)) => {
                    let closed = std::mem::take(&mut *self.unsynced_closed.lock());
                    self.sync_closed(&closed).and_then(|()| {
                        self.sync_data(&fd, &paths.log_path)
                            .map_err(|e| Error::io(&paths.log_path, e))
                            .map(|()| upto)
                    })
                }
                None => Err(no_active_segment(&self.dir)),
            };
            let took = started.elapsed();
            s = self.sync_state.lock();
            s.in_progress = false;
            let upto = match result {
                Ok(upto) => upto,
                Err(e) => {
                    self.poison(&e);
                    self.sync_done.notify_all();
                    return Err(e);
                }
            };
            s.mark_synced(upto);
            s.unsynced = 0;
            s.last_sync = Instant::now();
            // This leader and every waiter released now, covered or not: the callers that
            // likely append and sync again right away.
            s.last_group = s.waiting + 1;
            s.last_fsync = took;
            self.sync_done.notify_all();
        }
    }

    /// Before a leader's fsync (called with `in_progress` set): waits, briefly, for the
    /// callers the previous fsync released to append again and arrive here, so that one fsync
    /// covers all their records. Without it concurrent appenders split into two groups that
    /// take turns, each fsync covering only the records written during the previous one
    /// (about 3 records per fsync with 4 appending threads instead of 4). A lone appender (the
    /// previous group was its leader alone) does not wait at all. Bounded by half of the
    /// previous fsync's time (at most [`MAX_GATHER_WAIT`]): a caller that stopped appending
    /// costs the next group that much once, and the group after it expects one caller fewer.
    fn gather(&self, s: &mut parking_lot::MutexGuard<'_, SyncState>) {
        if s.last_group <= 1 {
            return;
        }
        let deadline = Instant::now() + (s.last_fsync / 2).min(MAX_GATHER_WAIT);
        s.gathering = true;
        while s.waiting + 1 < s.last_group {
            if self.sync_arrived.wait_until(s, deadline).timed_out() {
                break;
            }
        }
        s.gathering = false;
    }

    /// Then lets appenders that are writing publish their records (more callers than the
    /// previous group had). Bounded: at most `GATHER_YIELDS` yields of the CPU, and none when
    /// nobody is writing.
    pub(super) fn wait_for_writers(&self) {
        for _ in 0..GATHER_YIELDS {
            if self.writers.load(Ordering::Acquire) == 0 {
                break;
            }
            std::thread::yield_now();
        }
    }

    /// Fsyncs the `.log`, `.index` and `.timeindex` files of closed segments that were rolled
    /// without a sync. Files removed by retention meanwhile are skipped.
    pub(super) fn sync_closed(&self, segs: &[Arc<SegFile>]) -> Result<(), Error> {
        for seg in segs {
            for path in [&seg.log_path, &seg.index_path, &seg.time_index_path] {
                let file = match File::open(path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(Error::io(path, e)),
                };
                self.sync_data(&file, path)
                    .map_err(|e| Error::io(path, e))?;
            }
        }
        Ok(())
    }

    /// Makes every record appended so far durable (see [`Log::sync`]).
    pub(super) fn sync(&self) -> Result<(), Error> {
        self.check_poisoned()?;
        let last = self.last_seq();
        self.sync_through(last)
    }

    /// Records durably that the log holds every seq up to `seq` (see
    /// [`RECOVERY_POINT_FILE_NAME`](crate::RECOVERY_POINT_FILE_NAME)).
    pub(super) fn write_recovery_point(&self, seq: u64) -> Result<(), Error> {
        self.faults
            .check(Op::Fsync)
            .map_err(|e| Error::io(&self.dir, e))?;
        crate::layout::recovery_point::write_recovery_point(&self.dir, seq)
    }
}

/// The background thread of [`SyncPolicy::Interval`]: syncs the log once its oldest unsynced
/// append is `d` old, so an idle log's tail does not stay unsynced.
#[derive(Debug)]
pub(super) struct Flusher {
    handle: JoinHandle<()>,
}

impl Flusher {
    pub(super) fn start(inner: &Arc<Inner>, d: Duration) -> Result<Flusher, Error> {
        let inner = Arc::clone(inner);
        let dir = inner.dir.clone();
        let handle = std::thread::Builder::new()
            .name("krabka-flusher".into())
            .spawn(move || run_flusher(&inner, d))
            .map_err(|e| Error::io(&dir, e))?;
        Ok(Flusher { handle })
    }
}

/// The flusher's loop: sleeps on `flush_wake` until the oldest unsynced append is `d` old (or
/// an append makes the log dirty, or it is told to stop), then syncs through the group commit
/// path, so it shares fsyncs with appenders and never holds the append lock. Exits when told
/// to stop. After a failed sync (which poisons the log) it only waits to be stopped.
fn run_flusher(inner: &Inner, d: Duration) {
    let mut s = inner.sync_state.lock();
    loop {
        if s.stop_flusher {
            return;
        }
        let due = match s.dirty_since {
            _ if inner.poisoned.load(Ordering::Acquire) => None,
            // A deadline beyond what `Instant` can hold is never reached.
            Some(since) => since.checked_add(d),
            None => None,
        };
        let Some(due) = due else {
            inner.flush_wake.wait(&mut s);
            continue;
        };
        if Instant::now() < due {
            inner.flush_wake.wait_until(&mut s, due);
            continue;
        }
        drop(s);
        let target = inner.last_seq();
        if let Err(e) = inner.sync_through(target) {
            tracing::warn!(dir = %inner.dir.display(), error = %e, "background sync failed");
        }
        s = inner.sync_state.lock();
    }
}

impl Log {
    /// Stops the flusher thread, if any, and waits for it to exit.
    pub(super) fn stop_flusher(&mut self) {
        if let Some(f) = self.flusher.take() {
            {
                let mut s = self.inner.sync_state.lock();
                s.stop_flusher = true;
                self.inner.flush_wake.notify_all();
            }
            // The thread only ends by returning (it never panics on purpose); a panic has
            // nothing left to clean up.
            let _ = f.handle.join();
        }
    }
}
