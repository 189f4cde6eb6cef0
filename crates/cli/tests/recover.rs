//! `krabka recover` as the README walks through it: run the demo with `--dir`, delete
//! everything but the remote directory, recover, read every record of the remote range back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn krabka(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .output()
        .expect("run krabka");
    assert!(
        out.status.success(),
        "krabka {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn demo_wipe_recover_read() {
    let work = tempfile::tempdir().unwrap();
    let demo = work.path().join("demo");
    let demo_s = demo.to_str().unwrap();
    krabka(&["demo", "--records", "5000", "--dir", demo_s]);
    // Lose the disk: everything but the remote directory.
    std::fs::remove_dir_all(demo.join("log")).unwrap();
    let log = format!("{demo_s}/log");
    let remote = format!("fs://{demo_s}/remote");
    let out = krabka(&["recover", &log, "--remote", &remote]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("recovered"))
        .unwrap_or_default()
        .to_owned();
    let end: u64 = line
        .split("..=")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no seq range in {stdout}"));
    assert!(line.contains("seq 1..="), "{stdout}");
    assert!(stdout.contains("ignored         nothing"), "{stdout}");
    let read = krabka(&["read", &log, "--remote", &remote]);
    let lines: Vec<String> = String::from_utf8_lossy(&read.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len() as u64, end);
    for (i, l) in lines.iter().enumerate() {
        assert!(l.starts_with(&format!("{}\t", i + 1)), "{l}");
    }
    // Twice: the same range, nothing new.
    let again = krabka(&["recover", &log, "--remote", &remote]);
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(again.contains(&format!("seq 1..={end}")), "{again}");
    assert!(again.contains("already recorded"), "{again}");
}

#[test]
fn recover_without_remote_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(["recover", "/nonexistent-krabka-dir"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--remote"));
}
