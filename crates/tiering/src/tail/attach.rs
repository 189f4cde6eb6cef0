//! How a log joins a tail chain, and how a bucket-durable append waits for it.
//!
//! Joining (T2 and T3 in docs/ARCHITECTURE.md): the log first closes every chain its
//! partition's head lists that is not its writer's (a fence object at the chain's next
//! number: the old writer can acknowledge nothing more there) and appends to its local log
//! the records those chains hold above it, so every record the old writer acknowledged is
//! served by this one; then it writes the head listing the new chain and checks its epoch.
//! Only after that check may the writer put the partition's records in the chain: a takeover
//! that claims the next epoch after the check reads a head that lists the chain, and closes it.

use std::ops::RangeInclusive;
use std::sync::Arc;

use krabka_protocol::batch::StoredHeader;
use krabka_remote_storage::head::{self, HeadRead, TailRef};
use krabka_remote_storage::tail as chain;
use krabka_remote_storage::{RemoteLogSegmentState, layout, now_ms};

use super::part::{Held, PartitionTail};
use super::{Durability, TailSlot, TailWriter};
use crate::error::{Error, TailError};
use crate::tiered::TieredLog;

/// A chain taken over at open: what of this partition it holds.
#[derive(Debug)]
pub(crate) struct Inherited {
    chain: krabka_remote_storage::Uuid,
    from: u64,
    held: Vec<Held>,
    objects: Vec<(u64, Vec<(super::part::PartKey, u64)>)>,
}

/// Bytes of a Kafka v2 batch before its `batchLength` counts.
const LENGTH_PREFIX: usize = 12;

impl TieredLog {
    /// Attaches this log to `writer`: from now on its records go to the bucket in the
    /// writer's tail objects, at most one window after they are appended; with
    /// [`Durability::Bucket`] an append returns only once they are there. Before that, the
    /// chains the partition's head lists are closed and every record they hold above the
    /// local log is appended to it (a takeover, or a restart after a lost disk).
    ///
    /// # Errors
    /// [`TailError::Unsupported`] for a log without a writer epoch (opened without ownership
    /// or to read only) or already attached; [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) when another writer
    /// holds the partition; [`TailError::Gap`] or [`TailError::Contradiction`] when the tail
    /// in the bucket cannot continue the local log; [`TailError::Object`] when the bucket
    /// fails.
    pub fn attach_tail(&self, writer: TailWriter) -> Result<(), Error> {
        let Some(owner) = self.owner.clone() else {
            return Err(unsupported("a tail needs a log that holds a writer epoch"));
        };
        if owner.head_writer().is_none() {
            return Err(unsupported("a log opened to read only writes no tail"));
        }
        let part = Arc::new(PartitionTail::new(
            self.tp.clone(),
            self.log.clone(),
            owner,
            writer.wake(),
        ));
        let slot = TailSlot { writer, part };
        if self.tail.set(slot).is_err() {
            return Err(unsupported("this log is attached to a tail writer already"));
        }
        self.join_tail(true)
    }

    /// The last seq known to be in a tail object (or a finished remote segment), when the
    /// log is attached to a tail writer.
    pub fn tail_acked_seq(&self) -> Option<u64> {
        self.tail.get().map(|slot| slot.part.state.lock().acked)
    }

