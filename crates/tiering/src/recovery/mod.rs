//! Disaster recovery of a partition from the remote tier alone: [`recover`] rebuilds its durable
//! metadata and starts its empty local log after the remote end
//! ([`krabka_remote_metadata::recovery`], whose docs give the rules), and binds the recovered
//! directory to its remote as a pending claim
//! ([`ownership::bind_pending`](crate::ownership::bind_pending)), before anything is deleted.

mod report;

use krabka_remote_metadata::recovery as metadata;
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageError, TopicIdPartition};

use crate::metadata::DurableRemoteLogMetadataManager;

pub use krabka_remote_metadata::recovery::{
    DEFAULT_RECOVERY_CONCURRENCY, HoleCause, IgnoreReason, IgnoredObject, ListedObject,
    LocalLogOutcome, MapMetadata, MapMetadataFn, RecoveryReport, RemoteSegmentLister,
    find_partitions,
};
pub use report::{Recovery, RecoveryOptions};

/// Rebuilds `tp`'s metadata in `metadata` from the remote tier `lister` lists, sets up the
/// local log, binds it to its remote ([`RecoveryOptions::bind_to`]), then deletes what no one
/// needs when asked ([`RecoveryOptions::clean_orphans`]).
///
/// Running it again gives the same result: segments the metadata already records identically
/// are kept, and a pending binding naming the same remote and partition is kept.
///
/// # Errors
/// As [`krabka_remote_metadata::recovery::recover`]; a binding the directory already has for
/// another remote or partition, or that cannot be written, as
/// [`RemoteStorageError::Backend`] (operation `"binding the recovered log"`) with the
/// [`Error`](crate::Error) as its source; nothing is deleted then.
pub fn recover(
    lister: &dyn RemoteSegmentLister,
    tp: &TopicIdPartition,
    metadata: &DurableRemoteLogMetadataManager,
    options: &RecoveryOptions,
) -> Result<Recovery, RemoteStorageError> {
    let installed = metadata::install(lister, tp, metadata, &options.metadata)?;
    if let Some(dir) = &options.metadata.local_log_dir {
        record_lost(dir, installed.report())?;
    }
    let binding = match (&options.metadata.local_log_dir, &options.bind_to) {
        (Some(dir), Some(location)) => {
            let found = installed.report();
            let start = found.claimed_end.map_or(1, |end| end.saturating_add(1));
            let bound =
                crate::ownership::bind_pending(dir, tp, location, start, found.started_ms, lister)
                    .map_err(|e| RemoteStorageError::Backend {
                        operation: "binding the recovered log".to_owned(),
                        location: dir.display().to_string(),
                        message: e.to_string(),
                        source: Some(Box::new(e)),
                    })?;
            Some(bound)
        }
        _ => None,
    };
    Ok(Recovery {
        report: installed.finish()?,
        binding,
    })
}

/// Records in `dir` ([`crate::lost`]) the seqs past the recovered range that the bucket shows
/// used but no tier holds, when the local log was started after them: opening the tiered log
/// then accepts that gap between the tiers, and reads of it name it.
fn record_lost(
    dir: &std::path::Path,
    found: &metadata::RecoveryReport,
) -> Result<(), RemoteStorageError> {
    let Some(lost) = found.holes.last() else {
        return Ok(());
    };
    let after_range = found
        .seq_range
        .as_ref()
        .is_none_or(|r| r.end() < lost.start());
    let started_after = matches!(
        found.local_log,
        LocalLogOutcome::StartedAt(n) | LocalLogOutcome::AlreadyAt(n) if n == lost.end().saturating_add(1)
    );
    if found.claimed_end != Some(*lost.end()) || !after_range || !started_after {
        return Ok(());
    }
    crate::lost::write(dir, lost).map_err(|e| RemoteStorageError::Backend {
        operation: "recording the lost seqs".to_owned(),
        location: dir.display().to_string(),
        message: e.to_string(),
        source: Some(Box::new(e)),
    })
}

/// `metadata` as the durable metadata records it, seen as the remote storage manager (and any
/// decorator in it, such as a transforming layer) returned it: without the chunk map a
/// [`TieredLog`](crate::TieredLog) keeps around the custom metadata of its copies. What a
/// caller outside a `TieredLog` hands the manager, or a decorator's own parser of its custom
/// metadata (a recovered segment has no chunk map: it comes back as it is).
pub fn backend_metadata(metadata: &RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata {
    crate::read::chunkmap::backend_view(metadata).into_owned()
}
