//! Who owns a partition's remote tier, as a tiered log sees it: the binding of a local log to
//! its remote (O1), and the writer epoch that fences every other writer (O2). The records in
//! the remote tier and their formats are `krabka_remote_storage::ownership`'s; this module
//! decides when a log may claim an epoch, checks it before every copy and delete, and keeps
//! the local half, the binding file ([`binding`]).
//!
//! How a log gets its epoch ([`TieredLog::open_owned`](crate::TieredLog::open_owned)):
//! - **bound already** (`DIR/remote-binding` exists): the binding must name the remote and
//!   partition the log is opened with ([`Error::WrongRemote`], [`Error::WrongPartition`]) and
//!   this very directory ([`Error::CopiedDirectory`]), and its epoch must still be the
//!   partition's newest and its own ([`Error::Fenced`]). An epoch record that is gone is
//!   written again, create-only, when the store enforces create-only writes.
//! - **not bound**: a log holding no record over a remote that holds the partition is refused
//!   ([`Error::RemoteHoldsPartition`]: recover it); a log whose local metadata records remote
//!   segments of the partition (tiered before bindings existed), or any log over a remote that
//!   holds nothing of the partition, claims the next epoch; any other log is refused
//!   ([`Error::NotBound`]).
//! - **recovery** binds the directory it rebuilt as *pending* ([`bind_pending`]): it fences
//!   nobody; the log's first owned open claims the next epoch from the recovered end on (the
//!   old writer is then fenced at its next check), unless the remote moved past that end
//!   meanwhile ([`Error::RemoteMovedOn`]: the old writer is alive).
//!
//! A claim writes the binding first (with the epoch it is about to claim) and the epoch record
//! second: a crash between them leaves a binding whose record is missing, which the next open
//! writes (create-only: if another claimant took the epoch meanwhile, this log is fenced).

pub mod binding;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::ownership::{
    self as records, EpochCheck, EpochRecord, IdentityRecord, OwnershipStore, ProbeOutcome,
};
use krabka_remote_storage::{
    RemoteLogSegmentState, RemoteStorageError, TopicIdPartition, Uuid, layout, now_ms,
};
use parking_lot::Mutex;

pub use binding::{BINDING_FILE, Binding};

use crate::error::Error;

/// How many times a claim lists the epochs again after losing a race for the next one.
const CLAIM_ATTEMPTS: usize = 16;

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
    /// claimed or checked, and every round, copy and delete fails with [`Error::ReadOnly`].
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

    /// Whether the store enforces create-only writes ([`records::probe`]).
    pub(crate) fn enforced(&self) -> bool {
        self.enforced
    }

    /// The error for a fence by `by`.
    fn fenced_error(&self, by: &EpochRecord) -> Error {
        Error::Fenced {
            dir: self.dir.clone(),
            partition: Box::new(self.partition.clone()),
            epoch: self.epoch,
            by_epoch: by.epoch,
            claimant: by.claimant.clone(),
            start_seq: by.start_seq,
        }
    }

    /// Fails when an earlier check found this log fenced, or it was opened to read only (no
    /// I/O).
    pub(crate) fn ensure_not_fenced(&self) -> Result<(), Error> {
        if self.read_only {
            return Err(Error::ReadOnly {
                dir: self.dir.clone(),
            });
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
        Error::Ownership {
            key,
            partition: Box::new(self.partition.clone()),
            source: Box::new(source),
        }
    }
}

/// What the remote holds of a partition, for deciding whether a log may claim it.
struct RemoteHolds {
    identity: Option<IdentityRecord>,
    /// The highest epoch listed (readable or not), 0 for none.
    max_epoch: u64,
    newest: Option<EpochRecord>,
    segment_objects: u64,
}

impl RemoteHolds {
    fn anything(&self) -> bool {
        self.identity.is_some() || self.max_epoch > 0 || self.segment_objects > 0
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.segment_objects > 0 {
            parts.push(format!("{} segment objects", self.segment_objects));
        }
        match &self.newest {
            Some(e) => parts.push(format!(
                "writer epoch {} claimed by {} at {} ms",
                e.epoch, e.claimant, e.claimed_ms
            )),
            None if self.max_epoch > 0 => {
                parts.push(format!("writer epoch {} (unreadable)", self.max_epoch));
            }
            None => {}
        }
        if parts.is_empty() && self.identity.is_some() {
            parts.push("its identity record".to_owned());
        }
        parts.join(", ")
    }
}

fn ownership_error(tp: &TopicIdPartition, key: String, source: RemoteStorageError) -> Error {
    Error::Ownership {
        key,
        partition: Box::new(tp.clone()),
        source: Box::new(source),
    }
}

