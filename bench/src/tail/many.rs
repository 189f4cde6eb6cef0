//! The many-partitions rows: `p.partitions` owned logs attached to one `TailWriter` at a
//! 250 ms window, each appending a few records per window: the tail PUTs per second against
//! one object per partition per window.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use krabka_tiering::{Durability, RemoteOwnership, TailWriter, TieredLog};

use super::{Plan, TailMode, open_log, tail_config};
use crate::Result;
use crate::replica::transport::Transport;
use crate::tiering::{Line, Target, met};

/// Threads opening the partitions, and threads appending to them.
const THREADS: usize = 8;
/// Records each partition appends per window (one batch).
const RECORDS: usize = 3;
/// The target: tail PUTs per second.
const TARGET_PUTS: f64 = 5.0;

/// PutObjects the in-process server received so far (0 without one).
fn server_puts(t: &Transport<'_>) -> usize {
    t.server.map_or(0, |s| {
        s.requests_received().get("PutObject").copied().unwrap_or(0)
    })
}

/// The many-partitions rows.
pub fn rows(
    p: &Plan,
    root: &Path,
    t: &Transport<'_>,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let ownership = RemoteOwnership::new(t.store(), t.location.clone());
    let config = tail_config(p.many_window, krabka_tiering::TailConfig::default().grace);
    let writer = TailWriter::start(t.store(), config.clone())?;
    let n = p.partitions;
    let started = Instant::now();
    let before = t.sent();
    let logs = open_all(p, root, t, &ownership, &writer, &config)?;
    let opened = t.sent().since(&before);
    lines.push(Line::info(
        format!(
            "many partitions on {name}: {n} owned logs opened and attached to one TailWriter (window {} ms), {THREADS} at a time",
            p.many_window.as_millis()
        ),
        format!(
            "{:.1} s, {:.1} requests per partition ({})",
            started.elapsed().as_secs_f64(),
            opened.total() as f64 / n as f64,
            opened.describe()
        ),
        String::new(),
    ));

    let stop = AtomicBool::new(false);
    let window = p.many_window;
    let counted = std::thread::scope(|scope| {
        let appenders: Vec<_> = (0..THREADS)
            .map(|k| {
                let (logs, stop) = (&logs, &stop);
                scope.spawn(move || append_loop(logs, k, window, stop))
            })
            .collect();
        // One window to warm up (the first objects), then the counted span.
        std::thread::sleep(window);
        let (objects, sent, puts) = (writer.stats(), t.sent(), server_puts(t));
        let t0 = Instant::now();
        std::thread::sleep(p.many_secs);
        let secs = t0.elapsed().as_secs_f64();
        let (objects_after, sent_after, puts_after) = (writer.stats(), t.sent(), server_puts(t));
        stop.store(true, Ordering::Release);
        for a in appenders {
            a.join().map_err(|_| "an appender panicked")??;
        }
        Ok::<_, crate::BoxError>(Counted {
            secs,
            objects: objects_after.objects_written - objects.objects_written,
            bytes: objects_after.bytes_written - objects.bytes_written,
            creates: sent_after.store.create - sent.store.create,
            requests: sent_after.since(&sent),
            server_puts: puts_after - puts,
        })
    })?;
    let caught_up = wait_acked(&logs, window)?;

    let rate = counted.objects as f64 / counted.secs;
    let baseline = n as f64 / window.as_secs_f64();
    let server = if t.server.is_some() {
        format!(
            "; the S3 server received {:.1} PutObject/s",
            counted.server_puts as f64 / counted.secs
        )
    } else {
        String::new()
    };
    lines.push(
        Line::cmp(
            format!(
                "many partitions on {name}: tail PUTs per second (TailWriter::stats().objects_written over {:.1} s), {n} partitions sharing one TailWriter at a {} ms window, each appending {RECORDS} records of 1 KiB per window (Durability::Local); baseline: one object per partition per window ({n} / {:.2} s)",
                counted.secs,
                window.as_millis(),
                window.as_secs_f64()
            ),
            (
                format!(
                    "{rate:.2} ({:.2} create-only writes/s at the store, {:.1} requests/s in all (over the span: {}){server}; {:.2} MB per object)",
                    counted.creates as f64 / counted.secs,
                    counted.requests.total() as f64 / counted.secs,
                    counted.requests.describe(),
                    counted.bytes as f64 / 1e6 / counted.objects.max(1) as f64
                ),
                rate,
            ),
            (format!("{baseline:.0}"), baseline),
            Target::None,
        )
        .with_target(format!("≤ {TARGET_PUTS}/s: {}", met(rate <= TARGET_PUTS))),
    );
    lines.push(Line::info(
        format!(
            "many partitions on {name}: time from the appenders' stop to every partition's records acknowledged in the bucket (tail_acked_seq = last_seq)"
        ),
        super::ms(caught_up),
        String::new(),
    ));
    drop(logs);
    Ok(())
}

