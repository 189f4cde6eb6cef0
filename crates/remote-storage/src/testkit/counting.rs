//! [`Counting`]: a decorator RSM that counts calls and returned bytes, can slow chosen
//! methods down, and runs a test's hook before each call. A test double; the decorator that
//! reports calls to metrics and tracing in production is `krabka_tiering::Instrumented`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::fault::Method;
use crate::error::RemoteStorageError;
use crate::manager::RemoteStorageManager;
use crate::model::{CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata};

/// Calls an [`Counting`] store has seen, per method, and the bytes its fetches returned.
///
/// A call is counted when it arrives, whether it then fails or not; bytes only when the inner
/// store returned them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls of [`RemoteStorageManager::copy_log_segment_data`].
    pub copy: u64,
    /// Calls of [`RemoteStorageManager::fetch_log_segment`] (ranged or whole).
    pub fetch_log: u64,
    /// Bytes the successful `fetch_log_segment` calls returned.
    pub fetch_log_bytes: u64,
    /// Calls of [`RemoteStorageManager::fetch_index`].
    pub fetch_index: u64,
    /// Bytes the successful `fetch_index` calls returned.
    pub fetch_index_bytes: u64,
    /// Calls of [`RemoteStorageManager::delete_log_segment_data`].
    pub delete: u64,
}

impl CallCounts {
    /// Calls of `method`.
    pub fn calls(&self, method: Method) -> u64 {
        match method {
            Method::CopyLogSegmentData => self.copy,
            Method::FetchLogSegment => self.fetch_log,
            Method::FetchIndex => self.fetch_index,
            Method::DeleteLogSegmentData => self.delete,
        }
    }
}

/// One call an [`Counting`] store received, as its hook sees it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Call<'a> {
    /// The method called.
    pub method: Method,
    /// The segment it is about.
    pub metadata: &'a RemoteLogSegmentMetadata,
    /// The index asked for, for [`Method::FetchIndex`] (`None` for the other methods).
    pub index: Option<IndexType>,
}

