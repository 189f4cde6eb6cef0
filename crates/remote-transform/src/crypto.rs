//! AES-256-GCM (ring): per-segment data keys, their wrapping under a master key, and the
//! nonces and associated data of every sealed part of a segment.
//!
//! Nonces are never reused: every copy draws a fresh random data key, and within one copy each
//! sealed part has its own (domain, counter) pair (`Domain`), XORed into a random per-copy base.
//! Data keys are wrapped under the master key with a fresh random 96-bit nonce each.

use krabka_remote_storage::RemoteLogSegmentId;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use zeroize::Zeroizing;

use crate::error::TransformError;
use crate::format::EncryptionHeader;
use crate::keys::{KeyId, KeyProvider, MasterKey};

/// What a nonce is for: a chunk (counter = chunk number), an index body (counter = its slot),
/// the header's GMAC (counter 0).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Domain {
    Chunk = 1,
    Index = 2,
    Header = 3,
}

/// Prefix of every associated-data string.
const AAD_PREFIX: &[u8] = b"krabka-remote-transform/1 ";

/// The associated data binding a sealed part to its segment and position: a label, the topic
/// id, the partition, the segment uuid, then `extra` (position, count, lengths).
pub(crate) fn aad(label: &str, segment: &RemoteLogSegmentId, extra: &[u8]) -> Vec<u8> {
    let tp = segment.topic_id_partition();
    let mut a = Vec::with_capacity(AAD_PREFIX.len() + label.len() + 36 + extra.len());
    a.extend_from_slice(AAD_PREFIX);
    a.extend_from_slice(label.as_bytes());
    a.extend_from_slice(tp.topic_id().as_bytes());
    a.extend_from_slice(&tp.partition().to_be_bytes());
    a.extend_from_slice(segment.id().as_bytes());
    a.extend_from_slice(extra);
    a
}

/// A segment's data key.
pub(crate) struct DataKey {
    key: LessSafeKey,
    nonce_base: [u8; 12],
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(<redacted>)")
    }
}

fn crypto_err(segment: &RemoteLogSegmentId, operation: &'static str) -> TransformError {
    TransformError::Crypto {
        segment: segment.clone(),
        operation,
    }
}

impl DataKey {
    fn from_bytes(bytes: &[u8; 32], nonce_base: [u8; 12]) -> Option<Self> {
        let key = UnboundKey::new(&AES_256_GCM, bytes).ok()?;
        Some(Self {
            key: LessSafeKey::new(key),
            nonce_base,
        })
    }

    /// A fresh random data key for a copy of `segment`, wrapped under the provider's current
    /// master key.
    pub fn generate(
        keys: &dyn KeyProvider,
        segment: &RemoteLogSegmentId,
    ) -> Result<(Self, EncryptionHeader), TransformError> {
        let master = keys.current_key()?;
        let rng = SystemRandom::new();
        let mut raw = Zeroizing::new([0u8; 32]);
        let mut nonce_base = [0u8; 12];
        let mut wrap_nonce = [0u8; 12];
        rng.fill(raw.as_mut())
            .and_then(|()| rng.fill(&mut nonce_base))
            .and_then(|()| rng.fill(&mut wrap_nonce))
            .map_err(|_| crypto_err(segment, "drawing a random data key"))?;
        let wrapping = master_key(&master, segment)?;
        let mut sealed = raw.to_vec();
        wrapping
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(wrap_nonce),
                Aad::from(wrap_aad(master.id(), segment)),
                &mut sealed,
            )
            .map_err(|_| crypto_err(segment, "wrapping the data key"))?;
        let mut wrapped_key = [0u8; 48];
        if sealed.len() != wrapped_key.len() {
            return Err(crypto_err(segment, "wrapping the data key"));
        }
        wrapped_key.copy_from_slice(&sealed);
        let key = Self::from_bytes(&raw, nonce_base)
            .ok_or_else(|| crypto_err(segment, "creating the data key"))?;
        Ok((
            key,
            EncryptionHeader {
                key_id: master.id(),
                wrap_nonce,
                wrapped_key,
                nonce_base,
            },
        ))
    }

    /// Unwraps a segment's data key with the provider's key of the recorded id.
    pub fn unwrap_with(
        keys: Option<&dyn KeyProvider>,
        header: &EncryptionHeader,
        segment: &RemoteLogSegmentId,
    ) -> Result<Self, TransformError> {
        let missing = |configured| TransformError::MissingKey {
            segment: segment.clone(),
            key_id: header.key_id,
            configured,
        };
        let Some(keys) = keys else {
            return Err(missing(false));
        };
        let master = keys.key(header.key_id)?.ok_or_else(|| missing(true))?;
        let wrapping = master_key(&master, segment)?;
        let mut buf = Zeroizing::new(header.wrapped_key);
        let opened = wrapping
            .open_in_place(
                Nonce::assume_unique_for_key(header.wrap_nonce),
                Aad::from(wrap_aad(header.key_id, segment)),
                buf.as_mut(),
            )
            .map_err(|_| TransformError::WrongKey {
                segment: segment.clone(),
                key_id: header.key_id,
            })?;
        let mut raw = Zeroizing::new([0u8; 32]);
        if opened.len() != raw.len() {
            return Err(TransformError::WrongKey {
                segment: segment.clone(),
                key_id: header.key_id,
            });
        }
        raw.copy_from_slice(opened);
        Self::from_bytes(&raw, header.nonce_base)
            .ok_or_else(|| crypto_err(segment, "creating the data key"))
    }

    fn nonce(&self, domain: Domain, counter: u64) -> Nonce {
        let mut n = self.nonce_base;
        let mut tweak = [0u8; 12];
        tweak[..4].copy_from_slice(&(domain as u32).to_be_bytes());
        tweak[4..].copy_from_slice(&counter.to_be_bytes());
        for (a, b) in n.iter_mut().zip(tweak) {
            *a ^= b;
        }
        Nonce::assume_unique_for_key(n)
    }

    /// Encrypts `buf` in place and appends the tag.
    pub fn seal(
        &self,
        domain: Domain,
        counter: u64,
        aad: &[u8],
        buf: &mut Vec<u8>,
        segment: &RemoteLogSegmentId,
    ) -> Result<(), TransformError> {
        self.key
            .seal_in_place_append_tag(self.nonce(domain, counter), Aad::from(aad), buf)
            .map_err(|_| crypto_err(segment, "sealing"))
    }

    /// Decrypts `buf` (ciphertext and tag) in place; returns the plaintext part, or `None`
    /// when authentication fails.
    pub fn open<'a>(
        &self,
        domain: Domain,
        counter: u64,
        aad: &[u8],
        buf: &'a mut [u8],
    ) -> Option<&'a mut [u8]> {
        self.key
            .open_in_place(self.nonce(domain, counter), Aad::from(aad), buf)
            .ok()
    }
}

