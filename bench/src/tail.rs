//! `tail`: the tail in the bucket (`krabka_tiering::tail`) against baselines measured in the same
//! run, on one S3 server (the in-process s3s-fs server, or with `--server env` the one the
//! `KRABKA_TEST_CEPH_*` variables name, e.g. Ceph RGW from `scripts/ceph-rgw start`):
//!
//! - **ack** ([`ack`]): bucket-durable appends (`Durability::Bucket`, a window of `--window`
//!   ms, default 50) of 1 KiB records from 1 and from 8 appenders, p50/p99, against a bare SDK
//!   PutObject of 1 KiB (target: p99 ≤ window + 1.5 × the bare PUT's p99); throughput at 8
//!   in flight against the bare PUTs' at 8 in flight (target ≥ 0.8×);
//! - **many partitions** ([`many`]): 1,000 partitions (`--quick`: 100) sharing one `TailWriter`
//!   at a 250 ms window, each appending a few records per window: tail PUTs per second
//!   against one object per partition per window (target ≤ 5/s);
//! - **replica visibility** ([`visible`]): the time from an append's acknowledgement to its
//!   record being readable by a `ReadReplica` refreshing in a loop, against one GET's p99
//!   (target ≤ window + 2 × GET p99), or "not available" while the replica serves no tail;
//! - **request cost** ([`cost`]): requests per MiB written with segments only, with a tail and
//!   `Durability::Local`, with a tail and `Durability::Bucket`.

mod ack;
mod bare;
mod cost;
mod many;
mod visible;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::{TopicIdPartition, Uuid};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::s3::S3RemoteStorage;
use krabka_tiering::{Durability, RemoteOwnership, TailConfig, TailWriter, TieredLog};

use crate::Result;
use crate::replica::transport::{CountingRsm, Transport};
use crate::tiering::owned::Counting;
use crate::tiering::{Line, print_lines, s3_target, sdk};

/// Record payload of every row.
const VALUE: usize = 1024;

/// What one run measures, and how much of it.
pub struct Plan {
    /// The tail window of the ack, visibility and cost rows.
    window: Duration,
    /// Bucket-durable appends timed with one appender (each paired with a bare PUT).
    single_appends: usize,
    /// How long the 8 appenders (and the 8 bare PUTs in flight) run.
    concurrent: Duration,
    /// Partitions sharing one writer in the many-partitions rows.
    partitions: usize,
    /// Their window.
    many_window: Duration,
    /// How long their PUTs are counted (after one warm-up window).
    many_secs: Duration,
    /// Appends timed until a replica reads them.
    visible: usize,
    /// Bytes written per mode of the cost rows.
    cost_bytes: u64,
    /// Their segment size (the tiering bench's: 16 MiB in a full run, a quarter of
    /// `cost_bytes` in a quick one).
    segment: u64,
}

fn plan(quick: bool, bytes: Option<u64>, window: Option<u64>, partitions: Option<usize>) -> Plan {
    // The tiering bench's segments for this many bytes: a quarter of them in a quick run.
    let cost_bytes = bytes.unwrap_or(if quick { 8 << 20 } else { 64 << 20 });
    Plan {
        window: Duration::from_millis(window.unwrap_or(50)),
        single_appends: if quick { 30 } else { 200 },
        concurrent: Duration::from_secs(if quick { 2 } else { 10 }),
        partitions: partitions.unwrap_or(if quick { 100 } else { 1000 }).max(1),
        many_window: Duration::from_millis(250),
        many_secs: Duration::from_secs(if quick { 2 } else { 10 }),
        visible: if quick { 20 } else { 100 },
        cost_bytes,
        segment: crate::tiering::sizes(quick, Some(cost_bytes)).segment,
    }
}

/// Splits `rest` into `--window MS`, `--partitions N` and the server arguments.
fn parse(rest: &[String]) -> Result<(Option<u64>, Option<usize>, Vec<String>)> {
    let (mut window, mut partitions, mut server) = (None, None, Vec::new());
    let mut args = rest.iter();
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--window" => {
                let v = value()?;
                window = Some(v.parse().map_err(|e| format!("--window {v}: {e}"))?);
            }
            "--partitions" => {
                let v = value()?;
                partitions = Some(v.parse().map_err(|e| format!("--partitions {v}: {e}"))?);
            }
            "--server" => {
                let v = value()?.clone();
                server.push(a.clone());
                server.push(v);
            }
            other => return Err(format!("tail: unexpected argument {other}").into()),
        }
    }
    Ok((window, partitions, server))
}

