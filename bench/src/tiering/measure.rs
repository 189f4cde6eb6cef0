//! The krabka side: a tiered log filled and uploaded by one `run_once`, then read cold (cache
//! off), re-read from its cache and scanned, each read paired with its baseline.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::{
    LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager,
    TopicIdPartition, Uuid,
};
use krabka_storage::segment::verify_segment_files;
use krabka_storage::{Log, SegmentInfo};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::{RemoteOwnership, RemoteRequests, TieredLog, TieringConfig};

use super::{COPY_CONCURRENCY, Sizes, fill, mbps, options};
use crate::Result;
use crate::report::Histogram;
use crate::storage::Rng;

/// The tiering config of every log of the bench: no local copy kept, no time retention.
pub(crate) fn config(cache_bytes: u64) -> TieringConfig {
    TieringConfig {
        local_retention_bytes: Some(0),
        retention_ms: None,
        cache_bytes,
        copy_concurrency: COPY_CONCURRENCY,
        ..TieringConfig::default()
    }
}

/// A tiered log, filled and rolled, its closed segments not yet uploaded.
pub struct Prepared {
    log: TieredLog,
    rsm: Arc<dyn RemoteStorageManager>,
    rlmm: Arc<InMemoryRemoteLogMetadataManager>,
    tp: TopicIdPartition,
    dir: PathBuf,
    /// The closed segments (what the upload copies), oldest first.
    pub segments: Vec<SegmentInfo>,
}

impl Prepared {
    /// Opens a tiered log in `dir` over `rsm` and fills it with the workload.
    pub fn new(dir: PathBuf, rsm: Arc<dyn RemoteStorageManager>, s: &Sizes) -> Result<Self> {
        Self::with_owner(dir, rsm, s, None)
    }

    /// As [`new`](Self::new); with `ownership`, the log is opened with
    /// `TieredLog::open_owned` (a fresh partition: the open claims its first writer epoch).
    pub fn with_owner(
        dir: PathBuf,
        rsm: Arc<dyn RemoteStorageManager>,
        s: &Sizes,
        ownership: Option<&RemoteOwnership>,
    ) -> Result<Self> {
        let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
        let tp = TopicIdPartition::new(Uuid::new_v4(), "bench", 0);
        let config = config(krabka_tiering::DEFAULT_CACHE_BYTES);
        let log = match ownership {
            None => TieredLog::open(
                &dir,
                options(s),
                Arc::clone(&rsm),
                rlmm.clone(),
                tp.clone(),
                config,
            )?,
            Some(o) => TieredLog::open_owned(
                &dir,
                options(s),
                Arc::clone(&rsm),
                rlmm.clone(),
                tp.clone(),
                config,
                o,
            )?,
        };
        fill(|m| Ok(log.append_batch(m).map(drop)?), s)?;
        log.roll()?;
        let segments = log
            .log()
            .segments()
            .into_iter()
            .filter(|s| !s.active)
            .collect();
        Ok(Self {
            log,
            rsm,
            rlmm,
            tp,
            dir,
            segments,
        })
    }

    /// The files a tiering round uploads, `.log`, `.index`, `.timeindex` per segment.
    pub fn files(&self) -> Vec<(PathBuf, u64)> {
        files_of(&self.segments)
    }

    /// The closed segments with their files hard-linked into `dir`: the same bytes (and page
    /// cache) under names that the round's local retention, which deletes the log's own files
    /// once copied, leaves in place for the cases that run after `run_once`.
    pub fn linked(&self, dir: &Path) -> Result<Vec<SegmentInfo>> {
        std::fs::create_dir_all(dir)?;
        let link = |p: &Path| -> Result<PathBuf> {
            let name = p.file_name().ok_or("a segment file without a name")?;
            let to = dir.join(name);
            if p.exists() {
                std::fs::hard_link(p, &to)?;
            }
            Ok(to)
        };
        self.segments
            .iter()
            .map(|s| {
                let mut l = s.clone();
                l.log_path = link(&s.log_path)?;
                l.index_path = link(&s.index_path)?;
                l.time_index_path = link(&s.time_index_path)?;
                Ok(l)
            })
            .collect()
    }

    /// The backend alone (no tiering layer): `copy_log_segment_data` of every segment under a
    /// fresh id, `width` segments at once; returns MB/s over the same files' bytes.
    pub fn backend_copy(&self, width: usize) -> Result<f64> {
        self.backend().copy(&self.segments, width)
    }

    /// The backend and partition of this log, for [`Backend::copy`] of segments that outlive
    /// it (e.g. [`linked`](Self::linked)).
    pub fn backend(&self) -> Backend {
        Backend {
            rsm: self.rsm.clone(),
            tp: self.tp.clone(),
        }
    }

    /// The check every segment passes before its copy (`verify_segment_files`: every frame's
    /// CRC and message, both indexes), one segment after another; returns MB/s.
    pub fn verify_rate(&self) -> Result<f64> {
        let start = Instant::now();
        for s in &self.segments {
            let v =
                verify_segment_files(&s.log_path, Some(&s.index_path), Some(&s.time_index_path))?;
            if let Some(p) = v.problem {
                return Err(format!("{}: {}", s.log_path.display(), p.reason).into());
            }
        }
        Ok(mbps(self.log_bytes(), start.elapsed().as_secs_f64()))
    }

