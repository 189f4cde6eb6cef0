//! The tail part of [`PartitionDir::recover`](crate::PartitionDir::recover): the records a lost
//! writer acknowledged in tail objects, rebuilt into the recovered local log, and the seqs it
//! used that no tier holds, named.
//!
//! Before the segments are recovered, the chains the partition head lists are closed (a fence
//! object: their writer, should it still run, acknowledges nothing more) and this partition's
//! entries above the head's finished segments are read, each batch checked (the replica's
//! checks: entry CRC, CRC-32C, base offsets equal to the seqs, contiguous). The empty local log
//! then starts right after the finished segments and takes them, in seq order; a damaged
//! entry, or seqs no object holds between two that do, is an explicit hole of the local log
//! (a quarantine marker: reads of it fail naming it, appends never reuse it). After the
//! segments are recovered, the log never continues below the highest seq the head's
//! `writer_last_seq`, the epoch records, the segments or the tail objects show used: seqs
//! between the last restored record and there are a hole too, and seqs between the recovered
//! segments and the local log's first are the recovery's lost seqs (`crate::lost`).

use std::ops::RangeInclusive;
use std::path::Path;

use krabka_protocol::batch::StoredHeader;
use krabka_remote_storage::head::{self, HeadRead, PartitionHead};
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::tail as chain;
use krabka_remote_storage::{RemoteStorageError, TopicIdPartition, Uuid, layout, now_ms};
use krabka_storage::{Log, Options};

use crate::error::{Error, TailError};
use crate::replica::tail::{self as replica_tail, Cached, PieceKind};

/// Bytes of a Kafka v2 batch before its `batchLength` counts.
const LENGTH_PREFIX: usize = 12;

/// What a recovery did with the tail in the bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TailRecovery {
    /// The chains the partition head listed, each closed with a fence (by this run or an
    /// earlier one).
    pub chains: Vec<Uuid>,
    /// Records this run appended to the local log from tail objects (0 when a previous run
    /// restored them already).
    pub records: u64,
    /// The seqs restored from the tail by this run.
    pub restored: Option<RangeInclusive<u64>>,
    /// Seqs a writer used that no tier holds, each with why: damaged tail entries, seqs no
    /// tail object holds, and seqs between the last record restored and the highest seq the
    /// bucket shows used. Reads of them fail naming them; appends never reuse them.
    pub holes: Vec<(RangeInclusive<u64>, String)>,
}

/// The tail as the bucket holds it for one partition.
pub(super) struct TailFound {
    head: Option<PartitionHead>,
    found: Vec<Cached>,
    chains: Vec<Uuid>,
}

impl TailFound {
    /// The last seq the head lists finished (0: none).
    fn finished_end(&self) -> u64 {
        self.head
            .as_ref()
            .and_then(|h| h.segments.iter().map(|s| s.end_seq).max())
            .unwrap_or(0)
    }

