//! Rebuilding a partition's metadata from the remote tier alone, using the
//! [`manifest`](crate::manifest::encode) every complete copy has: the part every backend
//! provides ([`RemoteSegmentLister`]) and the part that only reads ([`scan`]). Recording the
//! result in durable metadata and setting up the local log is `krabka_tiering::recovery`.
//!
//! [`scan`] lists the partition's objects through a [`RemoteSegmentLister`] (each backend
//! implements it: a directory read on a filesystem, paginated `ListObjectsV2` on S3), reads
//! the manifests with bounded parallelism, validates them, and chooses the segments that form
//! the log. It reports everything it ignored, and why; it changes nothing.
//!
//! Which segments form the log:
//! 1. **Whole.** The manifest decodes (checksums, version), names the partition and the
//!    segment its key names, says the copy is complete ([`ManifestState`](crate::manifest::ManifestState)),
//!    the `.log` object exists with exactly the manifest's size, and the offset, time and
//!    leader-epoch indexes exist. A copy in progress, an abandoned copy and a delete in progress
//!    are never used. Objects of a segment with no manifest at all (a lost manifest) are used
//!    only when [`scan_with`]'s rebuild gives their metadata back; they are never orphans.
//! 2. **One lineage.** Copies a later writer epoch took the partition over from are dropped
//!    ([`IgnoreReason::FencedOut`]); the rest are replayed in copy order (writer epoch, the
//!    manifest's event time, then start seq, then id). A copy overlapping seqs already held by earlier copies starts
//!    a newer history from its start seq (a newer incarnation of the log, or a re-copy after
//!    a leader change): every earlier copy holding seqs at or after its start is superseded.
//! 3. **Contiguous.** The log is the run of those segments ending at the highest seq in which
//!    leader epochs never go back. A hole between two whole segments (a damaged, lost or
//!    unrebuildable segment) costs its own seqs only: it is reported
//!    ([`RemoteScan::holes`]) and the segments on both sides are recovered: they are the only
//!    surviving copies of their records (a writer killed with copies in flight may leave a
//!    younger copy complete above an unfinished one).
//! 4. **Openable.** [`RemoteScan::map_chosen`] passes each chosen segment through the caller's
//!    map (a decorator restoring its own metadata and checking it can open the segment: a
//!    transform header that is damaged, a key not given); one it cannot open is reported
//!    ([`IgnoreReason::Unreadable`]) and costs its own seqs only, like a damaged segment.
//! 5. **Used seqs.** [`RemoteScan::claimed_end`], after which a recovered log continues, is the
//!    highest seq the bucket shows used ([`scan_with_head`] also reads the partition head,
//!    before the listing): the whole segments, the readable manifests of copies not recovered,
//!    the newest epoch record's first seq, every segment a head its epoch's writer wrote lists
//!    as finished, and a segment with no usable manifest as far as the head's entry for it or
//!    its own offset index bounds it. A segment only its object names tie to seqs counts by its
//!    first seq when that lies within or right after the rest; beyond, it is a stray
//!    ([`IgnoreReason::Stray`]): reported under its own keys, never a hole. Every hole comes
//!    with what shows its seqs used ([`RemoteScan::causes`]). The rule, and why, is in
//!    `docs/tiering.md` ("Which seqs count as used").
//!
//! Memory: the listing is folded, page by page, into one small entry per segment (sizes and
//! which objects exist), which is the only time the listing is held; decoded manifests replace
//! nothing else.

use std::fmt;

use uuid::Uuid;

use crate::error::RemoteStorageError;
use crate::layout;
use crate::model::{IndexType, TopicIdPartition};

mod choose;
mod listing;
mod map;
mod scan;
mod unmanifested;
mod used;

pub use map::MapChosen;
pub use scan::{HoleCause, RemoteScan, scan, scan_with, scan_with_head};
pub use unmanifested::{Rebuild, Unmanifested};

/// One object of a listing: its key relative to the backend's root or prefix (as
/// [`layout`] makes them) and its size in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    /// The relative key, `<partition dir>/<file name>`.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// What recovery needs from a backend beyond the [`RemoteStorageManager`](crate::RemoteStorageManager)
/// SPI: listing a partition's objects, reading a small object whole, and deleting one.
/// Keys are relative to the backend's root or prefix.
pub trait RemoteSegmentLister: Send + Sync {
    /// Calls `visit` with every object whose key starts with `<partition_dir>/`, in any order,
    /// a page at a time (an implementation must not collect the whole listing first). An error
    /// from `visit` ends the listing and is returned.
    ///
    /// # Errors
    /// A backend error when listing fails, or `visit`'s error.
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError>;

    /// Calls `visit` with the name of every partition directory (first key component) below
    /// the root or prefix, a page at a time: how a partition is found when its topic id is
    /// not known.
    ///
    /// # Errors
    /// A backend error when listing fails, or `visit`'s error.
    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError>;

