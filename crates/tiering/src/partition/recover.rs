//! [`PartitionDir::recover`]: rebuild a partition directory from its remote tier alone — which
//! partition, how a transformed segment is opened, the topic file, and a read of the result.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteStorageError, TopicIdPartition, Uuid, layout,
};
use krabka_remote_transform::{KeyId, Transforming};

use super::{Access, METADATA_DIR, OpenOptions, PartitionDir, RemoteTier, topic};
use crate::TieringConfig;
use crate::error::Error;
use crate::metadata::DurableRemoteLogMetadataManager;
use crate::recovery::{MapMetadata, Recovery, RecoveryOptions};

mod tail;

pub use tail::TailRecovery;

/// Which partition to recover. Every field left out is taken from the directory's topic file
/// when it has one, else from its name (the topic) and 0 (the partition); the topic id, when
/// not given, must be the only one the remote holds for that topic and partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionQuery {
    /// The topic name.
    pub topic: Option<String>,
    /// The partition.
    pub partition: Option<i32>,
    /// The topic id: given alone, it finds the partition whatever the directory is called.
    pub topic_id: Option<Uuid>,
}

/// How to recover a partition directory.
#[derive(Clone, Debug)]
pub struct RecoverOptions {
    /// Which partition.
    pub partition: PartitionQuery,
    /// Manifests read at once (at least 1).
    pub concurrency: usize,
    /// Delete the objects no one needs ([`RecoveryOptions::clean_orphans`]).
    pub clean_orphans: bool,
}

impl Default for RecoverOptions {
    fn default() -> Self {
        Self {
            partition: PartitionQuery::default(),
            concurrency: crate::recovery::DEFAULT_RECOVERY_CONCURRENCY,
            clean_orphans: false,
        }
    }
}

/// What a recovery did.
#[derive(Debug)]
#[non_exhaustive]
pub struct Recovered {
    /// The recovery's report.
    pub report: Recovery,
    /// Key ids of encrypted segments whose key was not given: those segments are left out
    /// (their seqs a hole or outside the range). Empty when every segment could be opened.
    pub missing_keys: BTreeSet<KeyId>,
    /// How many segments were left out for a missing key.
    pub missing_key_segments: usize,
    /// What was done with the tail in the bucket: the chains closed, the records restored
    /// from tail objects into the local log, and the seqs a writer used that no tier holds.
    pub tail: TailRecovery,
}

impl PartitionDir {
    /// Rebuilds the partition directory `dir` (created when missing) from `remote` alone, after
    /// its disk was lost: the records its writer acknowledged in tail objects (the chains the
    /// partition head lists are closed with a fence and their records above the finished
    /// segments restored into the local log), its durable metadata, its local log's start
    /// after every seq the bucket shows used (the head's `writer_last_seq`, the epoch records,
    /// the segments, the tail objects; the seqs no tier holds are named holes), its
    /// binding (pending: it fences nobody until its first owned open) and its topic file; then
    /// opens it read-only and reads its first record, so a recovery that leaves a log no read
    /// can open fails instead of reporting success. Safe to run again.
    ///
    /// Segments a transforming layer compressed or encrypted are opened through `remote`'s
    /// transforming layer; one encrypted with a key that was not given is left out and named
    /// in [`Recovered::missing_keys`].
    ///
    /// # Errors
    /// [`OwnershipError::InUse`](crate::OwnershipError::InUse) when a live process holds the directory (nothing changed);
    /// [`OwnershipError::TopicMismatch`](crate::OwnershipError::TopicMismatch) when the directory records another partition than asked;
    /// [`OwnershipError::PartitionNotFound`](crate::OwnershipError::PartitionNotFound) / [`OwnershipError::PartitionAmbiguous`](crate::OwnershipError::PartitionAmbiguous) when the remote holds no
    /// such partition or several; [`Error::InvalidArgument`] for a concurrency of 0;
    /// [`Error::Metadata`] when the recovery fails (nothing deleted); as
    /// [`PartitionDir::open`] for the read of the result.
    pub fn recover(
        dir: &Path,
        remote: &RemoteTier,
        options: &RecoverOptions,
    ) -> Result<Recovered, Error> {
        if options.concurrency == 0 {
            return Err(Error::InvalidArgument(
                "recovery concurrency must be at least 1".to_owned(),
            ));
        }
        refuse_if_in_use(dir)?;
        let store = remote.store();
        let tp = choose_partition(dir, &*store, remote.location(), &options.partition)?;
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::Ownership(crate::error::OwnershipError::TopicFile {
                path: dir.to_path_buf(),
                reason: format!("cannot create the directory: {e}"),
            })
        })?;
        // The tail first: its chains closed, its records above the head's finished segments
        // restored into the empty local log before the recovery starts it after the segments.
        let found = tail::find(&*store, &tp)?;
        let mut tail = tail::restore(dir, &found)?;
        let metadata = DurableRemoteLogMetadataManager::open(dir.join(METADATA_DIR))
            .map_err(|e| Error::metadata("open", None, e))?;
        let missing = Arc::new(Mutex::new(Vec::new()));
        let transforming = remote.transforming();
        let map = {
            let missing = Arc::clone(&missing);
            MapMetadata(Arc::new(move |m| {
                open_transformed_segment(&transforming, m, &missing)
            }))
        };
        let recovery = RecoveryOptions::default()
            .concurrency(options.concurrency)
            .clean_orphans(options.clean_orphans)
            .local_log_dir(dir)
            .bind_to(remote.location())
            .map_metadata(map);
        let report = crate::recovery::recover(&*store, &tp, &metadata, &recovery)
            .map_err(|e| Error::metadata("recovery", None, e))?;
        drop(metadata);
        let recovered_end = report.seq_range.as_ref().map_or(0, |r| *r.end());
        tail::settle(dir, &found, recovered_end, report.claimed_end, &mut tail)?;
        if tail.records > 0 || !tail.holes.is_empty() {
            tracing::warn!(partition = %tp, records = tail.records, holes = ?tail.holes,
                "recovered records from the tail in the bucket");
        }
        // Later opens find the partition here, as for a log tiered from this directory.
        topic::write_topic_file(dir, &tp)?;
        check_readable(dir, remote, &report)?;
        let missing = missing.lock().map(|m| m.clone()).unwrap_or_default();
        Ok(Recovered {
            report,
            missing_key_segments: missing.len(),
            missing_keys: missing.into_iter().collect(),
            tail,
        })
    }
}