/// Lists what the remote holds of `tp`: its identity (checked against `tp`), its epochs and
/// how many segment objects.
fn remote_holds(store: &dyn OwnershipStore, tp: &TopicIdPartition) -> Result<RemoteHolds, Error> {
    let dir = layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let identity_key = layout::identity_key(&dir);
    let identity = match records::read_record(store, &identity_key)
        .map_err(|e| ownership_error(tp, identity_key.clone(), e))?
    {
        None => None,
        Some(bytes) => {
            let record = IdentityRecord::decode(&bytes, &identity_key)
                .map_err(|e| ownership_error(tp, identity_key.clone(), e))?;
            if &record.partition != tp {
                return Err(ownership_error(
                    tp,
                    identity_key.clone(),
                    RemoteStorageError::Corrupt {
                        location: identity_key,
                        reason: format!("identity record: it names partition {}", record.partition),
                    },
                ));
            }
            Some(record)
        }
    };
    let mut segment_objects = 0u64;
    let prefix = format!("{dir}/");
    store
        .list_partition(&dir, &mut |obj| {
            let name = obj.key.strip_prefix(&prefix).unwrap_or(&obj.key);
            if !layout::is_ownership_name(name) {
                segment_objects += 1;
            }
            Ok(())
        })
        .map_err(|e| ownership_error(tp, dir.clone(), e))?;
    let (epochs, unreadable) = records::list_epochs(store, &dir, false)
        .map_err(|e| ownership_error(tp, dir.clone(), e))?;
    let max_epoch = epochs
        .iter()
        .map(|e| e.epoch)
        .chain(unreadable.iter().copied())
        .max()
        .unwrap_or(0);
    Ok(RemoteHolds {
        identity,
        max_epoch,
        newest: epochs.into_iter().next_back(),
        segment_objects,
    })
}

/// Binds the log in `dir` (whose local state is `local_empty` and whose metadata `rlmm` holds)
/// to `ownership`'s remote as partition `tp`, claiming an epoch when it is not bound yet, and
/// checks the epoch it holds. See the [module docs](self).
pub(crate) fn bind(
    dir: &Path,
    tp: &TopicIdPartition,
    ownership: &RemoteOwnership,
    local_empty: bool,
    local_first_seq: u64,
    rlmm: &dyn RemoteLogMetadataManager,
) -> Result<Owner, Error> {
    let partition_dir =
        layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let here = binding::directory_identity(dir)?;
    if let Some(bound) = binding::read(dir)? {
        if bound.location != ownership.location {
            return Err(Error::WrongRemote {
                dir: dir.to_path_buf(),
                bound: bound.location,
                given: ownership.location.clone(),
            });
        }
        if &bound.partition != tp {
            return Err(Error::WrongPartition {
                dir: dir.to_path_buf(),
                bound: Box::new(bound.partition),
                given: Box::new(tp.clone()),
            });
        }
        if ownership.read_only {
            return Ok(Owner::reader(ownership, dir, tp, partition_dir));
        }
        if bound.directory != here {
            return Err(Error::CopiedDirectory {
                dir: dir.to_path_buf(),
                partition: Box::new(tp.clone()),
                epoch: bound.epoch,
                bound: bound.directory,
                found: here,
            });
        }
        if bound.epoch == 0 {
            // Pending (recovery bound it): claim now, unless the remote moved past the end
            // this directory was recovered to.
            refuse_if_moved_on(dir, tp, ownership, bound.start_seq, bound.since_ms)?;
            let max = remote_holds(ownership.store.as_ref(), tp)?.max_epoch;
            return claim(dir, tp, ownership, bound.start_seq, max);
        }
        let enforced = probe(ownership, tp, &partition_dir)?;
        let owner = Owner {
            read_only: false,
            store: ownership.store.clone(),
            dir: dir.to_path_buf(),
            partition: tp.clone(),
            partition_dir,
            epoch: bound.epoch,
            start_seq: bound.start_seq,
            incarnation: bound.incarnation,
            enforced,
            fenced: Mutex::new(None),
        };
        ensure_identity(ownership, tp)?;
        owner.check()?;
        return Ok(owner);
    }
    let holds = remote_holds(ownership.store.as_ref(), tp)?;
    if ownership.read_only {
        if holds.anything() && local_empty {
            return Err(Error::RemoteHoldsPartition {
                dir: dir.to_path_buf(),
                location: ownership.location.clone(),
                partition: Box::new(tp.clone()),
                what: holds.describe(),
            });
        }
        return Ok(Owner::reader(ownership, dir, tp, partition_dir));
    }
    if holds.anything() {
        let known = rlmm
            .list_remote_log_segments(tp)
            .map_err(|e| Error::metadata("list", None, e))?;
        let tiered_here = known.iter().any(|m| {
            matches!(
                m.state(),
                RemoteLogSegmentState::CopySegmentFinished
                    | RemoteLogSegmentState::DeleteSegmentStarted
            )
        });
        if !tiered_here {
            let (location, what) = (ownership.location.clone(), holds.describe());
            return Err(if local_empty {
                Error::RemoteHoldsPartition {
                    dir: dir.to_path_buf(),
                    location,
                    partition: Box::new(tp.clone()),
                    what,
                }
            } else {
                Error::NotBound {
                    dir: dir.to_path_buf(),
                    location,
                    partition: Box::new(tp.clone()),
                    what,
                }
            });
        }
    }
    // A log tiered before bindings existed claims from the end of what its metadata records as
    // remote; a new log from its first seq.
    let start_seq = rlmm
        .list_remote_log_segments(tp)
        .map_err(|e| Error::metadata("list", None, e))?
        .iter()
        .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
        .map(|m| m.end_offset().saturating_add(1))
        .max()
        .unwrap_or(local_first_seq);
    claim(dir, tp, ownership, start_seq, holds.max_epoch)
}

