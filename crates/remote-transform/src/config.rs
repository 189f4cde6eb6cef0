//! What the transforming layer does to new segments, and its limits.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use krabka_remote_storage::DEFAULT_CUSTOM_METADATA_MAX_BYTES;

use crate::error::TransformError;
use crate::keys::KeyProvider;

/// Default plaintext bytes per chunk: 1 MiB, the tiering reader's default chunk, so an aligned
/// tiering read maps to exactly one stored chunk.
pub const DEFAULT_CHUNK_SIZE: u32 = 1 << 20;
/// Smallest chunk size accepted.
pub const MIN_CHUNK_SIZE: u32 = 1 << 10;
/// Largest chunk size accepted.
pub const MAX_CHUNK_SIZE: u32 = 64 << 20;
/// Default zstd level.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// Default cap on the stored bytes one ranged request of a fetch asks for (at least one chunk
/// is always asked for).
pub const DEFAULT_FETCH_RUN_BYTES: u32 = 8 << 20;
/// Default number of segment headers kept decoded in memory.
pub const DEFAULT_HEADER_CACHE_ENTRIES: usize = 256;

/// How new segments are compressed.
///
/// Parses from the CLI's `--compression` values: `none`, `zstd` (level 3) or `zstd:LEVEL`
/// with LEVEL in 1..=22. `zstd` needs the crate's `zstd` feature.
///
/// ```
/// use krabka_remote_transform::{ChunkCompression, TransformError};
///
/// assert_eq!("none".parse::<ChunkCompression>()?, ChunkCompression::None);
/// # #[cfg(feature = "zstd")] {
/// assert_eq!("zstd".parse::<ChunkCompression>()?, ChunkCompression::Zstd { level: 3 });
/// assert_eq!("zstd:19".parse::<ChunkCompression>()?, ChunkCompression::Zstd { level: 19 });
/// assert_eq!(ChunkCompression::Zstd { level: 19 }.to_string(), "zstd:19");
/// # }
/// assert!(matches!(
///     "zstd:0".parse::<ChunkCompression>(),
///     Err(TransformError::InvalidCompression { spec, .. }) if spec == "zstd:0"
/// ));
/// assert!(matches!(
///     "gzip".parse::<ChunkCompression>(),
///     Err(TransformError::InvalidCompression { spec, .. }) if spec == "gzip"
/// ));
/// # Ok::<(), krabka_remote_transform::TransformError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChunkCompression {
    /// Chunks are stored as they are (encrypted or not).
    #[default]
    None,
    /// Each chunk is compressed with zstd at this level (1..=22); a chunk that does not shrink
    /// is stored as it is.
    Zstd {
        /// The zstd level.
        level: i32,
    },
}

impl ChunkCompression {
    /// zstd at `level`.
    ///
    /// # Errors
    /// [`TransformError::InvalidCompression`] for a level outside 1..=22, or when the crate was
    /// built without its `zstd` feature.
    pub fn zstd(level: i32) -> Result<Self, TransformError> {
        let spec = format!("zstd:{level}");
        if !(1..=22).contains(&level) {
            return Err(TransformError::InvalidCompression {
                spec,
                reason: "the zstd level must be 1..=22".to_owned(),
            });
        }
        if !cfg!(feature = "zstd") {
            return Err(TransformError::InvalidCompression {
                spec,
                reason: "this build has no zstd support (crate feature `zstd`)".to_owned(),
            });
        }
        Ok(Self::Zstd { level })
    }
}

