//! Who owns a partition in the remote tier: its **identity record** and its **writer epochs**,
//! the objects that let the bucket say which incarnation of a log is live, so that no command
//! has to guess.
//!
//! Both live in the partition's directory beside its segments ([`layout::identity_key`],
//! [`layout::epoch_key`]) and are written **create-only** ([`OwnershipStore::create_if_absent`]:
//! S3's `If-None-Match: *`, a filesystem's no-replace `link`), so no writer ever overwrites
//! another's record:
//!
//! - The **identity record** ([`IdentityRecord`]): the partition's topic id, name, partition and
//!   the segment format it was written with. Written once, by the first writer.
//! - One **epoch record** per writer incarnation ([`EpochRecord`]): epoch `N` (1, 2, ...), the
//!   first seq it may copy (`start_seq`), a random incarnation id, when and by whom it was
//!   claimed. A writer takes over a partition by creating the record of the next epoch above
//!   every one it lists; when two race, exactly one creation succeeds and the other lists
//!   again. The live writer is the one holding the highest epoch: before each copy and each
//!   delete a writer checks that epoch `N + 1` does not exist and that epoch `N` is still its
//!   own ([`check_epoch`]), and stops with a fenced error otherwise.
//!
//! A copy carries its writer's epoch ([`RemoteLogSegmentMetadata::writer_epoch`], in its
//! manifest). Whatever a fenced writer managed to copy between a takeover and its next check is
//! decided by the lineage, as Kafka decides by leader epochs: a copy by epoch `e` holding seqs at
//! or above the `start_seq` of a later epoch is superseded ([`superseding_epoch`]), never read.
//!
//! A store that accepts the conditional header and ignores it (some S3-compatible servers do)
//! would let two claims of one epoch both succeed: [`probe`] finds out by creating one key
//! twice.
//!
//! ```text
//! record: magic "KROW" | version u8 (=1) | kind u8 (1 identity, 2 epoch) | 2 zero bytes
//!         | body length u32 | body | crc32 u32 (of every byte before it)
//! identity body: topic id [16] | partition i32 | name length u32 | name | format u16
//!                | created ms i64
//! epoch body:    epoch u64 | start seq u64 | incarnation [16] | claimed ms i64
//!                | claimant length u32 | claimant (UTF-8)
//! ```
//! All integers little-endian; specified in `docs/format.md`.
//!
//! ```
//! use krabka_remote_storage::*;
//! use krabka_remote_storage::ownership::{EpochRecord, IdentityRecord};
//!
//! let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
//! let identity = IdentityRecord::new(tp.clone(), 1_700_000_000_000);
//! assert_eq!(IdentityRecord::decode(&identity.encode(), "k")?, identity);
//! let epoch = EpochRecord::new(3, 1001, Uuid::new_v4(), 1_700_000_000_000, "host-a:/data/log");
//! assert_eq!(EpochRecord::decode(&epoch.encode(), "k")?, epoch);
//! # Ok::<(), RemoteStorageError>(())
//! ```

use uuid::Uuid;

use crate::error::RemoteStorageError;
use crate::layout;
use crate::model::{RemoteLogSegmentMetadata, TopicIdPartition};
use crate::recovery::RemoteSegmentLister;

mod conditional;
pub(crate) mod framing;

pub use conditional::ConditionalRead;

use framing::{Corrupt, Reader, corrupt_at, len_u32};

/// The first four bytes of every ownership record.
pub const RECORD_MAGIC: &[u8; 4] = b"KROW";
/// The record format version written.
pub const RECORD_VERSION: u8 = 1;
/// Kind byte of an [`IdentityRecord`].
const KIND_IDENTITY: u8 = 1;
/// Kind byte of an [`EpochRecord`].
const KIND_EPOCH: u8 = 2;
/// Magic, version, kind, reserved bytes and body length.
const HEADER_LEN: usize = 4 + 1 + 1 + 2 + 4;
/// The largest record [`IdentityRecord::decode`] and [`EpochRecord::decode`] accept: far
/// above any real one. ([`read_record`] reads the whole object before it checks the size.)
pub const MAX_RECORD_LEN: usize = 4096;
/// The longest claimant description kept in an [`EpochRecord`], in bytes (longer ones are cut
/// at a character boundary).
pub const MAX_CLAIMANT_LEN: usize = 1024;

