//! The partition's remote segments: listing them as policy input, moving an attempt through
//! its states, and deleting an attempt's objects.

use krabka_remote_storage::{
    CustomMetadata, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState, now_ms,
};

use super::TieredLog;
use crate::error::Error;
use crate::policy::RemoteSegment;
use crate::stats::bump;

impl TieredLog {
    /// The partition's live remote segments (not yet `DeleteSegmentFinished`) as policy input.
    pub(crate) fn remote_list(&self) -> Result<Vec<RemoteLogSegmentMetadata>, Error> {
        self.rlmm
            .list_remote_log_segments(&self.tp)
            .map_err(|e| Error::metadata("list", None, e))
    }

    pub(super) fn remote_view(&self) -> Result<Vec<RemoteSegment<RemoteLogSegmentId>>, Error> {
        Ok(self.remote_list()?.iter().map(remote_segment).collect())
    }

    /// Deletes an attempt's objects: DeleteSegmentStarted → delete → DeleteSegmentFinished.
    pub(crate) fn discard_attempt(&self, meta: &RemoteLogSegmentMetadata) -> Result<(), Error> {
        self.ensure_not_fenced()?;
        let id = meta.remote_log_segment_id();
        if meta.state() != RemoteLogSegmentState::DeleteSegmentStarted {
            self.update_state(id, RemoteLogSegmentState::DeleteSegmentStarted, None)?;
        }
        bump(&self.counters.delete, 1);
        self.rsm
            .delete_log_segment_data(&crate::read::chunkmap::backend_view(meta))
            .map_err(|e| Error::remote("delete", id, Some(meta.start_offset()), e))?;
        self.update_state(id, RemoteLogSegmentState::DeleteSegmentFinished, None)?;
        self.cache.lru().remove_segment(id.id());
        Ok(())
    }

    pub(super) fn update_state(
        &self,
        id: &RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        custom: Option<CustomMetadata>,
    ) -> Result<RemoteLogSegmentMetadata, Error> {
        let update = RemoteLogSegmentMetadataUpdate::new(
            id.clone(),
            now_ms(),
            custom,
            state,
            self.config.broker_id,
        );
        self.rlmm
            .update_remote_log_segment_metadata(&update)
            .map_err(|e| Error::metadata("update", Some(id), e))
    }
}

/// A remote segment's metadata as the policy sees it.
pub(crate) fn remote_segment(m: &RemoteLogSegmentMetadata) -> RemoteSegment<RemoteLogSegmentId> {
    RemoteSegment {
        id: m.remote_log_segment_id().clone(),
        start: m.start_offset(),
        end: m.end_offset(),
        size: m.segment_size_in_bytes(),
        max_timestamp: m.max_timestamp_ms(),
        state: m.state(),
    }
}
