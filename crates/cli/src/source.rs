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
        // A hole a recovery reported is skipped, named on stderr and in the final error;
        // bounded: each pass skips one hole or returns.
        for _ in 0..=self.lost.len().saturating_add(1024) {
            match self.tiered.part.log().read(self.next, max) {
                Err(krabka_tiering::Error::Read(krabka_tiering::ReadError::RemoteHole {
                    from,
                    to,
                    ..
                })) if to >= self.next => {
                    crate::output::note(format_args!(
                        "seqs {from}..={to} are lost: no tier holds them (a hole a recovery \
                         or a repair left); reading on from seq {}",
                        to.saturating_add(1)
                    ));
                    self.lost.push(from..=to);
                    self.next = to.saturating_add(1);
                }
                // A local hole a repair left that no remote segment holds: lost the same way.
                Err(krabka_tiering::Error::Storage { source, .. })
                    if matches!(&*source, krabka_storage::Error::Quarantined { last_seq, .. }
                        if *last_seq >= self.next) =>
                {
                    if let krabka_storage::Error::Quarantined {
                        first_seq,
                        last_seq,
                        path,
                    } = *source
                    {
                        crate::output::note(format_args!(
                            "seqs {first_seq}..={last_seq} are lost: a repair moved them aside \
                             ({}) and no tier holds them; reading on from seq {}",
                            path.display(),
                            last_seq.saturating_add(1)
                        ));
                        self.lost.push(first_seq..=last_seq);
                        self.next = last_seq.saturating_add(1);
                    }
                }
                Err(e) => return Err(tiering_error("cannot read", &dir, e)),
                Ok(records) => {
                    if let Some(last) = records.last() {
                        self.next = last.seq.saturating_add(1);
                    }
                    return Ok(records);
                }
            }
        }
        Err(CliError::new(format!(
            "cannot read {}: more than {} holes met from seq {}",
            dir.display(),
            self.lost.len(),
            self.next
        )))
    }

    fn lost(&self) -> &[std::ops::RangeInclusive<u64>] {
        &self.lost
    }
}
