//! `DIR/remote-binding`: which remote, partition and writer epoch a local log belongs to, and
//! in which directory the binding was made (so a copy of the directory is recognised).
//!
//! ```text
//! krabka-binding 1
//! remote <location>
//! topic <name>
//! id <topic id>
//! partition <n>
//! epoch <writer epoch>
//! start <first seq of the epoch>
//! since <ms since the Unix epoch: when it was bound>
//! state <pending | claiming | claimed>
//! seen <comma-separated segment ids, or ->
//! incarnation <uuid>
//! directory <device>:<inode>
//! crc32 <8 hex digits of the CRC-32 of every line before it>
//! ```

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use krabka_remote_storage::{TopicIdPartition, Uuid};
use krabka_storage::kvfile;

use crate::error::Error;

/// Name of the binding file in a tiered log's directory.
pub const BINDING_FILE: &str = "remote-binding";
/// First line of [`BINDING_FILE`].
const MAGIC: &str = "krabka-binding 1";
/// Far more than a binding holds (at most [`MAX_SEEN`] segment ids): a longer file is refused
/// unread.
const MAX_BINDING_BYTES: u64 = 64 * 1024;

/// What a local log is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The remote, as the caller describes it ([`RemoteOwnership::location`](super::RemoteOwnership::location)).
    pub location: String,
    /// The partition.
    pub partition: TopicIdPartition,
    /// The writer epoch this log holds (0 while [`BindingState::Pending`]).
    pub epoch: u64,
    /// The first seq of its epoch, as claimed (the epoch record says the same).
    pub start_seq: u64,
    /// When it was bound (ms since the Unix epoch): for a pending binding, when recovery began
    /// to read the remote tier, or just after the latest event time of the copies past
    /// `start_seq` it listed when that is later (a writer's copy times may run ahead of its
    /// clock: a copy listed then began before the recovery).
    pub since_ms: i64,
    /// Where the claim stands.
    pub state: BindingState,
    /// For a claim that began as pending: the copies (segment ids) starting at or after
    /// `start_seq` that were already complete when recovery read the remote. A complete copy
    /// there that is not one of them was finished after the recovery: its writer is alive
    /// (at most [`MAX_SEEN`] are kept).
    pub seen: Vec<Uuid>,
    /// The incarnation id its epoch record carries.
    pub incarnation: Uuid,
    /// The directory's identity when it was bound: `device:inode`.
    pub directory: String,
}

/// The most segment ids a binding keeps in [`Binding::seen`].
pub const MAX_SEEN: usize = 256;

/// Where a binding's claim stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindingState {
    /// Written by recovery: the first owned open claims the next epoch from `start_seq`,
    /// unless the remote moved past it meanwhile.
    Pending,
    /// The binding names the epoch being claimed; its record may not exist yet (a crash or an
    /// error between the two writes): the next open checks the remote again before it
    /// creates the record.
    Claiming,
    /// The epoch record exists and names this log's incarnation.
    Claimed,
}

impl BindingState {
    fn word(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Claiming => "claiming",
            Self::Claimed => "claimed",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        match word {
            "pending" => Some(Self::Pending),
            "claiming" => Some(Self::Claiming),
            "claimed" => Some(Self::Claimed),
            _ => None,
        }
    }
}

/// The identity of directory `dir`: `device:inode` (a copy gets another inode; a rename on
/// one filesystem keeps it).
pub(crate) fn directory_identity(dir: &Path) -> Result<String, Error> {
    let meta = std::fs::metadata(dir).map_err(|e| {
        Error::Ownership(crate::error::OwnershipError::Binding {
            path: dir.to_path_buf(),
            reason: format!("cannot read the directory's metadata: {e}"),
        })
    })?;
    Ok(format!("{}:{}", meta.dev(), meta.ino()))
}

