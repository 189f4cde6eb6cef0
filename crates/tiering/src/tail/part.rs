//! One partition's side of the tail: what of it is in which tail object, what is
//! acknowledged, and the wait of a bucket-durable append.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::head::TailRef;
use krabka_remote_storage::{TopicIdPartition, Uuid};
use krabka_storage::Log;
use parking_lot::{Condvar, Mutex};
use std::sync::Weak;

use super::wake::Wake;
use crate::error::{Error, TailError};
use crate::ownership::Owner;

/// A partition as tail objects name it: topic id and partition number.
pub(crate) type PartKey = (Uuid, i32);

/// The [`PartKey`] of `tp`.
pub(crate) fn key_of(tp: &TopicIdPartition) -> PartKey {
    (tp.topic_id(), tp.partition())
}

/// Finished-end checkpoints kept per partition for the grace rule (older ones are merged).
const MAX_PUBLISHED: usize = 64;

/// One object holding records of this partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) chain: Uuid,
    pub(crate) number: u64,
    pub(crate) last_seq: u64,
}

#[derive(Debug, Default)]
pub(crate) struct PartState {
    /// The chain this partition's records go to; `None`: not attached (not yet, or its chain
    /// was closed by another writer and it must attach again).
    pub(crate) chain: Option<Uuid>,
    /// The last seq in a written object.
    pub(crate) uploaded: u64,
    /// The last seq acknowledged in the bucket.
    pub(crate) acked: u64,
    /// Objects holding this partition's records, in the order written (adopted ones first).
    pub(crate) held: Vec<Held>,
    /// Chains joined, in order, with the first number this partition could be in.
    pub(crate) joined: Vec<(Uuid, u64)>,
    /// The last failure of the writer for this partition, for a timed-out append's error.
    pub(crate) last_error: Option<String>,
    /// Set when a check found another writer: no more acknowledgements.
    pub(crate) fenced: bool,
    /// Whether the head lists `chain` and the epoch was checked after: only then may the
    /// writer put this partition's records in it.
    pub(crate) listed: bool,
    /// Written since the writer last verified the head and epoch ([`super::verify`]).
    pub(crate) written_since_verify: bool,
    /// `(finished end, when a head first listed it)`, ends increasing.
    pub(crate) published: Vec<(u64, Instant)>,
}

/// A partition attached to a [`TailWriter`].
pub(crate) struct PartitionTail {
    pub(crate) tp: TopicIdPartition,
    pub(crate) log: Arc<Log>,
    pub(crate) owner: Arc<Owner>,
    pub(crate) wake: Weak<Wake>,
    pub(crate) state: Mutex<PartState>,
    acked: Condvar,
    /// Serializes attaches of this partition.
    pub(crate) attaching: Mutex<()>,
}

impl std::fmt::Debug for PartitionTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionTail")
            .field("tp", &self.tp)
            .field("state", &*self.state.lock())
            .finish_non_exhaustive()
    }
}

impl PartitionTail {
    pub(crate) fn new(
        tp: TopicIdPartition,
        log: Arc<Log>,
        owner: Arc<Owner>,
        wake: Weak<Wake>,
    ) -> Self {
        Self {
            tp,
            log,
            owner,
            wake,
            state: Mutex::new(PartState::default()),
            acked: Condvar::new(),
            attaching: Mutex::new(()),
        }
    }

    /// Counts `bytes` appended for the writer's next window (a full object's worth starts it
    /// early).
    pub(crate) fn appended(&self, bytes: u64) {
        if let Some(wake) = self.wake.upgrade() {
            wake.add(bytes);
        }
    }

    /// Asks the writer for a window (nothing when it is gone).
    pub(crate) fn nudge(&self) {
        if let Some(wake) = self.wake.upgrade() {
            wake.nudge();
        }
    }

    /// Records that object `number` of `chain` holds this partition's seqs up to `last_seq`,
    /// acknowledged (`acked`) or only written.
    pub(crate) fn written(&self, chain: Uuid, number: u64, last_seq: u64, acked: bool) {
        let mut s = self.state.lock();
        s.uploaded = s.uploaded.max(last_seq);
        if acked {
            s.acked = s.acked.max(last_seq);
        }
        s.held.push(Held {
            chain,
            number,
            last_seq,
        });
        s.written_since_verify = true;
        s.last_error = None;
        drop(s);
        self.acked.notify_all();
    }

    /// The chain it is listed in, when it was written since the last verification (which this
    /// call starts).
    pub(crate) fn take_written_since_verify(&self) -> Option<Uuid> {
        let mut s = self.state.lock();
        if !std::mem::take(&mut s.written_since_verify) || !s.listed {
            return None;
        }
        s.chain
    }

