//! `krabka produce`: append stdin lines or generated records to a local log.
//!
//! One line of stdin is one record; lines are split at `\n` only (a `\r` before it stays in the
//! value). Records are appended in batches of `BATCH`, or of what stdin gave so far when its
//! writer pauses (a slow stream's records are appended, and acknowledged, as they come). A bad line (invalid UTF-8, too large,
//! a bad escape with `--escaped`) stops the command: every line before it is appended first
//! (the pending batch is flushed up to the line before the bad one), nothing from it on. With
//! `--all-or-nothing` the whole input is read and checked first (kept meanwhile in a temporary
//! file), and a bad line appends nothing.
//!
//! Whatever happens, the records appended so far are synced before the command reports, and a
//! failure says exactly which lines were appended and which were not: `appended 2,500 records
//! (seq 1..=2500) from lines 1..=2500; line 2501 is invalid: ...; nothing from line 2501 on
//! was appended`, so a retry can resume from the right line instead of duplicating records.

mod input;

use std::ops::RangeInclusive;
use std::path::Path;
use std::time::Instant;

use krabka_protocol::Message;
use krabka_storage::{Log, Options, SyncPolicy};
use krabka_tiering::{Access, Durability, TieringConfig};

use crate::args::{DurabilityArg, ProduceArgs};
use crate::error::{CliError, Result, storage};
use crate::generate::Generator;
use crate::output::outln;
use crate::tiered::{self, Tiered, tiering_error};
use crate::{human, interrupt, output, progress, remote};

/// Records per `append_batch` call: under `--durability bucket`, one group commit (the batch
/// returns once one tail object holds it).
const BATCH: usize = 1000;

