//! The id of a master key and the key length: below the error type, which names key ids, and
//! the keys themselves, whose errors are that type.

use std::fmt;

use sha2::{Digest, Sha256};

/// Length of a master key in bytes (AES-256).
pub const MASTER_KEY_LEN: usize = 32;

/// Domain separation of [`KeyId::fingerprint`].
const FINGERPRINT_DOMAIN: &[u8] = b"krabka-remote-transform/1 master key id";

/// The id of a master key, recorded in every segment encrypted under it: 8 bytes, shown as 16
/// hex digits.
///
/// Keys loaded with [`MasterKey::new`](crate::MasterKey::new) (and so from files or the environment) take their
/// [`fingerprint`](Self::fingerprint), so no naming is needed and a wrong key is recognised as
/// a different id; a custom [`KeyProvider`](crate::KeyProvider) may assign its own ids.
///
/// ```
/// use krabka_remote_transform::{KeyId, MasterKey};
///
/// let key = MasterKey::new([7; 32]);
/// assert_eq!(key.id(), KeyId::fingerprint(&[7; 32]));
/// assert_eq!(key.id().to_string().len(), 16);
/// assert_eq!(key.id().to_string().parse::<KeyId>().unwrap(), key.id());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; 8]);

impl KeyId {
    /// An id from its bytes.
    pub const fn from_bytes(bytes: [u8; 8]) -> Self {
        Self(bytes)
    }

    /// The id's bytes.
    pub const fn to_bytes(self) -> [u8; 8] {
        self.0
    }

    /// The first 8 bytes of SHA-256 over a fixed domain string and the key: stable, and reveals
    /// nothing usable about a random 256-bit key.
    pub fn fingerprint(key: &[u8; MASTER_KEY_LEN]) -> Self {
        let mut h = Sha256::new();
        h.update(FINGERPRINT_DOMAIN);
        h.update(key);
        let digest = h.finalize();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        Self(id)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}