    /// Joins the writer's current chain; `first` also takes over the older chains' records.
    pub(crate) fn join_tail(&self, first: bool) -> Result<(), Error> {
        let Some(slot) = self.tail.get() else {
            return Ok(());
        };
        let part = &slot.part;
        let _attaching = part.attaching.lock();
        if part.state.lock().chain.is_some() {
            return Ok(());
        }
        part.owner.check()?;
        if first {
            // The chains taken over at open go on being listed, and deleted, through the
            // writer now.
            let inherited = std::mem::take(&mut *self.inherited.lock());
            for i in inherited {
                {
                    let mut s = part.state.lock();
                    s.held.extend(i.held.iter().copied());
                    if !s.joined.iter().any(|(c, _)| *c == i.chain) {
                        s.joined.push((i.chain, i.from));
                    }
                }
                for (number, entries) in i.objects {
                    slot.writer.adopted(i.chain, number, entries);
                }
            }
            // Everything in finished remote segments (or below the local log, which only
            // keeps what is not safely remote) is in the bucket already, and so is what the
            // chains taken over hold.
            let finished = self.finished_end()?;
            let mut s = part.state.lock();
            let taken_over = s.held.iter().map(|h| h.last_seq).max().unwrap_or(0);
            let floor = finished
                .max(self.log.first_seq().saturating_sub(1))
                .max(taken_over.min(self.log.last_seq()));
            s.uploaded = s.uploaded.max(floor);
            s.acked = s.acked.max(floor);
        }
        let (chain_id, next) = slot.writer.join(part);
        {
            let mut s = part.state.lock();
            s.chain = Some(chain_id);
            s.listed = false;
            if !s.joined.iter().any(|(c, _)| *c == chain_id) {
                s.joined.push((chain_id, next));
            }
        }
        // The head must list the chain before anything in it is acknowledged (T2).
        self.publish_head(true)?;
        part.owner.check()?;
        let mut s = part.state.lock();
        if s.chain == Some(chain_id) {
            s.listed = true;
        }
        drop(s);
        part.nudge();
        tracing::info!(partition = %self.tp, chain = %chain_id, "attached to tail chain");
        Ok(())
    }

    /// Takes over the tail a previous writer left in the bucket (T3): closes every chain the
    /// partition's head lists (a fence at its next number: its writer acknowledges nothing
    /// more there) and appends to the local log every record they hold above it. Every owner
    /// does this when it opens, before its first head write, with or without a tail of its
    /// own: the chains stay listed in its heads until finished segments hold their records.
    ///
    /// # Errors
    /// [`TailError::Object`] when the head or a chain cannot be read (a damaged head too: the
    /// chains it lists are unknown); [`TailError::Gap`] or [`TailError::Contradiction`] when
    /// the tail cannot continue the local log; [`Error::Storage`] when an append fails.
    pub(crate) fn take_over_tail(&self) -> Result<(), Error> {
        let Some(owner) = self.owner.clone() else {
            return Ok(());
        };
        let Some(hw) = owner.head_writer() else {
            return Ok(());
        };
        let head_key = layout::head_key(hw.partition_dir);
        let refs: Vec<TailRef> = match head::read_head(hw.store, hw.partition_dir, None)
            .map_err(|e| object_error(head_key.clone(), e))?
        {
            HeadRead::Fresh { head, .. } => head.tail,
            // A damaged head, or none where an earlier writer held the partition (deleted by
            // hand or by a lifecycle rule): the chains it listed are unknown, so every chain
            // in the bucket is searched for this partition's records.
            HeadRead::Damaged { error, .. } => {
                tracing::warn!(partition = %self.tp, key = %head_key, error = %error,
                    "the partition head is damaged; searching every tail chain for this partition");
                self.search_chains(hw.store)?
            }
            _ if owner.epoch() > 1 => {
                tracing::warn!(partition = %self.tp, key = %head_key,
                    "the partition head is missing; searching every tail chain for this partition");
                self.search_chains(hw.store)?
            }
            _ => Vec::new(),
        };
        let fencer = krabka_remote_storage::Uuid::new_v4();
        let mut inherited = Vec::with_capacity(refs.len());
        for r in &refs {
            inherited.push(self.adopt_chain(hw.store, r, fencer)?);
        }
        *self.inherited.lock() = inherited;
        Ok(())
    }

