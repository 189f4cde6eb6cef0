//! The read engine: one bounded pool for the cold reads of every partition sharing a
//! [`RemoteReadCache`](crate::RemoteReadCache).
//!
//! Every remote fetch of the read path goes through it: a reader's own fetch (a chunk, an
//! offset or time index) waits here for a fetch slot and runs on the reader's thread; a
//! read-ahead fetch is queued here and runs on one of the engine's threads. At most
//! [`ReadLimits::threads`] fetches are in flight at once (so the engine never starts more
//! threads than that), and the data ranges in flight add up to at most
//! [`ReadLimits::bytes_in_flight`] (a single fetch larger than that runs alone).
//!
//! Fairness: each reader (a tiered log or read replica: one partition) has its own queue, its
//! own fetches first and its read-ahead after; free slots go to the readers in turn, one
//! fetch each, so a reader with a long read-ahead queue delays another reader's fetch by at
//! most one fetch per reader waiting. Adjacent read-ahead chunks of one segment queued by one
//! reader leave as one ranged fetch of up to [`ReadLimits::coalesce_chunks`] chunks.
//!
//! With [`ReadLimits::gets_per_second`], every fetch (a GET of the remote store) first takes a
//! token from one bucket, one fetch at a time, after it got its slot; the time spent waiting
//! for it is counted in [`ReadEngineStats::get_budget_wait`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::job::{self, Job};
use crate::quota::ByteRateQuota;

/// Default [`ReadLimits::threads`]: fetches in flight (and engine threads) at once.
pub const DEFAULT_READ_FETCH_THREADS: usize = 6;
/// Default [`ReadLimits::bytes_in_flight`]: 16 MiB.
pub const DEFAULT_READ_BYTES_IN_FLIGHT: u64 = 16 << 20;
/// Default [`ReadLimits::coalesce_chunks`].
pub const DEFAULT_COALESCE_CHUNKS: u32 = 4;

/// Read-ahead fetches one reader may have queued; more are not queued (the reader fetches
/// those chunks itself when it gets there).
const AHEAD_PER_READER: usize = 2 * job::DEPTH as usize;
/// How long an idle engine thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(5);
/// How long a reader counts as a sequential reader after it last asked for read-ahead: longer
/// than a lagging consumer's pause between reads on a loaded machine, so that the readers
/// sharing the cache are not undercounted (an overcount only shortens the read-ahead).
const SEQUENTIAL_FOR: Duration = Duration::from_secs(5);

/// The bounds of a read engine: the one every log sharing a
/// [`RemoteReadCache`](crate::RemoteReadCache) reads through (docs/tiering.md, "Reads").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Fetches in flight at once (readers' own and read-ahead), and the most threads the
    /// engine starts for the read-ahead. Minimum: 1.
    pub threads: usize,
    /// Bytes of data ranges in flight at once; a single fetch larger than this runs alone.
    /// Index fetches count against the slots, not the bytes (their size is known only once
    /// fetched). Minimum: 1.
    pub bytes_in_flight: u64,
    /// Fetches (GETs) per second over every reader of the engine; `None`: unlimited.
    /// Minimum: 1.
    pub gets_per_second: Option<u32>,
    /// Most adjacent read-ahead chunks sent as one ranged fetch. Minimum: 1.
    pub coalesce_chunks: u32,
}

impl Default for ReadLimits {
    /// The limits of a standalone log's own engine: 6 fetches and 16 MiB in flight, no GET
    /// budget, up to 4 chunks per read-ahead fetch.
    fn default() -> Self {
        Self {
            threads: DEFAULT_READ_FETCH_THREADS,
            bytes_in_flight: DEFAULT_READ_BYTES_IN_FLIGHT,
            gets_per_second: None,
            coalesce_chunks: DEFAULT_COALESCE_CHUNKS,
        }
    }
}