impl Binding {
    fn text(&self) -> String {
        let tp = &self.partition;
        let seen = if self.seen.is_empty() {
            "-".to_owned()
        } else {
            self.seen
                .iter()
                .map(Uuid::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        kvfile::render(
            MAGIC,
            &[
                ("remote", self.location.clone()),
                ("topic", tp.topic().to_owned()),
                ("id", tp.topic_id().to_string()),
                ("partition", tp.partition().to_string()),
                ("epoch", self.epoch.to_string()),
                ("start", self.start_seq.to_string()),
                ("since", self.since_ms.to_string()),
                ("state", self.state.word().to_owned()),
                ("seen", seen),
                ("incarnation", self.incarnation.to_string()),
                ("directory", self.directory.clone()),
            ],
        )
    }

    fn parse(text: &str) -> Result<Self, String> {
        let mut fields = kvfile::parse(text, MAGIC)?;
        let location = fields.next_value("remote")?.to_owned();
        let topic = fields.next_value("topic")?;
        let id = fields.next_value("id")?;
        let partition = fields.next_value("partition")?;
        let epoch = fields.next_value("epoch")?;
        let start_seq = fields.next_value("start")?;
        let since_ms = fields.next_value("since")?;
        let state = fields.next_value("state")?;
        let seen = fields.next_value("seen")?;
        let incarnation = fields.next_value("incarnation")?;
        let directory = fields.next_value("directory")?.to_owned();
        fields.end()?;
        let id = Uuid::parse_str(id).map_err(|e| format!("its id `{id}` is not a UUID: {e}"))?;
        let partition = partition
            .parse::<i32>()
            .map_err(|e| format!("its partition `{partition}` is not a number: {e}"))?;
        let epoch = epoch
            .parse::<u64>()
            .map_err(|e| format!("its epoch `{epoch}` is not a number: {e}"))?;
        let start_seq = start_seq
            .parse::<u64>()
            .map_err(|e| format!("its start `{start_seq}` is not a number: {e}"))?;
        let since_ms = since_ms
            .parse::<i64>()
            .map_err(|e| format!("its since `{since_ms}` is not a number: {e}"))?;
        let state = BindingState::parse(state)
            .ok_or_else(|| format!("its state `{state}` is not pending, claiming or claimed"))?;
        let seen = if seen == "-" {
            Vec::new()
        } else {
            seen.split(',')
                .take(MAX_SEEN)
                .map(Uuid::parse_str)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("its seen list is not segment ids: {e}"))?
        };
        if (epoch == 0) != (state == BindingState::Pending) {
            return Err(format!("epoch {epoch} in state {}", state.word()));
        }
        let incarnation = Uuid::parse_str(incarnation)
            .map_err(|e| format!("its incarnation `{incarnation}` is not a UUID: {e}"))?;
        let tp = TopicIdPartition::new(id, topic, partition);
        tp.validate()
            .map_err(|e| format!("it names an invalid partition: {e}"))?;
        Ok(Self {
            location,
            partition: tp,
            epoch,
            start_seq,
            since_ms,
            state,
            seen,
            incarnation,
            directory,
        })
    }
}

/// The path of `dir`'s binding file.
pub fn binding_path(dir: &Path) -> PathBuf {
    dir.join(BINDING_FILE)
}

/// Reads `dir`'s binding; `None` when the log was never bound.
///
/// # Errors
/// [`OwnershipError::Binding`](crate::OwnershipError::Binding) when the file cannot be read or does not decode.
pub fn read(dir: &Path) -> Result<Option<Binding>, Error> {
    let path = binding_path(dir);
    let text = match kvfile::read(&path, MAX_BINDING_BYTES) {
        Ok(None) => return Ok(None),
        Ok(Some(text)) => text,
        Err(e) => {
            return Err(Error::Ownership(crate::error::OwnershipError::Binding {
                path,
                reason: e.to_string(),
            }));
        }
    };
    Binding::parse(&text)
        .map(Some)
        .map_err(|reason| Error::Ownership(crate::error::OwnershipError::Binding { path, reason }))
}

/// Durably writes `binding` as `dir`'s binding file (temporary file, fsync, rename, directory
/// fsync).
///
/// # Errors
/// [`OwnershipError::Binding`](crate::OwnershipError::Binding) when it cannot be written, or the location holds a line break.
pub fn write(dir: &Path, binding: &Binding) -> Result<(), Error> {
    let path = binding_path(dir);
    if binding.location.contains(['\n', '\r']) || binding.location.is_empty() {
        return Err(Error::Ownership(crate::error::OwnershipError::Binding {
            path,
            reason: format!(
                "the remote location {:?} is empty or holds a line break",
                binding.location
            ),
        }));
    }
    kvfile::write(&path, &binding.text()).map_err(|e| {
        Error::Ownership(crate::error::OwnershipError::Binding {
            path: path.clone(),
            reason: format!("cannot write it: {e}"),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Binding {
        Binding {
            location: "fs:///srv/krabka remote".to_owned(),
            partition: TopicIdPartition::new(Uuid::from_u128(3), "clicks", 2),
            epoch: 4,
            start_seq: 1001,
            since_ms: 1_700_000_000_000,
            state: BindingState::Claimed,
            seen: vec![Uuid::from_u128(5), Uuid::from_u128(6)],
            incarnation: Uuid::from_u128(9),
            directory: "64769:1234".to_owned(),
        }
    }

    #[test]
    fn a_binding_round_trips_and_every_flipped_byte_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), &sample()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(sample()));
        let bytes = std::fs::read(binding_path(dir.path())).unwrap();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            std::fs::write(binding_path(dir.path()), &b).unwrap();
            assert!(
                matches!(
                    read(dir.path()),
                    Err(Error::Ownership(
                        crate::error::OwnershipError::Binding { .. }
                    ))
                ),
                "byte {i}"
            );
        }
    }

    #[test]
    fn a_location_with_a_line_break_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let b = Binding {
            location: "fs://a\nepoch 9".to_owned(),
            ..sample()
        };
        assert!(matches!(
            write(dir.path(), &b),
            Err(Error::Ownership(
                crate::error::OwnershipError::Binding { .. }
            ))
        ));
    }
}
