//! `krabka-bench scale reads [--quick] [--server env] [--partitions N] [--consumers N]`: cold
//! reads at scale. One `TieringService` (the default `ServiceConfig`, but for a reader queue
//! as long as the consumers) holds N partitions (1,000; quick: 100); M of them (100; quick: 20)
//! are filled, uploaded to S3 and dropped locally, and M lagging consumers scan one of them each
//! at once through `TieringService::read_async` (from one thread: the consumers add no thread
//! of their own). Against the bare aws-sdk-s3 client scanning the same objects with the same
//! concurrency (M streams of 1 MiB ranged GETs, one in flight each), measured before and after.
//!
//! Reports the aggregate MB/s against the bare SDK, the floor the read engine's bound sets (the
//! bare SDK with only `read_fetch_threads` GETs in flight), the process's threads at their
//! high-water mark (`/proc/self/task`, sampled every 5 ms) against
//! `ServiceConfig::max_threads`, the slowest consumer's MB/s against the fastest's, and GETs per
//! MiB (a counting wrapper around the backend) with the read engine's and cache's counters,
//! and the process's CPU seconds per GB during krabka's scan and the bare SDK's (a scan the
//! cores bound, not the GETs, spends them near its wall time times the cores). `--cache-mib N`,
//! `--read-threads N` and `--fetch-threads N` set those `ServiceConfig` fields (named in the
//! run's header).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, TopicIdPartition, Uuid,
};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::s3::S3RemoteStorage;
use krabka_tiering::{ServiceConfig, TieredLog, TieringConfig, TieringService};

use super::threads::Sampler;
use crate::Result;
use crate::storage::{BATCH, value};
use crate::tiering::sdk::Bare;
use crate::tiering::{Line, Target, mbps, met, print_lines, rate};

/// Record payload.
const VALUE: usize = 1024;
/// Records a consumer asks for per read.
const SCAN_BATCH: usize = 1000;
/// How long the upload of every scanned partition may take.
const UPLOAD_LIMIT: Duration = Duration::from_secs(1200);

/// The run's size.
struct Shape {
    partitions: usize,
    consumers: usize,
    /// Bytes of records per scanned partition.
    bytes: u64,
    /// Segment size of every partition.
    segment: u64,
    /// `ServiceConfig` fields set by flags (diagnostics; the default config otherwise).
    cache_mib: Option<u64>,
    read_threads: Option<usize>,
    fetch_threads: Option<usize>,
}

impl Shape {
    fn parse(quick: bool, rest: &[String]) -> Result<(Self, Vec<String>)> {
        let mut shape = if quick {
            Shape {
                partitions: 100,
                consumers: 20,
                bytes: 4 << 20,
                segment: 2 << 20,
                cache_mib: None,
                read_threads: None,
                fetch_threads: None,
            }
        } else {
            Shape {
                partitions: 1000,
                consumers: 100,
                bytes: 4 << 20,
                segment: 2 << 20,
                cache_mib: None,
                read_threads: None,
                fetch_threads: None,
            }
        };
        let mut server = Vec::new();
        let mut it = rest.iter();
        while let Some(a) = it.next() {
            let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--partitions" => shape.partitions = val()?.parse()?,
                "--consumers" => shape.consumers = val()?.parse()?,
                "--server" => server = vec![a.clone(), val()?.clone()],
                "--cache-mib" => shape.cache_mib = Some(val()?.parse()?),
                "--read-threads" => shape.read_threads = Some(val()?.parse()?),
                "--fetch-threads" => shape.fetch_threads = Some(val()?.parse()?),
                other => return Err(format!("scale reads: unexpected argument {other}").into()),
            }
        }
        if shape.consumers == 0 || shape.consumers > shape.partitions {
            return Err(format!(
                "scale reads: --consumers {} must be in 1..={} (the partitions)",
                shape.consumers, shape.partitions
            )
            .into());
        }
        Ok((shape, server))
    }
}

