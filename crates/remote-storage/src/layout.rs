//! The object layout shared by every backend, so a filesystem root and an S3 prefix look alike:
//!
//! ```text
//! <partition dir>/<20-digit start offset>-<segment uuid><suffix>
//! ```
//! e.g. `orders-3-5f0c.../00000000000000001000-9b1d....log`.
//!
//! The partition directory is `<topic>-<partition>-<topic id>` when that is at most
//! [`MAX_PARTITION_DIR_LEN`] bytes, which every topic name of up to 206 bytes satisfies.
//! A longer one (a topic name near Kafka's 249-character limit) would not fit in one file
//! name component of common filesystems (255 bytes), so it is shortened to
//!
//! ```text
//! <first 160 bytes of topic>-<partition>-<topic id>-<32 hex digits>
//! ```
//!
//! where the hex digits are the first 128 bits of the SHA-256 of the full
//! `<topic>-<partition>-<topic id>` name. A full name always ends with a hyphenated UUID and a
//! shortened one never does, so the two forms cannot collide; names that fit are unchanged.
//! See [`partition_dir`].
//!
//! Beside the partition directories, each tail chain ([`crate::tail`]) has a directory of its
//! own: `_tail-<chain id as 32 lowercase hex digits>/<20-digit object number>`
//! ([`tail_object_key`]). It is never a partition directory, and nothing that cleans
//! partitions lists or deletes inside it.

use sha2::{Digest, Sha256};

use crate::error::RemoteStorageError;
use crate::model::{IndexType, LOG_SUFFIX, RemoteLogSegmentMetadata, TopicIdPartition};

/// The longest partition directory name (one path component) the layout produces, in bytes:
/// below the 255-byte file name limit of common filesystems.
pub const MAX_PARTITION_DIR_LEN: usize = 254;

/// Bytes of the topic name kept, readable, in a shortened partition directory name.
const SHORT_TOPIC_LEN: usize = 160;

/// Hex digits of the SHA-256 digest that end a shortened partition directory name.
const DIGEST_HEX_LEN: usize = 32;

/// The longest file (object) name below a partition directory: the stem and the longest suffix.
const MAX_FILE_NAME_LEN: usize = 20 + 1 + 36 + 24;

/// The longest relative key (below a filesystem root or an S3 prefix) the layout produces, in
/// bytes: a partition directory, `/`, and a file name. A backend whose keys have a length limit
/// (S3: 1,024 bytes) must leave this much room after its own prefix.
pub const MAX_RELATIVE_KEY_LEN: usize = MAX_PARTITION_DIR_LEN + 1 + MAX_FILE_NAME_LEN;

/// The directory (or key prefix) of a partition, after validating its name: at most
/// [`MAX_PARTITION_DIR_LEN`] bytes, unique per topic name, partition and topic id, and stable
/// across versions (see the [module docs](self) for the rule).
///
/// # Errors
/// [`RemoteStorageError::InvalidArgument`] for a topic name that breaks Kafka's rules or a
/// negative partition: such a name could otherwise escape the backend's root.
pub fn partition_dir(tp: &TopicIdPartition) -> Result<String, RemoteStorageError> {
    tp.validate()?;
    let full = format!("{}-{}-{}", tp.topic(), tp.partition(), tp.topic_id());
    if full.len() <= MAX_PARTITION_DIR_LEN {
        return Ok(full);
    }
    let digest = Sha256::digest(full.as_bytes());
    let mut hex = String::with_capacity(DIGEST_HEX_LEN);
    for byte in digest.iter().take(DIGEST_HEX_LEN / 2) {
        hex.push_str(&format!("{byte:02x}"));
    }
    // Validated topic names are ASCII, so any byte length is a character boundary.
    let topic = tp.topic().get(..SHORT_TOPIC_LEN).unwrap_or(tp.topic());
    Ok(format!(
        "{topic}-{}-{}-{hex}",
        tp.partition(),
        tp.topic_id()
    ))
}

/// The file (object) name stem of a segment: `<20-digit start offset>-<segment uuid>`.
pub fn segment_stem(metadata: &RemoteLogSegmentMetadata) -> String {
    stem(
        metadata.start_offset(),
        metadata.remote_log_segment_id().id(),
    )
}

fn stem(start: u64, id: uuid::Uuid) -> String {
    format!("{start:020}-{id}")
}

