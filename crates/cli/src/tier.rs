//! `krabka tier`: copy closed segments to the remote and apply local retention, once or
//! every `--interval` with `--watch`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::RemoteStorageManager;
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::{Instrumented, TieringReport, TieringStats, metrics};

use crate::args::TierArgs;
use crate::error::{CliError, Result};
use crate::output::outln;
use crate::remote;
use crate::tiered::{self, tiering_error};
use crate::{human, interrupt};

/// One line about a round.
pub fn describe_round(r: &TieringReport) -> String {
    let mut line = format!(
        "copied {} segment(s) ({}), deleted {} local segment(s)",
        r.segments_copied,
        human::bytes(r.bytes_copied),
        r.local_segments_deleted
    );
    if r.stale_cleaned > 0 {
        line.push_str(&format!(", cleaned {} stale attempt(s)", r.stale_cleaned));
    }
    if !r.failures.is_empty() {
        line.push_str(&format!(
            ", {} failure(s), first: {}",
            r.failures.len(),
            r.failures
                .first()
                .map(|f| remote::brief(&f.to_string()).to_owned())
                .unwrap_or_default()
        ));
    }
    line
}

/// Serves the metrics facade's values for Prometheus at `http://addr/metrics`.
fn serve_metrics(addr: SocketAddr) -> Result<()> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| {
            CliError::new(format!("cannot serve metrics on {addr}: {e}"))
                .hint("pass a free address, e.g. --metrics-addr 127.0.0.1:9464")
        })?;
    metrics::describe();
    outln!("serving metrics at http://{addr}/metrics")
}

/// What `--watch` printed last: a line is printed when copy lag, remote bytes or errors
/// change.
#[derive(Default)]
struct Watch {
    last: Option<(u64, u64, u64, u64)>,
}

impl Watch {
    fn show(&mut self, s: &TieringStats) -> Result<()> {
        let now = (
            s.copy_lag_segments,
            s.copy_lag_bytes,
            s.remote_bytes,
            s.copy_failures,
        );
        if self.last == Some(now) {
            return Ok(());
        }
        self.last = Some(now);
        outln!(
            "copy lag {} segment(s) ({}), remote {}, copy errors {}",
            s.copy_lag_segments,
            human::bytes(s.copy_lag_bytes),
            human::bytes(s.remote_bytes),
            s.copy_failures
        )
    }
}

/// Runs `krabka tier`.
///
/// # Errors
/// When the log or remote cannot be opened, or a round fails (without `--watch`).
pub fn run(args: &TierArgs) -> Result<()> {
    let spec = remote::spec(&args.remote)?
        .ok_or_else(|| CliError::new("tier needs --remote fs://PATH or s3://BUCKET/PREFIX"))?;
    if !args.dir.is_dir() {
        return Err(
            CliError::new(format!("no log directory at {}", args.dir.display()))
                .hint("pass the directory of a krabka log (see `krabka produce`)"),
        );
    }
    let options = Options {
        sync: SyncPolicy::EveryAppend,
        ..Options::default()
    };
    let config = tiered::config(&args.retention);
    let tiered = match args.metrics_addr {
        None => tiered::open(
            &args.dir,
            spec,
            &args.remote,
            options,
            config,
            tiered::Mode::Write,
        )?,
        Some(addr) => {
            serve_metrics(addr)?;
            // Every remote call measured the same way, whatever the backend.
            let rsm = remote::open(&spec, &args.remote)?;
            let rsm: Arc<dyn RemoteStorageManager> = Arc::new(Instrumented::new(rsm));
            tiered::open_with_remote(
                &args.dir,
                spec,
                rsm,
                args.remote.endpoint.as_deref(),
                options,
                config,
            )?
        }
    };
    if args.watch {
        interrupt::install();
    }
    outln!(
        "tiering {} to {} (topic {})",
        args.dir.display(),
        tiered.remote.describe(),
        tiered.topic.topic()
    )?;
    let mut watch = Watch::default();
    loop {
        let started = Instant::now();
        let report = tiered
            .log
            .run_once()
            .map_err(|e| tiering_error("tiering round failed on", &args.dir, e))?;
        metrics::record_round(&tiered.topic, &report);
        metrics::publish_partition(&tiered.log);
        if args.watch {
            watch.show(&tiered.log.stats())?;
        }
        let busy = report.segments_copied + report.local_segments_deleted > 0;
        if busy || !report.failures.is_empty() || !args.watch {
            outln!(
                "{} in {}",
                describe_round(&report),
                human::duration(started.elapsed())
            )?;
        }
        if !args.watch {
            if let Some(first) = report.failures.first() {
                return Err(CliError::new(format!(
                    "{} failure(s) tiering {}; first: {}",
                    report.failures.len(),
                    args.dir.display(),
                    remote::brief(&first.to_string())
                ))
                .hint("fix the cause and run `krabka tier` again; failed copies are retried"));
            }
            break;
        }
        let until = Instant::now() + args.interval;
        while Instant::now() < until && !interrupt::requested() {
            std::thread::sleep(Duration::from_millis(100).min(args.interval));
        }
        if interrupt::requested() {
            break;
        }
    }
    for line in tiered.placement()?.describe() {
        outln!("  {line}")?;
    }
    let stats = tiered.log.stats();
    outln!(
        "  local {}, remote {}, {} remote request(s)",
        human::bytes(stats.local_bytes),
        human::bytes(stats.remote_bytes),
        stats.requests.total()
    )?;
    tiered
        .log
        .close()
        .map_err(|e| tiering_error("cannot close", &args.dir, e))
}