/// Runs the measurement and prints its table.
pub fn run(quick: bool, rest: &[String]) -> Result<()> {
    let (shape, server) = Shape::parse(quick, rest)?;
    let dir = crate::scratch_dir()?;
    let target = crate::tiering::s3_target(&server, dir.path())?;
    println!(
        "# krabka-bench scale reads{}\n\n{} partitions in one TieringService, {} lagging consumers \
         each scanning another partition's {:.1} MB of {VALUE} B records (segments of {:.1} MB) \
         from {} ({}); one consumer thread for all of them\n",
        if quick { " --quick" } else { "" },
        shape.partitions,
        shape.consumers,
        shape.bytes as f64 / 1e6,
        shape.segment as f64 / 1e6,
        target.label,
        target.config.endpoint_url.as_deref().unwrap_or("AWS"),
    );
    let started = Instant::now();
    let storage = Arc::new(S3RemoteStorage::new(target.config.clone())?);
    let bare = Bare::new(storage.client().clone(), &target.config)?;
    let result = measure(&shape, dir.path(), &storage, &bare);
    if target.cleanup
        && let Err(e) = bare.delete_all()
    {
        eprintln!("cleanup of the benchmark's objects failed: {e}");
    }
    print_lines(&result?);
    println!("\n(total {:.1} s)", started.elapsed().as_secs_f64());
    Ok(())
}

/// The backend, counting GETs (data and index fetches) and the bytes they returned, and copies.
struct Counted {
    inner: Arc<S3RemoteStorage>,
    gets: AtomicU64,
    index_gets: AtomicU64,
    /// Bytes of data ranges fetched.
    bytes: AtomicU64,
    copies: AtomicU64,
}

impl RemoteStorageManager for Counted {
    fn copy_log_segment_data(
        &self,
        m: &RemoteLogSegmentMetadata,
        d: &LogSegmentData,
    ) -> std::result::Result<Option<CustomMetadata>, RemoteStorageError> {
        let r = self.inner.copy_log_segment_data(m, d)?;
        self.copies.fetch_add(1, Ordering::Relaxed);
        Ok(r)
    }
    fn fetch_log_segment(
        &self,
        m: &RemoteLogSegmentMetadata,
        s: u32,
        e: Option<u32>,
    ) -> std::result::Result<Vec<u8>, RemoteStorageError> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        let got = self.inner.fetch_log_segment(m, s, e)?;
        self.bytes.fetch_add(got.len() as u64, Ordering::Relaxed);
        Ok(got)
    }
    fn fetch_index(
        &self,
        m: &RemoteLogSegmentMetadata,
        t: IndexType,
    ) -> std::result::Result<Vec<u8>, RemoteStorageError> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.index_gets.fetch_add(1, Ordering::Relaxed);
        self.inner.fetch_index(m, t)
    }
    fn delete_log_segment_data(
        &self,
        m: &RemoteLogSegmentMetadata,
    ) -> std::result::Result<(), RemoteStorageError> {
        self.inner.delete_log_segment_data(m)
    }
}

/// One scanned partition: its log, the remote range a consumer reads, and its `.log` objects.
struct Scanned {
    log: Arc<TieredLog>,
    from: u64,
    to: u64,
    objects: Vec<(String, u64)>,
}

impl Scanned {
    fn bytes(&self) -> u64 {
        self.objects.iter().map(|(_, n)| n).sum()
    }
}

fn tiering_config() -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        ..TieringConfig::default()
    }
}

fn fill(log: &TieredLog, bytes: u64) -> Result<()> {
    let v = value(VALUE);
    for b in 0..(bytes / (VALUE * BATCH) as u64).max(1) {
        let msgs: Vec<_> = (0..BATCH as u64)
            .map(|j| Message::new(v.clone()).with_timestamp((b * 100 + j) as i64))
            .collect();
        log.append_batch(&msgs)?;
    }
    log.roll()?;
    Ok(())
}

