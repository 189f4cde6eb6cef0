//! The tiered log every remote-aware command opens (`tier`, `read --remote`, `demo`): a
//! [`PartitionDir`] over the remote named by `--remote`. The library makes every check; this
//! connects the remote, prints what opening found, and words the refusals.

use std::path::Path;

use krabka_storage::Options;
use krabka_tiering::partition::{Access, OpenOptions, Placement};
use krabka_tiering::{PartitionDir, TailWriter, TieringConfig};

use crate::args::{RemoteArgs, RetentionArgs};
use crate::error::{CliError, Result};
use crate::remote::{self, RemoteSpec};

/// A tiered log and the remote it was opened over.
pub struct Tiered {
    /// The partition directory.
    pub part: PartitionDir,
    /// The remote, as named.
    pub remote: RemoteSpec,
    /// The remote, connected.
    pub tier: krabka_tiering::RemoteTier,
    /// The writer of the log's tail objects, when the configuration has a tail and the log was
    /// opened as the writer.
    pub tail: Option<TailWriter>,
}

/// A tiering error on `dir` as one line (a log another process holds open says so; damage
/// names the file, byte and seqs and what to do).
pub fn tiering_error(action: &str, dir: &Path, e: krabka_tiering::Error) -> CliError {
    use krabka_tiering::Error as E;
    let d = dir.display();
    if !matches!(e, E::Storage { .. })
        && let Some(cause) = crate::error::os_error_hint(&e.to_string())
    {
        // A full disk, a read-only filesystem, no descriptors left: the cause, not the file.
        return CliError::at(action, dir, remote::brief(&e.to_string())).hint(cause);
    }
    match e {
        E::Storage { source, .. } => crate::error::storage(action, dir, *source),
        e @ E::DamagedSegment { .. } => CliError::at(action, dir, e).hint(format!(
            "`krabka verify {d}` names every problem; `krabka repair {d}` moves damaged bytes \
             aside (it deletes nothing)"
        )),
        e @ E::LocalLogMismatch { .. } => CliError::at(action, dir, e),
        e @ E::Ownership(krabka_tiering::OwnershipError::Fenced { .. }) => CliError::new(e.to_string()).hint(
            "another log took this partition over (a failover or a recovery elsewhere): that log \
             is the partition's writer now; this directory's records past its takeover seq are \
             not in the remote tier. Keep it aside for inspection; never tier it again",
        ),
        e @ E::Ownership(krabka_tiering::OwnershipError::WrongRemote { .. }) => CliError::new(e.to_string()).hint(
            "pass the remote the log is bound to (see DIR/remote-binding); a log lives in one \
             remote tier, and tiering it to a second would split it between them",
        ),
        e @ E::Ownership(krabka_tiering::OwnershipError::WrongPartition { .. }) => CliError::new(e.to_string())
            .hint("the directory records another topic or topic id: check DIR/topic"),
        e @ E::Ownership(krabka_tiering::OwnershipError::CopiedDirectory { .. }) => CliError::new(e.to_string()).hint(format!(
            "if the original directory is gone for good, rebuild this log from the remote \
             tier into a new directory: `krabka recover NEWDIR --remote REMOTE` (records this \
             copy holds past the remote end are not in it; `krabka read {d}` shows them)"
        )),
        e @ E::Ownership(krabka_tiering::OwnershipError::RemoteHoldsPartition { .. }) => CliError::new(e.to_string()).hint(format!(
            "to read or continue that log, rebuild it first: `krabka recover {d} --remote REMOTE`"
        )),
        e @ E::Ownership(krabka_tiering::OwnershipError::NotBound { .. }) => CliError::new(e.to_string()).hint(
            "this directory is not the log that writes that partition: move it aside and \
             `krabka recover` the partition, or tier this log under another topic",
        ),
        e @ E::Ownership(krabka_tiering::OwnershipError::RemoteMovedOn { .. }) => CliError::new(e.to_string()).hint(format!(
            "stop the other writer, move {d} aside and run `krabka recover` again"
        )),
        e @ E::Ownership(krabka_tiering::OwnershipError::Binding { .. }) => CliError::new(e.to_string()).hint(
            "restore DIR/remote-binding from a copy of the log directory; it says which remote \
             and writer epoch the log belongs to",
        ),
        e @ E::Ownership(krabka_tiering::OwnershipError::Record { .. }) if unsupported_format(&e) => {
            CliError::new(remote::brief(&e.to_string())).hint(
                "the partition's copies are in a segment format this build does not read (an \
                 older krabka's per-record frames): nothing was read or written; use the build \
                 that wrote it, or tier into a new topic",
            )
        }
        E::Ownership(krabka_tiering::OwnershipError::StartUnexplained {
            dir: ref d2,
            renamed,
            ..
        }) => {
            let m = d2.join(krabka_tiering::partition::METADATA_DIR);
            let hint = if renamed {
                format!(
                    "rename the directory back to the name it was tiered under, or restore {}/ \
                     from a copy of the log directory",
                    m.display()
                )
            } else {
                format!(
                    "restore {}/ from a copy of the log directory (it records which segments \
                     are remote)",
                    m.display()
                )
            };
            CliError::new(e.to_string()).hint(hint)
        }
        E::Metadata {
            operation: "open",
            source,
            ..
        } => {
            let meta_dir = dir.join(krabka_tiering::partition::METADATA_DIR);
            let why = krabka_tiering::metadata::MetadataError::find(&*source)
                .map_or_else(|| source.to_string(), ToString::to_string);
            crate::error::metadata_open(
                dir,
                &meta_dir,
                why,
                "check the directory; it records which segments are remote",
            )
        }
        e @ E::Ownership(krabka_tiering::OwnershipError::TopicFile { .. }) => CliError::new(e.to_string()).hint(
            "restore DIR/topic from a copy of the log directory; without it the remote \
             segments of the log cannot be found",
        ),
        E::Ownership(krabka_tiering::OwnershipError::InUse { dir: ref d2, ref lock }) => crate::error::in_use_by(
            d2,
            lock,
            ": recover rebuilds a lost log and never runs beside a live one",
        )
        .hint(
            "nothing was changed; the log is live, not lost: there is nothing to recover here \
             (to rehearse a recovery, recover into another directory)",
        ),
        e @ E::Ownership(krabka_tiering::OwnershipError::TopicMismatch { .. }) => CliError::new(e.to_string())
            .hint("recover another partition into a new directory, or drop --topic/--partition/--topic-id"),
        e @ E::Ownership(krabka_tiering::OwnershipError::PartitionNotFound { by_name: true, .. }) => CliError::new(e.to_string()).hint(
            "the topic is named after the log directory: use the directory name the log had, \
             or pass --topic NAME (and --partition N) or --topic-id UUID",
        ),
        e @ E::Ownership(krabka_tiering::OwnershipError::PartitionNotFound { .. }) => CliError::new(e.to_string())
            .hint("check --topic, --partition and --topic-id against the remote"),
        e @ E::Ownership(krabka_tiering::OwnershipError::PartitionAmbiguous { .. }) => {
            CliError::new(e.to_string()).hint("pass the one to recover with --topic-id")
        }
        e @ E::Ownership(krabka_tiering::OwnershipError::RemoteUnusable { .. }) => CliError::new(remote::brief(&e.to_string()))
            .hint("pass the remote the log was tiered to: fs://PATH or s3://BUCKET/PREFIX"),
        e @ E::Read(krabka_tiering::ReadError::RemoteNotAMessage { .. }) => CliError::at(action, dir, remote::brief(&e.to_string()))
            .hint("not damage: the record (a tombstone, a null header value, a control or transactional batch) was stored as a raw batch and has no Message form; read it as a raw batch"),
        e @ E::Ownership(krabka_tiering::OwnershipError::Record { .. }) => CliError::new(remote::brief(&e.to_string())).hint(
            "an ownership record of the remote tier is unreadable or damaged: a log that cannot \
             prove it is the partition's writer copies and deletes nothing. Check the object it \
             names",
        ),
        e @ E::Tail(krabka_tiering::TailError::Unsupported(_)) => CliError::at(action, dir, e).hint(
            "tail objects are not encrypted: leave out the tail flags and --durability bucket \
             with encryption keys (closed segments are still copied encrypted by `krabka tier`)",
        ),
        e @ E::Tail(krabka_tiering::TailError::NotAcknowledged { .. }) => {
            CliError::at(action, dir, remote::brief(&e.to_string())).hint(
                "the remote did not take the records in time: check that it is reachable and \
                 writable (or give a longer --ack-deadline); the records are in the local log",
            )
        }
        e @ E::Tail(
            krabka_tiering::TailError::Gap { .. } | krabka_tiering::TailError::Contradiction { .. },
        ) => CliError::at(action, dir, remote::brief(&e.to_string())).hint(format!(
            "the records acknowledged in the remote's tail cannot continue this log: move {d} \
             aside and rebuild the partition with `krabka recover NEWDIR --remote REMOTE`, which \
             names what is lost"
        )),
        e @ E::Tail(_) => CliError::at(action, dir, remote::brief(&e.to_string())).hint(
            "the tail objects in the remote could not be written or read: check that the remote \
             is reachable and writable, then run the command again",
        ),
        e @ E::Read(krabka_tiering::ReadError::CorruptRemote { .. }) => CliError::at(action, dir, remote::brief(&e.to_string()))
            .hint("the remote copy is damaged; restore it, or re-copy it from a local segment if one is left"),
        e => {
            // A transformed object's damage or a missing key is no matter of reachability.
            let hint = remote::transform_hint(&e).unwrap_or_else(|| {
                "check the log directory and that the remote is reachable".to_owned()
            });
            CliError::at(action, dir, remote::brief(&e.to_string())).hint(hint)
        }
    }
}

