//! `krabka`: see `krabka --help`.

fn main() -> std::process::ExitCode {
    krabka_cli::main()
}