/// Opens the partitions, fills and uploads the scanned ones, then measures.
fn measure(
    shape: &Shape,
    dir: &Path,
    storage: &Arc<S3RemoteStorage>,
    bare: &Bare,
) -> Result<Vec<Line>> {
    let sampler = Sampler::start()?;
    let d = ServiceConfig::default();
    let config = ServiceConfig {
        // A broker's consumers all read at once: the queue holds one read of each.
        read_queue: shape.consumers.max(krabka_tiering::DEFAULT_READ_QUEUE),
        cache_bytes: shape.cache_mib.map_or(d.cache_bytes, |m| m << 20),
        read_threads: shape.read_threads.unwrap_or(d.read_threads),
        read_fetch_threads: shape.fetch_threads.unwrap_or(d.read_fetch_threads),
        // The S3 backend's own runtime, counted in the service's bound.
        backend_threads: storage.config().max_threads(),
        ..d
    };
    println!(
        "ServiceConfig: the default but read_queue {}{}\n",
        config.read_queue,
        if config.cache_bytes == ServiceConfig::default().cache_bytes
            && config.read_threads == ServiceConfig::default().read_threads
            && config.read_fetch_threads == ServiceConfig::default().read_fetch_threads
        {
            String::new()
        } else {
            format!(
                " (overridden: cache_bytes {} MiB, read_threads {}, read_fetch_threads {})",
                config.cache_bytes >> 20,
                config.read_threads,
                config.read_fetch_threads
            )
        }
    );
    let svc = Arc::new(TieringService::new(config.clone())?);
    let counted = Arc::new(Counted {
        inner: storage.clone(),
        gets: AtomicU64::new(0),
        index_gets: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        copies: AtomicU64::new(0),
    });
    let rsm: Arc<dyn RemoteStorageManager> = counted.clone();
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let topic = Uuid::new_v4();
    let options = Options {
        max_bytes: shape.segment,
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    let opening = Instant::now();
    let mut logs = Vec::new();
    let mut expected = 0u64;
    for i in 0..shape.partitions {
        let tp = TopicIdPartition::new(topic, "cold", i32::try_from(i)?);
        let log = TieredLog::open(
            dir.join(format!("p{i}")),
            options.clone(),
            rsm.clone(),
            rlmm.clone(),
            tp,
            tiering_config(),
        )?
        .with_cache(svc.cache().clone());
        if i < shape.consumers {
            fill(&log, shape.bytes)?;
            expected += log.log().segments().iter().filter(|s| !s.active).count() as u64;
        } else {
            // An idle partition: a few records in its active segment, nothing to copy.
            let msgs: Vec<_> = (0..10)
                .map(|j| Message::new(format!("partition {i} record {j}")))
                .collect();
            log.append_batch(&msgs)?;
        }
        let log = Arc::new(log);
        svc.add(log.clone())?;
        if i < shape.consumers {
            logs.push(log);
        }
    }
    let opened = opening.elapsed();
    // Uploaded and dropped locally: every scanned record is remote only.
    let remote_only = |l: &TieredLog| l.local_first_seq() > l.last_seq();
    while counted.copies.load(Ordering::Relaxed) < expected || !logs.iter().all(|l| remote_only(l))
    {
        if opening.elapsed() > UPLOAD_LIMIT {
            return Err(format!(
                "{} of {expected} segments uploaded after {UPLOAD_LIMIT:?}",
                counted.copies.load(Ordering::Relaxed)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let uploaded = opening.elapsed();
    let mut scanned = Vec::new();
    for log in logs {
        let tp = log.topic_id_partition().clone();
        let mut objects = Vec::new();
        for m in rlmm.list_remote_log_segments(&tp)? {
            objects.push((storage.object_key(&m, None)?, m.segment_size_in_bytes()));
        }
        scanned.push(Scanned {
            from: log.first_seq()?,
            to: log.local_first_seq(),
            log,
            objects,
        });
    }
    let total: u64 = scanned.iter().map(Scanned::bytes).sum();
    let streams: Vec<_> = scanned.iter().map(|s| s.objects.clone()).collect();
    let all: Vec<_> = streams.iter().flatten().cloned().collect();

    let cpu_before = process_cpu_secs();
    let before = bare.scan_streams(&streams)?;
    let cpu_bare_before = process_cpu_secs() - cpu_before;
    let floor = bare.scan(&all, config.read_fetch_threads)?;
    let (engine0, cache0) = (svc.read_engine_stats(), svc.cache().stats());
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let (gets0, index0, bytes0) = (
        load(&counted.gets),
        load(&counted.index_gets),
        load(&counted.bytes),
    );
    let cpu_k0 = process_cpu_secs();
    let k = consume(&svc, &scanned)?;
    let cpu_krabka = process_cpu_secs() - cpu_k0;
    let gets = load(&counted.gets) - gets0;
    let index_gets = load(&counted.index_gets) - index0;
    let fetched = load(&counted.bytes) - bytes0;
    let (engine, cache) = (svc.read_engine_stats(), svc.cache().stats());
    let cpu_after = process_cpu_secs();
    let after = bare.scan_streams(&streams)?;
    let cpu_bare_after = process_cpu_secs() - cpu_after;

    let svc = Arc::try_unwrap(svc).map_err(|_| "the service is still shared")?;
    let _ = svc.shutdown(Duration::from_secs(10));
    let peak = sampler.finish()?;

    let mut lines = Vec::new();
    lines.push(Line::info(
        format!(
            "setup: open + fill {} partitions, upload {expected} segments of the {} scanned ({:.1} MB)",
            shape.partitions,
            shape.consumers,
            total as f64 / 1e6
        ),
        format!(
            "{:.1} s + {:.1} s",
            opened.as_secs_f64(),
            (uploaded - opened).as_secs_f64()
        ),
        String::new(),
    ));
    let (b_before, b_after) = (
        mbps(before.bytes, before.secs),
        mbps(after.bytes, after.secs),
    );
    let (base, base_scan, cpu_base) = if b_after > b_before {
        (b_after, &after, cpu_bare_after)
    } else {
        (b_before, &before, cpu_bare_before)
    };
    let krabka = mbps(total, k.secs);
    lines.push(Line::cmp(
        format!(
            "aggregate scan of {c} lagging consumers through TieringService::read_async ({p} partitions in the service), MB/s of .log bytes; baseline: bare SDK, {c} streams of 1 MiB ranged GETs of the same objects, one in flight each (the better of runs before and after: {b_before:.1}, {b_after:.1})",
            c = shape.consumers,
            p = shape.partitions,
        ),
        rate(krabka),
        rate(base),
        Target::AtLeast(0.8),
    ));
    let floor_line = Line::cmp(
        format!(
            "floor: bare SDK, the same objects with read_fetch_threads = {} 1 MiB GETs in flight (the engine's bound on fetches in flight), MB/s; baseline: as above",
            config.read_fetch_threads
        ),
        rate(floor),
        rate(base),
        Target::None,
    );
    lines.push(floor_line);
    // A scan the cores bound shows as CPU seconds near its wall time times the cores.
    let gb = total as f64 / 1e9;
    lines.push(Line::info(
        format!(
            "CPU seconds of this process (user + system, /proc/self/stat) per GB scanned, over the scan's wall time: krabka {cpu_krabka:.2} s in {:.2} s; baseline: the bare SDK's better scan, {cpu_base:.2} s in {:.2} s ({} cores)",
            k.secs,
            base_scan.secs,
            std::thread::available_parallelism().map_or(1, usize::from),
        ),
        format!("{:.2}", cpu_krabka / gb.max(1e-9)),
        format!("{:.2}", cpu_base / gb.max(1e-9)),
    ));
    let bound = config.max_threads();
    let service_bound = bound - config.backend_threads;
    let names = peak
        .at_total
        .iter()
        .map(|(n, c)| format!("{n} {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    lines.push(
        Line::info(
            format!(
                "process threads but the bench's own (main, sampler, the bare SDK's runtime), high-water (/proc/self/task every 5 ms, {} samples, from before the service started to after its shutdown; an in-process S3 server's not counted; all threads: {}, at that peak: {names}); baseline: ServiceConfig::max_threads() (workers {} + copy {} + read {} + spare {} + read_fetch_threads {} + backend_threads {}: the S3 backend's runtime, S3Config::max_threads())",
                peak.samples,
                peak.total,
                config.worker_threads,
                config.copy_threads,
                config.read_threads,
                krabka_tiering::SPARE_BLOCKING_THREADS,
                config.read_fetch_threads,
                config.backend_threads,
            ),
            format!("{}", peak.counted),
            format!("{bound}"),
        )
        .with_target(format!("≤ {bound}: {}", met(peak.counted <= bound))),
    );
    lines.push(
        Line::info(
            format!(
                "the service's threads (krabka-tiering*, krabka-read-ahead), high-water; read engine's own high-water {}",
                engine.threads_high_water
            ),
            format!("{}", peak.service),
            format!("{service_bound}"),
        )
        .with_target(format!(
            "≤ {service_bound}: {}",
            met(peak.service <= service_bound)
        )),
    );
    let (slow, fast) = spread(&k.each);
    let (bslow, bfast) = spread(&base_scan.each);
    let r = if fast > 0.0 { slow / fast } else { 0.0 };
    lines.push(
        Line::info(
            "slowest / fastest consumer, MB/s; baseline: the bare SDK's slowest / fastest stream",
            format!("{slow:.1} / {fast:.1} ({r:.2}x)"),
            format!(
                "{bslow:.1} / {bfast:.1} ({:.2}x)",
                if bfast > 0.0 { bslow / bfast } else { 0.0 }
            ),
        )
        .with_target(format!("≥ 0.50x: {}", met(r >= 0.5))),
    );
    let mib = total as f64 / f64::from(1 << 20);
    let hits = cache.hits - cache0.hits;
    let misses = cache.misses - cache0.misses;
    lines.push(Line::info(
        format!(
            "GETs per MiB scanned (data and index fetches, counted at the backend: {index_gets} index GETs; data bytes fetched / scanned {:.2}); engine: {} fetches, {} chunks coalesced, in flight ≤ {}, bytes in flight ≤ {:.1} MB, GET budget wait {:.1} s; cache: {hits} hits, {misses} misses, {} evictions; baseline: bare SDK (1 MiB GETs)",
            fetched as f64 / total.max(1) as f64,
            engine.fetches - engine0.fetches,
            engine.chunks_coalesced - engine0.chunks_coalesced,
            engine.in_flight_high_water,
            engine.bytes_in_flight_high_water as f64 / 1e6,
            (engine.get_budget_wait - engine0.get_budget_wait).as_secs_f64(),
            cache.evictions - cache0.evictions,
        ),
        format!("{:.2}", gets as f64 / mib.max(1e-9)),
        format!(
            "{:.2}",
            all.iter()
                .map(|(_, n)| n.div_ceil(crate::tiering::sdk::GET_BYTES))
                .sum::<u64>() as f64
                / mib.max(1e-9)
        ),
    ));
    Ok(lines)
}

/// Slowest and fastest MB/s of `each` (bytes, seconds).
fn spread(each: &[(u64, f64)]) -> (f64, f64) {
    let rates: Vec<f64> = each.iter().map(|&(b, s)| mbps(b, s)).collect();
    let slow = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let fast = rates.iter().copied().fold(0.0, f64::max);
    (if slow.is_finite() { slow } else { 0.0 }, fast)
}

/// What the consumers measured: wall seconds, and each consumer's bytes and seconds.
/// User + system CPU seconds of this process so far (0 when `/proc/self/stat` is unreadable).
fn process_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces), closed by the last ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of proc(5), here 11 and 12 (the state is 0).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Clock ticks are 100 per second on Linux (USER_HZ).
    (ticks(11) + ticks(12)) as f64 / 100.0
}

struct Consumed {
    secs: f64,
    each: Vec<(u64, f64)>,
}

/// Every scanned partition read from its first remote seq to its local start by one consumer
/// task each, all at once, on one thread (a current-thread runtime): each read goes through the
/// service's reader pool. Every batch must start at the seq asked for and run on without a gap.
fn consume(svc: &Arc<TieringService>, scanned: &[Scanned]) -> Result<Consumed> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let start = Instant::now();
    let each = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for (i, s) in scanned.iter().enumerate() {
            let svc = svc.clone();
            let tp = s.log.topic_id_partition().clone();
            let (from, to, bytes) = (s.from, s.to, s.bytes());
            set.spawn(async move {
                let mut next = from;
                while next < to {
                    let got = svc.read_async(&tp, next, SCAN_BATCH).await?;
                    let mut want = next;
                    for r in &got {
                        if r.seq != want {
                            return Err(format!(
                                "partition {}: read from {next} gave seq {} where {want} was due",
                                tp.partition(),
                                r.seq
                            )
                            .into());
                        }
                        want += 1;
                    }
                    if want == next {
                        return Err(format!(
                            "partition {}: the scan stopped at {next} of {from}..{to}",
                            tp.partition()
                        )
                        .into());
                    }
                    next = want;
                }
                Ok::<_, crate::BoxError>((i, bytes, start.elapsed().as_secs_f64()))
            });
        }
        let mut each = vec![(0, 0.0); scanned.len()];
        while let Some(r) = set.join_next().await {
            let (i, bytes, secs) = r??;
            if let Some(slot) = each.get_mut(i) {
                *slot = (bytes, secs);
            }
        }
        Ok::<_, crate::BoxError>(each)
    })?;
    Ok(Consumed {
        secs: start.elapsed().as_secs_f64(),
        each,
    })
}
