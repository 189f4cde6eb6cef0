//! [`S3Config`]: where the remote tier lives and how the client talks to it.

use std::fmt;
use std::time::Duration;

use krabka_remote_storage::{RemoteStorageError, layout};

/// One mebibyte.
const MIB: u64 = 1024 * 1024;

/// The smallest part S3 accepts for every part of a multipart upload but the last.
pub const MIN_PART_SIZE: u64 = 5 * MIB;

/// The largest part S3 accepts.
pub const MAX_PART_SIZE: u64 = 5 * 1024 * MIB;

/// The most parts one multipart upload may have.
pub const MAX_PARTS: u64 = 10_000;
/// S3's limit on the length of an object key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// The longest [`S3Config::prefix`], in bytes: with the `/` after it and the longest key of the
/// shared layout ([`layout::MAX_RELATIVE_KEY_LEN`]) it stays within [`MAX_KEY_LEN`].
pub const MAX_PREFIX_LEN: usize = MAX_KEY_LEN - 1 - layout::MAX_RELATIVE_KEY_LEN;

/// How the client authenticates.
///
/// `Debug` never prints the secret key or the session token.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum S3Credentials {
    /// The standard AWS chain: environment, shared config/credentials files, web identity,
    /// ECS and EC2 instance metadata. Needs the `default-credentials` feature (on by default).
    #[default]
    DefaultChain,
    /// A fixed access key pair (and optional session token).
    Static {
        /// The access key id (not secret; shown in `Debug`).
        access_key_id: String,
        /// The secret access key (never shown).
        secret_access_key: String,
        /// An optional session token (never shown).
        session_token: Option<String>,
    },
}

impl S3Credentials {
    /// Static credentials without a session token.
    pub fn static_keys(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        Self::Static {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DefaultChain => f.write_str("DefaultChain"),
            Self::Static {
                access_key_id,
                session_token,
                ..
            } => f
                .debug_struct("Static")
                .field("access_key_id", access_key_id)
                .field("secret_access_key", &"<redacted>")
                .field(
                    "session_token",
                    &session_token.as_ref().map(|_| "<redacted>"),
                )
                .finish(),
        }
    }
}

/// Configuration of [`S3RemoteStorage`](crate::S3RemoteStorage).
///
/// Build one with [`S3Config::new`] and the `with_*` methods, or read it from the environment
/// with [`S3Config::from_env`]. [`S3Config::validate`] (called by
/// [`S3RemoteStorage::new`](crate::S3RemoteStorage::new)) enforces the minimums below.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct S3Config {
    /// The bucket holding the remote tier. No default; must not be empty.
    pub bucket: String,
    /// Key prefix under which the segment layout lives, without leading or trailing `/`
    /// (one is added). Default: empty (keys start at the bucket root). At most
    /// [`MAX_PREFIX_LEN`] bytes, so every key stays within S3's 1,024-byte limit.
    pub prefix: String,
    /// Signing region. Default `us-east-1`; must not be empty (S3-compatible stores accept any
    /// value unless configured otherwise).
    pub region: String,
    /// Endpoint URL of an S3-compatible store, e.g. `http://127.0.0.1:7480`. Default: `None`
    /// (AWS S3 for the region).
    pub endpoint_url: Option<String>,
    /// Address buckets by path (`endpoint/bucket/key`) instead of virtual host. Default `false`;
    /// [`with_endpoint`](Self::with_endpoint) turns it on, as most S3-compatible stores need.
    pub force_path_style: bool,
    /// Credentials. Default: [`S3Credentials::DefaultChain`].
    pub credentials: S3Credentials,
    /// Files of at least this many bytes go up as a multipart upload, whose parts go up in
    /// parallel; smaller ones as one PutObject. Default 8 MiB (so a 16 MiB segment goes up as
    /// two parts at once); minimum [`MIN_PART_SIZE`] (5 MiB).
    pub multipart_threshold: u64,
    /// Size of each multipart part (the last may be smaller). Default 8 MiB; minimum
    /// [`MIN_PART_SIZE`] (5 MiB), maximum [`MAX_PART_SIZE`] (5 GiB). Raised automatically
    /// when a file would need more than [`MAX_PARTS`] parts.
    pub part_size: u64,
    /// Requests carrying data in flight at once within one copy: the parts of a multipart
    /// upload and the PutObjects of the segment's other files (indexes) share this bound.
    /// Memory in flight is at most `upload_concurrency × max(part_size, multipart_threshold)`.
    /// Default 4; minimum 1.
    pub upload_concurrency: usize,
    /// Time to establish a TCP (and TLS) connection. Default 5 s; minimum 1 ms.
    pub connect_timeout: Duration,
    /// Time for one attempt of one request, from send to the whole response. Default 60 s;
    /// minimum 1 ms.
    pub attempt_timeout: Duration,
    /// Time for one request including all its retries. Default 300 s; minimum 1 ms.
    pub operation_timeout: Duration,
    /// Attempts per request (first try plus retries) of the SDK's standard retry policy, with
    /// exponential backoff for throttling, 5xx and timeouts. Default 3; minimum 1 (no retry).
    pub max_attempts: u32,
    /// Worker threads of the runtime the backend owns when not handed a
    /// [`tokio::runtime::Handle`]. Default 2; minimum 1.
    pub runtime_threads: usize,
    /// Most blocking-pool threads of that runtime (the SDK's name resolution and file reads run
    /// there; more such calls wait for one). Default 2; minimum 1. The backend's own threads
    /// are at most [`max_threads`](Self::max_threads).
    pub runtime_blocking_threads: usize,
}

