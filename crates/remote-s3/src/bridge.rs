//! Running the async SDK behind the blocking SPI.
//!
//! The SPI is blocking and callers come from three places: plain threads, `spawn_blocking`
//! on a runtime, and (by mistake or convenience) async tasks. [`Bridge::block_on`] handles each
//! without panicking: a plain thread or a blocking-pool thread simply blocks; a worker of a
//! multi-thread runtime blocks through `block_in_place`, which hands the worker's other tasks
//! to another thread; a current-thread runtime cannot block at all, so that call is refused
//! with [`RemoteStorageError::InvalidArgument`].

use std::future::Future;

use krabka_remote_storage::RemoteStorageError;
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

/// The runtime the SDK's futures run on: owned, or borrowed from the caller.
pub(crate) struct Bridge {
    /// `Some` when the backend owns its runtime; taken on drop.
    owned: Option<Runtime>,
    handle: Handle,
}

impl Bridge {
    /// A bridge over a new multi-thread runtime with `threads` workers and at most `blocking`
    /// blocking threads: `threads + blocking` threads in all, whatever the calls in flight.
    pub(crate) fn owned(threads: usize, blocking: usize) -> Result<Self, RemoteStorageError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .max_blocking_threads(blocking)
            .thread_name("krabka-s3")
            .enable_all()
            .build()
            .map_err(|e| RemoteStorageError::io("tokio runtime for the S3 backend", e))?;
        let handle = runtime.handle().clone();
        Ok(Self {
            owned: Some(runtime),
            handle,
        })
    }

    /// A bridge over the caller's runtime, which must be multi-thread (a current-thread
    /// runtime's `Handle::block_on` cannot drive I/O).
    pub(crate) fn borrowed(handle: Handle) -> Result<Self, RemoteStorageError> {
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            return Err(RemoteStorageError::invalid_argument(
                "the S3 backend needs a multi-thread tokio runtime handle: a current-thread \
                 runtime cannot drive the SDK's I/O from a blocking call",
            ));
        }
        Ok(Self {
            owned: None,
            handle,
        })
    }

    /// The handle futures are spawned on.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `fut` to completion from a blocking call, or refuses when this thread cannot block.
    pub(crate) fn block_on<F: Future>(
        &self,
        operation: &str,
        fut: F,
    ) -> Result<F::Output, RemoteStorageError> {
        match Handle::try_current() {
            // A plain thread: block.
            Err(_) => Ok(self.handle.block_on(fut)),
            Ok(current) => match current.runtime_flavor() {
                // A worker or blocking-pool thread of a multi-thread runtime: `block_in_place`
                // is allowed on both, and makes blocking safe on a worker.
                RuntimeFlavor::MultiThread => {
                    Ok(tokio::task::block_in_place(|| self.handle.block_on(fut)))
                }
                // A current-thread runtime (its task or its blocking pool; tokio does not tell
                // them apart): blocking could deadlock the only thread driving that runtime.
                _ => Err(RemoteStorageError::invalid_argument(format!(
                    "S3 {operation} called from a current-thread tokio runtime, where it cannot \
                     block: call it from a plain thread or from spawn_blocking on a \
                     multi-thread runtime"
                ))),
            },
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(runtime) = self.owned.take() {
            // Dropping a runtime blocks, which panics inside an async context.
            if Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                drop(runtime);
            }
        }
    }
}
