//! `tiering`: uploads to remote-fs and S3 against plain copies and bare SDK uploads, cold and
//! cached remote point reads, and a remote-only scan against the same range read locally.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use krabka_remote_s3::test_server::{BUCKET, TestServer};
use krabka_remote_storage::metadata::InMemoryRemoteLogMetadataManager;
use krabka_remote_storage::{RemoteStorageManager, TopicIdPartition, Uuid};
use krabka_storage::{Log, Options, SyncPolicy};
use krabka_tiering::fs::FsRemoteStorage;
use krabka_tiering::s3::S3RemoteStorage;
use krabka_tiering::{TieredLog, TieringConfig};

use crate::Result;
use crate::report::{Histogram, ratio};
use crate::storage::{BATCH, Rng, value};

const FS_COPY_SYNC: &str = "baseline: std::fs::copy + fsync of each file, MB/s";
const SDK_PUT: &str = "baseline: bare aws-sdk-s3 PutObject / multipart of the same files, MB/s";

/// Record payload of the tiering workload.
const VALUE: usize = 1024;
/// Records a sequential scan asks for per call.
const SCAN_BATCH: usize = 1000;

struct Sizes {
    segment: u64,
    total: u64,
    point_reads: u64,
}

fn sizes(quick: bool, bytes: Option<u64>) -> Sizes {
    let total = bytes.unwrap_or(if quick { 24 << 20 } else { 320 << 20 });
    Sizes {
        // Four closed segments or so; 64 MiB (the default) in a full run.
        segment: if quick || bytes.is_some() {
            (total / 4).max(1 << 20)
        } else {
            64 << 20
        },
        total,
        point_reads: if quick { 30 } else { 200 },
    }
}

