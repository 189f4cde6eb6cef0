//! Retention: whole-log retention over the remote tier (the durable retention point first,
//! then the deletes), then local retention.

use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::atomic::Ordering;

use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState, now_ms,
};
use krabka_storage::SegmentInfo;

use super::remote::remote_segment;
use super::{TieredLog, local_segment};
use crate::error::Error;
use crate::policy::{self, LocalLimits, LocalSegment, RetentionLimits};
use crate::retention_point;
use crate::stats::TieringReport;

impl TieredLog {
    /// Whole-log retention over the remote tier, then local retention. Neither passes the
    /// round's [`TieringReport::copy_blocked_at`] (a damaged segment or an uncovered hole).
    pub(crate) fn apply_retention(&self, report: &mut TieringReport) -> Result<(), Error> {
        self.ensure_not_fenced()?;
        let now = now_ms();
        let segs = self.log.segments();
        let holes: Vec<RangeInclusive<u64>> =
            self.log.quarantined().into_iter().map(|(r, _)| r).collect();
        // An accepted hole holds nothing to keep: retention passes it like a copied segment.
        let accepted: Vec<RangeInclusive<u64>> = (self.log.accepted_holes().iter())
            .map(|a| a.first_seq..=a.last_seq)
            .collect();
        let holes = policy::blocking_holes(&holes, &accepted);
        let mut local: Vec<LocalSegment> = segs.iter().map(local_segment_on_disk).collect();
        local.extend(hole_segments(&holes));
        let blocked_at = self.blocked_at.load(Ordering::Acquire);
        // A follower leaves the remote tier to its writer, and trims only by what the writer's
        // current head says it finished (a complete copy the writer never recorded finished
        // may still be discarded).
        if let Some(replica) = &self.follower {
            if replica.stats().head != crate::replica::HeadStatus::Current {
                return Ok(());
            }
        } else {
            self.apply_log_retention(&local, now, blocked_at, report)?;
        }
        self.apply_local_retention(&local, segs.len(), now, blocked_at, report)
    }

    /// Whole-log retention over the remote tier: raises the durable retention point past the
    /// segments to delete (never to `blocked_at` or beyond), then deletes them. `local` holds
    /// the local segments and holes as the policy sees them.
    fn apply_log_retention(
        &self,
        local: &[LocalSegment],
        now: i64,
        blocked_at: u64,
        report: &mut TieringReport,
    ) -> Result<(), Error> {
        let list = self.remote_list()?;
        let view: Vec<_> = list.iter().map(remote_segment).collect();
        let local_only: u64 = local
            .iter()
            .filter(|s| !policy::is_safely_remote(s, &view))
            .map(|s| s.size)
            .sum();
        let limits = RetentionLimits {
            bytes: self.config.retention_bytes,
            ms: self.config.retention_ms,
        };
        let mut doomed = policy::remote_to_delete(
            &view,
            local_only,
            limits,
            now,
            self.retention_point.load(Ordering::Acquire),
        );
        // Whole-log retention never moves the start past damaged data it could not copy: the
        // segments to delete are an oldest prefix, so cutting at the first one reaching the
        // blocked seq keeps a prefix.
        if let Some(cut) = doomed
            .iter()
            .position(|&i| list.get(i).is_none_or(|m| m.end_offset() >= blocked_at))
        {
            doomed.truncate(cut);
        }
        // The new start is durable before any segment becomes unreadable or any data goes, so
        // first_seq() never moves backwards, even across a crash.
        let new_start = doomed
            .iter()
            .filter_map(|&i| list.get(i))
            .map(|m| m.end_offset().saturating_add(1))
            .max();
        if new_start.is_some() {
            // Nothing leaves the remote tier unless this log still owns it.
            self.check_owner()?;
        }
        let persisted = match new_start {
            Some(start) => self.raise_retention_point(start),
            None => Ok(()),
        };
        if let Err(e) = persisted {
            report.failures.push(e);
        } else {
            self.delete_remote(&list, &doomed, report);
        }
        Ok(())
    }

