//! The rows of many partitions: what one `ReplicaGroup` sends per second when nothing changes,
//! without a request budget and with one below what it would send.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use krabka_protocol::Message;
use krabka_remote_storage::{TopicIdPartition, Uuid};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::replica::{ReplicaConfig, ReplicaGroup, ReplicaGroupConfig};
use krabka_tiering::{RemoteOwnership, TieredLog};

use super::Plan;
use super::transport::{Sent, Transport};
use crate::Result;
use crate::storage::value;
use crate::tiering::measure::config;
use crate::tiering::{Line, Target};

/// Threads preparing and opening the partitions, and the group's `refresh_threads`.
const THREADS: usize = 8;
/// Records of each group partition's one copied segment.
const RECORDS: usize = 10;

/// The group rows: `p.partitions` partitions written by owned logs (one small segment copied
/// each, so each has a head), then a group of replicas of all of them, measured idle without
/// and with a request budget.
pub fn rows(p: &Plan, root: &Path, t: &Transport<'_>, lines: &mut Vec<Line>) -> Result<()> {
    let started = Instant::now();
    let before = t.sent();
    let tps = prepare(p, root, t)?;
    let prepared = t.sent().since(&before);
    lines.push(Line::info(
        format!(
            "group: {} partitions written (each an owned TieredLog: open_owned, one segment of {RECORDS} records copied by run_once, closed), {THREADS} at a time",
            tps.len()
        ),
        format!(
            "{:.1} s, {:.1} calls per partition ({}; a segment copy is a PUT per file)",
            started.elapsed().as_secs_f64(),
            prepared.total() as f64 / tps.len().max(1) as f64,
            per_partition(&prepared, tps.len())
        ),
        String::new(),
    ));
    let free = measure(p, t, &tps, None)?;
    let capped = measure(p, t, &tps, Some(p.budget))?;
    let n = tps.len();
    let interval = p.group_interval.as_secs_f64();
    let expected = n as f64 / interval;
    for (run, budget) in [(&free, None), (&capped, Some(p.budget))] {
        let open_per = run.open.total() as f64 / n.max(1) as f64;
        let what = budget.map_or("no budget".to_owned(), |b| {
            format!("requests_per_second = Some({b})")
        });
        lines.push(Line::info(
            format!("group of {n} partitions, {what}: opening every replica (a full listing each), {THREADS} at a time"),
            format!(
                "{:.1} s, {:.0} requests/s ({open_per:.1} per partition: {}; ReplicaStats::refresh_requests {:.1} per partition)",
                run.open_secs,
                run.open.total() as f64 / run.open_secs.max(1e-9),
                per_partition(&run.open, n),
                run.open_counted as f64 / n.max(1) as f64
            ),
            String::new(),
        ));
    }
    let line = |run: &GroupRun, what: String, base: (String, f64), target| {
        let rate = run.rate();
        let per_refresh = run.window.total() as f64 / run.refreshes.max(1) as f64;
        let server = if t.server.is_some() {
            format!(
                "; the S3 server received {:.0}/s",
                run.window.server as f64 / run.secs.max(1e-9)
            )
        } else {
            String::new()
        };
        Line::cmp(
            what,
            (
                format!(
                    "{rate:.0} ({:.3} per partition per s; {}; {per_refresh:.2} per refresh; ReplicaStats::refresh_requests {:.0}/s; {} refresh failures{server})",
                    rate / n.max(1) as f64,
                    run.window.describe(),
                    run.counted as f64 / run.secs.max(1e-9),
                    run.failures
                ),
                rate,
            ),
            base,
            target,
        )
    };
    lines.push(line(
        &free,
        format!(
            "group of {n} partitions, nothing changing: requests/s one replica process sends (ReplicaGroup::start, refresh_interval {interval:.0} s, refresh_threads {THREADS}, no budget), counted at the transport over {:.1} s; baseline: partitions / refresh interval",
            free.secs
        ),
        (format!("{expected:.0}"), expected),
        Target::AtMost(1.0),
    ));
    let b = p.budget as f64;
    lines.push(line(
        &capped,
        format!(
            "group of {n} partitions, nothing changing, requests_per_second = Some({}): requests/s sent, counted at the transport over {:.1} s; baseline: the budget",
            p.budget, capped.secs
        ),
        (format!("{b:.0}"), b),
        Target::AtMost(1.05),
    ));
    Ok(())
}

/// `"2.0 reads, 1.0 listing"` of `sent`, per partition.
fn per_partition(sent: &Sent, n: usize) -> String {
    let n = n.max(1) as f64;
    let s = &sent.store;
    let parts: Vec<String> = [
        (s.read, "reads"),
        (s.read_if_changed, "conditional reads"),
        (s.list, "listings"),
        (s.list_dirs, "directory listings"),
        (s.create, "create-only writes"),
        (s.put, "overwrites"),
        (s.delete, "deletes"),
        (sent.rsm.copy, "segment copies"),
        (sent.rsm.fetch_log + sent.rsm.fetch_index, "fetches"),
    ]
    .into_iter()
    .filter(|(c, _)| *c > 0)
    .map(|(c, what)| format!("{:.1} {what}", c as f64 / n))
    .collect();
    parts.join(", ")
}

