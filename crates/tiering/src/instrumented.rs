//! [`Instrumented`]: a decorator over any backend that reports every remote call the same way
//! (metrics, tracing spans), and applies the fetch quota.

use std::sync::Arc;
use std::time::Instant;

use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager,
};

use crate::metrics::{self as m, add, time};
use crate::quota::ByteRateQuota;

/// A [`RemoteStorageManager`] that forwards every call to `inner` and records it:
///
/// - counters `krabka_remote_{copy,fetch,fetch_index,delete}_requests_total`,
///   `..._errors_total`, `krabka_remote_copy_bytes_total` (the segment's bytes, on success)
///   and `krabka_remote_fetch_bytes_total` (bytes returned);
/// - latency histograms `krabka_remote_{copy,fetch,delete}_seconds`;
/// - a `tracing` span per call (`remote_copy`, `remote_fetch`, `remote_fetch_index`,
///   `remote_delete`) with the segment id, its seqs and byte counts, and a debug event when it
///   fails. No field carries a credential or record content.
///
/// With [`with_fetch_quota`](Self::with_fetch_quota), a data fetch first waits (sleeping its
/// thread) while the shared fetch quota is in debt, then charges the bytes it returned.
///
/// Every metric is labelled with the segment's `topic` and `partition`.
///
/// For production: tests that count calls, delay them or hook into them use
/// `krabka_remote_storage::testkit::Counting` instead, which reports to nothing.
#[derive(Debug)]
pub struct Instrumented<R> {
    inner: R,
    fetch_quota: Option<Arc<ByteRateQuota>>,
}

impl<R: RemoteStorageManager> Instrumented<R> {
    /// Wraps `inner`.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            fetch_quota: None,
        }
    }

    /// Applies `quota` to data fetches (see the type's documentation).
    #[must_use]
    pub fn with_fetch_quota(mut self, quota: Arc<ByteRateQuota>) -> Self {
        self.fetch_quota = Some(quota);
        self
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// Unwraps the backend.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

fn span(op: &'static str, meta: &RemoteLogSegmentMetadata, bytes: u64) -> tracing::Span {
    tracing::info_span!(
        "remote_call",
        op,
        segment = %meta.remote_log_segment_id(),
        base_seq = meta.start_offset(),
        last_seq = meta.end_offset(),
        bytes,
    )
}

/// Records one call's outcome: requests, errors and latency.
fn record<T>(
    meta: &RemoteLogSegmentMetadata,
    (requests, errors, seconds): (&'static str, &'static str, Option<&'static str>),
    started: Instant,
    result: &Result<T, RemoteStorageError>,
) {
    let tp = meta.topic_id_partition();
    add(requests, tp, 1);
    if let Some(seconds) = seconds {
        time(seconds, tp, started.elapsed());
    }
    if let Err(e) = result {
        add(errors, tp, 1);
        tracing::debug!(segment = %meta.remote_log_segment_id(), error = %e, requests,
            "remote call failed");
    }
}

impl<R: RemoteStorageManager> RemoteStorageManager for Instrumented<R> {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let bytes = metadata.segment_size_in_bytes();
        let _span = span("copy", metadata, bytes).entered();
        let started = Instant::now();
        let result = self.inner.copy_log_segment_data(metadata, data);
        let names = (m::COPY_REQUESTS, m::COPY_ERRORS, Some(m::COPY_SECONDS));
        record(metadata, names, started, &result);
        if result.is_ok() {
            add(m::COPY_BYTES, metadata.topic_id_partition(), bytes);
        }
        result
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let want = end_position.map_or(0, |e| u64::from(e.saturating_sub(start_position)) + 1);
        let _span = span("fetch", metadata, want).entered();
        let tp = metadata.topic_id_partition();
        if let Some(q) = &self.fetch_quota {
            let waited = q.delay();
            if !waited.is_zero() {
                std::thread::sleep(waited);
                time(m::FETCH_THROTTLE_SECONDS, tp, waited);
            }
        }
        let started = Instant::now();
        let result = self
            .inner
            .fetch_log_segment(metadata, start_position, end_position);
        let names = (m::FETCH_REQUESTS, m::FETCH_ERRORS, Some(m::FETCH_SECONDS));
        record(metadata, names, started, &result);
        if let Ok(bytes) = &result {
            add(m::FETCH_BYTES, tp, bytes.len() as u64);
            if let Some(q) = &self.fetch_quota {
                q.charge(bytes.len() as u64);
            }
        }
        result
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let _span = span("fetch_index", metadata, 0).entered();
        let started = Instant::now();
        let result = self.inner.fetch_index(metadata, index_type);
        let names = (
            m::FETCH_INDEX_REQUESTS,
            m::FETCH_ERRORS,
            Some(m::FETCH_SECONDS),
        );
        record(metadata, names, started, &result);
        if let Ok(bytes) = &result {
            add(
                m::FETCH_BYTES,
                metadata.topic_id_partition(),
                bytes.len() as u64,
            );
        }
        result
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let _span = span("delete", metadata, metadata.segment_size_in_bytes()).entered();
        let started = Instant::now();
        let result = self.inner.delete_log_segment_data(metadata);
        let names = (
            m::DELETE_REQUESTS,
            m::DELETE_ERRORS,
            Some(m::DELETE_SECONDS),
        );
        record(metadata, names, started, &result);
        result
    }
}
