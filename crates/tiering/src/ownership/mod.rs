//! Who owns a partition's remote tier, as a tiered log sees it: the binding of a local log to
//! its remote (O1), and the writer epoch that fences every other writer (O2). The records in
//! the remote tier and their formats are `krabka_remote_storage::ownership`'s; this module
//! decides when a log may claim an epoch, checks it before every copy and delete, and keeps
//! the local half, the binding file ([`binding`]).
//!
//! How a log gets its epoch ([`TieredLog::open_owned`](crate::TieredLog::open_owned)):
//! - **bound already** (`DIR/remote-binding` exists): the binding must name the remote and
//!   partition the log is opened with ([`OwnershipError::WrongRemote`](crate::OwnershipError::WrongRemote), [`OwnershipError::WrongPartition`](crate::OwnershipError::WrongPartition)) and
//!   this very directory ([`OwnershipError::CopiedDirectory`](crate::OwnershipError::CopiedDirectory)), and its epoch must still be the
//!   partition's newest and its own ([`OwnershipError::Fenced`](crate::OwnershipError::Fenced)). An epoch record that is gone is
//!   written again, create-only, when the store enforces create-only writes.
//! - **not bound**: a log holding no record over a remote that holds the partition is refused
//!   ([`OwnershipError::RemoteHoldsPartition`](crate::OwnershipError::RemoteHoldsPartition): recover it); a log whose local metadata records remote
//!   segments of the partition (tiered before bindings existed), or any log over a remote that
//!   holds nothing of the partition, claims the next epoch; any other log is refused
//!   ([`OwnershipError::NotBound`](crate::OwnershipError::NotBound)).
//! - **recovery** binds the directory it rebuilt as *pending* ([`bind_pending`]): it fences
//!   nobody; the log's first owned open claims the next epoch from the recovered end on (the
//!   old writer is then fenced at its next check), unless the remote moved past that end
//!   meanwhile ([`OwnershipError::RemoteMovedOn`](crate::OwnershipError::RemoteMovedOn): the old writer is alive).
//!
//! A claim writes the binding first (with the epoch it is about to claim) and the epoch record
//! second: a crash between them leaves a binding whose record is missing, which the next open
//! writes (create-only: if another claimant took the epoch meanwhile, this log is fenced).

pub mod binding;
mod claim;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use krabka_remote_storage::ownership::{self as records, EpochCheck, EpochRecord, OwnershipStore};
use krabka_remote_storage::{RemoteStorageError, TopicIdPartition, Uuid, layout, now_ms};
use parking_lot::Mutex;

pub use binding::{BINDING_FILE, Binding, BindingState};
pub(crate) use claim::bind;
pub use claim::bind_pending;

use crate::error::Error;

/// What a tiered log needs to own its partition in the remote tier: the store of the
/// ownership records and the remote's location as recorded in the binding.
#[derive(Clone)]
pub struct RemoteOwnership {
    /// The store the ownership records live in: the same bucket and prefix (or root) as the
    /// segments.
    pub store: Arc<dyn OwnershipStore>,
    /// The remote's location, stable across runs and machines (e.g. `s3://bucket/prefix` or
    /// `fs:///absolute/path`): a log opened with another location is refused.
    pub location: String,
    /// Who claims, for humans reading an epoch record (host, process, directory).
    pub claimant: String,
    /// Open to read only: the binding is checked (remote and partition) but no epoch is
    /// claimed or checked, and every round, copy and delete fails with [`OwnershipError::ReadOnly`](crate::OwnershipError::ReadOnly).
    pub read_only: bool,
}

impl std::fmt::Debug for RemoteOwnership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOwnership")
            .field("location", &self.location)
            .field("claimant", &self.claimant)
            .finish_non_exhaustive()
    }
}

impl RemoteOwnership {
    /// Ownership through `store` at `location`, claimed by this host and process.
    pub fn new(store: Arc<dyn OwnershipStore>, location: impl Into<String>) -> Self {
        Self {
            store,
            location: location.into(),
            claimant: default_claimant(),
            read_only: false,
        }
    }

    /// The same ownership, opened to read only (see [`read_only`](Self::read_only)).
    #[must_use]
    pub fn reading(mut self) -> Self {
        self.read_only = true;
        self
    }
}

/// `host pid N`: who claims, for humans.
fn default_claimant() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("host {host} pid {}", std::process::id())
}

/// A log's held writer epoch, checked before every copy and delete.
/// What the partition head's writer needs of its owner ([`Owner::head_writer`]).
pub(crate) struct HeadWriter<'a> {
    pub(crate) store: &'a dyn OwnershipStore,
    pub(crate) partition_dir: &'a str,
    pub(crate) epoch: u64,
    pub(crate) incarnation: Uuid,
}

pub(crate) struct Owner {
    store: Arc<dyn OwnershipStore>,
    dir: PathBuf,
    partition: TopicIdPartition,
    partition_dir: String,
    epoch: u64,
    /// The first seq of its epoch (as claimed): a restored epoch record carries it again.
    start_seq: u64,
    incarnation: Uuid,
    enforced: bool,
    /// Opened to read only: no epoch held.
    read_only: bool,
    /// Set once a check found a later writer: every later check fails without I/O.
    fenced: Mutex<Option<EpochRecord>>,
}