    /// Bytes of the closed segments' `.log` files (what a scan of the remote range reads).
    pub fn log_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Runs one timed `run_once` (the upload) and closes the log; returns the upload's MB/s,
    /// over the bytes of every file it uploads, as the baselines count them (`bytes_copied`
    /// counts the `.log` files only).
    pub fn upload(self) -> Result<(Uploaded, f64)> {
        let (up, run) = self.upload_run()?;
        Ok((up, mbps(run.bytes, run.secs)))
    }

    /// [`upload`](Self::upload), returning what it measured: bytes, seconds, segments copied
    /// and the remote storage manager calls the round made.
    pub fn upload_run(self) -> Result<(Uploaded, UploadRun)> {
        let bytes: u64 = self.files().iter().map(|(_, n)| n).sum();
        let before = self.log.stats().requests;
        super::settle();
        let start = Instant::now();
        let report = self.log.run_once()?;
        let secs = start.elapsed().as_secs_f64();
        if let Some(e) = report.failures.first() {
            return Err(format!("tiering round failed: {e}").into());
        }
        let after = self.log.stats().requests;
        self.log.close()?;
        if report.segments_copied != self.segments.len() as u64 {
            return Err(format!(
                "copied {} of {} segments",
                report.segments_copied,
                self.segments.len()
            )
            .into());
        }
        let up = Uploaded {
            rsm: self.rsm,
            rlmm: self.rlmm,
            tp: self.tp,
            dir: self.dir,
        };
        let requests = RemoteRequests {
            copy: after.copy - before.copy,
            fetch_log: after.fetch_log - before.fetch_log,
            fetch_index: after.fetch_index - before.fetch_index,
            delete: after.delete - before.delete,
        };
        let run = UploadRun {
            bytes,
            secs,
            segments: report.segments_copied,
            requests,
        };
        Ok((up, run))
    }
}

/// What one timed upload measured.
pub struct UploadRun {
    /// Bytes of every file uploaded (`.log`, `.index`, `.timeindex`).
    pub bytes: u64,
    /// Seconds of the `run_once`.
    pub secs: f64,
    /// Segments it copied.
    pub segments: u64,
    /// The remote storage manager calls it made (`TieredLog::stats().requests`).
    pub requests: RemoteRequests,
}

/// An uploaded log's parts, to reopen it with a given cache.
pub struct Uploaded {
    rsm: Arc<dyn RemoteStorageManager>,
    rlmm: Arc<InMemoryRemoteLogMetadataManager>,
    tp: TopicIdPartition,
    dir: PathBuf,
}

impl Uploaded {
    /// A fresh `TieredLog` over the uploaded data with `cache_bytes` of cache (0: none).
    pub fn open(&self, s: &Sizes, cache_bytes: u64) -> Result<TieredLog> {
        Ok(TieredLog::open(
            &self.dir,
            options(s),
            Arc::clone(&self.rsm),
            self.rlmm.clone(),
            self.tp.clone(),
            config(cache_bytes),
        )?)
    }
}

impl Uploaded {
    /// As [`open`](Self::open), opened with `ownership` (`TieredLog::open_owned`: a reopen of
    /// the bound log, which claims the next writer epoch and rewrites the partition head).
    pub fn open_owned(
        &self,
        s: &Sizes,
        cache_bytes: u64,
        ownership: &RemoteOwnership,
    ) -> Result<TieredLog> {
        Ok(TieredLog::open_owned(
            &self.dir,
            options(s),
            Arc::clone(&self.rsm),
            self.rlmm.clone(),
            self.tp.clone(),
            config(cache_bytes),
            ownership,
        )?)
    }

    /// The partition uploaded.
    pub fn topic_id_partition(&self) -> &TopicIdPartition {
        &self.tp
    }
}

/// Random seqs of the remote-only range.
fn seqs(log: &TieredLog, n: u64) -> Result<Vec<u64>> {
    let first = log.first_seq()?;
    let span = log.local_first_seq().saturating_sub(first).max(1);
    let mut rng = Rng::new();
    Ok((0..n).map(|_| first + rng.below(span)).collect())
}

/// Latencies of krabka and of its baseline, and krabka's remote requests per read.
pub struct Paired {
    pub krabka: Histogram,
    pub baseline: Histogram,
    pub requests_per_read: f64,
}

fn read_one(log: &TieredLog, seq: u64) -> Result<(Duration, u64)> {
    let before = log.stats().requests.total();
    let t = Instant::now();
    let got = log.read(seq, 1)?;
    let took = t.elapsed();
    if got.len() != 1 || got[0].seq != seq {
        return Err(format!("remote point read of {seq} returned {} records", got.len()).into());
    }
    Ok((took, log.stats().requests.total() - before))
}

