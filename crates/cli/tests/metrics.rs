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

/// What the metrics listener promises (`crates/cli/src/metrics_http.rs`): at most an eighth of
/// the descriptor limit in connections at once, and never more than 64; idle ones closed after
/// the request timeout.
fn connection_cap(fd_limit: usize) -> usize {
    (fd_limit / 8).clamp(1, 64)
}

/// Every line the child writes to stdout, as it comes.
fn lines_of(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The port of the `serving metrics at http://HOST:PORT/metrics` line, waiting at most 20 s.
fn served_port(lines: &std::sync::mpsc::Receiver<String>, host: &str) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let prefix = format!("serving metrics at http://{host}:");
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = lines.recv_timeout(left) else {
            break;
        };
        if let Some(rest) = line.strip_prefix(&prefix) {
            let port: u16 = rest.trim_end_matches("/metrics").parse().unwrap();
            assert_ne!(port, 0, "{line}");
            return port;
        }
    }
    panic!("no `{prefix}PORT/metrics` line within 20 s");
}

/// Polls `check` on scrapes every 100 ms for at most `limit`; the last body and whether it held.
fn scrape_until(port: u16, limit: Duration, check: impl Fn(&str) -> bool) -> (bool, String) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        if let Some(body) = scrape(port) {
            if check(&body) {
                return (true, body);
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (false, last)
}

/// How many of `streams` the server still holds open (a read would block) rather than closed
/// (end of file, or reset).
fn still_open(streams: &[TcpStream]) -> usize {
    streams
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            let mut byte = [0u8; 1];
            matches!((&**s).read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count()
}

/// The status line of a raw request for `path`.
fn status_of(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.lines().next().unwrap_or_default().to_owned()
}

/// Metrics clients cannot take the descriptors tiering needs: `tier --watch` under a limit of
/// 256 descriptors, 300 idle connections to its metrics port, and tiering goes on (see
/// [`idle_flood_during_copies`]).
#[test]
fn idle_metrics_connections_beyond_the_cap_cannot_stop_tiering_under_a_low_descriptor_limit() {
    idle_flood_during_copies(256, 300);
}

/// The same under `ulimit -n 64`, where a fixed cap of 64 connections left tiering none: 600
/// idle connections (bounded, so the test's own limit holds them), 8 served at once, and every
/// segment is copied while they are open.
#[test]
fn idle_metrics_connections_cannot_stop_tiering_under_a_limit_of_64_descriptors() {
    idle_flood_during_copies(64, 600);
}

/// `tier --watch` under a limit of `fd_limit` descriptors and `flood` idle connections to its
/// metrics port: tiering goes on. Its copies fail at first (a file size limit of 32 KiB, below
/// the 128 KiB segments) and are made possible only once the flood is in place (`prlimit` lifts
/// the limit of the running process), so the segments are copied while the idle connections
/// are open: a descriptor short, the copy would fail and the round with it. Connections over
/// the cap are closed at once; the idle ones are closed after the request timeout, and the
/// metrics are served again. No round ever fails for descriptors, and SIGTERM ends the watch
/// with 0.
fn idle_flood_during_copies(fd_limit: usize, flood_size: usize) {
    let cap = connection_cap(fd_limit);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let out = krabka()
        .args(["produce", log.to_str().unwrap(), "--generate", "900"])
        .args(["--segment-bytes", "128KiB"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The soft file size limit only, so that `prlimit` may lift it without privileges;
    // SIGXFSZ ignored, so that a write past it fails (EFBIG) instead of killing the process.
    let script =
        format!("trap '' XFSZ; ulimit -n {fd_limit} && ulimit -S -f 64 && exec \"$0\" \"$@\"");
    let child = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_krabka")])
        .args(["tier", log.to_str().unwrap(), "--remote", &remote])
        .args([
            "--watch",
            "--interval",
            "200ms",
            "--local-retention-bytes",
            "0",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    let lines = lines_of(&mut child.0);
    let port = served_port(&lines, "127.0.0.1");

    // Rounds run and every copy fails at the file size limit.
    let (failing, body) = scrape_until(port, Duration::from_secs(20), |b| {
        value(b, "krabka_tiering_rounds_total") >= 2.0
            && value(b, "krabka_remote_copy_errors_total") >= 1.0
    });
    assert!(
        failing,
        "copies did not fail as set up; last scrape:\n{body}"
    );
    assert_eq!(
        value(&body, "krabka_remote_copy_bytes_total"),
        0.0,
        "{body}"
    );

    let start = Instant::now();
    let mut flood = Vec::new();
    for _ in 0..flood_size {
        if start.elapsed() > Duration::from_secs(30) {
            break;
        }
        if let Ok(s) = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(2),
        ) {
            flood.push(s);
        }
    }
    assert!(
        flood.len() > fd_limit,
        "only {} connections made",
        flood.len()
    );
    // Over the cap, connections are closed as soon as they are accepted.
    let start = Instant::now();
    let mut open = still_open(&flood);
    while open > cap && start.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(100));
        open = still_open(&flood);
    }
    assert!(
        open <= cap,
        "{open} of {} idle connections held open",
        flood.len()
    );

    // The copies may succeed from now on, while the idle connections are still open.
    let pid = child.0.id().to_string();
    let lifted = Command::new("prlimit")
        .args(["--pid", &pid, "--fsize=unlimited"])
        .output()
        .unwrap();
    assert!(
        lifted.status.success(),
        "{}",
        String::from_utf8_lossy(&lifted.stderr)
    );
    let remote_dir = dir.path().join("remote");
    let copied = || {
        walk(&remote_dir)
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .count()
    };
    let start = Instant::now();
    while copied() < 4 && start.elapsed() < Duration::from_secs(60) {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "tier exited under the flood"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(copied(), 4, "the closed segments were not all copied");
    assert!(
        still_open(&flood) > 0,
        "the segments were copied only after every idle connection was closed"
    );

    // The idle connections time out (5 s to send a request), and the metrics are served again,
    // counting the copies made under the flood.
    let (served, body) = scrape_until(port, Duration::from_secs(20), |b| {
        value(b, "krabka_remote_copy_bytes_total") > 0.0
    });
    assert!(
        served,
        "metrics not served after the flood; last scrape:\n{body}"
    );
    let start = Instant::now();
    while still_open(&flood) > 0 && start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(still_open(&flood), 0, "idle connections were never closed");
    assert_eq!(status_of(port, "/"), "HTTP/1.1 404 Not Found");
    assert_eq!(status_of(port, "/metrics"), "HTTP/1.1 200 OK");
    assert!(child.0.try_wait().unwrap().is_none(), "tier exited");
    let pid = child.0.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "tier --watch did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let printed: Vec<String> = lines.try_iter().collect();
    assert_eq!(status.code(), Some(0), "{printed:#?}");
    assert!(
        !printed
            .iter()
            .any(|l| l.contains("out of file descriptors")),
        "a round ran out of descriptors: {printed:#?}"
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// `--metrics-addr HOST:0` serves on the port the OS chose and prints it; an address other
/// machines can reach is warned about, a loopback one is not.
#[test]
fn port_0_prints_the_port_it_got_and_a_network_address_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let out = krabka()
        .args(["produce", log.to_str().unwrap(), "--generate", "100"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (addr, host, warned) in [
        ("0.0.0.0:0", "0.0.0.0", true),
        ("127.0.0.1:0", "127.0.0.1", false),
    ] {
        let out = krabka()
            .args(["tier", log.to_str().unwrap(), "--remote", &remote])
            .args(["--metrics-addr", addr])
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{addr}: {stderr}");
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("serving metrics at http://{host}:")))
            .unwrap_or_else(|| panic!("{addr}: no serving line in\n{stdout}"));
        let port: u16 = line.trim_end_matches("/metrics").parse().unwrap();
        assert_ne!(port, 0, "{addr}: {stdout}");
        let warning = format!("warning: metrics are served to the network on {host}:{port}");
        assert_eq!(stderr.contains(&warning), warned, "{addr}: {stderr}");
        assert_eq!(stderr.contains("warning:"), warned, "{addr}: {stderr}");
    }
}
