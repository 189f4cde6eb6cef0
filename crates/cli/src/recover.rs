//! `krabka recover`: rebuild a tiered log from its remote tier alone, after the local disk (the
//! log and its `remote-metadata` directory) is lost. See
//! `krabka_tiering::recovery` for the rules; this prints what it found.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageError, TopicIdPartition};
use krabka_remote_transform::{KeyId, Transforming};
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::recovery::{
    LocalLogOutcome, RecoveryOptions, RecoveryReport, RemoteSegmentLister, find_partitions, recover,
};

use crate::args::RecoverArgs;
use crate::error::{CliError, Result};
use crate::human;
use crate::output::outln;
use crate::remote;
use crate::tiered::METADATA_DIR;
use crate::tiered::topic;

/// Runs `krabka recover`.
///
/// # Errors
/// No `--remote`, a remote that cannot be listed, a metadata directory that already records
/// other segments, or a local write failure.
pub fn run(args: &RecoverArgs) -> Result<()> {
    let Some(spec) = remote::spec(&args.remote)? else {
        return Err(CliError::new("recover needs --remote").hint(
            "pass the remote the log was tiered to: --remote fs://PATH or s3://BUCKET/PREFIX",
        ));
    };
    if args.concurrency == 0 {
        return Err(CliError::new("--concurrency must be at least 1"));
    }
    let dir = &args.dir;
    refuse_if_in_use(dir)?;
    let lister = remote::open_lister(&spec, args.remote.endpoint.as_deref())?;
    let tp = topic(args, &*lister, &spec.describe())?;
    std::fs::create_dir_all(dir).map_err(|e| CliError::at("cannot create", dir, e))?;
    let meta_dir = dir.join(METADATA_DIR);
    let rlmm = DurableRemoteLogMetadataManager::open(&meta_dir).map_err(|e| {
        crate::error::metadata_open(
            dir,
            &meta_dir,
            crate::tiered::metadata_failure(&e),
            "move the damaged directory aside; recover rebuilds it from the remote",
        )
    })?;
    let started = Instant::now();
    // Segments the transforming layer compressed or encrypted record their transform in the
    // stored objects, not in the manifests' metadata: it restores its own metadata before
    // recovery records them, and a segment it cannot open (a damaged transform header, a key
    // that was not given) is reported and left out, its seqs a hole.
    let transforming = remote::open(&spec, &args.remote)?;
    let missing_keys = Arc::new(Mutex::new(Vec::new()));
    let missing = Arc::clone(&missing_keys);
    let options = RecoveryOptions::default()
        .concurrency(args.concurrency)
        .clean_orphans(args.clean_orphans)
        .local_log_dir(dir)
        .bind_to(spec.location()?)
        .map_metadata(krabka_tiering::recovery::MapMetadata(Arc::new(move |m| {
            open_segment(&transforming, m, &missing)
        })));
    let report = recover(&*lister, &tp, &rlmm, &options).map_err(|e| {
        CliError::new(format!(
            "cannot recover {} from {}: {}",
            dir.display(),
            spec.describe(),
            remote::brief(&e.to_string())
        ))
        .hint("nothing was deleted; fix the cause and run recover again (it is safe to repeat)")
    })?;
    // Later `tier` and `read` runs find the topic here, as for a log tiered from this directory.
    topic::write_topic_file(dir, &tp)?;
    print(&report, &spec.describe(), dir, started.elapsed())?;
    drop(rlmm);
    let remote = spec.describe();
    check_readable(dir, spec, &args.remote, &report)?;
    let missing = missing_keys.lock().map(|m| m.clone()).unwrap_or_default();
    if missing.is_empty() {
        return Ok(());
    }
    let ids: std::collections::BTreeSet<String> = missing.iter().map(ToString::to_string).collect();
    Err(CliError::new(format!(
        "{} segment(s) of {remote} are encrypted with key id {}, which {} not given: they are \
         not in the recovered log (listed as ignored above): their seqs are holes in it or lie \
         outside its range",
        missing.len(),
        ids.iter().cloned().collect::<Vec<_>>().join(", "),
        if ids.len() == 1 { "was" } else { "were" }
    ))
    .hint(format!(
        "pass every key the segments were encrypted with (--encryption-key-file, any number \
         of times, or --encryption-key-dir), move {} aside and run recover again; nothing was \
         deleted",
        dir.display()
    )))
}

