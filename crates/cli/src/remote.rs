//! The remote tier named on the command line (`fs://PATH`, `s3://BUCKET/PREFIX`), the metadata
//! that says which segments are remote, and the topic a log is tiered under.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use krabka_remote_storage::metadata::{
    DurableRemoteLogMetadataManager, RemoteLogMetadataManager, TornEventCut,
};
use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_remote_storage::{RemoteStorageManager, TopicIdPartition, Uuid};

use crate::args::RemoteArgs;
use crate::error::{CliError, Result};

/// Name of the directory, inside a tiered log's directory, holding the durable record of its
/// remote segments (itself a small krabka log).
pub const METADATA_DIR: &str = "remote-metadata";

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

/// Connects to the remote tier.
///
/// # Errors
/// When the directory cannot be created, or the bucket cannot be reached (S3).
pub fn open(
    spec: &RemoteSpec,
    args: &RemoteArgs,
) -> Result<Arc<krabka_remote_transform::Transforming>> {
    let config = krabka_remote_transform::TransformConfig::from_options(
        args.compression.as_deref(),
        args.encryption_key_file.as_deref(),
    )
    .map_err(|e| {
        CliError::new(e.to_string())
            .hint("--compression takes none, zstd or zstd:1..=22; the key file holds 32 raw bytes or 64 hex characters")
    })?;
    let inner = open_backend(spec, args.endpoint.as_deref())?;
    // Always through the transforming layer: with no flags it copies segments as they are and
    // still reads the compressed or encrypted ones a bucket may hold (each records its
    // transform).
    Ok(Arc::new(krabka_remote_transform::Transforming::new(
        inner, config,
    )))
}

/// The backend itself, without the transforming layer.
fn open_backend(
    spec: &RemoteSpec,
    endpoint: Option<&str>,
) -> Result<Arc<dyn RemoteStorageManager>> {
    match spec {
        RemoteSpec::Fs(root) => {
            let store = krabka_tiering::fs::FsRemoteStorage::new(root.clone()).map_err(|e| {
                CliError::at("cannot use remote directory", root, e)
                    .hint("check that the path is a writable directory")
            })?;
            Ok(Arc::new(store))
        }
        RemoteSpec::S3 { bucket, prefix } => open_s3(bucket, prefix, endpoint),
    }
}

/// Connects to the remote tier for recovery: listing, reading and deleting objects.
///
/// # Errors
/// As [`open`].
pub fn open_lister(
    spec: &RemoteSpec,
    endpoint: Option<&str>,
) -> Result<Arc<dyn RemoteSegmentLister>> {
    match spec {
        RemoteSpec::Fs(root) => {
            if !root.is_dir() {
                return Err(CliError::new(format!(
                    "remote directory {} does not exist",
                    root.display()
                ))
                .hint("pass the fs:// directory the log was tiered to"));
            }
            let store = krabka_tiering::fs::FsRemoteStorage::new(root.clone())
                .map_err(|e| CliError::at("cannot use remote directory", root, e))?;
            Ok(Arc::new(store))
        }
        RemoteSpec::S3 { bucket, prefix } => open_s3_lister(bucket, prefix, endpoint),
    }
}

#[cfg(feature = "s3")]
fn open_s3_lister(
    bucket: &str,
    prefix: &str,
    endpoint: Option<&str>,
) -> Result<Arc<dyn RemoteSegmentLister>> {
    Ok(Arc::new(s3_store(bucket, prefix, endpoint)?))
}

/// Connects to `s3://bucket/prefix` with the settings of the standard AWS environment (region,
/// endpoint, credentials, attempts); `endpoint` overrides the environment's.
#[cfg(feature = "s3")]
fn s3_store(
    bucket: &str,
    prefix: &str,
    endpoint: Option<&str>,
) -> Result<krabka_tiering::s3::S3RemoteStorage> {
    use krabka_tiering::s3::{S3Config, S3RemoteStorage};
    let mut config = S3Config::from_env_for(bucket, prefix).map_err(|e| {
        CliError::new(format!("cannot configure s3://{bucket}/{prefix}: {e}")).hint(
            "check the AWS_* environment variables (AWS_MAX_ATTEMPTS must be a positive integer)",
        )
    })?;
    if let Some(endpoint) = endpoint {
        config = config.with_endpoint(endpoint);
    }
    S3RemoteStorage::new(config).map_err(|e| s3_open_error(bucket, prefix, e))
}

