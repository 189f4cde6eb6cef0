//! The `RemoteStorageManager` SPI: what a remote backend implements.

use crate::error::RemoteStorageError;
use crate::model::{CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata};

/// SPI for the remote object store that holds offloaded segment data.
///
/// Implementations are synchronous and blocking. They mirror Kafka's `RemoteStorageManager`,
/// which the broker drives from a dedicated thread pool; async callers wrap these calls in
/// `spawn_blocking`. Implementations must be `Send + Sync` so one instance can be shared across
/// tasks. The trait is dyn compatible: layers above hold an `Arc<dyn RemoteStorageManager>`.
///
/// # Contracts every implementation keeps (checked by the `testkit` feature's conformance kit)
/// - Every copy attempt uses its own [`RemoteLogSegmentId`](crate::RemoteLogSegmentId); a copy
///   under an id already present replaces it cleanly.
/// - The [`CustomMetadata`] returned by [`copy_log_segment_data`](Self::copy_log_segment_data)
///   is recorded by the caller on the segment's metadata and handed back on every later fetch or
///   delete of that segment.
/// - Byte ranges are inclusive at both ends: `fetch_log_segment(m, 0, Some(0))` is one byte.
/// - A missing segment, or a missing index of a present segment, is
///   [`RemoteStorageError::SegmentNotFound`].
/// - Delete is idempotent: deleting an absent segment succeeds.
pub trait RemoteStorageManager: Send + Sync {
    /// Copies a segment's data and all of its indexes to the remote tier.
    ///
    /// Returns optional [`CustomMetadata`], for example an object-store key or a version id. The
    /// caller records it on the segment and passes it back on every later fetch or delete for
    /// that segment.
    ///
    /// # Errors
    /// Returns [`RemoteStorageError`] if any underlying store operation fails; a failed copy
    /// may leave partial data behind, which the caller removes with
    /// [`delete_log_segment_data`](Self::delete_log_segment_data).
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError>;

    /// Fetches a byte range of a segment's `.log` data.
    ///
    /// `start_position` is the inclusive starting byte offset within the segment.
    /// `end_position`, when `Some`, is the inclusive last byte offset; when `None`, the read
    /// runs to the end of the segment.
    ///
    /// # Errors
    /// [`RemoteStorageError::SegmentNotFound`] if the segment is not present,
    /// [`RemoteStorageError::InvalidArgument`] for a range outside the segment (or with
    /// `end < start`), or [`RemoteStorageError::Io`] / a retriable kind on a store failure.
    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError>;

    /// Fetches one of a segment's indexes in full.
    ///
    /// # Errors
    /// [`RemoteStorageError::SegmentNotFound`] if the segment or the requested index is not
    /// present, or [`RemoteStorageError::Io`] / a retriable kind on a store failure.
    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError>;

    /// Deletes a segment's data and all of its indexes from the remote tier.
    ///
    /// Implementations must be idempotent: a delete of an absent segment succeeds — or return an
    /// error, when the backend is an immutable archive.
    ///
    /// # Errors
    /// [`RemoteStorageError::Io`] (or another kind) on a store failure.
    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError>;
}

/// A shared store is a store: layers above hold `Arc<dyn RemoteStorageManager>` or
/// `Arc<ConcreteStore>` (e.g. inside a fault-injecting wrapper while keeping a handle to inspect).
impl<T: RemoteStorageManager + ?Sized> RemoteStorageManager for std::sync::Arc<T> {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        (**self).copy_log_segment_data(metadata, data)
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        (**self).fetch_log_segment(metadata, start_position, end_position)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        (**self).fetch_index(metadata, index_type)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        (**self).delete_log_segment_data(metadata)
    }
}

/// Checks an inclusive byte range against a segment of `size` bytes and returns it as a
/// half-open `start..end` range. Backends share this so they reject the same ranges.
///
/// A 0-byte segment has no valid range: every fetch of it with `start_position == 0` and
/// `end_position == None` returns an empty buffer, anything else is invalid.
///
/// # Errors
/// [`RemoteStorageError::InvalidArgument`] for `start > end`, or a range past the end.
pub fn checked_range(
    size: u64,
    start_position: u32,
    end_position: Option<u32>,
) -> Result<std::ops::Range<u64>, RemoteStorageError> {
    let start = u64::from(start_position);
    match end_position {
        None if start <= size => Ok(start..size),
        None => Err(RemoteStorageError::invalid_argument(format!(
            "start position {start} is past the end of a {size}-byte segment"
        ))),
        Some(end) if end < start_position => Err(RemoteStorageError::invalid_argument(format!(
            "end position {end} is before start position {start}"
        ))),
        Some(end) if u64::from(end) >= size => Err(RemoteStorageError::invalid_argument(format!(
            "inclusive end position {end} is past the last byte of a {size}-byte segment"
        ))),
        Some(end) => Ok(start..u64::from(end) + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_inclusive_and_checked() {
        assert_eq!(checked_range(10, 0, Some(0)).unwrap(), 0..1);
        assert_eq!(checked_range(10, 0, Some(9)).unwrap(), 0..10);
        assert_eq!(checked_range(10, 3, None).unwrap(), 3..10);
        assert_eq!(checked_range(10, 10, None).unwrap(), 10..10);
        assert_eq!(checked_range(0, 0, None).unwrap(), 0..0);
        for (size, start, end, says) in [
            (
                10,
                0,
                Some(10),
                "end position 10 is past the last byte of a 10-byte",
            ),
            (10, 5, Some(4), "end position 4 is before start position 5"),
            (
                10,
                11,
                None,
                "start position 11 is past the end of a 10-byte segment",
            ),
            (
                0,
                0,
                Some(0),
                "end position 0 is past the last byte of a 0-byte",
            ),
        ] {
            let got = checked_range(size, start, end);
            assert!(
                matches!(&got, Err(RemoteStorageError::InvalidArgument { message })
                    if message.contains(says)),
                "{size} {start} {end:?}: {got:?}"
            );
        }
    }

    #[test]
    fn trait_is_dyn_compatible() {
        fn takes(_: Option<&dyn RemoteStorageManager>) {}
        takes(None);
    }
}
