//! `krabka produce`: append stdin lines or generated records to a local log.
//!
//! Records are appended in batches of `BATCH`; each batch is checked whole (every line read,
//! valid UTF-8, not too large) before it is appended, so a bad line appends nothing of its
//! batch. Whatever happens, the records appended so far are synced before the command reports,
//! and a failure says exactly what was appended and where the input stopped:
//! `appended 2,000 records (seq 1..=2000) before: invalid UTF-8 at line 2501`, so a retry can
//! resume from the right line instead of duplicating records.

use std::io::BufRead;
use std::path::Path;
use std::time::Instant;

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};

use crate::args::ProduceArgs;
use crate::error::{CliError, Result, storage};
use crate::generate::Generator;
use crate::output::outln;
use crate::{human, interrupt, output, progress};

/// Records per `append_batch` call.
const BATCH: usize = 1000;

/// Opens (creating) the log at `dir` for appending with `segment_bytes` segments. Appends are
/// written without fsync; [`run`] syncs once at the end ([`Log::sync`], then [`Log::close`]),
/// which is what a bulk load wants. What recovery found is printed on stderr.
///
/// # Errors
/// When the log cannot be opened (one line naming the file, byte and seqs of any damage).
pub fn open_log(dir: &Path, segment_bytes: u64) -> Result<Log> {
    let opts = Options {
        max_bytes: segment_bytes,
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    let log = Log::open(dir, opts).map_err(|e| storage("cannot open log", dir, e))?;
    crate::error::print_recovery(log.recovery_report());
    Ok(log)
}

/// Why a produce stopped before the end of its input.
#[derive(Debug)]
enum Stop {
    /// Bad input or a failed append: what, and the line (or generated record) it is about.
    Failed { what: String, at: Option<u64> },
    /// Ctrl-C.
    Interrupted,
}

/// What has been appended so far.
struct Appender<'a> {
    log: &'a Log,
    dir: &'a Path,
    /// The log's last seq before this command appended anything.
    start_last: u64,
    /// Bytes of the messages appended.
    bytes: u64,
}

impl Appender<'_> {
    /// Records this command appended (including the part of a failed batch that the log kept).
    fn appended(&self) -> u64 {
        self.log.last_seq().saturating_sub(self.start_last)
    }

    /// Appends `batch` whole, or reports what failed and the input line of the first record
    /// not appended (`line_of_first` is the line of the batch's first record).
    fn flush(&mut self, batch: &mut Vec<Message>, line_of_first: u64) -> Result<(), Stop> {
        if batch.is_empty() {
            return Ok(());
        }
        let before = self.appended();
        match self.log.append_batch(batch) {
            Ok(_) => {
                self.bytes += batch.iter().map(|m| m.encoded_len() as u64).sum::<u64>();
                batch.clear();
                Ok(())
            }
            Err(e) => {
                let kept = self.appended().saturating_sub(before);
                Err(Stop::Failed {
                    what: CliError::at("cannot append to", self.dir, e).to_string(),
                    at: Some(line_of_first + kept),
                })
            }
        }
    }
}

/// Runs `krabka produce`.
///
/// # Errors
/// When the log cannot be opened, the input has a bad line, an append or the sync fails (after
/// syncing and naming what was appended), or stdout cannot be written.
pub fn run(args: &ProduceArgs) -> Result<()> {
    interrupt::install();
    let log = open_log(&args.dir, args.segment_bytes)?;
    let started = Instant::now();
    let mut appender = Appender {
        log: &log,
        dir: &args.dir,
        start_last: log.last_seq(),
        bytes: 0,
    };
    let (stopped, unit) = match args.generate {
        Some(n) => (generate(&mut appender, args.seed, n), "record"),
        None => (
            read_stdin(
                &mut appender,
                args.key_separator.as_deref(),
                log.options().max_message_bytes,
            ),
            "line",
        ),
    };
    let appended = appender.appended();
    let bytes = appender.bytes;
    let range = (appended > 0).then(|| (appender.start_last + 1, log.last_seq()));
    // Whatever happened, what was appended goes to stable storage before anything is reported.
    let synced = log
        .sync()
        .and_then(|()| log.close())
        .map_err(|e| storage("cannot sync log", &args.dir, e));
    report(
        stopped,
        synced,
        &Produced {
            dir: &args.dir,
            unit,
            appended,
            bytes,
            range,
            started,
        },
    )
}

/// What `produce` appended, for its last line.
struct Produced<'a> {
    dir: &'a Path,
    /// `line` (stdin) or `record` (`--generate`).
    unit: &'static str,
    appended: u64,
    bytes: u64,
    /// The seqs appended, if any.
    range: Option<(u64, u64)>,
    started: Instant,
}