struct Counted {
    secs: f64,
    objects: u64,
    bytes: u64,
    creates: u64,
    requests: crate::replica::transport::Sent,
    server_puts: usize,
}

/// Opens `p.partitions` logs attached to `writer`, [`THREADS`] at a time.
fn open_all(
    p: &Plan,
    root: &Path,
    t: &Transport<'_>,
    ownership: &RemoteOwnership,
    writer: &TailWriter,
    config: &krabka_tiering::TailConfig,
) -> Result<Vec<TieredLog>> {
    let next = AtomicUsize::new(0);
    let opened: Vec<Vec<TieredLog>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| -> Result<Vec<TieredLog>> {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= p.partitions {
                            return Ok(mine);
                        }
                        let mode = TailMode {
                            config: config.clone(),
                            durability: Durability::Local,
                            writer: Some(writer.clone()),
                        };
                        let dir = root.join("many").join(format!("p{i}"));
                        mine.push(open_log(&dir, t, ownership, p.segment, Some(mode))?);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "an opener panicked")?)
            .collect::<Result<Vec<_>>>()
    })?;
    let logs: Vec<TieredLog> = opened.into_iter().flatten().collect();
    if writer.partitions() != logs.len() {
        return Err(format!(
            "{} logs opened, {} attached to the writer",
            logs.len(),
            writer.partitions()
        )
        .into());
    }
    Ok(logs)
}

/// Appender `k` of [`THREADS`]: once per window, one batch of [`RECORDS`] to each of its
/// partitions, until `stop`.
fn append_loop(logs: &[TieredLog], k: usize, window: Duration, stop: &AtomicBool) -> Result<()> {
    let mut tick = Instant::now();
    let mut round = 0i64;
    while !stop.load(Ordering::Acquire) {
        for log in logs.iter().skip(k).step_by(THREADS) {
            log.append_batch(&super::messages(RECORDS, round * 10))?;
        }
        round += 1;
        tick += window;
        // Sleep to the next window, in short steps so a stop is seen at once.
        while !stop.load(Ordering::Acquire) && Instant::now() < tick {
            std::thread::sleep(
                Duration::from_millis(5).min(tick.saturating_duration_since(Instant::now())),
            );
        }
    }
    Ok(())
}

/// Waits until every log's records are acknowledged in the bucket (bounded); returns how long.
fn wait_acked(logs: &[TieredLog], window: Duration) -> Result<Duration> {
    let start = Instant::now();
    let give_up = window * 40 + Duration::from_secs(10);
    loop {
        let behind = logs
            .iter()
            .filter(|l| l.tail_acked_seq() < Some(l.last_seq()))
            .count();
        if behind == 0 {
            return Ok(start.elapsed());
        }
        if start.elapsed() > give_up {
            return Err(format!(
                "{behind} of {} partitions' records not in the bucket {give_up:?} after the appends stopped",
                logs.len()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
