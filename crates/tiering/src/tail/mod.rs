//! The tail in the bucket: while a segment is active, its new whole record batches go to the
//! bucket as small immutable **tail objects**, so an acknowledged record outlives the disk it
//! was written on (`docs/tiering.md`, "The tail in the bucket"; the format is
//! `krabka_remote_storage::tail`'s, `docs/format.md`, "Tail object").
//!
//! - [`config`]: [`TailConfig`] (window, size, grace, deadline) and [`Durability`].
//! - `writer`: [`TailWriter`], the thread writing one create-only object per window for every
//!   partition attached to it, and deleting the objects no head needs for the grace.
//! - `part`: one partition's side: what of it is in which object, what is acknowledged, the
//!   wait of a bucket-durable append.
//! - `attach`: how a log joins a chain: it closes (fences) every older chain its head lists,
//!   takes over the records they hold above its local log, writes its head listing the new
//!   chain and checks its epoch; only then are its records acknowledged in that chain (T1-T4 in
//!   docs/ARCHITECTURE.md).

mod attach;
pub mod config;
mod gc;
pub(crate) mod part;
mod verify;
mod wake;
mod writer;

pub(crate) use attach::Inherited;
pub use config::{Durability, TailConfig};
pub(crate) use part::PartitionTail;
pub use writer::{TailStats, TailWriter};

use std::sync::Arc;

/// A log's place in a [`TailWriter`]: dropping it detaches the partition.
pub(crate) struct TailSlot {
    pub(crate) writer: TailWriter,
    pub(crate) part: Arc<PartitionTail>,
}

impl std::fmt::Debug for TailSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailSlot")
            .field("part", &self.part)
            .finish_non_exhaustive()
    }
}

impl Drop for TailSlot {
    fn drop(&mut self) {
        self.writer.leave(&self.part.tp);
    }
}