#[cfg(not(feature = "s3"))]
fn open_s3_lister(
    bucket: &str,
    prefix: &str,
    endpoint: Option<&str>,
) -> Result<Arc<dyn RemoteSegmentLister>> {
    // Without S3 support this always fails, with the same advice as every other command.
    match open_s3(bucket, prefix, endpoint) {
        Err(e) => Err(e),
        Ok(_) => Err(CliError::new(format!(
            "s3://{bucket}/{prefix}: this krabka was built without S3 support"
        ))),
    }
}

#[cfg(feature = "s3")]
fn open_s3(
    bucket: &str,
    prefix: &str,
    endpoint: Option<&str>,
) -> Result<Arc<dyn RemoteStorageManager>> {
    Ok(Arc::new(s3_store(bucket, prefix, endpoint)?))
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
) -> Result<Arc<dyn RemoteStorageManager>> {
    Err(CliError::new(format!(
        "s3://{bucket}/{prefix}: this krabka was built without S3 support"
    ))
    .hint("rebuild with `--features s3` (cargo run --release -p krabka-cli --features s3 -- ...)"))
}

/// Opens the durable record of a log's remote segments, kept in `log_dir/remote-metadata`.
///
/// A torn last event that opening cut (an append a crash cut short, never acknowledged) is
/// printed on stderr like a [`RecoveryReport`](krabka_storage::RecoveryReport) line.
///
/// # Errors
/// When it cannot be opened or is corrupt.
pub fn open_metadata(log_dir: &Path) -> Result<Arc<dyn RemoteLogMetadataManager>> {
    let dir = log_dir.join(METADATA_DIR);
    let rlmm = DurableRemoteLogMetadataManager::open(&dir).map_err(|e| {
        CliError::at("cannot open remote metadata", &dir, e)
            .hint("check the directory; it records which segments are remote")
    })?;
    if let Some(cut) = rlmm.torn_event_cut() {
        crate::output::note(format_args!("{}", describe_torn_event_cut(cut)));
    }
    Ok(Arc::new(rlmm))
}

/// The line printed for a torn last event the metadata store cut on open.
pub fn describe_torn_event_cut(cut: &TornEventCut) -> String {
    let saved = match &cut.saved_to {
        Some(to) => format!("; the bytes are kept in {}", to.display()),
        None => String::new(),
    };
    format!(
        "recovery: remote metadata: cut a torn last event of {} bytes from {} at byte {} ({}){saved}",
        cut.bytes,
        cut.path.display(),
        cut.position,
        cut.reason
    )
}

/// Name of the file, in a tiered log's directory, naming the topic it is tiered under.
pub const TOPIC_FILE: &str = "topic";
/// First line of [`TOPIC_FILE`].
const TOPIC_MAGIC: &str = "krabka-topic 1";

/// CRC-32 (IEEE) of `bytes`: the checksum of [`TOPIC_FILE`].
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The contents of [`TOPIC_FILE`] for `topic`: name, id and partition, then a CRC-32 of them.
fn topic_file_text(topic: &TopicIdPartition) -> String {
    let body = format!(
        "{TOPIC_MAGIC}\nname {}\nid {}\npartition {}\n",
        topic.topic(),
        topic.topic_id(),
        topic.partition()
    );
    let crc = crc32(body.as_bytes());
    format!("{body}crc32 {crc:08x}\n")
}

/// Parses the contents of [`TOPIC_FILE`]; `Err` says what is wrong.
fn parse_topic_file(text: &str) -> std::result::Result<TopicIdPartition, String> {
    let at = text
        .rfind("crc32 ")
        .ok_or_else(|| "it has no checksum line".to_owned())?;
    let (body, crc_line) = text.split_at(at);
    let stored = crc_line
        .strip_prefix("crc32 ")
        .and_then(|c| c.strip_suffix('\n'))
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or_else(|| "its checksum line is unreadable".to_owned())?;
    if crc32(body.as_bytes()) != stored {
        return Err("its checksum does not match its contents".to_owned());
    }
    let mut lines = body.lines();
    if lines.next() != Some(TOPIC_MAGIC) {
        return Err(format!("it does not start with `{TOPIC_MAGIC}`"));
    }
    let mut field = |key: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(key))
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_owned)
            .ok_or_else(|| format!("its `{key}` line is missing"))
    };
    let name = field("name")?;
    let id = field("id")?;
    let partition = field("partition")?;
    let id = Uuid::parse_str(&id).map_err(|e| format!("its id `{id}` is not a UUID: {e}"))?;
    let partition = partition
        .parse::<i32>()
        .map_err(|e| format!("its partition `{partition}` is not a number: {e}"))?;
    let topic = TopicIdPartition::new(id, name, partition);
    topic
        .validate()
        .map_err(|e| format!("it names an invalid topic: {e}"))?;
    Ok(topic)
}

