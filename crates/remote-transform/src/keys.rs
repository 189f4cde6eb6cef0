//! Master keys, their ids, and where they come from.
//!
//! A segment's chunks are encrypted under a fresh random data key; the data key is stored
//! wrapped (AES-256-GCM) under a **master key** the user supplies, together with the master
//! key's [`KeyId`]. Rotation: make a new key current and keep the old ones in the
//! [`KeyProvider`]; segments written under an old key stay readable while it is present.

use std::fmt;
use std::path::{Path, PathBuf};

use zeroize::{Zeroize, Zeroizing};

use crate::error::TransformError;
pub use crate::key_id::{KeyId, MASTER_KEY_LEN};

impl std::str::FromStr for KeyId {
    type Err = TransformError;

    /// 16 hex digits.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| TransformError::InvalidConfig {
            reason: format!("key id {s:?}: {reason}"),
        };
        let bytes = s.as_bytes();
        if bytes.len() != 16 {
            return Err(bad("expected 16 hex digits"));
        }
        let mut id = [0u8; 8];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let (Some(hi), Some(lo)) = (hex_value(pair[0]), hex_value(pair[1])) else {
                return Err(bad("expected 16 hex digits"));
            };
            id[i] = hi << 4 | lo;
        }
        Ok(Self::from_bytes(id))
    }
}

/// A 256-bit master key and its id. The bytes are wiped when it is dropped and never shown:
/// `Debug` prints the id only.
///
/// ```
/// use krabka_remote_transform::MasterKey;
///
/// let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
/// let key = MasterKey::parse(hex.as_bytes(), "example")?;
/// assert!(!format!("{key:?}").contains("00112233"));
/// # Ok::<(), krabka_remote_transform::TransformError>(())
/// ```
#[derive(Clone)]
pub struct MasterKey {
    id: KeyId,
    bytes: Zeroizing<[u8; MASTER_KEY_LEN]>,
}

impl MasterKey {
    /// A key whose id is its [`KeyId::fingerprint`].
    pub fn new(mut bytes: [u8; MASTER_KEY_LEN]) -> Self {
        let key = Self {
            id: KeyId::fingerprint(&bytes),
            bytes: Zeroizing::new(bytes),
        };
        bytes.zeroize();
        key
    }

    /// A key under an id of the caller's choosing (a key management system's own ids).
    pub fn with_id(id: KeyId, mut bytes: [u8; MASTER_KEY_LEN]) -> Self {
        let key = Self {
            id,
            bytes: Zeroizing::new(bytes),
        };
        bytes.zeroize();
        key
    }

    /// Parses a key: exactly 32 raw bytes, or 64 hex digits (either case) with optional
    /// surrounding whitespace such as a trailing newline. `origin` names where the bytes came
    /// from in errors; the bytes themselves are never shown.
    ///
    /// # Errors
    /// [`TransformError::InvalidKey`] for any other length, or a non-hex character.
    pub fn parse(input: &[u8], origin: &str) -> Result<Self, TransformError> {
        let bad = |reason: String| TransformError::InvalidKey {
            origin: origin.to_owned(),
            reason,
        };
        let mut key = Zeroizing::new([0u8; MASTER_KEY_LEN]);
        if input.len() == MASTER_KEY_LEN {
            key.copy_from_slice(input);
            return Ok(Self::new(*key));
        }
        let trimmed = input.trim_ascii();
        if trimmed.len() != 2 * MASTER_KEY_LEN {
            return Err(bad(format!(
                "expected {MASTER_KEY_LEN} raw bytes or {} hex digits, found {} bytes",
                2 * MASTER_KEY_LEN,
                input.len()
            )));
        }
        for (i, pair) in trimmed.chunks_exact(2).enumerate() {
            match (hex_value(pair[0]), hex_value(pair[1])) {
                (Some(hi), Some(lo)) => key[i] = hi << 4 | lo,
                _ => {
                    return Err(bad(format!(
                        "{} hex digits expected, but the character at offset {} is not one",
                        2 * MASTER_KEY_LEN,
                        2 * i + usize::from(hex_value(pair[0]).is_some())
                    )));
                }
            }
        }
        Ok(Self::new(*key))
    }

