//! Reads through the service: admission against the reader queue, a reader slot, the read on
//! the blocking pool, the reply. A read the local log or the shared cache serves (at least its
//! first records: it ends at the first entry not cached) takes no reader slot: the slots bound
//! the reads that fetch, and a read served from memory does not queue behind them.

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

/// Serves the read from the local log and the cache when they hold its first records (on the
/// blocking pool, whose size bounds these reads' threads, but without a reader slot); else
/// waits for a reader slot, then reads on the blocking pool. A read still waiting when its
/// deadline has passed is not started (its caller has given up).
async fn run(
    shared: &Shared,
    part: &Arc<Partition>,
    from_seq: u64,
    max: usize,
    submitted: Instant,
) -> ReadResult {
    let tp = part.log.topic_id_partition().clone();
    {
        let Some(_op) = part.op() else {
            return Err(Error::Service(
                crate::error::ServiceError::UnknownPartition(tp),
            ));
        };
        let log = part.log.clone();
        // Any failure (a fetch needed, or an error) is left to the read below, which reports it.
        if let Ok(Ok(records)) = blocking(move || Ok(log.read_cached(from_seq, max))).await
            && !records.is_empty()
        {
            return Ok(records);
        }
    }
    let _slot = shared
        .read_slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| Error::Service(crate::error::ServiceError::ServiceStopped))?;
    let deadline = shared.config.fetch_deadline;
    if submitted.elapsed() >= deadline {
        return Err(Error::Read(
            crate::error::ReadError::FetchDeadlineExceeded {
                partition: tp,
                seq: from_seq,
                deadline,
            },
        ));
    }
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
