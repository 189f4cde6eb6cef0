//! The [`Log`]: open and recovery, appends with group commit, reads, retention.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::ops::RangeInclusive;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::bufs::ReadBufs;
use crate::fault::{FaultInjector, Op};
use crate::index::{IndexBuilder, OffsetIndex, TimeIndex, floor_entry, time_floor};
use crate::segment::{
    FRAME_HEADER_LEN, decode_chunk, encode_frame_sized, read_frame_chunk, segment_paths,
};
use crate::{Error, LOCK_FILE_NAME, Options, Record, RecoveryReport, SegmentInfo, SyncPolicy};

/// The paths of a segment's files.
#[derive(Debug)]
pub(crate) struct SegFile {
    pub(crate) log_path: PathBuf,
    pub(crate) index_path: PathBuf,
    pub(crate) time_index_path: PathBuf,
}

/// A segment's published state: what readers may see. An explicit hole (seqs a repair moved
/// aside or found missing) is a `Seg` too, with `hole` set and no data, so seqs stay contiguous
/// across the list.
#[derive(Debug)]
pub(crate) struct Seg {
    pub(crate) base_seq: u64,
    pub(crate) file: Arc<SegFile>,
    /// The open `.log` file of the active segment (shared with the appender); `None` for closed
    /// segments, whose files are opened on demand through the [`FdCache`].
    pub(crate) open: Option<Arc<File>>,
    /// Seq of the last published record (`base_seq - 1` when empty).
    pub(crate) last_seq: u64,
    /// Bytes of published frames.
    pub(crate) size: u64,
    pub(crate) max_timestamp: i64,
    pub(crate) offsets: Vec<(u64, u64)>,
    pub(crate) times: Vec<(i64, u64)>,
    /// Bytes of its index files on disk (0 for the active segment).
    pub(crate) index_bytes: u64,
    /// For an explicit hole: its marker file in the quarantine directory.
    pub(crate) hole: Option<PathBuf>,
}

#[derive(Debug)]
struct State {
    segs: Vec<Seg>,
}

impl State {
    fn active(&self) -> Option<&Seg> {
        self.segs.last()
    }

    fn last_seq(&self) -> u64 {
        self.active().map_or(0, |s| s.last_seq)
    }

    fn first_seq(&self) -> u64 {
        if self.last_seq() == 0 {
            0
        } else {
            self.segs.first().map_or(0, |s| s.base_seq)
        }
    }

    fn bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.size + s.index_bytes).sum()
    }
}

/// At most this many extra yields of a sync leader waiting for writing appenders.
const GATHER_YIELDS: usize = 16;

/// Counts an appender in [`Inner::writers`] while it lives.
struct Writing<'a>(&'a AtomicUsize);

impl<'a> Writing<'a> {
    fn enter(writers: &'a AtomicUsize) -> Self {
        writers.fetch_add(1, Ordering::AcqRel);
        Writing(writers)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Appender-private state, under the append lock.
#[derive(Debug)]
struct Appender {
    active: Arc<SegFile>,
    /// The active segment's `.log`, open for writing.
    file: Arc<File>,
    size: u64,
    next_seq: u64,
    builder: IndexBuilder,
    /// The frames of the batch being appended (reused).
    buf: Vec<u8>,
    /// Encoded lengths of the batch's messages (reused).
    lens: Vec<usize>,
}

#[derive(Debug)]
struct SyncState {
    /// Every record up to this seq is on stable storage.
    synced_seq: u64,
    /// A leader is running an fsync; the others wait on `sync_done`.
    in_progress: bool,
    /// Records appended since the last sync (for [`SyncPolicy::EveryN`]).
    unsynced: u64,
    last_sync: Instant,
    /// Under [`SyncPolicy::Interval`]: the highest seq whose append reported it here.
    written_seq: u64,
    /// Under [`SyncPolicy::Interval`]: when the oldest append not yet covered by a sync was
    /// reported; `None` when everything reported is synced.
    dirty_since: Option<Instant>,
    /// Tells the flusher thread to exit.
    stop_flusher: bool,
}

impl SyncState {
    /// Records that every seq up to `upto` is durable.
    fn mark_synced(&mut self, upto: u64) {
        self.synced_seq = self.synced_seq.max(upto);
        if self.written_seq <= self.synced_seq {
            self.dirty_since = None;
        }
    }
}

/// Read-only file descriptors of closed segments, at most `cap` of them, least recently used
/// evicted first.
#[derive(Debug)]
struct FdCache {
    cap: usize,
    inner: Mutex<FdCacheInner>,
}

#[derive(Debug, Default)]
struct FdCacheInner {
    /// Base seq → (file, last use).
    files: HashMap<u64, (Arc<File>, u64)>,
    tick: u64,
}

impl FdCache {
    fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            inner: Mutex::new(FdCacheInner::default()),
        }
    }

    /// The open `.log` of the closed segment `base`, opening it (and evicting the least
    /// recently used one when full) when it is not cached.
    fn get(&self, base: u64, path: &Path) -> Result<Arc<File>, Error> {
        {
            let mut c = self.inner.lock();
            c.tick += 1;
            let tick = c.tick;
            if let Some((f, used)) = c.files.get_mut(&base) {
                *used = tick;
                return Ok(Arc::clone(f));
            }
        }
        // Opened outside the lock: other readers keep hitting the cache meanwhile.
        let file = Arc::new(File::open(path).map_err(|e| Error::io(path, e))?);
        let mut c = self.inner.lock();
        c.tick += 1;
        let tick = c.tick;
        if !c.files.contains_key(&base) {
            while c.files.len() >= self.cap {
                let Some(oldest) = c.files.iter().min_by_key(|(_, (_, t))| *t).map(|(b, _)| *b)
                else {
                    break;
                };
                c.files.remove(&oldest);
            }
        }
        c.files.insert(base, (Arc::clone(&file), tick));
        Ok(file)
    }

