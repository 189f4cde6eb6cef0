//! S3 backend of the krabka [`RemoteStorageManager`](krabka_remote_storage::RemoteStorageManager)
//! SPI on aws-sdk-s3: any S3-compatible store (AWS S3, MinIO, Ceph RGW, Garage, R2) becomes the
//! remote tier.
//!
//! - [`S3Config`] — bucket, prefix, region, endpoint, credentials, multipart, timeouts, retries;
//!   [`S3Config::from_env`] reads the standard `AWS_*` variables plus `KRABKA_S3_BUCKET` /
//!   `KRABKA_S3_PREFIX`. Secrets never show in `Debug`.
//! - [`S3RemoteStorage`] — the backend. Objects follow
//!   [`krabka_remote_storage::layout`] under the prefix. A copy uploads the segment's files at
//!   once, at most [`S3Config::upload_concurrency`] requests carrying data in flight: each file
//!   goes up as one PutObject below [`S3Config::multipart_threshold`], otherwise as a multipart
//!   upload (aborted on any error). Every request carries a Content-MD5 the store checks (its
//!   body is not also SHA-256-hashed for the signature: `UNSIGNED-PAYLOAD`), and
//!   every object is verified before the copy succeeds: the MD5-derived ETag of the upload's
//!   response is compared with the expected one, and when the store reports no such ETag
//!   (SSE-KMS, SSE-C, other stores) a HeadObject checks the size. The manifest goes up last.
//!   Fetches are one ranged GET, read into a buffer sized up front.
//!
//! - `test_server` (feature `test-server`) — an S3 server in-process on 127.0.0.1 for tests
//!   and benchmarks.
//!
//! # Threads
//! The SPI is blocking, the SDK async. The backend owns a small runtime ([`S3RemoteStorage::new`])
//! or uses the caller's multi-thread runtime ([`S3RemoteStorage::with_handle`]). Calls work from
//! plain threads, from `spawn_blocking`, and from tasks of a multi-thread runtime (through
//! `block_in_place`); from a current-thread runtime they return
//! [`RemoteStorageError::InvalidArgument`](krabka_remote_storage::RemoteStorageError::InvalidArgument)
//! instead of blocking the only thread that runs it.
//!
//! # Platform
//! Unix only: multipart parts are read with positioned reads
//! (`std::os::unix::fs::FileExt`).
//!
//! # SDK types
//! No aws-sdk-s3 type is part of this crate's API: [`S3Config`] holds plain values, and SDK
//! failures arrive as [`RemoteStorageError`](krabka_remote_storage::RemoteStorageError) (the
//! SDK error only as its opaque `source`), so an SDK upgrade is not a breaking change here.
//!
//! ```no_run
//! use krabka_remote_s3::{S3Config, S3Credentials, S3RemoteStorage};
//!
//! let config = S3Config::new("tiered-log")
//!     .with_prefix("cluster-a")
//!     .with_endpoint("http://127.0.0.1:7480")
//!     .with_credentials(S3Credentials::static_keys("access", "secret"));
//! let storage = S3RemoteStorage::new(config)?;
//! # Ok::<(), krabka_remote_storage::RemoteStorageError>(())
//! ```

mod bridge;
mod config;
mod errors;
mod storage;
#[cfg(feature = "test-server")]
pub mod test_server;

pub use config::{
    MAX_KEY_LEN, MAX_PART_SIZE, MAX_PARTS, MAX_PREFIX_LEN, MIN_PART_SIZE, S3Config, S3Credentials,
};
pub use storage::S3RemoteStorage;