fn options(s: &Sizes) -> Options {
    Options {
        max_bytes: s.segment,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

fn fill(append: impl Fn(&[krabka_protocol::Message]) -> Result<()>, s: &Sizes) -> Result<()> {
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

fn config(cache_bytes: u64) -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        cache_bytes,
        ..TieringConfig::default()
    }
}

/// The files of the closed segments (what a tiering round uploads).
fn closed_files(log: &Log) -> Vec<(PathBuf, u64)> {
    log.segments()
        .iter()
        .filter(|s| !s.active)
        .flat_map(|s| {
            [
                s.log_path.clone(),
                s.index_path.clone(),
                s.time_index_path.clone(),
            ]
        })
        .filter_map(|p| std::fs::metadata(&p).ok().map(|m| (p, m.len())))
        .collect()
}

struct Line {
    measure: String,
    krabka: String,
    baseline: String,
    ratio: String,
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

/// One backend's tiered log, filled, with its copy round timed.
struct Tiered {
    log: TieredLog,
    rsm: Arc<dyn RemoteStorageManager>,
    rlmm: Arc<InMemoryRemoteLogMetadataManager>,
    tp: TopicIdPartition,
    dir: PathBuf,
    upload_bytes: u64,
    upload_secs: f64,
}

fn tiered(
    dir: PathBuf,
    rsm: Arc<dyn RemoteStorageManager>,
    s: &Sizes,
    baseline: impl FnOnce(&[(PathBuf, u64)]) -> Result<Vec<Line>>,
    lines: &mut Vec<Line>,
) -> Result<Tiered> {
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let tp = TopicIdPartition::new(Uuid::new_v4(), "bench", 0);
    let log = TieredLog::open(
        &dir,
        options(s),
        Arc::clone(&rsm),
        rlmm.clone(),
        tp.clone(),
        config(krabka_tiering::DEFAULT_CACHE_BYTES),
    )?;
    fill(|m| Ok(log.append_batch(m).map(drop)?), s)?;
    log.log().roll()?;
    lines.extend(baseline(&closed_files(log.log()))?);
    let start = Instant::now();
    let report = log.run_once()?;
    let upload_secs = start.elapsed().as_secs_f64();
    if let Some(e) = report.failures.first() {
        return Err(format!("tiering round failed: {e}").into());
    }
    Ok(Tiered {
        log,
        rsm,
        rlmm,
        tp,
        dir,
        upload_bytes: report.bytes_copied,
        upload_secs,
    })
}

/// Point reads at random seqs of the remote range; returns the histogram and requests per read.
fn point_reads(log: &TieredLog, n: u64, twice: bool) -> Result<(Histogram, f64)> {
    let first = log.first_seq()?;
    let remote_end = log.local_first_seq();
    let span = remote_end.saturating_sub(first).max(1);
    let mut rng = Rng::new();
    let mut hist = Histogram::default();
    let mut requests = 0;
    for _ in 0..n {
        let seq = first + rng.below(span);
        if twice {
            log.read(seq, 1)?;
        }
        let before = log.stats().requests.total();
        let t = Instant::now();
        let got = log.read(seq, 1)?;
        hist.record(t.elapsed());
        requests += log.stats().requests.total() - before;
        if got.len() != 1 {
            return Err(
                format!("remote point read of {seq} returned {} records", got.len()).into(),
            );
        }
    }
    Ok((hist, requests as f64 / n.max(1) as f64))
}

/// Reads `from..to` in [`SCAN_BATCH`] calls; returns payload MB/s.
fn scan(
    read: impl Fn(u64) -> Result<Vec<krabka_storage::Record>>,
    from: u64,
    to: u64,
) -> Result<f64> {
    let mut next = from;
    let mut bytes = 0u64;
    let start = Instant::now();
    while next < to {
        let got = read(next)?;
        let Some(last) = got.last() else { break };
        next = last.seq + 1;
        bytes += got
            .iter()
            .filter(|r| r.seq < to)
            .map(|r| r.message.value.len() as u64)
            .sum::<u64>();
    }
    Ok(mbps(bytes, start.elapsed().as_secs_f64()))
}

/// Cold reads, cached re-reads and the remote scan of one backend, after its upload.
fn reads(name: &str, t: Tiered, s: &Sizes, local_ref: &Log, lines: &mut Vec<Line>) -> Result<()> {
    let Tiered {
        log,
        rsm,
        rlmm,
        tp,
        dir,
        upload_bytes,
        upload_secs,
    } = t;
    lines.push(Line {
        measure: format!("upload to {name}, MB/s"),
        krabka: format!("{:.1}", mbps(upload_bytes, upload_secs)),
        baseline: String::new(),
        ratio: String::new(),
    });
    log.close()?;

    // Cold: no cache at all, so every read goes to the remote tier.
    let reopen = |cache| -> Result<TieredLog> {
        Ok(TieredLog::open(
            &dir,
            options(s),
            Arc::clone(&rsm),
            rlmm.clone(),
            tp.clone(),
            config(cache),
        )?)
    };
    let cold = reopen(0)?;
    let (h, per) = point_reads(&cold, s.point_reads, false)?;
    lines.push(Line {
        measure: format!("cold point read from {name} (cache off), p50 / p99"),
        krabka: h.fmt_p50_p99(),
        baseline: format!("{per:.1} remote requests per read"),
        ratio: String::new(),
    });
    cold.close()?;

    let warm = reopen(krabka_tiering::DEFAULT_CACHE_BYTES)?;
    let (h, per) = point_reads(&warm, s.point_reads, true)?;
    lines.push(Line {
        measure: format!("cached re-read from {name}, p50 / p99"),
        krabka: h.fmt_p50_p99(),
        baseline: format!("{per:.1} remote requests per read"),
        ratio: String::new(),
    });
    warm.close()?;

    let scanner = reopen(krabka_tiering::DEFAULT_CACHE_BYTES)?;
    let (from, to) = (scanner.first_seq()?, scanner.local_first_seq());
    let remote = scan(|seq| Ok(scanner.read(seq, SCAN_BATCH)?), from, to)?;
    let local = scan(|seq| Ok(local_ref.read(seq, SCAN_BATCH)?), from, to)?;
    lines.push(Line {
        measure: format!(
            "scan of the remote-only range ({name}), MB/s; baseline: same range local"
        ),
        krabka: format!("{remote:.1}"),
        baseline: format!("{local:.1}"),
        ratio: ratio(remote, Some(local)),
    });
    scanner.close()?;
    Ok(())
}

fn fs_copy_baseline(files: &[(PathBuf, u64)], to: &Path) -> Result<Vec<Line>> {
    std::fs::create_dir_all(to)?;
    let bytes: u64 = files.iter().map(|(_, n)| n).sum();
    let start = Instant::now();
    for (p, _) in files {
        std::fs::copy(p, to.join(p.file_name().ok_or("no file name")?))?;
    }
    let plain = mbps(bytes, start.elapsed().as_secs_f64());
    let synced_dir = to.join("synced");
    std::fs::create_dir_all(&synced_dir)?;
    let start = Instant::now();
    for (p, _) in files {
        let dst = synced_dir.join(p.file_name().ok_or("no file name")?);
        std::fs::copy(p, &dst)?;
        std::fs::File::open(&dst)?.sync_all()?;
    }
    let synced = mbps(bytes, start.elapsed().as_secs_f64());
    Ok(vec![
        Line {
            measure: "baseline: std::fs::copy of the same files, MB/s".into(),
            krabka: String::new(),
            baseline: format!("{plain:.1}"),
            ratio: String::new(),
        },
        Line {
            measure: FS_COPY_SYNC.into(),
            krabka: String::new(),
            baseline: format!("{synced:.1}"),
            ratio: String::new(),
        },
    ])
}

/// Uploads each file with the bare SDK as krabka's defaults would: one PutObject below 16 MiB,
/// otherwise multipart with 8 MiB parts, 4 in flight.
fn sdk_baseline(client: &aws_sdk_s3::Client, files: &[(PathBuf, u64)]) -> Result<Vec<Line>> {
    const THRESHOLD: u64 = 16 << 20;
    const PART: usize = 8 << 20;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let bytes: u64 = files.iter().map(|(_, n)| n).sum();
    let start = Instant::now();
    rt.block_on(async {
        for (i, (p, size)) in files.iter().enumerate() {
            let key = format!("sdk-baseline/{i}");
            let data = bytes::Bytes::from(tokio::fs::read(p).await?);
            if *size < THRESHOLD {
                client
                    .put_object()
                    .bucket(BUCKET)
                    .key(&key)
                    .body(ByteStream::from(data))
                    .send()
                    .await?;
                continue;
            }
            let up = client
                .create_multipart_upload()
                .bucket(BUCKET)
                .key(&key)
                .send()
                .await?;
            let id = up.upload_id().ok_or("no upload id")?.to_owned();
            let mut set = tokio::task::JoinSet::new();
            let mut parts = Vec::new();
            for (n, start) in (0..data.len()).step_by(PART).enumerate() {
                let body = data.slice(start..(start + PART).min(data.len()));
                let req = client
                    .upload_part()
                    .bucket(BUCKET)
                    .key(&key)
                    .upload_id(&id)
                    .part_number(n as i32 + 1)
                    .body(ByteStream::from(body));
                set.spawn(async move { (n as i32 + 1, req.send().await) });
                while set.len() >= 4 {
                    if let Some(r) = set.join_next().await {
                        parts.push(r?);
                    }
                }
            }
            while let Some(r) = set.join_next().await {
                parts.push(r?);
            }
            let mut done = Vec::new();
            for (n, r) in parts {
                let out = r?;
                done.push(
                    CompletedPart::builder()
                        .part_number(n)
                        .set_e_tag(out.e_tag().map(str::to_owned))
                        .build(),
                );
            }
            done.sort_by_key(|p| p.part_number());
            client
                .complete_multipart_upload()
                .bucket(BUCKET)
                .key(&key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(done))
                        .build(),
                )
                .send()
                .await?;
        }
        Ok::<(), crate::BoxError>(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    Ok(vec![Line {
        measure: SDK_PUT.into(),
        krabka: String::new(),
        baseline: format!("{:.1}", mbps(bytes, secs)),
        ratio: String::new(),
    }])
}

/// Runs the tiering measurements and prints their table.
pub fn run(quick: bool, bytes: Option<u64>) -> Result<()> {
    let s = sizes(quick, bytes);
    let dir = crate::scratch_dir()?;
    let root = dir.path();
    println!(
        "# krabka-bench tiering{}\n\n{:.1} MB of {VALUE} B records in segments of {:.1} MB; {} point reads per case\n",
        if quick { " --quick" } else { "" },
        s.total as f64 / 1e6,
        s.segment as f64 / 1e6,
        s.point_reads
    );
    let started = Instant::now();

    // The same records in a plain local log: the reference for the scans.
    let local_ref = Log::open(root.join("local-ref"), options(&s))?;
    fill(|m| Ok(local_ref.append_batch(m).map(drop)?), &s)?;

    let mut lines = Vec::new();

    let fs_rsm: Arc<dyn RemoteStorageManager> =
        Arc::new(FsRemoteStorage::new(root.join("remote-fs"))?);
    let copy_dir = root.join("fs-copy");
    let t = tiered(
        root.join("fs-local"),
        fs_rsm,
        &s,
        |files| fs_copy_baseline(files, &copy_dir),
        &mut lines,
    )?;
    let upload = mbps(t.upload_bytes, t.upload_secs);
    reads("remote-fs", t, &s, &local_ref, &mut lines)?;
    annotate_upload(&mut lines, "remote-fs", FS_COPY_SYNC, upload);

    let server = TestServer::start_in(root.join("s3"))?;
    let s3 = Arc::new(S3RemoteStorage::new(server.config())?);
    let client = s3.client().clone();
    let s3_rsm: Arc<dyn RemoteStorageManager> = s3;
    let t = tiered(
        root.join("s3-local"),
        s3_rsm,
        &s,
        |files| sdk_baseline(&client, files),
        &mut lines,
    )?;
    let upload = mbps(t.upload_bytes, t.upload_secs);
    reads("S3 (s3s-fs)", t, &s, &local_ref, &mut lines)?;
    annotate_upload(&mut lines, "S3 (s3s-fs)", SDK_PUT, upload);
    lines.extend(sdk_get_baseline(&client, &s)?);

    println!("| measure | krabka | baseline | krabka / baseline |");
    println!("| --- | ---: | ---: | ---: |");
    for l in &lines {
        println!(
            "| {} | {} | {} | {} |",
            l.measure, l.krabka, l.baseline, l.ratio
        );
    }
    println!("\n(total {:.1} s)", started.elapsed().as_secs_f64());
    drop(server);
    Ok(())
}

/// Fills the upload line's baseline and ratio from the baseline line named `baseline`.
fn annotate_upload(lines: &mut [Line], name: &str, baseline: &str, upload: f64) {
    let base = lines
        .iter()
        .find(|l| l.measure == baseline)
        .and_then(|l| l.baseline.parse::<f64>().ok());
    if let Some(line) = lines
        .iter_mut()
        .find(|l| l.measure == format!("upload to {name}, MB/s"))
    {
        line.baseline = base.map(|b| format!("{b:.1}")).unwrap_or_default();
        line.ratio = ratio(upload, base);
    }
}

/// Bare SDK ranged GETs of the first baseline object: random 1 MiB ranges (what a cold read
/// fetches with the default chunk size) and a sequential pass in 3 MiB ranges (a read with
/// read-ahead).
fn sdk_get_baseline(client: &aws_sdk_s3::Client, s: &Sizes) -> Result<Vec<Line>> {
    const CHUNK: u64 = krabka_tiering::DEFAULT_CHUNK_BYTES as u64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let key = "sdk-baseline/0";
    let get = |from: u64, to: u64| {
        let req = client
            .get_object()
            .bucket(BUCKET)
            .key(key)
            .range(format!("bytes={from}-{to}"));
        async move {
            let out = req.send().await?;
            let body = out.body.collect().await?;
            Ok::<usize, crate::BoxError>(body.into_bytes().len())
        }
    };
    rt.block_on(async {
        let size = client
            .head_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await?
            .content_length()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or("no object size")?;
        let chunks = (size / CHUNK).max(1);
        let mut rng = Rng::new();
        let mut hist = Histogram::default();
        for _ in 0..s.point_reads {
            let from = rng.below(chunks) * CHUNK;
            let t = Instant::now();
            get(from, (from + CHUNK).min(size) - 1).await?;
            hist.record(t.elapsed());
        }
        let start = Instant::now();
        let mut bytes = 0u64;
        let mut from = 0;
        while from < size {
            let to = (from + 3 * CHUNK).min(size);
            bytes += get(from, to - 1).await? as u64;
            from = to;
        }
        let scan = mbps(bytes, start.elapsed().as_secs_f64());
        Ok(vec![
            Line {
                measure: "baseline: bare SDK ranged GET of 1 MiB, p50 / p99".into(),
                krabka: String::new(),
                baseline: hist.fmt_p50_p99(),
                ratio: String::new(),
            },
            Line {
                measure: "baseline: bare SDK sequential GETs of 3 MiB, MB/s".into(),
                krabka: String::new(),
                baseline: format!("{scan:.1}"),
                ratio: String::new(),
            },
        ])
    })
}
