//! The wake-up of a tail writer: a partition whose append waits for the bucket asks for a
//! window, and appends count the bytes waiting; the writer's thread waits for the window's end,
//! or for a full object's worth of bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A flag and a condition variable: `nudge` sets the flag and wakes the waiter; `add` counts
/// appended bytes and, past `full`, ends even a wait for the window's end.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    nudged: Mutex<bool>,
    cv: Condvar,
    /// Bytes appended since the last window began.
    waiting: AtomicU64,
    /// Bytes that make a full object ([`TailConfig::max_bytes`](super::TailConfig::max_bytes)).
    full: AtomicU64,
}

impl Wake {
    /// A wake-up that ends a window's wait early once `full` bytes wait.
    pub(crate) fn new(full: u64) -> Self {
        Self {
            full: AtomicU64::new(full.max(1)),
            ..Self::default()
        }
    }

    /// Counts `bytes` appended; once a full object's worth waits, the writer starts a window
    /// without waiting for the interval's end.
    pub(crate) fn add(&self, bytes: u64) {
        let before = self.waiting.fetch_add(bytes, Ordering::Relaxed);
        let full = self.full.load(Ordering::Relaxed);
        if before < full && before.saturating_add(bytes) >= full {
            self.nudge();
        }
    }

    /// A window begins: what waits now goes into it.
    pub(crate) fn begin_window(&self) {
        self.waiting.store(0, Ordering::Relaxed);
    }

    fn is_full(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) >= self.full.load(Ordering::Relaxed)
    }

    /// Asks for a window.
    pub(crate) fn nudge(&self) {
        *self.nudged.lock() = true;
        self.cv.notify_all();
    }

    /// Waits until `until` (nudges do not end this wait, one window per interval, unless a
    /// full object's worth of bytes waits), then for a nudge at most `idle` more; clears the
    /// flag.
    pub(crate) fn wait(&self, until: std::time::Instant, idle: Duration) {
        let mut nudged = self.nudged.lock();
        loop {
            let now = std::time::Instant::now();
            if self.is_full() {
                break;
            }
            if now < until {
                self.cv.wait_for(&mut nudged, until - now);
                continue;
            }
            if *nudged || self.cv.wait_for(&mut nudged, idle).timed_out() {
                break;
            }
        }
        *nudged = false;
    }
}