/// What recovery (and a read replica) records for the segment a manifest describes: the
/// transforming layer's metadata ([`Transforming::recover_metadata`], which checks the
/// transform header and, with the key at hand, the key). A segment encrypted with a key that
/// was not given cannot be opened: its key id goes to `missing`, and the segment is left out,
/// saying why.
///
/// # Errors
/// When the segment cannot be opened, as above.
pub fn open_transformed_segment(
    transforming: &Transforming,
    m: &RemoteLogSegmentMetadata,
    missing: &Mutex<Vec<KeyId>>,
) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
    let recovered = transforming.recover_metadata(m)?;
    if let Some(id) = transforming.key_id(&recovered)?
        && !transforming.has_key(id)?
    {
        if let Ok(mut missing) = missing.lock() {
            missing.push(id);
        }
        return Err(RemoteStorageError::Backend {
            operation: "transform".to_owned(),
            location: m.remote_log_segment_id().to_string(),
            message: format!("encrypted with key id {id}, which was not given"),
            source: None,
        });
    }
    Ok(recovered)
}

/// Refuses a directory a live process holds (its log's lock, or its metadata's): recovery
/// rebuilds a lost log, it never joins a live one.
fn refuse_if_in_use(dir: &Path) -> Result<(), Error> {
    let mut locks = vec![dir.join(krabka_storage::LOCK_FILE_NAME)];
    if let Ok(entries) = std::fs::read_dir(dir.join(METADATA_DIR)) {
        let mut meta: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "lock"))
            .collect();
        meta.sort();
        locks.extend(meta);
    }
    for lock in locks {
        if !lock.exists() {
            continue;
        }
        // Taken and dropped at once: only whether someone else holds it matters.
        if let Err(std::fs::TryLockError::WouldBlock) =
            krabka_storage::create_and_lock(&lock).map(drop)
        {
            return Err(Error::Ownership(crate::error::OwnershipError::InUse {
                dir: dir.to_path_buf(),
                lock,
            }));
        }
    }
    Ok(())
}

/// The partition to recover (see [`PartitionQuery`]).
fn choose_partition(
    dir: &Path,
    lister: &dyn RemoteSegmentLister,
    remote: &str,
    query: &PartitionQuery,
) -> Result<TopicIdPartition, Error> {
    let recorded = topic::read_topic_file(dir)?;
    if let Some(recorded) = &recorded {
        let differs = query.topic.as_ref().is_some_and(|t| t != recorded.topic())
            || query.partition.is_some_and(|p| p != recorded.partition())
            || query.topic_id.is_some_and(|id| id != recorded.topic_id());
        // Never rebind a directory that records another partition: its log would no longer
        // open under the identity it was written with.
        if differs {
            return Err(Error::Ownership(
                crate::error::OwnershipError::TopicMismatch {
                    dir: dir.to_path_buf(),
                    recorded: Box::new(recorded.clone()),
                    asked: describe(query),
                },
            ));
        }
        return Ok(recorded.clone());
    }
    // A topic id alone finds its partition whatever the directory is called.
    // Named after the directory: the caller gave neither a topic nor a topic id.
    let by_name = query.topic.is_none() && query.topic_id.is_none();
    let query = PartitionQuery {
        topic: match (&query.topic, query.topic_id) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(_)) => None,
            (None, None) => Some(topic::topic_name_for(dir)),
        },
        partition: query.partition,
        topic_id: query.topic_id,
    };
    find_partition(lister, remote, &query).map_err(|e| match e {
        Error::Ownership(crate::error::OwnershipError::PartitionNotFound {
            remote,
            asked,
            others,
            ..
        }) => Error::Ownership(crate::error::OwnershipError::PartitionNotFound {
            remote,
            asked,
            others,
            by_name,
        }),
        e => e,
    })
}