impl FromStr for ChunkCompression {
    type Err = TransformError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| TransformError::InvalidCompression {
            spec: s.to_owned(),
            reason: reason.to_owned(),
        };
        let (name, level) = match s.split_once(':') {
            Some((name, level)) => (name, Some(level)),
            None => (s, None),
        };
        match (name.to_ascii_lowercase().as_str(), level) {
            ("none", None) => Ok(Self::None),
            ("none", Some(_)) => Err(bad("`none` takes no level")),
            ("zstd", None) => Self::zstd(DEFAULT_ZSTD_LEVEL),
            ("zstd", Some(level)) => {
                let level: i32 = level
                    .trim()
                    .parse()
                    .map_err(|_| bad("the zstd level must be a number in 1..=22"))?;
                Self::zstd(level).map_err(|e| match e {
                    TransformError::InvalidCompression { reason, .. } => bad(&reason),
                    other => other,
                })
            }
            _ => Err(bad(
                "expected `none`, `zstd` or `zstd:LEVEL` (LEVEL 1..=22)",
            )),
        }
    }
}

impl fmt::Display for ChunkCompression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Zstd { level } => write!(f, "zstd:{level}"),
        }
    }
}

/// What [`Transforming`](crate::Transforming) does to the segments it copies, and its limits.
///
/// The default transforms nothing on copy (segments go to the inner store as they are) but
/// reads every segment whose custom metadata records a transform this build supports, so a
/// default configuration reads a mixed bucket's compressed and raw segments; encrypted ones
/// need [`with_encryption`](Self::with_encryption) with a provider holding their key.
///
/// ```
/// use krabka_remote_transform::{ChunkCompression, TransformConfig};
///
/// let config = TransformConfig::new()
///     .with_compression(ChunkCompression::None)
///     .with_chunk_size(4 << 20)?;
/// assert_eq!(config.chunk_size(), 4 << 20);
/// assert!(config.is_passthrough());
/// # Ok::<(), krabka_remote_transform::TransformError>(())
/// ```
#[derive(Clone)]
pub struct TransformConfig {
    compression: ChunkCompression,
    keys: Option<Arc<dyn KeyProvider>>,
    chunk_size: u32,
    scratch_dir: Option<PathBuf>,
    fetch_run_bytes: u32,
    copy_threads: usize,
    header_cache_entries: usize,
    custom_metadata_max_bytes: usize,
}

impl Default for TransformConfig {
    fn default() -> Self {
        Self {
            compression: ChunkCompression::None,
            keys: None,
            chunk_size: DEFAULT_CHUNK_SIZE,
            scratch_dir: None,
            fetch_run_bytes: DEFAULT_FETCH_RUN_BYTES,
            copy_threads: std::thread::available_parallelism()
                .map(|n| n.get().min(4))
                .unwrap_or(1),
            header_cache_entries: DEFAULT_HEADER_CACHE_ENTRIES,
            custom_metadata_max_bytes: DEFAULT_CUSTOM_METADATA_MAX_BYTES,
        }
    }
}

impl TransformConfig {
    /// The default: no transform on copy, every supported transform on read.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the CLI builds from `--compression SPEC` and `--encryption-key-file PATH`: `SPEC`
    /// as for [`ChunkCompression`]'s `FromStr`, `PATH` a file of 32 raw bytes or 64 hex digits that
    /// becomes the current key of a [`KeyRing`](crate::KeyRing).
    ///
    /// ```
    /// use krabka_remote_transform::{TransformConfig, TransformError};
    ///
    /// let config = TransformConfig::from_options(Some("none"), None)?;
    /// assert!(config.is_passthrough());
    /// assert!(matches!(
    ///     TransformConfig::from_options(Some("lz4"), None),
    ///     Err(TransformError::InvalidCompression { spec, .. }) if spec == "lz4"
    /// ));
    /// # Ok::<(), krabka_remote_transform::TransformError>(())
    /// ```
    ///
    /// # Errors
    /// [`TransformError::InvalidCompression`], [`TransformError::InvalidKey`], or
    /// [`TransformError::InvalidConfig`] when a key file is given to a build without the
    /// `encryption` feature.
    pub fn from_options(
        compression: Option<&str>,
        encryption_key_file: Option<&Path>,
    ) -> Result<Self, TransformError> {
        let mut config = Self::new();
        if let Some(spec) = compression {
            config = config.with_compression(spec.parse()?);
        }
        if let Some(path) = encryption_key_file {
            #[cfg(feature = "encryption")]
            {
                config = config.with_encryption(Arc::new(crate::keys::KeyRing::from_file(path)?));
            }
            #[cfg(not(feature = "encryption"))]
            {
                return Err(TransformError::InvalidConfig {
                    reason: format!(
                        "--encryption-key-file {}: this build has no encryption support (crate \
                         feature `encryption`)",
                        path.display()
                    ),
                });
            }
        }
        Ok(config)
    }