impl S3Config {
    /// A configuration for `bucket` with every other field at its default.
    pub fn new(bucket: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            prefix: String::new(),
            region: "us-east-1".to_owned(),
            endpoint_url: None,
            force_path_style: false,
            credentials: S3Credentials::DefaultChain,
            multipart_threshold: 8 * MIB,
            part_size: 8 * MIB,
            upload_concurrency: 4,
            connect_timeout: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(60),
            operation_timeout: Duration::from_secs(300),
            max_attempts: 3,
            runtime_threads: 2,
            runtime_blocking_threads: 2,
        }
    }

    /// The most threads the backend starts when it owns its runtime (built with
    /// [`S3RemoteStorage::new`](crate::S3RemoteStorage::new)): `runtime_threads` workers plus
    /// `runtime_blocking_threads` blocking threads, whatever the number of calls in flight
    /// (none of its own with [`S3RemoteStorage::with_handle`](crate::S3RemoteStorage::with_handle)).
    /// A tiering service counts them in its thread bound through
    /// `ServiceConfig::backend_threads`.
    pub fn max_threads(&self) -> usize {
        self.runtime_threads + self.runtime_blocking_threads
    }

    /// Sets the owned runtime's worker and blocking threads ([`runtime_threads`](Self::runtime_threads),
    /// [`runtime_blocking_threads`](Self::runtime_blocking_threads)).
    #[must_use]
    pub fn with_runtime_threads(mut self, workers: usize, blocking: usize) -> Self {
        self.runtime_threads = workers;
        self.runtime_blocking_threads = blocking;
        self
    }

    /// Sets the key prefix (leading and trailing `/` are trimmed).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().trim_matches('/').to_owned();
        self
    }

    /// Sets the region.
    #[must_use]
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = region.into();
        self
    }

    /// Sets an S3-compatible endpoint and turns path-style addressing on.
    #[must_use]
    pub fn with_endpoint(mut self, endpoint_url: impl Into<String>) -> Self {
        self.endpoint_url = Some(endpoint_url.into());
        self.force_path_style = true;
        self
    }

    /// Sets the credentials.
    #[must_use]
    pub fn with_credentials(mut self, credentials: S3Credentials) -> Self {
        self.credentials = credentials;
        self
    }

    /// Sets the multipart threshold and part size.
    #[must_use]
    pub fn with_multipart(mut self, threshold: u64, part_size: u64) -> Self {
        self.multipart_threshold = threshold;
        self.part_size = part_size;
        self
    }

    /// Sets how many parts go up at once.
    #[must_use]
    pub fn with_upload_concurrency(mut self, n: usize) -> Self {
        self.upload_concurrency = n;
        self
    }

    /// Sets the attempts per request.
    #[must_use]
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Sets the connect, per-attempt and per-operation timeouts.
    #[must_use]
    pub fn with_timeouts(
        mut self,
        connect: Duration,
        attempt: Duration,
        operation: Duration,
    ) -> Self {
        self.connect_timeout = connect;
        self.attempt_timeout = attempt;
        self.operation_timeout = operation;
        self
    }

    /// Reads the configuration from the environment:
    ///
    /// | variable | field |
    /// | --- | --- |
    /// | `KRABKA_S3_BUCKET` (required) | [`bucket`](Self::bucket) |
    /// | `KRABKA_S3_PREFIX` | [`prefix`](Self::prefix) |
    /// | `AWS_REGION`, else `AWS_DEFAULT_REGION` | [`region`](Self::region) |
    /// | `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL` | [`endpoint_url`](Self::endpoint_url) (path style on) |
    /// | `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`) | static [`credentials`](Self::credentials); otherwise the default chain |
    /// | `AWS_MAX_ATTEMPTS` | [`max_attempts`](Self::max_attempts) |
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] when the bucket is missing or a value does not
    /// parse.
    pub fn from_env() -> Result<Self, RemoteStorageError> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// Like [`from_env`](Self::from_env) for a bucket and prefix the caller names (e.g. from
    /// an `s3://BUCKET/PREFIX` URL): everything else (region, endpoint, credentials, attempts)
    /// comes from the same `AWS_*` variables; `KRABKA_S3_BUCKET` and `KRABKA_S3_PREFIX` are not
    /// read.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] when `bucket` is empty or a value does not parse.
    pub fn from_env_for(
        bucket: impl Into<String>,
        prefix: impl Into<String>,
    ) -> Result<Self, RemoteStorageError> {
        Self::from_lookup_for(bucket.into(), prefix.into(), |name| {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        })
    }

    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, RemoteStorageError> {
        let bucket = get("KRABKA_S3_BUCKET")
            .ok_or_else(|| RemoteStorageError::invalid_argument("KRABKA_S3_BUCKET is not set"))?;
        let prefix = get("KRABKA_S3_PREFIX").unwrap_or_default();
        Self::from_lookup_for(bucket, prefix, get)
    }

    fn from_lookup_for(
        bucket: String,
        prefix: String,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, RemoteStorageError> {
        if bucket.is_empty() {
            return Err(RemoteStorageError::invalid_argument(
                "S3 bucket name is empty",
            ));
        }
        let mut config = Self::new(bucket).with_prefix(prefix);
        if let Some(region) = get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION")) {
            config.region = region;
        }
        if let Some(endpoint) = get("AWS_ENDPOINT_URL_S3").or_else(|| get("AWS_ENDPOINT_URL")) {
            config = config.with_endpoint(endpoint);
        }
        if let (Some(access_key_id), Some(secret_access_key)) =
            (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"))
        {
            config.credentials = S3Credentials::Static {
                access_key_id,
                secret_access_key,
                session_token: get("AWS_SESSION_TOKEN"),
            };
        }
        if let Some(attempts) = get("AWS_MAX_ATTEMPTS") {
            config.max_attempts = attempts.parse().map_err(|_| {
                RemoteStorageError::invalid_argument(format!(
                    "AWS_MAX_ATTEMPTS `{attempts}` is not a positive integer"
                ))
            })?;
        }
        Ok(config)
    }

    /// Checks every documented minimum.
    ///
    /// # Errors
    /// [`RemoteStorageError::InvalidArgument`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), RemoteStorageError> {
        let bad = |m: String| Err(RemoteStorageError::invalid_argument(m));
        if self.bucket.is_empty() {
            return bad("S3 bucket name is empty".into());
        }
        if self.region.is_empty() {
            return bad("S3 region is empty".into());
        }
        if self.prefix.len() > MAX_PREFIX_LEN {
            return bad(format!(
                "S3 key prefix is {} bytes, over {MAX_PREFIX_LEN}: with the longest layout key \
                 ({} bytes) the object keys would exceed S3's {MAX_KEY_LEN}-byte limit",
                self.prefix.len(),
                layout::MAX_RELATIVE_KEY_LEN
            ));
        }
        if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&self.part_size) {
            return bad(format!(
                "part_size {} is outside {MIN_PART_SIZE}..={MAX_PART_SIZE}",
                self.part_size
            ));
        }
        if self.multipart_threshold < MIN_PART_SIZE {
            return bad(format!(
                "multipart_threshold {} is below {MIN_PART_SIZE}",
                self.multipart_threshold
            ));
        }
        if self.upload_concurrency == 0
            || self.max_attempts == 0
            || self.runtime_threads == 0
            || self.runtime_blocking_threads == 0
        {
            return bad("upload_concurrency, max_attempts, runtime_threads and \
                 runtime_blocking_threads must be at least 1"
                .into());
        }
        for (name, t) in [
            ("connect_timeout", self.connect_timeout),
            ("attempt_timeout", self.attempt_timeout),
            ("operation_timeout", self.operation_timeout),
        ] {
            if t < Duration::from_millis(1) {
                return bad(format!("{name} must be at least 1 ms"));
            }
        }
        Ok(())
    }

    /// The object key of a layout path (see [`krabka_remote_storage::layout`]).
    pub(crate) fn key(&self, relative: &str) -> String {
        if self.prefix.is_empty() {
            relative.to_owned()
        } else {
            format!("{}/{relative}", self.prefix)
        }
    }

    /// The endpoint as shown in errors.
    pub(crate) fn endpoint_display(&self) -> String {
        self.endpoint_url
            .clone()
            .unwrap_or_else(|| format!("AWS S3 ({})", self.region))
    }

    /// The part size used for a file of `len` bytes: the configured one, raised so the upload
    /// needs at most [`MAX_PARTS`] parts.
    pub(crate) fn effective_part_size(&self, len: u64) -> u64 {
        self.part_size.max(len.div_ceil(MAX_PARTS))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashMap;

    /// The message of `r`, which must be an [`RemoteStorageError::InvalidArgument`].
    fn invalid_argument<T: std::fmt::Debug>(r: Result<T, RemoteStorageError>) -> String {
        match r {
            Err(RemoteStorageError::InvalidArgument { message }) => message,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let c = S3Config::new("b").with_credentials(S3Credentials::Static {
            access_key_id: "AKIDVISIBLE".into(),
            secret_access_key: "very-secret-value".into(),
            session_token: Some("session-secret".into()),
        });
        let shown = format!("{c:?} {c:#?}");
        assert!(shown.contains("AKIDVISIBLE"));
        assert!(!shown.contains("very-secret-value"));
        assert!(!shown.contains("session-secret"));
    }

    #[test]
    fn from_env_reads_aws_and_krabka_variables() {
        let vars: HashMap<&str, &str> = [
            ("KRABKA_S3_BUCKET", "tier"),
            ("KRABKA_S3_PREFIX", "/cluster-a/"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
            ("AWS_ACCESS_KEY_ID", "ak"),
            ("AWS_SECRET_ACCESS_KEY", "sk"),
            ("AWS_MAX_ATTEMPTS", "5"),
        ]
        .into_iter()
        .collect();
        let c = S3Config::from_lookup(|k| vars.get(k).map(|v| (*v).to_owned())).unwrap();
        assert_eq!(c.bucket, "tier");
        assert_eq!(c.prefix, "cluster-a");
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(c.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(c.force_path_style);
        assert_eq!(c.credentials, S3Credentials::static_keys("ak", "sk"));
        assert_eq!(c.max_attempts, 5);
        assert_eq!(c.key("a/b.log"), "cluster-a/a/b.log");
        c.validate().unwrap();
    }

    #[test]
    fn from_env_without_bucket_or_with_bad_number_is_an_error() {
        assert_eq!(
            invalid_argument(S3Config::from_lookup(|_| None)),
            "KRABKA_S3_BUCKET is not set"
        );
        let bad = |k: &str| match k {
            "KRABKA_S3_BUCKET" => Some("b".to_owned()),
            "AWS_MAX_ATTEMPTS" => Some("many".to_owned()),
            _ => None,
        };
        assert_eq!(
            invalid_argument(S3Config::from_lookup(bad)),
            "AWS_MAX_ATTEMPTS `many` is not a positive integer"
        );
    }

    #[test]
    fn from_env_for_takes_bucket_and_prefix_from_the_caller() {
        let vars: HashMap<&str, &str> = [
            ("KRABKA_S3_BUCKET", "ignored-bucket"),
            ("KRABKA_S3_PREFIX", "ignored-prefix"),
            ("AWS_REGION", "eu-central-1"),
            ("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:7480"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ACCESS_KEY_ID", "ak"),
            ("AWS_SECRET_ACCESS_KEY", "sk"),
            ("AWS_SESSION_TOKEN", "tok"),
        ]
        .into_iter()
        .collect();
        let get = |k: &str| vars.get(k).map(|v| (*v).to_owned());
        let c = S3Config::from_lookup_for("tier".into(), "/a/b/".into(), get).unwrap();
        assert_eq!(c.bucket, "tier");
        assert_eq!(c.prefix, "a/b");
        assert_eq!(c.region, "eu-central-1");
        assert_eq!(c.endpoint_url.as_deref(), Some("http://127.0.0.1:7480"));
        assert!(c.force_path_style);
        assert_eq!(
            c.credentials,
            S3Credentials::Static {
                access_key_id: "ak".into(),
                secret_access_key: "sk".into(),
                session_token: Some("tok".into()),
            }
        );
        // Nothing set: defaults, the default chain, an empty prefix.
        let bare = S3Config::from_lookup_for("tier".into(), String::new(), |_| None).unwrap();
        assert_eq!(bare, S3Config::new("tier"));
        assert_eq!(
            invalid_argument(S3Config::from_lookup_for(
                String::new(),
                String::new(),
                |_| None
            )),
            "S3 bucket name is empty"
        );
        // The public entry point takes anything string-like.
        assert_eq!(
            invalid_argument(S3Config::from_env_for("", "p")),
            "S3 bucket name is empty"
        );
    }

    #[test]
    fn minimums_are_enforced() {
        assert!(S3Config::new("b").validate().is_ok());
        assert_eq!(
            invalid_argument(S3Config::new("").validate()),
            "S3 bucket name is empty"
        );
        let small_part =
            invalid_argument(S3Config::new("b").with_multipart(16 * MIB, MIB).validate());
        assert!(
            small_part.starts_with(&format!("part_size {MIB} is outside")),
            "{small_part}"
        );
        let small_threshold =
            invalid_argument(S3Config::new("b").with_multipart(MIB, 8 * MIB).validate());
        assert!(
            small_threshold.starts_with(&format!("multipart_threshold {MIB} is below")),
            "{small_threshold}"
        );
        let at_least_one = "upload_concurrency, max_attempts, runtime_threads and \
             runtime_blocking_threads must be at least 1";
        assert_eq!(
            invalid_argument(S3Config::new("b").with_upload_concurrency(0).validate()),
            at_least_one
        );
        assert_eq!(
            invalid_argument(S3Config::new("b").with_max_attempts(0).validate()),
            at_least_one
        );
        assert_eq!(
            invalid_argument(S3Config::new("b").with_runtime_threads(2, 0).validate()),
            at_least_one
        );
        assert_eq!(S3Config::new("b").max_threads(), 4);
        assert_eq!(
            S3Config::new("b").with_runtime_threads(3, 5).max_threads(),
            8
        );
        let longest = "p".repeat(MAX_PREFIX_LEN);
        assert!(S3Config::new("b").with_prefix(&*longest).validate().is_ok());
        let err = invalid_argument(
            S3Config::new("b")
                .with_prefix(format!("{longest}q"))
                .validate(),
        );
        assert!(err.starts_with("S3 key prefix is"), "{err}");
    }

    #[test]
    fn huge_files_get_bigger_parts() {
        let c = S3Config::new("b");
        assert_eq!(c.effective_part_size(MIB), c.part_size);
        let len = 200 * 1024 * MIB;
        assert!(len.div_ceil(c.effective_part_size(len)) <= MAX_PARTS);
    }
}