/// The key of one of a segment's objects from its parts: `<dir>/<stem><suffix>`, where `dir`
/// is the [`partition_dir`] and `suffix` one of [`LOG_SUFFIX`], [`MANIFEST_SUFFIX`] or an
/// [`IndexType::suffix`]. The inverse of [`parse_segment_object_name`] below `dir`; for listings
/// that know a segment only by its start and uuid.
pub fn segment_object_key(dir: &str, start: u64, id: uuid::Uuid, suffix: &str) -> String {
    format!("{dir}/{}{suffix}", stem(start, id))
}

/// The relative path (key below the prefix) of a segment's `.log` data.
///
/// # Errors
/// As [`partition_dir`].
pub fn log_key(metadata: &RemoteLogSegmentMetadata) -> Result<String, RemoteStorageError> {
    file_key(metadata, LOG_SUFFIX)
}

/// The relative path (key below the prefix) of one of a segment's indexes.
///
/// # Errors
/// As [`partition_dir`].
pub fn index_key(
    metadata: &RemoteLogSegmentMetadata,
    index_type: IndexType,
) -> Result<String, RemoteStorageError> {
    file_key(metadata, index_type.suffix())
}

/// Every relative path a segment may occupy: its `.log`, each index type, and its manifest
/// last (the order a delete follows: see [`crate::manifest`]).
///
/// # Errors
/// As [`partition_dir`].
pub fn all_keys(metadata: &RemoteLogSegmentMetadata) -> Result<Vec<String>, RemoteStorageError> {
    let mut keys = data_keys(metadata)?;
    keys.push(manifest_key(metadata)?);
    Ok(keys)
}

/// A segment's `.log` and index keys: [`all_keys`] without the manifest.
///
/// # Errors
/// As [`partition_dir`].
pub fn data_keys(metadata: &RemoteLogSegmentMetadata) -> Result<Vec<String>, RemoteStorageError> {
    let mut keys = vec![log_key(metadata)?];
    for t in IndexType::ALL {
        keys.push(index_key(metadata, t)?);
    }
    Ok(keys)
}

/// Suffix of a segment's manifest (see [`crate::manifest`]): the object a copy writes first (in
/// progress) and last (complete), and a delete rewrites first (deleting) and removes last.
pub const MANIFEST_SUFFIX: &str = ".manifest";

/// The relative path (key below the prefix) of a segment's manifest.
///
/// # Errors
/// As [`partition_dir`].
pub fn manifest_key(metadata: &RemoteLogSegmentMetadata) -> Result<String, RemoteStorageError> {
    file_key(metadata, MANIFEST_SUFFIX)
}

/// Name of a partition's identity record ([`crate::ownership::IdentityRecord`]) in its directory.
pub const IDENTITY_NAME: &str = "_identity";
/// Start of the name of a writer epoch record ([`crate::ownership::EpochRecord`]):
/// `_epoch-<20-digit epoch>`.
pub const EPOCH_PREFIX: &str = "_epoch-";
/// Start of the name of the key [`crate::ownership::probe`] creates and removes.
pub const PROBE_PREFIX: &str = "_probe-";
/// Name of a partition's head ([`crate::head::PartitionHead`]) in its directory: the finished
/// segments as its writer last wrote them, rewritten whole.
pub const HEAD_NAME: &str = "_head";

/// The key of a partition's identity record: `<dir>/_identity`. Names starting with `_` never
/// collide with segment objects, whose names start with 20 digits.
pub fn identity_key(dir: &str) -> String {
    format!("{dir}/{IDENTITY_NAME}")
}

/// The key of the record of writer epoch `epoch`: `<dir>/_epoch-<20-digit epoch>`, so a
/// listing sorted by name is sorted by epoch.
pub fn epoch_key(dir: &str, epoch: u64) -> String {
    format!("{dir}/{EPOCH_PREFIX}{epoch:020}")
}

/// The key of a partition's head ([`crate::head::PartitionHead`]): `<dir>/_head`.
pub fn head_key(dir: &str) -> String {
    format!("{dir}/{HEAD_NAME}")
}

