//! `transform`: the compressed and encrypted remote tier (`krabka-remote-transform`) against the
//! untransformed backend in the same run, on text-like (compressible) and random
//! (incompressible) records, on remote-fs and S3 (s3s-fs): stored bytes, upload MB/s, remote
//! scan MB/s, and what a 1-record cold read fetches.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use krabka_protocol::Message;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::{
    CustomMetadata, IndexSource, IndexType, LogSegmentData, RemoteLogSegmentMetadata,
    RemoteStorageError, RemoteStorageManager, TopicIdPartition, Uuid,
};
use krabka_remote_transform::{
    ChunkCompression, KeyRing, MasterKey, TransformConfig, Transforming,
};
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::fs::FsRemoteStorage;
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::s3::S3RemoteStorage;
use krabka_tiering::{TieredLog, TieringConfig};

use crate::Result;
use crate::report::ratio;
use crate::storage::Rng;

/// Records appended per call.
const BATCH: usize = 100;
/// Records a sequential scan asks for per call.
const SCAN_BATCH: usize = 1000;
/// Size of an incompressible record's value.
const RANDOM_VALUE: usize = 1024;

/// The record payloads measured.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Data {
    /// JSON log lines (~300 B): repeated keys and vocabularies, random ids and numbers.
    Text,
    /// 1 KiB of pseudo-random bytes per record, different for every record.
    Random,
}

impl Data {
    fn name(self) -> &'static str {
        match self {
            Data::Text => "text-like JSON lines (~300 B)",
            Data::Random => "random 1 KiB values",
        }
    }

    /// The value of the record after `rng`'s current state.
    fn value(self, rng: &mut Rng, n: u64) -> Vec<u8> {
        match self {
            Data::Random => {
                let mut v = Vec::with_capacity(RANDOM_VALUE);
                while v.len() < RANDOM_VALUE {
                    v.extend_from_slice(&rng.next_u64().to_le_bytes());
                }
                v
            }
            Data::Text => {
                const SERVICES: [&str; 6] = [
                    "checkout",
                    "search",
                    "auth",
                    "inventory",
                    "payments",
                    "gateway",
                ];
                const PATHS: [&str; 8] = [
                    "/api/v1/orders",
                    "/api/v1/cart/items",
                    "/api/v2/search",
                    "/login",
                    "/api/v1/stock",
                    "/api/v1/payments/authorize",
                    "/healthz",
                    "/api/v1/users/profile",
                ];
                const LEVELS: [&str; 8] = [
                    "INFO", "INFO", "INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR",
                ];
                const MESSAGES: [&str; 6] = [
                    "request served",
                    "cache miss, loaded from the database",
                    "order item added",
                    "slow upstream response",
                    "token refreshed",
                    "payment authorized",
                ];
                const STATUS: [u16; 8] = [200, 200, 200, 200, 201, 204, 404, 500];
                let r = rng.next_u64();
                let trace = rng.next_u64();
                let ms = n * 7;
                let pick = |shift: u32, len: usize| ((r >> shift) as usize) % len;
                format!(
                    "{{\"ts\":\"2026-11-29T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{}\",\
                     \"service\":\"{}\",\"host\":\"ip-10-0-{}-{}\",\"trace_id\":\"{trace:016x}\",\
                     \"user\":\"user-{}\",\"method\":\"GET\",\"path\":\"{}/{}\",\"status\":{},\
                     \"latency_ms\":{},\"bytes\":{},\"msg\":\"{}\"}}",
                    (ms / 3_600_000) % 24,
                    (ms / 60_000) % 60,
                    (ms / 1000) % 60,
                    ms % 1000,
                    LEVELS[pick(0, LEVELS.len())],
                    SERVICES[pick(3, SERVICES.len())],
                    (r >> 6) % 4,
                    (r >> 8) % 256,
                    (r >> 16) % 50_000,
                    PATHS[pick(32, PATHS.len())],
                    (r >> 35) % 100_000,
                    STATUS[pick(52, STATUS.len())],
                    (r >> 55) % 300,
                    (r >> 20) % 20_000,
                    MESSAGES[pick(58, MESSAGES.len())],
                )
                .into_bytes()
            }
        }
    }
}

/// One transform measured.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    zstd: bool,
    encrypt: bool,
}

const VARIANTS: [Variant; 4] = [
    Variant {
        name: "untransformed",
        zstd: false,
        encrypt: false,
    },
    Variant {
        name: "zstd:3",
        zstd: true,
        encrypt: false,
    },
    Variant {
        name: "AES-256-GCM",
        zstd: false,
        encrypt: true,
    },
    Variant {
        name: "zstd:3 + AES-256-GCM",
        zstd: true,
        encrypt: true,
    },
];

impl Variant {
    fn raw(self) -> bool {
        !self.zstd && !self.encrypt
    }