/// A snapshot of a read engine's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadEngineStats {
    /// Fetch slots given (readers' own fetches and read-ahead fetches) since the start.
    pub fetches: u64,
    /// Read-ahead chunks that left inside another chunk's ranged fetch (coalesced).
    pub chunks_coalesced: u64,
    /// Fetches in flight now.
    pub in_flight: usize,
    /// Most fetches that were in flight at once.
    pub in_flight_high_water: usize,
    /// Bytes of data ranges in flight now.
    pub bytes_in_flight: u64,
    /// Most bytes of data ranges that were in flight at once.
    pub bytes_in_flight_high_water: u64,
    /// Engine threads running now.
    pub threads: usize,
    /// Most engine threads that ran at once.
    pub threads_high_water: usize,
    /// Fetches (readers' own and read-ahead) waiting for a slot now.
    pub queued: usize,
    /// Time fetches spent waiting for the GET budget, summed over fetches.
    pub get_budget_wait: Duration,
}

/// What one reader has queued.
#[derive(Default)]
struct ReaderQueue {
    /// Its own fetches, waiting for a slot (served before its read-ahead).
    demand: VecDeque<Arc<Ticket>>,
    /// Its reads' own fetches run on an engine thread while the read awaits them without a
    /// thread ([`ReadEngine::fetch_for_read`]): after its blocking fetches, before its
    /// read-ahead.
    fetch: VecDeque<Job>,
    ahead: VecDeque<Job>,
    /// Whether the reader is in the turn order.
    in_ring: bool,
}

/// A reader's own fetch waiting for a slot.
struct Ticket {
    bytes: u64,
    /// Set (under the state lock) when the slot is given.
    granted: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    readers: HashMap<u64, ReaderQueue>,
    /// Readers with something queued, in turn order.
    ring: VecDeque<u64>,
    in_flight: usize,
    in_flight_high_water: usize,
    bytes_in_flight: u64,
    bytes_high_water: u64,
    /// Read-ahead batches given a slot, waiting for a thread.
    ready: VecDeque<Vec<Job>>,
    threads: usize,
    idle: usize,
    threads_high_water: usize,
    queued: usize,
    closed: bool,
}

struct Core {
    limits: ReadLimits,
    state: Mutex<State>,
    /// Engine threads wait here for read-ahead batches.
    work: Condvar,
    /// Readers' own fetches wait here for their slot.
    granted: Condvar,
    gets: Option<ByteRateQuota>,
    /// Takes the GET budget one fetch at a time, so the bucket is never overdrawn by more than
    /// one fetch.
    get_gate: Mutex<()>,
    fetches: AtomicU64,
    coalesced: AtomicU64,
    get_wait_nanos: AtomicU64,
    /// The readers that asked for read-ahead lately, with when they last did.
    sequential: Mutex<Sequential>,
}

/// The readers reading sequentially now ([`ReadEngine::sequential_readers`]).
struct Sequential {
    last_seen: HashMap<u64, Instant>,
    /// When readers not seen for [`SEQUENTIAL_FOR`] were last dropped.
    pruned: Instant,
}

/// A handle on a read engine; its threads end once the last handle is dropped (and they have
/// finished the fetch in hand).
pub(crate) struct ReadEngine {
    core: Arc<Core>,
}

impl Drop for ReadEngine {
    fn drop(&mut self) {
        let mut st = self.core.state.lock();
        st.closed = true;
        st.readers.clear();
        st.ring.clear();
        let dropped = st.ready.len();
        st.ready.clear();
        st.in_flight -= dropped.min(st.in_flight);
        st.queued = 0;
        drop(st);
        self.core.work.notify_all();
        self.core.granted.notify_all();
    }
}

/// A fetch slot: released when dropped.
pub(crate) struct Permit {
    core: Arc<Core>,
    bytes: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.core.release(self.bytes);
    }
}

