//! `cargo xtask`: CI and release chores of the krabka workspace.
//!
//! - `cargo xtask ci` — fmt check, clippy (all targets, all features, warnings denied), the whole
//!   test suite, and rustdoc with warnings denied; stops at the first failing step and names it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("help") | Some("--help") | Some("-h") | None => {
            print_help();
            return if args.is_empty() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
        Some(other) => {
            eprintln!("error: unknown xtask command `{other}`");
            print_help();
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print_help() {
    eprintln!(
        "usage: cargo xtask <command>\n\ncommands:\n  ci    fmt --check, clippy -D warnings, test --workspace --all-features, doc -D warnings"
    );
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Runs one CI step; an error names the step that failed.
fn step(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("==> {name}: cargo {}", args.join(" "));
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("step `{name}` could not start cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("step `{name}` failed ({status})"))
    }
}

fn ci() -> Result<(), String> {
    step("fmt", &["fmt", "--all", "--", "--check"], &[])?;
    step(
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    step("test", &["test", "--workspace", "--all-features"], &[])?;
    step(
        "doc",
        &["doc", "--workspace", "--no-deps", "--all-features"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    eprintln!("==> ci: all steps passed");
    Ok(())
}
