//! `krabka read`: print records from a seq on, following the log with `--follow`.

use std::io::Write;
use std::time::{Duration, Instant};

use krabka_storage::Record;
use krabka_storage::view::LogView;

use crate::args::ReadArgs;
use crate::error::{CliError, Result};
use crate::escape;
use crate::inspect::timestamp;
use crate::output::errln;
use crate::source::{ReplicaSource, Source, TieredSource};
use crate::{human, interrupt, output};

/// Time between polls of a caught-up `--follow`.
const POLL: Duration = Duration::from_millis(200);
/// Records fetched per step.
const STEP: u64 = 1000;

/// Characters of a key printed at least, whatever `--value-chars` says.
const KEY_CHARS: usize = 200;

/// One record as a line: `seq<TAB>timestamp<TAB>key<TAB>value`, key and value escaped
/// ([`escape`](crate::escape): no tab, newline or control byte is left in them, `-` is no key).
pub fn record_line(r: &Record, value_chars: usize) -> String {
    let key = escape::escape_key(r.message.key.as_deref(), value_chars.max(KEY_CHARS));
    format!(
        "{}\t{}\t{key}\t{}",
        r.seq,
        timestamp(r.message.timestamp),
        escape::escape(&r.message.value, value_chars)
    )
}

/// Runs `krabka read`.
///
/// # Errors
/// When the log cannot be read (after printing every record before the problem) or stdout
/// fails; a closed stdout ends the command quietly.
pub fn run(args: &ReadArgs) -> Result<()> {
    // No log directory: the remote tier alone, as a read replica (`--replica`, implied).
    let Some(dir) = &args.dir else {
        let mut source = ReplicaSource::open(args)?;
        let result = print_records(args, &mut source);
        return source.conclude(result, args.from);
    };
    match &args.remote.remote {
        Some(_) => {
            let mut source = TieredSource::open(dir, &args.remote, args.from)?;
            print_records(args, &mut source)
        }
        None => {
            let mut reader = LogView::new(dir).reader(args.from);
            print_records(args, &mut reader)?;
            if let Some(tail) = reader.incomplete_tail() {
                errln!(
                    "note: {} ends with {} bytes of an incomplete batch at byte {} (a write in progress, \
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

/// How a read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Caught up with the end of the log (without `--follow`).
    Caught,
    /// `--max` records were printed.
    Max,
    /// `--timeout` passed; `follow` says whether the read was following the log.
    Timeout { follow: bool },
    /// A signal (with `--follow`, which installs the handler).
    Signal,
}

/// Prints records until `--max`, the end of the log (without `--follow`), a signal or
/// `--timeout`, which bounds the whole command by the wall clock whatever the writer does;
/// then a summary on stderr that says how it ended and, when the read may be incomplete, the
/// seq it stopped before (and the command fails).
fn print_records(args: &ReadArgs, source: &mut dyn Source) -> Result<()> {
    if args.follow {
        interrupt::install();
    }
    // `--timeout` is at most a year (args::parse_timeout); checked all the same.
    let deadline = args.timeout.and_then(|t| Instant::now().checked_add(t));
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    let mut range: Option<(u64, u64)> = None;
    let result = loop {
        let left = args
            .max
            .map_or(STEP, |m| m.saturating_sub(printed).min(STEP));
        if left == 0 {
            break Ok(End::Max);
        }
        if interrupt::requested() {
            break Ok(End::Signal);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break Ok(End::Timeout {
                follow: args.follow,
            });
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
                break Ok(End::Caught);
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
    // The seq the read stopped before: the next one it would have printed.
    let next = range.map_or(args.from, |(_, b)| b.saturating_add(1));
    let end = match (result, flushed) {
        (Err(e), _) | (Ok(_), Err(e)) if output::is_broken_pipe(&e) => return Err(e),
        (Err(e), _) => {
            errln!("{summary}; stopped before seq {next} by the error below");
            return Err(e);
        }
        (Ok(_), Err(e)) => return Err(e),
        (Ok(end), Ok(())) => end,
    };
    finish(args, source, end, &summary, next)
}

/// The summary of a read that ended at `end` without an error, and the command's result.
fn finish(args: &ReadArgs, source: &dyn Source, end: End, summary: &str, next: u64) -> Result<()> {
    let lost: Vec<String> = source
        .lost()
        .iter()
        .map(|r| format!("{}..={}", r.start(), r.end()))
        .collect();
    let lost_note = if lost.is_empty() {
        String::new()
    } else {
        format!(
            "; seqs {} are lost (no tier holds them) and were skipped",
            lost.join(", ")
        )
    };
    match end {
        End::Signal => {
            errln!("{summary}");
            Err(CliError::interrupted(format!(
                "the read may be incomplete: {} before seq {next} (records from there on, if \
                 any, were not read); the records before were printed{lost_note}",
                interrupt::stopped()
            ))
            .hint(format!("read on with --from {next}")))
        }
        End::Timeout { follow: false } => {
            errln!("{summary}");
            Err(CliError::new(format!(
                "the read may be incomplete: --timeout ended it before seq {next} (records \
                 from there on, if any, were not read); the records before were printed{lost_note}"
            ))
            .hint(format!(
                "read on with --from {next}, or give it a longer --timeout"
            )))
        }
        _ if !lost.is_empty() => {
            errln!("{summary}{}", ending(args, end, next));
            Err(CliError::new(format!(
                "the log is incomplete: seqs {} are lost (no tier holds them); every other \
                 record read was printed",
                lost.join(", ")
            ))
            .hint(
                "`krabka recover` reported the damaged or missing remote segments behind them, \
                 or `krabka repair` the damaged local records (`krabka verify DIR` lists those \
                 holes, the accepted ones too)",
            ))
        }
        _ => {
            errln!("{summary}{}", ending(args, end, next));
            Ok(())
        }
    }
}

/// What the summary of a read that was not cut short adds: why it ended, and where a next read
/// would start.
fn ending(args: &ReadArgs, end: End, next: u64) -> String {
    match end {
        End::Max => format!(
            ", the --max of {}; the log may hold more from seq {next}",
            human::count(args.max.unwrap_or_default())
        ),
        End::Timeout { .. } => {
            format!("; --timeout ended the follow, the next seq is {next}")
        }
        End::Caught | End::Signal => String::new(),
    }
}
