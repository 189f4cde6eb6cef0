//! [`TailWriter`]: the one thread that writes a chain's tail objects, one per window for
//! every partition attached to it, and deletes the ones no head needs any more.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use krabka_protocol::batch::StoredHeader;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::tail::{self as chain, TailEntryHeader, TailObject, WriteOutcome};
use krabka_remote_storage::{TopicIdPartition, Uuid, layout, now_ms};
use parking_lot::Mutex;

use super::config::TailConfig;
use super::gc;
use super::part::{PartKey, PartitionTail, key_of};
use super::verify;
use super::wake::Wake;
use crate::error::{Error, TailError};

/// What a [`TailWriter`] did since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TailStats {
    /// Tail objects written (create-only PUTs that succeeded).
    pub objects_written: u64,
    /// Bytes of record batches in them.
    pub bytes_written: u64,
    /// Writes that failed (retried with the same bytes).
    pub write_failures: u64,
    /// Chains closed under this writer by another one (a takeover or a restart elsewhere).
    pub chains_closed: u64,
    /// Tail objects deleted after no head needed them for the grace.
    pub objects_deleted: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) objects_written: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) write_failures: AtomicU64,
    pub(crate) chains_closed: AtomicU64,
    pub(crate) objects_deleted: AtomicU64,
}

impl Counters {
    fn stats(&self) -> TailStats {
        TailStats {
            objects_written: self.objects_written.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            write_failures: self.write_failures.load(Ordering::Relaxed),
            chains_closed: self.chains_closed.load(Ordering::Relaxed),
            objects_deleted: self.objects_deleted.load(Ordering::Relaxed),
        }
    }
}

impl From<TailStats> for crate::metrics::TailSample {
    fn from(s: TailStats) -> Self {
        Self {
            objects_written: s.objects_written,
            bytes_written: s.bytes_written,
            write_failures: s.write_failures,
            chains_closed: s.chains_closed,
            objects_deleted: s.objects_deleted,
        }
    }
}

/// An object built for a window, kept to be written again byte for byte after a failure.
struct Built {
    object: TailObject,
    bytes: u64,
    parts: Vec<(Arc<PartitionTail>, u64)>,
}

pub(crate) struct State {
    pub(crate) chain: Uuid,
    pub(crate) next: u64,
    pub(crate) parts: Vec<Arc<PartitionTail>>,
    /// Data objects written or adopted and not deleted: their partitions' last seqs.
    pub(crate) objects: BTreeMap<(Uuid, u64), Vec<(PartKey, u64)>>,
    pending: Option<Built>,
    rotate: usize,
    /// When the partitions were last verified ([`verify`]).
    verified: Instant,
}

pub(crate) struct Shared {
    pub(crate) store: Arc<dyn OwnershipStore>,
    pub(crate) config: TailConfig,
    pub(crate) incarnation: Uuid,
    pub(crate) state: Mutex<State>,
    pub(crate) wake: Arc<Wake>,
    /// Held while a window is built and written: a partition leaving waits for it.
    window: Mutex<()>,
    pub(crate) counters: Counters,
}

/// Writes the tail objects of every partition attached to it: one create-only object per
/// window ([`TailConfig::interval`]) holding each partition's new record batches, so the
/// PUTs per second do not grow with the number of partitions. Share one writer between the
/// logs of a process (pass it in [`OpenOptions::tail_writer`](crate::partition::OpenOptions));
/// a log opened without one starts its own.
///
/// The writer is a thread that ends once every handle and every attached log is dropped.
#[derive(Clone)]
pub struct TailWriter {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for TailWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.shared.state.lock();
        f.debug_struct("TailWriter")
            .field("chain", &s.chain)
            .field("next", &s.next)
            .field("partitions", &s.parts.len())
            .finish_non_exhaustive()
    }
}

