//! The partition directory: every file of a tiered log's directory, owned in one place, and the
//! one open path brokers and the `krabka` command share.
//!
//! A tiered log's directory holds the local log (segments, indexes, the files
//! `krabka_storage` keeps), and beside it tiering's own files, each with one owner in this
//! crate:
//!
//! | file | what it records | owner |
//! | --- | --- | --- |
//! | `remote-metadata/` | the durable record of the remote segments | `krabka_remote_metadata::durable` |
//! | [`TOPIC_FILE`] (`topic`) | the partition the log is tiered under | [`topic`] |
//! | [`BINDING_FILE`](crate::BINDING_FILE) (`remote-binding`) | the remote and writer epoch it belongs to | [`ownership::binding`](crate::ownership::binding) |
//! | [`RETENTION_POINT_FILE`](crate::RETENTION_POINT_FILE) (`tiering-log-start`) | the whole-log retention point | `retention_point` |
//! | [`LOST_SEQS_FILE`](crate::LOST_SEQS_FILE) (`tiering-lost-seqs`) | seqs a recovery found used but could not restore | `lost` |
//!
//! [`PartitionDir::open`] opens it in one of two [`Access`] modes (the partition's writer, or
//! read-only, which writes nothing of tiering's), [`PartitionDir::recover`] rebuilds it from
//! the remote tier alone. Each makes every check before it changes anything: an empty
//! directory over a remote that holds the partition, a log bound to another remote or
//! partition, a copied directory, a local log whose start nothing explains, a wrong topic id,
//! a recovery into a live log.

mod checks;
mod recover;
mod remote;
pub mod topic;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{RemoteLogSegmentState, TopicIdPartition};
use krabka_storage::{Log, Options, RecoveryReport as LogRecoveryReport};

use crate::error::Error;
use crate::metadata::DurableRemoteLogMetadataManager;
use crate::{RemoteOwnership, TieredLog, TieringConfig};

pub use recover::{
    PartitionQuery, RecoverOptions, Recovered, TailRecovery, find_partition,
    open_transformed_segment,
};
pub use remote::RemoteTier;
pub use topic::TOPIC_FILE;

/// Name of the directory, inside a tiered log's directory, holding the durable record of its
/// remote segments (itself a small krabka log).
pub const METADATA_DIR: &str = "remote-metadata";

/// Whether `name`, a file or directory in a log directory, is one of tiering's own (or the
/// temporary file of one): storage reports such files as ones it ignores, and they are no news.
pub fn is_own_file(name: &str) -> bool {
    let own = [
        METADATA_DIR,
        TOPIC_FILE,
        crate::BINDING_FILE,
        crate::RETENTION_POINT_FILE,
        crate::LOST_SEQS_FILE,
    ];
    own.iter()
        .any(|f| name == *f || name.strip_prefix(f).is_some_and(|rest| rest == ".tmp"))
}

/// How a partition directory is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// The partition's one writer: claims or checks the writer epoch, copies and deletes.
    Owner,
    /// Reads only: the binding is checked, no epoch is touched, and nothing of tiering's is
    /// written (no topic file, no metadata directory, no start moved); every round fails with
    /// [`OwnershipError::ReadOnly`](crate::OwnershipError::ReadOnly). The local log is opened with [`RecoveryMode::Strict`](krabka_storage::RecoveryMode::Strict):
    /// a torn tail is reported, not cut. The durable metadata is read with
    /// [`DurableRemoteLogMetadataManager::open_read_only`], which changes nothing in
    /// `remote-metadata/` either: a torn last event is left out and left in place (the owner's
    /// next open cuts it), and no metadata write is accepted.
    ReadOnly,
}

/// How to open a partition directory.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Writer or reader.
    pub access: Access,
    /// The local log's options.
    pub log: Options,
    /// The tiering config.
    pub config: TieringConfig,
    /// The tail writer a writer's log attaches to when `config.tail` is set: share one
    /// between every partition of a process (one object per window for all of them). `None`:
    /// the log starts its own.
    pub tail_writer: Option<crate::TailWriter>,
}

impl OpenOptions {
    /// Options to open with `access`, the default log options and tiering config.
    pub fn new(access: Access) -> Self {
        Self {
            access,
            log: Options::default(),
            config: TieringConfig::default(),
            tail_writer: None,
        }
    }
}

/// An open partition directory: the tiered log and what opening it found.
pub struct PartitionDir {
    log: TieredLog,
    metadata: Arc<dyn RemoteLogMetadataManager>,
    topic: TopicIdPartition,
    recovery: LogRecoveryReport,
    torn_event_cut: Option<crate::metadata::TornEventCut>,
    torn_event_found: Option<crate::metadata::TornEventFound>,
}