type Hook = Box<dyn Fn(&Call<'_>) -> Result<(), RemoteStorageError> + Send + Sync>;

const METHODS: usize = Method::ALL.len();

/// A [`RemoteStorageManager`] that forwards every call to another while counting calls (and
/// the bytes fetches return), optionally sleeping before chosen methods (a slow backend), and
/// running a hook before each call that may record it, act on the side, or fail it.
///
/// Each call goes: count it; run the hook, if any (an error from the hook is the call's
/// result, and the inner store is not called); sleep the method's delay, if any; forward.
///
/// ```
/// use std::time::Duration;
/// use krabka_remote_storage::testkit::{InMemoryRemoteStorage, Counting, Method};
///
/// let rsm = Counting::new(InMemoryRemoteStorage::new())
///     .with_delay(&[Method::FetchLogSegment], Duration::from_millis(1))
///     .with_hook(|call| {
///         // e.g. record `call.metadata.start_offset()`, or return an error to fail the call.
///         let _ = call.method;
///         Ok(())
///     });
/// // ... hand `rsm` (or an `Arc` of it) to the layer under test, then:
/// let counts = rsm.take(); // and reset
/// assert_eq!(counts.fetch_log, rsm.calls(Method::FetchLogSegment));
/// ```
pub struct Counting<R> {
    inner: R,
    calls: [AtomicU64; METHODS],
    fetch_log_bytes: AtomicU64,
    fetch_index_bytes: AtomicU64,
    delays: [Option<Duration>; METHODS],
    hook: Option<Hook>,
}

impl<R: fmt::Debug> fmt::Debug for Counting<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counting")
            .field("inner", &self.inner)
            .field("calls", &self.calls)
            .field("fetch_log_bytes", &self.fetch_log_bytes)
            .field("fetch_index_bytes", &self.fetch_index_bytes)
            .field("delays", &self.delays)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

impl<R: RemoteStorageManager> Counting<R> {
    /// Wraps `inner`: counts only, no delay, no hook.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            calls: Default::default(),
            fetch_log_bytes: AtomicU64::new(0),
            fetch_index_bytes: AtomicU64::new(0),
            delays: [None; METHODS],
            hook: None,
        }
    }

    /// Sleeps `delay` before forwarding each call of `methods` (after the hook), as a slow
    /// backend would.
    #[must_use]
    pub fn with_delay(mut self, methods: &[Method], delay: Duration) -> Self {
        for &m in methods {
            self.delays[m.index()] = Some(delay);
        }
        self
    }

    /// Runs `hook` before every call (of every method: match on [`Call::method`]). An `Err` is
    /// returned as the call's result, without the delay and without calling the inner store.
    /// Replaces an earlier hook.
    #[must_use]
    pub fn with_hook(
        mut self,
        hook: impl Fn(&Call<'_>) -> Result<(), RemoteStorageError> + Send + Sync + 'static,
    ) -> Self {
        self.hook = Some(Box::new(hook));
        self
    }

    /// Calls of `method` so far (since the last [`take`](Self::take)).
    pub fn calls(&self, method: Method) -> u64 {
        self.calls[method.index()].load(Ordering::SeqCst)
    }

    /// All counters.
    pub fn counts(&self) -> CallCounts {
        CallCounts {
            copy: self.calls(Method::CopyLogSegmentData),
            fetch_log: self.calls(Method::FetchLogSegment),
            fetch_log_bytes: self.fetch_log_bytes.load(Ordering::SeqCst),
            fetch_index: self.calls(Method::FetchIndex),
            fetch_index_bytes: self.fetch_index_bytes.load(Ordering::SeqCst),
            delete: self.calls(Method::DeleteLogSegmentData),
        }
    }

    /// All counters, each reset to zero as it is read.
    pub fn take(&self) -> CallCounts {
        let take = |m: Method| self.calls[m.index()].swap(0, Ordering::SeqCst);
        CallCounts {
            copy: take(Method::CopyLogSegmentData),
            fetch_log: take(Method::FetchLogSegment),
            fetch_log_bytes: self.fetch_log_bytes.swap(0, Ordering::SeqCst),
            fetch_index: take(Method::FetchIndex),
            fetch_index_bytes: self.fetch_index_bytes.swap(0, Ordering::SeqCst),
            delete: take(Method::DeleteLogSegmentData),
        }
    }

    /// The wrapped store (to inspect or change it, bypassing counters, delay and hook).
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> R {
        self.inner
    }

    fn before(
        &self,
        method: Method,
        metadata: &RemoteLogSegmentMetadata,
        index: Option<IndexType>,
    ) -> Result<(), RemoteStorageError> {
        self.calls[method.index()].fetch_add(1, Ordering::SeqCst);
        if let Some(hook) = &self.hook {
            hook(&Call {
                method,
                metadata,
                index,
            })?;
        }
        if let Some(delay) = self.delays[method.index()] {
            std::thread::sleep(delay);
        }
        Ok(())
    }
}

impl<R: RemoteStorageManager> RemoteStorageManager for Counting<R> {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        self.before(Method::CopyLogSegmentData, metadata, None)?;
        self.inner.copy_log_segment_data(metadata, data)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.before(Method::FetchLogSegment, metadata, None)?;
        let bytes = self
            .inner
            .fetch_log_segment(metadata, start_position, end_position)?;
        self.fetch_log_bytes
            .fetch_add(bytes.len() as u64, Ordering::SeqCst);
        Ok(bytes)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.before(Method::FetchIndex, metadata, Some(index_type))?;
        let bytes = self.inner.fetch_index(metadata, index_type)?;
        self.fetch_index_bytes
            .fetch_add(bytes.len() as u64, Ordering::SeqCst);
        Ok(bytes)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.before(Method::DeleteLogSegmentData, metadata, None)?;
        self.inner.delete_log_segment_data(metadata)
    }
}
