//! Verifying a segment's files: every batch of the `.log`, and its index files against it.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::batch::BadBytes;
use super::name::parse_segment_file_name;
use super::problem::SegmentProblem;
use super::scan::{Scan, ScannedBatch, last_seq_allowed, scan_file, scan_file_from};
use crate::Error;
use crate::index::{ENTRY_LEN, INDEX_HEADER_LEN, OffsetIndex, TIME_INDEX_HEADER_LEN, TimeIndex};

/// What [`verify_segment`] found in a `.log` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentVerification {
    /// The base seq parsed from the file name (`None` for a name that is not a segment name).
    pub base_seq: Option<u64>,
    /// Number of valid records before the first problem.
    pub records: u64,
    /// Seq of the first valid record.
    pub first_seq: Option<u64>,
    /// Seq of the last valid record.
    pub last_seq: Option<u64>,
    /// Largest timestamp among the valid records.
    pub max_timestamp: Option<i64>,
    /// Bytes of valid batches from the start of the file.
    pub valid_bytes: u64,
    /// Size of the file.
    pub file_bytes: u64,
    /// The first problem (`None` when every byte of the file is a valid batch and, for
    /// [`verify_segment_files`], the index files agree with it).
    pub problem: Option<SegmentProblem>,
    /// The file the problem is in (the `.log`, or an index file for [`verify_segment_files`]).
    pub problem_path: Option<PathBuf>,
}

