//! The remote tier named on the command line (`fs://PATH`, `s3://BUCKET/PREFIX`): parsing
//! `--remote`, connecting to it (always through the transforming layer), and one line for a
//! bucket that cannot be used.

use std::path::PathBuf;
use std::sync::Arc;

use krabka_tiering::RemoteTier;

use crate::args::RemoteArgs;
use crate::error::{CliError, Result};

/// A remote tier as named by `--remote`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteSpec {
    /// A directory (`fs://PATH`, or a plain path).
    Fs(PathBuf),
    /// An S3 bucket and key prefix (`s3://BUCKET/PREFIX`).
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix, without leading or trailing `/` (may be empty).
        prefix: String,
    },
}

impl RemoteSpec {
    /// Parses `fs://PATH`, `s3://BUCKET[/PREFIX]` or a plain path (a filesystem remote).
    ///
    /// # Errors
    /// A message naming what is wrong with `s`.
    pub fn parse(s: &str) -> std::result::Result<RemoteSpec, String> {
        if let Some(path) = s.strip_prefix("fs://") {
            if path.is_empty() {
                return Err("names no directory: use fs://PATH".to_owned());
            }
            return Ok(RemoteSpec::Fs(PathBuf::from(path)));
        }
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err("names no bucket: use s3://BUCKET/PREFIX".to_owned());
            }
            return Ok(RemoteSpec::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
            });
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(format!(
                "scheme `{scheme}://` is not supported: use fs://PATH or s3://BUCKET/PREFIX"
            ));
        }
        if s.is_empty() {
            return Err("is empty: use fs://PATH or s3://BUCKET/PREFIX".to_owned());
        }
        Ok(RemoteSpec::Fs(PathBuf::from(s)))
    }

    /// How the summary names it.
    pub fn describe(&self) -> String {
        match self {
            RemoteSpec::Fs(p) => format!("fs://{}", p.display()),
            RemoteSpec::S3 { bucket, prefix } if prefix.is_empty() => format!("s3://{bucket}"),
            RemoteSpec::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
        }
    }
}

/// Reads `--remote`/`--endpoint`; `None` when no remote was given.
///
/// # Errors
/// A bad URL, or `--endpoint` with a filesystem remote.
pub fn spec(args: &RemoteArgs) -> Result<Option<RemoteSpec>> {
    let Some(url) = &args.remote else {
        if args.endpoint.is_some() {
            return Err(CliError::new("--endpoint needs an s3:// --remote"));
        }
        return Ok(None);
    };
    let spec =
        RemoteSpec::parse(url).map_err(|e| CliError::new(format!("--remote `{url}` {e}")))?;
    if args.endpoint.is_some() && matches!(spec, RemoteSpec::Fs(_)) {
        return Err(CliError::new(format!(
            "--endpoint applies to s3:// remotes, not {url}"
        )));
    }
    Ok(Some(spec))
}

/// What `--compression` and the key flags ask of the transforming layer: the compression of
/// new segments and the key ring (`--encryption-key-file`, any number of times, then the files
/// of `--encryption-key-dir`; the first key encrypts new segments, every key reads).
///
/// # Errors
/// A bad compression spec, or a key file or directory that cannot be used (naming it).
pub fn transform_config(args: &RemoteArgs) -> Result<krabka_remote_transform::TransformConfig> {
    let config =
        krabka_remote_transform::TransformConfig::from_options(args.compression.as_deref(), None)
            .map_err(|e| {
            CliError::new(e.to_string())
                .hint("--compression takes none, zstd or zstd:LEVEL (LEVEL 1..=22)")
        })?;
    let ring = krabka_remote_transform::KeyRing::load(
        &args.encryption_key_file,
        args.encryption_key_dir.as_deref(),
    )
    .map_err(|e| CliError::new(e.to_string()).hint(KEY_FILE_HINT))?;
    Ok(match ring {
        Some(ring) => config.with_encryption(Arc::new(ring)),
        None => config,
    })
}

/// What a key file or key directory must be.
pub const KEY_FILE_HINT: &str = "a key file is a regular file holding the 32-byte master key as \
     raw bytes or as 64 hex characters (--encryption-key-file PATH, any number of times); \
     --encryption-key-dir DIR reads every such file in DIR";

/// Wraps every segment call of a remote tier (e.g. to measure it).
pub type Wrap = Box<
    dyn FnOnce(
        Arc<dyn krabka_remote_storage::RemoteStorageManager>,
    ) -> Arc<dyn krabka_remote_storage::RemoteStorageManager>,
