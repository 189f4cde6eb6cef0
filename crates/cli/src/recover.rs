//! `krabka recover`: rebuild a tiered log from its remote tier alone, after the local disk (the
//! log and its `remote-metadata` directory) is lost. See
//! `krabka_tiering::recovery` for the rules; this prints what it found.

use std::time::Instant;

use krabka_tiering::PartitionDir;
use krabka_tiering::partition::{PartitionQuery, RecoverOptions, TailRecovery};
use krabka_tiering::recovery::{LocalLogOutcome, Recovery};

use crate::args::RecoverArgs;
use crate::error::{CliError, Result};
use crate::human;
use crate::output::outln;
use crate::remote;

/// Runs `krabka recover`.
///
/// # Errors
/// No `--remote`, a remote that cannot be listed, a partition that cannot be chosen, a
/// directory in use or recording another partition, or a local write failure.
pub fn run(args: &RecoverArgs) -> Result<()> {
    let Some(spec) = remote::spec(&args.remote)? else {
        return Err(CliError::new("recover needs --remote").hint(
            "pass the remote the log was tiered to: --remote fs://PATH or s3://BUCKET/PREFIX",
        ));
    };
    let dir = &args.dir;
    let tier = remote::tier(&spec, &args.remote)?;
    let started = Instant::now();
    let options = RecoverOptions {
        partition: PartitionQuery {
            topic: args.topic.clone(),
            partition: args.partition,
            topic_id: args.topic_id,
        },
        concurrency: args.concurrency,
        clean_orphans: args.clean_orphans,
    };
    let recovered = PartitionDir::recover(dir, &tier, &options).map_err(|e| match e {
        // The metadata store could not be opened (another process holds it, or it is
        // damaged): worded as every command words it.
        krabka_tiering::Error::Metadata {
            operation: "open",
            source,
            ..
        } => crate::error::metadata_open(
            dir,
            &dir.join(krabka_tiering::partition::METADATA_DIR),
            krabka_tiering::metadata::MetadataError::find(&*source)
                .map_or_else(|| source.to_string(), ToString::to_string),
            "move the damaged directory aside; recover rebuilds it from the remote",
        ),
        e @ krabka_tiering::Error::Metadata { .. } => CliError::new(format!(
            "cannot recover {} from {}: {}",
            dir.display(),
            spec.describe(),
            remote::brief(&e.to_string())
        ))
        .hint("nothing was deleted; fix the cause and run recover again (it is safe to repeat)"),
        e => crate::tiered::tiering_error("cannot recover", dir, e),
    })?;
    print(
        &recovered.report,
        &recovered.tail,
        &spec.describe(),
        dir,
        started.elapsed(),
    )?;
    let missing = &recovered.missing_keys;
    if missing.is_empty() {
        return Ok(());
    }
    Err(CliError::new(format!(
        "{} segment(s) of {} are encrypted with key id {}, which {} not given: they are not in \
         the recovered log (listed as ignored above): their seqs are holes in it or lie outside \
         its range",
        recovered.missing_key_segments,
        spec.describe(),
        missing
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        if missing.len() == 1 { "was" } else { "were" }
    ))
    .hint(format!(
        "pass every key the segments were encrypted with (--encryption-key-file, any number \
         of times, or --encryption-key-dir), move {} aside and run recover again; nothing was \
         deleted",
        dir.display()
    )))
}

fn print(
    report: &Recovery,
    tail: &TailRecovery,
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
        for cause in report
            .causes
            .iter()
            .filter(|c| c.seqs.start() <= hole.end() && hole.start() <= c.seqs.end())
        {
            outln!("                    {}", cause.reason)?;
        }
    }
    if let Some(restored) = &tail.restored {
        outln!(
            "  tail            {} records restored from tail objects, seq {}..={}",
            human::count(tail.records),
            restored.start(),
            restored.end()
        )?;
    }
    // Seqs the writer used that no tier holds (its active segment never copied, a damaged
    // tail entry): the log continues after them, and reads name them.
    for (seqs, why) in tail.holes.iter().filter(|(seqs, _)| {
        !report
            .holes
            .iter()
            .any(|h| h.start() <= seqs.start() && seqs.end() <= h.end())
    }) {
        outln!(
            "  hole            seqs {}..={} are lost ({} records): {why}",
            seqs.start(),
            seqs.end(),
            human::count(seqs.end().saturating_sub(*seqs.start()).saturating_add(1))
        )?;
    }
    // The recovery started the local log after the segments; the tail may have moved it on.
    let after_tail = |seq: u64| {
        tail.holes
            .iter()
            .map(|(seqs, _)| seqs.end().saturating_add(1))
            .chain(tail.restored.iter().map(|r| r.end().saturating_add(1)))
            .fold(seq, u64::max)
    };
    match &report.local_log {
        LocalLogOutcome::StartedAt(seq) => {
            outln!(
                "  local log       {} continues at seq {}",
                dir.display(),
                after_tail(*seq)
            )?;
        }
        LocalLogOutcome::AlreadyAt(seq) => {
            outln!(
                "  local log       {} is empty and starts at seq {}",
                dir.display(),
                after_tail(*seq)
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