/// The CLI's tiering configuration: the library defaults, except that the CLI deletes remote
/// data by age only when told (`--retention-ms`; else `retention_ms: None`), and the
/// `--local-retention-bytes`, `--cache-bytes` and `--retention-bytes` flags.
pub fn config(retention: &RetentionArgs) -> TieringConfig {
    let defaults = TieringConfig::default();
    TieringConfig {
        local_retention_bytes: retention
            .local_retention_bytes
            .or(defaults.local_retention_bytes),
        retention_bytes: retention.retention_bytes,
        retention_ms: retention.retention_ms,
        cache_bytes: retention.cache_bytes.unwrap_or(defaults.cache_bytes),
        ..defaults
    }
}

/// Opens the tiered log at `log_dir` over the remote `spec` names ([`PartitionDir::open`]),
/// printing what opening found (a recovery of the local log, a torn metadata event cut).
/// `wrap` wraps every segment call of the remote (e.g. to measure it).
///
/// # Errors
/// When the remote cannot be connected or the library refuses the directory.
pub fn open(
    log_dir: &Path,
    spec: RemoteSpec,
    remote_args: &RemoteArgs,
    log: Options,
    config: TieringConfig,
    access: Access,
    wrap: Option<remote::Wrap>,
) -> Result<Tiered> {
    let mut tier = tier_for_dir(&spec, remote_args, log_dir)?;
    if let Some(wrap) = wrap {
        tier = tier.wrapped(wrap);
    }
    // The log's tail writer is started here, not by the library, so that the command can
    // flush it (`tier` makes sure every record is in the bucket before it exits).
    let tail = match &config.tail {
        Some(tail) if access == Access::Owner => Some(
            TailWriter::start(tier.store(), tail.clone())
                .map_err(|e| tiering_error("cannot start the tail writer of", log_dir, e))?,
        ),
        _ => None,
    };
    let options = OpenOptions {
        log,
        config,
        tail_writer: tail.clone(),
        ..OpenOptions::new(access)
    };
    let part = PartitionDir::open(log_dir, &tier, options).map_err(|e| match e {
        e @ krabka_tiering::Error::Ownership(
            krabka_tiering::OwnershipError::RemoteHoldsPartition { .. },
        ) => CliError::new(e.to_string()).hint(format!(
            "to read or continue that log, rebuild it first: `krabka recover {} --remote {}`",
            log_dir.display(),
            spec.describe()
        )),
        e => tiering_error("cannot open tiered log", log_dir, e),
    })?;
    crate::output::print_recovery(part.recovery_report());
    if let Some(cut) = part.torn_event_cut() {
        crate::output::note(format_args!("{}", describe_torn_event_cut(cut)));
    }
    if let Some(found) = part.torn_event_found() {
        crate::output::note(format_args!(
            "recovery: remote metadata: found a torn last event of {} bytes in {} at byte {} \
             ({}); left in place (a read changes nothing): the log's writer cuts it at its next \
             open",
            found.bytes,
            found.path.display(),
            found.position,
            found.reason
        ));
    }
    Ok(Tiered {
        part,
        remote: spec,
        tier,
        tail,
    })
}

