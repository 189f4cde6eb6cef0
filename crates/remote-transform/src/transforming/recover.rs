//! Rebuilding a segment's caller-facing metadata from what its backend knows.

use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageError};

use super::read::check_against_record;
use super::{Transforming, truncated, with_size};
use crate::codec::verify_header_tag;
use crate::crypto::DataKey;
use crate::error::TransformError;
use crate::format::{FIXED_LEN, Header, Prefix, Record, classify_prefix, header_digest};

impl Transforming {
    /// The caller-facing metadata of a segment, from the metadata its backend knows (what
    /// rebuilding the metadata from the bucket alone yields, e.g. from the backend's segment
    /// manifests): for a transformed segment that has the stored size and not this layer's
    /// record, so this reads the transform header at the head of the stored `.log` (two small
    /// ranged requests), checks it (checksum, identity, and the data key and authentication tag
    /// when the key is at hand) and returns the metadata with the plaintext size and the record
    /// wrapping the backend's custom metadata. Untransformed segments come back unchanged;
    /// metadata already carrying the record gets the plaintext size it records.
    ///
    /// # Errors
    /// The backend's fetch errors; [`TransformError`] when the header is damaged, or belongs to
    /// another segment, or its key is present but does not open it.
    pub fn recover_metadata(
        &self,
        stored: &RemoteLogSegmentMetadata,
    ) -> Result<RemoteLogSegmentMetadata, RemoteStorageError> {
        let segment = stored.remote_log_segment_id();
        if let Some(record) = Record::decode(stored.custom_metadata(), segment)? {
            return with_size(
                stored,
                u64::from(record.plaintext_size),
                Some(record.encode()),
            );
        }
        let size = stored.segment_size_in_bytes();
        if size < FIXED_LEN as u64 {
            return Ok(stored.clone());
        }
        let prefix = self
            .inner
            .fetch_log_segment(stored, 0, Some(FIXED_LEN as u32 - 1))?;
        let corrupt = |reason: String| -> RemoteStorageError {
            TransformError::corrupt(segment, "transform header", reason).into()
        };
        let len = match classify_prefix(&prefix, segment) {
            Prefix::Header(len) => len,
            Prefix::Plain => return Ok(stored.clone()),
            Prefix::Damaged(reason) => return Err(corrupt(reason)),
        };
        let (Ok(header_len), true) = (u32::try_from(len), len <= size) else {
            return Err(corrupt(format!(
                "a {len}-byte header does not fit the {size}-byte stored object"
            )));
        };
        let bytes = self
            .inner
            .fetch_log_segment(stored, 0, Some(header_len - 1))
            .map_err(|e| truncated(e, segment, "transform header"))?;
        let header = Header::decode(&bytes, segment)?;
        if let Some(encryption) = &header.encryption {
            match DataKey::unwrap_with(self.config.keys().map(AsRef::as_ref), encryption, segment) {
                Ok(key) => {
                    let tag = header
                        .tag
                        .as_ref()
                        .ok_or_else(|| corrupt("encrypted without a tag".to_owned()))?;
                    verify_header_tag(&key, segment, &header.authenticated_bytes(), tag)?;
                }
                // Recovery records what the bucket holds; reading it needs the key later.
                Err(TransformError::MissingKey { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let record = Record {
            flags: header.flags,
            header_len,
            stored_size: u32::try_from(size).map_err(|_| corrupt(format!("{size} bytes")))?,
            plaintext_size: header.plaintext_size,
            digest: header_digest(&bytes),
            key_id: header.encryption.map(|e| e.key_id),
            inner: stored.custom_metadata().cloned(),
        };
        check_against_record(&header, &bytes, &record, segment)?;
        with_size(
            stored,
            u64::from(header.plaintext_size),
            Some(record.encode()),
        )
    }
}