    /// Local retention: deletes the local segments below the seq the policy keeps from (never
    /// at `blocked_at` or beyond). `segments` is how many local segments there were before.
    fn apply_local_retention(
        &self,
        local: &[LocalSegment],
        segments: usize,
        now: i64,
        blocked_at: u64,
        report: &mut TieringReport,
    ) -> Result<(), Error> {
        let list = self.remote_list()?;
        let view: Vec<_> = list.iter().map(remote_segment).collect();
        let limits = LocalLimits {
            bytes: self.config.local_retention_bytes,
            ms: self.config.local_retention_ms,
        };
        let retention_point = self.retention_point.load(Ordering::Acquire);
        if let Some(keep_from) = policy::local_keep_from(local, &view, retention_point, limits, now)
            .map(|k| k.min(blocked_at))
        {
            if local.iter().any(|s| !s.active && s.last_seq < keep_from) {
                self.check_owner()?;
            }
            self.log.delete_before(keep_from).map_err(|e| {
                Error::storage(format!("deleting local segments below {keep_from}"), e)
            })?;
            let after = self.log.segments().len();
            report.local_segments_deleted += segments.saturating_sub(after) as u64;
        }
        Ok(())
    }

    /// Raises the whole-log retention point to `start`: its file first, then the
    /// in-memory value.
    pub(super) fn raise_retention_point(&self, start: u64) -> Result<(), Error> {
        let _write = self.retention_point_write.lock();
        if start <= self.retention_point.load(Ordering::Acquire) {
            return Ok(());
        }
        retention_point::write(self.log.dir(), start)?;
        self.retention_point.store(start, Ordering::Release);
        Ok(())
    }

    /// Deletes the remote segments `doomed` (indexes into `list`), oldest first, stopping at
    /// the first failure.
    fn delete_remote(
        &self,
        list: &[RemoteLogSegmentMetadata],
        doomed: &[usize],
        report: &mut TieringReport,
    ) {
        for (n, &i) in doomed.iter().enumerate() {
            let Some(meta) = list.get(i) else { break };
            // The round checked ownership before the first delete; every later one checks
            // again (a takeover while deletes run must stop them).
            if n > 0
                && let Err(e) = self.check_owner()
            {
                report.failures.push(e);
                break;
            }
            let id = meta.remote_log_segment_id();
            // Unreadable first (for readers without the new start), then the data goes.
            if let Err(e) = self.update_state(id, RemoteLogSegmentState::DeleteSegmentStarted, None)
            {
                report.failures.push(e);
                break;
            }
            // Read replicas stop serving it before its data goes.
            if let Err(e) = self.publish_head(false) {
                report.failures.push(e);
                break;
            }
            let started = meta.apply(&RemoteLogSegmentMetadataUpdate::to_state(
                id.clone(),
                RemoteLogSegmentState::DeleteSegmentStarted,
                self.config.broker_id,
            ));
            let started = started.unwrap_or_else(|_| meta.clone());
            match self.discard_attempt(&started) {
                Ok(()) => report.remote_segments_deleted += 1,
                Err(e) => {
                    report.failures.push(e);
                    break;
                }
            }
        }
    }
}

/// [`local_segment`] whose [`LocalSegment::disk_bytes`] also counts whichever index files
/// exist (the active segment may have none on disk yet): what local retention limits.
fn local_segment_on_disk(s: &SegmentInfo) -> LocalSegment {
    let file_len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    LocalSegment {
        disk_bytes: s
            .size
            .saturating_add(file_len(&s.index_path))
            .saturating_add(file_len(&s.time_index_path)),
        ..local_segment(s)
    }
}

/// The holes of a repaired local log as policy segments: closed, empty, never copied, and
/// (unless a finished copy covers them) a stop for local retention.
fn hole_segments(holes: &[RangeInclusive<u64>]) -> impl Iterator<Item = LocalSegment> + '_ {
    holes.iter().map(|h| LocalSegment {
        base_seq: *h.start(),
        last_seq: *h.end(),
        size: 0,
        disk_bytes: 0,
        max_timestamp: i64::MIN,
        active: false,
    })
}