/// What recovery records for the segment a manifest describes (`m`): the transforming layer's
/// metadata ([`Transforming::recover_metadata`], which checks the transform header and, with
/// the key at hand, the key). A segment encrypted with a key that was not given cannot be
/// opened: its key id goes to `missing`, and recovery leaves it out, saying why.
pub(crate) fn open_segment(
    transforming: &Transforming,
    m: &RemoteLogSegmentMetadata,
    missing: &Mutex<Vec<KeyId>>,
) -> std::result::Result<RemoteLogSegmentMetadata, RemoteStorageError> {
    let recovered = transforming.recover_metadata(m)?;
    if let Some(id) = transforming.key_id(&recovered)?
        && !transforming.has_key(id)?
    {
        if let Ok(mut missing) = missing.lock() {
            missing.push(id);
        }
        return Err(RemoteStorageError::Backend {
            operation: "transform".to_owned(),
            location: m.remote_log_segment_id().to_string(),
            message: format!("encrypted with key id {id}, which was not given"),
            source: None,
        });
    }
    Ok(recovered)
}

/// Opens the recovered log read-only as `read --remote` would and reads its first record:
/// a recovery that leaves a log no read can open fails (exit 1) instead of reporting success.
fn check_readable(
    dir: &Path,
    spec: remote::RemoteSpec,
    remote_args: &crate::args::RemoteArgs,
    report: &RecoveryReport,
) -> Result<()> {
    let tiered = crate::tiered::open(
        dir,
        spec,
        remote_args,
        krabka_storage::Options::default(),
        krabka_tiering::TieringConfig {
            retention_ms: None,
            ..krabka_tiering::TieringConfig::default()
        },
        crate::tiered::Mode::Read,
    )
    .map_err(|e| e.prefix("recovered, but the log cannot be opened"))?;
    if let Some(range) = &report.seq_range {
        let first = *range.start();
        let read = tiered.log.read(first, 1).map_err(|e| {
            crate::tiered::tiering_error(
                &format!("recovered, but seq {first} cannot be read from"),
                dir,
                e,
            )
        })?;
        if read.first().map(|r| r.seq) != Some(first) {
            return Err(CliError::new(format!(
                "recovered {}, but a read from seq {first} returned {} records",
                dir.display(),
                read.len()
            )));
        }
    }
    tiered
        .log
        .close()
        .map_err(|e| crate::tiered::tiering_error("cannot close", dir, e))
}

