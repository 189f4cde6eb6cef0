//! A replica's part of the tail in the bucket: the records its writer acknowledged in tail
//! objects that no finished segment holds yet (`docs/tiering.md`, "Read replicas").
//!
//! Each refresh lists the chains the applied head names (from each one's `from` upward) and
//! reads only the objects it has not read yet: an object is immutable, so its decoded entry for
//! this partition is kept, by `(chain, number)`, until the head no longer needs it or finished
//! segments hold its seqs. An entry is served only after every batch in it proved its place:
//! the entry's data CRC, each batch's CRC-32C, base offsets equal to the seqs the entry names,
//! contiguous, ending at its last seq. Anything else is a named gap costing that entry's seqs.
//! A tail object the listing named but that is gone (404) means the head moved (the writer
//! deletes objects only once a head lists finished segments holding them): the head is read
//! again, never a read cut short.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use krabka_remote_storage::head::TailRef;
use krabka_remote_storage::tail::{self as chain, TailKind, TailObject};
use krabka_remote_storage::{RemoteStorageError, TopicIdPartition, Uuid, layout};
use krabka_storage::segment::decode_records_at;

use super::MissingSeqs;

/// One run of seqs of the tail a replica serves: whole batches that proved their place, or a
/// named gap.
#[derive(Clone, Debug)]
pub(crate) struct TailPiece {
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) kind: PieceKind,
}

/// What a [`TailPiece`] holds.
#[derive(Clone, Debug)]
pub(crate) enum PieceKind {
    /// Whole Kafka v2 batches, checked, from seq `base` (at or below the piece's first seq:
    /// an entry partly held by what comes before it is served from where that ends).
    Data { base: u64, bytes: Bytes },
    /// Seqs that cannot be served, and why.
    Gap(MissingSeqs),
}

/// The tail a view serves: pieces by seq, contiguous, starting right after the finished
/// segments when it was built.
#[derive(Clone, Debug, Default)]
pub(crate) struct TailServed {
    pub(crate) pieces: Vec<TailPiece>,
    /// Whether seqs between two entries (or between the finished segments and the first
    /// entry) are held by no entry: a head read again may explain them.
    pub(crate) unexplained: bool,
}

impl TailServed {
    /// The first seq of the tail, when it holds any.
    pub(crate) fn first(&self) -> Option<u64> {
        self.pieces.first().map(|p| p.first)
    }

    /// The last seq of the tail, when it holds any.
    pub(crate) fn last(&self) -> Option<u64> {
        self.pieces.last().map(|p| p.last)
    }

    /// The piece holding `seq`.
    pub(crate) fn piece_at(&self, seq: u64) -> Option<&TailPiece> {
        let i = self.pieces.partition_point(|p| p.first <= seq);
        self.pieces.get(i.checked_sub(1)?).filter(|p| p.last >= seq)
    }

    /// The named gaps.
    pub(crate) fn gaps(&self) -> impl Iterator<Item = &MissingSeqs> {
        self.pieces.iter().filter_map(|p| match &p.kind {
            PieceKind::Gap(m) => Some(m),
            PieceKind::Data { .. } => None,
        })
    }
}

/// A tail object as this replica needs it: decoded once, kept by `(chain, number)`.
#[derive(Clone, Debug)]
pub(crate) enum Cached {
    /// A fence: the chain ends below it.
    Fence,
    /// A data object without an entry of this partition.
    NotOurs,
    /// This partition's entry: its seqs, and its checked batches or why they cannot be served.
    Entry {
        key: String,
        first: u64,
        last: u64,
        body: Result<Bytes, String>,
    },
    /// An object that does not decode: its seqs are unknown.
    Damaged { key: String, reason: String },
}

/// The decoded tail objects a replica keeps between refreshes.
#[derive(Debug, Default)]
pub(crate) struct TailCache {
    objects: HashMap<(Uuid, u64), Cached>,
}

/// What one pass over the chains found.
pub(crate) struct TailScan {
    /// This partition's entries (and damaged objects), chain by chain, in number order.
    pub(crate) found: Vec<Cached>,
    /// Keys the listing (or the head) named that were gone when read: the head moved.
    pub(crate) vanished: Vec<String>,
}

/// Decodes `object`'s entry for `tp` and checks every batch in it.
pub(crate) fn decode_for(object: &TailObject, tp: &TopicIdPartition) -> Cached {
    if object.kind() == TailKind::Fence {
        return Cached::Fence;
    }
    let key = object.key();
    let Some(i) = object.entry_for(tp.topic_id(), tp.partition()) else {
        return Cached::NotOurs;
    };
    let Some(entry) = object.entries().get(i).copied() else {
        return Cached::NotOurs;
    };
    let body = object
        .entry_data(i)
        .map_err(|e| e.to_string())
        .and_then(|data| {
            let bytes = object.data().slice_ref(data);
            check_batches(&bytes, entry.first_seq, entry.last_seq).map(|()| bytes)
        });
    Cached::Entry {
        key,
        first: entry.first_seq,
        last: entry.last_seq,
        body,
    }
}

