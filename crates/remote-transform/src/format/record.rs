//! The record a transformed segment keeps in its custom metadata.

use krabka_remote_storage::{CustomMetadata, RemoteLogSegmentId};
use sha2::{Digest, Sha256};

use super::{
    FLAG_AES_GCM, KNOWN_FLAGS, RECORD_LEN, RECORD_LEN_KEYED, RECORD_MAGIC, RECORD_MAGIC_KEYED,
};
use crate::error::TransformError;
use crate::keys::KeyId;

/// What this layer records in a transformed segment's custom metadata: enough to validate a
/// range, find the header and check it is the one written by this copy, without a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub flags: u8,
    pub header_len: u32,
    pub stored_size: u32,
    pub plaintext_size: u32,
    pub digest: [u8; 16],
    /// The master key's id, recorded for encrypted segments (`KTX2`); `None` in a `KTX1`
    /// record (unencrypted, or encrypted by a version that did not record it).
    pub key_id: Option<KeyId>,
    pub inner: Option<CustomMetadata>,
}

/// The first 16 bytes of SHA-256 over an encoded header.
pub(crate) fn header_digest(header: &[u8]) -> [u8; 16] {
    let d = Sha256::digest(header);
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

impl Record {
    /// The custom metadata bytes.
    pub fn encode(&self) -> CustomMetadata {
        let inner = self.inner.as_ref().map(|c| c.value().as_ref());
        let mut b = Vec::with_capacity(RECORD_LEN_KEYED + inner.map_or(0, <[u8]>::len));
        b.extend_from_slice(match self.key_id {
            Some(_) => RECORD_MAGIC_KEYED,
            None => RECORD_MAGIC,
        });
        b.push(self.flags);
        b.extend_from_slice(&self.header_len.to_le_bytes());
        b.extend_from_slice(&self.stored_size.to_le_bytes());
        b.extend_from_slice(&self.plaintext_size.to_le_bytes());
        b.extend_from_slice(&self.digest);
        if let Some(id) = self.key_id {
            b.extend_from_slice(&id.to_bytes());
        }
        match inner {
            Some(inner) => {
                b.push(1);
                b.extend_from_slice(inner);
            }
            None => b.push(0),
        }
        CustomMetadata::new(b)
    }

    /// `Ok(None)` when the custom metadata is not this layer's (an untransformed segment).
    pub fn decode(
        cm: Option<&CustomMetadata>,
        segment: &RemoteLogSegmentId,
    ) -> Result<Option<Self>, TransformError> {
        let Some(cm) = cm else { return Ok(None) };
        let v = cm.value().as_ref();
        let keyed = v.starts_with(RECORD_MAGIC_KEYED);
        if !keyed && !v.starts_with(RECORD_MAGIC) {
            return Ok(None);
        }
        let bad = |reason: &str| TransformError::corrupt(segment, "custom metadata", reason);
        let len = if keyed { RECORD_LEN_KEYED } else { RECORD_LEN };
        if v.len() < len {
            return Err(bad("too short"));
        }
        let u32_at = |at: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&v[at..at + 4]);
            u32::from_le_bytes(a)
        };
        let flags = v[4];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(TransformError::unsupported(
                segment,
                format!("unknown transform flags {flags:#04x}"),
            ));
        }
        let mut digest = [0u8; 16];
        digest.copy_from_slice(&v[17..33]);
        let key_id = if keyed {
            if flags & FLAG_AES_GCM == 0 {
                return Err(bad("a key id recorded for an unencrypted segment"));
            }
            let mut id = [0u8; 8];
            id.copy_from_slice(&v[33..41]);
            Some(KeyId::from_bytes(id))
        } else {
            None
        };
        let inner = match v[len - 1] {
            0 if v.len() == len => None,
            1 => Some(CustomMetadata::new(bytes::Bytes::copy_from_slice(
                &v[len..],
            ))),
            _ => return Err(bad("malformed inner custom metadata")),
        };
        let record = Self {
            flags,
            header_len: u32_at(5),
            stored_size: u32_at(9),
            plaintext_size: u32_at(13),
            digest,
            key_id,
            inner,
        };
        if u64::from(record.header_len) > u64::from(record.stored_size) {
            return Err(bad("header longer than the stored object"));
        }
        Ok(Some(record))
    }
}
