//! `krabka demo`: the whole life of a tiered log in one run, checked record by record.
//!
//! 1. append N generated records to a log with small segments;
//! 2. tier: copy every closed segment to the remote and apply local retention, so most of the
//!    data is left only in the remote tier;
//! 3. read everything back from the first seq, across both tiers, and compare each record with
//!    what the generator says it must be;
//! 4. print a summary: sizes, rates, where each seq range lives, remote requests, cache hits.

use std::path::Path;
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::{TieredLog, TieringStats};

use crate::args::DemoArgs;
use crate::error::{CliError, Result};
use crate::generate::Generator;
use crate::output::outln;
use crate::remote::{self, RemoteSpec};
use crate::tiered::{self, Tiered, tiering_error};
use crate::{human, interrupt, progress, workdir};

/// Records per append call and per read call.
const BATCH: usize = 1000;
/// Rounds after which a tiering that still makes progress is considered stuck.
const MAX_ROUNDS: u32 = 10_000;

/// What a demo run measured; printed by [`Summary::print`].
#[derive(Debug, Clone)]
pub struct Summary {
    /// Records appended.
    pub records: u64,
    /// Bytes of record batches appended (headers included: what the `.log` files grew by).
    pub bytes: u64,
    /// Time spent appending.
    pub append_time: Duration,
    /// Time spent tiering (copy and local retention).
    pub tier_time: Duration,
    /// Records read back and found identical to what was written.
    pub verified: u64,
    /// Records read back that differed (or were missing).
    pub mismatched: u64,
    /// Time spent reading back.
    pub read_time: Duration,
    /// Local segments (with records) at the end.
    pub local_segments: usize,
    /// Finished remote segments at the end.
    pub remote_segments: usize,
    /// Counters of the tiered log at the end.
    pub stats: TieringStats,
    /// Counters after tiering and before the read-back (to tell the read's own requests).
    pub stats_before_read: TieringStats,
    /// Which seqs live where.
    pub placement: Vec<String>,
    /// The remote, as named.
    pub remote: String,
    /// The directory of the run.
    pub dir: String,
}

impl Summary {
    /// Whether every record came back intact.
    pub fn all_verified(&self) -> bool {
        self.mismatched == 0 && self.verified == self.records
    }

    /// The read-back cache hit rate (hits over lookups during the read).
    pub fn read_cache_hit_rate(&self) -> String {
        let hits = (self.stats.cache_hits).saturating_sub(self.stats_before_read.cache_hits);
        let misses = (self.stats.cache_misses).saturating_sub(self.stats_before_read.cache_misses);
        human::percent(hits, hits + misses)
    }

    /// Prints the summary to stdout.
    ///
    /// # Errors
    /// When stdout cannot be written.
    pub fn print(&self) -> Result<()> {
        let s = &self.stats;
        let before = &self.stats_before_read;
        let read_requests = (s.requests.fetch_log + s.requests.fetch_index)
            .saturating_sub(before.requests.fetch_log + before.requests.fetch_index);
        let hits = s.cache_hits.saturating_sub(before.cache_hits);
        let lookups = hits + s.cache_misses.saturating_sub(before.cache_misses);
        outln!()?;
        outln!(
            "krabka demo — {} records in {}, remote {}",
            human::count(self.records),
            self.dir,
            self.remote
        )?;
        outln!(
            "  records         {} ({} of record batches)",
            human::count(self.records),
            human::bytes(self.bytes)
        )?;
        outln!(
            "  append          {} → {:.1} MB/s ({:.0} records/s)",
            human::duration(self.append_time),
            human::mb_per_s(self.bytes, self.append_time),
            human::per_second(self.records, self.append_time)
        )?;
        outln!(
            "  tier            {} → copied {} segments ({}), {:.1} MB/s",
            human::duration(self.tier_time),
            s.segments_copied,
            human::bytes(s.bytes_copied),
            human::mb_per_s(s.bytes_copied, self.tier_time)
        )?;
        outln!(
            "  segments        {} local ({}), {} remote ({})",
            self.local_segments,
            human::bytes(s.local_bytes),
            self.remote_segments,
            human::bytes(s.remote_bytes)
        )?;
        for line in &self.placement {
            outln!("    {line}")?;
        }
        outln!(
            "  remote requests {} total: {} copy, {} fetch log, {} fetch index, {} delete ({} during read-back)",
            s.requests.total(),
            s.requests.copy,
            s.requests.fetch_log,
            s.requests.fetch_index,
            s.requests.delete,
            read_requests
        )?;
        outln!(
            "  cache           {} hit rate during read-back ({} of {} lookups), {} held",
            self.read_cache_hit_rate(),
            human::count(hits),
            human::count(lookups),
            human::bytes(s.cache_bytes)
        )?;
        outln!(
            "  read-back       {} → {:.1} MB/s ({:.0} records/s) across both tiers",
            human::duration(self.read_time),
            human::mb_per_s(self.bytes, self.read_time),
            human::per_second(self.verified, self.read_time)
        )?;
        if self.all_verified() {
            outln!(
                "  verified        all {} records match what was written",
                human::count(self.verified)
            )?;
        } else {
            outln!(
                "  verified        {} of {} records; {} MISMATCHED",
                human::count(self.verified),
                human::count(self.records),
                human::count(self.mismatched)
            )?;
        }
        Ok(())
    }
}