/// Checks that `bytes` are whole Kafka v2 batches of exactly seqs `first..=last`, each batch's
/// CRC-32C and base offset included, every record decodable.
pub(crate) fn check_batches(bytes: &Bytes, first: u64, last: u64) -> Result<(), String> {
    let decoded = decode_records_at(bytes, first, first, usize::MAX)
        .map_err(|e| format!("its batches do not prove seqs {first}..={last}: {e}"))?;
    if decoded.consumed != bytes.len() {
        return Err(format!(
            "its batches end at byte {} of {}: a batch is cut short",
            decoded.consumed,
            bytes.len()
        ));
    }
    let end = decoded.next_seq.map(|n| n.saturating_sub(1));
    if end != Some(last) || decoded.records.first().map(|r| r.seq) != Some(first) {
        return Err(format!(
            "its batches hold seqs {:?}..={:?}, the entry says {first}..={last}",
            decoded.records.first().map(|r| r.seq),
            end
        ));
    }
    Ok(())
}

impl TailCache {
    /// Reads the chains `refs` name (objects from each one's `from` up to its fence), only the
    /// objects not read yet.
    ///
    /// # Errors
    /// A backend error listing a chain or reading an object (a damaged object is kept as
    /// [`Cached::Damaged`], not an error).
    pub(crate) fn scan(
        &mut self,
        store: &dyn krabka_remote_storage::ownership::OwnershipStore,
        refs: &[TailRef],
        tp: &TopicIdPartition,
    ) -> Result<TailScan, (String, RemoteStorageError)> {
        let mut out = TailScan {
            found: Vec::new(),
            vanished: Vec::new(),
        };
        for r in refs {
            let numbers = chain::list_numbers(store, r.chain)
                .map_err(|e| (layout::tail_chain_dir(r.chain), e))?;
            for n in numbers.into_iter().filter(|n| *n >= r.from) {
                let cached = match self.objects.get(&(r.chain, n)) {
                    Some(c) => c.clone(),
                    None => {
                        let key = layout::tail_object_key(r.chain, n);
                        let c = match chain::read_object(store, r.chain, n) {
                            Ok(Some(object)) => decode_for(&object, tp),
                            Ok(None) => {
                                out.vanished.push(key);
                                continue;
                            }
                            Err(RemoteStorageError::Corrupt { reason, .. }) => Cached::Damaged {
                                key: key.clone(),
                                reason,
                            },
                            Err(e) => return Err((key, e)),
                        };
                        self.objects.insert((r.chain, n), c.clone());
                        c
                    }
                };
                match cached {
                    Cached::Fence => break,
                    Cached::NotOurs => {}
                    other => out.found.push(other),
                }
            }
        }
        Ok(out)
    }

    /// Forgets what no later refresh needs: objects of chains `refs` no longer names or below
    /// their `from`, and the bytes of entries at or below `finished_end` (kept as a marker, so
    /// they are not read again while listed).
    pub(crate) fn trim(&mut self, refs: &[TailRef], finished_end: u64) {
        self.objects.retain(|(c, n), cached| {
            let needed = refs.iter().any(|r| r.chain == *c && *n >= r.from);
            // Held by finished segments: never served again, and not read again while listed.
            if let Cached::Entry { last, .. } = cached
                && *last <= finished_end
            {
                *cached = Cached::NotOurs;
            }
            needed
        });
    }
}

/// The tail served above `finished_end`: the entries of `found` in seq order, contiguous from
/// `finished_end + 1`; seqs no entry holds between two that do, damaged entries and damaged
/// objects between entries are named gaps. Entries at or below `finished_end` are ignored
/// (finished segments win).
pub(crate) fn build(found: &[Cached], finished_end: u64) -> TailServed {
    let mut entries: Vec<(&str, u64, u64, &Result<Bytes, String>)> = found
        .iter()
        .filter_map(|c| match c {
            Cached::Entry {
                key,
                first,
                last,
                body,
            } if *last > finished_end => Some((key.as_str(), *first, *last, body)),
            _ => None,
        })
        .collect();
    entries.sort_by_key(|(_, first, _, _)| *first);
    let damaged: Vec<String> = found
        .iter()
        .filter_map(|c| match c {
            Cached::Damaged { key, reason } => Some(format!("{key} does not decode: {reason}")),
            _ => None,
        })
        .collect();
    let mut pieces = Vec::new();
    let mut unexplained = false;
    let mut next = finished_end.saturating_add(1);
    for (key, first, last, body) in entries {
        if last < next {
            // Held already (an entry adopted into a later chain, say).
            continue;
        }
        if first > next {
            unexplained = true;
            let why = if damaged.is_empty() {
                "no tail object the partition head lists holds them".to_owned()
            } else {
                format!(
                    "no readable tail object holds them ({})",
                    damaged.join("; ")
                )
            };
            pieces.push(gap(
                next,
                first - 1,
                vec![key.to_owned()],
                format!(
                    "seqs {next}..={} lie between the finished segments or tail entries and the \
                 entry of {key}, but {why}",
                    first - 1
                ),
            ));
            next = first;
        }
        match body {
            Ok(bytes) => pieces.push(TailPiece {
                first: next,
                last,
                kind: PieceKind::Data {
                    base: first,
                    bytes: bytes.clone(),
                },
            }),
            Err(why) => pieces.push(gap(
                next,
                last,
                vec![key.to_owned()],
                format!("the entry of {key} (seqs {first}..={last}) cannot be served: {why}"),
            )),
        }
        next = last.saturating_add(1);
    }
    TailServed {
        pieces,
        unexplained,
    }
}

fn gap(from: u64, to: u64, objects: Vec<String>, reason: String) -> TailPiece {
    TailPiece {
        first: from,
        last: to,
        kind: PieceKind::Gap(MissingSeqs {
            from,
            to,
            objects,
            reason,
        }),
    }
}

/// The tail served, shared by the views that hold it.
pub(crate) type SharedTail = Arc<TailServed>;
