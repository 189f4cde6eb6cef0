//! `tiering`: krabka's remote tier against baselines measured in the same run on the same data.
//! Uploads (`run_once`) against `std::fs::copy` + fsync and against the bare aws-sdk-s3 client
//! uploading the same files one at a time and 8 in flight; cold point reads against one bare
//! ranged GET of the same chunk; cached re-reads against a local `Log::read` of the same seq;
//! remote-only scans against bare 1 MiB ranged GETs, one stream and 8 concurrent; what partition
//! ownership costs an upload, owned against unowned (`owned`).
//!
//! The S3 server is the in-process s3s-fs server, or with `--server env` the one named by the
//! `KRABKA_TEST_CEPH_*` variables that `scripts/ceph-rgw start` prints.

pub(crate) mod measure;
pub(crate) mod owned;
pub(crate) mod sdk;
pub(crate) mod upload;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use krabka_remote_s3::test_server::TestServer;
use krabka_remote_s3::{S3Config, S3Credentials};
use krabka_remote_storage::{RemoteStorageManager, Uuid};
use krabka_storage::{Log, Options, SyncPolicy};
use krabka_tiering::fs::FsRemoteStorage;
use krabka_tiering::s3::S3RemoteStorage;

use crate::Result;
use crate::report::{Histogram, ratio};
use crate::storage::{BATCH, value};
use measure::{Paired, Prepared};

/// Record payload of the tiering workload.
const VALUE: usize = 1024;
/// Records a sequential scan asks for per call.
const SCAN_BATCH: usize = 1000;
/// `TieringConfig::copy_concurrency` of the measured upload (the default), and the bare SDK's
/// files in flight.
const COPY_CONCURRENCY: usize = krabka_tiering::DEFAULT_COPY_CONCURRENCY;

pub struct Sizes {
    pub(crate) segment: u64,
    pub(crate) total: u64,
    pub(crate) point_reads: u64,
    /// Owned/unowned upload pairs of the ownership rows (each of at most 4 segments).
    pub(crate) ownership_pairs: usize,
}

pub(crate) fn sizes(quick: bool, bytes: Option<u64>) -> Sizes {
    let total = bytes.unwrap_or(if quick { 16 << 20 } else { 256 << 20 });
    Sizes {
        // 16 segments of 16 MiB in a full run; four or so otherwise.
        segment: if quick || bytes.is_some() {
            (total / 4).max(1 << 20)
        } else {
            16 << 20
        },
        total,
        point_reads: if quick { 30 } else { 200 },
        // Quick uploads take tens of ms: more pairs against the noise. A full run's 4 uploads of
        // 64 MiB add 268 MB to a Ceph run (whose memstore OSDs hold 2 GiB each).
        ownership_pairs: if quick { 4 } else { 2 },
    }
}

pub(crate) fn options(s: &Sizes) -> Options {
    Options {
        max_bytes: s.segment,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

pub(crate) fn fill(
    append: impl Fn(&[krabka_protocol::Message]) -> Result<()>,
    s: &Sizes,
) -> Result<()> {
    let v = value(VALUE);
    let batches = (s.total / (VALUE * BATCH) as u64).max(1);
    for b in 0..batches {
        let msgs: Vec<_> = (0..BATCH as u64)
            .map(|j| krabka_protocol::Message::new(v.clone()).with_timestamp((b * 100 + j) as i64))
            .collect();
        append(&msgs)?;
    }
    Ok(())
}

/// Writes back every dirty page (`sync`) before a timed upload, so no upload pays for the
/// writeback of files an earlier step (the fill, a baseline's copies) left dirty.
pub(crate) fn settle() {
    let _ = std::process::Command::new("sync").status();
}

pub(crate) fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

/// The target for a ratio: at least (throughput) or at most (latency).
#[derive(Clone, Copy)]
pub(crate) enum Target {
    None,
    AtLeast(f64),
    AtMost(f64),
}

pub(crate) struct Line {
    measure: String,
    krabka: String,
    baseline: String,
    ratio: String,
    target: String,
}

impl Line {
    pub(crate) fn info(measure: impl Into<String>, krabka: String, baseline: String) -> Self {
        Self {
            measure: measure.into(),
            krabka,
            baseline,
            ratio: String::new(),
            target: String::new(),
        }
    }

    /// A comparison: `k` and `b` are the figures the ratio is taken of.
    pub(crate) fn cmp(
        measure: String,
        (krabka, k): (String, f64),
        (base, b): (String, f64),
        t: Target,
    ) -> Self {
        let r = if b > 0.0 { k / b } else { 0.0 };
        let target = match t {
            Target::None => String::new(),
            Target::AtLeast(x) => format!("≥ {x:.2}x: {}", met(r >= x && r > 0.0)),
            Target::AtMost(x) => format!("≤ {x:.2}x: {}", met(r <= x && r > 0.0)),
        };
        Self {
            measure,
            krabka,
            baseline: base,
            ratio: ratio(k, Some(b)),
            target,
        }
    }
}

impl Line {
    /// The same row with `target` as its target cell (a target that is not a ratio).
    pub(crate) fn with_target(mut self, target: String) -> Self {
        self.target = target;
        self
    }
}

pub(crate) fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "not met" }
}