    /// Reads the whole object `key`.
    ///
    /// # Errors
    /// A backend error; a missing object is an error that is not retriable.
    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError>;

    /// Reads the whole object `key` when it holds at most `max_len` bytes; a larger one is
    /// [`RemoteStorageError::Corrupt`] naming it. For the small objects readers of the bucket
    /// read (manifests, ownership records): a hostile or damaged object of gigabytes must not
    /// be held. The provided version reads the object whole before it checks: the backends of
    /// this workspace override it to hold at most `max_len + 1` bytes.
    ///
    /// # Errors
    /// As [`read_object`](Self::read_object); `Corrupt` for an object over `max_len` bytes.
    fn read_object_bounded(
        &self,
        key: &str,
        max_len: usize,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        let bytes = self.read_object(key)?;
        if bytes.len() > max_len {
            return Err(object_too_large(key, bytes.len() as u64, max_len));
        }
        Ok(bytes)
    }

    /// Deletes the object `key`; absent is success.
    ///
    /// # Errors
    /// A backend error.
    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError>;
}

/// The error of a small object over the `max_len` bytes its reader accepts
/// ([`RemoteSegmentLister::read_object_bounded`]): `len` is its size, or a lower bound.
pub fn object_too_large(key: &str, len: u64, max_len: usize) -> RemoteStorageError {
    RemoteStorageError::Corrupt {
        location: key.to_owned(),
        reason: format!("{len} bytes or more, over the {max_len}-byte limit of this object"),
    }
}

/// The partitions of topic `topic`, partition `partition` found below the root or prefix (a
/// topic id each), from the full-form partition directory names.
///
/// # Errors
/// As [`RemoteSegmentLister::list_partition_dirs`].
pub fn find_partitions(
    lister: &dyn RemoteSegmentLister,
    topic: &str,
    partition: i32,
) -> Result<Vec<TopicIdPartition>, RemoteStorageError> {
    let mut found = Vec::new();
    lister.list_partition_dirs(&mut |name| {
        if let Some(tp) = layout::parse_partition_dir(&name)
            && tp.topic() == topic
            && tp.partition() == partition
        {
            found.push(tp);
        }
        Ok(())
    })?;
    found.sort_by_key(TopicIdPartition::topic_id);
    found.dedup();
    Ok(found)
}

