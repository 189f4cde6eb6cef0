//! The refusals a partition directory makes before it creates anything: pure decisions over
//! what the local log, the directory's files and the remote listing show.

use std::ops::RangeInclusive;
use std::path::Path;

use krabka_remote_storage::TopicIdPartition;
use krabka_remote_storage::recovery::find_partitions;
use krabka_storage::Log;

use super::{METADATA_DIR, RemoteTier, TOPIC_FILE, topic};
use crate::error::Error;

/// Refuses an empty local log that was never tiered (no topic file, no metadata) when the
/// remote holds a partition of the topic its directory's name gives: that is a log whose disk
/// was lost, and opening it as a new one would read as empty (hiding the remote records) and
/// give it a new identity under which they are never found. Recovery rebuilds it instead.
pub(super) fn refuse_empty_log_over_remote_data(
    dir: &Path,
    local: &Log,
    remote: &RemoteTier,
    topic_recorded: bool,
) -> Result<(), Error> {
    let never_tiered = !topic_recorded && !dir.join(METADATA_DIR).exists();
    let empty = local.next_seq() <= 1 && local.segments().iter().all(|s| s.size == 0);
    if !(never_tiered && empty) {
        return Ok(());
    }
    let derived = topic::topic_for(dir);
    let store = remote.store();
    let found = find_partitions(&*store, derived.topic(), derived.partition()).map_err(|e| {
        Error::Ownership(crate::error::OwnershipError::RemoteUnusable {
            remote: remote.location().to_owned(),
            reason: format!("cannot list its partitions: {e}"),
        })
    })?;
    if found.is_empty() {
        return Ok(());
    }
    Err(Error::Ownership(
        crate::error::OwnershipError::RemoteHoldsPartition {
            dir: dir.to_path_buf(),
            location: remote.location().to_owned(),
            partition: Box::new(derived),
            what: format!(
                "topic id {}",
                found
                    .iter()
                    .map(|t| t.topic_id().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    ))
}

/// Refuses a local log that starts above seq 1 when the metadata (`topic`'s segments, or no
/// metadata at all when `topic` is `None`) knows no remote segment and neither the whole-log
/// retention point nor a hole a repair or a recovery recorded explains the start. A log never
/// drops a segment on its own, so such a log lost its `remote-metadata/` (or, with no topic
/// file, its directory was renamed): tiering on would make the records below the start
/// unreachable.
pub(super) fn check_start_explained(
    dir: &Path,
    local: &Log,
    topic: Option<&TopicIdPartition>,
    topic_recorded: bool,
) -> Result<(), Error> {
    let start = local
        .segments()
        .first()
        .map_or_else(|| local.next_seq(), |s| s.base_seq);
    if start <= 1 {
        return Ok(());
    }
    let Ok(retention_point) = crate::read_retention_point(dir) else {
        // Unreadable: opening the tiered log names what is wrong with it.
        return Ok(());
    };
    let mut holes: Vec<RangeInclusive<u64>> =
        local.quarantined().into_iter().map(|(r, _)| r).collect();
    // Seqs a recovery found used but could not recover (unreadable: opening names it).
    holes.extend(crate::read_lost_seqs(dir).ok().flatten());
    if covered_from(retention_point.max(1), &holes) >= start {
        return Ok(());
    }
    let metadata = dir.join(METADATA_DIR);
    let m = metadata.display();
    let t = dir.join(TOPIC_FILE);
    let what = match topic {
        None => format!("{m}/ is missing"),
        Some(topic) if topic_recorded => format!(
            "{m}/ records no remote segment of its topic `{}` ({})",
            topic.topic(),
            t.display()
        ),
        Some(topic) => format!(
            "{m}/ records no remote segment of topic `{}` (the topic is named after the \
             directory, for a log tiered before {} existed: was the directory renamed?)",
            topic.topic(),
            t.display()
        ),
    };
    Err(Error::Ownership(
        crate::error::OwnershipError::StartUnexplained {
            dir: dir.to_path_buf(),
            start,
            what,
            renamed: topic.is_some() && !topic_recorded,
        },
    ))
}

/// The first seq from `from` on that none of `holes` covers.
fn covered_from(from: u64, holes: &[RangeInclusive<u64>]) -> u64 {
    let mut covered = from;
    // Bounded: each pass steps over one hole.
    for _ in 0..=holes.len() {
        match holes.iter().find(|h| h.contains(&covered)) {
            Some(hole) => covered = hole.end().saturating_add(1),
            None => break,
        }
    }
    covered
}

/// Refuses, before a filesystem remote is connected (which would create a missing
/// directory), a remote directory that does not exist for a log bound to a remote: it cannot
/// be the one the log is bound to (a typo, a relative path from another working directory),
/// and connecting would leave an empty directory behind.
pub(super) fn refuse_missing_fs_remote_of_bound_log(dir: &Path, root: &Path) -> Result<(), Error> {
    if root.exists() {
        return Ok(());
    }
    match crate::ownership::binding::read(dir)? {
        Some(bound) => Err(Error::Ownership(
            crate::error::OwnershipError::WrongRemote {
                dir: dir.to_path_buf(),
                bound: bound.location,
                given: format!("fs://{} (which does not exist)", root.display()),
            },
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::covered_from;

    #[test]
    fn holes_cover_a_start_only_when_they_chain_from_the_retention_point() {
        assert_eq!(covered_from(1, &[]), 1);
        assert_eq!(covered_from(1, &[1..=4, 5..=9]), 10);
        assert_eq!(covered_from(1, &[5..=9]), 1);
        assert_eq!(covered_from(5, &[5..=9, 1..=4]), 10);
    }
}
