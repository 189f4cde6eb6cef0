//! The request cost rows: requests per MiB written, with segments only (classic), with a tail
//! and `Durability::Local`, with a tail and `Durability::Bucket`, on one workload: 8 appenders
//! writing batches of 1 KiB records, then a roll and one `run_once` copying every segment, then
//! (with a tail) the deletion of the tail objects once the grace passed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_tiering::tail::config::MIN_TAIL_GRACE;
use krabka_tiering::{Durability, RemoteOwnership, TailWriter, TieredLog};

use super::{Plan, TailMode, VALUE, open_log, tail_config};
use crate::Result;
use crate::replica::transport::{Sent, Transport};
use crate::tiering::{Line, Target};

/// Appenders of every mode.
const APPENDERS: usize = 8;
/// Records per appended batch.
const BATCH: usize = 64;
/// S3 operations that write.
const WRITES: [&str; 4] = [
    "PutObject",
    "UploadPart",
    "CreateMultipartUpload",
    "CompleteMultipartUpload",
];

/// What one mode sent.
struct Cost {
    mib: f64,
    sent: Sent,
    /// Requests the in-process server received, by operation.
    server: Option<BTreeMap<String, usize>>,
    /// Tail objects written and deleted.
    tail: Option<(u64, u64)>,
    secs: f64,
}

impl Cost {
    /// Write requests per MiB, counted at the server; without one, write calls counted at
    /// the client: the store's writes and the segment copies, each copy one call (at the
    /// server it is a PUT per file, a multipart upload for a `.log` above the threshold).
    fn writes_per_mib(&self) -> f64 {
        let n = match &self.server {
            Some(ops) => WRITES.iter().filter_map(|w| ops.get(*w)).sum::<usize>() as u64,
            None => self.sent.store.create + self.sent.store.put + self.sent.rsm.copy,
        };
        n as f64 / self.mib
    }

    /// Requests per MiB (calls, counted as [`writes_per_mib`](Self::writes_per_mib) counts).
    fn requests_per_mib(&self) -> f64 {
        let n = match &self.server {
            Some(ops) => ops.values().sum::<usize>() as u64,
            None => self.sent.total(),
        };
        n as f64 / self.mib
    }

    fn cell(&self) -> String {
        let per = |n: usize| n as f64 / self.mib;
        let detail = match &self.server {
            Some(ops) => ops
                .iter()
                .map(|(op, n)| format!("{op} {:.2}", per(*n)))
                .collect::<Vec<_>>()
                .join(", "),
            None => format!(
                "counted at the client: {}; a segment copy counted as one call, several requests at the server",
                self.sent.describe()
            ),
        };
        let tail = self.tail.map_or(String::new(), |(w, d)| {
            format!("; {w} tail objects written, {d} deleted")
        });
        let (w, all) = if self.server.is_some() {
            ("write requests", "requests")
        } else {
            ("write calls", "calls")
        };
        format!(
            "{:.2} {w}/MiB, {:.2} {all}/MiB in all ({detail}{tail}; {:.1} s)",
            self.writes_per_mib(),
            self.requests_per_mib(),
            self.secs
        )
    }
}

/// The three cost rows.
pub fn rows(
    p: &Plan,
    root: &Path,
    t: &Transport<'_>,
    name: &str,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let ownership = RemoteOwnership::new(t.store(), t.location.clone());
    let classic = one(p, root, t, &ownership, None)?;
    let what = |mode: &str| {
        format!(
            "request cost on {name}, {mode}: requests per MiB written ({:.1} MB of 1 KiB records, {APPENDERS} appenders in batches of {BATCH}, segments of {:.1} MB; then a roll and one run_once copying every segment{})",
            p.cost_bytes as f64 / 1e6,
            p.segment as f64 / 1e6,
            if mode.starts_with("classic") {
                ""
            } else {
                ", then the tail objects' deletion once the grace (1 s) passed"
            }
        )
    };
    lines.push(Line::info(
        what("classic (segments only)"),
        classic.cell(),
        String::new(),
    ));
    for (mode, durability) in [
        ("tail, Durability::Local", Durability::Local),
        ("tail, Durability::Bucket", Durability::Bucket),
    ] {
        let c = one(p, root, t, &ownership, Some(durability))?;
        lines.push(Line::cmp(
            format!(
                "{}, window {} ms; baseline: classic, write requests (or calls) per MiB",
                what(mode),
                p.window.as_millis()
            ),
            (c.cell(), c.writes_per_mib()),
            (
                format!("{:.2}", classic.writes_per_mib()),
                classic.writes_per_mib(),
            ),
            Target::None,
        ));
    }
    Ok(())
}