/// Runs `krabka demo` and prints its summary.
///
/// Ctrl-C, SIGTERM or SIGHUP stops it between two steps (batches of appends, tiering rounds,
/// batches of reads); a temporary directory is then removed before the command exits (128 +
/// the signal's number: 130, 143 or 129), naming the signal.
///
/// # Errors
/// When any step fails, or any record read back differs from what was written.
pub fn run(args: &DemoArgs) -> Result<()> {
    // Before anything is created: from here on Ctrl-C, SIGTERM and SIGHUP only ask the steps
    // to stop, and the temporary directory is removed below.
    interrupt::install();
    let work = workdir::WorkDir::new(args.dir.as_deref())?;
    let result = run_in(&work, args);
    match result {
        Err(_) if interrupt::requested() => Err(CliError::interrupted(format!(
            "demo {} before it finished; {}",
            interrupt::stopped(),
            work.finish()
        ))),
        other => other,
    }
}

/// Checks for Ctrl-C (or SIGTERM, SIGHUP) between two steps of the demo.
fn check_interrupt() -> Result<()> {
    if interrupt::requested() {
        Err(CliError::interrupted(format!(
            "demo {} before it finished",
            interrupt::stopped()
        )))
    } else {
        Ok(())
    }
}

fn run_in(work: &workdir::WorkDir, args: &DemoArgs) -> Result<()> {
    let log_dir = work.path().join("log");
    let spec = match remote::spec(&args.remote)? {
        Some(spec) => spec,
        None => RemoteSpec::Fs(work.path().join("remote")),
    };
    outln!(
        "krabka demo: {} records, {} segments, log {}, remote {}{}",
        human::count(args.records),
        human::bytes(args.segment_bytes),
        log_dir.display(),
        spec.describe(),
        if work.is_temporary() {
            " (temporary; pass --dir to keep it)"
        } else {
            ""
        }
    )?;
    let options = Options {
        max_bytes: args.segment_bytes,
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    let mut config = tiered::config(&args.retention);
    // Keep about four segments locally unless told otherwise: most data ends up remote-only.
    config.local_retention_bytes = Some(
        args.retention
            .local_retention_bytes
            .unwrap_or(args.segment_bytes.saturating_mul(4)),
    );
    // The remote first: when it cannot be used, nothing has been written to the directory yet.
    check_interrupt()?;
    let tiered = tiered::open(
        &log_dir,
        spec,
        &args.remote,
        options,
        config,
        krabka_tiering::Access::Owner,
        None,
    )?;
    let summary = run_on(&tiered, args, work.path().display().to_string())?;
    summary.print()?;
    tiered
        .part
        .into_log()
        .close()
        .map_err(|e| tiering_error("cannot close", &log_dir, e))?;
    if summary.all_verified() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "{} of {} records read back from {} did not match what was written",
            summary.mismatched,
            summary.records,
            log_dir.display()
        ))
        .hint("run `krabka verify` on the log directory (pass --dir to keep it)"))
    }
}

fn run_on(tiered: &Tiered, args: &DemoArgs, dir: String) -> Result<Summary> {
    let log = tiered.part.log();
    let log_dir = log.log().dir().to_path_buf();
    let generator = Generator::new(args.seed);
    if log.last_seq() != 0 {
        return Err(
            CliError::new(format!("{} already holds records", log_dir.display()))
                .hint("pass a new or empty --dir"),
        );
    }

    let (bytes, append_time) = append(log, &log_dir, &generator, args.records)?;
    let tier_time = tier(log, &log_dir)?;
    let stats_before_read = log.stats();
    let (verified, mismatched, read_time) = read_back(log, &log_dir, &generator, args.records)?;

    let placement = tiered.placement()?;
    Ok(Summary {
        records: args.records,
        bytes,
        append_time,
        tier_time,
        verified,
        mismatched,
        read_time,
        local_segments: placement.local.len(),
        remote_segments: placement.remote.len(),
        stats: log.stats(),
        stats_before_read,
        placement: tiered::describe_placement(&placement),
        remote: tiered.remote.describe(),
        dir,
    })
}