impl TailWriter {
    /// Starts a writer over `store` (the bucket's ownership store: the same root as the
    /// partitions) with a new chain.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a config out of bounds ([`TailConfig::validate`]);
    /// [`TailError::Stopped`] when the thread cannot be started.
    pub fn start(store: Arc<dyn OwnershipStore>, config: TailConfig) -> Result<Self, Error> {
        config.validate()?;
        let full = u64::try_from(config.max_bytes).unwrap_or(u64::MAX);
        let shared = Arc::new(Shared {
            store,
            config,
            incarnation: Uuid::new_v4(),
            state: Mutex::new(State {
                chain: Uuid::new_v4(),
                next: 1,
                parts: Vec::new(),
                objects: BTreeMap::new(),
                pending: None,
                rotate: 0,
                verified: Instant::now(),
            }),
            wake: Arc::new(Wake::new(full)),
            window: Mutex::new(()),
            counters: Counters::default(),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("krabka-tail".to_owned())
            .spawn(move || run(&weak))
            .map_err(|e| {
                Error::Tail(TailError::Stopped {
                    partition: Box::new(TopicIdPartition::new(Uuid::nil(), "-", 0)),
                    reason: format!("cannot start the tail writer's thread: {e}"),
                })
            })?;
        Ok(Self { shared })
    }

    /// The config it writes with.
    pub fn config(&self) -> &TailConfig {
        &self.shared.config
    }

    /// The chain it writes now (a closed chain is replaced by a new one).
    pub fn chain(&self) -> Uuid {
        self.shared.state.lock().chain
    }

    /// How many partitions are attached.
    pub fn partitions(&self) -> usize {
        self.shared.state.lock().parts.len()
    }

    /// What it did so far.
    pub fn stats(&self) -> TailStats {
        self.shared.counters.stats()
    }

    /// The writer's wake-up, held by its partitions without keeping the writer alive.
    pub(crate) fn wake(&self) -> std::sync::Weak<Wake> {
        Arc::downgrade(&self.shared.wake)
    }

    /// Joins `part` to the current chain: returns the chain and the first number an object
    /// holding it can get.
    pub(crate) fn join(&self, part: &Arc<PartitionTail>) -> (Uuid, u64) {
        let mut s = self.shared.state.lock();
        if !s.parts.iter().any(|p| Arc::ptr_eq(p, part)) {
            s.parts.push(part.clone());
        }
        (s.chain, s.next)
    }

    /// Remembers an adopted object (of a closed chain) for deletion once no head needs it.
    pub(crate) fn adopted(&self, chain: Uuid, number: u64, entries: Vec<(PartKey, u64)>) {
        self.shared
            .state
            .lock()
            .objects
            .entry((chain, number))
            .or_insert(entries);
    }

    /// Detaches `tp` after the window being written (its log is closing).
    pub(crate) fn leave(&self, tp: &TopicIdPartition) {
        let _window = self.shared.window.lock();
        let mut s = self.shared.state.lock();
        s.parts.retain(|p| &p.tp != tp);
        if let Some(b) = &s.pending
            && b.parts.iter().any(|(p, _)| &p.tp == tp)
        {
            // Still written (it holds other partitions too) but nobody waits for this one.
            tracing::debug!(partition = %tp, "leaving with a tail object still to write");
        }
    }

    /// Writes one window now (tests and `tier` without `--watch`): returns whether an object
    /// was written.
    ///
    /// # Errors
    /// [`TailError::Object`] when the write failed (it is retried by the next window).
    pub fn flush(&self) -> Result<bool, Error> {
        window(&self.shared)
    }
}

fn run(weak: &Weak<Shared>) {
    let mut last = Instant::now();
    let mut more = false;
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let interval = shared.config.interval;
        if !more {
            // At most one window per interval: a nudge before the window's end waits for it.
            // Past it, a nudge (an append waiting for the bucket) starts the window at once;
            // without one, the next interval does (appends that wait for nothing).
            shared.wake.wait(last + interval, interval);
        }
        last = Instant::now();
        more = match window(&shared) {
            Ok(more) => more,
            Err(e) => {
                tracing::warn!(error = %e, "tail window failed; retried next window");
                false
            }
        };
        drop(shared);
    }
}

/// One window ([`write_window`]), then what it added to the counters published as metrics.
fn window(shared: &Shared) -> Result<bool, Error> {
    let _window = shared.window.lock();
    // The counters move only in windows, under this lock: the difference is this window's.
    let before = shared.counters.stats();
    let result = write_window(shared);
    crate::metrics::publish_tail(before.into(), shared.counters.stats().into());
    let due = {
        let mut s = shared.state.lock();
        let due = s.verified.elapsed() >= shared.config.verify_interval;
        if due {
            s.verified = Instant::now();
        }
        due.then(|| s.parts.clone())
    };
    if let Some(parts) = due {
        verify::verify(&parts);
    }
    result
}

/// One window, under the window lock: builds (or takes back the failed) object, writes it,
/// applies the outcome, deletes what no head needs. Returns whether more records wait than one
/// object held.
fn write_window(shared: &Shared) -> Result<bool, Error> {
    let (built, chain_id, number, more) = {
        let mut s = shared.state.lock();
        let chain_id = s.chain;
        let number = s.next;
        match s.pending.take() {
            Some(b) => (Some(b), chain_id, number, false),
            None => {
                // What waits from now on goes into the next window.
                shared.wake.begin_window();
                let (b, more) = build(shared, &mut s, chain_id, number);
                (b, chain_id, number, more)
            }
        }
    };
    let Some(built) = built else {
        collect(shared);
        return Ok(more);
    };
    let key = layout::tail_object_key(chain_id, number);
    let put = Instant::now();
    let outcome = chain::write_object(shared.store.as_ref(), &built.object);
    crate::metrics::time_tail_put(put.elapsed());
    match outcome {
        Ok(WriteOutcome::Created | WriteOutcome::AlreadyIdentical) => {
            let mut entries = Vec::with_capacity(built.parts.len());
            for (part, last) in &built.parts {
                let acked = if part.owner.enforced() {
                    true
                } else {
                    // A store that ignores create-only writes: the epoch check after the
                    // write is what a takeover breaks (docs/tiering.md, the fallback).
                    match part.owner.check() {
                        Ok(()) => true,
                        Err(e) => {
                            if matches!(e, Error::Ownership(_)) {
                                part.fence();
                            }
                            part.failed(&e.to_string());
                            false
                        }
                    }
                };
                part.written(chain_id, number, *last, acked);
                entries.push((key_of(&part.tp), *last));
            }
            let c = &shared.counters;
            c.objects_written.fetch_add(1, Ordering::Relaxed);
            c.bytes_written.fetch_add(built.bytes, Ordering::Relaxed);
            let mut s = shared.state.lock();
            s.objects.insert((chain_id, number), entries);
            s.next = number + 1;
        }
        // `Taken`, or an outcome a newer store layer adds: not written by us.
        Ok(_) => {
            // Another writer fenced this chain: nothing more is acknowledged in it. Every
            // partition attaches again (its epoch check tells whether it was taken over).
            shared
                .counters
                .chains_closed
                .fetch_add(1, Ordering::Relaxed);
            let parts = {
                let mut s = shared.state.lock();
                s.chain = Uuid::new_v4();
                s.next = 1;
                s.parts.clone()
            };
            tracing::warn!(chain = %chain_id, number, key = %key,
                "the tail chain was closed by another writer; partitions attach to a new chain");
            for p in parts {
                p.detach(&format!(
                    "tail chain {chain_id} was closed by another writer at object {key}"
                ));
            }
        }
        Err(e) => {
            shared
                .counters
                .write_failures
                .fetch_add(1, Ordering::Relaxed);
            let why = format!("writing tail object {key} failed: {e}");
            for (p, _) in &built.parts {
                p.failed(&why);
            }
            shared.state.lock().pending = Some(built);
            return Err(Error::Tail(TailError::Object {
                key,
                source: Box::new(e),
            }));
        }
    }
    collect(shared);
    Ok(more)
}

/// Builds the window's object from every attached partition's new batches, fairly (the
/// partition first served rotates), at most `max_bytes` of them.
fn build(shared: &Shared, s: &mut State, chain_id: Uuid, number: u64) -> (Option<Built>, bool) {
    let n = s.parts.len();
    if n == 0 {
        return (None, false);
    }
    let start = s.rotate % n;
    s.rotate = s.rotate.wrapping_add(1);
    let mut budget = shared.config.max_bytes;
    let mut more = false;
    let mut headers: Vec<TailEntryHeader> = Vec::new();
    let mut datas: Vec<Vec<u8>> = Vec::new();
    let mut parts = Vec::new();
    for i in 0..n {
        let part = &s.parts[(start + i) % n];
        let from = {
            let ps = part.state.lock();
            if ps.chain != Some(chain_id) || !ps.listed || ps.fenced {
                continue;
            }
            ps.uploaded + 1
        };
        let last = part.log.last_seq();
        if last < from {
            continue;
        }
        if budget == 0 {
            more = true;
            break;
        }
        match read_new(part, from, last, budget) {
            Ok(Some(NewBatches {
                data,
                first,
                last: upto,
                max_timestamp: max_ts,
            })) => {
                budget = budget.saturating_sub(data.len());
                if upto < last {
                    more = true;
                }
                headers.push(TailEntryHeader {
                    topic_id: part.tp.topic_id(),
                    partition: part.tp.partition(),
                    writer_epoch: part.owner.epoch(),
                    first_seq: first,
                    last_seq: upto,
                    max_timestamp: max_ts,
                });
                datas.push(data);
                parts.push((part.clone(), upto));
            }
            Ok(None) => {}
            Err(e) => part.failed(&e.to_string()),
        }
    }
    if parts.is_empty() {
        return (None, more);
    }
    let bytes = datas.iter().map(|d| d.len() as u64).sum();
    let inputs: Vec<(TailEntryHeader, &[u8])> = headers
        .iter()
        .copied()
        .zip(datas.iter().map(Vec::as_slice))
        .collect();
    match TailObject::data_object(chain_id, number, shared.incarnation, now_ms(), &inputs) {
        Ok(object) => (
            Some(Built {
                object,
                bytes,
                parts,
            }),
            more,
        ),
        Err(e) => {
            // Only an object over the size limit gets here (a batch near it): say so on every
            // partition in it; their appends time out naming it.
            let why = format!("cannot build tail object {number} of chain {chain_id}: {e}");
            for (p, _) in &parts {
                p.failed(&why);
            }
            (None, false)
        }
    }
}

/// The partition's whole batches from `from` to at most `last`, about `budget` bytes of them
/// (at least one batch). Records local
/// retention removed are in finished remote segments already: skipped.
fn read_new(
    part: &PartitionTail,
    mut from: u64,
    last: u64,
    budget: usize,
) -> Result<Option<NewBatches>, Error> {
    let local_first = part.log.first_seq();
    if from < local_first {
        // Only segments safely in the remote tier are deleted locally.
        let mut ps = part.state.lock();
        ps.uploaded = ps.uploaded.max(local_first - 1);
        ps.acked = ps.acked.max(local_first - 1);
        from = local_first;
    }
    let mut data = Vec::new();
    let mut at = from;
    let mut max_ts = -1_i64;
    while at <= last && (data.is_empty() || data.len() < budget) {
        let batches = match part
            .log
            .read_batches(at, budget.saturating_sub(data.len()).max(1))
        {
            Ok(b) => b,
            // A named hole of the local log (a recovery or a repair left it): no record was
            // ever acknowledged there, and none will be. The entry ends before it; the next
            // one starts after it.
            Err(krabka_storage::Error::Quarantined { last_seq, .. }) if last_seq >= at => {
                if !data.is_empty() {
                    break;
                }
                let mut ps = part.state.lock();
                ps.uploaded = ps.uploaded.max(last_seq);
                ps.acked = ps.acked.max(last_seq);
                drop(ps);
                at = last_seq + 1;
                from = at;
                continue;
            }
            Err(e) => return Err(Error::storage(format!("reading seq {at} for the tail"), e)),
        };
        if batches.is_empty() {
            break;
        }
        if batches.first_seq() != at {
            return Err(Error::Tail(TailError::Contradiction {
                key: part.log.dir().display().to_string(),
                seq: at,
                reason: format!(
                    "the local batch holding seq {at} starts at seq {}",
                    batches.first_seq()
                ),
            }));
        }
        for b in batches.iter() {
            if let Some(h) = StoredHeader::read(&b) {
                max_ts = max_ts.max(h.max_timestamp);
            }
        }
        at = batches.next_seq();
        data.extend_from_slice(batches.bytes());
    }
    if data.is_empty() {
        return Ok(None);
    }
    Ok(Some(NewBatches {
        data,
        first: from,
        last: at - 1,
        max_timestamp: max_ts,
    }))
}

/// A partition's new whole batches for a window.
struct NewBatches {
    data: Vec<u8>,
    first: u64,
    last: u64,
    max_timestamp: i64,
}

/// Deletes the objects no head needs any more ([`gc::unneeded`]).
fn collect(shared: &Shared) {
    let victims = {
        let s = shared.state.lock();
        let tip = (s.chain, s.next.saturating_sub(1));
        gc::unneeded(
            &s.objects,
            &s.parts,
            tip,
            shared.config.grace,
            Instant::now(),
        )
    };
    for ((chain_id, number), holders) in victims {
        let key = layout::tail_object_key(chain_id, number);
        match shared.store.delete_object(&key) {
            Ok(()) => {
                shared.state.lock().objects.remove(&(chain_id, number));
                for p in holders {
                    p.forget(chain_id, number);
                }
                shared
                    .counters
                    .objects_deleted
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(key = %key, error = %e,
                    "deleting an unneeded tail object failed; retried later");
            }
        }
    }
}