/// `read(seq, 1)` at `n` random remote seqs of a log with no cache, each followed by
/// `baseline(seq)` (its time, if it has one).
pub fn cold_reads(
    log: &TieredLog,
    n: u64,
    mut baseline: impl FnMut(u64) -> Result<Option<Duration>>,
) -> Result<Paired> {
    let mut p = Paired {
        krabka: Histogram::default(),
        baseline: Histogram::default(),
        requests_per_read: 0.0,
    };
    let mut requests = 0;
    for seq in seqs(log, n)? {
        let (took, r) = read_one(log, seq)?;
        p.krabka.record(took);
        requests += r;
        if let Some(d) = baseline(seq)? {
            p.baseline.record(d);
        }
    }
    p.requests_per_read = requests as f64 / n.max(1) as f64;
    Ok(p)
}

/// Each of `n` random remote seqs read once (the fetch into the cache), then twice more from
/// the cache, the second time timed (the cached re-read); then the same seq read from the local
/// log `local`, also once before and timed the second time.
///
/// Both timed reads follow an untimed read of the same seq through the same path: a read timed
/// right after the fetch would also pay for the CPU state the fetch left (with S3 a blocking
/// network round trip of milliseconds: a local `Log::read` timed at that point takes several
/// times as long), whatever the cache does. A cache hit after the fetch runs the same code as
/// later ones (the frame hints are learnt by the fetching read).
pub fn warm_reads(log: &TieredLog, local: &Log, n: u64) -> Result<Paired> {
    let mut p = Paired {
        krabka: Histogram::default(),
        baseline: Histogram::default(),
        requests_per_read: 0.0,
    };
    let mut requests = 0;
    for seq in seqs(log, n)? {
        log.read(seq, 1)?;
        log.read(seq, 1)?;
        let (took, r) = read_one(log, seq)?;
        p.krabka.record(took);
        requests += r;
        local.read(seq, 1)?;
        let t = Instant::now();
        let got = local.read(seq, 1)?;
        p.baseline.record(t.elapsed());
        if got.first().map(|r| r.seq) != Some(seq) {
            return Err(format!("local read of {seq} missed").into());
        }
    }
    p.requests_per_read = requests as f64 / n.max(1) as f64;
    Ok(p)
}

/// Reads `from..to` through `read` (one call per batch); returns the seconds it took.
pub fn scan(
    read: impl Fn(u64) -> Result<Vec<krabka_storage::Record>>,
    from: u64,
    to: u64,
) -> Result<f64> {
    let mut next = from;
    let start = Instant::now();
    while next < to {
        let got = read(next)?;
        let Some(last) = got.last() else {
            return Err(format!("scan stopped at {next} of {from}..{to}").into());
        };
        next = last.seq + 1;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// The byte range of the `chunk`-byte chunk of its segment's `.log` holding `seq`, as
/// `(segment index, from, to)` (every record of the workload has the same size).
pub fn chunk_of(segments: &[SegmentInfo], seq: u64, chunk: u64) -> Option<(usize, u64, u64)> {
    let (i, s) = segments
        .iter()
        .enumerate()
        .find(|(_, s)| s.base_seq <= seq && seq <= s.last_seq)?;
    let records = s.last_seq - s.base_seq + 1;
    let pos = (seq - s.base_seq) * s.size / records;
    let from = pos / chunk * chunk;
    Some((i, from, (from + chunk).min(s.size)))
}

/// The files of `segments`, `.log`, `.index`, `.timeindex` per segment, those that exist.
fn files_of(segments: &[SegmentInfo]) -> Vec<(PathBuf, u64)> {
    segments
        .iter()
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

/// The backend alone (no tiering layer) of a [`Prepared`] log.
pub struct Backend {
    rsm: Arc<dyn RemoteStorageManager>,
    tp: TopicIdPartition,
}

impl Backend {
    /// `copy_log_segment_data` of every segment of `segments` under a fresh id, `width`
    /// segments at once; returns MB/s over their files' bytes.
    pub fn copy(&self, segments: &[SegmentInfo], width: usize) -> Result<f64> {
        let bytes: u64 = files_of(segments).iter().map(|(_, n)| n).sum();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let copy_one = |seg: &SegmentInfo| -> Result<()> {
            let id = RemoteLogSegmentId::generate(self.tp.clone());
            let meta = RemoteLogSegmentMetadata::builder(id, seg.base_seq, seg.last_seq)
                .segment_size_in_bytes(seg.size)
                .build()?;
            let data = LogSegmentData::new(&seg.log_path, &seg.index_path, &seg.time_index_path);
            self.rsm.copy_log_segment_data(&meta, &data)?;
            Ok(())
        };
        super::settle();
        let start = Instant::now();
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..width.max(1))
                .map(|_| {
                    scope.spawn(|| {
                        while let Some(seg) =
                            segments.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                        {
                            copy_one(seg)?;
                        }
                        Ok::<(), crate::BoxError>(())
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().map_err(|_| "a copy thread panicked")?)
        })?;
        Ok(mbps(bytes, start.elapsed().as_secs_f64()))
    }
}
