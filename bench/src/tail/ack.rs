//! The ack rows: how long a bucket-durable append waits, from one appender and from 8, against
//! a bare PutObject of the same 1 KiB; and what 8 appenders get through against 8 bare PUTs in
//! flight.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_tiering::{Durability, RemoteOwnership, TailConfig, TailWriter, TieredLog};

use super::bare::Bare;
use super::{Plan, TailMode, VALUE, ms, open_log, tail_config};
use crate::Result;
use crate::replica::transport::Transport;
use crate::report::Histogram;
use crate::tiering::{Line, Target, mbps, rate};

/// Appenders (and bare PUTs in flight) of the concurrent rows.
const APPENDERS: usize = 8;

/// The ack and throughput rows.
pub fn rows(
    p: &Plan,
    root: &Path,
    t: &Transport<'_>,
    bare: &Bare,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let ownership = RemoteOwnership::new(t.store(), t.location.clone());
    let config = tail_config(p.window, TailConfig::default().grace);
    let mode = |writer: &TailWriter| TailMode {
        config: config.clone(),
        durability: Durability::Bucket,
        writer: Some(writer.clone()),
    };
    let body = crate::storage::value(VALUE);
    // One appender, each append followed by one bare PUT of the same bytes.
    let writer = TailWriter::start(t.store(), config.clone())?;
    let log = open_log(
        &root.join("ack-1"),
        t,
        &ownership,
        p.segment,
        Some(mode(&writer)),
    )?;
    log.append(&Message::new(body.clone()))?;
    bare.put("warm", body.clone())?;
    let (mut one, mut put) = (Histogram::default(), Histogram::default());
    for i in 0..p.single_appends {
        let t0 = Instant::now();
        let seq = log.append(&Message::new(body.clone()))?;
        one.record(t0.elapsed());
        check_acked(&log, seq)?;
        put.record(bare.put(&format!("one-{i}"), body.clone())?);
    }
    log.close()?;
    lines.push(bound_line(
        format!(
            "bucket-durable append on {name} (Durability::Bucket, window {} ms), 1 appender, p50 / p99 over {}; baseline: one bare PutObject of the same 1 KiB after each, p50 / p99; bound: window + 1.5 × its p99",
            p.window.as_millis(),
            p.single_appends
        ),
        &one,
        &put,
        p.window,
    ));

    // Eight appenders, then eight bare PUTs in flight, for the same time.
    let writer = TailWriter::start(t.store(), config.clone())?;
    let log = open_log(
        &root.join("ack-8"),
        t,
        &ownership,
        p.segment,
        Some(mode(&writer)),
    )?;
    log.append(&Message::new(body.clone()))?;
    let before = writer.stats().objects_written;
    let run = concurrent(&log, p.concurrent)?;
    let objects = writer.stats().objects_written - before;
    log.close()?;
    let base = bare.put_for("many", &body, APPENDERS, p.concurrent)?;
    lines.push(bound_line(
        format!(
            "bucket-durable append on {name}, {APPENDERS} appenders, p50 / p99 over {:.0} s; baseline: bare PutObjects of 1 KiB, {APPENDERS} in flight, p50 / p99; bound: window + 1.5 × its p99",
            p.concurrent.as_secs_f64()
        ),
        &run.latency,
        &base.latency,
        p.window,
    ));
    let records = run.latency.count();
    lines.push(Line::cmp(
        format!(
            "bucket-durable append throughput on {name}, {APPENDERS} appenders of one 1 KiB record each, MB/s of payload; baseline: bare PutObjects of 1 KiB, {APPENDERS} in flight"
        ),
        (
            format!(
                "{:.3} ({records} records in {objects} tail objects, {:.1} per object)",
                run.mbps,
                records as f64 / objects.max(1) as f64
            ),
            run.mbps,
        ),
        rate_3(mbps(base.bytes, base.secs)),
        Target::AtLeast(0.8),
    ));
    let per_window = 1.0 / p.window.as_secs_f64();
    lines.push(Line::cmp(
        format!(
            "diagnostic: tail objects written per second on {name} while the {APPENDERS} appenders ran (each a create-only PUT, written one after another); baseline: one per window (1 / {} ms)",
            p.window.as_millis()
        ),
        (
            format!("{:.1}", objects as f64 / run.secs),
            objects as f64 / run.secs,
        ),
        (format!("{per_window:.1}"), per_window),
        Target::None,
    ));
    Ok(())
}

/// A row of p99 against `window + 1.5 × base p99` (target: at most 1×).
fn bound_line(measure: String, k: &Histogram, base: &Histogram, window: Duration) -> Line {
    let base_p99 = Duration::from_nanos(base.quantile_ns(0.99));
    let bound = window + base_p99.mul_f64(1.5);
    let k99 = k.quantile_ns(0.99) as f64 / 1e9;
    Line::cmp(
        measure,
        (k.fmt_p50_p99(), k99),
        (
            format!("{} (bound {})", base.fmt_p50_p99(), ms(bound)),
            bound.as_secs_f64(),
        ),
        Target::AtMost(1.0),
    )
}

fn rate_3(v: f64) -> (String, f64) {
    let (_, v) = rate(v);
    (format!("{v:.3}"), v)
}

/// An appended seq must be in the bucket when the append returns.
fn check_acked(log: &TieredLog, seq: u64) -> Result<()> {
    match log.tail_acked_seq() {
        Some(acked) if acked >= seq => Ok(()),
        other => Err(format!(
            "append of seq {seq} returned with the tail acknowledged to {other:?}"
        )
        .into()),
    }
}

/// What the concurrent appenders did.
struct Concurrent {
    latency: Histogram,
    mbps: f64,
    secs: f64,
}

/// [`APPENDERS`] threads appending one record at a time to `log` for `secs`.
fn concurrent(log: &TieredLog, secs: Duration) -> Result<Concurrent> {
    let merged = Mutex::new(Histogram::default());
    let start = Instant::now();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..APPENDERS)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    let body = crate::storage::value(VALUE);
                    let mut h = Histogram::default();
                    while start.elapsed() < secs {
                        let t0 = Instant::now();
                        let seq = log.append(&Message::new(body.clone()))?;
                        h.record(t0.elapsed());
                        check_acked(log, seq)?;
                    }
                    merged.lock().map_err(|_| "poisoned")?.merge(&h);
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| "an appender panicked")?)
    })?;
    let secs = start.elapsed().as_secs_f64();
    let latency = merged.into_inner().map_err(|_| "poisoned")?;
    let bytes = latency.count() * VALUE as u64;
    Ok(Concurrent {
        latency,
        mbps: mbps(bytes, secs),
        secs,
    })
}
