//! `krabka bench`: append and read throughput of the local log on this machine.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

use crate::args::{BenchArgs, BenchSync};
use crate::error::{CliError, Result, storage};
use crate::output::outln;
use crate::{human, progress, workdir};

/// Runs `krabka bench`.
///
/// # Errors
/// When the directory cannot be used or the log fails.
pub fn run(args: &BenchArgs) -> Result<()> {
    let work = workdir::WorkDir::new(args.dir.as_deref())?;
    let dir: PathBuf = work.path().join("log");
    let sync = match args.sync {
        BenchSync::Never => SyncPolicy::Never,
        BenchSync::Batch => SyncPolicy::EveryN(1000),
        BenchSync::Every => SyncPolicy::EveryAppend,
    };
    let opts = Options {
        max_bytes: 64 << 20,
        sync,
        ..Options::default()
    };
    // At most 16 MiB (checked when the command line is read).
    let value_size = usize::try_from(args.value_size)
        .map_err(|_| CliError::new("--value-size is too large for this machine"))?;
    let log = Log::open(&dir, opts).map_err(|e| storage("cannot open log", &dir, e))?;
    crate::output::print_recovery(log.recovery_report());
    // One shared value: the bench measures the log, not the generator.
    let value = Bytes::from(vec![b'x'; value_size]);
    let batch_len = usize::try_from(args.batch).unwrap_or(100);
    let batch: Vec<Message> = (0..batch_len)
        .map(|i| {
            Message::new(value.clone())
                .with_key(format!("key-{:04}", i % 1000))
                .with_timestamp(1_704_067_200_000)
        })
        .collect();
    let (appended, append_time) = append(&log, &dir, &batch, args)?;
    // The bytes the record batches took on disk, headers included; per record on average.
    let bytes = log.stats().appended_bytes;
    let record_bytes = bytes.checked_div(appended).unwrap_or(0);

    let (read, read_time) = read_all(&log, &dir, appended)?;
    log.close()
        .map_err(|e| storage("cannot close log", &dir, e))?;
    if read != appended {
        return Err(CliError::new(format!(
            "read back {read} records of {appended} appended in {}",
            dir.display()
        ))
        .hint("run `krabka verify` on it"));
    }
    let line = |what: &str, d: Duration| {
        outln!(
            "{what:<7} {} records × {} in {}: {:.1} MB/s, {:.0} records/s",
            human::count(appended),
            human::bytes(record_bytes),
            human::duration(d),
            human::mb_per_s(bytes, d),
            human::per_second(appended, d)
        )
    };
    outln!(
        "bench: {} of records, batches of {}, sync {:?}, in {}",
        human::bytes(bytes),
        args.batch,
        args.sync,
        dir.display()
    )?;
    line("append", append_time)?;
    line("read", read_time)
}

/// Appends `args.records` records in batches of `args.batch`, then syncs; returns how many
/// were appended and the time taken.
fn append(log: &Log, dir: &Path, batch: &[Message], args: &BenchArgs) -> Result<(u64, Duration)> {
    let bar = progress::count_bar("append", args.records);
    let started = Instant::now();
    let mut appended = 0u64;
    while appended < args.records {
        let n = (args.records - appended).min(args.batch);
        let slice = batch
            .get(..usize::try_from(n).unwrap_or(0))
            .unwrap_or(batch);
        log.append_batch(slice)
            .map_err(|e| storage("cannot append to log", dir, e))?;
        appended += n;
        bar.set_position(appended);
    }
    log.sync().map_err(|e| storage("cannot sync log", dir, e))?;
    let append_time = started.elapsed();
    bar.finish_and_clear();
    Ok((appended, append_time))
}

/// Reads the whole log from its first seq (`appended` records are expected, for the progress
/// bar); returns the records read and the time taken.
fn read_all(log: &Log, dir: &Path, appended: u64) -> Result<(u64, Duration)> {
    let bar = progress::count_bar("read", appended);
    let started = Instant::now();
    let mut next = log.first_seq();
    let mut read = 0u64;
    loop {
        let records = log
            .read(next, 1000)
            .map_err(|e| storage("cannot read log", dir, e))?;
        let Some(last) = records.last() else { break };
        next = last.seq.saturating_add(1);
        read += records.len() as u64;
        bar.set_position(read);
    }
    let read_time = started.elapsed();
    bar.finish_and_clear();
    Ok((read, read_time))
}
