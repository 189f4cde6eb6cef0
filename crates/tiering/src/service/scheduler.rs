//! The scheduler: one ready queue served round-robin through the copy slots, a timer heap of
//! partitions waiting for their next round, and the drain at shutdown.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::partition::{Partition, TurnEnd};
use super::{Shared, ShutdownReport};

/// How long a partition whose log is busy (another round, retention past its deadline) waits
/// before it is tried again (at most the round interval).
const BUSY_RETRY: Duration = Duration::from_millis(100);
/// How often waits for turns look again.
const POLL: Duration = Duration::from_millis(20);

/// A partition waiting for its next round.
struct Due {
    at: Instant,
    serial: u64,
    part: Arc<Partition>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.serial) == (other.at, other.serial)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    /// Reversed: the heap's top is the earliest.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.serial).cmp(&(self.at, self.serial))
    }
}

/// The ready queue (round-robin order) and the timer heap.
#[derive(Default)]
pub(crate) struct Queues {
    ready: VecDeque<Arc<Partition>>,
    due: BinaryHeap<Due>,
    serial: u64,
}

impl Queues {
    pub(crate) fn push_ready(&mut self, part: Arc<Partition>) {
        self.ready.push_back(part);
    }

    fn push_due(&mut self, part: Arc<Partition>, at: Instant) {
        self.serial += 1;
        self.due.push(Due {
            at,
            serial: self.serial,
            part,
        });
    }

    /// Moves the partitions due by `now` to the back of the ready queue, then pops its front;
    /// else the time the next one is due.
    fn next(&mut self, now: Instant) -> Result<Arc<Partition>, Option<Instant>> {
        while self.due.peek().is_some_and(|d| d.at <= now) {
            if let Some(d) = self.due.pop() {
                self.ready.push_back(d.part);
            }
        }
        self.ready
            .pop_front()
            .ok_or_else(|| self.due.peek().map(|d| d.at))
    }
}

/// The scheduler task: until the service stops, takes the next ready partition, waits for a
/// copy slot and runs the partition's turn in its own task.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    loop {
        if *stop.borrow() {
            break;
        }
        let now = Instant::now();
        let next = shared.queues.lock().next(now);
        let part = match next {
            Ok(part) => part,
            Err(due) => {
                let sleep = due.map_or(Duration::from_secs(3600), |t| t - now.min(t));
                tokio::select! {
                    () = shared.wake.notified() => {}
                    () = tokio::time::sleep(sleep) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
        };
        if part.is_removed() {
            continue;
        }
        if part.is_lingering() {
            let retry = BUSY_RETRY.min(shared.config.round_interval);
            shared.queues.lock().push_due(part, now + retry);
            continue;
        }
        let permit = tokio::select! {
            p = shared.copy_slots.clone().acquire_owned() => p,
            _ = stop.changed() => break,
        };
        let Ok(permit) = permit else { break };
        shared.turns_running.fetch_add(1, Ordering::AcqRel);
        let shared = shared.clone();
        tokio::spawn(async move {
            let end = part.turn(&shared).await;
            drop(permit);
            if end == TurnEnd::RoundDone {
                crate::metrics::publish_cache(&shared.cache.stats());
                crate::metrics::publish_read_engine(&shared.cache.read_engine_stats());
            }
            let now = Instant::now();
            let interval = shared.config.round_interval;
            {
                let mut q = shared.queues.lock();
                match end {
                    TurnEnd::More => q.push_ready(part),
                    TurnEnd::RoundDone => q.push_due(part, now + interval),
                    TurnEnd::Busy => q.push_due(part, now + BUSY_RETRY.min(interval)),
                }
            }
            shared.wake.notify_one();
            shared.turns_running.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Waits until no turn runs or `until`; whether none runs.
async fn wait_turns(shared: &Shared, until: Instant) -> bool {
    loop {
        if shared.turns_running.load(Ordering::Acquire) == 0 {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        tokio::time::sleep(POLL.min(until - now)).await;
    }
}

/// Shutdown within `deadline` (see [`TieringService::shutdown`](super::TieringService::shutdown)).
pub(crate) async fn drain(shared: Arc<Shared>, deadline: Duration) -> ShutdownReport {
    let start = Instant::now();
    let end = start + deadline;
    let _ = shared.stop.send(true);
    shared.wake.notify_one();
    let mut abandoned_turns = 0;
    if !wait_turns(&shared, start + deadline * 3 / 4).await {
        abandoned_turns = shared.turns_running.load(Ordering::Acquire);
        let _ = shared.cancel.send(true);
        wait_turns(&shared, end).await;
    }
    let parts: Vec<Arc<Partition>> = shared.partitions.lock().values().cloned().collect();
    let remaining = end.saturating_duration_since(Instant::now());
    let cleaned = tokio::time::timeout(remaining, async {
        for part in parts {
            part.log.wait_for_abandoned().await;
        }
    })
    .await
    .is_ok();
    let idle = shared.turns_running.load(Ordering::Acquire) == 0;
    ShutdownReport {
        abandoned_turns,
        clean: cleaned && idle,
    }
}