/// The segment format of krabka's old per-record frames, as an [`IdentityRecord`] records it:
/// copies in it are not read by this build.
pub const LOG_FORMAT_KRABKA_FRAMES: u16 = 1;

/// The segment format of Kafka v2 record batches (`docs/format.md`, "Segment log"), the one
/// this build writes and reads, as an [`IdentityRecord`] records it.
pub const LOG_FORMAT_KAFKA_BATCHES: u16 = 2;

/// What a store beyond the [`RemoteStorageManager`](crate::RemoteStorageManager) SPI provides
/// for ownership: a listing and small reads ([`RemoteSegmentLister`]), a **create-only**
/// write, and the whole-object overwrite and conditional read of the partition head
/// ([`crate::head`]). Keys are relative to the backend's root or prefix.
pub trait OwnershipStore: RemoteSegmentLister {
    /// Writes `bytes` under `key` only if no object is there: `Ok(true)` when this call created
    /// it, `Ok(false)` when an object was there already (S3: 412 Precondition Failed or 409;
    /// a filesystem: the no-replace link failed with `EEXIST`). The object appears whole or not
    /// at all.
    ///
    /// # Errors
    /// A backend error.
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError>;

    /// Writes `bytes` under `key`, replacing any object there, whole or not at all.
    ///
    /// # Errors
    /// A backend error.
    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError>;

    /// Reads `key` unless its version is still `known` (a version string an earlier call
    /// returned): [`ConditionalRead::Unchanged`] without its bytes, [`ConditionalRead::Absent`]
    /// when there is no object. The read is bounded: never more than `max_len + 1` bytes.
    ///
    /// # Errors
    /// A backend error; [`RemoteStorageError::Corrupt`] naming `key` for an object larger than
    /// `max_len`.
    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError>;
}

/// A partition's identity record: which partition its directory holds, and in what format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityRecord {
    /// The partition.
    pub partition: TopicIdPartition,
    /// The segment format its copies are written in ([`LOG_FORMAT_KAFKA_BATCHES`], or
    /// [`LOG_FORMAT_KRABKA_FRAMES`] for a partition an older build created).
    pub log_format: u16,
    /// When it was first written (ms since the epoch).
    pub created_ms: i64,
}

impl IdentityRecord {
    /// The identity of `partition` in krabka's current format, created at `created_ms`.
    pub fn new(partition: TopicIdPartition, created_ms: i64) -> Self {
        Self {
            partition,
            log_format: LOG_FORMAT_KAFKA_BATCHES,
            created_ms,
        }
    }

    /// Checks that this build reads and writes the partition's segment format.
    ///
    /// # Errors
    /// [`RemoteStorageError::UnsupportedFormat`] naming `location` and the format, for a
    /// partition whose copies are in another (an older build's per-record frames, or a format
    /// a newer build introduced): its segments are never read as this build's.
    pub fn check_format(&self, location: &str) -> Result<(), RemoteStorageError> {
        if self.log_format == LOG_FORMAT_KAFKA_BATCHES {
            return Ok(());
        }
        let name = match self.log_format {
            LOG_FORMAT_KRABKA_FRAMES => "krabka's old per-record frames (format 1)".to_owned(),
            other => format!("segment format {other}"),
        };
        Err(RemoteStorageError::UnsupportedFormat {
            location: location.to_owned(),
            format: name,
        })
    }

