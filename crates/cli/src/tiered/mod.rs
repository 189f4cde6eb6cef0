//! The tiered log every remote-aware command opens (`tier`, `read --remote`, `demo`): the
//! local log in `DIR`, the remote named by `--remote`, the durable metadata in
//! `DIR/remote-metadata`, and the topic recorded in `DIR/topic` ([`topic`]). Opening happens
//! here, in one place and one order: lock the local log, connect the remote, check the start,
//! open the metadata, settle the topic.

pub(crate) mod topic;

use std::path::Path;
use std::sync::Arc;

use krabka_remote_storage::{RemoteLogSegmentState, RemoteStorageManager, TopicIdPartition};
use krabka_storage::{Log, Options};
use krabka_tiering::metadata::{
    DurableRemoteLogMetadataManager, MetadataError, RemoteLogMetadataManager, TornEventCut,
};
use krabka_tiering::{RemoteOwnership, TieredLog, TieringConfig};

use crate::args::{RemoteArgs, RetentionArgs};
use crate::error::{CliError, Result};
use crate::remote::{self, RemoteSpec};

/// Name of the directory, inside a tiered log's directory, holding the durable record of its
/// remote segments (itself a small krabka log).
pub const METADATA_DIR: &str = "remote-metadata";

/// A tiered log and what the commands report about it.
pub struct Tiered {
    /// The log.
    pub log: TieredLog,
    /// Its remote segment metadata.
    pub metadata: Arc<dyn RemoteLogMetadataManager>,
    /// The topic it is tiered under.
    pub topic: TopicIdPartition,
    /// The remote, as named.
    pub remote: RemoteSpec,
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
        e @ E::Fenced { .. } => CliError::new(e.to_string()).hint(
            "another log took this partition over (a failover or a recovery elsewhere): that log \
             is the partition's writer now; this directory's records past its takeover seq are \
             not in the remote tier. Keep it aside for inspection; never tier it again",
        ),
        e @ E::WrongRemote { .. } => CliError::new(e.to_string()).hint(
            "pass the remote the log is bound to (see DIR/remote-binding); a log lives in one \
             remote tier, and tiering it to a second would split it between them",
        ),
        e @ E::WrongPartition { .. } => CliError::new(e.to_string())
            .hint("the directory records another topic or topic id: check DIR/topic"),
        e @ E::CopiedDirectory { .. } => CliError::new(e.to_string()).hint(format!(
            "if the original directory is gone for good, rebuild this log from the remote \
             tier into a new directory: `krabka recover NEWDIR --remote REMOTE` (records this \
             copy holds past the remote end are not in it; `krabka read {d}` shows them)"
        )),
        e @ E::RemoteHoldsPartition { .. } => CliError::new(e.to_string()).hint(format!(
            "to read or continue that log, rebuild it first: `krabka recover {d} --remote REMOTE`"
        )),
        e @ E::NotBound { .. } => CliError::new(e.to_string()).hint(
            "this directory is not the log that writes that partition: move it aside and \
             `krabka recover` the partition, or tier this log under another topic",
        ),
        e @ E::RemoteMovedOn { .. } => CliError::new(e.to_string()).hint(format!(
            "stop the other writer, move {d} aside and run `krabka recover` again"
        )),
        e @ E::Binding { .. } => CliError::new(e.to_string()).hint(
            "restore DIR/remote-binding from a copy of the log directory; it says which remote \
             and writer epoch the log belongs to",
        ),
        e @ E::Ownership { .. } if unsupported_format(&e) => {
            CliError::new(remote::brief(&e.to_string())).hint(
                "the partition's copies are in a segment format this build does not read (an \
                 older krabka's per-record frames): nothing was read or written; use the build \
                 that wrote it, or tier into a new topic",
            )
        }
        e @ E::RemoteNotAMessage { .. } => CliError::at(action, dir, remote::brief(&e.to_string()))
            .hint("not damage: the record (a tombstone, a null header value, a control or transactional batch) was stored as a raw batch and has no Message form; read it as a raw batch"),
        e @ E::Ownership { .. } => CliError::new(remote::brief(&e.to_string())).hint(
            "an ownership record of the remote tier is unreadable or damaged: a log that cannot \
             prove it is the partition's writer copies and deletes nothing. Check the object it \
             names",
        ),
        e @ E::CorruptRemote { .. } => CliError::at(action, dir, remote::brief(&e.to_string()))
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

/// Opens the tiered log at `log_dir`.
///
/// The local log is opened first: it takes the directory's lock, so while another process
/// (`krabka produce`, `krabka tier --watch`, ...) has the log open this fails with one clear
/// line saying the directory is in use, before the remote or the metadata are touched.
///
/// # Errors
/// When the log, the remote or the metadata cannot be opened.
pub fn open(
    log_dir: &Path,
    spec: RemoteSpec,
    remote_args: &RemoteArgs,
    options: Options,
    config: TieringConfig,
    mode: Mode,
) -> Result<Tiered> {
    let local = open_local(log_dir, options)?;
    refuse_missing_remote_of_bound_log(log_dir, &spec)?;
    let rsm = remote::open(&spec, remote_args)?;
    refuse_empty_log_over_remote_data(log_dir, &local, &spec, remote_args.endpoint.as_deref())?;
    with_remote(
        log_dir,
        local,
        spec,
        rsm,
        remote_args.endpoint.as_deref(),
        config,
        mode,
    )
}

/// Refuses, before the remote is connected (which creates a missing remote directory), a
/// filesystem remote that does not exist for a log bound to a remote: it cannot be the one the
/// log is bound to (a typo, a relative path from another working directory), and connecting
/// would leave an empty directory behind.
fn refuse_missing_remote_of_bound_log(log_dir: &Path, spec: &RemoteSpec) -> Result<()> {
    let RemoteSpec::Fs(path) = spec else {
        return Ok(());
    };
    if path.exists() {
        return Ok(());
    }
    let bound = krabka_tiering::ownership::binding::read(log_dir)
        .map_err(|e| tiering_error("cannot open tiered log", log_dir, e))?;
    match bound {
        Some(bound) => Err(tiering_error(
            "cannot open tiered log",
            log_dir,
            krabka_tiering::Error::WrongRemote {
                dir: log_dir.to_path_buf(),
                bound: bound.location,
                given: format!("{} (which does not exist)", spec.describe()),
            },
        )),
        None => Ok(()),
    }
}

/// Whether a command writes the partition (`tier`, `demo`: it claims or checks the writer
/// epoch) or only reads it (`read --remote`: the binding is checked, no epoch is touched).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Copies and deletes: the partition's one writer.
    Write,
    /// Reads only.
    Read,
}

