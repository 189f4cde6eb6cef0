//! `tiering --upload-only`: the S3 upload rows alone, several rounds, each round the bare SDK
//! (8 files in flight), krabka's S3 backend alone, `run_once` and the floor (the bare SDK sending
//! each body's Content-MD5, as a verifying client must) on the same data, in an order that
//! rotates from round to round (round r starts with case r mod 4), with the CPU time each spent: this process's (the client)
//! and, on a server whose processes run on this machine, the store's (`radosgw`, `ceph-osd`).
//!
//! On a machine whose cores the store shares, the upload rate is bound by CPU: a client that
//! spends more CPU per MB (hashing, more requests) leaves less to the store. The CPU columns
//! say where a gap comes from without the noise of the rates.

use std::path::Path;
use std::sync::Arc;

use krabka_tiering::s3::S3RemoteStorage;

use super::measure::Prepared;
use super::sdk::{Bare, Body};
use super::{COPY_CONCURRENCY, Line, S3Target, Sizes, Target, mbps, rate};
use crate::Result;

/// Rounds of an upload-only run unless `--rounds N` says otherwise. Each round writes three
/// copies of the workload (a full run's: 805 MB) to the store; a store that frees deleted data
/// late (RGW's garbage collection waits two hours by default) fills up after a few.
pub(crate) const ROUNDS: usize = 1;

/// The cases of a round: the bare SDK, the backend alone, `run_once`, the floor.
const CASES: usize = 4;

/// CPU seconds (user + system) of this process and of the store's processes on this machine.
#[derive(Clone, Copy, Default)]
struct Cpu {
    client: f64,
    store: f64,
}

impl Cpu {
    fn now() -> Self {
        Self {
            client: proc_cpu_secs("self").unwrap_or(0.0),
            store: store_pids()
                .iter()
                .filter_map(|p| proc_cpu_secs(p))
                .sum::<f64>(),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            client: self.client - before.client,
            store: self.store - before.store,
        }
    }
}

/// utime + stime of `/proc/<pid>/stat`, in seconds (at the usual 100 ticks a second).
fn proc_cpu_secs(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// The pids of `radosgw` and `ceph-osd` processes on this machine.
fn store_pids() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| matches!(c.trim(), "radosgw" | "ceph-osd"))
        })
        .collect()
}

/// One side's rate and CPU, summed over the rounds.
#[derive(Default)]
struct Side {
    bytes: u64,
    secs: f64,
    cpu: Cpu,
    rates: Vec<f64>,
}

impl Side {
    fn add(&mut self, bytes: u64, secs: f64, cpu: Cpu) {
        self.bytes += bytes;
        self.secs += secs;
        self.cpu.client += cpu.client;
        self.cpu.store += cpu.store;
        self.rates.push(mbps(bytes, secs));
    }

    fn rate(&self) -> f64 {
        mbps(self.bytes, self.secs)
    }

    /// CPU milliseconds per MB uploaded.
    fn per_mb(&self, cpu: f64) -> f64 {
        cpu * 1e3 / (self.bytes as f64 / 1e6).max(1e-9)
    }
}

/// Runs `f`, returning its result, its wall seconds and the CPU spent meanwhile.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64, Cpu)> {
    super::settle();
    let cpu = Cpu::now();
    let start = std::time::Instant::now();
    let out = f()?;
    let secs = start.elapsed().as_secs_f64();
    Ok((out, secs, Cpu::now().since(cpu)))
}

/// The upload rows, `rounds_n` rounds.
pub fn rows(
    s: &Sizes,
    root: &Path,
    t: &S3Target,
    rounds_n: usize,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let storage = Arc::new(S3RemoteStorage::new(t.config.clone())?);
    let bare = Bare::new(storage.client().clone(), &t.config)?;
    let result = rounds(s, root, (&storage, &bare), t, rounds_n, lines);
    if t.cleanup
        && let Err(e) = bare.delete_all()
    {
        eprintln!("cleanup of the benchmark's objects failed: {e}");
    }
    result
}

