//! Stand-in for the `crypto` module in builds without the `encryption` feature: no data key
//! can exist, and every path that needs one reports that the build cannot decrypt.

use krabka_remote_storage::RemoteLogSegmentId;

use crate::error::TransformError;
use crate::format::EncryptionHeader;
use crate::keys::KeyProvider;

/// See the real module.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Domain {
    Chunk = 1,
    Index = 2,
    Header = 3,
}

/// See the real module.
pub(crate) fn aad(label: &str, segment: &RemoteLogSegmentId, extra: &[u8]) -> Vec<u8> {
    let _ = (label, segment, extra);
    Vec::new()
}

/// No data key exists without the `encryption` feature.
#[derive(Debug)]
pub(crate) enum DataKey {}

fn unsupported(segment: &RemoteLogSegmentId) -> TransformError {
    TransformError::unsupported(
        segment,
        "the segment is encrypted (AES-256-GCM) but this build has no encryption support \
         (crate feature `encryption`)",
    )
}

impl DataKey {
    pub fn generate(
        _keys: &dyn KeyProvider,
        segment: &RemoteLogSegmentId,
    ) -> Result<(Self, EncryptionHeader), TransformError> {
        Err(unsupported(segment))
    }

    pub fn unwrap_with(
        _keys: Option<&dyn KeyProvider>,
        _header: &EncryptionHeader,
        segment: &RemoteLogSegmentId,
    ) -> Result<Self, TransformError> {
        Err(unsupported(segment))
    }

    pub fn seal(
        &self,
        _domain: Domain,
        _counter: u64,
        _aad: &[u8],
        _buf: &mut Vec<u8>,
        _segment: &RemoteLogSegmentId,
    ) -> Result<(), TransformError> {
        match *self {}
    }

    pub fn open<'a>(
        &self,
        _domain: Domain,
        _counter: u64,
        _aad: &[u8],
        _buf: &'a mut [u8],
    ) -> Option<&'a mut [u8]> {
        match *self {}
    }
}