/// [`remote::tier`] for the log directory `dir`: a missing filesystem remote is created, unless the
/// log is bound to a remote (the library refuses it then, creating nothing).
///
/// # Errors
/// As [`remote::tier`].
fn tier_for_dir(
    spec: &RemoteSpec,
    args: &RemoteArgs,
    dir: &Path,
) -> Result<krabka_tiering::RemoteTier> {
    match spec {
        RemoteSpec::Fs(root) => {
            let transform = remote::transform_config(args)?;
            // A missing remote directory is created even for a reader (as `tier` would), so
            // that a log never tiered reads across an empty remote tier.
            PartitionDir::fs_remote(dir, root, Access::Owner, transform).map_err(|e| match e {
                e @ krabka_tiering::Error::Ownership(
                    krabka_tiering::OwnershipError::WrongRemote { .. },
                ) => tiering_error("cannot open tiered log", dir, e),
                e => {
                    CliError::new(e.to_string()).hint("check that the path is a writable directory")
                }
            })
        }
        RemoteSpec::S3 { .. } => remote::tier(spec, args),
    }
}

/// The line printed for a torn last event the metadata store cut on open.
pub fn describe_torn_event_cut(cut: &krabka_tiering::metadata::TornEventCut) -> String {
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

impl Tiered {
    /// Where every seq lives now.
    ///
    /// # Errors
    /// When the metadata cannot be listed.
    pub fn placement(&self) -> Result<Placement> {
        self.part
            .placement()
            .map_err(|e| CliError::new(format!("cannot list remote segments: {e}")))
    }
}

/// Lines such as `seq 1..=180000  remote only (171 segments)`.
pub fn describe_placement(placement: &Placement) -> Vec<String> {
    let [remote_only, both, local_only] = placement.split();
    let mut lines = Vec::new();
    for (what, segs) in [
        ("remote only", remote_only),
        ("local and remote", both),
        ("local only (not yet copied, or active)", local_only),
    ] {
        if let (Some(a), Some(b)) = (segs.first(), segs.last()) {
            lines.push(format!(
                "seq {:>9}..={:<9} {what} ({} segment{})",
                a.0,
                b.1,
                segs.len(),
                if segs.len() == 1 { "" } else { "s" }
            ));
        }
    }
    lines
}

/// Whether `e` is an ownership record naming a segment format this build does not read.
fn unsupported_format(e: &krabka_tiering::Error) -> bool {
    matches!(e, krabka_tiering::Error::Ownership(krabka_tiering::OwnershipError::Record { source, .. })
        if matches!(**source, krabka_remote_storage::RemoteStorageError::UnsupportedFormat { .. }))
}