impl Owner {
    /// An owner that holds no epoch: opened to read only.
    fn reader(
        ownership: &RemoteOwnership,
        dir: &Path,
        tp: &TopicIdPartition,
        partition_dir: String,
    ) -> Self {
        Self {
            store: ownership.store.clone(),
            dir: dir.to_path_buf(),
            partition: tp.clone(),
            partition_dir,
            epoch: 0,
            start_seq: 0,
            incarnation: Uuid::nil(),
            enforced: false,
            read_only: true,
            fenced: Mutex::new(None),
        }
    }

    /// The writer epoch.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Where and as whom this log writes the partition head: `None` for a log opened to read
    /// only.
    pub(crate) fn head_writer(&self) -> Option<HeadWriter<'_>> {
        (!self.read_only && self.epoch > 0).then_some(HeadWriter {
            store: self.store.as_ref(),
            partition_dir: &self.partition_dir,
            epoch: self.epoch,
            incarnation: self.incarnation,
        })
    }

    /// Whether the store enforces create-only writes ([`records::probe`]).
    pub(crate) fn enforced(&self) -> bool {
        self.enforced
    }

    /// The error for a fence by `by`.
    fn fenced_error(&self, by: &EpochRecord) -> Error {
        Error::Ownership(crate::error::OwnershipError::Fenced {
            dir: self.dir.clone(),
            partition: Box::new(self.partition.clone()),
            epoch: self.epoch,
            by_epoch: by.epoch,
            claimant: by.claimant.clone(),
            start_seq: by.start_seq,
        })
    }

    /// Fails when an earlier check found this log fenced (no I/O).
    pub(crate) fn ensure_not_fenced_only(&self) -> Result<(), Error> {
        match &*self.fenced.lock() {
            Some(by) => Err(self.fenced_error(by)),
            None => Ok(()),
        }
    }

    /// Fails when an earlier check found this log fenced, or it was opened to read only (no
    /// I/O).
    pub(crate) fn ensure_not_fenced(&self) -> Result<(), Error> {
        if self.read_only {
            return Err(Error::Ownership(crate::error::OwnershipError::ReadOnly {
                dir: self.dir.clone(),
            }));
        }
        match &*self.fenced.lock() {
            Some(by) => Err(self.fenced_error(by)),
            None => Ok(()),
        }
    }

    /// Checks in the remote tier that this log's epoch is still the newest and its own (two
    /// small reads); a lost own record is written again create-only when the store enforces
    /// it. A fence is remembered: no later call does I/O.
    pub(crate) fn check(&self) -> Result<(), Error> {
        self.ensure_not_fenced()?;
        let found = records::check_epoch(
            self.store.as_ref(),
            &self.partition_dir,
            self.epoch,
            self.incarnation,
        )
        .map_err(|e| self.record_error(layout::epoch_key(&self.partition_dir, self.epoch), e))?;
        match found {
            EpochCheck::Current => Ok(()),
            EpochCheck::Fenced(by) => Err(self.fence(by)),
            EpochCheck::OwnRecordMissing => self.restore_own_record(),
            other => Err(Error::InvalidArgument(format!(
                "unexpected epoch check outcome {other:?}"
            ))),
        }
    }

    fn fence(&self, by: EpochRecord) -> Error {
        let e = self.fenced_error(&by);
        tracing::error!(partition = %self.partition, dir = %self.dir.display(), epoch = self.epoch,
            by_epoch = by.epoch, claimant = %by.claimant, "fenced: another writer took the partition over");
        *self.fenced.lock() = Some(by);
        e
    }

    /// Writes this log's epoch record again after it was lost (create-only: if another
    /// claimant wrote one meanwhile, that one stands and this log is fenced).
    fn restore_own_record(&self) -> Result<(), Error> {
        let key = layout::epoch_key(&self.partition_dir, self.epoch);
        if !self.enforced {
            return Err(self.record_error(
                key.clone(),
                RemoteStorageError::Corrupt {
                    location: key,
                    reason: "this log's epoch record is missing, and the store does not enforce \
                             create-only writes, so it cannot be written again safely"
                        .to_owned(),
                },
            ));
        }
        let record = EpochRecord::new(
            self.epoch,
            self.start_seq,
            self.incarnation,
            now_ms(),
            format!("{} (restored)", default_claimant()),
        );
        let created = self
            .store
            .create_if_absent(&key, &record.encode())
            .map_err(|e| self.record_error(key.clone(), e))?;
        if created {
            tracing::warn!(partition = %self.partition, key = %key,
                "this log's epoch record was missing; written again");
            return Ok(());
        }
        // Someone wrote it meanwhile: it is ours only if it names this incarnation.
        match records::check_epoch(
            self.store.as_ref(),
            &self.partition_dir,
            self.epoch,
            self.incarnation,
        )
        .map_err(|e| self.record_error(key.clone(), e))?
        {
            EpochCheck::Current => Ok(()),
            EpochCheck::Fenced(by) => Err(self.fence(by)),
            _ => Err(self.record_error(
                key.clone(),
                RemoteStorageError::Corrupt {
                    location: key,
                    reason: "the epoch record vanished again while it was being restored"
                        .to_owned(),
                },
            )),
        }
    }

    fn record_error(&self, key: String, source: RemoteStorageError) -> Error {
        Error::Ownership(crate::error::OwnershipError::Record {
            key,
            partition: Box::new(self.partition.clone()),
            source: Box::new(source),
        })
    }
}
