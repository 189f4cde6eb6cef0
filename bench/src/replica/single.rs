//! The rows of one partition: the replica's scan against the writer's, the time from a copy to
//! its visibility on a replica, and what an idle refresh sends.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_storage::head::{ConditionalRead, MAX_HEAD_LEN};
use krabka_remote_storage::layout;
use krabka_tiering::replica::{ReadReplica, RefreshOutcome, ReplicaConfig};
use krabka_tiering::{DEFAULT_CACHE_BYTES, RemoteOwnership, TieredLog};

use super::Plan;
use super::transport::Transport;
use crate::Result;
use crate::report::{Histogram, fmt_ns};
use crate::storage::{BATCH, Rng, value};
use crate::tiering::measure::{self, Prepared, Uploaded, config};
use crate::tiering::{Line, Target, mbps};

/// Records a sequential scan asks for per call (as the tiering bench's scans).
const SCAN_BATCH: usize = 1000;

/// The scan, visibility and idle refresh rows, over one partition on `t`'s server (`name`).
pub fn rows(
    p: &Plan,
    root: &Path,
    t: &Transport<'_>,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let ownership = RemoteOwnership::new(t.store(), t.location.clone());
    let prepared = Prepared::with_owner(root.join("writer"), t.rsm(), &p.sizes, Some(&ownership))?;
    let log_bytes = prepared.log_bytes();
    let (up, _) = prepared.upload_run()?;
    scan(p, t, &up, &ownership, log_bytes, name, lines)?;
    let writer = up.open_owned(&p.sizes, DEFAULT_CACHE_BYTES, &ownership)?;
    let mut c = ReplicaConfig::default();
    c.refresh_interval = p.refresh;
    let replica = ReadReplica::open(
        t.rsm(),
        t.store(),
        up.topic_id_partition().clone(),
        config(DEFAULT_CACHE_BYTES),
        c,
    )?;
    visibility(p, &writer, &replica, name, lines)?;
    idle(p, t, &replica, name, lines)?;
    writer.close()?;
    Ok(())
}

/// The writer (reopened owned: a fresh object, cold cache) and a fresh replica each scan the
/// remote range, `p.scan_pairs` times, alternating which goes first.
fn scan(
    p: &Plan,
    t: &Transport<'_>,
    up: &Uploaded,
    ownership: &RemoteOwnership,
    log_bytes: u64,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    // Seconds of each side, summed; and each pair's ratio.
    let (mut writer_secs, mut replica_secs) = (0.0, 0.0);
    let mut pair_ratios = Vec::new();
    let mut fetches = (0, 0);
    for pair in 0..p.scan_pairs {
        let mut secs = [0.0; 2];
        for replica_side in [pair % 2 == 1, pair % 2 == 0] {
            if replica_side {
                let replica = ReadReplica::open(
                    t.rsm(),
                    t.store(),
                    up.topic_id_partition().clone(),
                    config(DEFAULT_CACHE_BYTES),
                    ReplicaConfig::default(),
                )?;
                let range = (replica.first_seq()?, replica.last_seq()? + 1);
                let before = t.sent();
                secs[1] = measure::scan(|q| Ok(replica.read(q, SCAN_BATCH)?), range.0, range.1)?;
                fetches.1 += t.sent().since(&before).rsm.fetch_log;
                check_range("replica", range, up, p)?;
            } else {
                let writer = up.open_owned(&p.sizes, DEFAULT_CACHE_BYTES, ownership)?;
                let range = (writer.first_seq()?, writer.local_first_seq());
                let before = t.sent();
                secs[0] = measure::scan(|q| Ok(writer.read(q, SCAN_BATCH)?), range.0, range.1)?;
                fetches.0 += t.sent().since(&before).rsm.fetch_log;
                writer.close()?;
                check_range("writer", range, up, p)?;
            }
        }
        writer_secs += secs[0];
        replica_secs += secs[1];
        if secs[1] > 0.0 {
            pair_ratios.push(secs[0] / secs[1]);
        }
    }
    let pairs = p.scan_pairs.max(1) as u64;
    let (w, r) = (
        mbps(log_bytes * pairs, writer_secs),
        mbps(log_bytes * pairs, replica_secs),
    );
    let (lo, hi) = pair_ratios
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    lines.push(Line::cmp(
        format!(
            "scan of the remote range by a ReadReplica ({name}, cold: a fresh replica), MB/s of .log bytes over {} scan(s) of {:.1} MB; baseline: the writer's own scan of the same range (owned TieredLog reopened, cold), alternating which goes first",
            p.scan_pairs,
            log_bytes as f64 / 1e6
        ),
        (
            format!(
                "{r:.1} (per pair {lo:.2}x to {hi:.2}x; {:.1} ranged fetches per scan)",
                fetches.1 as f64 / pairs as f64
            ),
            r,
        ),
        (
            format!(
                "{w:.1} ({:.1} ranged fetches per scan)",
                fetches.0 as f64 / pairs as f64
            ),
            w,
        ),
        Target::AtLeast(0.9),
    ));
    Ok(())
}