impl ReadEngine {
    /// An engine within `limits` (values below a minimum are raised to it). No thread starts
    /// before the first read-ahead fetch.
    pub(crate) fn new(limits: ReadLimits) -> Self {
        let limits = ReadLimits {
            threads: limits.threads.max(1),
            bytes_in_flight: limits.bytes_in_flight.max(1),
            gets_per_second: limits.gets_per_second.map(|g| g.max(1)),
            coalesce_chunks: limits.coalesce_chunks.max(1),
        };
        Self {
            core: Arc::new(Core {
                limits,
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                granted: Condvar::new(),
                gets: limits
                    .gets_per_second
                    .map(|g| ByteRateQuota::new(u64::from(g))),
                get_gate: Mutex::new(()),
                fetches: AtomicU64::new(0),
                coalesced: AtomicU64::new(0),
                get_wait_nanos: AtomicU64::new(0),
                sequential: Mutex::new(Sequential {
                    last_seen: HashMap::new(),
                    pruned: Instant::now(),
                }),
            }),
        }
    }

    /// Notes that `reader` reads sequentially (it asks for read-ahead) and returns how many
    /// readers of the engine did so within the last [`SEQUENTIAL_FOR`], itself included: the
    /// readers a shared cache's read-ahead is divided between.
    pub(crate) fn sequential_readers(&self, reader: u64) -> usize {
        let now = Instant::now();
        let mut seq = self.core.sequential.lock();
        seq.last_seen.insert(reader, now);
        // Dropping the readers gone quiet walks them all: at most once a second.
        if now.duration_since(seq.pruned) >= Duration::from_secs(1) {
            seq.last_seen
                .retain(|_, seen| now.duration_since(*seen) < SEQUENTIAL_FOR);
            seq.pruned = now;
        }
        seq.last_seen.len()
    }

