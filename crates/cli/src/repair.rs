//! `krabka repair`: open a log in [`RecoveryMode::Repair`], which moves the damaged bytes aside
//! into `DIR/quarantine/` (nothing is deleted), keeps every intact batch after them (each run
//! of them in a segment file of its own) and records the seqs the damage held as an explicit
//! hole, then say what moved where; `--dry-run` says the same without changing anything.
//!
//! `--accept-hole SEQS` records instead that a hole's seqs are lost for good
//! ([`Log::accept_holes`]): tiering then copies past it and retention passes it.
//!
//! Appends after a repair continue after the highest seq that was at stake, so no seq is ever
//! reused; reads into a hole fail naming its quarantine file.

use std::ops::RangeInclusive;
use std::path::Path;

use krabka_storage::segment::QUARANTINE_DIR;
use krabka_storage::view::LogView;
use krabka_storage::{
    ACCEPTED_HOLES_FILE_NAME, Hole, Log, Options, RecoveryMode, RecoveryReport, RepairStep,
    SegmentRepair,
};

use crate::args::RepairArgs;
use crate::error::{CliError, Result, storage};
use crate::human;
use crate::inspect::timestamp;
use crate::output::outln;
use crate::reader::old_format;
use crate::verify::{no_segment_files, verify_error};

/// Parses `--accept-hole`: `N` or `N..=M` with `1 <= N <= M`.
///
/// # Errors
/// A message saying what a valid value looks like.
pub fn parse_seqs(s: &str) -> std::result::Result<RangeInclusive<u64>, String> {
    let bad = || format!("`{s}` is not SEQ or FIRST..=LAST (seqs start at 1, FIRST <= LAST)");
    let (first, last) = match s.split_once("..=") {
        Some((a, b)) => (a.trim().parse::<u64>(), b.trim().parse::<u64>()),
        None => (s.trim().parse::<u64>(), s.trim().parse::<u64>()),
    };
    match (first, last) {
        (Ok(a), Ok(b)) if a >= 1 && a <= b => Ok(a..=b),
        _ => Err(bad()),
    }
}

/// Runs `krabka repair`.
///
/// # Errors
/// When `DIR` is not a log directory, another process has the log open, or the repair cannot
/// write (the log is then as it was, or as far as the storage layer got, which it reports);
/// with `--accept-hole`, when the log needs a repair first or a seq is in no hole.
pub fn run(args: &RepairArgs) -> Result<()> {
    let dir = &args.dir;
    if !dir.is_dir() {
        return Err(
            CliError::new(format!("no log directory at {}", dir.display()))
                .hint("pass the directory of a krabka log"),
        );
    }
    if args.dry_run {
        return dry_run(dir);
    }
    if !args.accept_hole.is_empty() {
        return accept(dir, &args.accept_hole);
    }
    let options = Options {
        recovery: RecoveryMode::Repair,
        ..Options::default()
    };
    let log = Log::open(dir, options).map_err(|e| match e {
        krabka_storage::Error::OldFormat { path } => old_format(dir, &path, "repair"),
        e => storage("cannot repair", dir, e),
    })?;
    let report = log.recovery_report().clone();
    let holes = hole_list(&log);
    let (span, next) = (log.span(), log.next_seq());
    let unaccepted = log.unaccepted_holes();
    log.close()
        .map_err(|e| storage("cannot sync the repaired log", dir, e))?;
    let holding = span.map_or_else(
        || "no records".to_owned(),
        |(first, last)| format!("seq {first}..={last}"),
    );
    if report.is_clean() {
        let known = if holes.is_empty() {
            String::new()
        } else {
            format!(" (minus the holes an earlier repair left: {holes})")
        };
        outln!(
            "nothing to repair in {}: it spans {holding}{known}",
            dir.display()
        )?;
        return accept_hint(dir, &unaccepted);
    }
    for line in describe(&report) {
        outln!("{line}")?;
    }
    let (pieces, recorded) = (report.pieces_moved(), report.holes_recorded());
    let mut did = Vec::new();
    if pieces > 0 || recorded == 0 {
        did.push(format!(
            "moved {pieces} piece(s) ({}) into {}",
            human::bytes(report.bytes_moved()),
            dir.join(QUARANTINE_DIR).display()
        ));
    }
    if !report.kept.is_empty() {
        did.push(format!(
            "kept the {} intact record(s) after the damage in {} new segment file(s)",
            human::count(report.records_kept()),
            report.kept.len()
        ));
    }
    if recorded > 0 {
        did.push(format!(
            "recorded {recorded} hole(s) of missing seqs (no bytes to move)"
        ));
    }
    outln!(
        "repaired {}: {}, deleted nothing; it spans {holding}, the next append gets seq {next}{}",
        dir.display(),
        did.join(", "),
        if holes.is_empty() {
            String::new()
        } else {
            format!(" (minus the holes: {holes})")
        }
    )?;
    accept_hint(dir, &unaccepted)
}