/// The partition to recover: the one the log directory's topic file names, else the one
/// `--topic-id` names, else the only partition of the topic DIR's name gives found on the remote.
fn topic(
    args: &RecoverArgs,
    lister: &dyn RemoteSegmentLister,
    remote: &str,
) -> Result<TopicIdPartition> {
    let derived = topic::topic_for(&args.dir);
    let recorded = topic::read_topic_file(&args.dir)?;
    let listed = || {
        find_partitions(lister, derived.topic(), derived.partition()).map_err(|e| {
            CliError::new(format!(
                "cannot list the partitions on {remote}: {}",
                remote::brief(&e.to_string())
            ))
        })
    };
    if let Some(id) = args.topic_id {
        let asked = TopicIdPartition::new(id, derived.topic(), derived.partition());
        // Never rebind a directory that records another partition: its log would no longer
        // open under the identity it was written with.
        if let Some(recorded) = recorded.filter(|r| *r != asked) {
            return Err(CliError::new(format!(
                "{} records partition {recorded} (topic id {}), not topic id {id}",
                args.dir.display(),
                recorded.topic_id()
            ))
            .hint("recover another partition into a new directory, or drop --topic-id"));
        }
        let found = listed()?;
        if !found.contains(&asked) {
            return Err(CliError::new(format!(
                "no partition of topic `{}` (partition {}) with topic id {id} on {remote}{}",
                derived.topic(),
                derived.partition(),
                if found.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (found topic ids {})",
                        found
                            .iter()
                            .map(|t| t.topic_id().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ))
            .hint("check --topic-id and the directory name (the topic is named after it)"));
        }
        return Ok(asked);
    }
    if let Some(recorded) = recorded {
        return Ok(recorded);
    }
    let found = listed()?;
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CliError::new(format!(
            "no partition of topic `{}` (partition {}) on {remote}",
            derived.topic(),
            derived.partition()
        ))
        .hint("the topic is named after the log directory: use the directory name the log had, or pass --topic-id")),
        many => Err(CliError::new(format!(
            "{} partitions of topic `{}` on {remote}: {}",
            many.len(),
            derived.topic(),
            many.iter()
                .map(|t| t.topic_id().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .hint("pass the one to recover with --topic-id")),
    }
}

/// Refuses to run beside a process that holds the log directory (a running `tier` or
/// `produce`): recover rebuilds a log, it never joins a live one.
fn refuse_if_in_use(dir: &Path) -> Result<()> {
    match crate::error::held_lock(dir) {
        None => Ok(()),
        Some(lock) => Err(crate::error::in_use_by(
            dir,
            &lock,
            ": recover rebuilds a lost log and never runs beside a live one",
        )
        .hint(
            "nothing was changed; the log is live, not lost: there is nothing to recover here \
             (to rehearse a recovery, recover into another directory)",
        )),
    }
}

fn print(
    report: &RecoveryReport,
    remote: &str,
    dir: &std::path::Path,
    took: std::time::Duration,
) -> Result<()> {
    let tp = &report.partition;
    outln!(
        "krabka recover — {} partition {} (topic id {}) from {remote}",
        tp.topic(),
        tp.partition(),
        tp.topic_id()
    )?;
    outln!(
        "  listed          {} objects, read {} manifests in {}",
        human::count(report.objects_listed),
        human::count(report.manifests_read as u64),
        human::duration(took)
    )?;
    match &report.seq_range {
        Some(range) => outln!(
            "  recovered       {} segments, seq {}..={}, {}{}",
            human::count(report.segments as u64),
            range.start(),
            range.end(),
            human::bytes(report.bytes),
            if report.already_recorded > 0 {
                format!(" ({} already recorded)", report.already_recorded)
            } else {
                String::new()
            }
        )?,
        None => outln!("  recovered       no segments: no whole segment under this partition")?,
    }
    for hole in &report.holes {
        outln!(
            "  hole            seqs {}..={} are lost: no whole segment that can be opened holds \
             them ({} records; the segments on both sides are recovered)",
            hole.start(),
            hole.end(),
            human::count(hole.end().saturating_sub(*hole.start()).saturating_add(1))
        )?;
    }
    match &report.local_log {
        LocalLogOutcome::StartedAt(seq) => {
            outln!("  local log       {} continues at seq {seq}", dir.display())?;
        }
        LocalLogOutcome::AlreadyAt(seq) => {
            outln!(
                "  local log       {} is empty and starts at seq {seq}",
                dir.display()
            )?;
        }
        LocalLogOutcome::HoldsRecords { first, last } => outln!(
            "  local log       {} holds seq {first}..={last}; left as it is",
            dir.display()
        )?,
        _ => {}
    }
    if !report.rebuilt.is_empty() {
        outln!(
            "  rebuilt         {} segments whose manifest was missing, from their objects:",
            report.rebuilt.len()
        )?;
        for key in &report.rebuilt {
            outln!("    {key}")?;
        }
    }
    if report.ignored.is_empty() {
        outln!("  ignored         nothing")?;
    } else {
        outln!(
            "  ignored         {} objects (kept in place{}):",
            report.ignored.len(),
            if report.deleted.is_empty() {
                ""
            } else {
                " unless listed as deleted below"
            }
        )?;
        for i in &report.ignored {
            outln!("    {}: {}", i.key, i.reason)?;
        }
    }
    if !report.deleted.is_empty() {
        outln!(
            "  deleted         {} objects (--clean-orphans):",
            report.deleted.len()
        )?;
        for key in &report.deleted {
            outln!("    {key}")?;
        }
    }
    Ok(())
}
