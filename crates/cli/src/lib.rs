//! The `krabka` command: run the tiered-log demo, produce and read records, dump and verify
//! segment files, tier a log to a remote, and benchmark this machine.
//!
//! The binary is a thin shell over this library; each subcommand lives in the module named
//! after it ([`demo`], [`produce`], [`read`], [`inspect`] for `dump` and `verify`, [`tier`],
//! [`bench`]). Errors are one line naming the path and what to do ([`CliError`]); the process
//! exits 1 on them and 2 on a usage error.

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
pub mod remote;
pub mod tier;
pub mod workdir;

pub use error::CliError;

use args::{Cli, Command};

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
            inspect::dump(&a.file, a.values, &mut out)?;
            std::io::Write::flush(&mut out).map_err(|e| output::write_error(&e))?;
            Ok(())
        }
        Command::Verify(a) => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let report = inspect::verify(&a.dir, a.quiet, &mut out)?;
            let range = report.range.map_or_else(
                || "no records".to_owned(),
                |(a, b)| format!("seq {a}..={b}"),
            );
            let summary = format!(
                "{} segments, {} indexes, {} records ({range}), {}",
                human::count(report.segments),
                report.indexes,
                human::count(report.records),
                human::bytes(report.bytes)
            );
            match report.problems.first() {
                None => {
                    println!("verify: OK: {summary}");
                    Ok(())
                }
                Some(first) => Err(CliError::new(format!(
                    "{} problem(s) in {}; first: {first}",
                    report.problems.len(),
                    a.dir.display()
                ))
                .hint("restore the named file from a copy, or delete that segment and the ones after it (recovery rebuilds a missing index)")),
            }
        }
        Command::Tier(a) => tier::run(&a),
        Command::Bench(a) => bench::run(&a),
    }
}
