//! A segment listed without any manifest, and the rebuild of its metadata that the layer
//! knowing the index formats provides: below both the scan and the decision of which seqs are
//! used.

use uuid::Uuid;

use crate::error::RemoteStorageError;
use crate::layout;
use crate::model::{IndexType, RemoteLogSegmentMetadata, TopicIdPartition};

/// A segment whose objects are listed without any manifest (see
/// [`IgnoreReason::ManifestMissing`](super::IgnoreReason::ManifestMissing)): what a [`Rebuild`] gets to rebuild its metadata from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unmanifested {
    /// The partition.
    pub partition: TopicIdPartition,
    /// Its start seq (from the object names).
    pub start: u64,
    /// The copy attempt's id (from the object names).
    pub id: Uuid,
    /// The `.log` object's size, when it exists.
    pub log_size: Option<u64>,
    /// The index objects that exist, with their listed sizes.
    pub indexes: Vec<(IndexType, u64)>,
}

impl Unmanifested {
    /// The relative key of this segment's object with `suffix` (e.g. [`LOG_SUFFIX`](crate::model::LOG_SUFFIX) or an
    /// [`IndexType::suffix`]).
    ///
    /// # Errors
    /// As [`layout::partition_dir`].
    pub fn key(&self, suffix: &str) -> Result<String, RemoteStorageError> {
        Ok(layout::segment_object_key(
            &layout::partition_dir(&self.partition)?,
            self.start,
            self.id,
            suffix,
        ))
    }
}

/// Rebuilds the metadata of a segment whose manifest is missing from its objects (read through
/// the lister), or says why it cannot. The layer that knows the index formats provides it
/// (`krabka_tiering::recovery`); the metadata must be in state `CopySegmentFinished`.
pub type Rebuild<'a> =
    &'a (dyn Fn(&Unmanifested) -> Result<RemoteLogSegmentMetadata, String> + Sync);
