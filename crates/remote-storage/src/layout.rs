//! The object layout shared by every backend, so a filesystem root and an S3 prefix look alike:
//!
//! ```text
//! <topic>-<partition>-<topic id>/<20-digit start offset>-<segment uuid><suffix>
//! ```
//! e.g. `orders-3-5f0c.../00000000000000001000-9b1d....log`.

use crate::error::RemoteStorageError;
use crate::model::{IndexType, LOG_SUFFIX, RemoteLogSegmentMetadata, TopicIdPartition};

/// The directory (or key prefix) of a partition, after validating its name.
///
/// # Errors
/// [`RemoteStorageError::InvalidArgument`] for a topic name that breaks Kafka's rules or a
/// negative partition: such a name could otherwise escape the backend's root.
pub fn partition_dir(tp: &TopicIdPartition) -> Result<String, RemoteStorageError> {
    tp.validate()?;
    Ok(format!(
        "{}-{}-{}",
        tp.topic(),
        tp.partition(),
        tp.topic_id()
    ))
}

/// The file (object) name stem of a segment: `<20-digit start offset>-<segment uuid>`.
pub fn segment_stem(metadata: &RemoteLogSegmentMetadata) -> String {
    format!(
        "{:020}-{}",
        metadata.start_offset(),
        metadata.remote_log_segment_id().id()
    )
}

/// The relative path (key below the prefix) of a segment's `.log` data.
///
/// # Errors
/// As [`partition_dir`].
pub fn log_key(metadata: &RemoteLogSegmentMetadata) -> Result<String, RemoteStorageError> {
    file_key(metadata, LOG_SUFFIX)
}

/// The relative path (key below the prefix) of one of a segment's indexes.
///
/// # Errors
/// As [`partition_dir`].
pub fn index_key(
    metadata: &RemoteLogSegmentMetadata,
    index_type: IndexType,
) -> Result<String, RemoteStorageError> {
    file_key(metadata, index_type.suffix())
}

/// Every relative path a segment may occupy: its `.log` and each index type.
///
/// # Errors
/// As [`partition_dir`].
pub fn all_keys(metadata: &RemoteLogSegmentMetadata) -> Result<Vec<String>, RemoteStorageError> {
    let mut keys = vec![log_key(metadata)?];
    for t in IndexType::ALL {
        keys.push(index_key(metadata, t)?);
    }
    Ok(keys)
}

fn file_key(
    metadata: &RemoteLogSegmentMetadata,
    suffix: &str,
) -> Result<String, RemoteStorageError> {
    Ok(format!(
        "{}/{}{}",
        partition_dir(metadata.topic_id_partition())?,
        segment_stem(metadata),
        suffix
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RemoteLogSegmentId;
    use uuid::Uuid;

    #[test]
    fn keys_follow_the_documented_layout() {
        let topic_id = Uuid::nil();
        let tp = TopicIdPartition::new(topic_id, "orders", 3);
        let seg = Uuid::from_u128(1);
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::new(tp, seg), 1000, 1999)
            .build()
            .unwrap();
        assert_eq!(
            log_key(&m).unwrap(),
            format!("orders-3-{topic_id}/00000000000000001000-{seg}.log")
        );
        assert!(
            index_key(&m, IndexType::Timestamp)
                .unwrap()
                .ends_with(".timeindex")
        );
        assert_eq!(all_keys(&m).unwrap().len(), 6);
    }

    #[test]
    fn hostile_names_never_make_a_key() {
        let tp = TopicIdPartition::new(Uuid::nil(), "../../etc", 0);
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 0)
            .build()
            .unwrap();
        assert!(log_key(&m).is_err());
    }
}
