//! The partition head this log writes for read replicas
//! ([`krabka_remote_storage::head`]): the finished segments readers may use, rewritten
//! whenever they change, and before a segment's data is deleted.

use std::sync::atomic::Ordering;

use krabka_remote_storage::head::{self, HeadRead, HeadSegment, PartitionHead};
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteLogSegmentState, layout, now_ms};

use super::TieredLog;
use crate::error::Error;

/// What this log last wrote as the head.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// The serial of the last head written (0: none yet).
    serial: u64,
    /// Its segments and retention point.
    last: Option<(Vec<HeadSegment>, u64)>,
}

impl TieredLog {
    /// Writes the partition head when the finished segments or the retention point differ
    /// from what it last wrote (always with `force`). Only a log holding a writer epoch
    /// writes it; a fenced one never does.
    ///
    /// # Errors
    /// [`Error::Fenced`] once a check found another writer; [`Error::Metadata`] when the
    /// segments cannot be listed; [`Error::Ownership`] when the head cannot be written.
    pub(crate) fn publish_head(&self, force: bool) -> Result<(), Error> {
        let Some(owner) = &self.owner else {
            return Ok(());
        };
        let Some(writer) = owner.head_writer() else {
            return Ok(());
        };
        let mut published = self.head.lock();
        let retention_point = self.log_start.load(Ordering::Acquire);
        let segments = head_segments(&self.remote_list()?, retention_point);
        let now = (segments, retention_point);
        if !force && published.last.as_ref() == Some(&now) {
            return Ok(());
        }
        // Two small reads: a writer fenced since its last check must not overwrite the new
        // writer's head.
        owner.check()?;
        let key = layout::head_key(writer.partition_dir);
        let failed = |e| Error::Ownership {
            key: key.clone(),
            partition: Box::new(self.tp.clone()),
            source: Box::new(e),
        };
        if published.serial == 0 {
            // A restarted writer keeps its epoch and incarnation: it goes on after the serial
            // it wrote before (one small read per run), whatever the clock says.
            if let HeadRead::Fresh { head, .. } =
                head::read_head(writer.store, writer.partition_dir, None).map_err(failed)?
                && head.writer_epoch == writer.epoch
                && head.incarnation == writer.incarnation
            {
                published.serial = head.serial;
            }
        }
        let written_ms = now_ms();
        // Increasing across this writer's restarts too (the clock), and within one run.
        let serial = published
            .serial
            .saturating_add(1)
            .max(u64::try_from(written_ms).unwrap_or(0));
        let head = PartitionHead {
            partition: self.tp.clone(),
            writer_epoch: writer.epoch,
            incarnation: writer.incarnation,
            serial,
            written_ms,
            writer_last_seq: self.log.last_seq(),
            retention_point,
            segments: now.0.clone(),
        };
        head::write_head(writer.store, writer.partition_dir, &head).map_err(failed)?;
        published.serial = serial;
        published.last = Some(now);
        Ok(())
    }
}

/// The finished segments a head lists: at or above the retention point, by start seq, each
/// starting after the one before ends (of overlapping copies, the one a reader's lookup
/// finds first is kept).
fn head_segments(list: &[RemoteLogSegmentMetadata], retention_point: u64) -> Vec<HeadSegment> {
    let mut finished: Vec<&RemoteLogSegmentMetadata> = list
        .iter()
        .filter(|m| {
            m.state() == RemoteLogSegmentState::CopySegmentFinished
                && m.end_offset() >= retention_point
        })
        .collect();
    finished.sort_by_key(|m| (m.start_offset(), std::cmp::Reverse(m.event_timestamp_ms())));
    let mut out: Vec<HeadSegment> = Vec::with_capacity(finished.len());
    for m in finished {
        if out
            .last()
            .is_some_and(|prev| m.start_offset() <= prev.end_seq)
        {
            continue;
        }
        out.push(HeadSegment {
            id: m.remote_log_segment_id().id(),
            start_seq: m.start_offset(),
            end_seq: m.end_offset(),
            writer_epoch: m.writer_epoch(),
        });
    }
    out
}