    /// Every chain in the bucket holding records of this partition, in the order of their
    /// first seq, each from its first object holding one: a full search, for a head that
    /// cannot say.
    fn search_chains(
        &self,
        store: &dyn krabka_remote_storage::ownership::OwnershipStore,
    ) -> Result<Vec<TailRef>, Error> {
        let mut chains = Vec::new();
        store
            .list_partition_dirs(&mut |name| {
                if let Some(c) = layout::parse_tail_chain_dir(&name) {
                    chains.push(c);
                }
                Ok(())
            })
            .map_err(|e| object_error(layout::TAIL_CHAIN_PREFIX.to_owned(), e))?;
        let mut found: Vec<(u64, TailRef)> = Vec::new();
        for c in chains {
            let numbers = chain::list_numbers(store, c)
                .map_err(|e| object_error(layout::tail_chain_dir(c), e))?;
            for n in numbers {
                let object = match chain::read_object(store, c, n) {
                    Ok(Some(o)) => o,
                    Ok(None) => continue,
                    // A damaged object may hold this partition's records: said, not guessed.
                    Err(e) => return Err(object_error(layout::tail_object_key(c, n), e)),
                };
                let first = object
                    .entry_for(self.tp.topic_id(), self.tp.partition())
                    .and_then(|i| object.entries().get(i))
                    .map(|e| e.first_seq);
                if let Some(first) = first {
                    found.push((first, TailRef { chain: c, from: n }));
                    break;
                }
            }
        }
        found.sort_by_key(|(first, _)| *first);
        Ok(found.into_iter().map(|(_, r)| r).collect())
    }

    /// Closes chain `r` and appends the records it holds above the local log.
    fn adopt_chain(
        &self,
        store: &dyn krabka_remote_storage::ownership::OwnershipStore,
        r: &TailRef,
        fencer: krabka_remote_storage::Uuid,
    ) -> Result<Inherited, Error> {
        let chain_key = layout::tail_chain_dir(r.chain);
        let closed = chain::close_chain(store, r.chain, fencer, now_ms())
            .map_err(|e| object_error(chain_key.clone(), e))?;
        let mut out = Inherited {
            chain: r.chain,
            from: r.from,
            held: Vec::new(),
            objects: Vec::new(),
        };
        let mut adopted = 0_u64;
        for number in closed.below.iter().copied().filter(|n| *n >= r.from) {
            let key = layout::tail_object_key(r.chain, number);
            let Some(object) = chain::read_object(store, r.chain, number)
                .map_err(|e| object_error(key.clone(), e))?
            else {
                // Deleted: its records are in finished segments (the continuity check of the
                // next entry finds it otherwise).
                continue;
            };
            let Some(i) = object.entry_for(self.tp.topic_id(), self.tp.partition()) else {
                continue;
            };
            let Some(entry) = object.entries().get(i).copied() else {
                continue;
            };
            out.objects.push((
                number,
                object
                    .entries()
                    .iter()
                    .map(|e| ((e.topic_id, e.partition), e.last_seq))
                    .collect(),
            ));
            out.held.push(Held {
                chain: r.chain,
                number,
                last_seq: entry.last_seq,
            });
            if entry.last_seq <= self.log.last_seq() {
                continue;
            }
            let data = object.entry_data(i).map_err(|e| {
                Error::Tail(TailError::Damaged {
                    key: key.clone(),
                    seqs: entry.first_seq..=entry.last_seq,
                    reason: e.to_string(),
                })
            })?;
            adopted += self.append_tail_batches(&key, data)?;
        }
        if adopted > 0 {
            tracing::warn!(partition = %self.tp, chain = %r.chain, records = adopted,
                "took over records acknowledged in the bucket above the local log");
        }
        Ok(out)
    }

    /// The tail refs of the chains taken over at open, for a head written now by a log
    /// without a tail writer of its own.
    pub(crate) fn inherited_refs(&self, finished_end: u64) -> Vec<TailRef> {
        self.inherited
            .lock()
            .iter()
            .filter_map(|i| {
                let from = i
                    .held
                    .iter()
                    .filter(|h| h.last_seq > finished_end)
                    .map(|h| h.number)
                    .min()?;
                Some(TailRef {
                    chain: i.chain,
                    from: from.max(i.from),
                })
            })
            .collect()
    }

