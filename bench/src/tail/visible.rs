//! The replica visibility row: the time from a bucket-durable append's acknowledgement to its
//! record being readable by a `ReadReplica` refreshing in a loop, against one bare GET's p99.
//!
//! Whether the replica serves the tail at all is found out, not assumed: one acknowledged
//! record is appended first, and when the replica does not show it within a bound (no segment
//! is copied meanwhile, so only the tail holds it), the row says the measure is not available
//! and gives no number.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_tiering::replica::{ReadReplica, ReplicaConfig};
use krabka_tiering::{Durability, RemoteOwnership, TailConfig, TieredLog};

use super::bare::Bare;
use super::{Plan, TailMode, VALUE, ms, open_log, tail_config};
use crate::Result;
use crate::replica::transport::Transport;
use crate::report::Histogram;
use crate::storage::Rng;
use crate::tiering::measure::config;
use crate::tiering::{Line, Target};

/// When the replica's last seq changed, and to what.
type Seen = Mutex<(u64, Instant)>;

/// The visibility row.
pub fn rows(
    p: &Plan,
    root: &Path,
    t: &Transport<'_>,
    bare: &Bare,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let ownership = RemoteOwnership::new(t.store(), t.location.clone());
    let log = open_log(
        &root.join("visible"),
        t,
        &ownership,
        p.segment,
        Some(TailMode {
            config: tail_config(p.window, TailConfig::default().grace),
            durability: Durability::Bucket,
            writer: None,
        }),
    )?;
    let body = crate::storage::value(VALUE);
    bare.put("get-target", body.clone())?;
    let mut replica_config = ReplicaConfig::default();
    replica_config.refresh_interval = Duration::from_millis(1);
    let replica = ReadReplica::open(
        t.rsm(),
        t.store(),
        log.topic_id_partition().clone(),
        config(0),
        replica_config,
    )?;
    let seen: Seen = Mutex::new((replica.last_seq()?, Instant::now()));
    let stop = AtomicBool::new(false);
    let measured = std::thread::scope(|scope| {
        let poller = scope.spawn(|| poll(&replica, &seen, &stop));
        let measured = measure(p, &log, &replica, &seen, bare);
        stop.store(true, Ordering::Release);
        poller
            .join()
            .map_err(|_| "the replica's thread panicked")??;
        measured
    });
    log.close()?;
    let (outcome, get) = measured?;
    let get_p99 = Duration::from_nanos(get.quantile_ns(0.99));
    let bound = p.window + get_p99 * 2;
    let what = format!(
        "replica visibility on {name}: time from a bucket-durable append's return (window {} ms) to a ReadReplica refreshing in a loop reading its record, p50 / p99; baseline: one bare GetObject of 1 KiB, p50 / p99; bound: window + 2 × its p99",
        p.window.as_millis()
    );
    let base = (
        format!("{} (bound {})", get.fmt_p50_p99(), ms(bound)),
        bound.as_secs_f64(),
    );
    lines.push(match outcome {
        Outcome::Measured(h) => Line::cmp(
            format!("{what}, over {} appends", h.count()),
            (h.fmt_p50_p99(), h.quantile_ns(0.99) as f64 / 1e9),
            base,
            Target::AtMost(1.0),
        ),
        Outcome::NotServed(why) => Line::cmp(
            what,
            (
                format!("not available: the replica does not serve the tail ({why})"),
                0.0,
            ),
            base,
            Target::None,
        ),
    });
    Ok(())
}

enum Outcome {
    Measured(Histogram),
    /// Why the replica was found not to serve the tail.
    NotServed(String),
}

/// Refreshes the replica in a loop (a 1 ms pause between refreshes) and notes when its last
/// seq first shows each new value.
fn poll(replica: &ReadReplica, seen: &Seen, stop: &AtomicBool) -> Result<()> {
    while !stop.load(Ordering::Acquire) {
        replica.refresh()?;
        let last = replica.last_seq()?;
        let mut s = seen.lock().map_err(|_| "poisoned")?;
        if last != s.0 {
            *s = (last, Instant::now());
        }
        drop(s);
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Waits until the replica shows `seq` (or `give_up` passes): when it showed it, after `t0`.
fn wait_seen(seen: &Seen, seq: u64, t0: Instant, give_up: Duration) -> Result<Option<Duration>> {
    loop {
        let (last, at) = *seen.lock().map_err(|_| "poisoned")?;
        if last >= seq {
            // Seen while the append was returning counts as at once.
            return Ok(Some(at.saturating_duration_since(t0)));
        }
        if t0.elapsed() > give_up {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The probe, then `p.visible` timed appends, each followed by one bare GET (the baseline).
fn measure(
    p: &Plan,
    log: &TieredLog,
    replica: &ReadReplica,
    seen: &Seen,
    bare: &Bare,
) -> Result<(Outcome, Histogram)> {
    let body = crate::storage::value(VALUE);
    let mut get = Histogram::default();
    let give_up = (p.window * 20).max(Duration::from_secs(2));
    let probe = log.append(&Message::new(body.clone()))?;
    let t0 = Instant::now();
    if wait_seen(seen, probe, t0, give_up)?.is_none() {
        for _ in 0..p.visible {
            get.record(bare.get("get-target", VALUE)?);
        }
        let last = seen.lock().map_err(|_| "poisoned")?.0;
        return Ok((
            Outcome::NotServed(format!(
                "seq {probe}, acknowledged in a tail object, was not readable after {:.1} s of refreshes; the replica's last seq stayed {last}",
                give_up.as_secs_f64()
            )),
            get,
        ));
    }
    let mut h = Histogram::default();
    let mut rng = Rng::new();
    let window_ms = u64::try_from(p.window.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    for _ in 0..p.visible {
        // Appends land at every phase of the writer's windows.
        std::thread::sleep(Duration::from_millis(rng.below(window_ms)));
        let seq = log.append(&Message::new(body.clone()))?;
        let t0 = Instant::now();
        let Some(took) = wait_seen(seen, seq, t0, give_up)? else {
            return Err(format!(
                "the replica did not show seq {seq} within {give_up:?} of its acknowledgement"
            )
            .into());
        };
        let got = replica.read(seq, 1)?;
        if got.first().map(|r| r.seq) != Some(seq) {
            return Err(format!("the replica showed seq {seq} but did not read it").into());
        }
        h.record(took);
        get.record(bare.get("get-target", VALUE)?);
    }
    Ok((Outcome::Measured(h), get))
}