    /// Marks it to be verified again at the next look (this one could not tell).
    pub(crate) fn mark_written(&self) {
        self.state.lock().written_since_verify = true;
    }

    /// Whether it must join a chain again before more is acknowledged.
    pub(crate) fn detached(&self) -> bool {
        self.state.lock().chain.is_none()
    }

    /// Records a failure every waiter's error names.
    pub(crate) fn failed(&self, why: &str) {
        self.state.lock().last_error = Some(why.to_owned());
        self.acked.notify_all();
    }

    /// Its chain was closed by another writer: it attaches again before more is acknowledged.
    pub(crate) fn detach(&self, why: &str) {
        let mut s = self.state.lock();
        s.chain = None;
        s.listed = false;
        s.last_error = Some(why.to_owned());
        // What was written but not acknowledged goes out again in the next chain.
        s.uploaded = s.acked;
        drop(s);
        self.acked.notify_all();
    }

    /// A check found another writer holding the partition.
    pub(crate) fn fence(&self) {
        self.state.lock().fenced = true;
        self.acked.notify_all();
    }

    /// Forgets an object the writer deleted.
    pub(crate) fn forget(&self, chain: Uuid, number: u64) {
        self.state
            .lock()
            .held
            .retain(|h| !(h.chain == chain && h.number == number));
    }

    /// Whether every record up to `last_seq` is in a finished segment that a head written at
    /// least `grace` ago listed.
    pub(crate) fn covered(&self, last_seq: u64, grace: Duration, now: Instant) -> bool {
        self.state
            .lock()
            .published
            .iter()
            .any(|&(end, at)| end >= last_seq && now.saturating_duration_since(at) >= grace)
    }

    /// A head listing finished segments up to `finished_end` was written.
    pub(crate) fn head_published(&self, finished_end: u64) {
        let mut s = self.state.lock();
        if s.published
            .last()
            .is_some_and(|&(end, _)| end >= finished_end)
        {
            return;
        }
        s.published.push((finished_end, Instant::now()));
        if s.published.len() > MAX_PUBLISHED {
            // Merging the two oldest keeps the later (larger) end with the later time: never
            // earlier than the truth.
            s.published.remove(0);
        }
    }

    /// The tail refs a head written now lists, with the finished segments ending at
    /// `finished_end`: every chain still holding an object of this partition (from the first
    /// one holding records above `finished_end`, else from the first not deleted yet, so that
    /// a successor finds and deletes them too), and the chain records go to now.
    pub(crate) fn refs(&self, finished_end: u64) -> Vec<TailRef> {
        let s = self.state.lock();
        let mut out: Vec<TailRef> = Vec::new();
        for &(chain, joined_at) in &s.joined {
            let numbers = || s.held.iter().filter(|h| h.chain == chain);
            let from = numbers()
                .filter(|h| h.last_seq > finished_end)
                .map(|h| h.number)
                .min()
                .or_else(|| numbers().map(|h| h.number).min())
                .or_else(|| (s.chain == Some(chain)).then_some(joined_at));
            if let Some(from) = from
                && !out.iter().any(|r| r.chain == chain)
            {
                out.push(TailRef { chain, from });
            }
        }
        out
    }

    /// Waits until every seq up to `seqs.end()` is acknowledged in the bucket, attaching
    /// again through `attach` when the chain was closed under it.
    pub(crate) fn wait_acked(
        &self,
        seqs: RangeInclusive<u64>,
        deadline: Duration,
        attach: &dyn Fn() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let last = *seqs.end();
        self.nudge();
        let mut s = self.state.lock();
        loop {
            if s.acked >= last {
                return Ok(());
            }
            if s.fenced {
                drop(s);
                self.owner.ensure_not_fenced()?;
                return Err(self.not_acknowledged(seqs, started, "fenced".to_owned()));
            }
            if s.chain.is_none() {
                drop(s);
                // A closed chain: join a new one (this partition may have been taken over).
                if let Err(e) = attach() {
                    if matches!(e, Error::Ownership(_)) {
                        self.fence();
                        return Err(e);
                    }
                    self.failed(&e.to_string());
                }
                self.nudge();
                s = self.state.lock();
                continue;
            }
            let waited = started.elapsed();
            if waited >= deadline {
                let cause = s
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "no tail object was written in time".to_owned());
                drop(s);
                return Err(self.not_acknowledged(seqs, started, cause));
            }
            let slice = (deadline - waited).min(Duration::from_millis(100));
            self.acked.wait_for(&mut s, slice);
        }
    }

    fn not_acknowledged(
        &self,
        seqs: RangeInclusive<u64>,
        started: Instant,
        cause: String,
    ) -> Error {
        Error::Tail(TailError::NotAcknowledged {
            partition: Box::new(self.tp.clone()),
            seqs,
            waited: started.elapsed(),
            cause,
        })
    }
}
