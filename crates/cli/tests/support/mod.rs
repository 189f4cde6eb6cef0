//! What several CLI test files share: a segment's batches as `krabka dump` prints them, and
//! `krabka dump` run under an address-space limit.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// One batch line of `krabka dump`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub first: u64,
    pub last: u64,
    pub position: u64,
    pub size: u64,
}

impl Batch {
    /// `first..=last`, as the commands name a range of seqs.
    pub fn range(&self) -> String {
        format!("{}..={}", self.first, self.last)
    }
}

/// Every batch of a segment, from `krabka dump`.
pub fn batches(seg: &Path) -> Vec<Batch> {
    let out = Command::new(env!("CARGO_BIN_EXE_krabka"))
        .arg("dump")
        .arg(seg)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka dump");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("baseOffset: "))
        .map(|l| {
            let field = |name: &str| -> u64 {
                l.split(&format!("{name}: "))
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no {name} in {l}"))
            };
            Batch {
                first: field("baseOffset"),
                last: field("lastOffset"),
                position: field("position"),
                size: field("size"),
            }
        })
        .collect()
}

/// `krabka dump PATH` with its address space limited to 256 MiB (`ulimit -v`): a dump must
/// not need more, whatever the file claims.
pub fn dump_in_256_mib(path: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 262144 && exec '{}' dump '{}'",
            env!("CARGO_BIN_EXE_krabka"),
            path.to_str().unwrap()
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}
