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
///   An inclusive end past the segment's last byte reads to the end, as an HTTP or S3 range
///   does (a caller sizing a fetch from an estimate may ask for more than there is); a start
///   past the end is [`RemoteStorageError::InvalidArgument`].
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
    /// runs to the end of the segment. An `end_position` at or past the segment's size reads
    /// to the end too: `fetch_log_segment(m, 0, Some(u32::MAX))` is the whole segment, as the
    /// HTTP range `bytes=0-4294967295` would be. Implementations share
    /// [`checked_range`](crate::checked_range), so every backend reads the same bytes.
    ///
    /// # Errors
    /// [`RemoteStorageError::SegmentNotFound`] if the segment is not present,
    /// [`RemoteStorageError::InvalidArgument`] for a start past the segment's end (with
    /// `Some` end: a start at or past its size, since an inclusive range must hold its first
    /// byte), or `end < start`, or [`RemoteStorageError::Io`] / a retriable kind on a store
    /// failure.
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
/// half-open `start..end` range. Backends share this so they serve the same ranges.
///
/// The rules are those of an HTTP (and S3) byte range:
/// - `end_position == None` reads from `start_position` to the end; a start equal to `size`
///   is an empty read, a start past it invalid.
/// - `Some(end)` reads `start..=end`, clamped to the segment's last byte: an end past it reads
///   to the end. The start must be a byte of the segment (`start < size`; so a 0-byte segment
///   has no inclusive range) and `end >= start`.
///
/// # Errors
/// [`RemoteStorageError::InvalidArgument`] for `start > end`, or a start past the end.
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
        Some(end) if start >= size => Err(RemoteStorageError::invalid_argument(format!(
            "start position {start} of the inclusive range {start}..={end} is past the last \
             byte of a {size}-byte segment"
        ))),
        Some(end) => Ok(start..(u64::from(end) + 1).min(size)),
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
            (10, 5, Some(4), "end position 4 is before start position 5"),
            (
                10,
                11,
                None,
                "start position 11 is past the end of a 10-byte segment",
            ),
            (
                10,
                10,
                Some(10),
                "start position 10 of the inclusive range 10..=10 is past the last byte of a \
                 10-byte segment",
            ),
            (
                10,
                12,
                Some(20),
                "start position 12 of the inclusive range 12..=20 is past the last byte",
            ),
            (
                0,
                0,
                Some(0),
                "start position 0 of the inclusive range 0..=0 is past the last byte of a \
                 0-byte",
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

    /// An HTTP or S3 range past the end is served up to the end; so is ours.
    #[test]
    fn an_inclusive_end_past_the_last_byte_reads_to_the_end() {
        assert_eq!(checked_range(10, 0, Some(10)).unwrap(), 0..10);
        assert_eq!(checked_range(10, 4, Some(99)).unwrap(), 4..10);
        assert_eq!(checked_range(10, 9, Some(u32::MAX)).unwrap(), 9..10);
        assert_eq!(
            checked_range(u64::from(u32::MAX), 0, Some(u32::MAX)).unwrap(),
            0..u64::from(u32::MAX)
        );
    }

    #[test]
    fn trait_is_dyn_compatible() {
        fn takes(_: Option<&dyn RemoteStorageManager>) {}
        takes(None);
    }
}
