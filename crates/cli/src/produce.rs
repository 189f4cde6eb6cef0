//! `krabka produce`: append stdin lines or generated records to a local log.

use std::io::BufRead;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

use crate::args::ProduceArgs;
use crate::error::{CliError, Result, storage};
use crate::generate::Generator;
use crate::{human, interrupt, progress};

/// Records per `append_batch` call.
const BATCH: usize = 1000;

/// Opens (creating) the log at `dir` for appending with `segment_bytes` segments. Appends are
/// written without fsync; [`run`] syncs once at the end ([`Log::sync`], then [`Log::close`]),
/// which is what a bulk load wants.
pub fn open_log(dir: &Path, segment_bytes: u64) -> Result<Log> {
    let opts = Options {
        max_bytes: segment_bytes,
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    Log::open(dir, opts).map_err(|e| storage("cannot open log", dir, e))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Runs `krabka produce`.
///
/// # Errors
/// When the log cannot be opened or written, or stdin cannot be read.
pub fn run(args: &ProduceArgs) -> Result<()> {
    interrupt::install();
    let log = open_log(&args.dir, args.segment_bytes)?;
    let started = Instant::now();
    let mut appended = 0u64;
    let mut bytes = 0u64;
    let mut first: Option<u64> = None;
    let mut last = 0u64;
    let mut batch: Vec<Message> = Vec::with_capacity(BATCH);
    let mut flush = |batch: &mut Vec<Message>| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        bytes += batch.iter().map(|m| m.encoded_len() as u64).sum::<u64>();
        let seqs = log
            .append_batch(batch)
            .map_err(|e| storage("cannot append to log", &args.dir, e))?;
        first.get_or_insert(*seqs.start());
        last = *seqs.end();
        appended += batch.len() as u64;
        batch.clear();
        Ok(())
    };
    if let Some(n) = args.generate {
        let generator = Generator::new(args.seed);
        let bar = progress::count_bar("produce", n);
        for i in 0..n {
            if interrupt::requested() {
                break;
            }
            batch.push(generator.message(i));
            if batch.len() == BATCH {
                flush(&mut batch)?;
                bar.set_position(i + 1);
            }
        }
        flush(&mut batch)?;
        bar.finish_and_clear();
    } else {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let line = line.map_err(|e| CliError::new(format!("cannot read stdin: {e}")))?;
            let msg = match args
                .key_separator
                .as_deref()
                .and_then(|sep| line.split_once(sep))
            {
                Some((key, value)) => Message::new(value.to_owned()).with_key(key.to_owned()),
                None => Message::new(line),
            };
            batch.push(msg.with_timestamp(now_ms()));
            if batch.len() == BATCH {
                flush(&mut batch)?;
            }
        }
        flush(&mut batch)?;
    }
    // Only now is everything appended on stable storage: say so only after it is.
    log.sync()
        .map_err(|e| storage("cannot sync log", &args.dir, e))?;
    log.close()
        .map_err(|e| storage("cannot close log", &args.dir, e))?;
    let elapsed = started.elapsed();
    match first {
        Some(first) => println!(
            "appended {} records (seq {first}..={last}), {} in {} ({}, {:.0} records/s) to {}, synced to disk",
            human::count(appended),
            human::bytes(bytes),
            human::duration(elapsed),
            human::rate(bytes, elapsed),
            human::per_second(appended, elapsed),
            args.dir.display()
        ),
        None => println!(
            "appended no records to {} (synced to disk)",
            args.dir.display()
        ),
    }
    Ok(())
}
