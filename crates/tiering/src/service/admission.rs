//! Reads through the service: admission against the reader queue, the read on the blocking
//! pool, the reply. A read the local log or the shared cache serves (at least its first
//! records: it ends at the first entry not cached) takes no reader slot. A read that misses
//! awaits the fetch of what it missed on the read engine without a thread or a slot, then
//! decodes it in a reader slot: the slots bound the threads decoding fetched bytes, the engine
//! the fetches in flight, and a read served from memory queues behind neither.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use krabka_storage::Record;
use tokio::runtime::Handle;
use tracing::Instrument;

use super::Shared;
use super::partition::Partition;
use crate::error::Error;
use crate::metrics::{self as m, add, time};
use crate::read::cold::ColdRead;
use crate::round::blocking;

type ReadResult = Result<Vec<Record>, Error>;

/// Where a read's result goes: a blocked thread or an awaiting task.
pub(crate) enum Reply {
    Sync(std::sync::mpsc::SyncSender<ReadResult>),
    Async(tokio::sync::oneshot::Sender<ReadResult>),
}

impl Reply {
    /// Delivers `result`; a caller that gave up (deadline) is not there any more.
    fn send(self, result: ReadResult) {
        match self {
            Reply::Sync(tx) => {
                let _ = tx.try_send(result);
            }
            Reply::Async(tx) => {
                let _ = tx.send(result);
            }
        }
    }
}

/// Admits a read (or refuses it with [`ReadError::ReaderQueueFull`](crate::ReadError::ReaderQueueFull)) and starts it on `handle`.
pub(crate) fn submit(
    shared: &Arc<Shared>,
    handle: &Handle,
    part: Arc<Partition>,
    from_seq: u64,
    max: usize,
    reply: Reply,
) -> Result<(), Error> {
    let limit = shared.config.read_threads + shared.config.read_queue;
    let before = shared.reads_pending.fetch_add(1, Ordering::AcqRel);
    if before >= limit {
        shared.reads_pending.fetch_sub(1, Ordering::AcqRel);
        ::metrics::counter!(m::READER_REJECTED).increment(1);
        return Err(Error::Read(crate::error::ReadError::ReaderQueueFull {
            limit,
        }));
    }
    ::metrics::gauge!(m::READER_QUEUE_SIZE).set((before + 1) as f64);
    let shared = shared.clone();
    let submitted = Instant::now();
    handle.spawn(async move {
        let result = run(&shared, &part, from_seq, max, submitted).await;
        let left = shared.reads_pending.fetch_sub(1, Ordering::AcqRel) - 1;
        ::metrics::gauge!(m::READER_QUEUE_SIZE).set(left as f64);
        let tp = part.log.topic_id_partition();
        time(m::READ_SECONDS, tp, submitted.elapsed());
        if result.is_err() {
            add(m::READ_ERRORS, tp, 1);
        }
        reply.send(result);
    });
    Ok(())
}

/// Attempts of a read awaiting its fetches without a thread (each after one entry fetched: an
/// offset index, a chunk) before it returns what it has, or, with nothing, reads the usual way.
const COLD_STEPS: usize = 64;

/// Serves the read from the local log and the cache when they hold its first records (on the
/// blocking pool, whose size bounds these reads' threads, but without a reader slot). Else the
/// entry it missed is fetched on the read engine while the read awaits it without a thread,
/// and the read goes on from there with those bytes in a reader slot, until it has `max`
/// records or the records end (at most [`COLD_STEPS`] fetches; then it returns what it has): a read holds a slot only to
/// decode bytes it has, never while they are in flight (`crate::read::cold`). A read the
/// engine gave nothing for (a fetch failed, the engine closing) waits for a reader slot and
/// reads on the blocking pool, fetching itself and reporting what goes wrong. A read still
/// waiting when its deadline has passed is not started (its caller has given up).
async fn run(
    shared: &Shared,
    part: &Arc<Partition>,
    from_seq: u64,
    max: usize,
    submitted: Instant,
) -> ReadResult {
    let tp = part.log.topic_id_partition().clone();
    let deadline = shared.config.fetch_deadline;
    let past_deadline = || {
        Error::Read(crate::error::ReadError::FetchDeadlineExceeded {
            partition: tp.clone(),
            seq: from_seq,
            deadline,
        })
    };
    {
        let Some(_op) = part.op() else {
            return Err(Error::Service(
                crate::error::ServiceError::UnknownPartition(tp),
            ));
        };
        let cold = Arc::new(ColdRead::default());
        let mut out: Vec<Record> = Vec::new();
        let mut next = from_seq;
        let mut fetched = false;
        for _ in 0..COLD_STEPS {
            let slot = if fetched {
                Some(read_slot(shared, submitted, deadline, past_deadline).await?)
            } else {
                None
            };
            let (log, attempt, want) = (part.log.clone(), cold.clone(), max - out.len());
            // Any failure (a fetch needed, or an error) is left to the read below, which
            // reports it, or to the next read, from where this one ends.
            let got = blocking(move || Ok(log.read_cold(next, want, &attempt))).await;
            drop(slot);
            if let Ok(Ok(records)) = got
                && let Some(last) = records.last()
            {
                next = last.seq + 1;
                out.extend(records);
            }
            if out.len() >= max {
                return Ok(out);
            }
            let Some(miss) = cold.take_miss() else { break };
            let Some(arrives) = part.log.fetch_missing(&miss) else {
                break;
            };
            let left = deadline.saturating_sub(submitted.elapsed());
            match tokio::time::timeout(left, arrives).await {
                Ok(Ok(Some(bytes))) => cold.hold(&miss, bytes),
                // Another's fetch of it failed: the next attempt fetches it itself.
                Ok(Ok(None)) => {}
                // The engine dropped the fetch (closing).
                Ok(Err(_)) => break,
                Err(_) if !out.is_empty() => break,
                Err(_) => return Err(past_deadline()),
            }
            fetched = true;
        }
        if !out.is_empty() {
            return Ok(out);
        }
    }
    let _slot = read_slot(shared, submitted, deadline, past_deadline).await?;
    let Some(_op) = part.op() else {
        return Err(Error::Service(
            crate::error::ServiceError::UnknownPartition(tp),
        ));
    };
    let log = part.log.clone();
    let span = tracing::info_span!(
        "tiering_fetch",
        topic = tp.topic(),
        partition = tp.partition(),
        seq = from_seq,
        max,
        records = tracing::field::Empty
    );
    let records = blocking(move || log.read(from_seq, max))
        .instrument(span.clone())
        .await?;
    span.record("records", records.len());
    Ok(records)
}

/// A reader slot for a read submitted at `submitted`, once one is free; the error
/// `past_deadline` gives when the read's `deadline` has passed meanwhile (its caller has given
/// up), and [`ServiceStopped`](crate::error::ServiceError::ServiceStopped) when the service
/// closed.
async fn read_slot(
    shared: &Shared,
    submitted: Instant,
    deadline: std::time::Duration,
    past_deadline: impl Fn() -> Error,
) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
    let slot = shared
        .read_slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| Error::Service(crate::error::ServiceError::ServiceStopped))?;
    if submitted.elapsed() >= deadline {
        return Err(past_deadline());
    }
    Ok(slot)
}