/// Binds the log in `dir`, just recovered from the remote tier alone, to `location` and `tp`
/// as a **pending** claim from `start_seq` (the seq after the recovered end): recovery fences
/// nobody (a drill beside a live writer changes nothing for it); the log's first owned open
/// claims the next epoch, unless the remote moved past `start_seq` meanwhile
/// ([`Error::RemoteMovedOn`]: the old writer is alive and copying). A binding already there for
/// the same remote and partition is kept (recovery runs again to the same result).
///
/// # Errors
/// [`Error::WrongRemote`] / [`Error::WrongPartition`] when `dir` is bound to another remote or
/// partition; [`Error::Binding`] when the binding cannot be read or written.
pub fn bind_pending(
    dir: &Path,
    tp: &TopicIdPartition,
    location: &str,
    start_seq: u64,
) -> Result<Binding, Error> {
    if let Some(bound) = binding::read(dir)? {
        if bound.location != location {
            return Err(Error::WrongRemote {
                dir: dir.to_path_buf(),
                bound: bound.location,
                given: location.to_owned(),
            });
        }
        if &bound.partition != tp {
            return Err(Error::WrongPartition {
                dir: dir.to_path_buf(),
                bound: Box::new(bound.partition),
                given: Box::new(tp.clone()),
            });
        }
        return Ok(bound);
    }
    let pending = Binding {
        location: location.to_owned(),
        partition: tp.clone(),
        epoch: 0,
        start_seq,
        since_ms: now_ms(),
        incarnation: Uuid::nil(),
        directory: binding::directory_identity(dir)?,
    };
    binding::write(dir, &pending)?;
    Ok(pending)
}

/// Refuses a pending claim from `start_seq` when the remote holds a copy starting at or after
/// it that began at or after `since_ms` (when recovery read the remote): another writer copied
/// past the recovered end after the recovery, so it is alive, and claiming would supersede what
/// it copied. Copies beyond the end that began before the recovery (left by a writer that
/// died, in progress or finished out of order) do not count: the claim supersedes them. One
/// listing, and a read of each manifest past the end.
fn refuse_if_moved_on(
    dir: &Path,
    tp: &TopicIdPartition,
    ownership: &RemoteOwnership,
    start_seq: u64,
    since_ms: i64,
) -> Result<(), Error> {
    let pdir = layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let prefix = format!("{pdir}/");
    let mut beyond = Vec::new();
    ownership
        .store
        .list_partition(&pdir, &mut |obj| {
            let name = obj.key.strip_prefix(&prefix).unwrap_or(&obj.key);
            if let Some((start, _, layout::SegmentFile::Manifest)) =
                layout::parse_segment_file_name(name)
                && start >= start_seq
            {
                beyond.push((start, obj.key));
            }
            Ok(())
        })
        .map_err(|e| ownership_error(tp, pdir.clone(), e))?;
    beyond.sort();
    for (start, key) in beyond {
        // Gone since the listing (a delete finished): nothing to hold.
        let Some(bytes) = read_object_if_present(ownership.store.as_ref(), &key)
            .map_err(|e| ownership_error(tp, key.clone(), e))?
        else {
            continue;
        };
        // An unreadable manifest proves nothing either way; the scan reports it.
        let Ok(m) = krabka_remote_storage::manifest::decode(&bytes, &key) else {
            continue;
        };
        if m.event_timestamp_ms() >= since_ms {
            return Err(Error::RemoteMovedOn {
                dir: dir.to_path_buf(),
                partition: Box::new(tp.clone()),
                recovered_to: start_seq.saturating_sub(1),
                remote_seq: start,
            });
        }
    }
    Ok(())
}