/// Step 1: appends `records` generated records in batches; returns the bytes appended
/// (the record batches as written, headers included) and the time taken, including the final
/// sync.
fn append(
    log: &TieredLog,
    log_dir: &Path,
    generator: &Generator,
    records: u64,
) -> Result<(u64, Duration)> {
    let bar = progress::count_bar("append", records);
    let started = Instant::now();
    let written_before = log.log().stats().appended_bytes;
    let mut batch: Vec<Message> = Vec::with_capacity(BATCH);
    let mut i = 0u64;
    while i < records {
        check_interrupt()?;
        batch.clear();
        let end = i.saturating_add(BATCH as u64).min(records);
        batch.extend((i..end).map(|n| generator.message(n)));
        log.append_batch(&batch)
            .map_err(|e| tiering_error("cannot append to", log_dir, e))?;
        i = end;
        bar.set_position(i);
    }
    log.sync()
        .map_err(|e| tiering_error("cannot sync", log_dir, e))?;
    let append_time = started.elapsed();
    bar.finish_and_clear();
    let bytes = log
        .log()
        .stats()
        .appended_bytes
        .saturating_sub(written_before);
    Ok((bytes, append_time))
}

/// Step 2: tiering rounds until nothing is left to copy or delete (the active segment stays
/// local); returns the time taken.
fn tier(log: &TieredLog, log_dir: &Path) -> Result<Duration> {
    let closed: u64 = log
        .log()
        .segments()
        .iter()
        .filter(|s| !s.active)
        .map(|s| s.size)
        .sum();
    let bar = progress::bytes_bar("tier", closed);
    let started = Instant::now();
    for round in 0.. {
        check_interrupt()?;
        let report = log
            .run_once()
            .map_err(|e| tiering_error("tiering round failed on", log_dir, e))?;
        if let Some(first) = report.failures.first() {
            return Err(CliError::new(format!(
                "tiering {} failed: {}",
                log_dir.display(),
                remote::brief(&first.to_string())
            ))
            .hint("check that the remote is reachable and writable"));
        }
        bar.inc(report.bytes_copied);
        if report.segments_copied == 0 && report.local_segments_deleted == 0 {
            break;
        }
        if round >= MAX_ROUNDS {
            return Err(CliError::new("tiering did not settle")
                .hint("this is a bug; please report it with the command line used"));
        }
    }
    let tier_time = started.elapsed();
    bar.finish_and_clear();
    Ok(tier_time)
}

/// Step 3: reads everything back from the first seq, across both tiers, and checks every
/// record; returns the records verified and mismatched (a record missing counts as
/// mismatched), and the time taken.
fn read_back(
    log: &TieredLog,
    log_dir: &Path,
    generator: &Generator,
    records: u64,
) -> Result<(u64, u64, Duration)> {
    let first = log
        .first_seq()
        .map_err(|e| tiering_error("cannot find the first seq of", log_dir, e))?;
    let bar = progress::count_bar("read", records);
    let started = Instant::now();
    let (mut verified, mut mismatched) = (0u64, 0u64);
    let mut next = first;
    let last = log.last_seq();
    while next <= last {
        check_interrupt()?;
        let records = log
            .read(next, BATCH)
            .map_err(|e| tiering_error("cannot read", log_dir, e))?;
        let Some(tail) = records.last() else { break };
        let tail = tail.seq;
        for (expected, r) in (next..).zip(&records) {
            // Seq s holds generated record s - 1 (the first record has seq 1).
            if r.seq == expected
                && r.seq
                    .checked_sub(1)
                    .is_some_and(|i| generator.matches(i, &r.message))
            {
                verified += 1;
            } else {
                mismatched += 1;
            }
        }
        next = tail.saturating_add(1);
        bar.set_position(verified + mismatched);
    }
    mismatched += records.saturating_sub(verified + mismatched);
    let read_time = started.elapsed();
    bar.finish_and_clear();
    if first != 1 {
        mismatched = mismatched.max(first.saturating_sub(1));
    }
    Ok((verified, mismatched, read_time))
}
