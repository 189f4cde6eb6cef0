//! Opening a log: taking the directory lock ([`super::lock`]), recovery (in
//! [`crate::recovery`]), and the log's state from what recovery found.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use parking_lot::{Condvar, Mutex, RwLock};

use super::append::Appender;
use super::lock::lock_dir;
use super::read::FdCache;
use super::stats::Counters;
use super::sync::SyncState;
use super::{Inner, State, no_active_segment};
use crate::bufs::ReadBufs;
use crate::fault::FaultInjector;
use crate::fsutil::IoResultExt;
use crate::index::IndexBuilder;
use crate::layout::hole::with_acceptance;
use crate::{Error, Options};

impl Inner {
    /// Opens the log in `dir`: checks the options, makes sure the directory exists, locks it,
    /// runs recovery, and sets up the appender on the active segment recovery left.
    pub(super) fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Inner, Error> {
        let opts = opts.resolve()?;
        let dir = dir.as_ref().to_path_buf();
        ensure_dir(&dir)?;
        // Before recovery, which may truncate files another writer is using.
        let lock = lock_dir(&dir)?;
        let crate::recovery::Recovered {
            segs,
            active_builder,
            mut report,
            clean_marker,
        } = crate::recovery::recover(&dir, &opts)?;
        let builder =
            active_builder.unwrap_or_else(|| IndexBuilder::new(opts.index_interval_bytes));
        let mut appender =
            Appender::on_active(&segs, builder).ok_or_else(|| no_active_segment(&dir))?;
        appender.clean_marker = clean_marker;
        // Longer than the segment's batches when a crash left its preallocated space.
        appender.file_len = appender
            .file
            .metadata()
            .at(&appender.active.log_path)?
            .len()
            .max(appender.size);
        let last = appender.next_seq - 1;
        let accepted = crate::read_accepted_holes(&dir)?;
        report.holes = with_acceptance(std::mem::take(&mut report.holes), &accepted);
        Ok(Inner {
            fds: FdCache::new(opts.max_open_segments),
            dir,
            opts,
            _lock: lock,
            unsynced_closed: Mutex::new(Vec::new()),
            state: RwLock::new(State { segs }),
            appender: Mutex::new(appender),
            sync_state: Mutex::new(SyncState::new(last)),
            sync_done: Condvar::new(),
            sync_arrived: Condvar::new(),
            flush_wake: Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison_cause: std::sync::OnceLock::new(),
            writers: AtomicUsize::new(0),
            report,
            bufs: ReadBufs::default(),
            faults: FaultInjector::default(),
            counters: Counters::default(),
            accepted: Mutex::new(accepted),
        })
    }
}

/// Creates `dir` when it does not exist; [`Error::NotADirectory`] when it is something else.
fn ensure_dir(dir: &Path) -> Result<(), Error> {
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(Error::NotADirectory {
            path: dir.to_path_buf(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir).at(dir),
        Err(e) => Err(Error::io(dir, e)),
    }
}