/// Reads a whole object, `None` when it does not exist.
fn read_object_if_present(
    store: &dyn OwnershipStore,
    key: &str,
) -> Result<Option<Vec<u8>>, RemoteStorageError> {
    match store.read_object(key) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(RemoteStorageError::SegmentNotFound { .. }) => Ok(None),
        Err(RemoteStorageError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Probes whether the store enforces create-only writes (once per open): an ignoring store is
/// reported and gets the documented fallback (claims read back, no restored records).
fn probe(
    ownership: &RemoteOwnership,
    tp: &TopicIdPartition,
    partition_dir: &str,
) -> Result<bool, Error> {
    match records::probe(ownership.store.as_ref(), partition_dir)
        .map_err(|e| ownership_error(tp, format!("{partition_dir}/{}", layout::PROBE_PREFIX), e))?
    {
        ProbeOutcome::Enforced => Ok(true),
        _ => {
            tracing::warn!(partition = %tp, location = %ownership.location,
                "the remote store ignores create-only writes: writer epochs are claimed and read \
                 back, and a second writer is fenced at its next check, not before its first copy");
            Ok(false)
        }
    }
}

/// Writes the partition's identity record when it is missing (create-only); a record naming
/// another partition or that does not decode is an error.
fn ensure_identity(ownership: &RemoteOwnership, tp: &TopicIdPartition) -> Result<(), Error> {
    let dir = layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let key = layout::identity_key(&dir);
    let record = IdentityRecord::new(tp.clone(), now_ms());
    match ownership.store.create_if_absent(&key, &record.encode()) {
        Ok(true) => Ok(()),
        Ok(false) => {
            let bytes = records::read_record(ownership.store.as_ref(), &key)
                .map_err(|e| ownership_error(tp, key.clone(), e))?
                .unwrap_or_default();
            let found = IdentityRecord::decode(&bytes, &key)
                .map_err(|e| ownership_error(tp, key.clone(), e))?;
            if &found.partition == tp {
                Ok(())
            } else {
                Err(ownership_error(
                    tp,
                    key.clone(),
                    RemoteStorageError::Corrupt {
                        location: key,
                        reason: format!("identity record: it names partition {}", found.partition),
                    },
                ))
            }
        }
        Err(e) => Err(ownership_error(tp, key, e)),
    }
}

/// Claims the epoch after `max_epoch` (listing again after a lost race) from `start_seq` on,
/// and binds `dir` to it: the binding first, the epoch record second.
fn claim(
    dir: &Path,
    tp: &TopicIdPartition,
    ownership: &RemoteOwnership,
    start_seq: u64,
    mut max_epoch: u64,
) -> Result<Owner, Error> {
    let partition_dir =
        layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let enforced = probe(ownership, tp, &partition_dir)?;
    ensure_identity(ownership, tp)?;
    let here = binding::directory_identity(dir)?;
    let incarnation = Uuid::new_v4();
    let claimant = format!("{} dir {}", ownership.claimant, dir.display());
    for _ in 0..CLAIM_ATTEMPTS {
        let epoch = max_epoch.saturating_add(1);
        binding::write(
            dir,
            &Binding {
                location: ownership.location.clone(),
                partition: tp.clone(),
                epoch,
                start_seq,
                since_ms: now_ms(),
                incarnation,
                directory: here.clone(),
            },
        )?;
        let record = EpochRecord::new(epoch, start_seq, incarnation, now_ms(), claimant.clone());
        let key = layout::epoch_key(&partition_dir, epoch);
        let created = ownership
            .store
            .create_if_absent(&key, &record.encode())
            .map_err(|e| ownership_error(tp, key.clone(), e))?;
        if created {
            let owner = Owner {
                read_only: false,
                store: ownership.store.clone(),
                dir: dir.to_path_buf(),
                partition: tp.clone(),
                partition_dir,
                epoch,
                start_seq,
                incarnation,
                enforced,
                fenced: Mutex::new(None),
            };
            // Read back: on a store that ignores the condition, a racing claimant's record may
            // have replaced ours.
            owner.check()?;
            tracing::info!(partition = %tp, dir = %dir.display(), epoch, start_seq,
                "claimed writer epoch");
            return Ok(owner);
        }
        max_epoch = remote_holds(ownership.store.as_ref(), tp)?
            .max_epoch
            .max(epoch);
    }
    Err(ownership_error(
        tp,
        layout::epoch_key(&partition_dir, max_epoch.saturating_add(1)),
        RemoteStorageError::Retriable {
            operation: "claim".to_owned(),
            location: layout::epoch_key(&partition_dir, max_epoch.saturating_add(1)),
            message: format!(
                "lost the race for the next writer epoch {CLAIM_ATTEMPTS} times in a row"
            ),
            source: None,
        },
    ))
}