/// The local log's options: `segment_bytes` segments, written without fsync; [`run`] syncs
/// once at the end, which is what a bulk load wants.
fn log_options(segment_bytes: u64) -> Options {
    Options {
        max_bytes: segment_bytes,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

/// Opens (creating) the log at `dir` for appending. What recovery found is printed on stderr.
///
/// # Errors
/// When the log cannot be opened (one line naming the file, byte and seqs of any damage).
fn open_log(dir: &Path, segment_bytes: u64) -> Result<Log> {
    let log = Log::open(dir, log_options(segment_bytes))
        .map_err(|e| storage("cannot open log", dir, e))?;
    crate::output::print_recovery(log.recovery_report());
    Ok(log)
}

/// Where `produce` appends.
enum Sink {
    /// A plain local log (no `--remote`).
    Local(Log),
    /// The partition directory, opened as its partition's writer in the remote (`--remote`):
    /// its records go to the bucket's tail when a tail is on.
    Tiered {
        tiered: Box<Tiered>,
        /// `--durability bucket`: an append returns once its records are in a tail object.
        bucket: bool,
    },
}

impl Sink {
    /// Opens `args.dir` as `args` say.
    fn open(args: &ProduceArgs) -> Result<Self> {
        let Some(spec) = remote::spec(&args.remote)? else {
            return open_log(&args.dir, args.segment_bytes).map(Sink::Local);
        };
        let bucket = args.durability == DurabilityArg::Bucket;
        let tail = (bucket || args.tail.given()).then(|| args.tail.config());
        let config = TieringConfig {
            // Nothing of the remote is deleted by this command (it runs no tiering round).
            retention_ms: None,
            tail,
            durability: if bucket {
                Durability::Bucket
            } else {
                Durability::Local
            },
            ..TieringConfig::default()
        };
        let tiered = tiered::open(
            &args.dir,
            spec,
            &args.remote,
            log_options(args.segment_bytes),
            config,
            Access::Owner,
            None,
        )?;
        Ok(Sink::Tiered {
            tiered: Box::new(tiered),
            bucket,
        })
    }

    /// The remote whose tail acknowledges appends (`--durability bucket`).
    fn bucket(&self) -> Option<String> {
        match self {
            Sink::Tiered {
                tiered,
                bucket: true,
            } => Some(tiered.remote.describe()),
            _ => None,
        }
    }

    fn last_seq(&self) -> u64 {
        match self {
            Sink::Local(log) => log.last_seq(),
            Sink::Tiered { tiered, .. } => tiered.part.log().last_seq(),
        }
    }

    fn max_message_bytes(&self) -> u64 {
        match self {
            Sink::Local(log) => log.options().max_message_bytes,
            Sink::Tiered { tiered, .. } => tiered.part.log().log().options().max_message_bytes,
        }
    }

    /// The bytes the record batches took in the segment files (this handle's writes).
    fn appended_bytes(&self) -> u64 {
        match self {
            Sink::Local(log) => log.stats().appended_bytes,
            Sink::Tiered { tiered, .. } => tiered.part.log().log().stats().appended_bytes,
        }
    }

    /// Appends `batch` as one batch (under `--durability bucket`, returning once it is in a
    /// tail object); the error says why, as one line.
    fn append_batch(
        &self,
        dir: &Path,
        batch: &[Message],
    ) -> std::result::Result<RangeInclusive<u64>, String> {
        match self {
            Sink::Local(log) => log
                .append_batch(batch)
                .map_err(|e| CliError::at("cannot append to", dir, e).to_string()),
            Sink::Tiered { tiered, .. } => tiered
                .part
                .log()
                .append_batch(batch)
                .map_err(|e| tiering_error("cannot append to", dir, e).to_string()),
        }
    }

    /// With a tail under local durability: writes what the last window did not write yet to
    /// the bucket and waits for it (as `tier` does before it exits 0). Under bucket durability
    /// every batch is there already; without a tail there is nothing to write.
    fn drain_tail(&self, dir: &Path) -> Result<()> {
        match self {
            Sink::Tiered {
                tiered,
                bucket: false,
            } => crate::tier::drain_tail(tiered, dir),
            _ => Ok(()),
        }
    }

    /// Syncs what was appended to stable storage, then closes the log.
    fn sync_and_close(self, dir: &Path) -> Result<()> {
        match self {
            Sink::Local(log) => log
                .sync()
                .and_then(|()| log.close())
                .map_err(|e| storage("cannot sync log", dir, e)),
            Sink::Tiered { tiered, .. } => {
                let Tiered { part, tail, .. } = *tiered;
                let log = part.into_log();
                let closed = log
                    .sync()
                    .and_then(|()| log.close())
                    .map_err(|e| tiering_error("cannot sync log", dir, e));
                // The writer's thread ends with its last handle.
                drop(tail);
                closed
            }
        }
    }
}

/// Why a produce stopped before the end of its input.
#[derive(Debug)]
enum Stop {
    /// Input line `line` is not a valid record (`what` says why). Every line before it was
    /// appended, or none with `--all-or-nothing`.
    Invalid { line: u64, what: String },
    /// Stdin, the temporary copy of the input or an append failed: what, and the line (or
    /// generated record) it is about.
    Failed { what: String, at: Option<u64> },
    /// A signal (Ctrl-C, SIGTERM, SIGHUP).
    Interrupted,
}

/// What has been appended so far.
struct Appender<'a> {
    sink: &'a Sink,
    dir: &'a Path,
    /// The log's last seq before this command appended anything.
    start_last: u64,
    /// The last seq acknowledged: appended (`--durability local`) or in the bucket too
    /// (`--durability bucket`).
    acked_last: u64,
    /// `--progress-lines`.
    progress_lines: bool,
}

impl Appender<'_> {
    /// Records this command appended (including the part of a failed batch that the log kept).
    /// Input line (or generated record) `k` is the `k`-th record appended.
    fn appended(&self) -> u64 {
        self.sink.last_seq().saturating_sub(self.start_last)
    }

    /// Records this command appended and had acknowledged: the first `acked()` of them.
    fn acked(&self) -> u64 {
        self.acked_last.saturating_sub(self.start_last)
    }

    /// Appends `batch` whole, or reports what failed and the input line (or record) of the
    /// first record not appended.
    fn flush(&mut self, batch: &mut Vec<Message>) -> Result<(), Stop> {
        if batch.is_empty() {
            return Ok(());
        }
        match self.sink.append_batch(self.dir, batch) {
            Ok(seqs) => {
                batch.clear();
                self.acked_last = self.acked_last.max(*seqs.end());
                if self.progress_lines {
                    let what = if self.sink.bucket().is_some() {
                        "acknowledged"
                    } else {
                        "appended"
                    };
                    outln!("{what} seq {}..={}", seqs.start(), seqs.end()).map_err(|e| {
                        Stop::Failed {
                            what: e.to_string(),
                            at: Some(self.appended().saturating_add(1)),
                        }
                    })?;
                }
                Ok(())
            }
            Err(what) => Err(Stop::Failed {
                what,
                at: Some(self.appended().saturating_add(1)),
            }),
        }
    }
}

