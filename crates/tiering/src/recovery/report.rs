//! What [`recover`](super::recover) is told and what it reports: the metadata recovery's, plus
//! the binding of the recovered directory to its remote.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use krabka_remote_metadata::recovery as metadata;
use krabka_remote_storage::TopicIdPartition;

use super::{IgnoredObject, LocalLogOutcome, MapMetadata};
use crate::ownership::Binding;

/// How [`recover`](super::recover) runs: the metadata recovery's options, and the remote to
/// bind the recovered directory to.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RecoveryOptions {
    /// Concurrency, clean-up, the local log directory and the metadata mapping (see
    /// [`krabka_remote_metadata::recovery::RecoveryOptions`]; the methods below set them).
    pub metadata: metadata::RecoveryOptions,
    /// The remote's location (as [`RemoteOwnership::location`](crate::RemoteOwnership::location)
    /// names it): with a [`local_log_dir`](Self::local_log_dir), the directory is bound to it
    /// and the partition as a *pending* claim from the seq after the recovered end
    /// ([`ownership::bind_pending`](crate::ownership::bind_pending)). Recovery fences nobody;
    /// the log's first owned open takes the partition over. Default: none.
    pub bind_to: Option<String>,
}

impl RecoveryOptions {
    /// Manifests read at once (at least 1). Default
    /// [`DEFAULT_RECOVERY_CONCURRENCY`](super::DEFAULT_RECOVERY_CONCURRENCY).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.metadata = self.metadata.concurrency(n);
        self
    }

    /// Deletes, last, the objects no writer or reader can need
    /// ([`metadata::RecoveryOptions::clean_orphans`]). Default off.
    #[must_use]
    pub fn clean_orphans(mut self, yes: bool) -> Self {
        self.metadata = self.metadata.clean_orphans(yes);
        self
    }

    /// The partition's local log directory: an empty local log there (created if missing) is
    /// started right after the recovered remote end, and bound when
    /// [`bind_to`](Self::bind_to) is set.
    #[must_use]
    pub fn local_log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.metadata = self.metadata.local_log_dir(dir);
        self
    }

    /// Turns a manifest's metadata into the metadata readers need before it is recorded
    /// ([`metadata::RecoveryOptions::map_metadata`]).
    #[must_use]
    pub fn map_metadata(mut self, map: MapMetadata) -> Self {
        self.metadata = self.metadata.map_metadata(map);
        self
    }

    /// Sets [`bind_to`](Self::bind_to).
    #[must_use]
    pub fn bind_to(mut self, location: impl Into<String>) -> Self {
        self.bind_to = Some(location.into());
        self
    }
}

/// What [`recover`](super::recover) found and did: the fields of
/// [`krabka_remote_metadata::recovery::RecoveryReport`], and the binding.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The partition.
    pub partition: TopicIdPartition,
    /// Objects listed under the partition.
    pub objects_listed: u64,
    /// Manifests read.
    pub manifests_read: usize,
    /// Manifest keys of segments whose manifest was missing and whose metadata was rebuilt
    /// from their objects.
    pub rebuilt: Vec<String>,
    /// Segments that form the recovered log (and are recorded as finished).
    pub segments: usize,
    /// Their seqs, `None` when no segment was recovered.
    pub seq_range: Option<RangeInclusive<u64>>,
    /// Their `.log` bytes.
    pub bytes: u64,
    /// Of `segments`, how many the metadata already recorded identically (a repeated run).
    pub already_recorded: usize,
    /// Every object not used, with why, sorted by key.
    pub ignored: Vec<IgnoredObject>,
    /// Objects deleted ([`RecoveryOptions::clean_orphans`]).
    pub deleted: Vec<String>,
    /// What happened to the local log.
    pub local_log: LocalLogOutcome,
    /// The local log's binding to the remote ([`RecoveryOptions::bind_to`]).
    pub binding: Option<Binding>,
    /// Seq ranges between the recovered segments that no whole segment holds (a damaged or
    /// lost segment): lost, each costing its own seqs only; a read of them fails with
    /// [`Error::RemoteHole`](crate::Error::RemoteHole).
    pub holes: Vec<RangeInclusive<u64>>,
}

impl RecoveryReport {
    /// The metadata recovery's `report`, with the `binding` made.
    pub(super) fn new(report: metadata::RecoveryReport, binding: Option<Binding>) -> Self {
        let metadata::RecoveryReport {
            partition,
            objects_listed,
            manifests_read,
            rebuilt,
            segments,
            seq_range,
            bytes,
            already_recorded,
            ignored,
            deleted,
            local_log,
            holes,
            ..
        } = report;
        Self {
            partition,
            objects_listed,
            manifests_read,
            rebuilt,
            segments,
            seq_range,
            bytes,
            already_recorded,
            ignored,
            deleted,
            local_log,
            binding,
            holes,
        }
    }
}