    /// Encodes the record.
    pub fn encode(&self) -> Vec<u8> {
        let tp = &self.partition;
        let mut body = Vec::with_capacity(64 + tp.topic().len());
        body.extend_from_slice(tp.topic_id().as_bytes());
        body.extend_from_slice(&tp.partition().to_le_bytes());
        body.extend_from_slice(&len_u32(tp.topic().len()).to_le_bytes());
        body.extend_from_slice(tp.topic().as_bytes());
        body.extend_from_slice(&self.log_format.to_le_bytes());
        body.extend_from_slice(&self.created_ms.to_le_bytes());
        frame(KIND_IDENTITY, &body)
    }

    /// Decodes and checks a record read from `location` (named in the error).
    ///
    /// # Errors
    /// [`RemoteStorageError::Corrupt`] naming `location` and what is wrong.
    pub fn decode(bytes: &[u8], location: &str) -> Result<Self, RemoteStorageError> {
        let corrupt = corrupt_at(location, "identity record");
        let mut r = Reader::new(unframe(bytes, KIND_IDENTITY, &corrupt)?);
        let id = Uuid::from_bytes(r.array::<16>("topic id", &corrupt)?);
        let partition = i32::from_le_bytes(r.array("partition", &corrupt)?);
        let name_len = u32::from_le_bytes(r.array("name length", &corrupt)?) as usize;
        let name = std::str::from_utf8(r.take(name_len, "name", &corrupt)?)
            .map_err(|_| corrupt("the topic name is not UTF-8".to_owned()))?
            .to_owned();
        let log_format = u16::from_le_bytes(r.array("format", &corrupt)?);
        let created_ms = i64::from_le_bytes(r.array("created time", &corrupt)?);
        r.end(&corrupt)?;
        let tp = TopicIdPartition::new(id, name, partition);
        tp.validate()
            .map_err(|e| corrupt(format!("it names an invalid partition: {e}")))?;
        Ok(Self {
            partition: tp,
            log_format,
            created_ms,
        })
    }
}

/// One writer epoch of a partition: who claimed it, when, and from which seq it copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochRecord {
    /// The epoch (1, 2, ...).
    pub epoch: u64,
    /// The first seq this epoch may copy: copies by earlier epochs holding seqs at or above it
    /// are superseded ([`superseding_epoch`]).
    pub start_seq: u64,
    /// A random id of the claiming incarnation: the writer recognises its own record by it.
    pub incarnation: Uuid,
    /// When it was claimed (ms since the epoch, the claimant's clock).
    pub claimed_ms: i64,
    /// Who claimed it, for humans: host, process and log directory.
    pub claimant: String,
}

impl EpochRecord {
    /// A record of `epoch`; `claimant` is cut to [`MAX_CLAIMANT_LEN`] bytes.
    pub fn new(
        epoch: u64,
        start_seq: u64,
        incarnation: Uuid,
        claimed_ms: i64,
        claimant: impl Into<String>,
    ) -> Self {
        let mut claimant = claimant.into();
        if claimant.len() > MAX_CLAIMANT_LEN {
            let mut cut = MAX_CLAIMANT_LEN;
            while !claimant.is_char_boundary(cut) {
                cut -= 1;
            }
            claimant.truncate(cut);
        }
        Self {
            epoch,
            start_seq,
            incarnation,
            claimed_ms,
            claimant,
        }
    }