    /// Appends the batches of a tail entry that lie above the local log; returns how many
    /// records were appended.
    fn append_tail_batches(&self, key: &str, data: &[u8]) -> Result<u64, Error> {
        let mut at = 0_usize;
        let mut appended = 0_u64;
        while at < data.len() {
            let rest = &data[at..];
            let Some(h) = StoredHeader::read(rest) else {
                return Err(contradiction(
                    key,
                    self.log.next_seq(),
                    format!("byte {at} of its entry is not a batch header"),
                ));
            };
            let len = usize::try_from(h.batch_length)
                .ok()
                .and_then(|l| l.checked_add(LENGTH_PREFIX))
                .filter(|l| *l <= rest.len())
                .ok_or_else(|| {
                    contradiction(
                        key,
                        self.log.next_seq(),
                        format!("the batch at byte {at} of its entry runs past it"),
                    )
                })?;
            let base = u64::try_from(h.base_offset).unwrap_or(0);
            let last = u64::try_from(h.last_offset()).unwrap_or(0);
            let batch = &rest[..len];
            at += len;
            let local_last = self.log.last_seq();
            if let Some(hole) = self
                .log
                .holes()
                .into_iter()
                .find(|h| h.first_seq <= last && base <= h.last_seq)
            {
                // Acknowledged records where this log has a named hole: its writer went on
                // after this directory was recovered beside it. Serving the hole would hide
                // them.
                return Err(contradiction(
                    key,
                    base.max(hole.first_seq),
                    format!(
                        "it holds acknowledged seqs {base}..={last}, but this log has a hole at                          seqs {}..={} (recovered while the old writer still acknowledged                          records): recover the partition again",
                        hole.first_seq, hole.last_seq
                    ),
                ));
            }
            if last <= local_last {
                continue;
            }
            let next = self.log.next_seq();
            if base > next {
                return Err(Error::Tail(TailError::Gap {
                    partition: Box::new(self.tp.clone()),
                    local_last,
                    found: base,
                    key: key.to_owned(),
                }));
            }
            if base < next {
                return Err(contradiction(
                    key,
                    base,
                    format!(
                        "its batch of seqs {base}..={last} straddles the local log's end at seq {local_last}"
                    ),
                ));
            }
            let range = self.log.append_raw_batch(batch).map_err(|e| {
                Error::storage(format!("taking over seqs {base}..={last} from {key}"), e)
            })?;
            appended += range.end() - range.start() + 1;
        }
        Ok(appended)
    }

    /// The last seq of the finished remote segments (0: none).
    fn finished_end(&self) -> Result<u64, Error> {
        Ok(self
            .remote_list()?
            .iter()
            .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
            .map(|m| m.end_offset())
            .max()
            .unwrap_or(0))
    }

    /// After an append: under [`Durability::Bucket`], waits until `seqs` are in a tail
    /// object; otherwise joins a chain again when the writer detached this log (its chain was
    /// closed, or its head lost), so that its records keep going to the bucket.
    pub(crate) fn wait_in_bucket(
        &self,
        seqs: RangeInclusive<u64>,
        bytes: u64,
    ) -> Result<(), Error> {
        if let Some(slot) = self.tail.get() {
            slot.part.appended(bytes);
        }
        if self.config.durability != Durability::Bucket || seqs.is_empty() {
            if let Some(slot) = self.tail.get()
                && slot.part.detached()
            {
                match self.join_tail(false) {
                    Ok(()) => {}
                    Err(e @ Error::Ownership(_)) => return Err(e),
                    Err(e) => {
                        tracing::warn!(partition = %self.tp, error = %e,
                            "cannot join a tail chain again; the next append or round retries");
                    }
                }
            }
            return Ok(());
        }
        let Some(slot) = self.tail.get() else {
            return Err(unsupported(
                "a bucket-durable append needs a log attached to a tail writer",
            ));
        };
        let deadline = slot.writer.config().ack_deadline;
        slot.part
            .wait_acked(seqs, deadline, &|| self.join_tail(false))
    }
}

fn unsupported(why: &str) -> Error {
    Error::Tail(TailError::Unsupported(why.to_owned()))
}

fn object_error(key: String, e: krabka_remote_storage::RemoteStorageError) -> Error {
    Error::Tail(TailError::Object {
        key,
        source: Box::new(e),
    })
}

fn contradiction(key: &str, seq: u64, reason: String) -> Error {
    Error::Tail(TailError::Contradiction {
        key: key.to_owned(),
        seq,
        reason,
    })
}
