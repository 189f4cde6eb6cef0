//! What a [`LogReader`](super::LogReader) reports besides records: raw batches, the incomplete
//! batch the newest segment ends with, the wrong index entries it stepped around.

use std::path::PathBuf;

use bytes::Bytes;

/// An incomplete batch at the end of the newest segment: a write in progress, or a torn write
/// (which the next open of the log moves aside). Not damage: a read stops before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompleteTail {
    /// The segment's `.log` file.
    pub path: PathBuf,
    /// Where the incomplete batch starts.
    pub position: u64,
    /// Bytes from there to the end of the file.
    pub bytes: u64,
}

/// A wrong index entry a [`LogReader`](super::LogReader) met and stepped around by scanning the segment from its
/// start (it only costs time; `verify_segment_files` names the entry).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexFallback {
    /// The `.index` file `index` gives, for `seq`, byte `position` of its `.log`, where no
    /// batch of a seq from the segment's base up to `seq` starts.
    NoBatch {
        /// The `.index` file.
        index: PathBuf,
        /// The seq looked up.
        seq: u64,
        /// The position the entry gives.
        position: u64,
    },
    /// The batch at byte `position` of the `.log` file `log`, where the segment's index placed
    /// the batch of `seq`, is not a valid batch of that seq.
    BadBatch {
        /// The `.log` file.
        log: PathBuf,
        /// The position the entry gave.
        position: u64,
        /// The seq the batch there should carry.
        seq: u64,
    },
}

/// Consecutive whole batches of one segment file, each checked (length, CRC, message, seq) as
/// [`LogReader::poll`](super::LogReader::poll) checks the records it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolledBatches {
    /// The segment's `.log` file.
    pub path: PathBuf,
    /// Where the first batch starts in it.
    pub position: u64,
    /// Seq of the first batch.
    pub first_seq: u64,
    /// Seq of the last batch.
    pub last_seq: u64,
    /// The batches' bytes, as in the file (`docs/format.md`).
    pub bytes: Bytes,
}

/// Renamed [`PolledBatches`].
#[deprecated(since = "0.1.0", note = "renamed to `PolledBatches`")]
pub type Batches = PolledBatches;