pub(crate) fn rate(v: f64) -> (String, f64) {
    (format!("{v:.1}"), v)
}

/// `"p50 / p99"` and the p50 in ns, with a note after it.
fn lat(h: &Histogram, note: &str) -> (String, f64) {
    (
        format!("{}{note}", h.fmt_p50_p99()),
        h.quantile_ns(0.5) as f64,
    )
}

/// Where the S3 rows' server is.
pub(crate) struct S3Target {
    pub(crate) label: String,
    pub(crate) config: S3Config,
    pub(crate) server: Option<TestServer>,
    /// Whether the run deletes what it wrote (a server that outlives it).
    pub(crate) cleanup: bool,
}

pub(crate) fn s3_target(rest: &[String], root: &Path) -> Result<S3Target> {
    let mode = match rest {
        [] => "in-process",
        [flag, v] if flag == "--server" => v.as_str(),
        _ => return Err(format!("unexpected arguments {rest:?}").into()),
    };
    match mode {
        "in-process" => {
            let server = TestServer::start_in(root.join("s3"))?;
            Ok(S3Target {
                label: "S3 (s3s-fs)".into(),
                config: server.config(),
                server: Some(server),
                cleanup: false,
            })
        }
        "env" => Ok(S3Target {
            label: "S3 (Ceph RGW)".into(),
            config: env_config()?,
            server: None,
            cleanup: true,
        }),
        other => Err(format!("--server {other}: expected `env` or `in-process`").into()),
    }
}

/// The server `scripts/ceph-rgw start` describes: `KRABKA_TEST_CEPH_{ENDPOINT,BUCKET,
/// ACCESS_KEY,SECRET_KEY}` and optionally `KRABKA_TEST_CEPH_REGION`; keys under a fresh prefix.
fn env_config() -> Result<S3Config> {
    let var = |n: &str| {
        std::env::var(n)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                format!("--server env: {n} is not set (scripts/ceph-rgw start prints it)")
            })
    };
    let region = var("KRABKA_TEST_CEPH_REGION").unwrap_or_else(|_| "us-east-1".into());
    let endpoint = var("KRABKA_TEST_CEPH_ENDPOINT")?;
    Ok(S3Config::new(var("KRABKA_TEST_CEPH_BUCKET")?)
        .with_endpoint(endpoint)
        .with_region(region)
        .with_credentials(S3Credentials::static_keys(
            var("KRABKA_TEST_CEPH_ACCESS_KEY")?,
            var("KRABKA_TEST_CEPH_SECRET_KEY")?,
        ))
        .with_prefix(format!("krabka-bench-{}", Uuid::new_v4())))
}