    /// Encodes the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(48 + self.claimant.len());
        body.extend_from_slice(&self.epoch.to_le_bytes());
        body.extend_from_slice(&self.start_seq.to_le_bytes());
        body.extend_from_slice(self.incarnation.as_bytes());
        body.extend_from_slice(&self.claimed_ms.to_le_bytes());
        body.extend_from_slice(&len_u32(self.claimant.len()).to_le_bytes());
        body.extend_from_slice(self.claimant.as_bytes());
        frame(KIND_EPOCH, &body)
    }

    /// Decodes and checks a record read from `location` (named in the error).
    ///
    /// # Errors
    /// [`RemoteStorageError::Corrupt`] naming `location` and what is wrong (epoch 0 included).
    pub fn decode(bytes: &[u8], location: &str) -> Result<Self, RemoteStorageError> {
        let corrupt = corrupt_at(location, "epoch record");
        let mut r = Reader::new(unframe(bytes, KIND_EPOCH, &corrupt)?);
        let epoch = u64::from_le_bytes(r.array("epoch", &corrupt)?);
        let start_seq = u64::from_le_bytes(r.array("start seq", &corrupt)?);
        let incarnation = Uuid::from_bytes(r.array::<16>("incarnation", &corrupt)?);
        let claimed_ms = i64::from_le_bytes(r.array("claimed time", &corrupt)?);
        let len = u32::from_le_bytes(r.array("claimant length", &corrupt)?) as usize;
        let claimant = std::str::from_utf8(r.take(len, "claimant", &corrupt)?)
            .map_err(|_| corrupt("the claimant is not UTF-8".to_owned()))?
            .to_owned();
        r.end(&corrupt)?;
        if epoch == 0 {
            return Err(corrupt("epoch 0 is never claimed".to_owned()));
        }
        Ok(Self {
            epoch,
            start_seq,
            incarnation,
            claimed_ms,
            claimant,
        })
    }
}

/// The epoch, among `epochs`, that supersedes a copy made by `writer_epoch` ending at
/// `end_seq`: the lowest later epoch whose `start_seq` is at or below `end_seq` (it took the
/// partition over with the copy's seqs still ahead of it). `None`: the copy belongs to the
/// lineage. A copy with writer epoch 0 (unknown: made without ownership, by a version before
/// writer epochs, or rebuilt from its objects after its manifest was lost) is never superseded
/// this way; copy order decides for it. Pure.
pub fn superseding_epoch(
    writer_epoch: u64,
    end_seq: u64,
    epochs: &[EpochRecord],
) -> Option<&EpochRecord> {
    if writer_epoch == 0 {
        return None;
    }
    epochs
        .iter()
        .filter(|e| e.epoch > writer_epoch && e.start_seq <= end_seq)
        .min_by_key(|e| e.epoch)
}

/// [`superseding_epoch`] for a segment's metadata.
pub fn superseded_by<'a>(
    metadata: &RemoteLogSegmentMetadata,
    epochs: &'a [EpochRecord],
) -> Option<&'a EpochRecord> {
    superseding_epoch(metadata.writer_epoch(), metadata.end_offset(), epochs)
}

/// Where a writer holding `epoch` (with `incarnation`) stands, as [`check_epoch`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EpochCheck {
    /// Epoch `epoch` is the writer's own and no later one exists.
    Current,
    /// A later epoch exists (or `epoch`'s record names another incarnation): the writer is
    /// fenced. The record found.
    Fenced(EpochRecord),
    /// Epoch `epoch`'s record is gone (deleted by hand, or lost) and no later one exists.
    OwnRecordMissing,
}

/// Reads the record of epoch `epoch + 1` (it must be absent) and of `epoch` (it must name
/// `incarnation`) below `partition_dir`: two small reads.
///
/// # Errors
/// A backend error, or [`RemoteStorageError::Corrupt`] for a record that does not decode (a
/// writer that cannot prove its epoch copies nothing).
pub fn check_epoch(
    store: &dyn OwnershipStore,
    partition_dir: &str,
    epoch: u64,
    incarnation: Uuid,
) -> Result<EpochCheck, RemoteStorageError> {
    let next_key = layout::epoch_key(partition_dir, epoch.saturating_add(1));
    if let Some(bytes) = read_record(store, &next_key)? {
        return Ok(EpochCheck::Fenced(EpochRecord::decode(&bytes, &next_key)?));
    }
    let own_key = layout::epoch_key(partition_dir, epoch);
    match read_record(store, &own_key)? {
        None => Ok(EpochCheck::OwnRecordMissing),
        Some(bytes) => {
            let record = EpochRecord::decode(&bytes, &own_key)?;
            if record.epoch != epoch {
                return Err(RemoteStorageError::Corrupt {
                    location: own_key,
                    reason: format!("epoch record: it holds epoch {}", record.epoch),
                });
            }
            if record.incarnation == incarnation {
                Ok(EpochCheck::Current)
            } else {
                Ok(EpochCheck::Fenced(record))
            }
        }
    }
}