    /// Closes the cached file of segment `base` (dropped by retention).
    fn remove(&self, base: u64) {
        self.inner.lock().files.remove(&base);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().files.len()
    }
}

/// An append-only log of [`Message`]s stored in segment files in one directory.
///
/// `Log` is `Send + Sync`: share it in an `Arc`. Appends are serialized by an internal lock;
/// fsyncs happen outside it (so concurrent `EveryAppend` appenders share them), and readers take
/// only a short-lived lock on the published state, so they never wait on an fsync.
///
/// Under [`SyncPolicy::Interval`] the `Log` owns one background thread (named
/// `krabka-flusher`) that syncs an idle tail; [`Log::close`] and dropping the `Log` stop and
/// join it. No other policy starts a thread.
///
/// Records become visible to readers as soon as they are written to the file, which may be
/// before they are synced.
///
/// A `Log` holds an exclusive lock on the lock file `.lock` in its directory
/// ([`LOCK_FILE_NAME`](crate::LOCK_FILE_NAME)) from [`Log::open`] until it is closed or
/// dropped, so a second `Log` on the same directory, in this process or another, fails with
/// [`Error::Locked`] instead of interleaving writes with the first.
///
/// File descriptors: the active segment's file is always open; closed segments' files are
/// opened when read and kept in a cache of at most [`Options::max_open_segments`].
#[derive(Debug)]
pub struct Log {
    inner: Arc<Inner>,
    /// The background flusher of [`SyncPolicy::Interval`]; `None` under other policies and
    /// once stopped.
    flusher: Option<Flusher>,
}

/// Everything of a [`Log`] but its flusher thread, shared with that thread.
#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    opts: Options,
    /// The locked lock file; the lock is released when it is closed (with the `Log`).
    _lock: File,
    /// Read descriptors of closed segments.
    fds: FdCache,
    /// Closed segments rolled without an fsync (under [`SyncPolicy::Never`]) whose `.log` and
    /// index files the next [`Log::sync`] must fsync.
    unsynced_closed: Mutex<Vec<Arc<SegFile>>>,
    state: RwLock<State>,
    appender: Mutex<Appender>,
    sync_state: Mutex<SyncState>,
    sync_done: Condvar,
    /// Wakes the flusher thread (on the first unsynced append after a sync, and to stop it).
    flush_wake: Condvar,
    poisoned: AtomicBool,
    /// Appenders between entering `append_batch` and publishing their records: a sync leader
    /// gives them a moment to finish so that its fsync covers their records too.
    writers: AtomicUsize,
    report: RecoveryReport,
    /// Read buffers reused once the records sharing them are dropped.
    bufs: ReadBufs,
    /// The I/O seam: every write, fsync and segment creation after open asks it first.
    faults: FaultInjector,
}

pub(crate) fn fsync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