impl SegmentVerification {
    /// Whether every byte of the file belongs to a valid batch.
    pub fn is_ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// CRC-checks every batch of the `.log` file at `log_path` and reports the first bad position.
///
/// The file's base seq (from its name, when it is a segment name) must be the first batch's seq,
/// and seqs must be contiguous. Reads the file in 1 MiB chunks.
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened or read. A corrupt file is not an error: it is
/// reported in [`SegmentVerification::problem`].
pub fn verify_segment(log_path: &Path) -> Result<SegmentVerification, Error> {
    let (file, file_len, base_seq) = open_log(log_path)?;
    let scan = scan_file(&file, log_path, file_len, base_seq, u64::MAX, u64::MAX)?;
    Ok(verification_of(scan, log_path, file_len, base_seq))
}

/// [`verify_segment`] of a closed segment with its index files: also checks that the
/// `.index` and `.timeindex` decode, describe this `.log` (base seq, last seq, size, max
/// timestamp) and that every index entry points at the start of the batch holding its seq (and
/// every time-index entry carries the largest timestamp before that batch), so an index
/// rewritten with a valid checksum cannot send readers to the wrong record. Pass `None` for an
/// index file that is not expected (the active segment has none); a path that does not exist is
/// a problem ("missing").
///
/// The first problem found is in [`SegmentVerification::problem`], and the file it is in
/// (the `.log` or one of the index files) in [`SegmentVerification::problem_path`].
///
/// # Errors
/// [`Error::Io`] when a file cannot be read (other than a missing index file).
pub fn verify_segment_files(
    log_path: &Path,
    index_path: Option<&Path>,
    time_index_path: Option<&Path>,
) -> Result<SegmentVerification, Error> {
    verify_segment_in_log(log_path, index_path, time_index_path, None)
}

/// [`verify_segment_files`] of one segment of a log, whose next segment file (in the same
/// directory) starts at `next_base` (`None` for the newest segment, whose zeros after its
/// last batch are preallocated space, not a problem, as [`Log::open`](crate::Log::open)
/// takes them; [`SegmentVerification::valid_bytes`] is then its true end): a closed segment ends
/// where the next one starts, so when that file starts with an intact batch of `next_base`, a
/// batch holding a seq from `next_base` on is this file's problem at its byte (bytes appended
/// to the closed segment), not a seq overlap of the next segment; a repair moves those bytes
/// aside and keeps the next segment. An empty or damaged next file bounds nothing (the seam
/// names it).
///
/// # Errors
/// As [`verify_segment_files`].
pub fn verify_segment_in_log(
    log_path: &Path,
    index_path: Option<&Path>,
    time_index_path: Option<&Path>,
    next_base: Option<u64>,
) -> Result<SegmentVerification, Error> {
    let (file, file_len, base_seq) = open_log(log_path)?;
    let dir = log_path.parent().unwrap_or(Path::new("."));
    let last_allowed = last_seq_allowed(dir, next_base)?;
    let indexes = Indexes::load(index_path, time_index_path)?;
    // Entries are checked as the scan passes their batches.
    let want: Vec<(u64, u64)> = indexes
        .offsets
        .as_ref()
        .map(|i| i.entries.clone())
        .unwrap_or_default();
    let want_times: Vec<(i64, u64)> = indexes
        .times
        .as_ref()
        .map(|i| i.entries.clone())
        .unwrap_or_default();
    let mut seen: Vec<Seen> = Vec::new();
    let mut next_entry = 0usize;
    let mut on_batch = |f: ScannedBatch| {
        let hit = want.get(next_entry).is_some_and(|&(s, _)| s == f.seq)
            || want_times.get(next_entry).is_some_and(|&(_, s)| s == f.seq);
        if hit {
            seen.push((f.seq, f.position, f.max_timestamp_before));
            next_entry += 1;
        }
    };
    let mut scan = scan_file_from(
        &file,
        log_path,
        0,
        file_len,
        (base_seq, last_allowed),
        u64::MAX,
        &mut on_batch,
    )?;
    if next_base.is_none() {
        // The newest segment's preallocated space, as recovery takes it.
        scan.accept_zero_tail(&file, log_path, file_len)?;
    }
    let mut v = verification_of(scan, log_path, file_len, base_seq);
    if v.problem.is_some() {
        return Ok(v);
    }
    if let Some((path, problem)) = indexes.problem {
        fail(&mut v, &path, problem.position, problem.reason);
        return Ok(v);
    }
    if let (Some(idx), Some(p)) = (&indexes.offsets, index_path)
        && !check_offset_index(&mut v, idx, p, &seen)
    {
        return Ok(v);
    }
    if let (Some(tidx), Some(p)) = (&indexes.times, time_index_path) {
        let offset_entries = indexes.offsets.as_ref().map(|o| o.entries.len());
        check_time_index(&mut v, tidx, offset_entries, p, &seen);
    }
    Ok(v)
}

/// A batch an index entry names, as the scan saw it: seq, byte position and the largest
/// timestamp before it.
type Seen = (u64, u64, i64);

/// The batch of `seq` among `seen` (in scan order, so sorted by seq): a binary search, so that
/// checking every entry of an index costs `E log E`, not `E²` (a dense index has an entry per
/// record). Out of order, it could only miss a batch, which is reported as a problem.
fn seen_batch(seen: &[Seen], seq: u64) -> Option<&Seen> {
    seen.binary_search_by_key(&seq, |&(s, _, _)| s)
        .ok()
        .and_then(|i| seen.get(i))
}

/// Opens a `.log` file for verification: the file, its length and the base seq its name gives.
fn open_log(log_path: &Path) -> Result<(File, u64, Option<u64>), Error> {
    let file = File::open(log_path).map_err(|e| Error::io(log_path, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(log_path, e))?.len();
    let base_seq = log_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_file_name)
        .map(|(b, _)| b);
    Ok((file, file_len, base_seq))
}

fn verification_of(
    scan: Scan,
    log_path: &Path,
    file_len: u64,
    base_seq: Option<u64>,
) -> SegmentVerification {
    SegmentVerification {
        base_seq,
        records: scan.records,
        first_seq: scan.first_seq,
        last_seq: scan.last_seq,
        max_timestamp: scan.first_seq.map(|_| scan.max_timestamp),
        valid_bytes: scan.valid_len,
        file_bytes: file_len,
        problem_path: scan.problem.as_ref().map(|_| log_path.to_path_buf()),
        problem: scan.problem,
    }
}

fn fail(v: &mut SegmentVerification, path: &Path, position: u64, reason: String) {
    v.problem = Some(SegmentProblem { position, reason });
    v.problem_path = Some(path.to_path_buf());
}

/// The index files of a segment under verification, and the first problem loading them.
struct Indexes {
    offsets: Option<OffsetIndex>,
    times: Option<TimeIndex>,
    problem: Option<(PathBuf, SegmentProblem)>,
}

impl Indexes {
    /// Loads the index files that are expected; the time index only when the offset index
    /// loaded.
    fn load(index_path: Option<&Path>, time_index_path: Option<&Path>) -> Result<Self, Error> {
        let mut out = Indexes {
            offsets: None,
            times: None,
            problem: None,
        };
        if let Some(p) = index_path {
            match load_index(p, OffsetIndex::decode)? {
                Ok(i) => out.offsets = Some(i),
                Err(problem) => out.problem = Some((p.to_path_buf(), problem)),
            }
        }
        if let Some(p) = time_index_path
            && out.problem.is_none()
        {
            match load_index(p, TimeIndex::decode)? {
                Ok(i) => out.times = Some(i),
                Err(problem) => out.problem = Some((p.to_path_buf(), problem)),
            }
        }
        Ok(out)
    }
}

/// Checks the offset index `idx` (at `p`) against the verified `.log`; records the first
/// problem in `v` and returns false when there is one.
fn check_offset_index(
    v: &mut SegmentVerification,
    idx: &OffsetIndex,
    p: &Path,
    seen: &[Seen],
) -> bool {
    let file_len = v.file_bytes;
    let last = v
        .last_seq
        .unwrap_or(v.base_seq.unwrap_or(1).saturating_sub(1));
    let header_ok = Some(idx.base_seq) == v.base_seq.or(v.first_seq)
        && idx.last_seq == last
        && idx.log_size == file_len
        && v.max_timestamp.is_none_or(|m| idx.max_timestamp == m);
    if !header_ok {
        let reason = format!(
            "index describes seqs {}..={} in {} bytes (max timestamp {}), the .log holds {}..={last} in {file_len} bytes",
            idx.base_seq,
            idx.last_seq,
            idx.log_size,
            idx.max_timestamp,
            v.first_seq.unwrap_or(idx.base_seq)
        );
        fail(v, p, 8, reason);
        return false;
    }
    for (i, &(seq, pos)) in idx.entries.iter().enumerate() {
        let found = seen_batch(seen, seq);
        if found.map(|&(_, p, _)| p) != Some(pos) {
            let at = (INDEX_HEADER_LEN + i * ENTRY_LEN) as u64;
            let reason = format!(
                "index entry {i} points seq {seq} at byte {pos}, but {}",
                match found {
                    Some(&(_, real, _)) => format!("its batch starts at byte {real}"),
                    None => "no batch of the .log starts there with that seq".to_owned(),
                }
            );
            fail(v, p, at, reason);
            return false;
        }
    }
    true
}

/// Checks the time index `tidx` (at `p`) against the verified `.log` (and the offset index's
/// entry count, when it was checked); records the first problem in `v`.
fn check_time_index(
    v: &mut SegmentVerification,
    tidx: &TimeIndex,
    offset_entries: Option<usize>,
    p: &Path,
    seen: &[Seen],
) {
    let header_ok = Some(tidx.base_seq) == v.base_seq.or(v.first_seq)
        && v.max_timestamp.is_none_or(|m| tidx.max_timestamp == m)
        && offset_entries.is_none_or(|n| n == tidx.entries.len());
    if !header_ok {
        let reason = format!(
            "time index (base {}, max timestamp {}, {} entries) does not describe this .log",
            tidx.base_seq,
            tidx.max_timestamp,
            tidx.entries.len()
        );
        fail(v, p, 8, reason);
        return;
    }
    for (i, &(ts, seq)) in tidx.entries.iter().enumerate() {
        let found = seen_batch(seen, seq);
        if found.map(|&(_, _, before)| before) != Some(ts) {
            let at = (TIME_INDEX_HEADER_LEN + i * ENTRY_LEN) as u64;
            let reason = format!(
                "time index entry {i} gives seq {seq} timestamp {ts}, the .log says {}",
                found.map_or("no such batch".to_owned(), |&(_, _, b)| b.to_string())
            );
            fail(v, p, at, reason);
            return;
        }
    }
}

/// Reads and decodes an index file for [`verify_segment_files`]: a missing or undecodable file
/// is a problem found (the inner `Err`), any other read failure an error.
fn load_index<T>(
    path: &Path,
    decode: impl Fn(&[u8]) -> Result<T, BadBytes>,
) -> Result<Result<T, SegmentProblem>, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(SegmentProblem {
                position: 0,
                reason: "index file is missing".into(),
            }));
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    Ok(decode(&bytes).map_err(|e| SegmentProblem {
        position: e.position as u64,
        reason: e.reason,
    }))
}