    /// The limits.
    pub(crate) fn limits(&self) -> ReadLimits {
        self.core.limits
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> ReadEngineStats {
        let st = self.core.state.lock();
        ReadEngineStats {
            fetches: self.core.fetches.load(Ordering::Relaxed),
            chunks_coalesced: self.core.coalesced.load(Ordering::Relaxed),
            in_flight: st.in_flight,
            in_flight_high_water: st.in_flight_high_water,
            bytes_in_flight: st.bytes_in_flight,
            bytes_in_flight_high_water: st.bytes_high_water,
            threads: st.threads,
            threads_high_water: st.threads_high_water,
            queued: st.queued,
            get_budget_wait: Duration::from_nanos(self.core.get_wait_nanos.load(Ordering::Relaxed)),
        }
    }

    /// A slot for one of `reader`'s own fetches of `bytes` (0 for an index), in its turn, and
    /// then its GET token; `Err` with the time waited when no slot came within `wait`.
    pub(crate) fn admit(
        &self,
        reader: u64,
        bytes: u64,
        wait: Duration,
    ) -> Result<Permit, Duration> {
        let core = &self.core;
        let start = Instant::now();
        // Capped at a year so that any `wait` gives a representable instant.
        let deadline = start
            .checked_add(wait.min(Duration::from_secs(365 * 24 * 3600)))
            .unwrap_or(start);
        let ticket = Arc::new(Ticket {
            bytes,
            granted: std::sync::atomic::AtomicBool::new(false),
        });
        let mut st = core.state.lock();
        if st.closed {
            return Err(Duration::ZERO);
        }
        let q = st.readers.entry(reader).or_default();
        q.demand.push_back(ticket.clone());
        let enter = !q.in_ring;
        q.in_ring = true;
        if enter {
            st.ring.push_back(reader);
        }
        st.queued += 1;
        let spawn = core.dispatch(&mut st);
        while !ticket.granted.load(Ordering::Acquire) {
            if st.closed || core.granted.wait_until(&mut st, deadline).timed_out() {
                if ticket.granted.load(Ordering::Acquire) {
                    break;
                }
                if let Some(q) = st.readers.get_mut(&reader)
                    && let Some(i) = q.demand.iter().position(|t| Arc::ptr_eq(t, &ticket))
                {
                    q.demand.remove(i);
                    st.queued -= 1;
                }
                drop(st);
                core.spawn_and_wake(spawn);
                return Err(start.elapsed());
            }
        }
        drop(st);
        core.spawn_and_wake(spawn);
        let permit = Permit {
            core: Arc::clone(core),
            bytes,
        };
        core.take_get();
        Ok(permit)
    }

    /// Queues one of `reader`'s reads' own fetches (`job`, with its [`Job::done`]) to run on an
    /// engine thread in the reader's turn, before its read-ahead: the read awaits the entry
    /// without holding a thread. False when the engine is closing (the job is dropped, and
    /// its read told nothing: it reads itself).
    pub(crate) fn fetch_for_read(&self, reader: u64, job: Job) -> bool {
        self.enqueue(reader, |q| {
            q.fetch.push_back(job);
            true
        })
    }

    /// Queues a read-ahead fetch for `reader`; false when its read-ahead queue is full (or the
    /// engine is closing).
    pub(crate) fn submit(&self, reader: u64, job: Job) -> bool {
        self.enqueue(reader, |q| {
            if q.ahead.len() >= AHEAD_PER_READER {
                return false;
            }
            q.ahead.push_back(job);
            true
        })
    }

    /// Queues a job into `reader`'s queue by `push` (false: it took none), puts the reader in
    /// the ring of readers served in turn, and dispatches; false when the engine is closing or
    /// `push` took nothing.
    fn enqueue(&self, reader: u64, push: impl FnOnce(&mut ReaderQueue) -> bool) -> bool {
        let core = &self.core;
        let mut st = core.state.lock();
        if st.closed {
            return false;
        }
        let q = st.readers.entry(reader).or_default();
        if !push(q) {
            return false;
        }
        let enter = !q.in_ring;
        q.in_ring = true;
        if enter {
            st.ring.push_back(reader);
        }
        st.queued += 1;
        let spawn = core.dispatch(&mut st);
        drop(st);
        core.spawn_and_wake(spawn);
        true
    }
}

/// Threads to start and waiters to wake after a dispatch.
#[derive(Default)]
struct Wake {
    threads: usize,
    demand: bool,
    ready: usize,
}

impl Core {
    /// Gives free slots to the queued fetches, one per reader in turn. Called with the state
    /// locked; what to do once it is unlocked is returned.
    fn dispatch(&self, st: &mut State) -> Wake {
        let mut wake = Wake::default();
        // Each pass gives a slot or drops a reader or a stale read-ahead job: bounded by the
        // entries queued.
        while st.in_flight < self.limits.threads {
            let Some(&reader) = st.ring.front() else {
                break;
            };
            let Some(q) = st.readers.get_mut(&reader) else {
                st.ring.pop_front();
                continue;
            };
            // Read-ahead of chunks that got cached or fetched meanwhile is dropped here.
            if q.demand.is_empty()
                && q.fetch.is_empty()
                && let Some(job) = q.ahead.front()
                && job.is_stale()
            {
                q.ahead.pop_front();
                st.queued -= 1;
                continue;
            }
            let size = match (q.demand.front(), q.fetch.front(), q.ahead.front()) {
                (Some(t), _, _) => t.bytes,
                (None, Some(j), _) | (None, None, Some(j)) => j.bytes(),
                (None, None, None) => {
                    q.in_ring = false;
                    st.readers.remove(&reader);
                    st.ring.pop_front();
                    continue;
                }
            };
            if st.in_flight > 0 && st.bytes_in_flight + size > self.limits.bytes_in_flight {
                break;
            }
            let mut taken = size;
            if let Some(ticket) = q.demand.pop_front() {
                ticket.granted.store(true, Ordering::Release);
                wake.demand = true;
            } else if let Some(job) = q.fetch.pop_front() {
                st.ready.push_back(vec![job]);
                wake.ready += 1;
            } else if let Some(first) = q.ahead.pop_front() {
                let mut batch = vec![first];
                // Adjacent chunks of the same segment leave with it, within the bounds.
                while batch.len() < self.limits.coalesce_chunks as usize {
                    let Some(next) = q.ahead.front() else { break };
                    let Some(last) = batch.last() else { break };
                    if !last.followed_by(next)
                        || st.bytes_in_flight + taken + next.bytes() > self.limits.bytes_in_flight
                    {
                        break;
                    }
                    taken += next.bytes();
                    if let Some(next) = q.ahead.pop_front() {
                        batch.push(next);
                    }
                }
                st.queued -= batch.len() - 1;
                self.coalesced
                    .fetch_add(batch.len() as u64 - 1, Ordering::Relaxed);
                st.ready.push_back(batch);
                wake.ready += 1;
            }
            let empty = q.demand.is_empty() && q.fetch.is_empty() && q.ahead.is_empty();
            st.queued -= 1;
            st.ring.pop_front();
            if empty {
                st.readers.remove(&reader);
            } else {
                st.ring.push_back(reader);
            }
            st.in_flight += 1;
            st.bytes_in_flight += taken;
            st.in_flight_high_water = st.in_flight_high_water.max(st.in_flight);
            st.bytes_high_water = st.bytes_high_water.max(st.bytes_in_flight);
            self.fetches.fetch_add(1, Ordering::Relaxed);
        }
        // Threads for the batches no idle thread will take (never more than the slots).
        let want = st.ready.len().saturating_sub(st.idle);
        let room = self.limits.threads.saturating_sub(st.threads);
        wake.threads = want.min(room);
        st.threads += wake.threads;
        st.threads_high_water = st.threads_high_water.max(st.threads);
        wake
    }

