//! Claiming a writer epoch: what the remote holds of a partition, binding a log (or a
//! recovered directory, as pending) to it, the probe of create-only writes, and the claim.

use std::path::Path;

use krabka_remote_storage::manifest::ManifestState;
use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::ownership::{
    self as records, EpochRecord, IdentityRecord, OwnershipStore, ProbeOutcome,
};
use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteLogSegmentState, RemoteStorageError, TopicIdPartition, Uuid,
    layout, now_ms,
};
use parking_lot::Mutex;

use super::binding::{self, Binding, BindingState};
use super::{Owner, RemoteOwnership};
use crate::error::Error;

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
    Error::Ownership(crate::error::OwnershipError::Record {
        key,
        partition: Box::new(tp.clone()),
        source: Box::new(source),
    })
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
            // Copies in another segment format are never read or extended as this one's.
            record
                .check_format(&identity_key)
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
    let mut epoch_keys = Vec::new();
    let prefix = format!("{dir}/");
    store
        .list_partition(&dir, &mut |obj| {
            let name = obj.key.strip_prefix(&prefix).unwrap_or(&obj.key);
            if let Some(epoch) = layout::parse_epoch_name(name) {
                epoch_keys.push((epoch, obj.key));
            } else if !layout::is_ownership_name(name) {
                segment_objects += 1;
            }
            Ok(())
        })
        .map_err(|e| ownership_error(tp, dir.clone(), e))?;
    let mut epochs = Vec::new();
    let mut unreadable = Vec::new();
    for (epoch, _, decoded) in
        records::read_epochs(store, epoch_keys).map_err(|e| ownership_error(tp, dir.clone(), e))?
    {
        match decoded {
            Ok(r) => epochs.push(r),
            // Unreadable: still an epoch a claimant must claim above.
            Err(_) => unreadable.push(epoch),
        }
    }
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
            return Err(Error::Ownership(
                crate::error::OwnershipError::WrongRemote {
                    dir: dir.to_path_buf(),
                    bound: bound.location,
                    given: ownership.location.clone(),
                },
            ));
        }
        if &bound.partition != tp {
            return Err(Error::Ownership(
                crate::error::OwnershipError::WrongPartition {
                    dir: dir.to_path_buf(),
                    bound: Box::new(bound.partition),
                    given: Box::new(tp.clone()),
                },
            ));
        }
        if ownership.read_only {
            return Ok(Owner::reader(ownership, dir, tp, partition_dir));
        }
        if bound.directory != here {
            return Err(Error::Ownership(
                crate::error::OwnershipError::CopiedDirectory {
                    dir: dir.to_path_buf(),
                    partition: Box::new(tp.clone()),
                    epoch: bound.epoch,
                    bound: bound.directory,
                    found: here,
                },
            ));
        }
        if bound.state == BindingState::Pending {
            // Recovery bound it: claim now, unless the remote moved past the end this
            // directory was recovered to.
            refuse_if_moved_on(dir, tp, ownership, &bound)?;
            let max = remote_holds(ownership.store.as_ref(), tp)?.max_epoch;
            return claim(dir, tp, ownership, &bound, max);
        }
        if bound.state == BindingState::Claiming {
            return finish_claim(dir, tp, ownership, bound, false);
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
            return Err(Error::Ownership(
                crate::error::OwnershipError::RemoteHoldsPartition {
                    dir: dir.to_path_buf(),
                    location: ownership.location.clone(),
                    partition: Box::new(tp.clone()),
                    what: holds.describe(),
                },
            ));
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
        // A log tiered before bindings existed may claim (no epoch is recorded yet); once a
        // writer holds an epoch, an unbound directory is a copy or lost its binding: refused.
        if !tiered_here || holds.max_epoch > 0 {
            let (location, what) = (ownership.location.clone(), holds.describe());
            return Err(if local_empty {
                Error::Ownership(crate::error::OwnershipError::RemoteHoldsPartition {
                    dir: dir.to_path_buf(),
                    location,
                    partition: Box::new(tp.clone()),
                    what,
                })
            } else {
                Error::Ownership(crate::error::OwnershipError::NotBound {
                    dir: dir.to_path_buf(),
                    location,
                    partition: Box::new(tp.clone()),
                    what,
                })
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
    let from = Binding {
        location: ownership.location.clone(),
        partition: tp.clone(),
        epoch: 0,
        start_seq,
        since_ms: now_ms(),
        state: BindingState::Pending,
        seen: Vec::new(),
        incarnation: Uuid::nil(),
        directory: here,
    };
    claim(dir, tp, ownership, &from, holds.max_epoch)
}

/// Binds the log in `dir`, just recovered from the remote tier alone, to `location` and `tp`
/// as a **pending** claim from `start_seq` (the seq after the recovered end): recovery fences
/// nobody (a drill beside a live writer changes nothing for it); the log's first owned open
/// claims the next epoch, unless the remote moved past `start_seq` meanwhile
/// ([`OwnershipError::RemoteMovedOn`](crate::OwnershipError::RemoteMovedOn): the old writer is alive). `since_ms` is when recovery began to
/// read the remote; the copies past `start_seq` already complete then are listed through
/// `lister` and recorded ([`Binding::seen`]), `since_ms` lifted past every copy listed. A
/// binding already there for the same remote and partition is kept (recovery runs again).
///
/// # Errors
/// [`OwnershipError::WrongRemote`](crate::OwnershipError::WrongRemote) / [`OwnershipError::WrongPartition`](crate::OwnershipError::WrongPartition) when `dir` is bound to another remote or
/// partition; [`OwnershipError::Record`](crate::OwnershipError::Record) when the remote cannot be listed; [`OwnershipError::Binding`](crate::OwnershipError::Binding) when
/// the binding cannot be read or written.
pub fn bind_pending(
    dir: &Path,
    tp: &TopicIdPartition,
    location: &str,
    start_seq: u64,
    since_ms: i64,
    lister: &dyn RemoteSegmentLister,
) -> Result<Binding, Error> {
    if let Some(bound) = binding::read(dir)? {
        if bound.location != location {
            return Err(Error::Ownership(
                crate::error::OwnershipError::WrongRemote {
                    dir: dir.to_path_buf(),
                    bound: bound.location,
                    given: location.to_owned(),
                },
            ));
        }
        if &bound.partition != tp {
            return Err(Error::Ownership(
                crate::error::OwnershipError::WrongPartition {
                    dir: dir.to_path_buf(),
                    bound: Box::new(bound.partition),
                    given: Box::new(tp.clone()),
                },
            ));
        }
        return Ok(bound);
    }
    let copies = copies_past(lister, tp, start_seq)?;
    // Copy times run ahead of the clock when many are planned in one millisecond: every copy
    // listed now began before this recovery, whatever its time says.
    let since_ms = copies
        .iter()
        .map(|m| m.event_timestamp_ms().saturating_add(1))
        .fold(since_ms, i64::max);
    let seen = copies
        .into_iter()
        .filter(|m| ManifestState::of(m) == ManifestState::Complete)
        .map(|m| m.remote_log_segment_id().id())
        .take(binding::MAX_SEEN)
        .collect();
    let pending = Binding {
        location: location.to_owned(),
        partition: tp.clone(),
        epoch: 0,
        start_seq,
        since_ms,
        state: BindingState::Pending,
        seen,
        incarnation: Uuid::nil(),
        directory: binding::directory_identity(dir)?,
    };
    binding::write(dir, &pending)?;
    Ok(pending)
}

/// The copies (manifests, in any state) of `tp` starting at or after `start_seq`, oldest
/// first: one listing and a read of each manifest past it (unreadable ones are skipped: the
/// scan reports them).
fn copies_past(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    start_seq: u64,
) -> Result<Vec<RemoteLogSegmentMetadata>, Error> {
    let pdir = layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let prefix = format!("{pdir}/");
    let mut keys = Vec::new();
    lister
        .list_partition(&pdir, &mut |obj| {
            let name = obj.key.strip_prefix(&prefix).unwrap_or(&obj.key);
            if let Some((start, _, layout::SegmentObject::Manifest)) =
                layout::parse_segment_object_name(name)
                && start >= start_seq
            {
                keys.push((start, obj.key));
            }
            Ok(())
        })
        .map_err(|e| ownership_error(tp, pdir.clone(), e))?;
    keys.sort();
    let mut out = Vec::with_capacity(keys.len());
    for (_, key) in keys {
        let bytes = match read_object_if_present(lister, &key) {
            Ok(Some(bytes)) => bytes,
            // Gone since the listing (a delete finished): nothing to hold.
            Ok(None) => continue,
            // Too large to be a manifest: unusable, like one that does not decode.
            Err(RemoteStorageError::Corrupt { .. }) => continue,
            Err(e) => return Err(ownership_error(tp, key.clone(), e)),
        };
        if let Ok(m) = krabka_remote_storage::manifest::decode(&bytes, &key) {
            out.push(m);
        }
    }
    Ok(out)
}

/// Refuses to claim from `bound.start_seq` when the remote shows a writer alive past it since
/// the binding was made: a complete copy there that was not complete then (not in
/// [`Binding::seen`]: it finished after the recovery), or a copy there that began at or after
/// `bound.since_ms`. Copies a writer that died left there (in progress, or complete before the
/// recovery) do not count: the claim supersedes them. One listing, and a read of each
/// manifest past the start.
fn refuse_if_moved_on(
    dir: &Path,
    tp: &TopicIdPartition,
    ownership: &RemoteOwnership,
    bound: &Binding,
) -> Result<(), Error> {
    for m in copies_past(ownership.store.as_ref(), tp, bound.start_seq)? {
        let finished_since = ManifestState::of(&m) == ManifestState::Complete
            && !bound.seen.contains(&m.remote_log_segment_id().id());
        let began_since = m.event_timestamp_ms() >= bound.since_ms
            && ManifestState::of(&m) != ManifestState::Deleting;
        if finished_since || began_since {
            return Err(Error::Ownership(
                crate::error::OwnershipError::RemoteMovedOn {
                    dir: dir.to_path_buf(),
                    partition: Box::new(tp.clone()),
                    recovered_to: bound.start_seq.saturating_sub(1),
                    remote_seq: m.start_offset(),
                },
            ));
        }
    }
    Ok(())
}

/// Reads a whole manifest, `None` when it does not exist; one over
/// [`MAX_MANIFEST_LEN`](krabka_remote_storage::manifest::MAX_MANIFEST_LEN) is `Corrupt`, never
/// held.
fn read_object_if_present(
    store: &dyn RemoteSegmentLister,
    key: &str,
) -> Result<Option<Vec<u8>>, RemoteStorageError> {
    let max =
        usize::try_from(krabka_remote_storage::manifest::MAX_MANIFEST_LEN).unwrap_or(usize::MAX);
    match store.read_object_bounded(key, max) {
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

/// Claims the epoch after `max_epoch` from `from.start_seq` on and binds `dir` to it: the
/// binding first (state claiming: a crash before the record exists is finished, after the
/// same checks, by the next open), the epoch record second, the binding claimed last. A lost
/// race for the epoch is a fence by the winner, never an outbid: a legitimate claimant never
/// needs to claim above one racing it.
fn claim(
    dir: &Path,
    tp: &TopicIdPartition,
    ownership: &RemoteOwnership,
    from: &Binding,
    max_epoch: u64,
) -> Result<Owner, Error> {
    let claiming = Binding {
        location: ownership.location.clone(),
        partition: tp.clone(),
        epoch: max_epoch.saturating_add(1),
        start_seq: from.start_seq,
        since_ms: from.since_ms,
        state: BindingState::Claiming,
        seen: from.seen.clone(),
        incarnation: Uuid::new_v4(),
        directory: binding::directory_identity(dir)?,
    };
    binding::write(dir, &claiming)?;
    // A pending claim was checked against the remote just before (`bind`).
    let checked = from.state == BindingState::Pending;
    finish_claim(dir, tp, ownership, claiming, checked)
}

/// Creates the epoch record a claiming binding names (unless it exists and is this log's),
/// then marks the binding claimed. A record naming another incarnation fences this log.
/// Before it creates the record it checks that the remote did not move on since the binding
/// was made ([`refuse_if_moved_on`]), unless the caller has just `checked`.
fn finish_claim(
    dir: &Path,
    tp: &TopicIdPartition,
    ownership: &RemoteOwnership,
    mut bound: Binding,
    checked: bool,
) -> Result<Owner, Error> {
    let partition_dir =
        layout::partition_dir(tp).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let enforced = probe(ownership, tp, &partition_dir)?;
    ensure_identity(ownership, tp)?;
    let owner = Owner {
        read_only: false,
        store: ownership.store.clone(),
        dir: dir.to_path_buf(),
        partition: tp.clone(),
        partition_dir: partition_dir.clone(),
        epoch: bound.epoch,
        start_seq: bound.start_seq,
        incarnation: bound.incarnation,
        enforced,
        fenced: Mutex::new(None),
    };
    let key = layout::epoch_key(&partition_dir, bound.epoch);
    let found = records::check_epoch(
        ownership.store.as_ref(),
        &partition_dir,
        bound.epoch,
        bound.incarnation,
    )
    .map_err(|e| ownership_error(tp, key.clone(), e))?;
    match found {
        records::EpochCheck::Current => {}
        records::EpochCheck::Fenced(by) => return Err(owner.fenced_error(&by)),
        _ => {
            // Not created yet (or a crash came first): the remote is checked again, then the
            // record is created create-only.
            if !checked {
                refuse_if_moved_on(dir, tp, ownership, &bound)?;
            }
            let claimant = format!("{} dir {}", ownership.claimant, dir.display());
            let record = EpochRecord::new(
                bound.epoch,
                bound.start_seq,
                bound.incarnation,
                now_ms(),
                claimant,
            );
            let created = ownership
                .store
                .create_if_absent(&key, &record.encode())
                .map_err(|e| ownership_error(tp, key.clone(), e))?;
            if !created {
                // Someone holds the epoch: ours only if it names this incarnation (a retried
                // request that had succeeded).
                let bytes = records::read_record(ownership.store.as_ref(), &key)
                    .map_err(|e| ownership_error(tp, key.clone(), e))?
                    .unwrap_or_default();
                let holder = EpochRecord::decode(&bytes, &key)
                    .map_err(|e| ownership_error(tp, key.clone(), e))?;
                if holder.incarnation != bound.incarnation {
                    return Err(owner.fenced_error(&holder));
                }
            }
        }
    }
    bound.state = BindingState::Claimed;
    binding::write(dir, &bound)?;
    // Read back: on a store that ignores the condition, a racing claimant's record may have
    // replaced ours.
    owner.check()?;
    tracing::info!(partition = %tp, dir = %dir.display(), epoch = bound.epoch,
        start_seq = bound.start_seq, "claimed writer epoch");
    Ok(owner)
}