/// The epoch an epoch record's file (object) name holds, or `None` for any other name.
pub fn parse_epoch_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(EPOCH_PREFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether a file (object) name below a partition directory is one of the ownership objects
/// ([`crate::ownership`]): the identity record, an epoch record, a probe key, or the partition
/// head ([`crate::head`]), or a temporary file of one of them. Listings leave them alone:
/// never a segment's object, never an orphan.
pub fn is_ownership_name(name: &str) -> bool {
    name.starts_with('_')
        && (name.starts_with(IDENTITY_NAME)
            || name.starts_with(EPOCH_PREFIX)
            || name.starts_with(PROBE_PREFIX)
            || name.starts_with(HEAD_NAME))
}

/// Parses a partition directory name in its full form, `<topic>-<partition>-<topic id>`, back
/// into the partition. A shortened name (see [`partition_dir`]) does not hold the whole topic
/// name and gives `None`, as does any name the layout does not write.
pub fn parse_partition_dir(name: &str) -> Option<TopicIdPartition> {
    let id_at = name.len().checked_sub(36)?;
    let id_text = name.get(id_at..)?;
    let id = uuid::Uuid::try_parse(id_text).ok()?;
    if id.hyphenated().to_string() != id_text {
        return None;
    }
    let rest = name.get(..id_at)?.strip_suffix('-')?;
    let (topic, partition) = rest.rsplit_once('-')?;
    if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let tp = TopicIdPartition::new(id, topic, partition.parse().ok()?);
    (partition_dir(&tp).ok()? == name).then_some(tp)
}

/// Start of the name of a tail chain's directory ([`crate::tail`]): `_tail-<chain id as 32
/// lowercase hex digits>`, beside the partition directories. A partition directory always ends
/// with a hyphenated topic id (or a digest after one), so the two never collide, and
/// [`parse_partition_dir`] gives `None` for a chain directory.
pub const TAIL_CHAIN_PREFIX: &str = "_tail-";

/// The directory (key prefix) of tail chain `chain`: `_tail-<32 lowercase hex digits>`.
pub fn tail_chain_dir(chain: uuid::Uuid) -> String {
    format!("{TAIL_CHAIN_PREFIX}{}", chain.simple())
}

/// The key of tail object `number` of chain `chain`: `_tail-<32 hex>/<20-digit number>`, so a
/// listing sorted by name is sorted by number.
pub fn tail_object_key(chain: uuid::Uuid, number: u64) -> String {
    format!("{}/{number:020}", tail_chain_dir(chain))
}

/// The chain id a tail chain directory name holds ([`tail_chain_dir`]), or `None` for any
/// other name (a partition directory, upper-case or hyphenated hex, a wrong length).
pub fn parse_tail_chain_dir(name: &str) -> Option<uuid::Uuid> {
    let hex = name.strip_prefix(TAIL_CHAIN_PREFIX)?;
    if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    uuid::Uuid::try_parse(hex).ok()
}

/// The number a tail object's name below its chain directory holds (20 decimal digits, at
/// least 1), or `None` for any other name: a temporary file of an interrupted create-only
/// write (`<name>.tmp-...`) is not an object.
pub fn parse_tail_object_name(name: &str) -> Option<u64> {
    if name.len() != 20 || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok().filter(|&n| n >= 1)
}

/// What a file (object) name below a partition directory is, as the layout writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SegmentObject {
    /// The segment's manifest.
    Manifest,
    /// The segment's `.log` data.
    Log,
    /// One of the segment's indexes.
    Index(IndexType),
    /// A temporary file of an interrupted write of one of its objects (`<name>.tmp-...`).
    Temporary,
}

