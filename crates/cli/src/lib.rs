//! The `krabka` command: run the tiered-log demo, produce and read records, dump and verify
//! segment files, tier a log to a remote, and benchmark this machine.
//!
//! The binary is a thin shell over this library's one public function, [`main`]; the modules
//! are private. Each subcommand lives in the module named after it (`demo`, `produce`, `read`,
//! `inspect` for `dump`, `verify`, `repair`, `tier`, `recover`, `bench`); the tiered log that
//! `tier`, `read --remote` and `demo` open is opened in one place (`tiered`). Errors are one line
//! naming the path and what to do; the process exits 1 on them and 2 on a usage error.
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
//! use krabka_remote_storage::{TopicIdPartition, Uuid};
//! use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
//! use krabka_storage::Options;
//! use krabka_tiering::{RemoteOwnership, TieredLog, TieringConfig, fs::FsRemoteStorage};
//!
//! let dir = tempfile::tempdir()?;
//! let remote = Arc::new(FsRemoteStorage::new(dir.path().join("remote"))?);
//! let metadata = Arc::new(DurableRemoteLogMetadataManager::open(dir.path().join("metadata"))?);
//! let topic = TopicIdPartition::new(Uuid::new_v4(), "clicks", 0);
//! let config = TieringConfig { local_retention_bytes: Some(0), retention_ms: None, ..TieringConfig::default() };
//! let options = Options { max_bytes: 4096, ..Options::default() };
//! // The partition's one writer: bound to this remote, holding a writer epoch in it.
//! let owner = RemoteOwnership::new(remote.clone(), "fs://remote");
//! let log = TieredLog::open_owned(dir.path().join("log"), options, remote, metadata, topic, config, &owner)?;
//! let clicks: Vec<Message> = (0..1000).map(|i| Message::new(format!("click {i}")).with_key("user-1")).collect();
//! log.append_batch(&clicks)?;
//! log.run_once()?; // copy closed segments to the remote, then apply local retention
//! assert!(log.local_first_seq() > 1); // the oldest records now live only in the remote tier
//! let records = log.read(1, 1000)?; // reads span both tiers
//! assert_eq!(records.len(), 1000);
//! assert_eq!(records[0].message.value, "click 0");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod args;
mod bench;
mod demo;
mod error;
mod escape;
mod generate;
mod human;
mod inspect;
mod interrupt;
mod metrics_http;
mod output;
mod produce;
mod progress;
mod read;
mod reader;
mod recover;
mod remote;
mod repair;
mod source;
mod tier;
mod tiered;
mod verify;
mod workdir;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

/// Runs the `krabka` command on this process's arguments and returns its exit code: 0, 1 on a
/// failure or an incomplete result (after one line on stderr naming the path and what to do),
/// 128 + the signal's number when Ctrl-C (130), SIGTERM (143) or SIGHUP (129) stopped it short,
/// and 2 on a usage error (clap's convention; `--help` and `--version` exit 0).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`krabka read DIR | head`) is the reader's choice, not a failure.
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            output::note(format_args!("error: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Runs one parsed command line.
fn run(cli: Cli) -> error::Result<()> {
    match cli.command {
        Command::Demo(a) => demo::run(&a),
        Command::Produce(a) => produce::run(&a),
        Command::Read(a) => read::run(&a),
        Command::Dump(a) => inspect::run_dump(&a),
        Command::Verify(a) => verify::run(&a),
        Command::Repair(a) => repair::run(&a),
        Command::Tier(a) => tier::run(&a),
        Command::Recover(a) => recover::run(&a),
        Command::Bench(a) => bench::run(&a),
    }
}
