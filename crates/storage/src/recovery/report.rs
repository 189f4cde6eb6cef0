//! What [`Log::open`](crate::Log::open)'s recovery reports: the torn tail it cut, the bytes it
//! moved into the quarantine directory, the intact batches a repair kept, the explicit holes.

use std::path::PathBuf;

use crate::recovery::KeptRun;

/// A torn tail cut from the active segment during recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruncatedTail {
    /// The `.log` file that was truncated.
    pub path: PathBuf,
    /// The byte position it was truncated to (the first bad batch).
    pub position: u64,
    /// How many bytes were removed (saved into the quarantine directory first).
    pub bytes_removed: u64,
    /// Why the batch at `position` was rejected.
    pub reason: String,
}

/// Bytes recovery moved aside into the quarantine directory (never deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantinedPiece {
    /// The file the bytes came from.
    pub from: PathBuf,
    /// Byte position in `from` where the moved bytes started (0 for a whole file).
    pub position: u64,
    /// How many bytes moved.
    pub bytes: u64,
    /// Where they are now (inside [`QUARANTINE_DIR`](crate::segment::QUARANTINE_DIR)).
    pub to: PathBuf,
    /// The seqs the log no longer holds because of this move (an explicit hole), if any.
    pub seqs: Option<(u64, u64)>,
    /// Why.
    pub reason: String,
}

/// What [`Log::open`](crate::Log::open) found and repaired; every item is also logged with `tracing::warn!`.
/// Its `Display` prints one line per thing open did or ignored (nothing when there is nothing
/// to say); holes an earlier repair recorded are listed in [`holes`](Self::holes) but not
/// printed again at every open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The torn tail cut from the active segment, if any (its bytes are also in
    /// [`quarantined`](Self::quarantined)).
    pub truncated: Option<TruncatedTail>,
    /// `.log` files of closed segments whose index was missing or invalid and was rebuilt by a
    /// scan.
    pub rebuilt_indexes: Vec<PathBuf>,
    /// Everything moved into the quarantine directory: torn tails, and under
    /// [`RecoveryMode::Repair`](crate::RecoveryMode::Repair) damaged bytes, stray files and the markers of holes.
    pub quarantined: Vec<QuarantinedPiece>,
    /// Under [`RecoveryMode::Repair`](crate::RecoveryMode::Repair): the runs of intact batches after damage, each kept as a
    /// segment file of its own.
    pub kept: Vec<KeptRun>,
    /// Explicit holes in the log's seqs (from this or an earlier repair), with their marker
    /// files and acceptance, as [`Log::holes`](crate::Log::holes) lists them at open.
    pub holes: Vec<crate::Hole>,
    /// Files in the directory that are not segment files (ignored), and index files without a
    /// `.log`. The lock file ([`LOCK_FILE_NAME`](crate::LOCK_FILE_NAME)) and the quarantine directory are not listed.
    pub ignored_files: Vec<PathBuf>,
    /// Bytes of `.log` files read by scans during open.
    pub scanned_bytes: u64,
    /// Whether the active segment was loaded from what the last [`Log::close`](crate::Log::close) recorded
    /// ([`CLEAN_SHUTDOWN_FILE_NAME`](crate::CLEAN_SHUTDOWN_FILE_NAME)) instead of being scanned.
    pub clean_shutdown: bool,
}

impl RecoveryReport {
    /// Whether open found nothing to repair (ignored stray files and holes recorded by an
    /// earlier repair do not count).
    pub fn is_clean(&self) -> bool {
        self.truncated.is_none() && self.rebuilt_indexes.is_empty() && self.quarantined.is_empty()
    }
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lines = Vec::new();
        if let Some(t) = &self.truncated {
            lines.push(format!(
                "recovery: cut a torn tail of {} bytes from {} at byte {} ({})",
                t.bytes_removed,
                t.path.display(),
                t.position,
                t.reason
            ));
        }
        for p in &self.rebuilt_indexes {
            lines.push(format!("recovery: rebuilt the index of {}", p.display()));
        }
        for q in &self.quarantined {
            let seqs = match q.seqs {
                Some((a, b)) => format!("; seqs {a}..={b} are now a hole"),
                None => String::new(),
            };
            lines.push(format!(
                "recovery: moved {} bytes of {} from byte {} to {} ({}){seqs}",
                q.bytes,
                q.from.display(),
                q.position,
                q.to.display(),
                q.reason
            ));
        }
        for k in &self.kept {
            lines.push(format!(
                "recovery: kept seqs {}..={} ({} bytes of {} from byte {}) as {}",
                k.first_seq,
                k.last_seq,
                k.bytes,
                k.from.display(),
                k.position,
                k.to.display()
            ));
        }
        for p in &self.ignored_files {
            lines.push(format!(
                "recovery: ignored {} (not a segment file)",
                p.display()
            ));
        }
        write!(f, "{}", lines.join("\n"))
    }
}