/// Runs the tiering measurements and prints their table. `rest`: `[--server env|in-process]`
/// and optionally `--upload-only` (only the S3 upload rows, over several rounds, with their CPU
/// time: [`upload`]).
pub fn run(quick: bool, bytes: Option<u64>, rest: &[String]) -> Result<()> {
    let s = sizes(quick, bytes);
    let dir = crate::scratch_dir()?;
    let root = dir.path();
    let upload_only = rest.iter().any(|a| a == "--upload-only");
    let mut rounds = upload::ROUNDS;
    let mut args = Vec::new();
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--upload-only" => {}
            "--rounds" => rounds = it.next().ok_or("--rounds needs a number")?.parse()?,
            _ => args.push(a.clone()),
        }
    }
    let rest = args;
    let target = s3_target(&rest, root)?;
    println!(
        "# krabka-bench tiering{}{}\n\n{:.1} MB of {VALUE} B records in segments of {:.1} MB; {} point reads per case; \
         S3 server: {} (keys under {}/); upload with copy_concurrency {COPY_CONCURRENCY}\n",
        if quick { " --quick" } else { "" },
        if upload_only { " --upload-only" } else { "" },
        s.total as f64 / 1e6,
        s.segment as f64 / 1e6,
        s.point_reads,
        target.config.endpoint_url.as_deref().unwrap_or("AWS"),
        target.config.prefix,
    );
    let started = Instant::now();
    if upload_only {
        let mut lines = Vec::new();
        let result = upload::rows(&s, root, &target, rounds.max(1), &mut lines);
        print_lines(&lines);
        println!("\n(total {:.1} s)", started.elapsed().as_secs_f64());
        return result;
    }

    // The same records in a plain local log: the reference for re-reads and scans.
    let local_ref = Log::open(root.join("local-ref"), options(&s))?;
    fill(|m| Ok(local_ref.append_batch(m).map(drop)?), &s)?;

    let mut lines = Vec::new();
    remote_fs(&s, root, &local_ref, &mut lines)?;
    let cleanup = s3(&s, root, &local_ref, &target, &mut lines);

    print_lines(&lines);
    println!("\n(total {:.1} s)", started.elapsed().as_secs_f64());
    cleanup
}

/// Prints `lines` as the Markdown table of measures, each against its baseline.
pub(crate) fn print_lines(lines: &[Line]) {
    println!("| measure | krabka | baseline | krabka / baseline | target |");
    println!("| --- | ---: | ---: | ---: | --- |");
    for l in lines {
        println!(
            "| {} | {} | {} | {} | {} |",
            l.measure, l.krabka, l.baseline, l.ratio, l.target
        );
    }
}

fn remote_fs(s: &Sizes, root: &Path, local_ref: &Log, lines: &mut Vec<Line>) -> Result<()> {
    let remote = root.join("remote-fs");
    let fs = Arc::new(FsRemoteStorage::new(remote.clone())?);
    let rsm: Arc<dyn RemoteStorageManager> = fs.clone();
    let p = Prepared::new(root.join("fs-local"), rsm.clone(), s)?;
    // Each krabka row is compared with a baseline measured just before it: consecutive bulk
    // writes leave the disk in different states (writeback, the host's write cache), and the
    // same copy measured first or third differed by up to 5× between runs.
    let (plain, synced) = fs_copy_baseline(&p.files(), &root.join("fs-copy"))?;
    let backend = p.backend_copy(COPY_CONCURRENCY)?;
    let log_bytes = p.log_bytes();
    let (_, synced_before_upload) = fs_copy_baseline(&p.files(), &root.join("fs-copy-2"))?;
    let (up, upload) = p.upload()?;
    lines.push(Line::info(
        "baseline: std::fs::copy of the same files, MB/s",
        String::new(),
        format!("{plain:.1}"),
    ));
    lines.push(Line::cmp(
        format!("upload to remote-fs (run_once, copy_concurrency {COPY_CONCURRENCY}), MB/s; baseline: std::fs::copy + fsync of each file, measured just before"),
        rate(upload),
        rate(synced_before_upload),
        Target::AtLeast(0.9),
    ));
    lines.push(Line::cmp(
        format!("diagnostic: the remote-fs backend alone (copy_log_segment_data of the same segments, {COPY_CONCURRENCY} at once, no tiering layer), MB/s; baseline: std::fs::copy + fsync, measured just before"),
        rate(backend),
        rate(synced),
        Target::None,
    ));
    let cold = up.open(s, 0)?;
    let c = measure::cold_reads(&cold, s.point_reads, |_| Ok(None))?;
    cold.close()?;
    lines.push(Line::info(
        "cold point read from remote-fs (cache off), p50 / p99",
        format!(
            "{} ({:.1} requests per read)",
            c.krabka.fmt_p50_p99(),
            c.requests_per_read
        ),
        String::new(),
    ));
    reread_and_scan("remote-fs", s, &up, local_ref, log_bytes, lines)?;
    let backend = owned::Backend {
        name: "remote-fs",
        tag: "fs",
        rsm,
        store: fs,
        location: format!("fs://{}", std::fs::canonicalize(&remote)?.display()),
        server: None,
    };
    owned::rows(s, root, &backend, lines)
}