/// The log's holes as `seq A..=B in PATH` (accepted ones said so), joined.
fn hole_list(log: &Log) -> String {
    log.holes()
        .iter()
        .map(|h| {
            let mark = if h.is_accepted() { " (accepted)" } else { "" };
            format!(
                "seq {}..={} in {}{mark}",
                h.first_seq,
                h.last_seq,
                h.marker.display()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Says how to accept `holes` (when there are any): tiering stops at the first until then.
fn accept_hint(dir: &Path, holes: &[Hole]) -> Result<()> {
    let Some(first) = holes.first() else {
        return Ok(());
    };
    let listed: Vec<String> = holes
        .iter()
        .map(|h| format!("{}..={}", h.first_seq, h.last_seq))
        .collect();
    outln!(
        "seq {} {} no tier holds: `krabka tier` stops at the first until you restore them or \
         accept their loss with `krabka repair {} --accept-hole {}..={}` (one --accept-hole \
         per hole)",
        listed.join(", "),
        if holes.len() == 1 {
            "is a hole"
        } else {
            "are holes"
        },
        dir.display(),
        first.first_seq,
        first.last_seq
    )
}

/// `--accept-hole`: records the holes holding `ranges` as accepted.
fn accept(dir: &Path, ranges: &[RangeInclusive<u64>]) -> Result<()> {
    let log = Log::open(dir, Options::default()).map_err(|e| {
        use krabka_storage::Error as E;
        if let E::OldFormat { path } = e {
            return old_format(dir, &path, "repair");
        }
        let needs_repair = matches!(
            e,
            E::Damaged { .. } | E::SeqGap { .. } | E::SeqOverlap { .. } | E::Corrupt { .. }
        );
        let e = storage("cannot accept a hole of", dir, e);
        if needs_repair {
            e.prefix(&format!(
                "the log needs `krabka repair {}` first",
                dir.display()
            ))
        } else {
            e
        }
    })?;
    for range in ranges {
        let accepted = log.accept_holes(range.clone()).map_err(|e| {
            CliError::new(e.to_string()).hint(format!(
                "`krabka verify {}` lists the holes of the log",
                dir.display()
            ))
        })?;
        for a in accepted {
            outln!(
                "accepted hole seq {}..={} of {} (accepted {}, recorded in {}): `krabka tier` \
                 copies past it and retention passes it; reads of those seqs still fail naming it",
                a.first_seq,
                a.last_seq,
                dir.display(),
                timestamp(a.accepted_at_ms),
                dir.join(ACCEPTED_HOLES_FILE_NAME).display()
            )?;
        }
    }
    log.close()
        .map_err(|e| storage("cannot close the log", dir, e))
}

/// One line per thing the repair did.
fn describe(report: &RecoveryReport) -> Vec<String> {
    let mut lines = Vec::new();
    for q in &report.quarantined {
        if let (true, Some((a, b))) = (q.is_hole_only(), q.seqs) {
            // Seqs missing between two segment files: nothing to move, only the hole to record.
            lines.push(format!(
                "recorded seqs {a}..={b} as a hole (missing, no bytes to move: {}); the record \
                 of the hole is {}",
                q.reason,
                q.to.display()
            ));
            continue;
        }
        let seqs = match q.seqs {
            Some((a, b)) => format!("; seqs {a}..={b} are now a hole"),
            None => String::new(),
        };
        lines.push(format!(
            "moved {} bytes of {} from byte {} to {} ({}){seqs}",
            q.bytes,
            q.from.display(),
            q.position,
            q.to.display(),
            q.reason
        ));
    }
    for k in &report.kept {
        lines.push(format!(
            "kept seqs {}..={} ({} bytes of {} from byte {}) as {}",
            k.first_seq,
            k.last_seq,
            k.bytes,
            k.from.display(),
            k.position,
            k.to.display()
        ));
    }
    for p in &report.rebuilt_indexes {
        lines.push(format!("rebuilt the index files of {}", p.display()));
    }
    lines
}

/// What a repair would change ([`LogView::preview_repair`]): the repair's own plan for every
/// damaged segment file, and what else the read-only checks of `krabka verify` find.
fn dry_run(dir: &Path) -> Result<()> {
    let view = LogView::new(dir);
    if view
        .segment_bases()
        .map_err(|e| verify_error(dir, e))?
        .is_empty()
    {
        return Err(no_segment_files(dir));
    }
    let preview = view.preview_repair().map_err(|e| verify_error(dir, e))?;
    let (plans, others) = (&preview.plans, &preview.others);
    if preview.is_empty() {
        return outln!(
            "nothing to repair in {} (dry run; nothing was changed)",
            dir.display()
        );
    }
    outln!(
        "dry run: `krabka repair {}` would do this (nothing was changed):",
        dir.display()
    )?;
    let qdir = dir.join(QUARANTINE_DIR);
    for plan in plans {
        outln!(
            "  {} at byte {}: {}",
            plan.path.display(),
            plan.intact_len,
            plan.reason
        )?;
        for line in describe_plan(plan, &qdir) {
            outln!("    {line}")?;
        }
    }
    if !others.is_empty() {
        outln!(
            "  and for each of these, move the damaged part aside into {} (rebuilding bad index \
             files, recording missing seqs as a hole):",
            qdir.display()
        )?;
        for p in others {
            outln!("    {p}")?;
        }
    }
    Ok(())
}

/// The lines of a repair's plan for one segment file, worded as the repair reports them.
fn describe_plan(plan: &SegmentRepair, qdir: &Path) -> Vec<String> {
    let file = plan.path.display();
    let mut lines = Vec::new();
    for step in &plan.steps {
        if let (Some((a, b)), RepairStep::Cut { from, .. }) = (step.hole_only(), step) {
            lines.push(format!(
                "record seqs {a}..={b} as a hole (missing at byte {from} of {file}: {}; no \
                 bytes to move)",
                plan.reason
            ));
            continue;
        }
        match *step {
            RepairStep::Cut { from, to, seqs } => {
                let seqs = match seqs {
                    Some((a, b)) => format!("; seqs {a}..={b} would become a hole"),
                    None => String::new(),
                };
                let why = if plan.torn_tail {
                    format!("torn tail: {}", plan.reason)
                } else {
                    plan.reason.clone()
                };
                lines.push(format!(
                    "move {} bytes of {file} from byte {from} into {} ({why}){seqs}",
                    to - from,
                    qdir.display()
                ));
            }
            RepairStep::Keep {
                from,
                to,
                first_seq,
                last_seq,
            } => {
                lines.push(format!(
                    "keep seqs {first_seq}..={last_seq} ({} bytes of {file} from byte {from}) as {}",
                    to - from,
                    plan.kept_path(first_seq).display()
                ));
            }
            _ => {}
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_hole_takes_a_seq_or_an_inclusive_range() {
        assert_eq!(parse_seqs("9"), Ok(9..=9));
        assert_eq!(parse_seqs("9..=12"), Ok(9..=12));
        for bad in ["0", "12..=9", "9..12", "", "a..=b"] {
            assert_eq!(
                parse_seqs(bad),
                Err(format!(
                    "`{bad}` is not SEQ or FIRST..=LAST (seqs start at 1, FIRST <= LAST)"
                )),
                "{bad}"
            );
        }
    }
}