/// Refuses an empty local log that was never tiered (no topic file, no metadata) when the
/// remote holds a partition of the topic its directory's name gives: that is a log whose disk
/// was lost, and opening it as a new one would read as empty (hiding the remote records) and
/// give it a new identity under which they are never found. `recover` rebuilds it instead.
fn refuse_empty_log_over_remote_data(
    log_dir: &Path,
    local: &Log,
    spec: &RemoteSpec,
    endpoint: Option<&str>,
) -> Result<()> {
    let never_tiered =
        topic::read_topic_file(log_dir)?.is_none() && !log_dir.join(METADATA_DIR).exists();
    let empty = local.next_seq() <= 1 && local.segments().iter().all(|s| s.size == 0);
    if !(never_tiered && empty) {
        return Ok(());
    }
    let derived = topic::topic_for(log_dir);
    let lister = remote::open_lister(spec, endpoint)?;
    let found =
        krabka_tiering::recovery::find_partitions(&*lister, derived.topic(), derived.partition())
            .map_err(|e| {
            CliError::new(format!(
                "cannot list the partitions on {}: {}",
                spec.describe(),
                remote::brief(&e.to_string())
            ))
        })?;
    if found.is_empty() {
        return Ok(());
    }
    let d = log_dir.display();
    Err(CliError::new(format!(
        "{d} holds no log, but {} holds partition {} of topic `{}` (topic id {}): \
         opening it here would start a new, empty log beside that one",
        spec.describe(),
        derived.partition(),
        derived.topic(),
        found
            .iter()
            .map(|t| t.topic_id().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .hint(format!(
        "to read or continue that log, rebuild it first: `krabka recover {d} --remote {}`",
        spec.describe()
    )))
}

/// Like [`open`] with the remote connected already: `demo` checks the remote before it creates
/// anything in its directory, so a refused key or a missing bucket leaves the directory as it
/// was and the same command can simply be run again.
///
/// # Errors
/// When the log or the metadata cannot be opened.
pub fn open_with_remote(
    log_dir: &Path,
    spec: RemoteSpec,
    rsm: Arc<dyn RemoteStorageManager>,
    endpoint: Option<&str>,
    options: Options,
    config: TieringConfig,
) -> Result<Tiered> {
    let local = open_local(log_dir, options)?;
    with_remote(log_dir, local, spec, rsm, endpoint, config, Mode::Write)
}

/// Checks `options` for tiering and opens (and locks) the local log.
fn open_local(log_dir: &Path, options: Options) -> Result<Log> {
    krabka_tiering::validate_log_options(&options)
        .map_err(|e| tiering_error("cannot open tiered log", log_dir, e))?;
    let log = Log::open(log_dir, options)
        .map_err(|e| crate::error::storage("cannot open log", log_dir, e))?;
    crate::error::print_recovery(log.recovery_report());
    Ok(log)
}

fn with_remote(
    log_dir: &Path,
    local: Log,
    spec: RemoteSpec,
    rsm: Arc<dyn RemoteStorageManager>,
    endpoint: Option<&str>,
    config: TieringConfig,
    mode: Mode,
) -> Result<Tiered> {
    let store = remote::open_lister(&spec, endpoint)?;
    let mut ownership = RemoteOwnership::new(store, spec.location()?);
    if mode == Mode::Read {
        ownership = ownership.reading();
    }
    let recorded = topic::read_topic_file(log_dir)?;
    let metadata_dir = log_dir.join(METADATA_DIR);
    if !metadata_dir.exists() {
        // Checked before the metadata store is created: a restored `remote-metadata/` must
        // not meet a new empty one.
        check_start_explained(log_dir, &local, None, recorded.is_some())?;
    }
    let tiered_before = metadata_dir.exists();
    let metadata = open_metadata(log_dir)?;
    let topic = match &recorded {
        Some(topic) => topic.clone(),
        // Tiered before the topic file existed: under the topic its name gave.
        None if tiered_before => topic::topic_for(log_dir),
        None => topic::new_topic(log_dir),
    };
    let known = metadata
        .list_remote_log_segments(&topic)
        .map_err(|e| CliError::new(format!("cannot list remote segments: {e}")))?;
    if known.is_empty() {
        check_start_explained(log_dir, &local, Some(&topic), recorded.is_some())?;
    }
    let log = TieredLog::new_owned(
        local,
        rsm,
        metadata.clone(),
        topic.clone(),
        config,
        &ownership,
    )
    .map_err(|e| tiering_error("cannot open tiered log", log_dir, e))?;
    if recorded.is_none() {
        topic::write_topic_file(log_dir, &topic)?;
    }
    Ok(Tiered {
        log,
        metadata,
        topic,
        remote: spec,
    })
}

/// Refuses a local log that starts above seq 1 when the metadata (`topic`'s segments, or no
/// metadata at all when `topic` is `None`) knows no remote segment and neither the whole-log
/// retention point nor a hole a repair or a recovery recorded explains the start. `krabka produce` never
/// drops a segment, so such a log lost its `remote-metadata/` (or, with no topic file, its
/// directory was renamed): tiering on would make the records below the start unreachable.
fn check_start_explained(
    log_dir: &Path,
    local: &Log,
    topic: Option<&TopicIdPartition>,
    topic_recorded: bool,
) -> Result<()> {
    let start = local
        .segments()
        .first()
        .map_or_else(|| local.next_seq(), |s| s.base_seq);
    if start <= 1 {
        return Ok(());
    }
    let Ok(retention_point) = krabka_tiering::read_retention_point(log_dir) else {
        // Unreadable: opening the tiered log names what is wrong with it.
        return Ok(());
    };
    let mut holes: Vec<_> = local.quarantined().into_iter().map(|(r, _)| r).collect();
    // Seqs a recovery found used but could not recover (unreadable: opening names it).
    holes.extend(krabka_tiering::read_lost_seqs(log_dir).ok().flatten());
    let mut covered = retention_point.max(1);
    while let Some(hole) = holes.iter().find(|h| h.contains(&covered)) {
        covered = hole.end().saturating_add(1);
    }
    if covered >= start {
        return Ok(());
    }
    let d = log_dir.display();
    let metadata = log_dir.join(METADATA_DIR);
    let m = metadata.display();
    let what = match topic {
        None => format!("{m}/ is missing"),
        Some(topic) if topic_recorded => format!(
            "{m}/ records no remote segment of its topic `{}` ({})",
            topic.topic(),
            log_dir.join(topic::TOPIC_FILE).display()
        ),
        Some(topic) => format!(
            "{m}/ records no remote segment of topic `{}` (the topic is named after the \
             directory, for a log tiered before {} existed: was the directory renamed?)",
            topic.topic(),
            log_dir.join(topic::TOPIC_FILE).display()
        ),
    };
    Err(CliError::new(format!(
        "cannot open tiered log {d}: its local segments start at seq {start}, but {what}, and no \
         retention point explains the start: seqs 1..={} would be unreachable; nothing was changed",
        start - 1
    ))
    .hint(if topic.is_some() && !topic_recorded {
        format!(
            "rename the directory back to the name it was tiered under, or restore {m}/ from a \
             copy of the log directory"
        )
    } else {
        format!(
            "restore {m}/ from a copy of the log directory (it records which segments are remote)"
        )
    }))
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
        crate::error::metadata_open(
            log_dir,
            &dir,
            metadata_failure(&e),
            "check the directory; it records which segments are remote",
        )
    })?;
    if let Some(cut) = rlmm.torn_event_cut() {
        crate::output::note(format_args!("{}", describe_torn_event_cut(cut)));
    }
    Ok(Arc::new(rlmm))
}

/// Why the durable metadata cannot be used: the damaged file's own message when its files are
/// damaged ([`MetadataError`]), else the error.
pub fn metadata_failure(e: &krabka_remote_storage::RemoteStorageError) -> String {
    MetadataError::find(e).map_or_else(|| e.to_string(), ToString::to_string)
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

/// Which seqs live where.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Finished remote segments: `(start, end)` seqs.
    pub remote: Vec<(u64, u64)>,
    /// Local segments: `(base, last)` seqs (the active one last, possibly empty).
    pub local: Vec<(u64, u64)>,
}

impl Tiered {
    /// Where every seq lives now.
    ///
    /// # Errors
    /// When the metadata cannot be listed.
    pub fn placement(&self) -> Result<Placement> {
        let remote = self
            .metadata
            .list_remote_log_segments(&self.topic)
            .map_err(|e| CliError::new(format!("cannot list remote segments: {e}")))?
            .into_iter()
            .filter(|m| m.state() == RemoteLogSegmentState::CopySegmentFinished)
            .map(|m| (m.start_offset(), m.end_offset()))
            .collect();
        let local = self
            .log
            .log()
            .segments()
            .into_iter()
            .filter(|s| s.last_seq >= s.base_seq)
            .map(|s| (s.base_seq, s.last_seq))
            .collect();
        Ok(Placement { remote, local })
    }
}

impl Placement {
    /// Lines such as `seq 1..=180000  remote only (171 segments)`.
    pub fn describe(&self) -> Vec<String> {
        let local_first = self.local.first().map(|s| s.0);
        let remote_last = self.remote.last().map(|s| s.1);
        let mut lines = Vec::new();
        let mut range = |what: &str, segs: &[(u64, u64)]| {
            if let (Some(a), Some(b)) = (segs.first(), segs.last()) {
                lines.push(format!(
                    "seq {:>9}..={:<9} {what} ({} segment{})",
                    a.0,
                    b.1,
                    segs.len(),
                    if segs.len() == 1 { "" } else { "s" }
                ));
            }
        };
        let remote_only: Vec<_> = self
            .remote
            .iter()
            .copied()
            .filter(|s| local_first.is_none_or(|f| s.1 < f))
            .collect();
        let both: Vec<_> = self
            .local
            .iter()
            .copied()
            .filter(|s| remote_last.is_some_and(|r| s.1 <= r))
            .collect();
        let local_only: Vec<_> = self
            .local
            .iter()
            .copied()
            .filter(|s| remote_last.is_none_or(|r| s.1 > r))
            .collect();
        range("remote only", &remote_only);
        range("local and remote", &both);
        range("local only (not yet copied, or active)", &local_only);
        lines
    }
}

/// Whether `e` is an ownership record naming a segment format this build does not read.
fn unsupported_format(e: &krabka_tiering::Error) -> bool {
    matches!(e, krabka_tiering::Error::Ownership { source, .. }
        if matches!(**source, krabka_remote_storage::RemoteStorageError::UnsupportedFormat { .. }))
}