    /// ChunkCompression of new segments (default [`ChunkCompression::None`]).
    #[must_use]
    pub fn with_compression(mut self, compression: ChunkCompression) -> Self {
        self.compression = compression;
        self
    }

    /// Encrypt new segments under `keys`' current key, and decrypt segments under any key it
    /// has (feature `encryption`).
    #[cfg(feature = "encryption")]
    #[must_use]
    pub fn with_encryption(mut self, keys: Arc<dyn KeyProvider>) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Plaintext bytes per chunk of new segments (default 1 MiB). Every segment records its own
    /// chunk size, so changing it leaves older segments readable.
    ///
    /// # Errors
    /// [`TransformError::InvalidConfig`] outside 1 KiB..=64 MiB.
    pub fn with_chunk_size(mut self, bytes: u32) -> Result<Self, TransformError> {
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&bytes) {
            return Err(TransformError::InvalidConfig {
                reason: format!(
                    "chunk size {bytes} is outside {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE} bytes"
                ),
            });
        }
        self.chunk_size = bytes;
        Ok(self)
    }

    /// Where a copy writes the transformed files before handing them to the inner store
    /// (default: the system temporary directory). Needs room for one transformed segment per
    /// copy in flight; a directory on the same disk as the log avoids filling a RAM-backed
    /// `/tmp`.
    #[must_use]
    pub fn with_scratch_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.scratch_dir = Some(dir.into());
        self
    }

    /// The most stored bytes one ranged request of a fetch asks for (default 8 MiB; at least
    /// one chunk). Bounds a fetch's memory beyond the bytes it returns.
    #[must_use]
    pub fn with_fetch_run_bytes(mut self, bytes: u32) -> Self {
        self.fetch_run_bytes = bytes.max(1);
        self
    }

    /// Threads that compress and encrypt a copy's chunks (default: the available parallelism,
    /// at most 4). A copy holds about two chunks per thread in memory.
    #[must_use]
    pub fn with_copy_threads(mut self, threads: usize) -> Self {
        self.copy_threads = threads.max(1);
        self
    }

    /// Segments whose decoded header (chunk table and data key) stays in memory (default
    /// 256; 0 fetches the header on every call).
    #[must_use]
    pub fn with_header_cache_entries(mut self, entries: usize) -> Self {
        self.header_cache_entries = entries;
        self
    }

    /// The custom metadata cap of the caller (default 128 bytes, Kafka's default); a copy whose
    /// custom metadata (this layer's record plus the inner store's) would exceed it fails.
    #[must_use]
    pub fn with_custom_metadata_max_bytes(mut self, bytes: usize) -> Self {
        self.custom_metadata_max_bytes = bytes;
        self
    }

    /// ChunkCompression of new segments.
    pub fn compression(&self) -> ChunkCompression {
        self.compression
    }

    /// Whether new segments are encrypted.
    pub fn encrypts(&self) -> bool {
        self.keys.is_some()
    }

    /// The key provider, if any.
    pub fn keys(&self) -> Option<&Arc<dyn KeyProvider>> {
        self.keys.as_ref()
    }

    /// Plaintext bytes per chunk of new segments.
    pub fn chunk_size(&self) -> u32 {
        self.chunk_size
    }

    /// Where copies write their scratch files (`None`: the system temporary directory).
    pub fn scratch_dir(&self) -> Option<&Path> {
        self.scratch_dir.as_deref()
    }

    /// The cap on stored bytes per ranged request.
    pub fn fetch_run_bytes(&self) -> u32 {
        self.fetch_run_bytes
    }

    /// Threads per copy.
    pub fn copy_threads(&self) -> usize {
        self.copy_threads
    }

    /// Headers kept in memory.
    pub fn header_cache_entries(&self) -> usize {
        self.header_cache_entries
    }

    /// The custom metadata cap.
    pub fn custom_metadata_max_bytes(&self) -> usize {
        self.custom_metadata_max_bytes
    }

    /// Whether copies store segments untransformed (no compression, no encryption).
    pub fn is_passthrough(&self) -> bool {
        self.compression == ChunkCompression::None && self.keys.is_none()
    }
}