>;

/// Connects to the remote tier `spec` names, once: the SPI backend (through the transforming
/// layer `args` configure) and the ownership store. A filesystem remote must exist.
///
/// # Errors
/// When the directory does not exist, the bucket cannot be reached (S3), or the transform
/// options cannot be used ([`transform_config`]).
pub fn tier(spec: &RemoteSpec, args: &RemoteArgs) -> Result<RemoteTier> {
    let transform = transform_config(args)?;
    match spec {
        RemoteSpec::Fs(root) => RemoteTier::fs(root, false, transform).map_err(|e| {
            CliError::new(e.to_string()).hint("pass the fs:// directory the log was tiered to")
        }),
        RemoteSpec::S3 { bucket, prefix } => {
            open_s3(bucket, prefix, args.endpoint.as_deref(), spec, transform)
        }
    }
}

/// The advice for an error that a transformed segment caused (found anywhere in `e`'s chain
/// of sources): a key that was not given or does not fit, or a damaged object. `None` for any
/// other error. Such an error is about the object's bytes or the keys, never about reaching the
/// remote.
pub fn transform_hint(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    use krabka_remote_transform::TransformError as T;
    Some(match T::find(e)? {
        T::MissingKey { key_id, .. } => format!(
            "pass the master key of key id {key_id} too: --encryption-key-file PATH (any number \
             of times) or --encryption-key-dir DIR; reading needs every key the segments were \
             encrypted with"
        ),
        T::WrongKey { key_id, .. } => format!(
            "the key given under key id {key_id} does not open the segment: the segment's \
             header was tampered with, or another key claims that id (a custom key provider)"
        ),
        T::Corrupt { .. } | T::Authentication { .. } | T::TooLarge { .. } => {
            "the remote object named is damaged or was tampered with (its bytes fail their \
             checks; retrying reads the same bytes): restore it from a copy, or rebuild the log \
             with `krabka recover` into a new directory, which recovers every other segment and \
             reports this one's seqs as a hole"
                .to_owned()
        }
        T::Unsupported { .. } => {
            "the segment was written by a newer krabka or with a transform this build lacks: \
             read it with that build"
                .to_owned()
        }
        T::InvalidKey { .. } => KEY_FILE_HINT.to_owned(),
        _ => return None,
    })
}

/// Connects to `s3://bucket/prefix` with the settings of the standard AWS environment (region,
/// endpoint, credentials, attempts); `endpoint` overrides the environment's.
#[cfg(feature = "s3")]
fn open_s3(
    bucket: &str,
    prefix: &str,
    endpoint: Option<&str>,
    spec: &RemoteSpec,
    transform: krabka_remote_transform::TransformConfig,
) -> Result<RemoteTier> {
    use krabka_tiering::s3::{S3Config, S3RemoteStorage};
    let mut config = S3Config::from_env_for(bucket, prefix).map_err(|e| {
        CliError::new(format!("cannot configure s3://{bucket}/{prefix}: {e}")).hint(
            "check the AWS_* environment variables (AWS_MAX_ATTEMPTS must be a positive integer)",
        )
    })?;
    if let Some(endpoint) = endpoint {
        config = config.with_endpoint(endpoint);
    }
    let store = S3RemoteStorage::new(config).map_err(|e| s3_open_error(bucket, prefix, e))?;
    // The location a binding records is the URL as given: the endpoint is left out, since one
    // bucket may be reached by several names.
    Ok(RemoteTier::new(Arc::new(store), spec.describe(), transform))
}

