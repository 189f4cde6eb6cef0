//! Running a few futures of one call concurrently on the calling task.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// A boxed future of one copy, borrowing the backend.
pub(super) type Task<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls every future until all are done; returns their outputs in order. Nothing is
/// cancelled when one fails: each upload finishes (or aborts its multipart upload) on its own.
pub(super) async fn join_all<T>(tasks: Vec<Task<'_, T>>) -> Vec<T> {
    let mut tasks: Vec<Option<Task<'_, T>>> = tasks.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = tasks.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (task, slot) in tasks.iter_mut().zip(out.iter_mut()) {
            let Some(fut) = task else { continue };
            match fut.as_mut().poll(cx) {
                Poll::Ready(v) => {
                    *slot = Some(v);
                    *task = None;
                }
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
