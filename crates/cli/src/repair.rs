//! `krabka repair`: open a log in [`RecoveryMode::Repair`], which moves every damaged part
//! aside into `DIR/quarantine/` (nothing is deleted) and records the seqs it held as an
//! explicit hole, then say what moved where.
//!
//! Appends after a repair continue after the highest seq that was at stake, so no seq is ever
//! reused; reads into a hole fail naming its quarantine file.

use std::path::Path;

use krabka_storage::segment::QUARANTINE_DIR;
use krabka_storage::{Log, Options, RecoveryMode, RecoveryReport};

use crate::args::RepairArgs;
use crate::error::{CliError, Result, storage};
use crate::human;
use crate::output::outln;
use crate::verify::verify;

/// Runs `krabka repair`.
///
/// # Errors
/// When `DIR` is not a log directory, another process has the log open, or the repair cannot
/// write (the log is then as it was, or as far as the storage layer got, which it reports).
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
    let options = Options {
        recovery: RecoveryMode::Repair,
        ..Options::default()
    };
    let log = Log::open(dir, options).map_err(|e| storage("cannot repair", dir, e))?;
    let report = log.recovery_report().clone();
    let holes = log.quarantined();
    let (first, last, next) = (log.first_seq(), log.last_seq(), log.next_seq());
    log.close()
        .map_err(|e| storage("cannot sync the repaired log", dir, e))?;
    let holding = if last >= first && last > 0 {
        format!("seq {first}..={last}")
    } else {
        "no records".to_owned()
    };
    let hole_list = || -> String {
        holes
            .iter()
            .map(|(r, p)| format!("seq {}..={} in {}", r.start(), r.end(), p.display()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if report.is_clean() {
        let known = if holes.is_empty() {
            String::new()
        } else {
            format!(" (minus the holes an earlier repair left: {})", hole_list())
        };
        return outln!(
            "nothing to repair in {}: it spans {holding}{known}",
            dir.display()
        );
    }
    for line in describe(&report) {
        outln!("{line}")?;
    }
    let moved: u64 = report.quarantined.iter().map(|q| q.bytes).sum();
    let pieces = report
        .quarantined
        .iter()
        .filter(|q| !is_hole_only(q))
        .count();
    let recorded = report.quarantined.len() - pieces;
    let mut did = Vec::new();
    if pieces > 0 || recorded == 0 {
        did.push(format!(
            "moved {pieces} piece(s) ({}) into {}",
            human::bytes(moved),
            dir.join(QUARANTINE_DIR).display()
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
            format!(" (minus the holes: {})", hole_list())
        }
    )
}

/// One line per thing the repair did.
fn describe(report: &RecoveryReport) -> Vec<String> {
    let mut lines = Vec::new();
    for q in &report.quarantined {
        if let (true, Some((a, b))) = (is_hole_only(q), q.seqs) {
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
    for p in &report.rebuilt_indexes {
        lines.push(format!("rebuilt the index files of {}", p.display()));
    }
    lines
}

/// Whether `q` moved no bytes and only recorded missing seqs as a hole.
fn is_hole_only(q: &krabka_storage::QuarantinedPiece) -> bool {
    q.bytes == 0 && q.seqs.is_some()
}

/// What a repair would change, found by the read-only checks of `krabka verify`.
fn dry_run(dir: &Path) -> Result<()> {
    let mut sink = Vec::new();
    let report = verify(dir, true, &mut sink)?;
    if report.problems.is_empty() {
        return outln!(
            "nothing to repair in {} (dry run; nothing was changed)",
            dir.display()
        );
    }
    outln!(
        "dry run: `krabka repair {}` would move the damaged bytes at each of these aside into {} \
         (rebuilding bad index files) and record the seqs they held as a hole; nothing was changed:",
        dir.display(),
        dir.join(QUARANTINE_DIR).display()
    )?;
    for p in &report.problems {
        outln!("  {p}")?;
    }
    Ok(())
}
