//! The partition head this log writes for read replicas
//! ([`krabka_remote_storage::head`]): the finished segments readers may use, rewritten
//! whenever they change, and before a segment's data is deleted.
//!
//! A head lost or damaged in the bucket (deleted by hand or by a lifecycle rule, overwritten
//! by a fenced writer's late round) makes every replica list the partition in full at every
//! refresh, and an idle partition never changes its head again. So every
//! [`HEAD_CHECK_EVERY`]th time this log finds nothing to write, it reads the head back (one
//! conditional read: an S3 304 once its version is known) and writes it again when it is not
//! the one it wrote.

use std::sync::atomic::Ordering;

use krabka_remote_storage::head::{
    self, ConditionalRead, HeadRead, HeadSegment, MAX_HEAD_LEN, PartitionHead, TailRef,
};
use krabka_remote_storage::{
    RemoteLogSegmentMetadata, RemoteLogSegmentState, RemoteStorageError, layout, now_ms,
};

use super::TieredLog;
use crate::error::Error;

/// Calls of [`TieredLog::publish_head`] with nothing to write between two checks that the
/// head in the bucket is the one this log wrote: a round calls it at its start and its end,
/// so an idle writer checks about every 10th round.
pub(crate) const HEAD_CHECK_EVERY: u32 = 20;

/// What this log last wrote as the head.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// The serial of the last head written (0: none yet).
    serial: u64,
    /// Its segments, retention point and tail refs.
    last: Option<(Vec<HeadSegment>, u64, Vec<TailRef>)>,
    /// Its bytes, to recognise it when it is read back.
    bytes: Vec<u8>,
    /// Its version in the bucket once a check read it back (`None`: not read yet).
    version: Option<String>,
    /// Calls with nothing to write since the last write or check.
    unchanged: u32,
}

impl TieredLog {
    /// Writes the partition head when the finished segments or the retention point differ
    /// from what it last wrote (always with `force`). Only a log holding a writer epoch
    /// writes it; a fenced one never does.
    ///
    /// # Errors
    /// [`OwnershipError::Fenced`](crate::OwnershipError::Fenced) once a check found another writer; [`Error::Metadata`] when the
    /// segments cannot be listed; [`OwnershipError::Record`](crate::OwnershipError::Record) when the head cannot be written.
    pub(crate) fn publish_head(&self, force: bool) -> Result<(), Error> {
        let Some(owner) = &self.owner else {
            return Ok(());
        };
        let Some(writer) = owner.head_writer() else {
            return Ok(());
        };
        let mut published = self.head.lock();
        let retention_point = self.retention_point.load(Ordering::Acquire);
        let segments = head_segments(&self.remote_list()?, retention_point);
        // Records up to here are in finished segments (or gone by retention): no tail
        // object needs to hold them.
        let finished_end = segments
            .iter()
            .map(|s| s.end_seq)
            .max()
            .unwrap_or(0)
            .max(retention_point.saturating_sub(1));
        let tail = match self.tail.get() {
            Some(slot) => slot.part.refs(finished_end),
            None => self.inherited_refs(finished_end),
        };
        let now = (segments, retention_point, tail);
        if !force && published.last.as_ref() == Some(&now) {
            published.unchanged = published.unchanged.saturating_add(1);
            if published.unchanged < HEAD_CHECK_EVERY {
                return Ok(());
            }
            published.unchanged = 0;
            if self.head_intact(&writer, &mut published)? {
                return Ok(());
            }
            tracing::warn!(partition = %self.tp,
                "the partition head in the bucket is not the one this log wrote; writing it again");
        }
        // Two small reads: a writer fenced since its last check must not overwrite the new
        // writer's head.
        owner.check()?;
        let key = layout::head_key(writer.partition_dir);
        let failed = |e| {
            Error::Ownership(crate::error::OwnershipError::Record {
                key: key.clone(),
                partition: Box::new(self.tp.clone()),
                source: Box::new(e),
            })
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
            tail: now.2.clone(),
        };
        head::write_head(writer.store, writer.partition_dir, &head).map_err(failed)?;
        published.serial = serial;
        published.last = Some(now);
        published.bytes = head.encode();
        published.version = None;
        published.unchanged = 0;
        drop(published);
        if let Some(slot) = self.tail.get() {
            slot.part.head_published(finished_end);
        }
        Ok(())
    }

    /// Whether the head in the bucket is the one this log last wrote: one conditional read.
    fn head_intact(
        &self,
        writer: &crate::ownership::HeadWriter<'_>,
        published: &mut Published,
    ) -> Result<bool, Error> {
        let key = layout::head_key(writer.partition_dir);
        let read = writer
            .store
            .read_if_changed(&key, published.version.as_deref(), MAX_HEAD_LEN);
        match read {
            Ok(ConditionalRead::Unchanged) => Ok(true),
            Ok(ConditionalRead::Changed { bytes, version }) if bytes == published.bytes => {
                published.version = Some(version);
                Ok(true)
            }
            // Absent, or another head: written again.
            Ok(_) => Ok(false),
            // Over the size limit: not this log's head either.
            Err(RemoteStorageError::Corrupt { .. }) => Ok(false),
            Err(e) => Err(Error::Ownership(crate::error::OwnershipError::Record {
                key,
                partition: Box::new(self.tp.clone()),
                source: Box::new(e),
            })),
        }
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
