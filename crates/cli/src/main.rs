//! `krabka`: see `krabka --help`.

use std::process::ExitCode;

use clap::Parser;
use krabka_cli::args::Cli;

fn main() -> ExitCode {
    // Usage errors exit 2 (clap's convention); --help and --version exit 0.
    let cli = Cli::parse();
    match krabka_cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.to_string() == krabka_cli::output::BROKEN_PIPE => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
