//! The one error type of the crate, [`Error`], and the cause a poisoned log remembers.

use std::io;
use std::path::{Path, PathBuf};

use crate::LOCK_FILE_NAME;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A segment file is not in this build's format: it holds the record batches krabka wrote
    /// before its segments became Kafka record batches (recognised by several independent
    /// signals of that layout, so one damaged field does not hide it). No open, verification
    /// or repair reads, cuts or moves it; a [`LogReader`](crate::view::LogReader) reads its
    /// records read-only, so that they can be appended to a new log.
    #[error(
        "{} is in {}, not {}: this build neither opens, verifies, repairs nor dumps it, and nothing was changed; its records can be read out read-only (a `LogView` reader, as `krabka read DIR` does) and appended to a new log (docs/format.md, \"Bringing an old log over\")",
        path.display(), crate::segment::OLD_FORMAT_NAME, crate::segment::FORMAT_NAME
    )]
    OldFormat {
        /// The segment's `.log` file.
        path: PathBuf,
    },
    /// A segment file in krabka's old per-record frame format (see [`Error::OldFormat`]) holds
    /// a damaged batch at `position`, where the batch of `seq` should start: a read-only reader
    /// of the old format ([`LogReader`](crate::view::LogReader)) handed out every record before
    /// it and stops there. This build neither repairs nor cuts old files.
    #[error(
        "{} is in {}, not {}, and its batch at byte {position} (where seq {seq} should start) is damaged: {reason}; nothing was changed",
        path.display(), crate::segment::OLD_FORMAT_NAME, crate::segment::FORMAT_NAME
    )]
    OldFormatDamaged {
        /// The segment's `.log` file.
        path: PathBuf,
        /// Byte position of the damaged batch.
        position: u64,
        /// The seq the batch there should carry.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A valid batch holds a record a [`Message`](krabka_protocol::Message) cannot represent
    /// exactly (a null value, a header with a null value, a control or transactional batch):
    /// the decoded read stops there instead of changing it. The raw-batch read serves it as
    /// stored.
    #[error(
        "record of seq {seq} in {} (batch at byte {position}) cannot be read as a Message: {reason}",
        path.display()
    )]
    NotAMessage {
        /// The segment's `.log` file (empty for bytes decoded without a file).
        path: PathBuf,
        /// Byte position of the batch.
        position: u64,
        /// The record's seq (the batch's first for a batch-wide reason).
        seq: u64,
        /// What it holds.
        reason: String,
    },
    /// A batch is compressed with a codec this build does not have (a cargo feature of this
    /// crate: `gzip`, `snappy`, `lz4`, `zstd`). Not damage: nothing was cut or changed, and a
    /// build with the codec reads it.
    #[error(
        "the batch at byte {position} of {} is compressed with {codec}, which this build lacks (enable the `{codec}` feature of krabka-storage); nothing was changed",
        path.display()
    )]
    CodecMissing {
        /// The segment's `.log` file (empty for bytes decoded without a file).
        path: PathBuf,
        /// Byte position of the batch.
        position: u64,
        /// The codec's name.
        codec: &'static str,
    },
    /// A seq past `i64::MAX`, which a record batch's offset cannot hold.
    #[error("seq {seq} is past the largest a record batch holds ({})", i64::MAX)]
    SeqOutOfRange {
        /// The seq.
        seq: u64,
    },
    /// Messages could not be encoded as a record batch.
    #[error("cannot encode the record of seq {seq} as a record batch: {reason}")]
    Encode {
        /// The seq of the batch's first record.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// A raw batch given to an append is not a valid v2 record batch, or not one this log can
    /// store; nothing was appended.
    #[error("invalid record batch at byte {at}: {field}: {reason}")]
    InvalidBatch {
        /// The header or record field at fault (`magic`, `crc`, `recordCount`, ...).
        field: &'static str,
        /// Byte position of the fault within the given bytes.
        at: usize,
        /// What is wrong.
        reason: String,
    },
    /// A read started outside `first_seq()..=last_seq() + 1`.
    #[error("seq {seq} is out of range: the log holds {first}..={last}")]
    OutOfRange {
        /// The requested seq.
        seq: u64,
        /// The log's first seq at the time.
        first: u64,
        /// The log's last seq at the time.
        last: u64,
    },
    /// Stored bytes are invalid (bad length, CRC, seq, message or index).
    #[error("corrupt data in {}: at byte {position}: {reason}", path.display())]
    Corrupt {
        /// The file (empty for the pure functions of [`segment`](crate::segment), which see only bytes).
        path: PathBuf,
        /// Byte position of the problem in that file (or buffer).
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// An I/O operation failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A message's encoding is larger than [`Options::max_message_bytes`](crate::Options::max_message_bytes).
    #[error("message of {size} bytes exceeds max_message_bytes ({max})")]
    MessageTooLarge {
        /// Encoded size of the message.
        size: u64,
        /// The configured limit.
        max: u64,
    },
    /// An fsync or write failed earlier; the log refuses appends and syncs because the OS may
    /// have dropped unsynced data. Close and reopen it (recovery finds what is really on disk).
    /// `cause` is that first failure (a full disk says "No space left on device").
    #[error(
        "the log in {} is poisoned by an earlier failed write or fsync ({}); reopen it",
        dir.display(),
        cause.message
    )]
    Poisoned {
        /// The log's directory.
        dir: PathBuf,
        /// The failure that poisoned the log.
        cause: Box<PoisonCause>,
    },
    /// The [`Options`](crate::Options) are invalid.
    #[error("invalid options: {field} {reason}")]
    InvalidOptions {
        /// The name of the offending [`Options`](crate::Options) field.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// Another `Log` (in this or another process) has the log directory open: it holds the
    /// exclusive lock on the directory's lock file ([`LOCK_FILE_NAME`]). Only one writer may
    /// open a log at a time; close the other one first.
    #[error(
        "the log in {} is already open (its lock file {LOCK_FILE_NAME} is held by another Log or process)",
        dir.display()
    )]
    Locked {
        /// The log's directory.
        dir: PathBuf,
    },
    /// Open found a bad batch that is not a torn tail: valid records follow it, or it is in a
    /// closed segment. Nothing was changed. Records `first_seq..=last_seq` are at stake (they
    /// follow the damage or are missing); open with [`RecoveryMode::Repair`](crate::RecoveryMode::Repair)
    /// (`krabka repair DIR`) to move the damaged bytes aside and record the hole.
    #[error(
        "damaged segment {}: bad batch at byte {position} ({reason}); records {first_seq}..={last_seq} are at stake; nothing was changed (an open with RecoveryMode::Repair moves the damaged bytes aside)",
        path.display()
    )]
    Damaged {
        /// The damaged `.log` file.
        path: PathBuf,
        /// Byte position of the first bad batch.
        position: u64,
        /// What is wrong there.
        reason: String,
        /// First seq at stake.
        first_seq: u64,
        /// Last seq at stake.
        last_seq: u64,
    },
    /// Under [`RecoveryMode::Strict`](crate::RecoveryMode::Strict): the active segment ends in a damaged tail that no valid
    /// batch follows (what a torn write leaves). Nothing was changed.
    #[error(
        "torn tail in {}: {bytes_after} bytes from byte {position} do not hold a valid batch ({reason}); strict recovery refuses to cut them",
        path.display()
    )]
    TornTail {
        /// The active segment's `.log` file.
        path: PathBuf,
        /// Byte position of the first bad batch.
        position: u64,
        /// Bytes from `position` to the end of the file.
        bytes_after: u64,
        /// Whether the file ends inside that batch (its length runs past the end of the file):
        /// a write cut short, as opposed to complete bytes that fail their CRC.
        incomplete: bool,
        /// What is wrong there.
        reason: String,
    },
    /// Seqs `expected..found` are missing between two segment files: a segment was deleted or
    /// truncated, or `path` is a stray file. Nothing was changed.
    #[error(
        "seqs {expected}..={} are missing: {} ends at seq {} and {} starts at seq {found} (segment file {expected:020}.log was deleted or truncated, or the later file is stray); nothing was changed (an open with RecoveryMode::Repair records the hole)",
        found.saturating_sub(1), previous.display(), expected.saturating_sub(1), path.display()
    )]
    SeqGap {
        /// The segment file before the gap.
        previous: PathBuf,
        /// The segment file after the gap.
        path: PathBuf,
        /// The seq the next segment should start at.
        expected: u64,
        /// The seq it starts at.
        found: u64,
    },
    /// A segment file starts at a seq the previous segment already holds (a stray or copied
    /// file). Nothing was changed.
    #[error(
        "{} starts at seq {found} but {} already holds seqs up to {}; nothing was changed (an open with RecoveryMode::Repair moves the overlapping file aside)",
        path.display(), previous.display(), expected.saturating_sub(1)
    )]
    SeqOverlap {
        /// The segment file before.
        previous: PathBuf,
        /// The overlapping segment file.
        path: PathBuf,
        /// The seq it should start at.
        expected: u64,
        /// The seq it starts at.
        found: u64,
    },
    /// A read reached seqs that a repair moved aside (or found missing): an explicit hole.
    #[error(
        "seqs {first_seq}..={last_seq} are not in the log: a repair moved them aside (see {})",
        path.display()
    )]
    Quarantined {
        /// First seq of the hole.
        first_seq: u64,
        /// Last seq of the hole.
        last_seq: u64,
        /// The hole's marker file in the quarantine directory.
        path: PathBuf,
    },
    /// [`Log::accept_holes`](crate::Log::accept_holes) named a seq that no explicit hole of the log holds.
    #[error("seq {seq} of the log in {} is not in a hole a repair recorded: {reason}", dir.display())]
    NotAHole {
        /// The log's directory.
        dir: PathBuf,
        /// The seq.
        seq: u64,
        /// The holes the log has.
        reason: String,
    },
    /// [`Log::start_at`](crate::Log::start_at) on a log that holds records.
    #[error(
        "the log in {} holds records up to seq {last_seq}; only an empty log can start at a new seq",
        dir.display()
    )]
    NotEmpty {
        /// The log's directory.
        dir: PathBuf,
        /// Its last seq.
        last_seq: u64,
    },
    /// [`Log::start_at`](crate::Log::start_at) with a seq below the next one the log would assign (seqs never go
    /// back).
    #[error("cannot start the log at seq {seq}: its next seq is already {next_seq}")]
    InvalidStart {
        /// The requested seq.
        seq: u64,
        /// The log's next seq.
        next_seq: u64,
    },
    /// The log path exists and is not a directory.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The path given to [`Log::open`](crate::Log::open).
        path: PathBuf,
    },
    /// A [`LogReader`](crate::view::LogReader) was asked for a seq below the first one the
    /// log directory holds (seq 0, or seqs retention deleted or a remote tier holds).
    #[error("seq {seq} is below the first seq {first} of the log in {}", dir.display())]
    BelowStart {
        /// The log's directory.
        dir: PathBuf,
        /// The requested seq.
        seq: u64,
        /// The first seq its segment files hold.
        first: u64,
    },
    /// A read met a batch that is not valid (bad length, CRC, message, or not the seq that
    /// follows) where the batch of `seq` should start; every record before it was delivered.
    #[error(
        "bad batch in {} at byte {position} (where the batch of seq {seq} should start): {reason}",
        path.display()
    )]
    BadBatch {
        /// The segment's `.log` file.
        path: PathBuf,
        /// Byte position of the bad batch.
        position: u64,
        /// The seq the batch there should carry.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A closed segment (one a later segment follows) ends inside a batch: the file was
    /// truncated or torn.
    #[error(
        "closed segment {} ends inside a batch at byte {position} ({bytes} bytes of the batch of seq {seq})",
        path.display()
    )]
    CutShort {
        /// The segment's `.log` file.
        path: PathBuf,
        /// Where the incomplete batch starts.
        position: u64,
        /// Bytes from there to the end of the file.
        bytes: u64,
        /// The seq of the batch that is cut short.
        seq: u64,
    },
    /// A closed segment holds no record, but seqs `expected..found` should be in it (the next
    /// segment starts at `found`).
    #[error(
        "closed segment {} is empty but must hold seqs {expected}..={} ({} starts at seq {found})",
        path.display(), found.saturating_sub(1), next.display()
    )]
    EmptySegment {
        /// The empty segment's `.log` file.
        path: PathBuf,
        /// The next segment's `.log` file.
        next: PathBuf,
        /// The first seq the empty segment should hold.
        expected: u64,
        /// The base seq of the next segment.
        found: u64,
    },
    /// The newest segment ends below the log's recovery point
    /// ([`RECOVERY_POINT_FILE_NAME`](crate::RECOVERY_POINT_FILE_NAME)): records the log held,
    /// synced, are missing (a truncated or torn file, or a deleted newer segment).
    #[error(
        "{} ends at byte {position}, but the log held every seq up to {recovery_point}: records {first_seq}..={recovery_point} are missing",
        path.display()
    )]
    EndsBelowRecoveryPoint {
        /// The newest segment's `.log` file.
        path: PathBuf,
        /// Where its records end.
        position: u64,
        /// The first missing seq.
        first_seq: u64,
        /// The recovery point: the last missing seq.
        recovery_point: u64,
    },
    /// A segment file became shorter than the position a reader had reached in it (another
    /// process truncated it).
    #[error(
        "segment {} shrank to {len} bytes while it was read at byte {position}",
        path.display()
    )]
    Shrank {
        /// The segment's `.log` file.
        path: PathBuf,
        /// Its length now.
        len: u64,
        /// Where the reader was.
        position: u64,
    },
}

/// The failure that poisoned a log ([`Error::Poisoned`]): the first failed write or fsync, as it
/// was reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoisonCause {
    /// The kind of that I/O error (for example [`io::ErrorKind::StorageFull`] for a full
    /// disk); [`io::ErrorKind::Other`] when the failure was not an I/O error.
    pub kind: io::ErrorKind,
    /// The failure's message, naming the file and the operating system's error.
    pub message: String,
}

impl PoisonCause {
    /// The cause recorded for `e`.
    pub(crate) fn of(e: &Error) -> PoisonCause {
        let kind = match e {
            Error::Io { source, .. } => source.kind(),
            Error::Poisoned { cause, .. } => cause.kind,
            _ => io::ErrorKind::Other,
        };
        PoisonCause {
            kind,
            message: match e {
                Error::Poisoned { cause, .. } => cause.message.clone(),
                other => other.to_string(),
            },
        }
    }
}

impl Error {
    pub(crate) fn io(path: &Path, source: io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