/// The one partition on the remote `lister` lists (named `remote`) that `query` describes: its
/// topic (the partition defaults to 0 with a topic), and its topic id when given. A topic id
/// alone finds its partition whatever the topic is called.
///
/// # Errors
/// [`Error::InvalidArgument`] when `query` names neither a topic nor a topic id;
/// [`OwnershipError::PartitionNotFound`](crate::OwnershipError::PartitionNotFound) / [`OwnershipError::PartitionAmbiguous`](crate::OwnershipError::PartitionAmbiguous) when no partition or several
/// match; [`OwnershipError::RemoteUnusable`](crate::OwnershipError::RemoteUnusable) when the remote cannot be listed.
pub fn find_partition(
    lister: &dyn RemoteSegmentLister,
    remote: &str,
    query: &PartitionQuery,
) -> Result<TopicIdPartition, Error> {
    if query.topic.is_none() && query.topic_id.is_none() {
        return Err(Error::InvalidArgument(
            "name the partition by its topic or its topic id".to_owned(),
        ));
    }
    let name = query.topic.as_deref();
    let partition = query.partition.or(name.map(|_| 0));
    let mut found = Vec::new();
    // Partitions of the topic under other topic ids: named when the id asked for is not found.
    let mut others = std::collections::BTreeSet::new();
    lister
        .list_partition_dirs(&mut |entry| {
            if let Some(tp) = layout::parse_partition_dir(&entry)
                && name.is_none_or(|n| tp.topic() == n)
                && partition.is_none_or(|p| tp.partition() == p)
            {
                if query.topic_id.is_none_or(|id| tp.topic_id() == id) {
                    found.push(tp);
                } else if name.is_some() {
                    others.insert(tp.topic_id().to_string());
                }
            }
            Ok(())
        })
        .map_err(|e| {
            Error::Ownership(crate::error::OwnershipError::RemoteUnusable {
                remote: remote.to_owned(),
                reason: format!("cannot list its partitions: {e}"),
            })
        })?;
    found.sort_by(|a, b| {
        (a.topic(), a.partition(), a.topic_id()).cmp(&(b.topic(), b.partition(), b.topic_id()))
    });
    found.dedup();
    let asked = match (name, partition, query.topic_id) {
        (Some(t), Some(p), None) => format!("{p} of topic `{t}`"),
        (Some(t), Some(p), Some(id)) => format!("{p} of topic `{t}` with topic id {id}"),
        (_, Some(p), Some(id)) => format!("{p} with topic id {id}"),
        (_, _, Some(id)) => format!("with topic id {id}"),
        (Some(t), None, None) => format!("of topic `{t}`"),
        (None, _, None) => "of any topic".to_owned(),
    };
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::Ownership(
            crate::error::OwnershipError::PartitionNotFound {
                remote: remote.to_owned(),
                asked,
                others: others.into_iter().collect(),
                by_name: false,
            },
        )),
        many => Err(Error::Ownership(
            crate::error::OwnershipError::PartitionAmbiguous {
                remote: remote.to_owned(),
                asked,
                found: many.iter().map(|t| t.topic_id().to_string()).collect(),
            },
        )),
    }
}

fn describe(query: &PartitionQuery) -> String {
    let mut parts = Vec::new();
    if let Some(t) = &query.topic {
        parts.push(format!("topic `{t}`"));
    }
    if let Some(p) = query.partition {
        parts.push(format!("partition {p}"));
    }
    if let Some(id) = query.topic_id {
        parts.push(format!("topic id {id}"));
    }
    parts.join(", ")
}

/// Opens the recovered log read-only and reads its first record.
fn check_readable(dir: &Path, remote: &RemoteTier, report: &Recovery) -> Result<(), Error> {
    let opened = PartitionDir::open(
        dir,
        remote,
        OpenOptions {
            config: TieringConfig {
                retention_ms: None,
                ..TieringConfig::default()
            },
            ..OpenOptions::new(Access::ReadOnly)
        },
    )?;
    if let Some(range) = &report.seq_range {
        let first = *range.start();
        let read = opened.log().read(first, 1)?;
        if read.first().map(|r| r.seq) != Some(first) {
            return Err(Error::Ownership(
                crate::error::OwnershipError::RecoveredUnreadable {
                    dir: dir.to_path_buf(),
                    seq: first,
                    returned: read.len(),
                },
            ));
        }
    }
    opened.into_log().close()
}
