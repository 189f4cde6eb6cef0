//! A transforming layer over any krabka [`RemoteStorageManager`]: segments are split into
//! fixed-size chunks, each compressed (zstd, feature `zstd`) and/or encrypted (AES-256-GCM,
//! feature `encryption`) on its own, with a chunk table stored alongside so that a ranged fetch
//! downloads and decodes only the chunks it needs.
//!
//! - [`Transforming`] — the decorator: `Transforming::new(inner, config)` is itself a
//!   `RemoteStorageManager`; untransformed segments already in a bucket pass through it.
//! - [`TransformConfig`] — what new segments get: [`ChunkCompression`] (parses `none`, `zstd`,
//!   `zstd:LEVEL`), encryption keys, chunk size, limits. [`TransformConfig::from_options`]
//!   builds it from the CLI's `--compression` and `--encryption-key-file`.
//! - [`KeyProvider`] / [`KeyRing`] / [`MasterKey`] — master keys by [`KeyId`], from files
//!   (32 raw bytes or 64 hex digits; any number of them or a directory: [`KeyRing::load`]) or
//!   the environment; old keys keep old segments readable.
//! - [`TransformError`] — one error enum naming the segment and object; it reaches SPI callers
//!   as the source of a `RemoteStorageError::Backend` ([`TransformError::find`]).
//!
//! Layout (details in `docs/format.md`, "Transformed segments"): every stored object of a
//! transformed segment starts with the same **transform header** (transform flags, segment identity,
//! wrapped data key, chunk table, index table, GMAC, CRC); the `.log` object continues with the
//! chunks, each index object with its transformed body. The copy's custom metadata records the
//! header's length and digest, the sizes and (encrypted) the master key's id, so a cold ranged
//! read is one small request for the header (or none, when an index was fetched first) plus one
//! request for the chunks.
//!
//! # Platform
//! Unix only, like the rest of the krabka workspace, which is built and tested on Unix alone.
//!
//! ```
//! use std::sync::Arc;
//! use krabka_remote_storage::testkit::InMemoryRemoteStorage;
//! use krabka_remote_transform::{Transforming, TransformConfig};
//!
//! # fn main() -> Result<(), krabka_remote_transform::TransformError> {
//! let mut config = TransformConfig::new().with_chunk_size(4 << 20)?;
//! # #[cfg(feature = "zstd")]
//! # { config = config.with_compression("zstd:3".parse()?); }
//! let store = Transforming::new(Arc::new(InMemoryRemoteStorage::new()), config);
//! # let _ = store;
//! # Ok(())
//! # }
//! ```

mod cache;
mod codec;
mod config;
mod copy;
#[cfg(feature = "encryption")]
mod crypto;
#[cfg(not(feature = "encryption"))]
#[path = "crypto_stub.rs"]
mod crypto;
mod error;
mod format;
mod key_id;
mod keyfile;
mod keys;
mod scratch;
mod transforming;

pub use config::{
    ChunkCompression, DEFAULT_CHUNK_SIZE, DEFAULT_FETCH_RUN_BYTES, DEFAULT_HEADER_CACHE_ENTRIES,
    DEFAULT_ZSTD_LEVEL, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, TransformConfig,
};
pub use error::TransformError;
pub use keyfile::{MAX_KEY_DIR_ENTRIES, MAX_KEY_FILE_LEN};
pub use keys::{KeyId, KeyProvider, KeyRing, MASTER_KEY_LEN, MasterKey};
pub use transforming::{TransformedSegmentInfo, Transforming};

#[doc(no_inline)]
pub use krabka_remote_storage::RemoteStorageManager;