pub(crate) fn open_rw(path: &Path, create: bool) -> Result<File, Error> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<u64, Error> {
    let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    match fs::remove_file(path) {
        Ok(()) => Ok(len),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn write_file(path: &Path, bytes: &[u8], sync: bool, faults: &FaultInjector) -> Result<(), Error> {
    let mut f = File::create(path).map_err(|e| Error::io(path, e))?;
    f.write_all(bytes).map_err(|e| Error::io(path, e))?;
    if sync {
        faults.sync_file(&f, path).map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

pub(crate) fn seg_file(dir: &Path, base: u64) -> Arc<SegFile> {
    let (log_path, index_path, time_index_path) = segment_paths(dir, base);
    Arc::new(SegFile {
        log_path,
        index_path,
        time_index_path,
    })
}

/// The error for an internal invariant that does not hold: the log always has an active
/// segment.
fn no_active_segment(dir: &Path) -> Error {
    Error::io(dir, io::Error::other("the log has no active segment"))
}

/// How long [`try_lock_exclusive`] retries a lock that is held.
pub const LOCK_RETRY_FOR: std::time::Duration = std::time::Duration::from_millis(500);

/// Takes an exclusive, non-blocking lock on `file`, retrying for up to [`LOCK_RETRY_FOR`]
/// while it is held.
///
/// The retry exists because a lock released a moment ago can still be held by a child process
/// that this process is spawning: the child shares the open lock file until it execs. A lock
/// still held after the retry is held by a live owner.
///
/// # Errors
/// [`TryLockError::WouldBlock`] when another owner holds the lock, or the I/O error.
pub fn try_lock_exclusive(file: &File) -> Result<(), TryLockError> {
    let deadline = std::time::Instant::now() + LOCK_RETRY_FOR;
    loop {
        match file.try_lock() {
            Err(TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Opens (creating it if absent) the lock file at `path` and takes an exclusive, non-blocking
/// lock on it with [`try_lock_exclusive`]. The lock lasts as long as the returned `File`.
///
/// # Errors
/// [`TryLockError::WouldBlock`] when another owner holds the lock, or the I/O error of opening
/// or locking the file.
pub fn create_and_lock(path: &Path) -> Result<File, TryLockError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(TryLockError::Error)?;
    try_lock_exclusive(&file)?;
    Ok(file)
}

/// Creates the lock file in `dir` and takes an exclusive, non-blocking lock on it.
fn lock_dir(dir: &Path) -> Result<File, Error> {
    let path = dir.join(LOCK_FILE_NAME);
    match create_and_lock(&path) {
        Ok(file) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}

/// Loads a closed segment's indexes if they are valid for a `.log` of `log_len` bytes; also
/// returns the index files' total size. Reads only the two index files (never the `.log`).
/// Whether the segment continues the one before it and the one after it continues it is
/// checked by recovery.
pub(crate) fn load_indexes(
    sf: &SegFile,
    base: u64,
    log_len: u64,
) -> Option<(OffsetIndex, TimeIndex, u64)> {
    let idx_bytes = fs::read(&sf.index_path).ok()?;
    let tidx_bytes = fs::read(&sf.time_index_path).ok()?;
    let idx = OffsetIndex::decode(&idx_bytes).ok()?;
    let tidx = TimeIndex::decode(&tidx_bytes).ok()?;
    let index_bytes = (idx_bytes.len() + tidx_bytes.len()) as u64;
    let consistent = idx.base_seq == base
        && tidx.base_seq == base
        && idx.log_size == log_len
        && idx.max_timestamp == tidx.max_timestamp
        && idx.entries.len() == tidx.entries.len()
        && idx
            .entries
            .iter()
            .zip(&tidx.entries)
            .all(|(&(seq, _), &(_, tseq))| seq == tseq)
        && idx.last_seq >= base;
    consistent.then_some((idx, tidx, index_bytes))
}

impl Inner {
    fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Inner, Error> {
        let opts = opts.resolve()?;
        let dir = dir.as_ref().to_path_buf();
        match fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => return Err(Error::NotADirectory { path: dir }),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            }
            Err(e) => return Err(Error::io(&dir, e)),
        }
        // Before recovery, which may truncate files another writer is using.
        let lock = lock_dir(&dir)?;
        let crate::recovery::Recovered {
            segs,
            active_builder,
            report,
        } = crate::recovery::recover(&dir, &opts)?;
        let (appender, last) = {
            let Some(active) = segs.last() else {
                return Err(no_active_segment(&dir));
            };
            let Some(file) = active.open.clone() else {
                return Err(no_active_segment(&dir));
            };
            let builder =
                active_builder.unwrap_or_else(|| IndexBuilder::new(opts.index_interval_bytes));
            (
                Appender {
                    active: Arc::clone(&active.file),
                    file,
                    size: active.size,
                    next_seq: active.last_seq + 1,
                    builder,
                    buf: Vec::new(),
                    lens: Vec::new(),
                },
                active.last_seq,
            )
        };
        Ok(Inner {
            fds: FdCache::new(opts.max_open_segments),
            dir,
            opts,
            _lock: lock,
            unsynced_closed: Mutex::new(Vec::new()),
            state: RwLock::new(State { segs }),
            appender: Mutex::new(appender),
            sync_state: Mutex::new(SyncState {
                synced_seq: last,
                in_progress: false,
                unsynced: 0,
                last_sync: Instant::now(),
                written_seq: last,
                dirty_since: None,
                stop_flusher: false,
            }),
            sync_done: Condvar::new(),
            flush_wake: Condvar::new(),
            poisoned: AtomicBool::new(false),
            writers: AtomicUsize::new(0),
            report,
            bufs: ReadBufs::default(),
            faults: FaultInjector::default(),
        })
    }

    fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn options(&self) -> &Options {
        &self.opts
    }

    fn append(&self, msg: &Message) -> Result<u64, Error> {
        self.append_batch(std::slice::from_ref(msg))
            .map(|r| *r.start())
    }

    fn append_batch(&self, msgs: &[Message]) -> Result<RangeInclusive<u64>, Error> {
        let writing = Writing::enter(&self.writers);
        let mut guard = self.appender.lock();
        self.check_poisoned()?;
        let ap = &mut *guard;
        // Check the whole batch first, keeping each message's encoded length for encoding.
        ap.lens.clear();
        for m in msgs {
            let size = m.encoded_len();
            if size as u64 > self.opts.max_message_bytes {
                return Err(Error::MessageTooLarge {
                    size: size as u64,
                    max: self.opts.max_message_bytes,
                });
            }
            ap.lens.push(size);
        }
        let first = ap.next_seq;
        let mut i = 0;
        while i < msgs.len() {
            ap.buf.clear();
            let start = i;
            let mut max_ts = i64::MIN;
            while let (Some(m), Some(&size)) = (msgs.get(i), ap.lens.get(i)) {
                let len = (FRAME_HEADER_LEN + size) as u64;
                let used = ap.size + ap.buf.len() as u64;
                if used > 0 && used + len > self.opts.max_bytes {
                    break;
                }
                let seq = ap.next_seq + (i - start) as u64;
                encode_frame_sized(seq, m, size, &mut ap.buf);
                ap.builder.observe(seq, used, len, m.timestamp);
                max_ts = max_ts.max(m.timestamp);
                i += 1;
            }
            if i == start {
                self.roll_locked(ap)?;
                continue;
            }
            if let Err(e) = self.write_at(&ap.file, &ap.buf, ap.size) {
                self.poison();
                // Best effort: drop a partial write so the file ends at a frame boundary.
                let _ = ap.file.set_len(ap.size);
                return Err(Error::io(&ap.active.log_path, e));
            }
            let count = (i - start) as u64;
            let last = ap.next_seq + count - 1;
            ap.size += ap.buf.len() as u64;
            ap.next_seq += count;
            let mut st = self.state.write();
            if let Some(seg) = st.segs.last_mut() {
                seg.last_seq = last;
                seg.size = ap.size;
                seg.max_timestamp = seg.max_timestamp.max(max_ts);
                seg.offsets.append(&mut ap.builder.offsets);
                seg.times.append(&mut ap.builder.times);
            }
        }
        let last = ap.next_seq - 1;
        drop(guard);
        drop(writing);
        if msgs.is_empty() {
            return Ok(first..=last);
        }
        // Outside the append lock: concurrent appenders share the fsync.
        self.sync_after_append(last, msgs.len() as u64)?;
        Ok(first..=last)
    }

    fn sync_after_append(&self, last: u64, count: u64) -> Result<(), Error> {
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

    /// Writes `buf` at `pos` of a segment file (through the fault seam).
    fn write_at(&self, f: &File, buf: &[u8], pos: u64) -> io::Result<()> {
        if let Err(e) = self.faults.check(Op::Write) {
            // A torn write: half of the bytes land.
            let _ = f.write_all_at(buf.get(..buf.len() / 2).unwrap_or(&[]), pos);
            return Err(e);
        }
        f.write_all_at(buf, pos)
    }

    /// `fdatasync` of a segment file (through the fault seam).
    fn sync_data(&self, f: &File, path: &Path) -> io::Result<()> {
        self.faults.sync_file(f, path)
    }

    /// Fsyncs the log directory (through the fault seam).
    fn fsync_dir(&self) -> Result<(), Error> {
        self.faults
            .check(Op::Fsync)
            .map_err(|e| Error::io(&self.dir, e))?;
        fsync_dir(&self.dir)
    }

    fn check_poisoned(&self) -> Result<(), Error> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(Error::Poisoned {
                dir: self.dir.clone(),
            })
        } else {
            Ok(())
        }
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
        tracing::warn!(dir = %self.dir.display(), "log poisoned after a failed write or fsync");
    }

    /// Makes every record up to `target` durable, sharing one fsync among concurrent callers.
    fn sync_through(&self, target: u64) -> Result<(), Error> {
        let mut s = self.sync_state.lock();
        loop {
            self.check_poisoned()?;
            if s.synced_seq >= target && self.unsynced_closed.lock().is_empty() {
                return Ok(());
            }
            if s.in_progress {
                self.sync_done.wait(&mut s);
                continue;
            }
            s.in_progress = true;
            drop(s);
            self.gather_writers();
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
            s = self.sync_state.lock();
            s.in_progress = false;
            let upto = match result {
                Ok(upto) => upto,
                Err(e) => {
                    self.poison();
                    self.sync_done.notify_all();
                    return Err(e);
                }
            };
            s.mark_synced(upto);
            s.unsynced = 0;
            s.last_sync = Instant::now();
            self.sync_done.notify_all();
        }
    }

    /// Before a leader's fsync: lets appenders that are writing (or were just released by the
    /// previous fsync and are about to append again) publish their records, so that one fsync
    /// covers them all instead of concurrent appenders splitting into two groups that take
    /// turns, each fsync covering only the records written during the previous one. Bounded:
    /// one yield of the CPU (a syscall, negligible next to an fsync), and at most
    /// `GATHER_YIELDS` more while other appenders are writing.
    fn gather_writers(&self) {
        std::thread::yield_now();
        for _ in 0..GATHER_YIELDS {
            if self.writers.load(Ordering::Acquire) == 0 {
                break;
            }
            std::thread::yield_now();
        }
    }

    /// Fsyncs the `.log`, `.index` and `.timeindex` files of closed segments that were rolled
    /// without a sync. Files removed by retention meanwhile are skipped.
    fn sync_closed(&self, segs: &[Arc<SegFile>]) -> Result<(), Error> {
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

    /// Closes the active segment (under the append lock): syncs it, writes its index files and
    /// opens a new active segment. A no-op on an empty active segment.
    fn roll_locked(&self, ap: &mut Appender) -> Result<(), Error> {
        if ap.size == 0 {
            return Ok(());
        }
        let sync = self.opts.sync != SyncPolicy::Never;
        if sync && let Err(e) = self.sync_data(&ap.file, &ap.active.log_path) {
            self.poison();
            return Err(Error::io(&ap.active.log_path, e));
        }
        let index_bytes = {
            let st = self.state.read();
            match st.active() {
                Some(seg) => write_indexes(seg, sync, &self.faults),
                None => Ok(0),
            }
        };
        let index_bytes = index_bytes.inspect_err(|_| self.poison())?;
        let base = ap.next_seq;
        // A failed creation leaves the log as it was (the closed segment is synced and
        // indexed, and still the active one); the next append retries the roll.
        let file = self.create_segment_file(base)?;
        self.fsync_dir().inspect_err(|_| self.poison())?;
        if sync {
            // Every record before `base` is synced: a later open must find them all.
            self.write_recovery_point(base - 1)
                .inspect_err(|_| self.poison())?;
        }
        if !sync {
            // Listed before the new segment is published (see `sync_through`).
            self.unsynced_closed.lock().push(Arc::clone(&ap.active));
        }
        let sf = seg_file(&self.dir, base);
        let file = Arc::new(file);
        {
            let mut st = self.state.write();
            if let Some(old) = st.segs.last_mut() {
                old.index_bytes = index_bytes;
                // Closed now: readers reopen it through the cache.
                old.open = None;
            }
            st.segs.push(Seg {
                base_seq: base,
                file: Arc::clone(&sf),
                open: Some(Arc::clone(&file)),
                last_seq: base - 1,
                size: 0,
                max_timestamp: i64::MIN,
                offsets: Vec::new(),
                times: Vec::new(),
                index_bytes: 0,
                hole: None,
            });
        }
        if sync {
            self.sync_state.lock().mark_synced(base - 1);
        }
        ap.active = sf;
        ap.file = file;
        ap.size = 0;
        ap.builder = IndexBuilder::new(self.opts.index_interval_bytes);
        Ok(())
    }

    /// Creates (truncating) the `.log` of a new segment `base`, through the fault seam; the
    /// caller syncs the directory.
    fn create_segment_file(&self, base: u64) -> Result<File, Error> {
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

    fn roll(&self) -> Result<(), Error> {
        let mut ap = self.appender.lock();
        self.check_poisoned()?;
        self.roll_locked(&mut ap)
    }

    fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        let mut out = Vec::new();
        let mut seq = from_seq;
        {
            let st = self.state.read();
            let (first, last) = (st.first_seq(), st.last_seq());
            if from_seq < first || from_seq > last.saturating_add(1) {
                return Err(Error::OutOfRange {
                    seq: from_seq,
                    first,
                    last,
                });
            }
            if last == 0 || from_seq > last || max == 0 {
                return Ok(out);
            }
            // Room for every record asked for (bounded: `max` may be `usize::MAX`).
            let available = usize::try_from(last - from_seq + 1).unwrap_or(usize::MAX);
            out.reserve_exact(max.min(available).min(64 << 10));
        }
        while out.len() < max {
            let plan = {
                let st = self.state.read();
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
                    break;
                }
                if let Some(marker) = &seg.hole {
                    if !out.is_empty() {
                        // Deliver what comes before the hole; the next read names it.
                        break;
                    }
                    return Err(Error::Quarantined {
                        first_seq: seg.base_seq,
                        last_seq: seg.last_seq,
                        path: marker.clone(),
                    });
                }
                let (start_seq, pos) = floor_entry(&seg.offsets, seq).unwrap_or((seg.base_seq, 0));
                let records = seg.last_seq + 1 - seg.base_seq;
                ReadPlan {
                    base: seg.base_seq,
                    file: Arc::clone(&seg.file),
                    fd: seg.open.clone(),
                    pos,
                    start_seq,
                    size: seg.size,
                    last_seq: seg.last_seq,
                    avg_frame: seg.size / records.max(1),
                }
            };
            let before = out.len();
            let mut result = self.read_segment(&plan, seq, max - out.len(), &mut out);
            if let Err(Error::Corrupt { position, .. }) = &result
                && *position == plan.pos
                && plan.pos != 0
                && out.len() == before
            {
                // The index entry does not point at the frame it names (an index rewritten
                // with a valid checksum, or bit rot in it): never trust it over the `.log`,
                // read the segment from its start instead.
                tracing::warn!(
                    path = %plan.file.index_path.display(),
                    seq = plan.start_seq,
                    position = plan.pos,
                    "index entry does not match the .log; reading the segment from its start"
                );
                let from_start = ReadPlan {
                    pos: 0,
                    start_seq: plan.base,
                    ..plan
                };
                result = self.read_segment(&from_start, seq, max - out.len(), &mut out);
            }
            let next = match result {
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
                // Records decoded before a bad frame are delivered first; a read starting at
                // the bad frame returns the error.
                Err(_) if !out.is_empty() => break,
                Err(e) => return Err(e),
            };
            if out.len() == before && next <= seq {
                break;
            }
            seq = next;
        }
        Ok(out)
    }

    /// Reads records `seq..` of one segment into `out`; returns the seq after the last one read.
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
            None => self.fds.get(plan.base, path)?,
        };
        let mut pos = plan.pos;
        let mut expect = plan.start_seq;
        let mut need = max;
        let skip = from_seq.saturating_sub(plan.start_seq);
        let mut want_frames = (need as u64).saturating_add(skip).saturating_add(1);
        while need > 0 && pos < plan.size {
            let left = plan.size - pos;
            let want = want_frames
                .saturating_mul(plan.avg_frame.max(64))
                .clamp(4 << 10, 1 << 20)
                .min(left);
            let chunk = read_frame_chunk(
                pos,
                plan.size,
                usize::try_from(want).unwrap_or(usize::MAX),
                |at, len| self.bufs.read_at(&fd, path, at, len),
            )?;
            let before = out.len();
            let (consumed, next_seq) = decode_chunk(&chunk, from_seq, need, Some(expect), out)
                .map_err(|e| e.into_error(path, pos))?;
            if consumed == 0 {
                return Err(Error::Corrupt {
                    path: path.clone(),
                    position: pos,
                    reason: format!("incomplete frame: segment data ends at byte {}", plan.size),
                });
            }
            pos += consumed as u64;
            if let Some(n) = next_seq {
                expect = n;
            }
            need -= out.len() - before;
            want_frames = need as u64 + 1;
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
        Ok(expect)
    }

    fn first_seq(&self) -> u64 {
        self.state.read().first_seq()
    }

    fn last_seq(&self) -> u64 {
        self.state.read().last_seq()
    }

    fn bytes(&self) -> u64 {
        self.state.read().bytes()
    }

    fn segments(&self) -> Vec<SegmentInfo> {
        let st = self.state.read();
        let n = st.segs.len();
        st.segs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.hole.is_none())
            .map(|(i, s)| SegmentInfo {
                base_seq: s.base_seq,
                last_seq: s.last_seq,
                max_timestamp: s.max_timestamp,
                size: s.size,
                log_path: s.file.log_path.clone(),
                index_path: s.file.index_path.clone(),
                time_index_path: s.file.time_index_path.clone(),
                active: i + 1 == n,
            })
            .collect()
    }

    fn sync(&self) -> Result<(), Error> {
        self.check_poisoned()?;
        let last = self.last_seq();
        self.sync_through(last)
    }

    fn delete_before(&self, keep_from: u64) -> Result<u64, Error> {
        self.drop_oldest(|seg, _| seg.last_seq < keep_from)
    }

    fn trim_over_bytes(&self, target: u64) -> Result<u64, Error> {
        self.drop_oldest(|_, total| total > target)
    }

    fn delete_older_than(&self, ts: i64) -> Result<u64, Error> {
        self.drop_oldest(|seg, _| seg.max_timestamp < ts)
    }

    /// Drops segments from the front while `drop(segment, current total bytes)` holds and the
    /// segment is not the active one.
    fn drop_oldest(&self, mut should_drop: impl FnMut(&Seg, u64) -> bool) -> Result<u64, Error> {
        // The append lock orders retention with rolls.
        let _ap = self.appender.lock();
        let victims: Vec<Seg> = {
            let mut st = self.state.write();
            let mut total = st.bytes();
            let mut n = 0;
            while n + 1 < st.segs.len() {
                let Some(seg) = st.segs.get(n) else { break };
                if !should_drop(seg, total) {
                    break;
                }
                total -= seg.size + seg.index_bytes;
                n += 1;
            }
            st.segs.drain(..n).collect()
        };
        if victims.is_empty() {
            return Ok(0);
        }
        let mut freed = 0;
        for seg in victims.iter().filter(|s| s.hole.is_none()) {
            // Index files first: a crash in between leaves a segment whose index is rebuilt.
            remove_if_exists(&seg.file.index_path)?;
            remove_if_exists(&seg.file.time_index_path)?;
            remove_if_exists(&seg.file.log_path)?;
            self.fds.remove(seg.base_seq);
            freed += seg.size + seg.index_bytes;
        }
        self.fsync_dir()?;
        Ok(freed)
    }

    /// Records durably that the log holds every seq up to `seq` (see
    /// [`RECOVERY_POINT_FILE_NAME`](crate::RECOVERY_POINT_FILE_NAME)).
    fn write_recovery_point(&self, seq: u64) -> Result<(), Error> {
        self.faults
            .check(Op::Fsync)
            .map_err(|e| Error::io(&self.dir, e))?;
        crate::recovery::write_recovery_point(&self.dir, seq)
    }

    fn next_seq(&self) -> u64 {
        self.state.read().active().map_or(1, |a| a.last_seq + 1)
    }

    fn quarantined(&self) -> Vec<(RangeInclusive<u64>, PathBuf)> {
        self.state
            .read()
            .segs
            .iter()
            .filter_map(|s| {
                s.hole
                    .as_ref()
                    .map(|p| (s.base_seq..=s.last_seq, p.clone()))
            })
            .collect()
    }

    fn start_at(&self, seq: u64) -> Result<(), Error> {
        let mut guard = self.appender.lock();
        self.check_poisoned()?;
        let ap = &mut *guard;
        let (has_records, last) = {
            let st = self.state.read();
            let has = st
                .segs
                .iter()
                .any(|s| s.hole.is_none() && s.last_seq >= s.base_seq);
            (has, st.last_seq())
        };
        if has_records {
            return Err(Error::NotEmpty {
                dir: self.dir.clone(),
                last_seq: last,
            });
        }
        if seq == 0 || seq < ap.next_seq {
            return Err(Error::InvalidStart {
                seq,
                next_seq: ap.next_seq,
            });
        }
        if seq == ap.next_seq {
            return Ok(());
        }
        // The old (empty) segment files go first: a crash in between leaves a directory with
        // no segment, which opens as a new log the caller starts again.
        let old: Vec<(u64, Arc<SegFile>)> = self
            .state
            .read()
            .segs
            .iter()
            .filter(|s| s.hole.is_none())
            .map(|s| (s.base_seq, Arc::clone(&s.file)))
            .collect();
        for (_, f) in &old {
            remove_if_exists(&f.index_path)?;
            remove_if_exists(&f.time_index_path)?;
            remove_if_exists(&f.log_path)?;
        }
        self.fsync_dir().inspect_err(|_| self.poison())?;
        let file = self
            .create_segment_file(seq)
            .inspect_err(|_| self.poison())?;
        self.fsync_dir().inspect_err(|_| self.poison())?;
        let sf = seg_file(&self.dir, seq);
        let file = Arc::new(file);
        {
            let mut st = self.state.write();
            st.segs = vec![Seg {
                base_seq: seq,
                file: Arc::clone(&sf),
                open: Some(Arc::clone(&file)),
                last_seq: seq - 1,
                size: 0,
                max_timestamp: i64::MIN,
                offsets: Vec::new(),
                times: Vec::new(),
                index_bytes: 0,
                hole: None,
            }];
        }
        for (base, _) in &old {
            self.fds.remove(*base);
        }
        self.unsynced_closed.lock().clear();
        {
            let mut s = self.sync_state.lock();
            s.synced_seq = seq - 1;
            s.written_seq = seq - 1;
            s.dirty_since = None;
        }
        ap.active = sf;
        ap.file = file;
        ap.size = 0;
        ap.next_seq = seq;
        ap.builder = IndexBuilder::new(self.opts.index_interval_bytes);
        self.write_recovery_point(seq - 1)
            .inspect_err(|_| self.poison())?;
        tracing::info!(dir = %self.dir.display(), seq, "empty log now starts at a new seq");
        Ok(())
    }

    fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, Error> {
        let candidates: Vec<(u64, u64)> = {
            let st = self.state.read();
            st.segs
                .iter()
                .filter_map(|s| time_floor(&s.times, s.max_timestamp, ts).map(|f| (f, s.last_seq)))
                .collect()
        };
        for (from, last) in candidates {
            let mut seq = from;
            while seq <= last {
                let batch = match self.read(seq, 256) {
                    Ok(b) => b,
                    Err(Error::OutOfRange { .. }) => break,
                    Err(e) => return Err(e),
                };
                let Some(end) = batch.last().map(|r| r.seq) else {
                    break;
                };
                if let Some(r) = batch
                    .iter()
                    .find(|r| r.seq <= last && r.message.timestamp >= ts)
                {
                    return Ok(Some(r.seq));
                }
                seq = end + 1;
            }
        }
        Ok(None)
    }
}

impl Log {
    /// Opens the log in `dir`, creating the directory and an empty log if needed.
    ///
    /// Recovery: closed segments are loaded from their index files (a segment whose index is
    /// missing or inconsistent is scanned and its index rebuilt); the active segment is scanned,
    /// and the first frame with a bad length, CRC or seq and everything after it is truncated
    /// and synced. What was repaired is in [`Log::recovery_report`] and logged with
    /// `tracing::warn!`.
    ///
    /// Open first takes an exclusive lock on `dir/.lock` (creating the file), held until the
    /// `Log` is closed or dropped; the lock file is not a segment file and is not reported as a
    /// stray file.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`], [`Error::NotADirectory`] when `dir` is a file,
    /// [`Error::Locked`] when another `Log` (in this or another process) has `dir` open,
    /// [`Error::Io`], and [`Error::Corrupt`] when the segments' seqs have a gap.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Log, Error> {
        let inner = Arc::new(Inner::open(dir, opts)?);
        let flusher = match inner.opts.sync {
            SyncPolicy::Interval(d) => Some(Flusher::start(&inner, d)?),
            _ => None,
        };
        Ok(Log { inner, flusher })
    }

    /// What [`Log::open`] found and repaired.
    pub fn recovery_report(&self) -> &RecoveryReport {
        self.inner.recovery_report()
    }

    /// The directory holding the log.
    pub fn dir(&self) -> &Path {
        self.inner.dir()
    }

    /// The options in effect (with defaults resolved).
    pub fn options(&self) -> &Options {
        self.inner.options()
    }

    /// Appends one message and returns its seq.
    ///
    /// # Errors
    /// [`Error::MessageTooLarge`], [`Error::Poisoned`], [`Error::Io`].
    pub fn append(&self, msg: &Message) -> Result<u64, Error> {
        self.inner.append(msg)
    }

    /// Appends messages with contiguous seqs, writing the batch with one write call per segment
    /// it lands in, and returns their seqs. An empty batch returns an empty range
    /// (`next..=next - 1`). The whole batch is checked against `max_message_bytes` first, so a
    /// too-large message rejects the batch without writing any of it.
    ///
    /// # Errors
    /// [`Error::MessageTooLarge`], [`Error::Poisoned`], [`Error::Io`]. A failed write or fsync
    /// poisons the log. A failed roll (creating the next segment) does not: the log stays as
    /// it was and the next append retries. When a batch spans a roll and the roll fails, the
    /// part written before it stays in the log (readable, but not acknowledged).
    pub fn append_batch(&self, msgs: &[Message]) -> Result<RangeInclusive<u64>, Error> {
        self.inner.append_batch(msgs)
    }

    /// The fault injector of this log (tests of failure handling only).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn faults(&self) -> &crate::fault::FaultInjector {
        &self.inner.faults
    }

    /// The highest seq known to be on stable storage (tests of the sync policies only).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn synced_seq(&self) -> u64 {
        self.inner.sync_state.lock().synced_seq
    }

    /// Stops the flusher thread, if any, and waits for it to exit.
    fn stop_flusher(&mut self) {
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

    /// Closes the active segment now (writing its `.index` and `.timeindex`) so it can be
    /// tiered; the next append goes to a new segment. A no-op when the active segment is empty.
    ///
    /// # Errors
    /// [`Error::Poisoned`], [`Error::Io`].
    pub fn roll(&self) -> Result<(), Error> {
        self.inner.roll()
    }

    /// Up to `max` records starting at `from_seq`.
    ///
    /// `from_seq == last_seq() + 1` returns an empty `Vec` (a caught-up reader).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when `from_seq < first_seq()` or `from_seq > last_seq() + 1`;
    /// [`Error::Corrupt`] when stored bytes are invalid; [`Error::Io`].
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, Error> {
        self.inner.read(from_seq, max)
    }

    /// Seq of the first record (0 for a log that never held a record). After retention it is
    /// the base seq of the oldest kept segment.
    pub fn first_seq(&self) -> u64 {
        self.inner.first_seq()
    }

    /// Seq of the last record (0 for a log that never held a record).
    pub fn last_seq(&self) -> u64 {
        self.inner.last_seq()
    }

    /// The seq the next append gets: `last_seq() + 1`, or the seq an empty log was started at
    /// with [`Log::start_at`].
    pub fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }

    /// The explicit holes in the log's seqs, with their marker files in the quarantine
    /// directory: seqs a repair ([`RecoveryMode::Repair`](crate::RecoveryMode::Repair)) moved
    /// aside or found missing. Reads into one fail with [`Error::Quarantined`]. Empty unless
    /// the log was repaired.
    pub fn quarantined(&self) -> Vec<(RangeInclusive<u64>, PathBuf)> {
        self.inner.quarantined()
    }

    /// Makes `seq` the seq of the next append of a log that holds no records, like Kafka's
    /// log start offset after a full truncation: the tiered layer uses it when the local log
    /// was lost but the remote tier holds seqs up to `seq - 1`, so new records never reuse
    /// them. The empty segment file is replaced by `seq`'s and the directory synced; a crash in
    /// between leaves an empty log that starts at 1.
    ///
    /// ```
    /// use krabka_protocol::Message;
    /// use krabka_storage::{Log, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options::default())?;
    /// log.start_at(301)?;
    /// assert_eq!(log.append(&Message::new("x"))?, 301);
    /// assert!(log.start_at(400).is_err()); // it holds a record now
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotEmpty`] when the log holds a record; [`Error::InvalidStart`] when `seq` is
    /// below [`Log::next_seq`] (a no-op when equal); [`Error::Poisoned`]; [`Error::Io`].
    pub fn start_at(&self, seq: u64) -> Result<(), Error> {
        self.inner.start_at(seq)
    }

    /// Total on-disk size of the log's files (`.log`, `.index` and `.timeindex`), in bytes.
    pub fn bytes(&self) -> u64 {
        self.inner.bytes()
    }

    /// The segments, ordered by base seq; the last one is the active segment.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.inner.segments()
    }

    /// Forces every appended record to stable storage (whatever the [`SyncPolicy`]): the active
    /// segment, and under [`SyncPolicy::Never`] also the closed segments (and their index files)
    /// rolled since the last sync. When it returns `Ok`, every record appended before the call
    /// survives a power loss.
    ///
    /// # Errors
    /// [`Error::Poisoned`]; [`Error::Io`] when the fsync fails (the log is then poisoned).
    pub fn sync(&self) -> Result<(), Error> {
        self.inner.sync()
    }

    /// Syncs every appended record to stable storage, whatever the [`SyncPolicy`] (also
    /// [`SyncPolicy::Never`]: closed segments not yet synced are synced too), then closes the
    /// log and releases its directory lock. Dropping a `Log` instead releases the lock without
    /// syncing.
    ///
    /// # Errors
    /// As [`Log::sync`]; the log is closed either way.
    pub fn close(mut self) -> Result<(), Error> {
        self.stop_flusher();
        self.inner.sync()?;
        let _ap = self.inner.appender.lock();
        self.inner.check_poisoned()?;
        let last = self.inner.next_seq() - 1;
        self.inner.write_recovery_point(last)
    }

    /// Drops whole segments whose records are all below `keep_from`. A segment partly below
    /// `keep_from` stays, and the active segment is never dropped. Returns the bytes freed.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be removed.
    pub fn delete_before(&self, keep_from: u64) -> Result<u64, Error> {
        self.inner.delete_before(keep_from)
    }

    /// Drops the oldest whole segments until [`Log::bytes`] `<= target`, never the active one;
    /// returns the bytes freed (the log may stay above `target`).
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be removed.
    pub fn trim_over_bytes(&self, target: u64) -> Result<u64, Error> {
        self.inner.trim_over_bytes(target)
    }

    /// Drops the oldest whole closed segments whose max timestamp is `< ts` (stopping at the
    /// first that is not); returns the bytes freed.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be removed.
    pub fn delete_older_than(&self, ts: i64) -> Result<u64, Error> {
        self.inner.delete_older_than(ts)
    }

    /// The seq of the first record whose timestamp is `>= ts`, found through the time indexes;
    /// `None` when no record has such a timestamp.
    ///
    /// # Errors
    /// [`Error::Corrupt`], [`Error::Io`] from reading the segment.
    pub fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, Error> {
        self.inner.seq_for_timestamp(ts)
    }
}

impl Drop for Log {
    /// Stops and joins the flusher thread; unlike [`Log::close`], does not sync.
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

/// The background thread of [`SyncPolicy::Interval`]: syncs the log once its oldest unsynced
/// append is `d` old, so an idle log's tail does not stay unsynced.
#[derive(Debug)]
struct Flusher {
    handle: JoinHandle<()>,
}

impl Flusher {
    fn start(inner: &Arc<Inner>, d: Duration) -> Result<Flusher, Error> {
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

struct ReadPlan {
    base: u64,
    file: Arc<SegFile>,
    /// The active segment's open file; `None` for a closed segment (opened through the cache).
    fd: Option<Arc<File>>,
    pos: u64,
    start_seq: u64,
    size: u64,
    last_seq: u64,
    avg_frame: u64,
}

/// Writes a closed segment's `.index` and `.timeindex`; returns their total size.
pub(crate) fn write_indexes(seg: &Seg, sync: bool, faults: &FaultInjector) -> Result<u64, Error> {
    let idx = OffsetIndex {
        base_seq: seg.base_seq,
        last_seq: seg.last_seq,
        log_size: seg.size,
        max_timestamp: seg.max_timestamp,
        entries: seg.offsets.clone(),
    }
    .encode();
    let tidx = TimeIndex {
        base_seq: seg.base_seq,
        max_timestamp: seg.max_timestamp,
        entries: seg.times.clone(),
    }
    .encode();
    write_file(&seg.file.index_path, &idx, sync, faults)?;
    write_file(&seg.file.time_index_path, &tidx, sync, faults)?;
    Ok((idx.len() + tidx.len()) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_cache_keeps_at_most_cap_files_and_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (1..=5u64)
            .map(|b| {
                let p = dir.path().join(format!("{b}"));
                fs::write(&p, b"x").unwrap();
                p
            })
            .collect();
        let cache = FdCache::new(3);
        for (b, p) in (1..=3u64).zip(&paths) {
            cache.get(b, p).unwrap();
        }
        // 1 is used again, so 2 is the least recently used when 4 comes in.
        let one = cache.get(1, &paths[0]).unwrap();
        cache.get(4, &paths[3]).unwrap();
        assert_eq!(cache.len(), 3);
        let cached: Vec<u64> = {
            let mut v: Vec<u64> = cache.inner.lock().files.keys().copied().collect();
            v.sort_unstable();
            v
        };
        assert_eq!(cached, vec![1, 3, 4]);
        // A hit returns the same open file.
        assert!(Arc::ptr_eq(&one, &cache.get(1, &paths[0]).unwrap()));
        cache.remove(1);
        assert_eq!(cache.len(), 2);
        // A missing file is an I/O error, and nothing is cached for it.
        let missing = dir.path().join("missing");
        assert!(matches!(cache.get(9, &missing), Err(Error::Io { .. })));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn log_is_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<Log>();
    }
}
