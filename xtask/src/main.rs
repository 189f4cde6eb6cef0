//! `cargo xtask`: CI and release chores of the krabka workspace.
//!
//! - `cargo xtask ci` — fmt check, clippy (all targets, all features, warnings denied), the whole
//!   test suite, and rustdoc with warnings denied; stops at the first failing step and names it.
//! - `cargo xtask publish-check [--verify]` — crate metadata check, then `cargo package` of every
//!   published crate in dependency order.
//! - `cargo xtask bump-version X.Y.Z` — the workspace version and every inter-crate requirement.
//! - `cargo xtask publish [--dry-run]` — `cargo publish` of every published crate in dependency
//!   order.
//!
//! The dependency order is derived from `cargo metadata`, never hard-coded: a new crate takes its
//! place by what it depends on.

mod publish;
mod version;
mod workspace;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use publish::{publish, publish_check};
use version::{Version, bump_version};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => no_args("ci", &rest).and_then(|()| ci()),
        Some("publish-check") => match rest.as_slice() {
            [] => publish_check(false),
            ["--verify"] => publish_check(true),
            _ => return usage(&format!("unexpected arguments to publish-check: {rest:?}")),
        },
        Some("bump-version") => match rest.as_slice() {
            [version] => match Version::parse(version) {
                Ok(v) => bump_version(&v),
                Err(e) => return usage(&e),
            },
            _ => return usage("bump-version takes exactly one argument, the new version X.Y.Z"),
        },
        Some("publish") => match rest.as_slice() {
            [] => publish(false),
            ["--dry-run"] => publish(true),
            _ => return usage(&format!("unexpected arguments to publish: {rest:?}")),
        },
        Some("help") | Some("--help") | Some("-h") => {
            print_help();
            return ExitCode::SUCCESS;
        }
        None => {
            print_help();
            return ExitCode::from(2);
        }
        Some(other) => return usage(&format!("unknown xtask command `{other}`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("error: {message}\n");
    print_help();
    ExitCode::from(2)
}

fn no_args(command: &str, rest: &[&str]) -> Result<(), String> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(format!("`{command}` takes no arguments, got {rest:?}"))
    }
}

fn print_help() {
    eprintln!(
        "\
usage: cargo xtask <command>

commands:
  ci                      fmt --check, clippy -D warnings, test --workspace --all-features,
                          doc -D warnings
  publish-check [--verify]
                          check every published crate's metadata (description, license,
                          repository, readme file, keywords, categories, docs.rs metadata,
                          LICENSE-MIT and LICENSE-APACHE in the crate directory), then
                          `cargo package` them all in dependency order in ONE cargo invocation.
                          Without --verify packaging uses --no-verify: verifying a crate builds it
                          from the packaged sources, resolving its krabka-* dependencies as
                          crates.io would, and those versions are not on crates.io before the
                          release. --verify packages them all in one invocation, where cargo
                          resolves each against the others packaged alongside it, so it works
                          before the release too, but builds every crate again (minutes).
  bump-version X.Y.Z      set [workspace.package] version and every inter-crate requirement in
                          [workspace.dependencies] (and any member manifest that pins one);
                          X.Y.Z must be a semantic version (pre-release/build suffixes allowed)
  publish [--dry-run]     `cargo publish` every published crate in dependency order; a crate whose
                          version is already on the registry is skipped so a half-done release can
                          be resumed. --dry-run packages and verifies all of them in one cargo
                          invocation without uploading. Needs CARGO_REGISTRY_TOKEN (not for
                          --dry-run)."
    );
}

/// The workspace root: the parent of xtask's manifest directory. `cargo run` sets
/// `CARGO_MANIFEST_DIR` at run time too; it is preferred over the path compiled in, which points
/// at whichever checkout last built this binary when a target directory is shared.
pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs one CI step; an error names the step that failed.
pub(crate) fn step(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("==> {name}: cargo {}", args.join(" "));
    let status = cargo()
        .args(args)
        .envs(envs.iter().copied())
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