/// Both sides must scan one range: the partition's remote range.
fn check_range(side: &str, (from, to): (u64, u64), up: &Uploaded, p: &Plan) -> Result<()> {
    if to <= from {
        return Err(format!(
            "the {side}'s remote range of {} is empty ({from}..{to}; workload {} bytes)",
            up.topic_id_partition(),
            p.sizes.total
        )
        .into());
    }
    Ok(())
}

/// `p.copies` times: the writer appends a batch, rolls and copies it (`run_once`); the time
/// from the copy's return to the replica's `last_seq()` covering it. A reader thread calls
/// `last_seq()` every millisecond the whole time (as a consumer tailing the replica would), so
/// the replica refreshes every interval whatever the writer does, and notes when each new last
/// seq first shows. Before each copy, a random wait below one refresh interval, so copies land
/// at every phase of the replica's refreshes.
fn visibility(
    p: &Plan,
    writer: &TieredLog,
    replica: &ReadReplica,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let seen = Mutex::new((replica.last_seq()?, Instant::now()));
    let stop = AtomicBool::new(false);
    let (h, worst) = std::thread::scope(|scope| {
        let poller = scope.spawn(|| -> Result<()> {
            while !stop.load(Ordering::Acquire) {
                let last = replica.last_seq()?;
                let mut s = seen.lock().map_err(|_| "poisoned")?;
                if last != s.0 {
                    *s = (last, Instant::now());
                }
                drop(s);
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        });
        let timed = copies(p, writer, &seen);
        stop.store(true, Ordering::Release);
        poller.join().map_err(|_| "the reader thread panicked")??;
        timed
    })?;
    let r = p.refresh.as_secs_f64();
    let r_ms = r * 1e3;
    let p50 = h.quantile_ns(0.5) as f64 / 1e9;
    let max = worst.as_secs_f64();
    lines.push(Line::cmp(
        format!(
            "visibility on {name}: time from a segment's copy (run_once returned) to a replica's last_seq() covering it (a reader calling last_seq() every ms), max of {} copies; baseline: the replica's refresh interval",
            p.copies
        ),
        (format!("{:.1} ms", max * 1e3), max),
        (format!("{r_ms:.0} ms"), r),
        Target::AtMost(2.0),
    ));
    lines.push(Line::cmp(
        format!("visibility on {name}: the same, p50; baseline: the refresh interval"),
        (fmt_ns(h.quantile_ns(0.5)), p50),
        (format!("{r_ms:.0} ms"), r),
        Target::None,
    ));
    Ok(())
}

/// The copies of [`visibility`]: their latencies, and the longest.
fn copies(
    p: &Plan,
    writer: &TieredLog,
    seen: &Mutex<(u64, Instant)>,
) -> Result<(Histogram, Duration)> {
    let v = value(1024);
    let mut rng = Rng::new();
    let mut h = Histogram::default();
    let mut worst = Duration::ZERO;
    let give_up = p.refresh * 20 + Duration::from_secs(5);
    let interval_ms = u64::try_from(p.refresh.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    for i in 0..p.copies {
        std::thread::sleep(Duration::from_millis(rng.below(interval_ms)));
        let msgs: Vec<Message> = (0..BATCH as u64)
            .map(|j| {
                Message::new(v.clone()).with_timestamp((1_000_000 + i as u64 * 1000 + j) as i64)
            })
            .collect();
        let seqs = writer.append_batch(&msgs)?;
        writer.roll()?;
        let report = writer.run_once()?;
        let t0 = Instant::now();
        if let Some(e) = report.failures.first() {
            return Err(format!("tiering round failed: {e}").into());
        }
        if report.segments_copied == 0 {
            return Err("the round copied nothing".into());
        }
        let end = *seqs.end();
        let took = loop {
            let (last, at) = *seen.lock().map_err(|_| "poisoned")?;
            if last >= end {
                // Seen while run_once was returning counts as at once.
                break at.saturating_duration_since(t0);
            }
            if t0.elapsed() > give_up {
                return Err(format!(
                    "the replica did not show seq {end} within {give_up:?} of its copy (last seq {last})"
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        h.record(took);
        worst = worst.max(took);
    }
    Ok((h, worst))
}

/// `p.idle_refreshes` refreshes of the unchanged partition, counted at the transport and
/// timed, each followed by one bare conditional read of the head through the uncounted store
/// (the baseline of its time).
fn idle(
    p: &Plan,
    t: &Transport<'_>,
    replica: &ReadReplica,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let dir = layout::partition_dir(replica.topic_id_partition())?;
    let key = layout::head_key(&dir);
    let version = match t.bare_store.read_if_changed(&key, None, MAX_HEAD_LEN)? {
        ConditionalRead::Changed { version, .. } => version,
        other => return Err(format!("reading the head {key}: {other:?}").into()),
    };
    let stats_before = replica.stats();
    let before = t.sent();
    let (mut refresh, mut bare) = (Histogram::default(), Histogram::default());
    let mut bare_sent = 0;
    for _ in 0..p.idle_refreshes {
        let start = Instant::now();
        let outcome = replica.refresh()?;
        refresh.record(start.elapsed());
        if !matches!(outcome, RefreshOutcome::Unchanged) {
            return Err(format!("an idle refresh found a change: {outcome:?}").into());
        }
        let server_before = t.sent().server;
        let start = Instant::now();
        let read = t
            .bare_store
            .read_if_changed(&key, Some(&version), MAX_HEAD_LEN)?;
        bare.record(start.elapsed());
        bare_sent += t.sent().server - server_before;
        if read != ConditionalRead::Unchanged {
            return Err(format!("the head changed under the idle refreshes: {read:?}").into());
        }
    }
    let sent = t.sent().since(&before);
    let n = p.idle_refreshes.max(1) as f64;
    // The bare reads' server requests are in `sent.server` too: the replica's alone.
    let server = sent.server.saturating_sub(bare_sent);
    let per = sent.total() as f64 / n;
    let stats = replica.stats();
    let counted = stats.refresh_requests - stats_before.refresh_requests;
    let server_note = if t.server.is_some() {
        format!(
            "; the S3 server received {:.2} per refresh",
            server as f64 / n
        )
    } else {
        String::new()
    };
    lines.push(Line::cmp(
        format!(
            "idle refresh on {name}: requests per refresh() of an unchanged partition, counted at the transport over {} refreshes; baseline: one conditional GET of the head",
            p.idle_refreshes
        ),
        (
            format!(
                "{per:.2} ({}; ReplicaStats::refresh_requests {:.2}{server_note})",
                sent.describe(),
                counted as f64 / n
            ),
            per,
        ),
        ("1".into(), 1.0),
        Target::AtMost(1.0),
    ));
    lines.push(Line::cmp(
        format!(
            "idle refresh on {name}: time of one refresh(), p50 / p99; baseline: one bare read_if_changed of the head (a 304), right after each"
        ),
        (refresh.fmt_p50_p99(), refresh.quantile_ns(0.5) as f64),
        (bare.fmt_p50_p99(), bare.quantile_ns(0.5) as f64),
        Target::None,
    ));
    Ok(())
}