impl fmt::Debug for TransformConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransformConfig")
            .field("compression", &self.compression)
            .field("keys", &self.keys)
            .field("chunk_size", &self.chunk_size)
            .field("scratch_dir", &self.scratch_dir)
            .field("fetch_run_bytes", &self.fetch_run_bytes)
            .field("copy_threads", &self.copy_threads)
            .field("header_cache_entries", &self.header_cache_entries)
            .field("custom_metadata_max_bytes", &self.custom_metadata_max_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn compression_specs() {
        assert_eq!(
            "none".parse::<ChunkCompression>().unwrap(),
            ChunkCompression::None
        );
        assert_eq!(
            "NONE".parse::<ChunkCompression>().unwrap(),
            ChunkCompression::None
        );
        for (spec, want) in [
            ("", "expected `none`"),
            ("lz4", "expected `none`"),
            ("none:3", "no level"),
            ("zstd:", "must be a number"),
            ("zstd:x", "must be a number"),
            ("zstd:0", "1..=22"),
            ("zstd:23", "1..=22"),
            ("zstd:-1", "1..=22"),
        ] {
            let e = spec.parse::<ChunkCompression>().unwrap_err();
            assert!(e.to_string().contains(want), "{spec}: {e}");
            assert!(e.to_string().contains(&format!("{spec:?}")), "{spec}: {e}");
        }
        if cfg!(feature = "zstd") {
            assert_eq!(
                "zstd".parse::<ChunkCompression>().unwrap(),
                ChunkCompression::Zstd { level: 3 }
            );
            assert_eq!(
                "zstd:22".parse::<ChunkCompression>().unwrap(),
                ChunkCompression::Zstd { level: 22 }
            );
            let c = "Zstd:1".parse::<ChunkCompression>().unwrap();
            assert_eq!(c.to_string().parse::<ChunkCompression>().unwrap(), c);
        } else {
            let e = "zstd".parse::<ChunkCompression>().unwrap_err();
            assert!(e.to_string().contains("feature `zstd`"), "{e}");
        }
    }

    #[test]
    fn chunk_size_limits() {
        let refused = |bytes: u32| {
            let r = TransformConfig::new().with_chunk_size(bytes);
            assert!(
                matches!(&r, Err(TransformError::InvalidConfig { reason })
                    if *reason == format!("chunk size {bytes} is outside 1024..=67108864 bytes")),
                "{bytes}: {:?}",
                r.err()
            );
        };
        refused(1023);
        assert!(TransformConfig::new().with_chunk_size(1024).is_ok());
        assert!(TransformConfig::new().with_chunk_size(64 << 20).is_ok());
        refused((64 << 20) + 1);
    }

    #[test]
    fn from_options_reads_the_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        std::fs::write(&key, [9u8; 32]).unwrap();
        let r = TransformConfig::from_options(None, Some(&key));
        if cfg!(feature = "encryption") {
            let c = r.unwrap();
            assert!(c.encrypts());
            assert!(!c.is_passthrough());
            assert!(!format!("{c:?}").contains("9, 9"));
        } else {
            assert!(r.unwrap_err().to_string().contains("feature `encryption`"));
        }
        let e = TransformConfig::from_options(None, Some(&dir.path().join("nope"))).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