/// Runs `krabka produce`.
///
/// # Errors
/// When the log cannot be opened, the input has a bad line, an append or the sync fails (after
/// syncing and naming what was appended, and under `--durability bucket` what of it was
/// acknowledged), a signal stops it, or stdout cannot be written.
pub fn run(args: &ProduceArgs) -> Result<()> {
    if args.escaped
        && let Some(sep) = args.key_separator.as_deref().filter(|s| s.contains('\\'))
    {
        return Err(CliError::new(format!(
            "--key-separator {sep:?} holds a backslash, which starts an escape with --escaped"
        ))
        .hint("pick a separator without a backslash (read's output uses a tab)"));
    }
    interrupt::install();
    let sink = Sink::open(args)?;
    let started = Instant::now();
    let start_last = sink.last_seq();
    // What opening wrote (records a previous writer acknowledged in the bucket, taken over)
    // is not this command's.
    let start_bytes = sink.appended_bytes();
    let mut appender = Appender {
        sink: &sink,
        dir: &args.dir,
        start_last,
        acked_last: start_last,
        progress_lines: args.progress_lines,
    };
    let format = input::LineFormat {
        key_separator: args.key_separator.as_deref(),
        escaped: args.escaped,
        max_message_bytes: sink.max_message_bytes(),
    };
    let stopped = match args.generate {
        Some(n) => generate(&mut appender, args.seed, n),
        None if args.all_or_nothing => input::read_all_or_nothing(&mut appender, &format),
        None => input::read_stdin(&mut appender, &format),
    };
    let appended = appender.appended();
    let acked = appender.acked();
    let bytes = sink.appended_bytes().saturating_sub(start_bytes);
    let range = (appended > 0).then(|| (start_last + 1, sink.last_seq()));
    let bucket = sink.bucket();
    let drained = if stopped.is_ok() {
        sink.drain_tail(&args.dir)
    } else {
        Ok(())
    };
    // Whatever happened, what was appended goes to stable storage before anything is reported.
    let synced = sink.sync_and_close(&args.dir);
    let produced = Produced {
        dir: &args.dir,
        generated: args.generate,
        all_or_nothing: args.all_or_nothing,
        appended,
        acked,
        bucket,
        bytes,
        range,
        started,
    };
    match (drained, synced.is_ok() && stopped.is_ok()) {
        // Appended and synced, but not all in the bucket's tail as the tail flags asked.
        (Err(e), true) => Err(e.prefix(&format!(
            "{} to {}, synced to disk, but the tail is not all in the bucket",
            produced.appended_part(),
            args.dir.display()
        ))),
        _ => report(stopped, synced, &produced),
    }
}

/// What `produce` appended, for its last line.
struct Produced<'a> {
    dir: &'a Path,
    /// `--generate N`: records, not lines.
    generated: Option<u64>,
    all_or_nothing: bool,
    appended: u64,
    /// Of `appended`, the first this many were acknowledged (all, without a bucket).
    acked: u64,
    /// `--durability bucket`: the remote whose tail acknowledged them.
    bucket: Option<String>,
    bytes: u64,
    /// The seqs appended, if any.
    range: Option<(u64, u64)>,
    started: Instant,
}

impl Produced<'_> {
    /// `line` (stdin) or `record` (`--generate`).
    fn unit(&self) -> &'static str {
        if self.generated.is_some() {
            "record"
        } else {
            "line"
        }
    }

    /// `appended 2,500 records (seq 1..=2500) from lines 1..=2500`, `appended 5 of 10 records
    /// (seq 1..=5)`, `appended no records`.
    fn done(&self) -> String {
        let Some((a, _)) = self.range else {
            return "appended no records".to_owned();
        };
        let mut done = self.appended_part();
        if self.bucket.is_some() {
            let (n, acked, unit) = (self.appended, self.acked.min(self.appended), self.unit());
            if acked == n {
                done.push_str(", all acknowledged in the bucket");
            } else {
                let acked_part = match acked {
                    0 => "none".to_owned(),
                    k => format!("seq {a}..={} ({unit}s 1..={k})", a + k - 1),
                };
                done.push_str(&format!(
                    ", of which {acked_part} acknowledged in the bucket and seq {}..={} \
                     ({unit}s {}..={n}) appended locally but not acknowledged",
                    a + acked,
                    a + n - 1,
                    acked + 1
                ));
            }
        }
        done
    }

    /// `appended 2,500 records (seq 1..=2500) from lines 1..=2500`.
    fn appended_part(&self) -> String {
        let n = self.appended;
        let Some((a, b)) = self.range else {
            return "appended no records".to_owned();
        };
        match self.generated {
            Some(total) if total != n => format!(
                "appended {} of {} records (seq {a}..={b})",
                human::count(n),
                human::count(total)
            ),
            Some(_) => format!("appended {} records (seq {a}..={b})", human::count(n)),
            None => format!(
                "appended {} records (seq {a}..={b}) from lines 1..={n}",
                human::count(n)
            ),
        }
    }

    /// What was not appended: `nothing from line 2501 on was appended`.
    fn rest(&self) -> String {
        format!(
            "nothing from {} {} on was appended",
            self.unit(),
            self.appended.saturating_add(1)
        )
    }
}