    /// The store tiering writes through: the backend itself, or the decorator over it (a
    /// fresh one each call, so its manifest cache starts empty).
    fn store(self, backend: &Arc<Metered>) -> Result<Arc<dyn RemoteStorageManager>> {
        if self.raw() {
            return Ok(backend.clone());
        }
        let mut config = TransformConfig::new();
        if self.zstd {
            config = config.with_compression(ChunkCompression::zstd(3)?);
        }
        if self.encrypt {
            config = config.with_encryption(Arc::new(KeyRing::new(MasterKey::new([0x42; 32]))));
        }
        Ok(Arc::new(Transforming::new(backend.clone(), config)))
    }
}

/// The backend, metered: bytes stored, requests and bytes fetched.
struct Metered {
    inner: Arc<dyn RemoteStorageManager>,
    stored: AtomicU64,
    fetches: AtomicU64,
    fetched: AtomicU64,
}

impl Metered {
    fn new(inner: Arc<dyn RemoteStorageManager>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            stored: AtomicU64::new(0),
            fetches: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
        })
    }

    fn fetch_counts(&self) -> (u64, u64) {
        (
            self.fetches.load(Ordering::Relaxed),
            self.fetched.load(Ordering::Relaxed),
        )
    }

    fn count(&self, bytes: usize) {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.fetched.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

impl RemoteStorageManager for Metered {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> std::result::Result<Option<CustomMetadata>, RemoteStorageError> {
        let mut bytes = file_len(&data.log_segment);
        for t in IndexType::ALL {
            bytes += match data.index_source(t) {
                Some(IndexSource::File(p)) => file_len(p),
                Some(IndexSource::Bytes(b)) => b.len() as u64,
                None => 0,
            };
        }
        let cm = self.inner.copy_log_segment_data(metadata, data)?;
        self.stored.fetch_add(bytes, Ordering::Relaxed);
        Ok(cm)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> std::result::Result<Vec<u8>, RemoteStorageError> {
        let r = self
            .inner
            .fetch_log_segment(metadata, start_position, end_position)?;
        self.count(r.len());
        Ok(r)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> std::result::Result<Vec<u8>, RemoteStorageError> {
        let r = self.inner.fetch_index(metadata, index_type)?;
        self.count(r.len());
        Ok(r)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> std::result::Result<(), RemoteStorageError> {
        self.inner.delete_log_segment_data(metadata)
    }
}

struct Sizes {
    total: u64,
    segment: u64,
    cold_reads: u64,
}

fn sizes(quick: bool, bytes: Option<u64>) -> Sizes {
    let total = bytes.unwrap_or(if quick { 16 << 20 } else { 256 << 20 });
    Sizes {
        total,
        segment: if quick || bytes.is_some() {
            (total / 4).max(1 << 20)
        } else {
            64 << 20
        },
        cold_reads: if quick { 10 } else { 50 },
    }
}

fn options(s: &Sizes) -> Options {
    Options {
        max_bytes: s.segment,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

fn tiering_config(cache_bytes: u64) -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        cache_bytes,
        ..TieringConfig::default()
    }
}

/// What one variant measured.
struct Measured {
    plaintext: u64,
    stored: u64,
    upload: f64,
    scan: f64,
    requests_per_read: f64,
    bytes_per_read: f64,
    max_bytes_per_read: u64,
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

/// Fills a tiered log over `variant`'s store, uploads it, scans the remote range and does the
/// cold reads.
fn measure(
    data: Data,
    variant: Variant,
    backend: Arc<dyn RemoteStorageManager>,
    dir: &Path,
    s: &Sizes,
) -> Result<Measured> {
    let metered = Metered::new(backend);
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let tp = TopicIdPartition::new(Uuid::new_v4(), "bench", 0);
    let open = |cache: u64| -> Result<TieredLog> {
        Ok(TieredLog::open(
            dir,
            options(s),
            variant.store(&metered)?,
            rlmm.clone(),
            tp.clone(),
            tiering_config(cache),
        )?)
    };
    let log = open(krabka_tiering::DEFAULT_CACHE_BYTES)?;
    let mut rng = Rng::new();
    let mut written = 0u64;
    let mut n = 0u64;
    while written < s.total {
        let batch: Vec<Message> = (0..BATCH)
            .map(|_| {
                n += 1;
                let v = data.value(&mut rng, n);
                written += v.len() as u64;
                Message::new(v).with_timestamp(n as i64)
            })
            .collect();
        log.append_batch(&batch)?;
    }
    log.roll()?;
    let start = Instant::now();
    let report = log.run_once()?;
    let upload_secs = start.elapsed().as_secs_f64();
    if let Some(e) = report.failures.first() {
        return Err(format!("tiering round failed: {e}").into());
    }
    log.close()?;

    let scanner = open(krabka_tiering::DEFAULT_CACHE_BYTES)?;
    let (from, to) = (scanner.first_seq()?, scanner.local_first_seq());
    let scan = scan_mbps(&scanner, from, to)?;
    scanner.close()?;

    let (requests, bytes, max) = cold_reads(&open, &metered, from, to, s.cold_reads)?;
    let reads = s.cold_reads.max(1) as f64;
    Ok(Measured {
        plaintext: report.bytes_copied,
        stored: metered.stored.load(Ordering::Relaxed),
        upload: mbps(report.bytes_copied, upload_secs),
        scan,
        requests_per_read: requests as f64 / reads,
        bytes_per_read: bytes as f64 / reads,
        max_bytes_per_read: max,
    })
}

/// Reads the remote range `from..to` in batches; returns the payload MB/s.
fn scan_mbps(scanner: &TieredLog, from: u64, to: u64) -> Result<f64> {
    let start = Instant::now();
    let mut next = from;
    let mut payload = 0u64;
    while next < to {
        let got = scanner.read(next, SCAN_BATCH)?;
        let Some(last) = got.last() else { break };
        next = last.seq + 1;
        payload += got
            .iter()
            .filter(|r| r.seq < to)
            .map(|r| r.message.value.len() as u64)
            .sum::<u64>();
    }
    Ok(mbps(payload, start.elapsed().as_secs_f64()))
}

/// `n` cold reads of one random record of `from..to`: a fresh tiered log without a cache
/// (`open(0)`) over a fresh decorator for every read. Returns the fetch requests and bytes of
/// all of them, and the most bytes one of them fetched.
fn cold_reads(
    open: &dyn Fn(u64) -> Result<TieredLog>,
    metered: &Metered,
    from: u64,
    to: u64,
    n: u64,
) -> Result<(u64, u64, u64)> {
    let span = to.saturating_sub(from).max(1);
    let mut rng = Rng::new();
    let (mut requests, mut bytes, mut max) = (0, 0, 0);
    for _ in 0..n {
        let cold = open(0)?;
        let seq = from + rng.below(span);
        let before = metered.fetch_counts();
        let got = cold.read(seq, 1)?;
        let after = metered.fetch_counts();
        if got.len() != 1 {
            return Err(format!("cold read of {seq} returned {} records", got.len()).into());
        }
        requests += after.0 - before.0;
        bytes += after.1 - before.1;
        max = max.max(after.1 - before.1);
        cold.close()?;
    }
    Ok((requests, bytes, max))
}

/// Runs the transform measurements and prints their table.
pub fn run(quick: bool, bytes: Option<u64>) -> Result<()> {
    let s = sizes(quick, bytes);
    let dir = crate::scratch_dir()?;
    let root = dir.path();
    println!(
        "# krabka-bench transform{}\n\n{:.1} MB of record values per case, segments of {:.1} MB, \
         1 MiB chunks; {} cold 1-record reads per case\n",
        if quick { " --quick" } else { "" },
        s.total as f64 / 1e6,
        s.segment as f64 / 1e6,
        s.cold_reads
    );
    let started = Instant::now();
    let server = TestServer::start_in(root.join("s3"))?;
    println!(
        "| data | backend | transform | stored / size | upload MB/s | vs untransformed | \
         scan MB/s | vs untransformed | cold 1-record read: requests | KiB fetched (max) | \
         vs untransformed |"
    );
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut case = 0;
    for data in [Data::Text, Data::Random] {
        for backend_name in ["remote-fs", "S3 (s3s-fs)"] {
            let mut raw: Option<Measured> = None;
            for variant in VARIANTS {
                case += 1;
                let case_dir = root.join(format!("case-{case}"));
                let backend: Arc<dyn RemoteStorageManager> = if backend_name == "remote-fs" {
                    Arc::new(FsRemoteStorage::new(case_dir.join("remote"))?)
                } else {
                    Arc::new(S3RemoteStorage::new(
                        server.config().with_prefix(format!("case-{case}")),
                    )?)
                };
                let m = measure(data, variant, backend, &case_dir.join("local"), &s)?;
                let base = raw.as_ref();
                println!(
                    "| {} | {backend_name} | {} | {:.3} | {:.1} | {} | {:.1} | {} | {:.1} | {:.0} \
                     ({:.0}) | {} |",
                    data.name(),
                    variant.name,
                    m.stored as f64 / base.map_or(m.stored, |b| b.stored).max(1) as f64,
                    m.upload,
                    ratio(m.upload, base.map(|b| b.upload)),
                    m.scan,
                    ratio(m.scan, base.map(|b| b.scan)),
                    m.requests_per_read,
                    m.bytes_per_read / 1024.0,
                    m.max_bytes_per_read as f64 / 1024.0,
                    ratio(m.bytes_per_read, base.map(|b| b.bytes_per_read)),
                );
                if variant.raw() {
                    if m.stored < m.plaintext {
                        return Err("the untransformed store holds fewer bytes than it got".into());
                    }
                    raw = Some(m);
                }
                // Each case's scratch space goes as soon as it is measured.
                let _ = std::fs::remove_dir_all(&case_dir);
            }
        }
    }
    println!(
        "\n\"stored / size\": bytes the backend holds (segment data and every index) over those of \
         the untransformed run. Upload MB/s: segment bytes copied per second of the tiering \
         round; scan MB/s: record values per second of reading the remote-only range; ratios \
         are against the untransformed backend in this run."
    );
    println!("\n(total {:.1} s)", started.elapsed().as_secs_f64());
    drop(server);
    Ok(())
}
