//! `DIR/topic`: the partition a log is tiered under (topic name, id and partition), recorded
//! the first time the log is tiered, so a copied or renamed directory still finds its remote
//! segments. A checksummed key/value file ([`krabka_storage::kvfile`]).

use std::path::Path;

use krabka_remote_storage::{TopicIdPartition, Uuid};
use krabka_storage::kvfile;

use crate::error::Error;

/// Name of the file, in a tiered log's directory, naming the partition it is tiered under.
pub const TOPIC_FILE: &str = "topic";
/// First line of [`TOPIC_FILE`].
const TOPIC_MAGIC: &str = "krabka-topic 1";
/// More than any valid topic file holds (a topic name is at most 249 bytes).
const MAX_TOPIC_FILE_BYTES: u64 = 1024;

/// The contents of [`TOPIC_FILE`] for `topic`.
fn topic_file_text(topic: &TopicIdPartition) -> String {
    kvfile::render(
        TOPIC_MAGIC,
        &[
            ("name", topic.topic().to_owned()),
            ("id", topic.topic_id().to_string()),
            ("partition", topic.partition().to_string()),
        ],
    )
}

/// Parses the contents of [`TOPIC_FILE`]; `Err` says what is wrong.
fn parse_topic_file(text: &str) -> Result<TopicIdPartition, String> {
    let mut fields = kvfile::parse(text, TOPIC_MAGIC)?;
    let name = fields.next_value("name")?;
    let id = fields.next_value("id")?;
    let partition = fields.next_value("partition")?;
    fields.end()?;
    let id = Uuid::parse_str(id).map_err(|e| format!("its id `{id}` is not a UUID: {e}"))?;
    let partition = partition
        .parse::<i32>()
        .map_err(|e| format!("its partition `{partition}` is not a number: {e}"))?;
    let topic = TopicIdPartition::new(id, name, partition);
    topic
        .validate()
        .map_err(|e| format!("it names an invalid topic: {e}"))?;
    Ok(topic)
}

/// The partition recorded in `log_dir`'s [`TOPIC_FILE`]; `None` when the log has none (it was
/// never tiered, or was tiered before the file existed).
///
/// # Errors
/// [`OwnershipError::TopicFile`](crate::OwnershipError::TopicFile) naming the file when it cannot be read or is damaged.
pub fn read_topic_file(log_dir: &Path) -> Result<Option<TopicIdPartition>, Error> {
    let path = log_dir.join(TOPIC_FILE);
    let text = match kvfile::read(&path, MAX_TOPIC_FILE_BYTES) {
        Ok(None) => return Ok(None),
        Ok(Some(text)) => text,
        Err(e) => {
            return Err(Error::Ownership(crate::error::OwnershipError::TopicFile {
                path,
                reason: e.to_string(),
            }));
        }
    };
    parse_topic_file(&text).map(Some).map_err(|reason| {
        Error::Ownership(crate::error::OwnershipError::TopicFile { path, reason })
    })
}

/// Durably records `topic` in `log_dir`'s [`TOPIC_FILE`] (a temporary file, fsynced, renamed
/// over it, and the directory fsynced).
///
/// # Errors
/// [`OwnershipError::TopicFile`](crate::OwnershipError::TopicFile) when the file cannot be written.
pub fn write_topic_file(log_dir: &Path, topic: &TopicIdPartition) -> Result<(), Error> {
    let path = log_dir.join(TOPIC_FILE);
    kvfile::write(&path, &topic_file_text(topic)).map_err(|e| {
        Error::Ownership(crate::error::OwnershipError::TopicFile {
            path,
            reason: format!("cannot write it: {e}"),
        })
    })
}

/// The partition of a log tiered for the first time: named after its directory (as
/// [`topic_for`]), with a fresh random id, so that two logs whose directories share a name
/// never share a topic on a remote. It is recorded in [`TOPIC_FILE`] and kept from then on,
/// whatever the directory is called later.
pub fn new_topic(log_dir: &Path) -> TopicIdPartition {
    let derived = topic_for(log_dir);
    TopicIdPartition::new(Uuid::new_v4(), derived.topic(), derived.partition())
}