/// The line `produce` ends with, or its error: how it stopped, and whether what was appended
/// reached stable storage.
fn report(stopped: Result<(), Stop>, synced: Result<()>, p: &Produced<'_>) -> Result<()> {
    let Produced {
        dir,
        unit,
        appended,
        bytes,
        range,
        started,
    } = *p;
    let done = match range {
        Some((a, b)) => format!(
            "appended {} records (seq {a}..={b})",
            human::count(appended)
        ),
        None => "appended no records".to_owned(),
    };
    let dir = dir.display();
    match (stopped, synced) {
        (Ok(()), Ok(())) => {
            let elapsed = started.elapsed();
            let line = match range {
                Some(_) => format!(
                    "{done}, {} in {} ({}, {:.0} records/s) to {dir}, synced to disk",
                    human::bytes(bytes),
                    human::duration(elapsed),
                    human::rate(bytes, elapsed),
                    human::per_second(appended, elapsed),
                ),
                None => format!("appended no records to {dir} (synced to disk)"),
            };
            outln!("{line}").map_err(|e| {
                if output::is_broken_pipe(&e) {
                    e
                } else {
                    CliError::new(format!(
                        "{done} to {dir}, synced to disk, but cannot report it: {e}"
                    ))
                }
            })
        }
        (Err(Stop::Interrupted), Ok(())) => Err(CliError::interrupted(format!(
            "stopped by Ctrl-C: {done} to {dir}, synced to disk"
        ))),
        (Err(Stop::Failed { what, at }), Ok(())) => {
            let at = at.map_or_else(String::new, |n| format!(" at {unit} {n}"));
            let resume = appended + 1;
            let hint = if unit == "line" {
                format!(
                    "they are synced to disk in {dir}; nothing from line {resume} on was appended: \
                     fix the input and append from line {resume} on (e.g. `tail -n +{resume} FILE | krabka produce {dir}`)"
                )
            } else {
                format!(
                    "they are synced to disk in {dir}; nothing from record {resume} on was appended"
                )
            };
            Err(CliError::new(format!("{done} before: {what}{at}")).hint(hint))
        }
        (stopped, Err(sync)) => {
            let why = match stopped {
                Ok(()) => String::new(),
                Err(Stop::Interrupted) => " before Ctrl-C".to_owned(),
                Err(Stop::Failed { what, at }) => {
                    let at = at.map_or_else(String::new, |n| format!(" at {unit} {n}"));
                    format!(" before: {what}{at}")
                }
            };
            Err(CliError::new(format!(
                "{done}{why}, but they may not be on stable storage: {sync}"
            ))
            .hint(format!(
                "reopen the log (e.g. `krabka verify {dir}`) to see what is really on disk before appending again"
            )))
        }
    }
}

fn generate(appender: &mut Appender<'_>, seed: u64, n: u64) -> Result<(), Stop> {
    let generator = Generator::new(seed);
    let bar = progress::count_bar("produce", n);
    let mut batch: Vec<Message> = Vec::with_capacity(BATCH);
    let mut first_of_batch = 1u64;
    for i in 0..n {
        if interrupt::requested() {
            appender.flush(&mut batch, first_of_batch)?;
            bar.finish_and_clear();
            return Err(Stop::Interrupted);
        }
        batch.push(generator.message(i));
        if batch.len() == BATCH {
            appender.flush(&mut batch, first_of_batch)?;
            first_of_batch = i + 2;
            bar.set_position(i + 1);
        }
    }
    appender.flush(&mut batch, first_of_batch)?;
    bar.finish_and_clear();
    Ok(())
}

/// How long the stdin loop waits for a line before it looks at Ctrl-C again.
const POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Reads stdin lines on their own thread, so that Ctrl-C stops a `produce` that waits for
/// input (a terminal, an idle pipe) at once: the lines read so far are appended and synced.
fn stdin_lines() -> std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(BATCH);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        loop {
            let mut raw = Vec::new();
            match input.read_until(b'\n', &mut raw) {
                Ok(0) => break,
                Ok(_) => {
                    if tx.send(Ok(raw)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    break;
                }
            }
        }
    });
    rx
}

fn read_stdin(
    appender: &mut Appender<'_>,
    key_separator: Option<&str>,
    max_message_bytes: u64,
) -> Result<(), Stop> {
    use std::sync::mpsc::RecvTimeoutError;
    let lines = stdin_lines();
    let mut batch: Vec<Message> = Vec::with_capacity(BATCH);
    let mut line_no = 0u64;
    let mut first_of_batch = 1u64;
    loop {
        if interrupt::requested() {
            // Every line read so far is whole: append them, then stop.
            appender.flush(&mut batch, first_of_batch)?;
            return Err(Stop::Interrupted);
        }
        let mut raw = match lines.recv_timeout(POLL) {
            Ok(Ok(raw)) => raw,
            Ok(Err(e)) => {
                return Err(Stop::Failed {
                    what: format!("cannot read stdin: {e}"),
                    at: Some(line_no + 1),
                });
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        line_no += 1;
        if raw.last() == Some(&b'\n') {
            raw.pop();
            if raw.last() == Some(&b'\r') {
                raw.pop();
            }
        }
        let line = std::str::from_utf8(&raw).map_err(|e| Stop::Failed {
            what: format!("invalid UTF-8 (byte {} of the line)", e.valid_up_to() + 1),
            at: Some(line_no),
        })?;
        let msg = match key_separator.and_then(|sep| line.split_once(sep)) {
            Some((key, value)) => Message::new(value.to_owned()).with_key(key.to_owned()),
            None => Message::new(line.to_owned()),
        };
        let size = msg.encoded_len() as u64;
        if size > max_message_bytes {
            return Err(Stop::Failed {
                what: format!(
                    "a record of {} exceeds the largest accepted, {}",
                    human::bytes(size),
                    human::bytes(max_message_bytes)
                ),
                at: Some(line_no),
            });
        }
        batch.push(msg);
        if batch.len() == BATCH {
            appender.flush(&mut batch, first_of_batch)?;
            first_of_batch = line_no + 1;
        }
    }
    appender.flush(&mut batch, first_of_batch)
}
