//! Errors of the durable metadata manager: a `krabka_storage` error as a
//! [`RemoteStorageError`], damage becoming [`MetadataError::Log`].

use std::io;
use std::path::{Path, PathBuf};

use crate::MetadataError;
use krabka_remote_storage::RemoteStorageError;

/// Maps an I/O error on `path`.
pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RemoteStorageError + '_ {
    move |e| RemoteStorageError::io(path.display(), e)
}

/// The error of a write to a closed manager.
pub(super) fn closed_error(dir: &Path) -> RemoteStorageError {
    RemoteStorageError::Backend {
        operation: "metadata append".to_owned(),
        location: dir.display().to_string(),
        message: "the metadata manager is closed".to_owned(),
        source: None,
    }
}

fn damaged(
    path: PathBuf,
    position: Option<u64>,
    seq: Option<u64>,
    reason: String,
) -> RemoteStorageError {
    MetadataError::Log {
        path,
        position,
        seq,
        reason,
    }
    .into()
}

/// A storage error as the SPI's: damage becomes [`MetadataError::Log`] naming the file, byte and
/// seqs.
pub(super) fn storage_error(
    dir: &Path,
    operation: &str,
    e: krabka_storage::Error,
) -> RemoteStorageError {
    use krabka_storage::Error as E;
    match e {
        E::Io { path, source } => RemoteStorageError::Io {
            location: path.display().to_string(),
            source,
        },
        E::Corrupt {
            path,
            position,
            reason,
        } => damaged(path, Some(position), None, reason),
        E::Damaged {
            path,
            position,
            reason,
            first_seq,
            last_seq,
        } => damaged(
            path,
            Some(position),
            None,
            format!("{reason}; events {first_seq}..={last_seq} follow the damage or are missing"),
        ),
        other => match seq_damage(other) {
            Ok(mapped) => mapped,
            Err(other) => RemoteStorageError::Backend {
                operation: format!("metadata log {operation}"),
                location: dir.display().to_string(),
                message: other.to_string(),
                source: Some(Box::new(other)),
            },
        },
    }
}

/// The torn-tail, seq-order and quarantine errors of a log, and the damage a read-only reader
/// reports, as [`MetadataError::Log`] (a file that is not a directory as
/// [`MetadataError::Generation`]); any other error back.
fn seq_damage(e: krabka_storage::Error) -> Result<RemoteStorageError, krabka_storage::Error> {
    use krabka_storage::Error as E;
    Ok(match e {
        E::TornTail {
            path,
            position,
            bytes_after,
            incomplete,
            reason,
        } => damaged(
            path,
            Some(position),
            None,
            format!(
                "{reason}; {bytes_after} bytes from there to the end{}",
                if incomplete {
                    ""
                } else {
                    " hold a complete frame that fails its checks, not a torn write"
                }
            ),
        ),
        E::SeqGap {
            previous,
            path,
            expected,
            found,
        } => damaged(
            path,
            None,
            Some(found),
            format!(
                "it starts at seq {found}, but {} ends at seq {} (a segment was deleted or truncated, or this file is stray)",
                previous.display(),
                expected.saturating_sub(1)
            ),
        ),
        E::SeqOverlap {
            previous,
            path,
            expected,
            found,
        } => damaged(
            path,
            None,
            Some(found),
            format!(
                "it starts at seq {found}, but {} already holds seqs up to {}",
                previous.display(),
                expected.saturating_sub(1)
            ),
        ),
        E::Quarantined {
            first_seq,
            last_seq,
            path,
        } => damaged(
            path,
            None,
            Some(first_seq),
            format!("events {first_seq}..={last_seq} were moved aside by a repair"),
        ),
        other => return view_damage(other),
    })
}

/// The damage a read-only reader of a log (`krabka_storage::view::LogReader`) reports, as
/// [`MetadataError::Log`] naming the file, byte and seq; any other error back.
fn view_damage(e: krabka_storage::Error) -> Result<RemoteStorageError, krabka_storage::Error> {
    use krabka_storage::Error as E;
    Ok(match e {
        E::BadBatch {
            path,
            position,
            seq,
            reason,
        }
        | E::OldFormatDamaged {
            path,
            position,
            seq,
            reason,
        } => damaged(path, Some(position), Some(seq), reason),
        E::CutShort {
            path,
            position,
            bytes,
            seq,
        } => damaged(
            path,
            Some(position),
            Some(seq),
            format!("a closed segment file ends inside a frame ({bytes} bytes of it)"),
        ),
        E::EmptySegment {
            path,
            next,
            expected,
            found,
        } => damaged(
            path,
            Some(0),
            Some(expected),
            format!(
                "the closed segment file holds no record, but seqs {expected}..={} should be in it ({} starts at seq {found})",
                found.saturating_sub(1),
                next.display()
            ),
        ),
        E::EndsBelowRecoveryPoint {
            path,
            position,
            first_seq,
            recovery_point,
        } => damaged(
            path,
            Some(position),
            Some(first_seq),
            format!(
                "the log held every event up to seq {recovery_point} when it was closed: events {first_seq}..={recovery_point} are missing"
            ),
        ),
        E::Shrank {
            path,
            len,
            position,
        } => damaged(
            path,
            Some(position),
            None,
            format!("the file shrank to {len} bytes while it was read"),
        ),
        E::NotADirectory { path } => MetadataError::Generation {
            path,
            reason: "it is not a directory".to_owned(),
        }
        .into(),
        other => return Err(other),
    })
}