/// The topic recorded in `log_dir`'s [`TOPIC_FILE`]; `None` when the log has none (it was
/// never tiered, or was tiered before the file existed).
///
/// # Errors
/// When the file cannot be read or is damaged.
pub fn read_topic_file(log_dir: &Path) -> Result<Option<TopicIdPartition>> {
    let path = log_dir.join(TOPIC_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CliError::at("cannot read", &path, e)
                .hint("check that you may read the log directory"));
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    parse_topic_file(&text).map(Some).map_err(|reason| {
        CliError::new(format!(
            "damaged topic file {}: {reason}; it names the topic the log is tiered under",
            path.display()
        ))
        .hint(format!(
            "restore {} from a copy of the log directory; without it the remote segments of \
             the log cannot be found",
            path.display()
        ))
    })
}

/// Durably records `topic` in `log_dir`'s [`TOPIC_FILE`] (a temporary file, fsynced, renamed
/// over it, and the directory fsynced).
///
/// # Errors
/// When the file cannot be written.
pub fn write_topic_file(log_dir: &Path, topic: &TopicIdPartition) -> Result<()> {
    let path = log_dir.join(TOPIC_FILE);
    let tmp = log_dir.join(format!("{TOPIC_FILE}.tmp"));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, topic_file_text(topic).as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(log_dir)?.sync_all()
    })();
    written.map_err(|e| {
        CliError::at("cannot write", &path, e)
            .hint("check that the log directory is writable and not full")
    })
}

/// The topic of a log tiered for the first time: named after its directory (as
/// [`topic_for`]), with a fresh random id, so that two logs whose directories share a name
/// never share a topic on a remote. It is recorded in [`TOPIC_FILE`] and kept from then on,
/// whatever the directory is called later.
pub fn new_topic(log_dir: &Path) -> TopicIdPartition {
    let derived = topic_for(log_dir);
    TopicIdPartition::new(Uuid::new_v4(), derived.topic(), derived.partition())
}

/// The topic derived from a log directory's name: that name (made a valid topic name) and an
/// id derived from it. Logs tiered before [`TOPIC_FILE`] existed were tiered under this topic
/// (and still are, until the file records it); a new log only takes its name (see
/// [`new_topic`]).
pub fn topic_for(log_dir: &Path) -> TopicIdPartition {
    let name: String = log_dir
        .canonicalize()
        .unwrap_or_else(|_| log_dir.to_path_buf())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    let name = if name.is_empty() || name == "." || name == ".." {
        "krabka".to_owned()
    } else {
        name
    };
    // FNV-1a over the name, twice with different offsets: a stable 128-bit id.
    let fnv = |offset: u64| {
        name.bytes().fold(offset, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    };
    let id = Uuid::from_u64_pair(fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4));
    TopicIdPartition::new(id, name, 0)
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
        for bad in ["s3://", "s3:///x", "fs://", "gs://b", ""] {
            assert!(RemoteSpec::parse(bad).is_err(), "{bad}");
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

    #[test]
    fn the_topic_file_round_trips_and_refuses_any_changed_byte() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(matches!(read_topic_file(dir.path()), Ok(None)));
        let topic = new_topic(&dir.path().join("my log"));
        assert_eq!(topic.topic(), "my_log");
        assert_ne!(
            topic.topic_id(),
            topic_for(&dir.path().join("my log")).topic_id()
        );
        write_topic_file(dir.path(), &topic).expect("write");
        let back = read_topic_file(dir.path()).expect("read");
        assert_eq!(back, Some(topic.clone()));
        let path = dir.path().join(TOPIC_FILE);
        let good = std::fs::read(&path).expect("read back");
        for i in 0..good.len() {
            let mut bad = good.clone();
            if let Some(b) = bad.get_mut(i) {
                *b ^= 0x01;
            }
            std::fs::write(&path, &bad).expect("write bad");
            let e = read_topic_file(dir.path()).expect_err("a changed byte is refused");
            assert!(e.to_string().contains("damaged topic file"), "{e}");
        }
        assert!(parse_topic_file("").is_err());
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn a_directory_always_gets_the_same_valid_topic() {
        let a = topic_for(Path::new("/tmp/does-not-exist/my log"));
        let b = topic_for(Path::new("/tmp/does-not-exist/my log"));
        assert_eq!(a, b);
        assert_eq!(a.topic(), "my_log");
        assert!(a.validate().is_ok());
        assert_ne!(a, topic_for(Path::new("/x/other")));
        assert_eq!(topic_for(Path::new("/")).topic(), "krabka");
    }
}