    /// Reads a key from an environment variable holding 64 hex digits.
    ///
    /// # Errors
    /// [`TransformError::InvalidKey`] naming the variable when it is unset, not Unicode or not
    /// 64 hex digits.
    pub fn from_env(var: &str) -> Result<Self, TransformError> {
        let origin = format!("environment variable {var}");
        let value = Zeroizing::new(std::env::var(var).map_err(|e| TransformError::InvalidKey {
            origin: origin.clone(),
            reason: e.to_string(),
        })?);
        if value.len() == MASTER_KEY_LEN {
            return Err(TransformError::InvalidKey {
                origin,
                reason: format!("expected {} hex digits", 2 * MASTER_KEY_LEN),
            });
        }
        Self::parse(value.as_bytes(), &origin)
    }

    /// The key's id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// The key bytes, for the cipher.
    #[cfg_attr(not(feature = "encryption"), allow(dead_code))]
    pub(crate) fn bytes(&self) -> &[u8; MASTER_KEY_LEN] {
        &self.bytes
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterKey")
            .field("id", &self.id)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Where master keys come from: the current one for new segments, any known one by id for
/// reading. Implement it over a key management system; [`KeyRing`] covers files and the
/// environment.
///
/// Implementations must not print keys in `Debug`.
pub trait KeyProvider: Send + Sync + fmt::Debug {
    /// The key that wraps the data keys of newly written segments.
    ///
    /// # Errors
    /// Any [`TransformError`] when the key cannot be had.
    fn current_key(&self) -> Result<MasterKey, TransformError>;

    /// The key with this id, or `None` when the provider does not have it.
    ///
    /// # Errors
    /// Any [`TransformError`] when the provider cannot be asked.
    fn key(&self, id: KeyId) -> Result<Option<MasterKey>, TransformError>;
}

/// A fixed set of master keys: one current key (encrypts new segments) and any number of old
/// ones (still decrypt the segments written under them).
///
/// ```
/// use krabka_remote_transform::{KeyProvider, KeyRing, MasterKey};
///
/// let old = MasterKey::new([1; 32]);
/// let ring = KeyRing::new(MasterKey::new([2; 32])).with_old_key(old.clone());
/// assert_ne!(ring.current_key()?.id(), old.id());
/// assert!(ring.key(old.id())?.is_some());
/// # Ok::<(), krabka_remote_transform::TransformError>(())
/// ```
#[derive(Clone, Debug)]
pub struct KeyRing {
    current: MasterKey,
    old: Vec<MasterKey>,
    /// The file each key was read from, by id.
    origins: Vec<(KeyId, PathBuf)>,
}

impl KeyRing {
    /// A ring whose current key is `current`.
    pub fn new(current: MasterKey) -> Self {
        Self {
            current,
            old: Vec::new(),
            origins: Vec::new(),
        }
    }

    /// A ring whose current key is the 64 hex digits of the environment variable `var`.
    ///
    /// # Errors
    /// [`TransformError::InvalidKey`] naming the variable.
    pub fn from_env(var: &str) -> Result<Self, TransformError> {
        Ok(Self::new(MasterKey::from_env(var)?))
    }

    /// Adds a key that is no longer current but still decrypts older segments.
    #[must_use]
    pub fn with_old_key(mut self, key: MasterKey) -> Self {
        if key.id() != self.current.id() && !self.old.iter().any(|k| k.id() == key.id()) {
            self.old.push(key);
        }
        self
    }

    /// Records that the current key was read from `path`.
    pub(crate) fn with_origin(mut self, path: PathBuf) -> Self {
        self.origins.push((self.current.id(), path));
        self
    }

    /// [`with_old_key`](Self::with_old_key) for a key read from `path`.
    pub(crate) fn with_old_key_from(self, key: MasterKey, path: PathBuf) -> Self {
        let id = key.id();
        let mut ring = self.with_old_key(key);
        if !ring.origins.iter().any(|(known, _)| *known == id) {
            ring.origins.push((id, path));
        }
        ring
    }

    /// The file the key with id `id` was read from, when it came from one.
    pub fn origin(&self, id: KeyId) -> Option<&Path> {
        self.origins
            .iter()
            .find(|(known, _)| *known == id)
            .map(|(_, p)| p.as_path())
    }

    /// The ids of every key, current first.
    pub fn key_ids(&self) -> Vec<KeyId> {
        std::iter::once(&self.current)
            .chain(&self.old)
            .map(MasterKey::id)
            .collect()
    }
}

impl KeyProvider for KeyRing {
    fn current_key(&self) -> Result<MasterKey, TransformError> {
        Ok(self.current.clone())
    }

    fn key(&self, id: KeyId) -> Result<Option<MasterKey>, TransformError> {
        Ok(std::iter::once(&self.current)
            .chain(&self.old)
            .find(|k| k.id() == id)
            .cloned())
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191A1B1C1D1E1F";

    fn counting() -> [u8; 32] {
        std::array::from_fn(|i| i as u8)
    }

    #[test]
    fn raw_and_hex_keys_parse_to_the_same_key() {
        let raw = MasterKey::parse(&counting(), "t").unwrap();
        let hex = MasterKey::parse(HEX.as_bytes(), "t").unwrap();
        let hex_nl = MasterKey::parse(format!("{HEX}\n").as_bytes(), "t").unwrap();
        let hex_crlf = MasterKey::parse(format!("  {HEX}\r\n").as_bytes(), "t").unwrap();
        assert_eq!(raw.bytes(), &counting());
        for k in [&hex, &hex_nl, &hex_crlf] {
            assert_eq!(k.bytes(), raw.bytes());
            assert_eq!(k.id(), raw.id());
        }
    }

    #[test]
    fn bad_keys_are_refused_without_showing_them() {
        for (input, want) in [
            (&b"short"[..], "found 5 bytes"),
            (&[0u8; 33][..], "found 33 bytes"),
            (&[b'a'; 63][..], "found 63 bytes"),
            (&[b'g'; 64][..], "offset 0"),
        ] {
            let e = MasterKey::parse(input, "file k").unwrap_err();
            let shown = e.to_string();
            assert!(shown.contains("file k"), "{shown}");
            assert!(shown.contains(want), "{shown}");
        }
        let mut bad = HEX.as_bytes().to_vec();
        bad[11] = b'z';
        let shown = MasterKey::parse(&bad, "f").unwrap_err().to_string();
        assert!(shown.contains("offset 11"), "{shown}");
        assert!(!shown.contains("0a0b"), "{shown}");
    }

    #[test]
    fn key_files_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw.key");
        let hex = dir.path().join("hex.key");
        std::fs::write(&raw, counting()).unwrap();
        std::fs::write(&hex, format!("{HEX}\n")).unwrap();
        let a = KeyRing::from_file(&raw).unwrap();
        let b = KeyRing::from_file(&hex).unwrap();
        assert_eq!(a.key_ids(), b.key_ids());
        let e = KeyRing::from_file(dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        // The environment variable is unset in tests: a clear error naming it.
        let e = KeyRing::from_env("KRABKA_TRANSFORM_TEST_UNSET_KEY").unwrap_err();
        assert!(
            e.to_string().contains("KRABKA_TRANSFORM_TEST_UNSET_KEY"),
            "{e}"
        );
    }

    #[test]
    fn debug_never_shows_key_bytes() {
        let key = MasterKey::new([0xab; 32]);
        let ring = KeyRing::new(key.clone()).with_old_key(MasterKey::new([0xcd; 32]));
        for shown in [
            format!("{key:?}"),
            format!("{ring:?}"),
            format!("{ring:#?}"),
        ] {
            assert!(!shown.contains("abab"), "{shown}");
            assert!(!shown.contains("171, 171"), "{shown}");
            assert!(!shown.contains("cdcd"), "{shown}");
            assert!(!shown.contains("205, 205"), "{shown}");
        }
    }

    #[test]
    fn rings_find_keys_by_id() {
        let (a, b, c) = (
            MasterKey::new([1; 32]),
            MasterKey::new([2; 32]),
            MasterKey::new([3; 32]),
        );
        let ring = KeyRing::new(b.clone())
            .with_old_key(a.clone())
            .with_old_key(a.clone())
            .with_old_key(b.clone());
        assert_eq!(ring.key_ids(), vec![b.id(), a.id()]);
        assert_eq!(ring.current_key().unwrap().id(), b.id());
        assert!(ring.key(a.id()).unwrap().is_some());
        assert!(ring.key(c.id()).unwrap().is_none());
        let bad = "zz".parse::<KeyId>();
        assert!(
            matches!(&bad, Err(TransformError::InvalidConfig { reason })
                if reason == "key id \"zz\": expected 16 hex digits"),
            "{bad:?}"
        );
    }
}