/// The one line for a bucket that cannot be used: denied credentials, a missing bucket and an
/// endpoint that does not answer each get their own words and advice.
#[cfg(feature = "s3")]
fn s3_open_error(
    bucket: &str,
    prefix: &str,
    e: krabka_remote_storage::RemoteStorageError,
) -> CliError {
    use krabka_remote_storage::RemoteStorageError as E;
    let url = RemoteSpec::S3 {
        bucket: bucket.to_owned(),
        prefix: prefix.to_owned(),
    }
    .describe();
    match e {
        E::AccessDenied {
            endpoint, message, ..
        } => CliError::new(format!(
            "access denied to {url} by {endpoint}: the credentials were refused ({})",
            // The request (`HeadBucket of ...`); the SDK's words after it add nothing.
            brief(&message).split(": ").next().unwrap_or_default()
        ))
        .hint(format!(
            "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) and that \
             they may read and write bucket `{bucket}`"
        )),
        E::StoreUnavailable {
            endpoint, message, ..
        } => {
            let message = brief(&message);
            let unreachable = ["dispatch failure", "timeout", "timed out", "connect"]
                .iter()
                .any(|w| message.contains(w));
            let missing = ["NotFound", "NoSuchBucket", "does not exist"]
                .iter()
                .any(|w| message.contains(w));
            if unreachable {
                CliError::new(format!(
                    "cannot reach {endpoint} for {url} ({message})"
                ))
                .hint("check --endpoint / AWS_ENDPOINT_URL / AWS_REGION and that the store is running")
            } else if missing {
                CliError::new(format!(
                    "bucket `{bucket}` does not exist at {endpoint} ({url})"
                ))
                .hint("create it, or check the bucket name, AWS_REGION and --endpoint / AWS_ENDPOINT_URL")
            } else {
                CliError::new(format!("{url} at {endpoint} is not usable: {message}"))
                    .hint("check the bucket, AWS_REGION and --endpoint / AWS_ENDPOINT_URL")
            }
        }
        other => CliError::new(format!("cannot use {url}: {}", brief(&other.to_string()))).hint(
            "check the bucket exists, AWS_REGION / --endpoint, and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY",
        ),
    }
}

/// `message` without the debug dump the AWS SDK appends to its errors (` (ServiceError(...`,
/// ` (DispatchFailure(...`): what it says in words, which is what a user can act on.
pub fn brief(message: &str) -> &str {
    let mut from = 0;
    while let Some(i) = message[from..].find(" (") {
        let at = from + i;
        let rest = &message[at + 2..];
        let ident = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        if ident > 0
            && rest.starts_with(|c: char| c.is_ascii_uppercase())
            && rest[ident..].starts_with(['(', '{'])
        {
            return message[..at].trim_end();
        }
        from = at + 2;
    }
    message
}

#[cfg(not(feature = "s3"))]
fn open_s3(
    bucket: &str,
    prefix: &str,
    _endpoint: Option<&str>,
    _spec: &RemoteSpec,
    _transform: krabka_remote_transform::TransformConfig,
) -> Result<RemoteTier> {
    Err(CliError::new(format!(
        "s3://{bucket}/{prefix}: this krabka was built without S3 support"
    ))
    .hint("rebuild with `--features s3` (cargo run --release -p krabka-cli --features s3 -- ...)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_parse() {
        assert_eq!(
            RemoteSpec::parse("fs:///srv/r"),
            Ok(RemoteSpec::Fs(PathBuf::from("/srv/r")))
        );
        assert_eq!(
            RemoteSpec::parse("fs://rel/dir"),
            Ok(RemoteSpec::Fs(PathBuf::from("rel/dir")))
        );
        assert_eq!(
            RemoteSpec::parse("./r"),
            Ok(RemoteSpec::Fs(PathBuf::from("./r")))
        );
        assert_eq!(
            RemoteSpec::parse("s3://bucket/a/b/"),
            Ok(RemoteSpec::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            })
        );
        assert_eq!(
            RemoteSpec::parse("s3://bucket").map(|s| s.describe()),
            Ok("s3://bucket".to_owned())
        );
        for (bad, expected) in [
            ("s3://", "names no bucket: use s3://BUCKET/PREFIX"),
            ("s3:///x", "names no bucket: use s3://BUCKET/PREFIX"),
            ("fs://", "names no directory: use fs://PATH"),
            (
                "gs://b",
                "scheme `gs://` is not supported: use fs://PATH or s3://BUCKET/PREFIX",
            ),
            ("", "is empty: use fs://PATH or s3://BUCKET/PREFIX"),
        ] {
            assert_eq!(RemoteSpec::parse(bad), Err(expected.to_owned()), "{bad}");
        }
    }

    #[test]
    fn brief_drops_the_sdk_debug_dump_only() {
        assert_eq!(
            brief(
                "HeadBucket failed: service error: NotFound: NotFound (ServiceError(ServiceError { source: x }))"
            ),
            "HeadBucket failed: service error: NotFound: NotFound"
        );
        assert_eq!(
            brief(
                "dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111) (DispatchFailure(DispatchFailure { a }))"
            ),
            "dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(brief("plain (words) here"), "plain (words) here");
        assert_eq!(brief(""), "");
    }
}