fn rounds(
    s: &Sizes,
    root: &Path,
    (storage, bare): (&Arc<S3RemoteStorage>, &Bare),
    t: &S3Target,
    rounds_n: usize,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let (mut sdk, mut backend, mut krabka) = (Side::default(), Side::default(), Side::default());
    let mut floor = Side::default();
    for round in 0..rounds_n {
        let p = Prepared::new(root.join(format!("upload-{round}")), storage.clone(), s)?;
        // The other cases upload the same files under links: run_once's local retention
        // deletes the log's own once they are copied, and in most rounds it does not run last.
        let segments = p.linked(&root.join(format!("upload-{round}-links")))?;
        let files: Vec<_> = segments
            .iter()
            .flat_map(|s| [&s.log_path, &s.index_path, &s.time_index_path])
            .filter_map(|f| std::fs::metadata(f).ok().map(|m| (f.clone(), m.len())))
            .collect();
        let bytes: u64 = files.iter().map(|(_, n)| n).sum();
        // 0: sdk, 1: backend, 2: krabka, 3: the sdk with Content-MD5; round r starts with case
        // r mod 4, so no case always runs first (or right after another).
        let backend_alone = p.backend();
        let mut p = Some(p);
        for step in 0..CASES {
            match (step + round) % CASES {
                0 => {
                    let (_, secs, cpu) = timed(|| {
                        bare.upload(&files, &format!("up-{round}"), COPY_CONCURRENCY)
                            .map(drop)
                    })?;
                    sdk.add(bytes, secs, cpu);
                }
                3 => {
                    let (_, secs, cpu) = timed(|| {
                        bare.upload_as(
                            &files,
                            &format!("md5-{round}"),
                            COPY_CONCURRENCY,
                            Body::Md5Unsigned,
                        )
                        .map(drop)
                    })?;
                    floor.add(bytes, secs, cpu);
                }
                1 => {
                    let (_, secs, cpu) = timed(|| backend_alone.copy(&segments, COPY_CONCURRENCY))?;
                    backend.add(bytes, secs, cpu);
                }
                _ => {
                    let prepared = p.take().ok_or("the log was uploaded already")?;
                    let (run, _, cpu) = timed(|| prepared.upload_run().map(|(_, run)| run))?;
                    krabka.add(run.bytes, run.secs, cpu);
                }
            }
        }
        // What the round wrote, before the next (a memstore cluster holds little).
        if t.cleanup {
            bare.delete_all()?;
        }
        std::fs::remove_dir_all(root.join(format!("upload-{round}-links")))?;
    }
    let name = &t.label;
    let each = |side: &Side| {
        side.rates
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    lines.push(Line::cmp(
        format!("upload to {name} (run_once, default TieringConfig), MB/s over {rounds_n} rounds (each round's); baseline: bare SDK, {COPY_CONCURRENCY} files in flight, same rounds"),
        (format!("{:.1} ({})", krabka.rate(), each(&krabka)), krabka.rate()),
        (format!("{:.1} ({})", sdk.rate(), each(&sdk)), sdk.rate()),
        Target::AtLeast(0.9),
    ));
    lines.push(Line::cmp(
        format!("the {name} backend alone ({COPY_CONCURRENCY} copies at once), MB/s over the same rounds; baseline: bare SDK"),
        (format!("{:.1} ({})", backend.rate(), each(&backend)), backend.rate()),
        rate(sdk.rate()),
        Target::None,
    ));
    lines.push(Line::cmp(
        format!("floor: bare SDK with each body's Content-MD5, unsigned payload ({COPY_CONCURRENCY} files in flight; the requests of a client verifying by the MD5 ETag), MB/s over the same rounds; baseline: bare SDK"),
        (format!("{:.1} ({})", floor.rate(), each(&floor)), floor.rate()),
        rate(sdk.rate()),
        Target::None,
    ));
    lines.push(Line::cmp(
        "run_once against that floor, MB/s over the same rounds; baseline: the floor".to_string(),
        rate(krabka.rate()),
        rate(floor.rate()),
        Target::None,
    ));
    for (what, side) in [
        ("run_once", &krabka),
        ("backend alone", &backend),
        ("floor (SDK + Content-MD5)", &floor),
    ] {
        lines.push(Line::cmp(
            format!("client CPU ms per MB uploaded, {what}; baseline: bare SDK"),
            rate(side.per_mb(side.cpu.client)),
            rate(sdk.per_mb(sdk.cpu.client)),
            Target::None,
        ));
        // The in-process server runs in this process: its CPU is the client's, and a store
        // found on this machine then belongs to someone else.
        if t.server.is_none() && sdk.cpu.store > 0.0 {
            lines.push(Line::cmp(
                format!(
                    "store CPU ms per MB uploaded (radosgw + ceph-osd), {what}; baseline: bare SDK"
                ),
                rate(side.per_mb(side.cpu.store)),
                rate(sdk.per_mb(sdk.cpu.store)),
                Target::None,
            ));
        }
    }
    Ok(())
}