    /// Starts the threads and wakes the waiters a dispatch asked for.
    fn spawn_and_wake(self: &Arc<Self>, wake: Wake) {
        if wake.demand {
            self.granted.notify_all();
        }
        for _ in 0..wake.ready {
            self.work.notify_one();
        }
        for _ in 0..wake.threads {
            let core = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("krabka-read-ahead".into())
                .spawn(move || core.work_loop());
            if let Err(e) = spawned {
                tracing::debug!(error = %e, "could not start a read-ahead thread");
                let mut st = self.state.lock();
                st.threads -= 1;
                // Without any thread, the batches waiting are given up (the readers fetch
                // those chunks themselves), so their slots are not held forever.
                if st.threads == 0 {
                    let dropped = std::mem::take(&mut st.ready);
                    for batch in dropped {
                        st.in_flight -= 1;
                        st.bytes_in_flight -= batch.iter().map(Job::bytes).sum::<u64>();
                    }
                }
            }
        }
    }

    /// Gives a slot back and passes it on.
    fn release(self: &Arc<Self>, bytes: u64) {
        let mut st = self.state.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        st.bytes_in_flight = st.bytes_in_flight.saturating_sub(bytes);
        let wake = if st.closed {
            Wake::default()
        } else {
            self.dispatch(&mut st)
        };
        drop(st);
        self.spawn_and_wake(wake);
    }

    /// Takes one GET token, waiting (in turn with the other fetches) until the budget allows.
    fn take_get(&self) {
        let Some(gets) = &self.gets else { return };
        let start = Instant::now();
        let _turn = self.get_gate.lock();
        gets.acquire_blocking(1);
        let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.get_wait_nanos.fetch_add(waited, Ordering::Relaxed);
    }

    /// An engine thread: runs read-ahead batches until it has been idle for [`IDLE`] or the
    /// engine closes.
    fn work_loop(self: Arc<Self>) {
        loop {
            let mut st = self.state.lock();
            let batch = loop {
                if let Some(batch) = st.ready.pop_front() {
                    break Some(batch);
                }
                if st.closed {
                    break None;
                }
                st.idle += 1;
                let timed_out = self.work.wait_for(&mut st, IDLE).timed_out();
                st.idle -= 1;
                if timed_out && st.ready.is_empty() {
                    break None;
                }
            };
            let Some(batch) = batch else {
                st.threads -= 1;
                return;
            };
            drop(st);
            let bytes = batch.iter().map(Job::bytes).sum();
            let permit = Permit {
                core: Arc::clone(&self),
                bytes,
            };
            job::run(batch, || self.take_get());
            drop(permit);
        }
    }
}