/// Every epoch record of the partition in `partition_dir`, oldest first, read in full. A
/// record that does not decode is returned as an error naming it when `strict`; otherwise it is
/// skipped and its epoch number (from its key) returned in the second list, so a claimant still
/// claims above it.
///
/// # Errors
/// A backend error; a corrupt record when `strict`.
pub fn list_epochs(
    store: &dyn RemoteSegmentLister,
    partition_dir: &str,
    strict: bool,
) -> Result<(Vec<EpochRecord>, Vec<u64>), RemoteStorageError> {
    let mut keys = Vec::new();
    let prefix = format!("{partition_dir}/");
    store.list_partition(partition_dir, &mut |obj| {
        let name = obj.key.strip_prefix(&prefix).unwrap_or(&obj.key);
        if let Some(epoch) = layout::parse_epoch_name(name) {
            keys.push((epoch, obj.key));
        }
        Ok(())
    })?;
    let mut records = Vec::with_capacity(keys.len());
    let mut unreadable = Vec::new();
    for (epoch, _, decoded) in read_epochs(store, keys)? {
        match decoded {
            Ok(r) => records.push(r),
            Err(e) if strict => return Err(e),
            Err(_) => unreadable.push(epoch),
        }
    }
    Ok((records, unreadable))
}

/// One epoch record read by [`read_epochs`]: the epoch its key names, the key, and the
/// record or why it is unusable.
pub type ReadEpoch = (u64, String, Result<EpochRecord, RemoteStorageError>);

/// Reads the epoch records a listing found (`(epoch, key)` pairs, see
/// [`layout::parse_epoch_name`]), oldest first: each decoded and checked against the epoch its
/// key names. Records gone since the listing are left out.
///
/// # Errors
/// A backend error other than not found.
pub fn read_epochs(
    store: &dyn RemoteSegmentLister,
    mut keys: Vec<(u64, String)>,
) -> Result<Vec<ReadEpoch>, RemoteStorageError> {
    keys.sort();
    let mut out = Vec::with_capacity(keys.len());
    for (epoch, key) in keys {
        let bytes = match read_record(store, &key) {
            Ok(Some(bytes)) => bytes,
            // Listed, then gone: a hand delete racing the listing; nothing to hold.
            Ok(None) => continue,
            // Too large to be a record: unusable, like one that does not decode.
            Err(e @ RemoteStorageError::Corrupt { .. }) => {
                out.push((epoch, key, Err(e)));
                continue;
            }
            Err(e) => return Err(e),
        };
        let decoded = EpochRecord::decode(&bytes, &key).and_then(|r| {
            if r.epoch == epoch {
                Ok(r)
            } else {
                Err(RemoteStorageError::Corrupt {
                    location: key.clone(),
                    reason: format!("epoch record: it holds epoch {}", r.epoch),
                })
            }
        });
        out.push((epoch, key, decoded));
    }
    Ok(out)
}

