//! `krabka tier --watch --metrics-addr`: the real binary serves Prometheus metrics over HTTP,
//! and its counters move while it tiers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn krabka() -> Command {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
}

/// Kills the child on every exit path of the test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One `GET /metrics` with a plain TCP stream; the body, or `None` while nothing listens.
fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// Sum of the samples of `name` (any labels) in a Prometheus text body.
fn value(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn tier_serves_prometheus_metrics_that_move_while_it_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let out = krabka()
        .args([
            "produce",
            log.to_str().unwrap(),
            "--generate",
            "3000",
            "--segment-bytes",
            "64KiB",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = krabka()
        .args([
            "tier",
            log.to_str().unwrap(),
            "--remote",
            &remote,
            "--local-retention-bytes",
            "0",
            "--watch",
            "--interval",
            "100ms",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Running(child);

    let start = Instant::now();
    let mut first_rounds = None;
    let mut last = String::new();
    let mut moved = false;
    for _ in 0..200 {
        if start.elapsed() > Duration::from_secs(20) {
            break;
        }
        if let Some(body) = scrape(port) {
            let rounds = value(&body, "krabka_tiering_rounds_total");
            if rounds > 0.0 && first_rounds.is_none() {
                first_rounds = Some(rounds);
            }
            let copied = value(&body, "krabka_remote_copy_bytes_total");
            if copied > 0.0 && first_rounds.is_some_and(|f| rounds >= f + 2.0) {
                last = body;
                moved = true;
                break;
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.0.try_wait().unwrap();
    assert!(status.is_none(), "tier exited early: {status:?}");
    assert!(moved, "metrics did not move; last scrape:\n{last}");
    for name in [
        "krabka_remote_copy_requests_total",
        "krabka_remote_copy_seconds",
        "krabka_remote_copy_lag_bytes",
        "krabka_remote_copy_lag_segments",
        "krabka_remote_log_size_bytes",
        "krabka_remote_log_metadata_count",
        "krabka_local_log_size_bytes",
    ] {
        assert!(last.contains(name), "{name} missing:\n{last}");
    }
    assert!(value(&last, "krabka_remote_log_size_bytes") > 0.0);
    assert!(last.contains("topic=\""), "labels missing:\n{last}");
    // --watch prints the lag as it changes.
    let _ = child.0.kill();
    let out = child.0.wait_with_output_ref();
    assert!(out.contains("copy lag"), "{out}");
}

trait OutputRef {
    fn wait_with_output_ref(&mut self) -> String;
}

impl OutputRef for Child {
    fn wait_with_output_ref(&mut self) -> String {
        let _ = self.wait();
        let mut s = String::new();
        if let Some(out) = self.stdout.as_mut() {
            let _ = out.read_to_string(&mut s);
        }
        s
    }
}