/// Runs the tail measurements and prints their table. `rest`:
/// `[--server env|in-process] [--window MS] [--partitions N]`.
pub fn run(quick: bool, bytes: Option<u64>, rest: &[String]) -> Result<()> {
    let (window, partitions, server) = parse(rest)?;
    let p = plan(quick, bytes, window, partitions);
    let dir = crate::scratch_dir()?;
    let root = dir.path();
    let target = s3_target(&server, root)?;
    println!(
        "# krabka-bench tail{}\n\nS3 server: {} at {}; {VALUE} B records; ack rows: window {} ms, {} single appends, \
         8 appenders for {:.0} s; many partitions: {} partitions{}, window {} ms, counted over {:.0} s; \
         visibility: {} appends; cost: {:.1} MB per mode in segments of {:.1} MB\n",
        if quick { " --quick" } else { "" },
        target.label,
        target.config.endpoint_url.as_deref().unwrap_or("AWS"),
        p.window.as_millis(),
        p.single_appends,
        p.concurrent.as_secs_f64(),
        p.partitions,
        if quick && partitions.is_none() {
            " (--quick; 1,000 in a full run)"
        } else {
            ""
        },
        p.many_window.as_millis(),
        p.many_secs.as_secs_f64(),
        p.visible,
        p.cost_bytes as f64 / 1e6,
        p.segment as f64 / 1e6,
    );
    let started = Instant::now();
    let storage = Arc::new(S3RemoteStorage::new(target.config.clone())?);
    let t = Transport {
        store: Arc::new(Counting::new(storage.clone())),
        rsm: Arc::new(CountingRsm::new(
            storage.clone() as Arc<dyn krabka_remote_storage::RemoteStorageManager>
        )),
        bare_store: storage.clone(),
        server: target.server.as_ref(),
        location: format!("s3://{}/{}", target.config.bucket, target.config.prefix),
    };
    let bare = bare::Bare::new(storage.client().clone(), &target.config)?;
    let mut lines: Vec<Line> = Vec::new();
    let result = ack::rows(&p, root, &t, &bare, &target.label, &mut lines)
        .and_then(|()| many::rows(&p, root, &t, &target.label, &mut lines))
        .and_then(|()| visible::rows(&p, root, &t, &bare, &target.label, &mut lines))
        .and_then(|()| cost::rows(&p, root, &t, &target.label, &mut lines));
    print_lines(&lines);
    println!("\n(total {:.1} s)", started.elapsed().as_secs_f64());
    if target.cleanup {
        let deleted = sdk::Bare::new(storage.client().clone(), &target.config)
            .and_then(|bare| bare.delete_all());
        if let Err(e) = &deleted {
            eprintln!("cleanup of the benchmark's objects failed: {e}");
        }
    }
    result
}

/// The tail of one log: its window, its durability, and the writer it shares (a new one
/// when `None`).
pub(crate) struct TailMode {
    pub(crate) config: TailConfig,
    pub(crate) durability: Durability,
    pub(crate) writer: Option<TailWriter>,
}

/// The tail config of the rows: `window`, everything else at its default but the grace.
pub(crate) fn tail_config(window: Duration, grace: Duration) -> TailConfig {
    TailConfig {
        interval: window,
        grace,
        ..TailConfig::default()
    }
}

/// A fresh partition's owned `TieredLog` in `dir` on `t`'s store, segments of `segment`
/// bytes, no local copy kept once copied, no cache; attached to a tail writer with `tail`.
pub(crate) fn open_log(
    dir: &Path,
    t: &Transport<'_>,
    ownership: &RemoteOwnership,
    segment: u64,
    tail: Option<TailMode>,
) -> Result<TieredLog> {
    let tp = TopicIdPartition::new(Uuid::new_v4(), "tail-bench", 0);
    let mut config = crate::tiering::measure::config(0);
    if let Some(m) = &tail {
        config.tail = Some(m.config.clone());
        config.durability = m.durability;
    }
    let log = TieredLog::open_owned(
        dir,
        Options {
            max_bytes: segment,
            sync: SyncPolicy::Never,
            ..Options::default()
        },
        t.rsm(),
        Arc::new(InMemoryRemoteLogMetadataManager::new()),
        tp,
        config,
        ownership,
    )?;
    if let Some(m) = tail {
        let writer = match m.writer {
            Some(w) => w,
            None => TailWriter::start(t.store(), m.config)?,
        };
        log.attach_tail(writer)?;
    }
    Ok(log)
}

/// `n` messages of [`VALUE`] bytes with timestamps from `ts`.
pub(crate) fn messages(n: usize, ts: i64) -> Vec<krabka_protocol::Message> {
    let v = crate::storage::value(VALUE);
    (0..n)
        .map(|j| krabka_protocol::Message::new(v.clone()).with_timestamp(ts + j as i64))
        .collect()
}

/// `"<x> ms"` of a duration.
pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}
