//! The read half of [`RemoteLogMetadataManager`](crate::RemoteLogMetadataManager), written once
//! for every manager of this crate: each keeps its segments in a
//! [`SharedMetadataState`](crate::SharedMetadataState) and writes only `add` and `update`.
//!
//! (A blanket `impl<T: …> RemoteLogMetadataManager for T` cannot live outside the SPI's crate,
//! so the read methods are spelled out once here and expanded into each manager's impl.)

/// Expands, inside an `impl RemoteLogMetadataManager for …` block, to the six read methods,
/// each answered from the [`SharedMetadataState`](crate::SharedMetadataState) in field
/// `$state` of `self`.
macro_rules! reads_from_shared_state {
    ($state:ident) => {
        fn remote_log_segment_metadata(
            &self,
            tp: &krabka_remote_storage::TopicIdPartition,
            offset: u64,
        ) -> Result<
            Option<krabka_remote_storage::RemoteLogSegmentMetadata>,
            krabka_remote_storage::RemoteStorageError,
        > {
            Ok(self.$state.find(tp, offset))
        }

        fn segment_for_offset_ready(
            &self,
            tp: &krabka_remote_storage::TopicIdPartition,
            offset: u64,
        ) -> Result<
            Option<krabka_remote_storage::RemoteLogSegmentMetadata>,
            krabka_remote_storage::RemoteStorageError,
        > {
            self.$state.find_ready(tp, offset)
        }

        fn list_remote_log_segments(
            &self,
            tp: &krabka_remote_storage::TopicIdPartition,
        ) -> Result<
            Vec<krabka_remote_storage::RemoteLogSegmentMetadata>,
            krabka_remote_storage::RemoteStorageError,
        > {
            Ok(self.$state.list(tp))
        }

        fn highest_remote_offset(
            &self,
            tp: &krabka_remote_storage::TopicIdPartition,
        ) -> Result<Option<u64>, krabka_remote_storage::RemoteStorageError> {
            Ok(self.$state.highest_offset(tp))
        }

        fn remote_log_size(
            &self,
            tp: &krabka_remote_storage::TopicIdPartition,
        ) -> Result<u64, krabka_remote_storage::RemoteStorageError> {
            Ok(self.$state.size(tp))
        }

        fn segment_metadata(
            &self,
            id: &krabka_remote_storage::RemoteLogSegmentId,
        ) -> Result<
            Option<krabka_remote_storage::RemoteLogSegmentMetadata>,
            krabka_remote_storage::RemoteStorageError,
        > {
            Ok(self.$state.get(id))
        }
    };
}

pub(crate) use reads_from_shared_state;
