//! The `krabka` command: run the tiered-log demo, produce and read records, dump and verify
//! segment files, tier a log to a remote, and benchmark this machine.
//!
//! The binary is a thin shell over this library; each subcommand lives in the module named
//! after it ([`demo`], [`produce`], [`read`], [`inspect`] for `dump` and `verify`, [`repair`], [`tier`],
//! [`bench`](mod@bench)). Errors are one line naming the path and what to do ([`CliError`]); the process
//! exits 1 on them and 2 on a usage error.
//!
//! # The libraries underneath, in 15 lines
//!
//! What `krabka demo` does, as a program: a local log whose closed segments go to a
//! filesystem remote, with durable metadata of what is remote; once tiered, old records are
//! only remote, and reads span both tiers.
//!
//! ```
//! use std::sync::Arc;
//! use krabka_protocol::Message;
//! use krabka_remote_storage::{TopicIdPartition, Uuid, metadata::DurableRemoteLogMetadataManager};
//! use krabka_storage::Options;
//! use krabka_tiering::{TieredLog, TieringConfig, fs::FsRemoteStorage};
//!
//! let dir = tempfile::tempdir()?;
//! let remote = Arc::new(FsRemoteStorage::new(dir.path().join("remote"))?);
//! let metadata = Arc::new(DurableRemoteLogMetadataManager::open(dir.path().join("metadata"))?);
//! let topic = TopicIdPartition::new(Uuid::new_v4(), "clicks", 0);
//! let config = TieringConfig { local_retention_bytes: Some(0), retention_ms: None, ..TieringConfig::default() };
//! let options = Options { max_bytes: 4096, ..Options::default() };
//! let log = TieredLog::open(dir.path().join("log"), options, remote, metadata, topic, config)?;
//! let clicks: Vec<Message> = (0..1000).map(|i| Message::new(format!("click {i}")).with_key("user-1")).collect();
//! log.append_batch(&clicks)?;
//! log.run_once()?; // copy closed segments to the remote, then apply local retention
//! assert!(log.local_first_seq() > 1); // the oldest records now live only in the remote tier
//! let records = log.read(1, 1000)?; // reads span both tiers
//! assert_eq!(records.len(), 1000);
//! assert_eq!(records[0].message.value, "click 0");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod args;
pub mod bench;
pub mod demo;
pub mod error;
pub mod generate;
pub mod human;
pub mod inspect;
pub mod interrupt;
pub mod output;
pub mod produce;
pub mod progress;
pub mod read;
pub mod reader;
pub mod recover;
pub mod remote;
pub mod repair;
pub mod tier;
pub mod workdir;

pub use error::CliError;

use args::{Cli, Command};

/// What `krabka verify` advises on corruption. Deleting segments would lose their records (and
/// every later one), so it never suggests that.
pub const VERIFY_HINT: &str = "copy the directory aside before changing anything, and restore the named file from a copy \
     if you have one; otherwise `krabka repair DIR` moves the damaged part aside into \
     DIR/quarantine/ (the bytes are kept there) and records the missing seqs as a hole; reads \
     return every record before the damage and fail naming the position";

/// Runs one parsed command line.
///
/// # Errors
/// The command's failure, as one line for the user.
pub fn run(cli: Cli) -> error::Result<()> {
    match cli.command {
        Command::Demo(a) => demo::run(&a),
        Command::Produce(a) => produce::run(&a),
        Command::Read(a) => read::run(&a),
        Command::Dump(a) => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let dumped = inspect::dump(&a.file, a.values, &mut out);
            // Everything printed reaches stdout before any failure is reported.
            let flushed = std::io::Write::flush(&mut out).map_err(|e| output::write_error(&e));
            dumped.and(flushed)
        }
        Command::Verify(a) => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let report = inspect::verify(&a.dir, a.quiet, &mut out)?;
            let range = report.range.map_or_else(
                || "no records".to_owned(),
                |(a, b)| format!("seq {a}..={b}"),
            );
            let mut summary = format!(
                "{} segments, {} indexes, {} records ({range}), {}",
                human::count(report.segments),
                report.indexes,
                human::count(report.records),
                human::bytes(report.bytes)
            );
            if !report.holes.is_empty() {
                let holes: Vec<String> = report
                    .holes
                    .iter()
                    .map(|h| format!("{}..={}", h.first, h.last))
                    .collect();
                summary.push_str(&format!(
                    ", {} hole(s) left by a repair (seq {})",
                    holes.len(),
                    holes.join(", ")
                ));
            }
            // The line names a problem of the records (a bad frame, a gap) before one of an
            // index, which is derived data.
            let in_log = |p: &&inspect::Problem| {
                p.path
                    .extension()
                    .is_some_and(|e| e == krabka_storage::segment::LOG_SUFFIX)
            };
            let first = report
                .problems
                .iter()
                .find(in_log)
                .or(report.problems.first());
            match first {
                None => output::outln!("verify: OK: {summary}"),
                Some(first) => Err(CliError::new(format!(
                    "{} problem(s) in {}: {first}{}",
                    report.problems.len(),
                    a.dir.display(),
                    match report.problems.len() {
                        1 => String::new(),
                        n => format!(" (and {} more, listed above)", n - 1),
                    }
                ))
                .hint(VERIFY_HINT)),
            }
        }
        Command::Repair(a) => repair::run(&a),
        Command::Tier(a) => tier::run(&a),
        Command::Recover(a) => recover::run(&a),
        Command::Bench(a) => bench::run(&a),
    }
}