/// Runs `work(i)` for `0..n` on [`THREADS`] threads; the first error, if any.
fn parallel<T: Send>(n: usize, work: impl Fn(usize) -> Result<T> + Sync) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let results = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS.min(n.max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok::<_, crate::BoxError>(done);
                        }
                        done.push((i, work(i)?));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "a worker thread panicked")?)
            .collect::<Result<Vec<_>>>()
    })?;
    let mut all: Vec<(usize, T)> = results.into_iter().flatten().collect();
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, v)| v).collect())
}

/// Writes `p.partitions` partitions of one topic, each by an owned log that copies one
/// small segment (so each has its epoch record, its segment and its head) and closes.
fn prepare(p: &Plan, root: &Path, t: &Transport<'_>) -> Result<Vec<TopicIdPartition>> {
    let topic = Uuid::new_v4();
    let ownership = RemoteOwnership::new(t.store(), t.location.clone());
    let v = value(100);
    let msgs: Vec<Message> = (0..RECORDS as i64)
        .map(|j| Message::new(v.clone()).with_timestamp(j))
        .collect();
    let options = Options {
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    parallel(p.partitions, |i| {
        let tp = TopicIdPartition::new(topic, "bench-group", i32::try_from(i)?);
        let log = TieredLog::open_owned(
            root.join("group").join(i.to_string()),
            options.clone(),
            t.rsm(),
            Arc::new(InMemoryRemoteLogMetadataManager::new()),
            tp.clone(),
            config(0),
            &ownership,
        )?;
        log.append_batch(&msgs)?;
        log.roll()?;
        let report = log.run_once()?;
        if let Some(e) = report.failures.first() {
            return Err(format!("partition {tp}: tiering round failed: {e}").into());
        }
        if report.segments_copied != 1 {
            return Err(
                format!("partition {tp}: copied {} segments", report.segments_copied).into(),
            );
        }
        log.close()?;
        Ok(tp)
    })
}

/// What one group did.
struct GroupRun {
    /// Opening every replica: seconds and requests.
    open_secs: f64,
    open: Sent,
    /// What the replicas counted as sent while opening (`ReplicaStats::refresh_requests`).
    open_counted: u64,
    /// Requests counted over the window, and its seconds.
    window: Sent,
    secs: f64,
    /// Refreshes run in the window, and failures (in the window).
    refreshes: u64,
    failures: u64,
    /// What the replicas counted as sent in the window.
    counted: u64,
}

impl GroupRun {
    fn rate(&self) -> f64 {
        self.window.total() as f64 / self.secs.max(1e-9)
    }
}

/// What the group's replicas report of their refreshes so far, summed.
#[derive(Clone, Copy, Default)]
struct Counts {
    refreshes: u64,
    failures: u64,
    /// `ReplicaStats::refresh_requests`: what the replicas count as sent.
    requests: u64,
}

fn refresh_counts(group: &ReplicaGroup) -> Counts {
    group
        .partitions()
        .iter()
        .filter_map(|tp| group.get(tp))
        .map(|r| r.stats())
        .fold(Counts::default(), |c, s| Counts {
            refreshes: c.refreshes + s.refreshes,
            failures: c.failures + s.refresh_failures,
            requests: c.requests + s.refresh_requests,
        })
}

/// Opens a group of replicas of `tps` (`budget`: its `requests_per_second`), starts its
/// refresher, and counts what is sent over `p.window` after `p.warmup`.
fn measure(
    p: &Plan,
    t: &Transport<'_>,
    tps: &[TopicIdPartition],
    budget: Option<u64>,
) -> Result<GroupRun> {
    let mut c = ReplicaGroupConfig::default();
    c.refresh_threads = THREADS;
    c.requests_per_second = budget;
    let group = ReplicaGroup::new(c)?;
    let mut rc = ReplicaConfig::default();
    rc.refresh_interval = p.group_interval;
    let before = t.sent();
    let start = Instant::now();
    parallel(tps.len(), |i| {
        let tp = tps.get(i).ok_or("no such partition")?;
        group.open(t.rsm(), t.store(), tp.clone(), config(0), rc.clone())?;
        Ok(())
    })?;
    let open_secs = start.elapsed().as_secs_f64();
    let open = t.sent().since(&before);
    let open_counted = refresh_counts(&group).requests;
    group.start();
    std::thread::sleep(p.warmup);
    let (s0, counts0) = (t.sent(), refresh_counts(&group));
    let start = Instant::now();
    std::thread::sleep(p.window);
    let s1 = t.sent();
    let secs = start.elapsed().as_secs_f64();
    let counts1 = refresh_counts(&group);
    // Waits for the refresher (and the pass it is in).
    group.stop();
    Ok(GroupRun {
        open_secs,
        open,
        window: s1.since(&s0),
        secs,
        open_counted,
        refreshes: counts1.refreshes - counts0.refreshes,
        failures: counts1.failures - counts0.failures,
        counted: counts1.requests - counts0.requests,
    })
}