    /// The highest seq the head and the tail objects show used (0: none).
    fn used_end(&self) -> u64 {
        let entries = self
            .found
            .iter()
            .filter_map(|c| match c {
                Cached::Entry { last, .. } => Some(*last),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        self.head
            .as_ref()
            .map_or(0, |h| h.writer_last_seq)
            .max(entries)
            .max(self.finished_end())
    }
}

fn object_error(key: String, e: RemoteStorageError) -> Error {
    Error::Tail(TailError::Object {
        key,
        source: Box::new(e),
    })
}

/// Reads the partition head, closes every chain it lists and reads this partition's entries
/// from each chain's `from` up to the fence.
///
/// # Errors
/// [`TailError::Object`] when the head, a listing, a fence or an object cannot be read or
/// written (a damaged object is a hole, not an error).
pub(super) fn find(store: &dyn OwnershipStore, tp: &TopicIdPartition) -> Result<TailFound, Error> {
    let dir = layout::partition_dir(tp)
        .map_err(|e| Error::InvalidArgument(format!("partition {tp}: {e}")))?;
    let head = match head::read_head(store, &dir, None)
        .map_err(|e| object_error(layout::head_key(&dir), e))?
    {
        HeadRead::Fresh { head, .. }
            if head.partition.topic_id() == tp.topic_id()
                && head.partition.partition() == tp.partition() =>
        {
            Some(head)
        }
        HeadRead::Damaged { error, .. } => {
            tracing::warn!(partition = %tp, error = %error,
                "the partition head is damaged: no tail chain is known");
            None
        }
        _ => None,
    };
    let refs = head.as_ref().map(|h| h.tail.clone()).unwrap_or_default();
    let fencer = Uuid::new_v4();
    let mut found = Vec::new();
    let mut chains = Vec::new();
    for r in &refs {
        let closed = chain::close_chain(store, r.chain, fencer, now_ms())
            .map_err(|e| object_error(layout::tail_chain_dir(r.chain), e))?;
        chains.push(r.chain);
        for n in closed.below.iter().copied().filter(|n| *n >= r.from) {
            let key = layout::tail_object_key(r.chain, n);
            match chain::read_object(store, r.chain, n) {
                Ok(Some(object)) => match replica_tail::decode_for(&object, tp) {
                    Cached::Fence => break,
                    Cached::NotOurs => {}
                    c => found.push(c),
                },
                // Deleted: finished segments hold its records.
                Ok(None) => {}
                Err(RemoteStorageError::Corrupt { reason, .. }) => {
                    found.push(Cached::Damaged { key, reason });
                }
                Err(e) => return Err(object_error(key, e)),
            }
        }
    }
    Ok(TailFound {
        head,
        found,
        chains,
    })
}

fn storage(dir: &Path, what: &str, e: krabka_storage::Error) -> Error {
    Error::storage(format!("{what} in {}", dir.display()), e)
}

/// Whether the local log in `dir` holds no record and no hole.
fn is_empty(log: &Log) -> bool {
    log.segments().iter().all(|s| s.size == 0) && log.quarantined().is_empty()
}

/// Marks `seqs` as an explicit hole of the local log in `dir` (a quarantine marker), then
/// opens the log again so that its next append comes after them.
fn mark_hole(dir: &Path, log: Log, seqs: &RangeInclusive<u64>) -> Result<Log, Error> {
    log.close()
        .map_err(|e| storage(dir, "closing the local log", e))?;
    let qdir = dir.join(krabka_storage::segment::QUARANTINE_DIR);
    let io = |e: std::io::Error| {
        Error::storage(
            format!("marking seqs {}..={} as a hole", seqs.start(), seqs.end()),
            krabka_storage::Error::Io {
                path: qdir.clone(),
                source: e,
            },
        )
    };
    std::fs::create_dir_all(&qdir).map_err(io)?;
    let marker = qdir.join(krabka_storage::segment::hole_file_name(
        *seqs.start(),
        *seqs.end(),
    ));
    let file = std::fs::File::create(&marker).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::File::open(&qdir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Log::open(dir, Options::default()).map_err(|e| storage(dir, "opening the local log", e))
}

/// Appends the batches of `bytes` (checked, from seq `base`) that lie above the local log.
fn append_batches(log: &Log, key: &str, base: u64, bytes: &[u8]) -> Result<u64, Error> {
    let mut at = 0_usize;
    let mut appended = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let len = StoredHeader::read(rest)
            .and_then(|h| usize::try_from(h.batch_length).ok())
            .and_then(|l| l.checked_add(LENGTH_PREFIX))
            .filter(|l| *l <= rest.len())
            .ok_or_else(|| {
                Error::Tail(TailError::Contradiction {
                    key: key.to_owned(),
                    seq: base,
                    reason: format!("byte {at} of its checked entry is not a whole batch"),
                })
            })?;
        let batch = &rest[..len];
        at += len;
        let last = StoredHeader::read(batch)
            .and_then(|h| u64::try_from(h.last_offset()).ok())
            .unwrap_or(0);
        if last <= log.last_seq() {
            continue;
        }
        let range = log
            .append_raw_batch(batch)
            .map_err(|e| Error::storage(format!("restoring seqs up to {last} from {key}"), e))?;
        appended += range.end() - range.start() + 1;
    }
    Ok(appended)
}

/// Before the segments are recovered: when the local log in `dir` is empty and the tail holds
/// records above the head's finished segments, starts it right after them and restores them
/// (a damaged entry or seqs no object holds: a hole). A log holding records already (a run
/// before this one) takes only what continues it.
///
/// # Errors
/// [`Error::Storage`] when the local log cannot be opened, started or appended to.
pub(super) fn restore(dir: &Path, tail: &TailFound) -> Result<TailRecovery, Error> {
    let mut out = TailRecovery {
        chains: tail.chains.clone(),
        ..TailRecovery::default()
    };
    let finished = tail.finished_end();
    let served = replica_tail::build(&tail.found, finished);
    if !served
        .pieces
        .iter()
        .any(|p| matches!(p.kind, PieceKind::Data { .. }))
    {
        return Ok(out);
    }
    let mut log =
        Log::open(dir, Options::default()).map_err(|e| storage(dir, "opening the local log", e))?;
    if is_empty(&log) {
        // Seqs no object holds right above the finished segments: the recovered segments'
        // lost seqs (written once they are known), not a hole inside the log.
        let first_data = served
            .pieces
            .iter()
            .find(|p| matches!(p.kind, PieceKind::Data { .. }))
            .map_or(finished + 1, |p| p.first);
        for p in served.pieces.iter().take_while(|p| p.first < first_data) {
            if let PieceKind::Gap(m) = &p.kind {
                out.holes.push((m.from..=m.to, m.reason.clone()));
            }
        }
        log.start_at(first_data)
            .map_err(|e| storage(dir, "starting the local log", e))?;
    }
    for p in &served.pieces {
        if p.last <= log.last_seq() {
            continue;
        }
        match &p.kind {
            PieceKind::Data { base, bytes } => {
                if p.first > log.next_seq() {
                    // The log ends below this piece: a run before this one left it so.
                    break;
                }
                let key = tail
                    .found
                    .iter()
                    .find_map(|c| match c {
                        Cached::Entry { key, first, .. } if first == base => Some(key.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                let n = append_batches(&log, &key, *base, bytes)?;
                if n > 0 {
                    let from = log.last_seq() + 1 - n;
                    out.restored =
                        Some(out.restored.as_ref().map_or(from, |r| *r.start())..=log.last_seq());
                }
                out.records += n;
            }
            PieceKind::Gap(m) => {
                if m.from != log.next_seq() {
                    break;
                }
                out.holes.push((m.from..=m.to, m.reason.clone()));
                log = mark_hole(dir, log, &(m.from..=m.to))?;
            }
        }
    }
    log.close()
        .map_err(|e| storage(dir, "closing the local log", e))?;
    Ok(out)
}

/// After the segments are recovered (their last seq `recovered_end`, 0 for none; `claimed_end`
/// the highest seq their listing shows used): the local log continues after every seq the
/// bucket shows used, the seqs between its last record and there a hole, and the seqs between
/// the recovered segments and its first seq are recorded lost.
///
/// # Errors
/// [`Error::Storage`] for the local log; [`Error::Checkpoint`] when the lost seqs cannot be
/// recorded.
pub(super) fn settle(
    dir: &Path,
    tail: &TailFound,
    recovered_end: u64,
    claimed_end: Option<u64>,
    out: &mut TailRecovery,
) -> Result<(), Error> {
    let used = tail.used_end().max(claimed_end.unwrap_or(0));
    let mut log =
        Log::open(dir, Options::default()).map_err(|e| storage(dir, "opening the local log", e))?;
    if is_empty(&log) {
        if used >= log.next_seq() {
            log.start_at(used + 1)
                .map_err(|e| storage(dir, "starting the local log", e))?;
        }
    } else if used > log.last_seq() {
        let seqs = log.last_seq() + 1..=used;
        let why = match &tail.head {
            Some(h) if h.writer_last_seq == used => format!(
                "the partition head says its writer appended up to seq {used}, but no tier \
                 holds seqs {}..={used} (appended, never acknowledged in the bucket)",
                seqs.start()
            ),
            _ => format!(
                "the bucket shows seqs up to {used} used, but no tier holds seqs {}..={used}",
                seqs.start()
            ),
        };
        if !out.holes.iter().any(|(h, _)| h == &seqs) {
            out.holes.push((seqs.clone(), why));
        }
        log = mark_hole(dir, log, &seqs)?;
    }
    // The local log's first seq: its first record or hole, else where it continues.
    let first = log
        .segments()
        .iter()
        .filter(|s| s.size > 0)
        .map(|s| s.base_seq)
        .chain(log.quarantined().iter().map(|(r, _)| *r.start()))
        .min()
        .unwrap_or_else(|| log.next_seq());
    log.close()
        .map_err(|e| storage(dir, "closing the local log", e))?;
    if first > recovered_end.saturating_add(1) {
        let lost = recovered_end.saturating_add(1)..=first - 1;
        if is_new_lost(dir, &lost)? {
            crate::lost::write(dir, &lost)?;
        }
        if is_empty_restore(out) && !out.holes.iter().any(|(h, _)| h == &lost) {
            let why = match &tail.head {
                Some(h) if h.writer_last_seq == *lost.end() => format!(
                    "the partition head says its writer appended up to seq {}, but no tier \
                     holds seqs {}..={}",
                    lost.end(),
                    lost.start(),
                    lost.end()
                ),
                _ => format!(
                    "the bucket shows seqs up to {} used, but no tier holds seqs {}..={}",
                    lost.end(),
                    lost.start(),
                    lost.end()
                ),
            };
            out.holes.push((lost, why));
        }
    }
    out.holes.sort_by_key(|(r, _)| *r.start());
    Ok(())
}

fn is_empty_restore(out: &TailRecovery) -> bool {
    out.records == 0
}

/// Whether `lost` differs from the lost seqs `dir` records.
fn is_new_lost(dir: &Path, lost: &RangeInclusive<u64>) -> Result<bool, Error> {
    Ok(crate::lost::read(dir)?.as_ref() != Some(lost))
}