/// Requests the in-process server received so far, by operation.
fn server_ops(t: &Transport<'_>) -> Option<BTreeMap<String, usize>> {
    t.server.map(|s| s.requests_received())
}

/// One mode: a fresh log (with a tail of its own writer when `durability` is given) written,
/// rolled and copied, its requests counted from before its open to the end.
fn one(
    p: &Plan,
    root: &Path,
    t: &Transport<'_>,
    ownership: &RemoteOwnership,
    durability: Option<Durability>,
) -> Result<Cost> {
    let config = tail_config(p.window, MIN_TAIL_GRACE);
    let writer = match durability {
        Some(_) => Some(TailWriter::start(t.store(), config.clone())?),
        None => None,
    };
    let tag = match durability {
        None => "classic",
        Some(Durability::Bucket) => "bucket",
        Some(_) => "local",
    };
    let (before, server_before) = (t.sent(), server_ops(t));
    let start = Instant::now();
    let log = open_log(
        &root.join(format!("cost-{tag}")),
        t,
        ownership,
        p.segment,
        durability.map(|d| TailMode {
            config: config.clone(),
            durability: d,
            writer: writer.clone(),
        }),
    )?;
    let records = write(&log, p.cost_bytes)?;
    if writer.is_some() {
        wait(
            "every record in the bucket",
            Duration::from_secs(30),
            || log.tail_acked_seq() >= Some(log.last_seq()),
        )?;
    }
    log.roll()?;
    let report = log.run_once()?;
    if let Some(e) = report.failures.first() {
        return Err(format!("tiering round failed: {e}").into());
    }
    if report.segments_copied == 0 {
        return Err("the round copied no segment".into());
    }
    let tail = match &writer {
        Some(w) => {
            // Every object but the chain's newest goes once the grace passed; a slow one is
            // reported as still held, not waited for.
            let written = w.stats().objects_written;
            let _ = wait(
                "the tail objects deleted",
                MIN_TAIL_GRACE * 3 + p.window * 20,
                || w.stats().objects_deleted + 1 >= written,
            );
            let s = w.stats();
            Some((s.objects_written, s.objects_deleted))
        }
        None => None,
    };
    let secs = start.elapsed().as_secs_f64();
    let sent = t.sent().since(&before);
    let server = match (server_ops(t), server_before) {
        (Some(after), Some(before)) => Some(
            after
                .into_iter()
                .map(|(op, n)| {
                    let b = before.get(&op).copied().unwrap_or(0);
                    (op, n - b)
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
        ),
        _ => None,
    };
    log.close()?;
    drop(writer);
    Ok(Cost {
        mib: (records * VALUE as u64) as f64 / f64::from(1u32 << 20),
        sent,
        server,
        tail,
        secs,
    })
}

/// Waits (bounded) until `done`; fails naming `what` after `give_up`.
fn wait(what: &str, give_up: Duration, done: impl Fn() -> bool) -> Result<()> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > give_up {
            return Err(format!("{what}: not within {give_up:?}").into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// [`APPENDERS`] threads appending batches of [`BATCH`] records to `log` until `bytes` of
/// payload are written; returns the records written.
fn write(log: &TieredLog, bytes: u64) -> Result<u64> {
    let total = (bytes / VALUE as u64).max(BATCH as u64);
    let next = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..APPENDERS)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let at = next.fetch_add(BATCH as u64, Ordering::Relaxed);
                        if at >= total {
                            return Ok(());
                        }
                        let n = (total - at).min(BATCH as u64) as usize;
                        log.append_batch(&super::messages(n, at as i64))?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| "an appender panicked")?)
    })?;
    Ok(total)
}
