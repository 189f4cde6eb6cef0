//! The wake-up of a tail writer: a partition whose append waits for the bucket asks for a
//! window; the writer's thread waits for it.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A flag and a condition variable: `nudge` sets the flag and wakes the waiter.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    nudged: Mutex<bool>,
    cv: Condvar,
}

impl Wake {
    /// Asks for a window.
    pub(crate) fn nudge(&self) {
        *self.nudged.lock() = true;
        self.cv.notify_all();
    }

    /// Waits until `until` (nudges do not end this wait: one window per interval), then for a
    /// nudge at most `idle` more; clears the flag.
    pub(crate) fn wait(&self, until: std::time::Instant, idle: Duration) {
        let mut nudged = self.nudged.lock();
        loop {
            let now = std::time::Instant::now();
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
