//! Single-flight fetches: the [`Flight`] every waiter of one entry blocks on, and what a
//! waiter gets from it.

use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

/// A fetch in progress: waiters block until it ends, and take its entry when it fetched one.
#[derive(Default)]
pub(super) struct Flight {
    state: Mutex<FlightState>,
    ended: Condvar,
    /// Async waiters (reads awaiting a fetch without a thread), told the entry when it ends.
    subscribers: Mutex<Vec<tokio::sync::oneshot::Sender<Option<Bytes>>>>,
}

/// How a [`Flight`] stands.
#[derive(Default)]
enum FlightState {
    /// Still fetching.
    #[default]
    Running,
    /// Ended with this entry.
    Fetched(Bytes),
    /// Ended without one (the fetch failed, or its result was refused).
    Failed,
}

/// What a waiter got from a [`Flight`].
pub(super) enum Waited {
    /// The entry the flight fetched (whether or not the cache could keep it).
    Fetched(Bytes),
    /// The flight failed: the waiter fetches itself and reports what goes wrong.
    Failed,
    /// The flight had not ended by the deadline.
    TimedOut,
}

impl Flight {
    /// Waits until the flight ends or `until` passes.
    pub(super) fn wait(&self, until: Instant) -> Waited {
        let mut state = self.state.lock();
        loop {
            match &*state {
                FlightState::Fetched(value) => return Waited::Fetched(value.clone()),
                FlightState::Failed => return Waited::Failed,
                FlightState::Running => {}
            }
            if self.ended.wait_until(&mut state, until).timed_out() {
                return match &*state {
                    FlightState::Fetched(value) => Waited::Fetched(value.clone()),
                    FlightState::Failed => Waited::Failed,
                    FlightState::Running => Waited::TimedOut,
                };
            }
        }
    }

    /// A receiver of the flight's entry (`None`: it failed), for a waiter that must not block
    /// a thread; told at once when the flight has ended already.
    pub(super) fn subscribe(&self) -> tokio::sync::oneshot::Receiver<Option<Bytes>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The state's lock orders this against `end`: either the flight has ended (and the
        // entry is sent here) or the sender is listed before `end` takes the list.
        let state = self.state.lock();
        match &*state {
            FlightState::Fetched(value) => {
                let _ = tx.send(Some(value.clone()));
            }
            FlightState::Failed => {
                let _ = tx.send(None);
            }
            FlightState::Running => self.subscribers.lock().push(tx),
        }
        rx
    }

    pub(super) fn end(&self, value: Option<Bytes>) {
        let mut state = self.state.lock();
        *state = match &value {
            Some(value) => FlightState::Fetched(value.clone()),
            None => FlightState::Failed,
        };
        let subscribers = std::mem::take(&mut *self.subscribers.lock());
        drop(state);
        self.ended.notify_all();
        for tx in subscribers {
            let _ = tx.send(value.clone());
        }
    }
}

/// The longest wait [`ByteLru::get_or_fetch`] honours (a longer one is cut to it).
pub(super) const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why [`ByteLru::get_or_fetch`] gave no entry.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FetchError<E> {
    /// This caller's own fetch failed.
    Fetch(E),
    /// Another thread's fetch of the same entry was still running after the wait allowed.
    WaitTimedOut(Duration),
}
