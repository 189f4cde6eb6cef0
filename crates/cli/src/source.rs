//! Where `krabka read` takes its records from: the local files (a [`LogReader`] of the log's
//! [`LogView`](krabka_storage::view::LogView), which reads them without opening the log), both
//! tiers ([`TieredSource`]), or the remote tier alone ([`ReplicaSource`]).

mod replica;

pub use replica::ReplicaSource;

use std::path::Path;

use krabka_storage::view::LogReader;
use krabka_storage::{Options, Record};
use krabka_tiering::TieringConfig;

use crate::args::RemoteArgs;
use crate::error::{CliError, Result};
use crate::reader::{print_fallbacks, view_error};
use crate::remote;
use crate::tiered::{self, Tiered, tiering_error};
use krabka_tiering::Access;

/// Source of records for `read`: the local files, both tiers, or the remote tier alone.
pub trait Source {
    /// Up to `max` records from where the previous call stopped; empty when caught up.
    fn next_records(&mut self, max: usize) -> Result<Vec<Record>>;

    /// The seq ranges skipped so far because no tier holds them (holes a recovery reported).
    fn lost(&self) -> &[std::ops::RangeInclusive<u64>] {
        &[]
    }
}

impl Source for LogReader {
    fn next_records(&mut self, max: usize) -> Result<Vec<Record>> {
        let records = self.poll(max);
        print_fallbacks(self.take_fallbacks());
        records.map_err(|e| view_error(self.dir(), e))
    }
}

/// `krabka read --remote`: reads across both tiers.
pub struct TieredSource {
    tiered: Tiered,
    next: u64,
    /// Holes skipped, each noted on stderr when met.
    lost: Vec<std::ops::RangeInclusive<u64>>,
}

impl TieredSource {
    /// Opens the tiered log at `dir` to read from `from`.
    ///
    /// # Errors
    /// As [`tiered::open`].
    pub fn open(dir: &Path, remote_args: &RemoteArgs, from: u64) -> Result<Self> {
        let spec = remote::spec(remote_args)?
            .ok_or_else(|| CliError::new("--remote is required to read the remote tier"))?;
        if !dir.is_dir() {
            return Err(
                CliError::new(format!("no log directory at {}", dir.display()))
                    .hint("pass the directory of a krabka log"),
            );
        }
        let tiered = tiered::open(
            dir,
            spec,
            remote_args,
            Options::default(),
            TieringConfig {
                retention_ms: None,
                ..TieringConfig::default()
            },
            Access::ReadOnly,
            None,
        )?;
        Ok(Self {
            tiered,
            next: from,
            lost: Vec::new(),
        })
    }
}

impl Source for TieredSource {
    fn next_records(&mut self, max: usize) -> Result<Vec<Record>> {
        let dir = self.tiered.part.log().log().dir().to_path_buf();
        let next_append = self.tiered.part.log().last_seq().saturating_add(1);
        if self.next == next_append {
            return Ok(Vec::new());
        }
        if self.next > next_append || self.next == 0 {
            let first = self
                .tiered
                .part
                .log()
                .first_seq()
                .unwrap_or_else(|_| self.tiered.part.log().local_first_seq());
            if self.next == 0 {
                return Err(CliError::new(format!(
                    "seq 0 is not a seq of {}: seqs start at 1",
                    dir.display()
                ))
                .hint(format!("read from {first}, the first seq the log holds")));
            }
            return Err(crate::reader::out_of_range(
                &dir,
                self.next,
                first,
                next_append,
            ));
        }
        // Holes no tier holds are stepped over by the library, each named on stderr and in
        // the final error; bounded: each pass returns records or steps over holes.
        let before = self.lost.len();
        for _ in 0..16 {
            let read = self
                .tiered
                .part
                .log()
                .read_over_holes(self.next, max)
                .map_err(|e| tiering_error("cannot read", &dir, e))?;
            for lost in &read.lost {
                let (a, b) = (lost.seqs.start(), lost.seqs.end());
                let why = match &lost.quarantined {
                    Some(path) => format!(
                        "a repair moved them aside ({}) and no tier holds them",
                        path.display()
                    ),
                    None => "no tier holds them (a hole a recovery or a repair left)".to_owned(),
                };
                crate::output::note(format_args!(
                    "seqs {a}..={b} are lost: {why}; reading on from seq {}",
                    b.saturating_add(1)
                ));
                self.lost.push(lost.seqs.clone());
            }
            self.next = read.next;
            if !read.records.is_empty() || read.lost.is_empty() {
                return Ok(read.records);
            }
        }
        Err(CliError::new(format!(
            "cannot read {}: {} holes met in one read, up to seq {}, and no record yet",
            dir.display(),
            self.lost.len() - before,
            self.next
        )))
    }

    fn lost(&self) -> &[std::ops::RangeInclusive<u64>] {
        &self.lost
    }
}
