//! [`LocalLogView`]: what [`TieredLog::log`] hands out, the local tier to look at and never to
//! write through.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use krabka_storage::{AcceptedHole, Log, LogStats, Options, Record, RecoveryReport, SegmentInfo};

use super::TieredLog;
use crate::error::Error;

/// A read-only view of a [`TieredLog`]'s local log: its segments, seqs, sizes, recovery report
/// and reads of the records it holds locally. Appends, rolls and deletes go through the
/// `TieredLog` ([`append`](TieredLog::append), [`roll`](TieredLog::roll), the retention of its
/// rounds), which checks ownership and keeps the tiering policy.
#[derive(Clone, Copy, Debug)]
pub struct LocalLogView<'a> {
    log: &'a Log,
}

impl<'a> LocalLogView<'a> {
    /// The log's directory.
    pub fn dir(&self) -> &'a Path {
        self.log.dir()
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &'a Options {
        self.log.options()
    }

    /// What opening the log found and did.
    pub fn recovery_report(&self) -> &'a RecoveryReport {
        self.log.recovery_report()
    }

    /// The local log's counters (appends, fsyncs, recovery).
    pub fn stats(&self) -> LogStats {
        self.log.stats()
    }

    /// The local segments, ordered by base seq; the last one is the active segment.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.log.segments()
    }

    /// Seq of the first record held locally.
    pub fn first_seq(&self) -> u64 {
        self.log.first_seq()
    }

    /// Seq of the last record (0 for a log that never held one).
    pub fn last_seq(&self) -> u64 {
        self.log.last_seq()
    }

    /// The seq the next append gets.
    pub fn next_seq(&self) -> u64 {
        self.log.next_seq()
    }

    /// The explicit holes a repair recorded: their seqs and where their bytes were moved.
    pub fn quarantined(&self) -> Vec<(RangeInclusive<u64>, PathBuf)> {
        self.log.quarantined()
    }

    /// The holes the user accepted as lost (`krabka repair --accept-hole`).
    pub fn accepted_holes(&self) -> Vec<AcceptedHole> {
        self.log.accepted_holes()
    }

    /// Total on-disk size of the local segment files, in bytes.
    pub fn bytes(&self) -> u64 {
        self.log.bytes()
    }

    /// Up to `max` records from `from_seq`, from the local tier only (use
    /// [`TieredLog::read`] to read across both tiers).
    ///
    /// # Errors
    /// As `krabka_storage::Log::read`.
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<Record>, krabka_storage::Error> {
        self.log.read(from_seq, max)
    }

    /// The seq of the first local record whose timestamp is `>= ts`.
    ///
    /// # Errors
    /// As `krabka_storage::Log::seq_for_timestamp`.
    pub fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, krabka_storage::Error> {
        self.log.seq_for_timestamp(ts)
    }
}

impl TieredLog {
    /// A read-only view of the local log (its segments, seqs, sizes, recovery report, local
    /// reads). Nothing writes through it: roll with [`roll`](Self::roll), append with
    /// [`append`](Self::append).
    pub fn log(&self) -> LocalLogView<'_> {
        LocalLogView { log: &self.log }
    }

    /// Closes the active local segment and starts a new one, so that the next round can copy
    /// what was appended so far.
    ///
    /// # Errors
    /// [`Error::Storage`] as `krabka_storage::Log::roll`; [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) once a check found
    /// another writer holding the partition (as [`append`](Self::append)).
    pub fn roll(&self) -> Result<(), Error> {
        self.ensure_writable()?;
        self.log.roll().map_err(|e| Error::storage("rolling", e))
    }
}