/// Reads a small record, `None` when it does not exist. Records larger than
/// [`MAX_RECORD_LEN`] are corrupt.
///
/// # Errors
/// A backend error other than not found.
pub fn read_record(
    store: &dyn RemoteSegmentLister,
    key: &str,
) -> Result<Option<Vec<u8>>, RemoteStorageError> {
    match store.read_object_bounded(key, MAX_RECORD_LEN) {
        Err(RemoteStorageError::Corrupt { reason, .. }) => Err(RemoteStorageError::Corrupt {
            location: key.to_owned(),
            reason: format!("ownership record: {reason}"),
        }),
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `e` says the object does not exist.
fn is_absent(e: &RemoteStorageError) -> bool {
    match e {
        RemoteStorageError::SegmentNotFound { .. } => true,
        RemoteStorageError::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// What [`probe`] found out about a store's create-only writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeOutcome {
    /// The second create of one key was refused: create-only writes are enforced.
    Enforced,
    /// The second create of one key succeeded too: the store ignores the condition, and two
    /// writers could both claim one epoch.
    Ignored,
}

/// Creates a fresh key below `partition_dir` twice and removes it: the second create must be
/// refused. Three requests and a delete.
///
/// # Errors
/// A backend error; [`RemoteStorageError::InvalidArgument`] when the first create of the fresh
/// key reports it as existing (the store's create-only writes are not usable).
pub fn probe(
    store: &dyn OwnershipStore,
    partition_dir: &str,
) -> Result<ProbeOutcome, RemoteStorageError> {
    let key = format!("{partition_dir}/{}{}", layout::PROBE_PREFIX, Uuid::new_v4());
    if !store.create_if_absent(&key, b"krabka probe 1")? {
        return Err(RemoteStorageError::invalid_argument(format!(
            "the store reports a fresh key {key} as existing: its create-only writes are not usable"
        )));
    }
    let second = store.create_if_absent(&key, b"krabka probe 2");
    let removed = store.delete_object(&key);
    let outcome = if second? {
        ProbeOutcome::Ignored
    } else {
        ProbeOutcome::Enforced
    };
    removed?;
    Ok(outcome)
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len() + 4);
    out.extend_from_slice(RECORD_MAGIC);
    out.push(RECORD_VERSION);
    out.push(kind);
    out.extend_from_slice(&[0; 2]);
    out.extend_from_slice(&len_u32(body.len()).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn unframe<'a>(
    bytes: &'a [u8],
    kind: u8,
    corrupt: &Corrupt<'_>,
) -> Result<&'a [u8], RemoteStorageError> {
    if bytes.len() > MAX_RECORD_LEN {
        return Err(corrupt(format!(
            "{} bytes, over the {MAX_RECORD_LEN}-byte limit",
            bytes.len()
        )));
    }
    let Some((content, crc_bytes)) = bytes.split_last_chunk::<4>() else {
        return Err(corrupt(format!(
            "{} bytes, shorter than a record",
            bytes.len()
        )));
    };
    if content.len() < HEADER_LEN {
        return Err(corrupt(format!(
            "{} bytes, shorter than a record",
            bytes.len()
        )));
    }
    let stored = u32::from_le_bytes(*crc_bytes);
    let computed = crc32fast::hash(content);
    if stored != computed {
        return Err(corrupt(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        )));
    }
    if content.get(..4) != Some(RECORD_MAGIC.as_slice()) {
        return Err(corrupt("bad magic".to_owned()));
    }
    match content.get(4).copied() {
        Some(RECORD_VERSION) => {}
        v => return Err(corrupt(format!("unsupported version {}", v.unwrap_or(0)))),
    }
    match content.get(5).copied() {
        Some(k) if k == kind => {}
        k => {
            return Err(corrupt(format!(
                "record kind {} where {kind} was expected",
                k.unwrap_or(0)
            )));
        }
    }
    if content.get(6..8) != Some([0u8; 2].as_slice()) {
        return Err(corrupt("reserved bytes are not zero".to_owned()));
    }
    let len = content
        .get(8..12)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0) as usize;
    let body = content.get(HEADER_LEN..).unwrap_or_default();
    if len != body.len() {
        return Err(corrupt(format!(
            "body length {len} but {} body bytes",
            body.len()
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests;
