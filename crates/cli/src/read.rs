//! `krabka read`: print records from a seq on, following the log with `--follow`.

use std::io::Write;
use std::time::{Duration, Instant};

use krabka_storage::Record;

use crate::args::ReadArgs;
use crate::error::{CliError, Result};
use crate::inspect::{show_bytes, timestamp};
use crate::output::errln;
use crate::reader::LocalReader;
use crate::source::{Source, TieredSource};
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

/// Runs `krabka read`.
///
/// # Errors
/// When the log cannot be read (after printing every record before the problem) or stdout
/// fails; a closed stdout ends the command quietly.
pub fn run(args: &ReadArgs) -> Result<()> {
    match &args.remote.remote {
        Some(_) => {
            let mut source = TieredSource::open(&args.dir, &args.remote, args.from)?;
            print_records(args, &mut source)
        }
        None => {
            let mut reader = LocalReader::new(&args.dir, args.from);
            print_records(args, &mut reader)?;
            if let Some(tail) = reader.incomplete_tail() {
                errln!(
                    "note: {} ends with {} bytes of an incomplete frame at byte {} (a write in progress, \
                     or a torn write that the next open of the log moves aside)",
                    tail.path.display(),
                    tail.bytes,
                    tail.position
                );
            }
            Ok(())
        }
    }
}

/// Prints records until `--max`, the end of the log (without `--follow`), Ctrl-C or
/// `--timeout`, which bounds the whole command by the wall clock whatever the writer does.
fn print_records(args: &ReadArgs, source: &mut dyn Source) -> Result<()> {
    if args.follow {
        interrupt::install();
    }
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    let mut range: Option<(u64, u64)> = None;
    let mut cut_by_timeout = false;
    let result = loop {
        let left = args
            .max
            .map_or(STEP, |m| m.saturating_sub(printed).min(STEP));
        let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        if left == 0 || interrupt::requested() || timed_out {
            cut_by_timeout = timed_out && left > 0 && !args.follow;
            break Ok(());
        }
        let records = match source.next_records(usize::try_from(left).unwrap_or(usize::MAX)) {
            Ok(records) => records,
            Err(e) => break Err(e),
        };
        if records.is_empty() {
            if let Err(e) = out.flush() {
                break Err(output::write_error(&e));
            }
            if !args.follow {
                break Ok(());
            }
            let nap = deadline.map_or(POLL, |d| {
                POLL.min(d.saturating_duration_since(Instant::now()))
            });
            std::thread::sleep(nap);
            continue;
        }
        let mut failed = None;
        for r in &records {
            if let Err(e) = writeln!(out, "{}", record_line(r, args.value_chars)) {
                failed = Some(output::write_error(&e));
                break;
            }
            range = Some((range.map_or(r.seq, |(a, _)| a), r.seq));
            printed += 1;
        }
        if let Some(e) = failed {
            break Err(e);
        }
        if args.follow
            && let Err(e) = out.flush()
        {
            break Err(output::write_error(&e));
        }
    };
    // What was decoded is printed before any failure is reported.
    let flushed = out.flush().map_err(|e| output::write_error(&e));
    let summary = match range {
        Some((a, b)) => format!("read {} records (seq {a}..={b})", human::count(printed)),
        None => format!("no records from seq {}", args.from),
    };
    match (result, flushed) {
        (Err(e), _) | (Ok(()), Err(e)) if output::is_broken_pipe(&e) => Err(e),
        (Err(e), _) => {
            errln!("{summary} before the error below");
            Err(e)
        }
        (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(())) if cut_by_timeout => {
            errln!("{summary}");
            let next = range.map_or(args.from, |(_, b)| b.saturating_add(1));
            Err(CliError::new(format!(
                "the read may be incomplete: --timeout ended it before seq {next} (records \
                 from there on, if any, were not read); the records before were printed"
            ))
            .hint(format!(
                "read on with --from {next}, or give it a longer --timeout"
            )))
        }
        (Ok(()), Ok(())) if !source.lost().is_empty() => {
            errln!("{summary}");
            let lost: Vec<String> = source
                .lost()
                .iter()
                .map(|r| format!("{}..={}", r.start(), r.end()))
                .collect();
            Err(CliError::new(format!(
                "the log is incomplete: seqs {} are lost (no tier holds them); every other \
                 record was printed",
                lost.join(", ")
            ))
            .hint("`krabka recover` reported the damaged or missing remote segments behind them"))
        }
        (Ok(()), Ok(())) => {
            errln!("{summary}");
            Ok(())
        }
    }
}
