//! [`RemoteStorageManager`] for [`Transforming`]: transformed segments through the chunked
//! layout, untransformed ones passed to the inner store as they are.

use std::sync::Arc;

use krabka_remote_storage::{
    CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError,
    RemoteStorageManager, checked_range,
};

use super::{Transforming, inner_metadata, with_size};
use crate::codec::decode_index;
use crate::copy::prepare;
use crate::error::TransformError;
use crate::format::{Record, header_digest, index_object, index_slot};

impl RemoteStorageManager for Transforming {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        self.cache.forget(segment);
        if self.config.is_passthrough() {
            return self.inner.copy_log_segment_data(metadata, data);
        }
        // The first copy of this instance also removes the scratch directories of killed
        // processes.
        let sweep = !self.swept.swap(true, std::sync::atomic::Ordering::Relaxed);
        let prepared = prepare(&self.config, segment, data, sweep)?;
        let inner_meta = with_size(
            &metadata.with_custom_metadata(None),
            u64::from(prepared.stored_size),
            None,
        )?;
        let inner_cm = self
            .inner
            .copy_log_segment_data(&inner_meta, &prepared.data)?;
        let header_len =
            u32::try_from(prepared.header.len()).map_err(|_| TransformError::TooLarge {
                segment: segment.clone(),
                object: "transform header".to_owned(),
                reason: format!("{} bytes", prepared.header.len()),
            })?;
        let record = Record {
            flags: prepared.open.header.flags,
            header_len,
            stored_size: prepared.stored_size,
            plaintext_size: prepared.open.header.plaintext_size,
            digest: header_digest(&prepared.header),
            key_id: prepared.open.header.encryption.map(|e| e.key_id),
            inner: inner_cm,
        };
        let cm = record.encode();
        let max = self.config.custom_metadata_max_bytes();
        if cm.len() > max {
            return Err(TransformError::TooLarge {
                segment: segment.clone(),
                object: "custom metadata".to_owned(),
                reason: format!(
                    "{} bytes (the inner store's {} plus this layer's record) exceed the cap of \
                     {max} bytes",
                    cm.len(),
                    record.inner.as_ref().map_or(0, CustomMetadata::len)
                ),
            }
            .into());
        }
        self.cache
            .insert((segment.clone(), record.digest), Arc::new(prepared.open));
        Ok(Some(cm))
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        let Some(record) = Record::decode(metadata.custom_metadata(), segment)? else {
            return self
                .inner
                .fetch_log_segment(metadata, start_position, end_position);
        };
        let range = checked_range(
            u64::from(record.plaintext_size),
            start_position,
            end_position,
        )
        .map_err(|e| e.for_segment(segment))?;
        let inner_meta = inner_metadata(metadata, &record)?;
        if range.is_empty() {
            // No bytes to decode, but a missing segment is still SegmentNotFound.
            self.fetch_header(&inner_meta, &record, segment)?;
            return Ok(Vec::new());
        }
        let open = self.open_segment(&inner_meta, &record, segment)?;
        self.read_range(&open, &inner_meta, segment, range)
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        let Some(record) = Record::decode(metadata.custom_metadata(), segment)? else {
            return self.inner.fetch_index(metadata, index_type);
        };
        let object = index_object(index_type);
        let inner_meta = inner_metadata(metadata, &record)?;
        let mut bytes = self.inner.fetch_index(&inner_meta, index_type)?;
        let mlen = record.header_len as usize;
        if bytes.len() < mlen {
            return Err(TransformError::corrupt(
                segment,
                object,
                format!(
                    "{} bytes cannot hold its {mlen}-byte header (truncated?)",
                    bytes.len()
                ),
            )
            .into());
        }
        let (head, body) = bytes.split_at_mut(mlen);
        let key = (segment.clone(), record.digest);
        let open = match self.cache.get(&key) {
            Some(hit) => {
                if header_digest(head) != record.digest {
                    return Err(TransformError::corrupt(
                        segment,
                        object,
                        "its header is not the one recorded when the segment was copied",
                    )
                    .into());
                }
                hit
            }
            None => {
                let open = Arc::new(self.verify_header(head, &record, segment)?);
                self.cache.insert(key, Arc::clone(&open));
                open
            }
        };
        let slot = index_slot(index_type);
        let Some(entry) = open.header.indexes.get(slot).copied().flatten() else {
            return Err(TransformError::corrupt(
                segment,
                object,
                "the store has it but the header records no such index",
            )
            .into());
        };
        Ok(decode_index(
            segment,
            open.key.as_ref(),
            slot,
            &index_object(index_type),
            &entry,
            body,
        )?)
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        let segment = metadata.remote_log_segment_id();
        self.cache.forget(segment);
        match Record::decode(metadata.custom_metadata(), segment) {
            Ok(Some(record)) => self
                .inner
                .delete_log_segment_data(&inner_metadata(metadata, &record)?),
            Ok(None) => self.inner.delete_log_segment_data(metadata),
            // A malformed record must not keep the data from being deleted.
            Err(_) => self
                .inner
                .delete_log_segment_data(&metadata.with_custom_metadata(None)),
        }
    }
}
