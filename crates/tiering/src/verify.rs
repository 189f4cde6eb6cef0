//! The check a local segment passes before it is copied: nothing leaves the local tier
//! unverified.
//!
//! The remote storage interface uploads files by path, so the bytes cannot be checked as the
//! backend reads them; instead the whole segment is read and checked right before the copy
//! starts. Closed segments are never altered by the local log, so what was checked is what is
//! uploaded.

use std::io;

use krabka_storage::SegmentInfo;
use krabka_storage::segment::verify_segment_files;

use crate::error::Error;

/// Checks a closed local segment before its copy: every batch's length, CRC and records, the
/// first seq equal to the segment's base seq, contiguous seqs (each batch starting after the
/// previous one's last) up to the last seq the log lists for it, the `.log` size the log
/// lists, and the `.index` / `.timeindex` describing that `.log` (every offset-index entry
/// pointing at the batch that starts with its seq).
///
/// # Errors
/// [`Error::DamagedSegment`] naming the file and byte of the first problem (a missing file is
/// damage too); [`Error::Storage`] when a file cannot be read for another reason.
pub(crate) fn verify_for_copy(seg: &SegmentInfo) -> Result<(), Error> {
    let damaged = |path: &std::path::Path, position: u64, reason: String| Error::DamagedSegment {
        path: path.to_path_buf(),
        position,
        reason,
        first_seq: seg.base_seq,
        last_seq: seg.last_seq,
    };
    let v = match verify_segment_files(
        &seg.log_path,
        Some(&seg.index_path),
        Some(&seg.time_index_path),
    ) {
        Ok(v) => v,
        Err(krabka_storage::Error::Io { path, source })
            if source.kind() == io::ErrorKind::NotFound =>
        {
            return Err(damaged(&path, 0, "the file is missing".into()));
        }
        Err(e) => {
            return Err(Error::storage(
                format!("checking {} before its copy", seg.log_path.display()),
                e,
            ));
        }
    };
    if let Some(problem) = &v.problem {
        let path = v.problem_path.as_deref().unwrap_or(&seg.log_path);
        return Err(damaged(path, problem.position, problem.reason.clone()));
    }
    let expected = (Some(seg.base_seq), Some(seg.last_seq), seg.size);
    let found = (v.first_seq, v.last_seq, v.file_bytes);
    if found != expected {
        let seqs = match (v.first_seq, v.last_seq) {
            (Some(a), Some(b)) => format!("seqs {a}..={b}"),
            _ => "no record".to_owned(),
        };
        return Err(damaged(
            &seg.log_path,
            v.valid_bytes,
            format!(
                "the file holds {seqs} in {} bytes, but the log lists seqs {}..={} in {} bytes",
                v.file_bytes, seg.base_seq, seg.last_seq, seg.size
            ),
        ));
    }
    Ok(())
}