/// The partition derived from a log directory's name: that name (made a valid topic name),
/// partition 0 and an id derived from it (FNV-1a over the name, frozen). Logs tiered before
/// [`TOPIC_FILE`] existed were tiered under this topic (and still are, until the file records
/// it); a new log only takes its name (see [`new_topic`]).
pub fn topic_for(log_dir: &Path) -> TopicIdPartition {
    let name = topic_name_for(log_dir);
    TopicIdPartition::new(legacy_topic_id(&name), name, 0)
}

/// The topic name a log directory's name gives: that name with every character a topic name
/// may not hold replaced by `_`, `krabka` when nothing is left.
pub fn topic_name_for(log_dir: &Path) -> String {
    let name: String = log_dir
        .canonicalize()
        .unwrap_or_else(|_| log_dir.to_path_buf())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    if name.is_empty() || name == "." || name == ".." {
        "krabka".to_owned()
    } else {
        name
    }
}

/// The topic id of a log tiered before [`TOPIC_FILE`] existed: FNV-1a over the topic name,
/// twice with different offsets. Frozen: such a log's metadata and remote segments are found
/// by recomputing it (its directory records no id), so it must give the same id in every
/// version. `Uuid::new_v5` would be today's way to name a UUID after a string, but gives other
/// ids, so it cannot replace this; new logs get a random id instead ([`new_topic`]), recorded
/// in the file.
fn legacy_topic_id(name: &str) -> Uuid {
    let fnv = |offset: u64| {
        name.bytes().fold(offset, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    };
    Uuid::from_u64_pair(fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topic_file_round_trips_and_refuses_any_changed_byte() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(matches!(read_topic_file(dir.path()), Ok(None)));
        let topic = new_topic(&dir.path().join("my log"));
        assert_eq!(topic.topic(), "my_log");
        assert_ne!(
            topic.topic_id(),
            topic_for(&dir.path().join("my log")).topic_id()
        );
        write_topic_file(dir.path(), &topic).expect("write");
        let back = read_topic_file(dir.path()).expect("read");
        assert_eq!(back, Some(topic.clone()));
        let path = dir.path().join(TOPIC_FILE);
        let good = std::fs::read(&path).expect("read back");
        // The text a version before the shared key/value helper wrote: still read.
        let earlier = format!(
            "krabka-topic 1\nname {}\nid {}\npartition {}\n",
            topic.topic(),
            topic.topic_id(),
            topic.partition()
        );
        let earlier = format!(
            "{earlier}crc32 {:08x}\n",
            crc32fast::hash(earlier.as_bytes())
        );
        assert_eq!(String::from_utf8_lossy(&good), earlier);
        for i in 0..good.len() {
            let mut bad = good.clone();
            if let Some(b) = bad.get_mut(i) {
                *b ^= 0x01;
            }
            std::fs::write(&path, &bad).expect("write bad");
            let e = read_topic_file(dir.path()).expect_err("a changed byte is refused");
            assert!(
                matches!(
                    e,
                    Error::Ownership(crate::error::OwnershipError::TopicFile { .. })
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn a_directory_always_gets_the_same_valid_topic() {
        let a = topic_for(Path::new("/tmp/does-not-exist/my log"));
        let b = topic_for(Path::new("/tmp/does-not-exist/my log"));
        assert_eq!(a, b);
        assert_eq!(a.topic(), "my_log");
        assert!(a.validate().is_ok());
        assert_ne!(a, topic_for(Path::new("/x/other")));
        assert_eq!(topic_for(Path::new("/")).topic(), "krabka");
    }

    #[test]
    fn the_legacy_topic_id_is_the_one_earlier_versions_derived() {
        // Logs tiered before the topic file existed are found under these ids.
        let id = |s: &str| Uuid::parse_str(s).expect("uuid");
        assert_eq!(
            topic_for(Path::new("/tmp/does-not-exist/my log")).topic_id(),
            id("1d16f2ab-a7d2-8b96-8d89-1f929eef92bb")
        );
        assert_eq!(
            topic_for(Path::new("/")).topic_id(),
            id("1adfb74b-78f1-8813-62a0-0d0333368a7e")
        );
    }
}