impl std::fmt::Debug for PartitionDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionDir")
            .field("dir", &self.log.log().dir())
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl PartitionDir {
    /// Opens the tiered log in `dir` over `remote`.
    ///
    /// The local log is opened first: it takes the directory's lock, so while another process
    /// has the log open this fails ([`Error::Storage`] with `krabka_storage::Error::Locked`)
    /// before the remote or the metadata are touched. Then, before anything of tiering's is
    /// created: an empty local log that was never tiered, over a remote holding a partition of
    /// the topic its directory's name gives, is refused ([`OwnershipError::RemoteHoldsPartition`](crate::OwnershipError::RemoteHoldsPartition):
    /// recover it); a local log that starts above seq 1 with no remote segment, retention point
    /// or hole to explain it is refused ([`OwnershipError::StartUnexplained`](crate::OwnershipError::StartUnexplained)); then the binding and
    /// the writer epoch as [`TieredLog::open_owned`] checks them.
    ///
    /// # Errors
    /// As above; [`OwnershipError::TopicFile`](crate::OwnershipError::TopicFile) for a damaged topic file; [`Error::Metadata`] when the
    /// durable metadata cannot be opened; as [`TieredLog::new_owned`].
    pub fn open(dir: &Path, remote: &RemoteTier, options: OpenOptions) -> Result<Self, Error> {
        let OpenOptions {
            access,
            log: mut log_options,
            config,
            tail_writer,
        } = options;
        if config.tail.is_some()
            && access == Access::Owner
            && remote.transforming().config().encrypts()
        {
            return Err(Error::Tail(crate::TailError::Unsupported(
                "tail objects are not encrypted: a remote tier with encryption takes closed \
                 segments only (no `tail`, no bucket durability)"
                    .to_owned(),
            )));
        }
        if access == Access::ReadOnly {
            log_options.recovery = krabka_storage::RecoveryMode::Strict;
        }
        crate::validate_log_options(&log_options)?;
        if access == Access::ReadOnly && !dir.is_dir() {
            // A reader creates nothing, not even the log's directory (a mistyped path).
            return Err(Error::InvalidArgument(format!(
                "no log directory at {} to read",
                dir.display()
            )));
        }
        let local = Log::open(dir, log_options)
            .map_err(|e| Error::storage(format!("opening {}", dir.display()), e))?;
        let recovery = local.recovery_report().clone();
        let mut recorded = topic::read_topic_file(dir)?;
        let metadata_dir = dir.join(METADATA_DIR);
        let tiered_before = metadata_dir.exists();
        checks::refuse_empty_log_over_remote_data(dir, &local, remote, recorded.is_some())?;
        if !tiered_before {
            // Checked before the metadata store is created: a restored `remote-metadata/`
            // must not meet a new empty one.
            checks::check_start_explained(dir, &local, None, recorded.is_some())?;
        }
        // The partition is settled before anything of tiering's is created, so that a crash
        // at any later step finds it again: the binding's (a crash after the claim and before
        // the topic file), else, for the writer of a log never tiered, a new one, recorded
        // first.
        let bound = crate::ownership::binding::read(dir)?.map(|b| b.partition);
        let topic_written = recorded.is_some();
        if recorded.is_none() && access == Access::Owner {
            let topic = match bound.clone() {
                Some(partition) => Some(partition),
                None if !tiered_before => Some(topic::new_topic(dir)),
                None => None,
            };
            if let Some(topic) = &topic {
                topic::write_topic_file(dir, topic)?;
            }
            recorded = topic;
        }
        let mut torn_event_found = None;
        let (metadata, torn_event_cut): (Arc<dyn RemoteLogMetadataManager>, _) =
            if access == Access::ReadOnly {
                // Read as an open would find it, changing nothing: no directory created (none
                // reads as nothing remote), no switch finished, no torn last event cut (it is
                // left out, and left for the owner's open to cut and report).
                let read = DurableRemoteLogMetadataManager::open_read_only(&metadata_dir)
                    .map_err(|e| Error::metadata("open", None, e))?;
                torn_event_found = read.torn_event().cloned();
                (Arc::new(read), None)
            } else {
                let durable = DurableRemoteLogMetadataManager::open(&metadata_dir)
                    .map_err(|e| Error::metadata("open", None, e))?;
                let cut = durable.torn_event_cut().cloned();
                (Arc::new(durable), cut)
            };
        let topic = match (&recorded, bound) {
            (Some(topic), _) => topic.clone(),
            // A reader of a directory its writer bound but crashed before recording the topic.
            (None, Some(partition)) => partition,
            // Tiered before the topic file existed (or never): under the topic its name gives.
            (None, None) => topic::topic_for(dir),
        };
        let known = metadata
            .list_remote_log_segments(&topic)
            .map_err(|e| Error::metadata("list", None, e))?;
        if known.is_empty() {
            checks::check_start_explained(dir, &local, Some(&topic), topic_written)?;
        }
        let mut ownership = RemoteOwnership::new(remote.store(), remote.location());
        if access == Access::ReadOnly {
            ownership = ownership.reading();
        }
        let log = TieredLog::new_owned(
            local,
            remote.segments(),
            Arc::clone(&metadata),
            topic.clone(),
            config,
            &ownership,
        )?;
        if recorded.is_none() && access == Access::Owner {
            // Tiered before the topic file existed: the file records the topic it was under.
            topic::write_topic_file(dir, &topic)?;
        }
        if access == Access::Owner
            && let Some(tail) = &log.config().tail
        {
            let writer = match tail_writer {
                Some(writer) => writer,
                None => crate::TailWriter::start(remote.store(), tail.clone())?,
            };
            log.attach_tail(writer)?;
        }
        let mut recovery = recovery;
        recovery.ignored_files.retain(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_own_file)
        });
        Ok(Self {
            log,
            metadata,
            topic,
            recovery,
            torn_event_cut,
            torn_event_found,
        })
    }

    /// The filesystem remote tier in `root` for the partition directory `dir`, opened with
    /// `access`: created when missing for the writer, except for a log bound to a remote (then
    /// a missing directory cannot be the one it is bound to:
    /// [`OwnershipError::WrongRemote`](crate::OwnershipError::WrongRemote), and nothing is
    /// created); never created for a reader.
    ///
    /// # Errors
    /// As above; as [`RemoteTier::fs`].
    #[cfg(feature = "fs")]
    pub fn fs_remote(
        dir: &Path,
        root: &Path,
        access: Access,
        transform: krabka_remote_transform::TransformConfig,
    ) -> Result<RemoteTier, Error> {
        checks::refuse_missing_fs_remote_of_bound_log(dir, root)?;
        RemoteTier::fs(root, access == Access::Owner, transform)
    }

    /// The tiered log.
    pub fn log(&self) -> &TieredLog {
        &self.log
    }

    /// The tiered log, for a caller that keeps only it.
    pub fn into_log(self) -> TieredLog {
        self.log
    }

    /// The durable record of the remote segments.
    pub fn metadata(&self) -> &Arc<dyn RemoteLogMetadataManager> {
        &self.metadata
    }

    /// The partition the log is tiered under.
    pub fn topic(&self) -> &TopicIdPartition {
        &self.topic
    }

    /// What opening the local log found and did, without tiering's own files (which storage
    /// does not know and lists as ignored).
    pub fn recovery_report(&self) -> &LogRecoveryReport {
        &self.recovery
    }

    /// A torn last event the metadata store cut when it opened (an append a crash cut short,
    /// never acknowledged).
    pub fn torn_event_cut(&self) -> Option<&crate::metadata::TornEventCut> {
        self.torn_event_cut.as_ref()
    }

    /// A torn last event a read-only open found in the metadata store and left in place (the
    /// owner's next open cuts it): it holds no acknowledged event.
    pub fn torn_event_found(&self) -> Option<&crate::metadata::TornEventFound> {
        self.torn_event_found.as_ref()
    }

    /// The directory.
    pub fn dir(&self) -> PathBuf {
        self.log.log().dir().to_path_buf()
    }

    /// Where every seq lives now.
    ///
    /// # Errors
    /// [`Error::Metadata`] when the metadata cannot be listed.
    pub fn placement(&self) -> Result<Placement, Error> {
        let remote = self
            .metadata
            .list_remote_log_segments(&self.topic)
            .map_err(|e| Error::metadata("list", None, e))?
            .into_iter()
            .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
            .map(|m| (m.start_offset(), m.end_offset()))
            .collect();
        let local = self
            .log
            .log()
            .segments()
            .into_iter()
            .filter(|s| s.last_seq >= s.base_seq)
            .map(|s| (s.base_seq, s.last_seq))
            .collect();
        Ok(Placement { remote, local })
    }
}

/// Which seqs live where.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Finished remote segments: `(start, end)` seqs.
    pub remote: Vec<(u64, u64)>,
    /// Local segments: `(base, last)` seqs (the active one last).
    pub local: Vec<(u64, u64)>,
}

impl Placement {
    /// The segments only the remote tier holds, those both hold, and those only the local
    /// log holds (not yet copied, or active).
    pub fn split(&self) -> [Vec<(u64, u64)>; 3] {
        let local_first = self.local.first().map(|s| s.0);
        let remote_last = self.remote.last().map(|s| s.1);
        let remote_only = self
            .remote
            .iter()
            .copied()
            .filter(|s| local_first.is_none_or(|f| s.1 < f))
            .collect();
        let both = self
            .local
            .iter()
            .copied()
            .filter(|s| remote_last.is_some_and(|r| s.1 <= r))
            .collect();
        let local_only = self
            .local
            .iter()
            .copied()
            .filter(|s| remote_last.is_none_or(|r| s.1 > r))
            .collect();
        [remote_only, both, local_only]
    }
}
