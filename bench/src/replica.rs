//! `replica`: read replicas (`krabka_tiering::replica`) against baselines measured in the same
//! run, on one S3 server (the in-process s3s-fs server, or with `--server env` the one the
//! `KRABKA_TEST_CEPH_*` variables name, e.g. Ceph RGW from `scripts/ceph-rgw start`):
//!
//! - **scan**: a `ReadReplica` reading a partition's remote range start to end against the
//!   partition's own writer (an owned `TieredLog`, every closed segment copied and its local
//!   copy deleted) reading the same range, both cold (fresh objects), alternating which goes
//!   first;
//! - **visibility**: the time from the end of the writer's `run_once` that copied a segment to
//!   the replica's `last_seq()` covering it, in refresh intervals;
//! - **idle refresh**: the requests one `refresh()` of an unchanged partition sends, counted at
//!   the transport, and its time against one bare conditional read of the head;
//! - **many partitions**: the requests per second one `ReplicaGroup` of many partitions
//!   (1,000; `--quick`: 100) sends when nothing changes, without and with a request budget.

mod group;
mod single;
pub(crate) mod transport;

use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_tiering::s3::S3RemoteStorage;

use crate::Result;
use crate::tiering::owned::Counting;
use crate::tiering::{Line, Sizes, print_lines, s3_target, sdk};
use transport::{CountingRsm, Transport};

/// What one run measures, and how much of it.
pub struct Plan {
    /// The scanned partition's workload (as `tiering`'s: 1 KiB records).
    pub sizes: Sizes,
    /// Writer/replica scan pairs.
    pub scan_pairs: usize,
    /// The refresh interval of the visibility and idle refresh rows.
    pub refresh: Duration,
    /// Segments copied, each timed until a replica sees it.
    pub copies: usize,
    /// Idle refreshes timed (each paired with a bare conditional read).
    pub idle_refreshes: usize,
    /// Partitions of the group rows.
    pub partitions: usize,
    /// The group's refresh interval.
    pub group_interval: Duration,
    /// How long the group refreshes before its requests are counted.
    pub warmup: Duration,
    /// How long its requests are counted.
    pub window: Duration,
    /// `requests_per_second` of the budgeted group.
    pub budget: u64,
}

fn plan(quick: bool, bytes: Option<u64>, partitions: Option<usize>) -> Plan {
    let mut sizes = crate::tiering::sizes(quick, bytes);
    // Only the scan rows' partition is large; no ownership pairs here.
    sizes.ownership_pairs = 0;
    let partitions = partitions.unwrap_or(if quick { 100 } else { 1000 }).max(1);
    Plan {
        sizes,
        scan_pairs: if quick { 1 } else { 3 },
        refresh: Duration::from_millis(if quick { 100 } else { 200 }),
        copies: if quick { 5 } else { 20 },
        idle_refreshes: if quick { 20 } else { 200 },
        partitions,
        group_interval: Duration::from_secs(1),
        warmup: Duration::from_millis(if quick { 1500 } else { 2500 }),
        window: Duration::from_secs(if quick { 2 } else { 5 }),
        // Below what the group asks for (one request per partition and interval), so that it
        // binds: 200 for 1,000 partitions, half the partitions for fewer.
        budget: (partitions as u64 / 2).clamp(1, 200),
    }
}

/// Splits `rest` into `--partitions N` and the server arguments.
fn parse(rest: &[String]) -> Result<(Option<usize>, Vec<String>)> {
    let mut partitions = None;
    let mut server = Vec::new();
    let mut args = rest.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--partitions" => {
                let v = args.next().ok_or("--partitions needs a value")?;
                partitions = Some(v.parse().map_err(|e| format!("--partitions {v}: {e}"))?);
            }
            "--server" => {
                server.push(a.clone());
                server.push(args.next().ok_or("--server needs a value")?.clone());
            }
            other => return Err(format!("replica: unexpected argument {other}").into()),
        }
    }
    Ok((partitions, server))
}

/// Runs the read replica measurements and prints their table. `rest`:
/// `[--server env|in-process] [--partitions N]`.
pub fn run(quick: bool, bytes: Option<u64>, rest: &[String]) -> Result<()> {
    let (partitions, server) = parse(rest)?;
    let p = plan(quick, bytes, partitions);
    let dir = crate::scratch_dir()?;
    let root = dir.path();
    let target = s3_target(&server, root)?;
    println!(
        "# krabka-bench replica{}\n\nS3 server: {} at {}; scan: {:.1} MB of 1024 B records in segments of {:.1} MB, \
         {} pair(s); visibility: {} copies, refresh interval {} ms; {} idle refreshes; group: {} partitions, \
         refresh interval {} s, counted over {:.1} s after {:.1} s, budget {} requests/s\n",
        if quick { " --quick" } else { "" },
        target.label,
        target.config.endpoint_url.as_deref().unwrap_or("AWS"),
        p.sizes.total as f64 / 1e6,
        p.sizes.segment as f64 / 1e6,
        p.scan_pairs,
        p.copies,
        p.refresh.as_millis(),
        p.idle_refreshes,
        p.partitions,
        p.group_interval.as_secs_f64(),
        p.window.as_secs_f64(),
        p.warmup.as_secs_f64(),
        p.budget,
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
    let mut lines: Vec<Line> = Vec::new();
    let result = single::rows(&p, root, &t, &target.label, &mut lines)
        .and_then(|()| group::rows(&p, root, &t, &mut lines));
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