/// Parses a file (object) name below a partition directory:
/// `<20-digit start offset>-<segment uuid><suffix>`. Returns the start offset, the segment
/// uuid and what the object is, or `None` for a name the layout never writes. An object
/// name, not a local log's segment file name (`<20-digit base seq>.<extension>`), which this
/// crate does not know.
pub fn parse_segment_object_name(name: &str) -> Option<(u64, uuid::Uuid, SegmentObject)> {
    let digits = name.get(..20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || name.get(20..21)? != "-" {
        return None;
    }
    let start: u64 = digits.parse().ok()?;
    let id_text = name.get(21..57)?;
    let id = uuid::Uuid::try_parse(id_text).ok()?;
    if id.hyphenated().to_string() != id_text {
        return None;
    }
    let suffix = name.get(57..)?;
    let kind = if suffix == MANIFEST_SUFFIX {
        SegmentObject::Manifest
    } else if suffix == LOG_SUFFIX {
        SegmentObject::Log
    } else if let Some(t) = IndexType::ALL.into_iter().find(|t| t.suffix() == suffix) {
        SegmentObject::Index(t)
    } else if suffix.contains(".tmp-") {
        SegmentObject::Temporary
    } else {
        return None;
    };
    Some((start, id, kind))
}

fn file_key(
    metadata: &RemoteLogSegmentMetadata,
    suffix: &str,
) -> Result<String, RemoteStorageError> {
    Ok(segment_object_key(
        &partition_dir(metadata.topic_id_partition())?,
        metadata.start_offset(),
        metadata.remote_log_segment_id().id(),
        suffix,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MAX_TOPIC_NAME_LEN, RemoteLogSegmentId};
    use uuid::Uuid;

    #[test]
    fn keys_follow_the_documented_layout() {
        let topic_id = Uuid::nil();
        let tp = TopicIdPartition::new(topic_id, "orders", 3);
        let seg = Uuid::from_u128(1);
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::new(tp, seg), 1000, 1999)
            .build()
            .unwrap();
        assert_eq!(
            log_key(&m).unwrap(),
            format!("orders-3-{topic_id}/00000000000000001000-{seg}.log")
        );
        assert!(
            index_key(&m, IndexType::Timestamp)
                .unwrap()
                .ends_with(".timeindex")
        );
        assert_eq!(all_keys(&m).unwrap().len(), 7);
    }

    fn uuid(n: u128) -> Uuid {
        Uuid::from_u128(n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835))
    }

    #[test]
    fn names_that_fit_are_unchanged() {
        let id = uuid(7);
        for (topic, partition) in [("orders", 3), ("a", 0), ("x.y_z-1", i32::MAX)] {
            let tp = TopicIdPartition::new(id, topic, partition);
            assert_eq!(
                partition_dir(&tp).unwrap(),
                format!("{topic}-{partition}-{id}")
            );
        }
        // The longest topic name that is never shortened, at the largest partition.
        let topic = "t".repeat(MAX_PARTITION_DIR_LEN - 1 - 10 - 1 - 36);
        assert_eq!(topic.len(), 206);
        let tp = TopicIdPartition::new(id, topic.clone(), i32::MAX);
        assert_eq!(
            partition_dir(&tp).unwrap(),
            format!("{topic}-{}-{id}", i32::MAX)
        );
    }

    #[test]
    fn every_valid_topic_name_fits_in_one_path_component() {
        for len in 1..=MAX_TOPIC_NAME_LEN {
            for partition in [0, 7, 12_345, i32::MAX] {
                let tp = TopicIdPartition::new(uuid(len as u128), "n".repeat(len), partition);
                let dir = partition_dir(&tp).unwrap();
                assert!(dir.len() <= MAX_PARTITION_DIR_LEN, "{len}: {}", dir.len());
                let m = RemoteLogSegmentMetadata::builder(
                    RemoteLogSegmentId::new(tp, uuid(1)),
                    u64::MAX - 1,
                    u64::MAX - 1,
                )
                .build()
                .unwrap();
                for key in all_keys(&m).unwrap() {
                    assert!(key.len() <= MAX_RELATIVE_KEY_LEN, "{key}");
                    assert!(key.split('/').all(|c| c.len() < 255 && !c.is_empty()));
                }
            }
        }
    }

    #[test]
    fn shortened_names_are_stable_readable_and_unique() {
        let id = Uuid::nil();
        let long = "k".repeat(MAX_TOPIC_NAME_LEN);
        let tp = TopicIdPartition::new(id, long.clone(), 2);
        let dir = partition_dir(&tp).unwrap();
        // Pinned: existing buckets and directories depend on this exact name.
        assert_eq!(
            dir,
            format!(
                "{}-2-{id}-6015ee4089ea8d57b0c9c0e0fa4a40ba",
                "k".repeat(SHORT_TOPIC_LEN)
            )
        );
        assert_eq!(
            &sha256_hex(&format!("{long}-2-{id}"))[..DIGEST_HEX_LEN],
            "6015ee4089ea8d57b0c9c0e0fa4a40ba"
        );
        assert_eq!(dir, partition_dir(&tp).unwrap());
        // Names sharing the kept prefix, partition and id still differ.
        let mut seen = std::collections::HashSet::new();
        for tail in ["a", "b", "ab", "ba", "a.", "a_"] {
            let topic = format!("{}{tail}", "k".repeat(230));
            for partition in [0, 1, 10] {
                for id in [Uuid::nil(), uuid(3)] {
                    let tp = TopicIdPartition::new(id, topic.clone(), partition);
                    assert!(
                        seen.insert(partition_dir(&tp).unwrap()),
                        "{topic} {partition}"
                    );
                }
            }
        }
        // A shortened name never looks like a full one (which ends with a UUID).
        let tail = dir.get(dir.len() - 36..).unwrap();
        assert!(Uuid::try_parse(tail).is_err(), "{tail}");
    }

    fn sha256_hex(s: &str) -> String {
        Sha256::digest(s.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn manifest_keys_parse_back() {
        let tp = TopicIdPartition::new(Uuid::nil(), "orders", 3);
        let seg = Uuid::from_u128(7);
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::new(tp, seg), 42, 50)
            .build()
            .unwrap();
        let key = manifest_key(&m).unwrap();
        let name = key.rsplit('/').next().unwrap();
        assert_eq!(
            parse_segment_object_name(name),
            Some((42, seg, SegmentObject::Manifest))
        );
        for (i, k) in all_keys(&m).unwrap().iter().enumerate() {
            let name = k.rsplit('/').next().unwrap();
            let (start, id, kind) = parse_segment_object_name(name).unwrap();
            assert_eq!((start, id), (42, seg));
            assert_eq!(kind == SegmentObject::Manifest, i == 6);
        }
        let tmp = format!("{name}.tmp-12-3");
        assert_eq!(
            parse_segment_object_name(&tmp).map(|p| p.2),
            Some(SegmentObject::Temporary)
        );
        assert_eq!(parse_segment_object_name("junk"), None);
        let dir = partition_dir(m.topic_id_partition()).unwrap();
        assert_eq!(
            parse_partition_dir(&dir).as_ref(),
            Some(m.topic_id_partition())
        );
        let dashed = TopicIdPartition::new(Uuid::from_u128(3), "a-b-1", 12);
        assert_eq!(
            parse_partition_dir(&partition_dir(&dashed).unwrap()),
            Some(dashed)
        );
        assert_eq!(parse_partition_dir("orders-3"), None);
        assert_eq!(parse_segment_object_name(&format!("{name}x")), None);
    }

    #[test]
    fn tail_keys_follow_the_documented_layout_and_parse_back() {
        let chain = Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let dir = tail_chain_dir(chain);
        assert_eq!(dir, "_tail-0123456789abcdef0011223344556677");
        assert_eq!(
            tail_object_key(chain, 7),
            format!("{dir}/00000000000000000007")
        );
        assert_eq!(parse_tail_chain_dir(&dir), Some(chain));
        assert_eq!(parse_tail_object_name("00000000000000000007"), Some(7));
        assert_eq!(
            parse_tail_object_name(&format!("{}", u64::MAX)),
            Some(u64::MAX)
        );
        for bad in [
            "00000000000000000000",
            "0000000000000000007",
            "000000000000000000007",
            "00000000000000000007.tmp-5f0c",
            "99999999999999999999",
            "0000000000000000000x",
            "_head",
        ] {
            assert_eq!(parse_tail_object_name(bad), None, "{bad}");
        }
        for bad in [
            "_tail-0123456789ABCDEF0011223344556677".to_owned(),
            format!("_tail-{}", chain.hyphenated()),
            "_tail-0123456789abcdef001122334455667".to_owned(),
            "tail-0123456789abcdef0011223344556677".to_owned(),
            partition_dir(&TopicIdPartition::new(chain, "orders", 0)).unwrap(),
        ] {
            assert_eq!(parse_tail_chain_dir(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_tail_chain_dir_is_never_a_partition_dir() {
        for n in [
            0u128,
            1,
            u128::MAX,
            0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        ] {
            let dir = tail_chain_dir(Uuid::from_u128(n));
            assert_eq!(parse_partition_dir(&dir), None, "{dir}");
        }
        // Not even for a topic named like a chain directory.
        let tp = TopicIdPartition::new(Uuid::from_u128(5), "_tail-x", 0);
        let dir = partition_dir(&tp).unwrap();
        assert_eq!(parse_tail_chain_dir(&dir), None);
        assert_eq!(parse_partition_dir(&dir), Some(tp));
    }

    #[test]
    fn hostile_names_never_make_a_key() {
        let tp = TopicIdPartition::new(Uuid::nil(), "../../etc", 0);
        let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 0)
            .build()
            .unwrap();
        let key = log_key(&m);
        assert!(
            matches!(&key, Err(RemoteStorageError::InvalidArgument { message })
                if message.contains(r#"topic name "../../etc" is invalid"#)),
            "{key:?}"
        );
    }
}
