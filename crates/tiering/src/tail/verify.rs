//! The writer's periodic look at what its acknowledgements rest on (T2 in
//! docs/ARCHITECTURE.md): a record acknowledged in a chain is found by a takeover only through
//! the partition's head listing that chain, and the epoch record. A bucket wiped or a head
//! deleted or overwritten under a live writer would leave its later acknowledgements in objects
//! no head names; so every [`TailConfig::verify_interval`](super::TailConfig::verify_interval),
//! for each partition it wrote since, the writer checks its epoch (a lost own record is written
//! again) and reads the head. A head that does not list the chain as this writer wrote it
//! detaches the partition: its next append (or round) writes the head again before anything
//! more is acknowledged.

use std::sync::Arc;

use krabka_remote_storage::head::{self, HeadRead};

use super::part::PartitionTail;
use crate::error::Error;

/// Checks every partition of `parts` written since the last look.
pub(crate) fn verify(parts: &[Arc<PartitionTail>]) {
    for p in parts {
        let Some(chain) = p.take_written_since_verify() else {
            continue;
        };
        match p.owner.check() {
            Ok(()) => {}
            Err(e @ Error::Ownership(_)) => {
                p.fence();
                p.failed(&e.to_string());
                continue;
            }
            Err(e) => {
                tracing::warn!(partition = %p.tp, error = %e,
                    "cannot check the writer epoch of a tail's partition; checked again later");
                p.mark_written();
                continue;
            }
        }
        let Some(hw) = p.owner.head_writer() else {
            continue;
        };
        match head::read_head(hw.store, hw.partition_dir, None) {
            Ok(HeadRead::Fresh { head, .. })
                if head.writer_epoch == hw.epoch
                    && head.incarnation == hw.incarnation
                    && head.tail.iter().any(|r| r.chain == chain) => {}
            Ok(_) => {
                tracing::warn!(partition = %p.tp, chain = %chain,
                    "the partition head no longer lists this writer's tail chain; it is written again before more is acknowledged");
                p.detach(
                    "the partition head in the bucket no longer lists this log's tail chain \
                     (deleted, damaged or overwritten): it is written again first",
                );
            }
            Err(e) => {
                tracing::warn!(partition = %p.tp, error = %e,
                    "cannot read the partition head of a tail's partition; checked again later");
                p.mark_written();
            }
        }
    }
}
