//! The steps of a round the engine (`crate::round`) takes on the log: the round flag, the stale
//! cleanup, the copy plan, and the copy attempt (started, uploaded, finished, discarded).

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use krabka_remote_storage::{
    CustomMetadata, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
};
use krabka_storage::SegmentInfo;
use krabka_storage::index::OffsetIndexView;

use super::remote::remote_segment;
use super::{NOT_BLOCKED, TieredLog, local_segment};
use crate::error::Error;
use crate::policy::{self, LocalSegment};
use crate::read::chunkmap;
use crate::stats::{TieringReport, bump};

/// Clears the round flag when a round ends, however it ends.
pub(crate) struct RoundGuard<'a>(&'a AtomicBool);

impl Drop for RoundGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl TieredLog {
    /// Marks a round (or a service turn) as running on this log until the guard drops.
    ///
    /// # Errors
    /// [`ServiceError::RoundInProgress`](crate::ServiceError::RoundInProgress) when one runs already.
    pub(crate) fn begin_round(&self) -> Result<RoundGuard<'_>, Error> {
        self.round_running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| Error::Service(crate::error::ServiceError::RoundInProgress))?;
        Ok(RoundGuard(&self.round_running))
    }

    /// Cleans attempts a crashed process, a failed copy or an abandoned copy left behind.
    pub(crate) fn clean_stale(&self, report: &mut TieringReport) -> Result<(), Error> {
        // Every round starts here, in every engine: a fenced log does nothing more.
        self.check_owner()?;
        // A log whose tail chain another writer closed joins a new one (its epoch check
        // says whether it was taken over).
        if let Err(e) = self.join_tail(false) {
            if matches!(e, Error::Ownership(_)) {
                return Err(e);
            }
            report.failures.push(e);
        }
        // Without a tail, a record leaves the local disk only with its segment: a segment
        // older than the upload lag bound is rolled now, so this round copies it.
        if self.config.tail.is_none()
            && let Some(lag) = self.config.max_upload_lag
        {
            match self.log.roll_if_older(lag) {
                Ok(true) => tracing::info!(partition = %self.tp, ?lag,
                    "rolled the active segment: its first record waited longer than max_upload_lag"),
                Ok(false) => {}
                Err(e) => report
                    .failures
                    .push(Error::storage("rolling a segment past max_upload_lag", e)),
            }
        }
        // Read replicas must stop serving a segment before its data goes: a head the last
        // round could not write is written before any delete it left unfinished goes on.
        let head_current = match self.publish_head(false) {
            Ok(()) => true,
            Err(e) => {
                report.failures.push(e);
                false
            }
        };
        let list = self.remote_list()?;
        let view: Vec<_> = list.iter().map(remote_segment).collect();
        let abandoned = self.abandoned.lock().clone();
        for i in policy::stale_attempts(&view, |id| abandoned.contains(&id.id())) {
            let Some(meta) = list.get(i) else { continue };
            if !head_current && meta.state() == RemoteLogSegmentState::DeleteSegmentStarted {
                continue;
            }
            match self.discard_attempt(meta) {
                Ok(()) => report.stale_cleaned += 1,
                Err(e) => report.failures.push(e),
            }
        }
        Ok(())
    }

    /// The closed, committed local segments without a finished copy, oldest first, up to the
    /// first hole a repair left that no finished remote segment covers and the user did not
    /// accept (`Log::accept_holes`; reported in `report`, which also gets the round's
    /// [`TieringReport::copy_blocked_at`]).
    pub(crate) fn copy_plan(&self, report: &mut TieringReport) -> Result<Vec<SegmentInfo>, Error> {
        let segs = self.log.segments();
        let local: Vec<LocalSegment> = segs.iter().map(local_segment).collect();
        let view = self.remote_view()?;
        let last = self.log.last_seq();
        let commit = Some(self.commit_seq().map_or(last, |c| c.min(last)));
        let picked = policy::segments_to_copy(
            &local,
            &view,
            self.retention_point.load(Ordering::Acquire),
            commit,
        );
        let quarantined = self.log.quarantined();
        let holes: Vec<RangeInclusive<u64>> = quarantined.iter().map(|(r, _)| r.clone()).collect();
        let accepted: Vec<RangeInclusive<u64>> = self
            .log
            .accepted_holes()
            .iter()
            .map(|a| a.first_seq..=a.last_seq)
            .collect();
        let barrier = policy::hole_barrier(&policy::blocking_holes(&holes, &accepted), &view);
        self.blocked_at
            .store(barrier.unwrap_or(NOT_BLOCKED), Ordering::Release);
        report.copy_blocked_at = barrier;
        if let Some(at) = barrier
            && let Some((range, path)) = quarantined.iter().find(|(r, _)| *r.start() == at)
        {
            let e = Error::DamagedSegment {
                path: path.clone(),
                position: 0,
                reason: format!(
                    "a repair moved these seqs aside and no remote segment holds them; restore \
                     them, or accept their loss with `krabka repair {} --accept-hole {}..={}` \
                     and tiering goes on past them",
                    self.log.dir().display(),
                    range.start(),
                    range.end()
                ),
                first_seq: *range.start(),
                last_seq: *range.end(),
            };
            tracing::warn!(partition = %self.tp, error = %e, "tiering stops before a hole");
            report.failures.push(e);
        }
        Ok(picked
            .into_iter()
            .filter_map(|i| segs.get(i).cloned())
            .filter(|s| barrier.is_none_or(|b| s.last_seq < b))
            .collect())
    }

    /// Lowers the seq retention must not pass to `seq`.
    pub(crate) fn block_at(&self, seq: u64) {
        self.blocked_at.fetch_min(seq, Ordering::AcqRel);
    }

    /// The event time for the next copy attempt: now, or just after the previous attempt's time
    /// when the clock is behind it. Call it in plan (seq) order and hand the time to
    /// [`begin_copy`](Self::begin_copy): recovery orders copies by this time (ties by seq), so
    /// a younger segment's attempt must never carry an earlier time than an older one's.
    pub(crate) fn next_copy_time(&self) -> i64 {
        // Strictly increasing: two attempts never share an event time (recovery would then
        // order them by their random ids).
        let now = krabka_remote_storage::now_ms();
        let next = |prev: i64| prev.saturating_add(1).max(now);
        let prev = self
            .copy_clock
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| Some(next(p)))
            .unwrap_or_else(|p| p);
        next(prev)
    }

    /// Records a new attempt for `seg` (CopySegmentStarted) with event time `at`
    /// ([`next_copy_time`](Self::next_copy_time), taken in plan order).
    pub(crate) fn begin_copy(
        &self,
        seg: &SegmentInfo,
        at: i64,
    ) -> Result<RemoteLogSegmentMetadata, Error> {
        // Every copy of every engine starts here: nothing is written for a fenced writer.
        self.check_owner()?;
        let id = RemoteLogSegmentId::generate(self.tp.clone());
        let epochs = policy::segment_leader_epochs(&self.epochs.lock(), seg.base_seq, seg.last_seq);
        let meta = RemoteLogSegmentMetadata::builder(id.clone(), seg.base_seq, seg.last_seq)
            .max_timestamp_ms(seg.max_timestamp)
            .broker_id(self.config.broker_id)
            .segment_leader_epochs(epochs)
            .segment_size_in_bytes(seg.size)
            .event_timestamp_ms(at)
            .writer_epoch(self.writer_epoch().unwrap_or(0))
            .build()
            .map_err(|e| Error::metadata("add", Some(&id), e))?;
        self.rlmm
            .add_remote_log_segment_metadata(&meta)
            .map_err(|e| Error::metadata("add", Some(&id), e))?;
        Ok(meta)
    }

    /// Uploads `seg` under `meta`'s id (the blocking SPI call).
    pub(crate) fn upload(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seg: &SegmentInfo,
    ) -> Result<Option<CustomMetadata>, Error> {
        let id = meta.remote_log_segment_id();
        let mut data = LogSegmentData::new(&seg.log_path, &seg.index_path, &seg.time_index_path);
        // Kafka's leader-epoch checkpoint text: version, entry count, then "epoch start" lines.
        let epochs = meta.segment_leader_epochs();
        let mut text = format!("0\n{}\n", epochs.len());
        for (epoch, start) in epochs {
            text.push_str(&format!("{epoch} {start}\n"));
        }
        data.leader_epoch_index = Bytes::from(text);
        bump(&self.counters.copy, 1);
        let custom = self
            .rsm
            .copy_log_segment_data(meta, &data)
            .map_err(|e| Error::remote("copy", id, Some(seg.base_seq), e))?;
        if let Some(cm) = &custom {
            cm.check_size(self.config.custom_metadata_max_bytes)
                .map_err(|e| Error::remote("copy", id, Some(seg.base_seq), e))?;
        }
        Ok(self.with_chunk_map(seg, custom))
    }

    /// `custom` with the segment's chunk map around it (see [`chunkmap`]) when it fits
    /// `custom_metadata_max_bytes`. The map comes from the local offset index checked before
    /// the copy; when it cannot be read, no map is recorded (reads fetch the remote index).
    fn with_chunk_map(
        &self,
        seg: &SegmentInfo,
        custom: Option<CustomMetadata>,
    ) -> Option<CustomMetadata> {
        let index = std::fs::read(&seg.index_path)
            .ok()
            .and_then(|b| OffsetIndexView::parse(b).ok());
        let Some(index) = index else {
            return custom;
        };
        let map = chunkmap::from_index(&index, u64::from(self.config.chunk_bytes));
        chunkmap::wrap(
            custom,
            seg.base_seq,
            &map,
            self.config.custom_metadata_max_bytes,
        )
    }

    /// Records CopySegmentFinished: the segment is now readable and safely remote.
    ///
    /// Refused ([`Error::CopyDeadlineExceeded`]; the caller discards the attempt) when the copy
    /// began [`COPY_ABANDON_AFTER_MS`](krabka_remote_storage::manifest::COPY_ABANDON_AFTER_MS)
    /// or more ago: from then on a cleanup may take its objects for an abandoned copy's.
    pub(crate) fn finish_copy(
        &self,
        meta: &RemoteLogSegmentMetadata,
        custom: Option<CustomMetadata>,
    ) -> Result<u64, Error> {
        self.ensure_not_fenced()?;
        let limit = krabka_remote_storage::manifest::COPY_ABANDON_AFTER_MS;
        let age = krabka_remote_storage::now_ms().saturating_sub(meta.event_timestamp_ms());
        if age >= limit {
            return Err(Error::CopyDeadlineExceeded {
                segment: meta.remote_log_segment_id().clone(),
                base_seq: meta.start_offset(),
                last_seq: meta.end_offset(),
                deadline: Duration::from_millis(limit.unsigned_abs()),
            });
        }
        self.update_state(
            meta.remote_log_segment_id(),
            RemoteLogSegmentState::CopySegmentFinished,
            custom,
        )?;
        bump(&self.counters.segments_copied, 1);
        bump(&self.counters.bytes_copied, meta.segment_size_in_bytes());
        Ok(meta.segment_size_in_bytes())
    }

    /// Best-effort removal of a failed attempt; on failure the next round's stale cleanup
    /// finds it in CopySegmentStarted or DeleteSegmentStarted.
    pub(crate) fn discard_after_failure(&self, meta: &RemoteLogSegmentMetadata) {
        if self.ensure_not_fenced().is_err() {
            // A fenced writer deletes nothing; its attempt is superseded by the lineage.
            return;
        }
        let current = self
            .rlmm
            .segment_metadata(meta.remote_log_segment_id())
            .ok()
            .flatten()
            .unwrap_or_else(|| meta.clone());
        if current.state() == RemoteLogSegmentState::CopySegmentFinished {
            return;
        }
        if let Err(e) = self.discard_attempt(&current) {
            tracing::debug!(segment = %meta.remote_log_segment_id(), error = %e,
                "could not remove a failed copy attempt now; the next round will");
        }
    }
}
