//! Disaster recovery of a partition from the remote tier alone: [`recover`] rebuilds its durable
//! metadata and starts its empty local log after the remote end
//! ([`krabka_remote_metadata::recovery`], whose docs give the rules), and binds the recovered
//! directory to its remote as a pending claim
//! ([`ownership::bind_pending`](crate::ownership::bind_pending)), before anything is deleted.

mod report;

use krabka_remote_metadata::recovery as metadata;
use krabka_remote_storage::{RemoteStorageError, TopicIdPartition};

use crate::metadata::DurableRemoteLogMetadataManager;

pub use krabka_remote_metadata::recovery::{
    DEFAULT_RECOVERY_CONCURRENCY, IgnoreReason, IgnoredObject, ListedObject, LocalLogOutcome,
    MapMetadata, MapMetadataFn, RemoteSegmentLister, find_partitions,
};
pub use report::{RecoveryOptions, RecoveryReport};

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
) -> Result<RecoveryReport, RemoteStorageError> {
    let installed = metadata::install(lister, tp, metadata, &options.metadata)?;
    let binding = match (&options.metadata.local_log_dir, &options.bind_to) {
        (Some(dir), Some(location)) => {
            let found = installed.report();
            let start = found
                .seq_range
                .as_ref()
                .map_or(1, |r| r.end().saturating_add(1));
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
    Ok(RecoveryReport::new(installed.finish()?, binding))
}
