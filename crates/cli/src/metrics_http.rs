//! `tier --metrics-addr`: the tiering metrics served for Prometheus at `http://ADDR/metrics`, by a
//! listener that no number of clients can turn against the log.
//!
//! The recorder is `metrics_exporter_prometheus`'s ([`PrometheusBuilder::install_recorder`]);
//! HTTP is hyper's HTTP/1 server on a one-thread tokio runtime of its own. The limits:
//! - at most [`connection_cap`] connections at once (a semaphore): an eighth of the process's
//!   descriptor limit ([`krabka_tiering::open_files_limit`]), at most [`MAX_CONNECTIONS`],
//!   at least 1; a connection over the cap is closed as soon as it is accepted, so it holds no
//!   descriptor and no memory;
//! - [`REQUEST_TIMEOUT`] to send the request head, [`CONNECTION_TIMEOUT`] for the whole
//!   connection (one request: no keep-alive), so an idle client gives its slot back;
//! - a small read buffer per connection ([`MAX_BUFFER`]).
//!
//! So the process never holds more than the cap plus 2 descriptors for metrics (the listener,
//! and a connection being accepted to be closed), whatever clients do, and `tier --watch` keeps
//! the rest, its reserve of at least seven eighths of the limit less 2, for its log, metadata
//! and remote (a round of the default 8 copies at once takes about 20 on the filesystem
//! backend): under `ulimit -n 64`, 8 connections and 54 descriptors for tiering. Only
//! `GET /metrics` is served (404 otherwise).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::sync::Semaphore;

use crate::error::{CliError, Result};

/// Most metrics connections served at once, however high the descriptor limit; more are
/// closed as soon as they are accepted.
pub const MAX_CONNECTIONS: usize = 64;

/// Metrics connections may hold at most `1 / LIMIT_SHARE` of the process's descriptor limit:
/// the rest is tiering's reserve.
pub const LIMIT_SHARE: u64 = 8;

/// How many metrics connections are served at once under the descriptor limit `limit`
/// (`None`: unlimited): a [`LIMIT_SHARE`]th of it, from 1 to [`MAX_CONNECTIONS`].
pub fn connection_cap(limit: Option<u64>) -> usize {
    match limit {
        None => MAX_CONNECTIONS,
        Some(limit) => usize::try_from(limit / LIMIT_SHARE)
            .unwrap_or(MAX_CONNECTIONS)
            .clamp(1, MAX_CONNECTIONS),
    }
}

/// Time a client has to send its request head after connecting.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a metrics connection lives, request and response included.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Read buffer of a connection (hyper's smallest): a scrape's request is a few hundred bytes.
pub const MAX_BUFFER: usize = 8 * 1024;

/// How often the recorder's histograms are drained (what the exporter's own listener does).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Pause after a failed accept (e.g. out of descriptors), so the loop never spins.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The content type of the Prometheus text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// Binds `addr`, installs the Prometheus recorder and serves it on a thread of its own for the
/// rest of the process. Returns the address bound (for port 0, the port the OS chose).
///
/// # Errors
/// When `addr` cannot be bound, a recorder is installed already, or the runtime or thread
/// cannot be started.
pub fn serve(addr: SocketAddr) -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        CliError::new(format!("cannot serve metrics on {addr}: {e}"))
            .hint("pass a free address, e.g. --metrics-addr 127.0.0.1:9464")
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::new(format!("cannot serve metrics on {addr}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| CliError::new(format!("cannot serve metrics on {bound}: {e}")))?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| CliError::new(format!("cannot install the metrics recorder: {e}")))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| CliError::new(format!("cannot start the metrics server: {e}")))?;
    let listener = {
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener)
            .map_err(|e| CliError::new(format!("cannot serve metrics on {bound}: {e}")))?
    };
    std::thread::Builder::new()
        .name("krabka-metrics".to_owned())
        .spawn(move || runtime.block_on(accept_loop(listener, handle)))
        .map_err(|e| CliError::new(format!("cannot start the metrics server: {e}")))?;
    Ok(bound)
}

/// Accepts connections forever, serving at most [`connection_cap`] at once (the descriptor
/// limit as the server starts).
async fn accept_loop(listener: tokio::net::TcpListener, handle: PrometheusHandle) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP_EVERY).await;
            upkeep.run_upkeep();
        }
    });
    let slots = Arc::new(Semaphore::new(connection_cap(
        krabka_tiering::open_files_limit(),
    )));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, or a connection reset before it was accepted: wait a
                // little instead of spinning; the log's descriptors are never ours to take.
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Over the cap: closed at once.
            drop(stream);
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let handle = handle.clone();
                async move { Ok::<_, Infallible>(respond(&handle, &req)) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(REQUEST_TIMEOUT)
                .keep_alive(false)
                .max_buf_size(MAX_BUFFER)
                .serve_connection(TokioIo::new(stream), service);
            // A client that stalls past the timeout is dropped with its connection.
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            drop(slot);
        });
    }
}

/// The response to one request: the metrics for `GET /metrics`, 404 for anything else.
fn respond(handle: &PrometheusHandle, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() == Method::GET && req.uri().path() == "/metrics" {
        let mut response = Response::new(Full::new(Bytes::from(handle.render())));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT));
        response
    } else {
        let mut response = Response::new(Full::new(Bytes::from_static(
            b"not found: metrics are at GET /metrics\n",
        )));
        *response.status_mut() = StatusCode::NOT_FOUND;
        response
    }
}

/// The warning printed when `bound` is reachable from other machines (not a loopback address).
pub fn exposure_warning(bound: SocketAddr) -> Option<String> {
    (!bound.ip().is_loopback()).then(|| {
        format!(
            "warning: metrics are served to the network on {bound} (plain HTTP, no \
             authentication); pass a loopback address such as 127.0.0.1:{} to keep them on \
             this machine",
            bound.port()
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_is_an_eighth_of_the_descriptor_limit_up_to_64() {
        assert_eq!(connection_cap(None), 64);
        assert_eq!(connection_cap(Some(1 << 20)), 64);
        assert_eq!(connection_cap(Some(u64::MAX)), 64);
        assert_eq!(connection_cap(Some(512)), 64);
        assert_eq!(connection_cap(Some(256)), 32);
        assert_eq!(connection_cap(Some(64)), 8);
        assert_eq!(connection_cap(Some(20)), 2);
        assert_eq!(connection_cap(Some(7)), 1);
        assert_eq!(connection_cap(Some(0)), 1);
    }

    #[test]
    fn only_a_non_loopback_address_is_warned_about() {
        let any: SocketAddr = "0.0.0.0:9464".parse().unwrap();
        let loopback: SocketAddr = "127.0.0.1:9464".parse().unwrap();
        let v6: SocketAddr = "[::1]:9464".parse().unwrap();
        assert!(
            exposure_warning(any)
                .is_some_and(|w| w.contains("metrics are served to the network on 0.0.0.0:9464"))
        );
        assert_eq!(exposure_warning(loopback), None);
        assert_eq!(exposure_warning(v6), None);
    }
}