fn master_key(
    master: &MasterKey,
    segment: &RemoteLogSegmentId,
) -> Result<LessSafeKey, TransformError> {
    UnboundKey::new(&AES_256_GCM, master.bytes())
        .map(LessSafeKey::new)
        .map_err(|_| crypto_err(segment, "loading the master key"))
}

fn wrap_aad(key_id: KeyId, segment: &RemoteLogSegmentId) -> Vec<u8> {
    aad("data key ", segment, &key_id.to_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::keys::KeyRing;
    use krabka_remote_storage::{TopicIdPartition, Uuid};

    fn segment() -> RemoteLogSegmentId {
        RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 0))
    }

    #[test]
    fn wrapped_keys_open_only_for_their_segment_and_key() {
        let ring = KeyRing::new(MasterKey::new([1; 32]));
        let seg = segment();
        let (key, header) = DataKey::generate(&ring, &seg).unwrap();
        let unwrapped = DataKey::unwrap_with(Some(&ring), &header, &seg).unwrap();
        let mut buf = b"hello".to_vec();
        key.seal(Domain::Chunk, 3, b"aad", &mut buf, &seg).unwrap();
        let mut copy = buf.clone();
        assert_eq!(
            unwrapped.open(Domain::Chunk, 3, b"aad", &mut copy).unwrap(),
            b"hello"
        );
        // Another position, domain or associated data fails.
        for (d, c, a) in [
            (Domain::Chunk, 4, &b"aad"[..]),
            (Domain::Index, 3, b"aad"),
            (Domain::Chunk, 3, b"aae"),
        ] {
            let mut copy = buf.clone();
            assert!(unwrapped.open(d, c, a, &mut copy).is_none());
        }
        // The header moved to another segment does not unwrap.
        assert!(matches!(
            DataKey::unwrap_with(Some(&ring), &header, &segment()),
            Err(TransformError::WrongKey { .. })
        ));
        // Another key under the same id does not unwrap; an unknown id is missing.
        let impostor = KeyRing::new(MasterKey::with_id(header.key_id, [2; 32]));
        assert!(matches!(
            DataKey::unwrap_with(Some(&impostor), &header, &seg),
            Err(TransformError::WrongKey { .. })
        ));
        let other = KeyRing::new(MasterKey::new([2; 32]));
        assert!(matches!(
            DataKey::unwrap_with(Some(&other), &header, &seg),
            Err(TransformError::MissingKey {
                configured: true,
                ..
            })
        ));
        assert!(matches!(
            DataKey::unwrap_with(None, &header, &seg),
            Err(TransformError::MissingKey {
                configured: false,
                ..
            })
        ));
    }

    #[test]
    fn every_copy_draws_a_fresh_key_and_nonce_base() {
        let ring = KeyRing::new(MasterKey::new([1; 32]));
        let seg = segment();
        let (_, a) = DataKey::generate(&ring, &seg).unwrap();
        let (_, b) = DataKey::generate(&ring, &seg).unwrap();
        assert_ne!(a.wrapped_key, b.wrapped_key);
        assert_ne!(a.nonce_base, b.nonce_base);
        assert_ne!(a.wrap_nonce, b.wrap_nonce);
    }
}
