//! `krabka`: see `krabka --help`.

use std::process::ExitCode;

use clap::Parser;
use krabka_cli::args::Cli;

fn main() -> ExitCode {
    // Usage errors exit 2 (clap's convention); --help and --version exit 0.
    let cli = Cli::parse();
    match krabka_cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`krabka read DIR | head`) is the reader's choice, not a failure.
        Err(e) if krabka_cli::output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            krabka_cli::output::note(format_args!("error: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}