/// Why an object was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IgnoreReason {
    /// The name is not one the layout writes.
    UnrecognizedName,
    /// A temporary file of an interrupted write (never used): deleted with the orphans when it
    /// lies next to a segment that is complete, being deleted or abandoned; kept when nothing
    /// else of its segment exists (it may be the first object of a copy starting now).
    IncompleteCopy,
    /// A segment whose copy is in progress: its in-progress manifest was written at
    /// `started_ms` and the copy may still finish until `abandoned_at_ms`
    /// ([`manifest::copy_abandoned_at`](crate::manifest::copy_abandoned_at)). Never used, never
    /// deleted before then.
    CopyInProgress {
        /// When the copy began (the manifest's event time, ms since the epoch).
        started_ms: i64,
        /// From when a cleanup may delete it.
        abandoned_at_ms: i64,
    },
    /// A segment whose copy began at `started_ms` and was abandoned (its in-progress manifest
    /// is older than [`manifest::copy_abandoned_at`](crate::manifest::copy_abandoned_at)
    /// allows): its writer never records it as finished. Deleted with the orphans.
    AbandonedCopy {
        /// When the copy began.
        started_ms: i64,
    },
    /// A segment whose delete began (its manifest says deleting): gone for every reader.
    /// Deleted (finished) with the orphans.
    DeleteInProgress,
    /// Objects of a segment with no manifest at all: no writer leaves that (a copy writes its
    /// in-progress manifest first, a delete removes the manifest last), so the manifest was
    /// lost (or the copy was made by a version before in-progress manifests). Its objects are
    /// kept, never deleted by a cleanup; the segment is used when its manifest can be rebuilt
    /// from them (see [`scan_with`]), else reported here with why not.
    ManifestMissing(String),
    /// The manifest does not decode (checksum, version, fields).
    CorruptManifest(String),
    /// The manifest decodes but names another partition or segment than its key.
    ForeignManifest(String),
    /// The manifest's `.log` data object is missing.
    DataMissing,
    /// The `.log` data object's size is not the manifest's.
    DataWrongSize {
        /// The manifest's size.
        expected: u64,
        /// The object's size.
        found: u64,
    },
    /// A mandatory index object is missing.
    IndexMissing(IndexType),
    /// A later copy (of a newer incarnation of the log, or a re-copy) holds seqs from
    /// `at_seq` on, and this older copy holds seqs at or after it.
    Superseded {
        /// The later segment.
        by: Uuid,
        /// Where the later history starts.
        at_seq: u64,
    },
    /// A whole segment that does not join the recovered range: a hole (or a leader epoch that
    /// goes back) lies between it and the recovered end.
    NotContiguous(String),
    /// A copy by writer epoch `writer_epoch` holding seqs at or above `at_seq`, where a later
    /// writer epoch `by_epoch` took the partition over
    /// ([`ownership::superseding_epoch`](crate::ownership::superseding_epoch)): what a fenced
    /// writer copied after the takeover. Never used; deleted with the superseded copies.
    FencedOut {
        /// The copy's writer epoch.
        writer_epoch: u64,
        /// The epoch that took over.
        by_epoch: u64,
        /// The first seq of that epoch.
        at_seq: u64,
    },
    /// An ownership record (identity or writer epoch) that does not decode: reported, kept.
    /// A claimant still claims above an unreadable epoch record.
    CorruptOwnershipRecord(String),
    /// An object of a segment with no usable manifest (missing, corrupt or naming another
    /// segment) whose seqs nothing bounds (no head entry, no readable offset index) and whose
    /// first seq, taken from its name, lies beyond everything the partition head, the epoch
    /// records and the readable manifests show written (`written_to`; `None`: nothing shows
    /// any seq written). No writer is known to have used those seqs: a stray or made-up
    /// object. Reported under its own key (one entry per object), kept, never used, and never
    /// counted as used seqs (it makes no hole and does not move the recovered log's next seq).
    Stray {
        /// The highest seq the head, the epoch records and the readable manifests show
        /// written.
        written_to: Option<u64>,
        /// Why its segment is not usable.
        why: String,
    },
    /// The partition head ([`crate::head`]) that recovery cannot trust: it does not decode,
    /// is too large, names another partition, or names a writer epoch no epoch record holds
    /// (or another incarnation than its record's). Reported, kept, not used: the epoch records
    /// and the listing bound what was written.
    UnusableHead(String),
    /// A whole, chosen segment that the caller's map ([`RemoteScan::map_chosen`]) cannot
    /// open, in its words (e.g. a transforming layer: a damaged transform header, a key that
    /// was not given). Reported under its `.log` object's key; kept, never deleted; its seqs
    /// are a hole.
    Unreadable(String),
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnrecognizedName => f.write_str("not an object name the layout writes"),
            Self::IncompleteCopy => {
                f.write_str("a temporary file of an interrupted write (never used)")
            }
            Self::CopyInProgress {
                started_ms,
                abandoned_at_ms,
            } => write!(
                f,
                "a copy in progress (started at {started_ms} ms; kept until {abandoned_at_ms} ms, when it counts as abandoned)"
            ),
            Self::AbandonedCopy { started_ms } => write!(
                f,
                "an abandoned copy (started at {started_ms} ms and never finished; never used)"
            ),
            Self::DeleteInProgress => f.write_str("a delete in progress (never used)"),
            Self::ManifestMissing(why) => write!(
                f,
                "segment objects without a manifest (lost, or from an older version): kept, not used: {why}"
            ),
            Self::CorruptManifest(why) => write!(f, "corrupt manifest: {why}"),
            Self::ForeignManifest(why) => write!(f, "manifest does not match its key: {why}"),
            Self::DataMissing => f.write_str("manifest whose .log data object is missing"),
            Self::DataWrongSize { expected, found } => write!(
                f,
                "manifest says {expected} bytes of .log data, the object has {found}"
            ),
            Self::IndexMissing(t) => write!(f, "manifest whose {t} index object is missing"),
            Self::Superseded { by, at_seq } => write!(
                f,
                "superseded by the later copy {by} holding seqs from {at_seq} (an older incarnation)"
            ),
            Self::NotContiguous(why) => write!(f, "not contiguous with the recovered range: {why}"),
            Self::FencedOut {
                writer_epoch,
                by_epoch,
                at_seq,
            } => write!(
                f,
                "copied by writer epoch {writer_epoch} after writer epoch {by_epoch} took the partition over from seq {at_seq} (a fenced writer's copy)"
            ),
            Self::CorruptOwnershipRecord(why) => write!(f, "corrupt ownership record: {why}"),
            Self::Unreadable(why) => write!(f, "cannot be opened: {why}"),
            Self::Stray { written_to, why } => write!(
                f,
                "a stray object ({why}): its first seq lies beyond {}, and nothing gives its end; not a segment any writer is known to have written, not counted as used",
                written_to.map_or_else(
                    || "every seq written (the head, the epoch records and the manifests show none)".to_owned(),
                    |e| format!("seq {e}, the highest the head, the epoch records and the manifests show written")
                )
            ),
            Self::UnusableHead(why) => write!(f, "partition head not used: {why}"),
        }
    }
}

/// One object recovery did not use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredObject {
    /// Its relative key (a segment's manifest key for reasons about the whole segment; its
    /// `.log` object's key for [`IgnoreReason::Unreadable`], the object that could not be
    /// opened).
    pub key: String,
    /// Why.
    pub reason: IgnoreReason,
}
