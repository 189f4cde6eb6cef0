//! What [`recover`](super::recover) is told and what it reports: the metadata recovery's, plus
//! the binding of the recovered directory to its remote.

use std::path::PathBuf;

use krabka_remote_metadata::recovery as metadata;

use super::{MapMetadata, RecoveryReport};
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

/// What [`recover`](super::recover) found and did: the metadata recovery's own
/// [`RecoveryReport`] (reached through `Deref`: `recovery.seq_range`, `recovery.holes`, ...),
/// and the binding it made.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recovery {
    /// What the metadata recovery found and did.
    pub report: RecoveryReport,
    /// The local log's binding to the remote ([`RecoveryOptions::bind_to`]).
    pub binding: Option<Binding>,
}

impl std::ops::Deref for Recovery {
    type Target = RecoveryReport;

    fn deref(&self) -> &RecoveryReport {
        &self.report
    }
}