/// The line `produce` ends with, or its error: how it stopped, and whether what was appended
/// reached stable storage.
fn report(stopped: Result<(), Stop>, synced: Result<()>, p: &Produced<'_>) -> Result<()> {
    let done = p.done();
    let dir = p.dir.display();
    match (stopped, synced) {
        (Ok(()), Ok(())) => {
            let elapsed = p.started.elapsed();
            let line = match p.range {
                Some((a, b)) => format!(
                    "appended {} records (seq {a}..={b}), {} in {} ({}, {:.0} records/s) to {dir}, \
                     synced to disk{}",
                    human::count(p.appended),
                    human::bytes(p.bytes),
                    human::duration(elapsed),
                    human::rate(p.bytes, elapsed),
                    human::per_second(p.appended, elapsed),
                    p.bucket.as_ref().map_or_else(String::new, |r| format!(
                        " and acknowledged in the bucket (tail objects in {r})"
                    )),
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
        (Err(stop), Ok(())) => Err(stopped_error(stop, p)),
        (stopped, Err(sync)) => {
            let why = match stopped {
                Ok(()) => String::new(),
                Err(Stop::Interrupted) => format!(" ({})", interrupt::stopped()),
                Err(Stop::Invalid { line, what }) => {
                    format!(" before line {line}, which is invalid: {what}")
                }
                Err(Stop::Failed { what, at }) => {
                    let at = at.map_or_else(String::new, |n| format!(" at {} {n}", p.unit()));
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

/// The error of a produce that `stop` ended after what was appended was synced: what was
/// appended (lines and seqs), what stopped it, and what was not appended.
fn stopped_error(stop: Stop, p: &Produced<'_>) -> CliError {
    let (done, rest, dir) = (p.done(), p.rest(), p.dir.display());
    let from = p.appended.saturating_add(1);
    match stop {
        Stop::Interrupted if p.all_or_nothing && p.appended == 0 => CliError::interrupted(format!(
            "{} before the input was all read: nothing was appended to {dir} \
                 (--all-or-nothing)",
            interrupt::stopped()
        )),
        Stop::Interrupted => CliError::interrupted(format!(
            "{}: {done}, synced to disk in {dir}; {rest}",
            interrupt::stopped()
        )),
        Stop::Invalid { line, what } if p.all_or_nothing => CliError::new(format!(
            "line {line} is invalid: {what}; nothing was appended to {dir} (--all-or-nothing; \
             the lines after it were not checked)"
        ))
        .hint(format!("fix line {line} and run the command again")),
        Stop::Invalid { line, what } => CliError::new(format!(
            "{done}; line {line} is invalid: {what}; nothing from line {line} on was appended \
             (the lines after it were not checked)"
        ))
        .hint(format!(
            "what was appended is synced to disk in {dir}; fix line {line} and append from it on \
             (e.g. `tail -n +{line} FILE | krabka produce {dir}`), or use --all-or-nothing"
        )),
        Stop::Failed { what, at } => {
            let at = at.map_or_else(String::new, |n| format!(" at {} {n}", p.unit()));
            let hint = match p.generated {
                None => format!(
                    "what was appended is synced to disk in {dir}; fix the cause and append from \
                     line {from} on (e.g. `tail -n +{from} FILE | krabka produce {dir}`)"
                ),
                Some(_) => format!("what was appended is synced to disk in {dir}"),
            };
            CliError::new(format!("{done}, then: {what}{at}; {rest}")).hint(hint)
        }
    }
}

fn generate(appender: &mut Appender<'_>, seed: u64, n: u64) -> Result<(), Stop> {
    let generator = Generator::new(seed);
    let bar = progress::count_bar("produce", n);
    let mut batch: Vec<Message> = Vec::with_capacity(BATCH);
    for i in 0..n {
        if interrupt::requested() {
            appender.flush(&mut batch)?;
            bar.finish_and_clear();
            return Err(Stop::Interrupted);
        }
        batch.push(generator.message(i));
        if batch.len() == BATCH {
            appender.flush(&mut batch)?;
            bar.set_position(i.saturating_add(1));
        }
    }
    appender.flush(&mut batch)?;
    bar.finish_and_clear();
    Ok(())
}
