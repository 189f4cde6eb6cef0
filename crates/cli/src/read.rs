//! `krabka read`: print records from a seq on, following the log with `--follow`.

use std::io::Write;
use std::time::{Duration, Instant};

use krabka_storage::Record;

use crate::args::ReadArgs;
use crate::error::Result;
use crate::inspect::{show_bytes, timestamp};
use crate::reader::LocalReader;
use crate::{human, interrupt, output};

/// Time between polls of a caught-up `--follow`.
const POLL: Duration = Duration::from_millis(200);
/// Records fetched per step.
const STEP: u64 = 1000;

/// One record as a line: `seq<TAB>timestamp<TAB>key<TAB>value`.
pub fn record_line(r: &Record, value_chars: usize) -> String {
    let key = r
        .message
        .key
        .as_ref()
        .map_or_else(|| "-".to_owned(), |k| show_bytes(k, 200));
    format!(
        "{}\t{}\t{key}\t{}",
        r.seq,
        timestamp(r.message.timestamp),
        show_bytes(&r.message.value, value_chars)
    )
}

/// Source of records for `read`: the local files, or both tiers.
pub trait Source {
    /// Up to `max` records from where the previous call stopped; empty when caught up.
    fn next_records(&mut self, max: usize) -> Result<Vec<Record>>;
}

impl Source for LocalReader {
    fn next_records(&mut self, max: usize) -> Result<Vec<Record>> {
        self.poll(max)
    }
}

/// Runs `krabka read`.
///
/// # Errors
/// When the log cannot be read or stdout is closed.
pub fn run(args: &ReadArgs) -> Result<()> {
    match &args.remote.remote {
        Some(_) => {
            let mut source = crate::tier::TieredSource::open(&args.dir, &args.remote, args.from)?;
            print_records(args, &mut source)
        }
        None => print_records(args, &mut LocalReader::new(&args.dir, args.from)),
    }
}

fn print_records(args: &ReadArgs, source: &mut dyn Source) -> Result<()> {
    if args.follow {
        interrupt::install();
    }
    let started = Instant::now();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    let mut range: Option<(u64, u64)> = None;
    loop {
        let left = args
            .max
            .map_or(STEP, |m| m.saturating_sub(printed).min(STEP));
        if left == 0 || interrupt::requested() {
            break;
        }
        let records = source.next_records(usize::try_from(left).unwrap_or(usize::MAX))?;
        if records.is_empty() {
            out.flush().map_err(|e| output::write_error(&e))?;
            let timed_out = args.timeout.is_some_and(|t| started.elapsed() >= t);
            if !args.follow || timed_out {
                break;
            }
            std::thread::sleep(POLL);
            continue;
        }
        for r in &records {
            writeln!(out, "{}", record_line(r, args.value_chars))
                .map_err(|e| output::write_error(&e))?;
            range = Some((range.map_or(r.seq, |(a, _)| a), r.seq));
        }
        printed += records.len() as u64;
        if args.follow {
            out.flush().map_err(|e| output::write_error(&e))?;
        }
    }
    out.flush().map_err(|e| output::write_error(&e))?;
    match range {
        Some((a, b)) => eprintln!("read {} records (seq {a}..={b})", human::count(printed)),
        None => eprintln!("no records from seq {}", args.from),
    }
    Ok(())
}