/// The cached re-read and the scan rows of one backend, against the local log.
fn reread_and_scan(
    name: &str,
    s: &Sizes,
    up: &measure::Uploaded,
    local_ref: &Log,
    log_bytes: u64,
    lines: &mut Vec<Line>,
) -> Result<f64> {
    let warm = up.open(s, krabka_tiering::DEFAULT_CACHE_BYTES)?;
    let w = measure::warm_reads(&warm, local_ref, s.point_reads)?;
    warm.close()?;
    lines.push(Line::cmp(
        format!("cached re-read from {name}, p50 / p99; baseline: local Log::read of the same seq"),
        lat(
            &w.krabka,
            &format!(" ({:.1} requests)", w.requests_per_read),
        ),
        lat(&w.baseline, ""),
        Target::AtMost(1.5),
    ));
    let scanner = up.open(s, krabka_tiering::DEFAULT_CACHE_BYTES)?;
    let (from, to) = (scanner.first_seq()?, scanner.local_first_seq());
    let remote = mbps(
        log_bytes,
        measure::scan(|q| Ok(scanner.read(q, SCAN_BATCH)?), from, to)?,
    );
    scanner.close()?;
    let local = mbps(
        log_bytes,
        measure::scan(|q| Ok(local_ref.read(q, SCAN_BATCH)?), from, to)?,
    );
    lines.push(Line::cmp(
        format!("scan of the remote-only range ({name}), MB/s of .log bytes; baseline: same range from a local Log"),
        rate(remote),
        rate(local),
        Target::None,
    ));
    Ok(remote)
}

fn fs_copy_baseline(files: &[(std::path::PathBuf, u64)], to: &Path) -> Result<(f64, f64)> {
    std::fs::create_dir_all(to)?;
    let bytes: u64 = files.iter().map(|(_, n)| n).sum();
    settle();
    let start = Instant::now();
    for (p, _) in files {
        std::fs::copy(p, to.join(p.file_name().ok_or("no file name")?))?;
    }
    let plain = mbps(bytes, start.elapsed().as_secs_f64());
    let synced_dir = to.join("synced");
    std::fs::create_dir_all(&synced_dir)?;
    settle();
    let start = Instant::now();
    for (p, _) in files {
        let dst = synced_dir.join(p.file_name().ok_or("no file name")?);
        std::fs::copy(p, &dst)?;
        std::fs::File::open(&dst)?.sync_all()?;
    }
    Ok((plain, mbps(bytes, start.elapsed().as_secs_f64())))
}

/// The S3 rows; deletes what the run wrote on a server that outlives it.
fn s3(s: &Sizes, root: &Path, local_ref: &Log, t: &S3Target, lines: &mut Vec<Line>) -> Result<()> {
    let storage = Arc::new(S3RemoteStorage::new(t.config.clone())?);
    let bare = sdk::Bare::new(storage.client().clone(), &t.config)?;
    let backend = owned::Backend {
        name: &t.label,
        tag: "s3",
        rsm: storage.clone(),
        store: storage.clone(),
        location: format!("s3://{}/{}", t.config.bucket, t.config.prefix),
        server: t.server.as_ref(),
    };
    let result = s3_rows(s, root, local_ref, &t.label, storage, &bare, lines)
        .and_then(|()| owned::rows(s, root, &backend, lines));
    if t.cleanup {
        let deleted = bare.delete_all();
        if let Err(e) = &deleted {
            eprintln!("cleanup of the benchmark's objects failed: {e}");
        }
    }
    result
}

