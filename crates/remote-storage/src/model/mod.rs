//! The data model of the remote tier, modeled on Kafka's `org.apache.kafka.server.log.remote.storage`.
//!
//! - `ids` — [`TopicIdPartition`], [`RemoteLogSegmentId`], [`CustomMetadata`];
//! - `segment` — [`RemoteLogSegmentMetadata`], its lifecycle [`RemoteLogSegmentState`] and
//!   [`RemoteLogSegmentMetadataUpdate`];
//! - `data` — [`LogSegmentData`], [`IndexType`], [`IndexSource`].

mod data;
mod ids;
mod segment;
#[cfg(test)]
mod tests;

pub use data::{IndexSource, IndexType, LOG_SUFFIX, LogSegmentData, now_ms};
pub use ids::{
    CustomMetadata, DEFAULT_CUSTOM_METADATA_MAX_BYTES, MAX_TOPIC_NAME_LEN, RemoteLogSegmentId,
    TopicIdPartition, validate_topic_name,
};
pub use segment::{
    RemoteLogSegmentMetadata, RemoteLogSegmentMetadataBuilder, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
};