fn s3_rows(
    s: &Sizes,
    root: &Path,
    local_ref: &Log,
    name: &str,
    storage: Arc<S3RemoteStorage>,
    bare: &sdk::Bare,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let p = Prepared::new(root.join("s3-local"), storage, s)?;
    let files = p.files();
    let (one, _) = bare.upload(&files, "one", 1)?;
    let (many, keys) = bare.upload(&files, "many", COPY_CONCURRENCY)?;
    let backend = p.backend_copy(COPY_CONCURRENCY)?;
    let verify = p.verify_rate()?;
    let segments = p.segments.clone();
    let log_bytes = p.log_bytes();
    let (up, upload) = p.upload()?;
    // The baseline's copies of the `.log` files, in segment order.
    let logs: Vec<(String, u64)> = keys
        .into_iter()
        .zip(&files)
        .filter(|(_, (path, _))| path.extension().is_some_and(|e| e == "log"))
        .map(|(k, (_, n))| (k, *n))
        .collect();
    upload_lines(name, upload, (one, many), (backend, verify), lines);

    let cold = up.open(s, 0)?;
    let c = measure::cold_reads(&cold, s.point_reads, |seq| {
        let (i, from, to) =
            measure::chunk_of(&segments, seq, sdk::GET_BYTES).ok_or("seq not in a segment")?;
        let (key, _) = logs.get(i).ok_or("no baseline object")?;
        Ok(Some(bare.get(key, from, to)?))
    })?;
    cold.close()?;
    push_cold(name, &c, lines);

    let remote = reread_and_scan(name, s, &up, local_ref, log_bytes, lines)?;
    for (n, what, t) in [
        (
            COPY_CONCURRENCY,
            "concurrent 1 MiB ranged GETs",
            Target::AtLeast(0.8),
        ),
        (1, "one stream of 1 MiB ranged GETs", Target::None),
    ] {
        let b = bare.scan(&logs, n)?;
        let what = if n > 1 {
            format!("{n} {what}")
        } else {
            what.to_owned()
        };
        lines.push(Line::cmp(
            format!("scan of the remote-only range ({name}), MB/s of .log bytes; baseline: bare SDK, {what} of the same .log files"),
            rate(remote),
            rate(b),
            t,
        ));
    }
    Ok(())
}

/// The S3 upload rows: krabka's `run_once` against the bare SDK (`one` file at a time, `many`
/// in flight), and the diagnostics (the backend alone, the check before each copy).
fn upload_lines(
    name: &str,
    upload: f64,
    (one, many): (f64, f64),
    (backend, verify): (f64, f64),
    lines: &mut Vec<Line>,
) {
    let up_line = |base: &str, b: f64, t| {
        Line::cmp(
            format!(
                "upload to {name} (run_once, the default TieringConfig copy settings: copy_concurrency {COPY_CONCURRENCY}), MB/s; baseline: bare aws-sdk-s3 PutObject / multipart of the same files, {base}"
            ),
            rate(upload),
            rate(b),
            t,
        )
    };
    lines.push(up_line(
        &format!("{COPY_CONCURRENCY} files in flight"),
        many,
        Target::AtLeast(0.9),
    ));
    if upload < 0.9 * many {
        // Missed: what bounds it. The upload is the check of each segment, then its copy
        // through the backend; neither can go faster than it does alone.
        lines.push(Line::cmp(
            format!("floor of the upload row: the {name} backend alone ({COPY_CONCURRENCY} copies at once, no tiering layer), MB/s; baseline: bare SDK, {COPY_CONCURRENCY} files in flight"),
            rate(backend),
            rate(many),
            Target::None,
        ));
    }
    lines.push(up_line("one file at a time", one, Target::None));
    lines.push(Line::cmp(
        format!("diagnostic: the {name} backend alone (copy_log_segment_data of the same segments, {COPY_CONCURRENCY} at once, no tiering layer), MB/s; baseline: bare SDK, {COPY_CONCURRENCY} files in flight"),
        rate(backend),
        rate(many),
        Target::None,
    ));
    lines.push(Line::info(
        "diagnostic: the check before each copy (krabka-storage verify_segment_files, one thread), MB/s of .log bytes",
        format!("{verify:.1}"),
        String::new(),
    ));
}

fn push_cold(name: &str, c: &Paired, lines: &mut Vec<Line>) {
    let requests = c.requests_per_read;
    lines.push(Line::cmp(
        format!("cold point read from {name} (cache off), p50 / p99; baseline: one bare ranged GET of the same 1 MiB chunk"),
        lat(&c.krabka, &format!(" ({requests:.1} requests per read)")),
        lat(&c.baseline, " (1 request)"),
        Target::AtMost(1.5),
    ));
    lines.push(Line::info(
        format!("cold point read from {name}: requests per read (target: 1)"),
        format!("{requests:.2} ({})", met(requests <= 1.0)),
        "1".into(),
    ));
}
