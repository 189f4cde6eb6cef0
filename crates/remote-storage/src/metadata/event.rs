//! The binary encoding of metadata events, as the durable manager stores them (one event per
//! log record). Specified byte by byte in `docs/format.md`, "Remote layout".
//!
//! ```text
//! version u8 (1 or 2) | kind u8 (1 add, 2 update, 3 snapshot) | body | crc32 u32 (of everything before it)
//! ```
//! Version 2 differs only in the add and snapshot bodies, which end with the segment's writer
//! epoch (u64); it is written only for metadata with a writer epoch, so metadata without one
//! encodes exactly as before (version 1, writer epoch 0).
//! All integers are little-endian. Decoding never panics: corrupt input is an
//! [`EventDecodeError`].
//!
//! ```
//! use krabka_remote_storage::*;
//! use krabka_remote_storage::metadata::event::{EventDecodeError, MetadataEvent};
//!
//! let tp = TopicIdPartition::new(Uuid::new_v4(), "orders", 0);
//! let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9).build()?;
//! let event = MetadataEvent::Add(m);
//! let bytes = event.encode();
//! assert_eq!(MetadataEvent::decode(&bytes).unwrap(), event);
//! let cut = MetadataEvent::decode(&bytes[..bytes.len() - 1]);
//! assert!(matches!(cut, Err(EventDecodeError::Checksum { .. })), "{cut:?}");
//! # Ok::<(), RemoteStorageError>(())
//! ```

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::model::{
    CustomMetadata, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState, TopicIdPartition,
};

/// The encoding version written by [`MetadataEvent::encode`] for events without a writer epoch.
pub const EVENT_VERSION: u8 = 1;
/// The encoding version written by [`MetadataEvent::encode`] for add and snapshot events whose
/// segment has a writer epoch (non-zero): their body ends with it.
pub const EVENT_VERSION_WRITER_EPOCH: u8 = 2;
/// Kind byte of [`MetadataEvent::Add`].
pub const KIND_ADD: u8 = 1;
/// Kind byte of [`MetadataEvent::Update`].
pub const KIND_UPDATE: u8 = 2;
/// Kind byte of [`MetadataEvent::Snapshot`].
pub const KIND_SNAPSHOT: u8 = 3;
/// Version, kind and CRC: the smallest possible event.
const MIN_LEN: usize = 1 + 1 + 4;

/// One change to the remote metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataEvent {
    /// A new segment (state `CopySegmentStarted`).
    Add(RemoteLogSegmentMetadata),
    /// A state change of a known segment.
    Update(RemoteLogSegmentMetadataUpdate),
    /// A live segment as a compaction found it, in any state but `DeleteSegmentFinished`.
    /// Only found at the start of a compacted generation, before any add or update; the body
    /// is the same as [`Add`](Self::Add)'s.
    Snapshot(RemoteLogSegmentMetadata),
}

/// Why bytes are not a valid [`MetadataEvent`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventDecodeError {
    /// Shorter than version + kind + CRC.
    #[error("event is {len} bytes, shorter than the {MIN_LEN}-byte minimum")]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// The CRC does not match the bytes.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The CRC in the event.
        stored: u32,
        /// The CRC of its bytes.
        computed: u32,
    },
    /// A version this build does not read.
    #[error("unsupported event version {0}")]
    Version(u8),
    /// An unknown kind byte.
    #[error("unknown event kind {0}")]
    Kind(u8),
    /// A field runs past the end of the body.
    #[error("truncated {field}: needs {needed} bytes at body offset {at}, {available} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Where in the body.
        at: usize,
        /// Bytes left.
        available: usize,
    },
    /// An unknown segment state code.
    #[error("unknown segment state code {0}")]
    State(u8),
    /// A presence flag other than 0 or 1.
    #[error("invalid presence flag {value} for {field}")]
    Flag {
        /// The field.
        field: &'static str,
        /// The byte found.
        value: u8,
    },
    /// The topic name is not UTF-8.
    #[error("topic name is not valid UTF-8")]
    TopicName,
    /// Bytes left after the last field.
    #[error("{0} trailing bytes after the event body")]
    Trailing(usize),
    /// The fields decode but do not make valid metadata (end before start, no epochs, ...).
    #[error("invalid segment metadata: {0}")]
    Metadata(String),
}

impl MetadataEvent {
    /// The segment the event is about.
    pub fn segment_id(&self) -> &RemoteLogSegmentId {
        match self {
            Self::Add(m) | Self::Snapshot(m) => m.remote_log_segment_id(),
            Self::Update(u) => u.remote_log_segment_id(),
        }
    }

    /// Encodes the event (version [`EVENT_VERSION`], or [`EVENT_VERSION_WRITER_EPOCH`] for a
    /// segment with a writer epoch).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        let writer_epoch = match self {
            Self::Add(m) | Self::Snapshot(m) => m.writer_epoch(),
            Self::Update(_) => 0,
        };
        out.push(if writer_epoch == 0 {
            EVENT_VERSION
        } else {
            EVENT_VERSION_WRITER_EPOCH
        });
        match self {
            Self::Add(m) | Self::Snapshot(m) => {
                out.push(if matches!(self, Self::Add(_)) {
                    KIND_ADD
                } else {
                    KIND_SNAPSHOT
                });
                put_segment_id(&mut out, m.remote_log_segment_id());
                out.extend_from_slice(&m.start_offset().to_le_bytes());
                out.extend_from_slice(&m.end_offset().to_le_bytes());
                out.extend_from_slice(&m.max_timestamp_ms().to_le_bytes());
                out.extend_from_slice(&m.broker_id().to_le_bytes());
                out.extend_from_slice(&m.event_timestamp_ms().to_le_bytes());
                out.extend_from_slice(&m.segment_size_in_bytes().to_le_bytes());
                out.push(m.state().code());
                let epochs = m.segment_leader_epochs();
                out.extend_from_slice(&len_u32(epochs.len()).to_le_bytes());
                for (epoch, offset) in epochs {
                    out.extend_from_slice(&epoch.to_le_bytes());
                    out.extend_from_slice(&offset.to_le_bytes());
                }
                put_custom(&mut out, m.custom_metadata());
                if writer_epoch != 0 {
                    out.extend_from_slice(&writer_epoch.to_le_bytes());
                }
            }
            Self::Update(u) => {
                out.push(KIND_UPDATE);
                put_segment_id(&mut out, u.remote_log_segment_id());
                out.extend_from_slice(&u.event_timestamp_ms().to_le_bytes());
                out.extend_from_slice(&u.broker_id().to_le_bytes());
                out.push(u.state().code());
                put_custom(&mut out, u.custom_metadata());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes one event; the whole slice must be exactly one event.
    ///
    /// # Errors
    /// An [`EventDecodeError`] naming what is wrong; never panics.
    pub fn decode(bytes: &[u8]) -> Result<Self, EventDecodeError> {
        if bytes.len() < MIN_LEN {
            return Err(EventDecodeError::TooShort { len: bytes.len() });
        }
        let (content, crc_bytes) = bytes
            .split_last_chunk::<4>()
            .ok_or(EventDecodeError::TooShort { len: bytes.len() })?;
        let stored = u32::from_le_bytes(*crc_bytes);
        let computed = crc32fast::hash(content);
        if stored != computed {
            return Err(EventDecodeError::Checksum { stored, computed });
        }
        let mut r = Reader {
            buf: content,
            pos: 0,
        };
        let version = r.u8("version")?;
        if version != EVENT_VERSION && version != EVENT_VERSION_WRITER_EPOCH {
            return Err(EventDecodeError::Version(version));
        }
        let kind = r.u8("kind")?;
        let event = match kind {
            KIND_ADD | KIND_SNAPSHOT => {
                let id = r.segment_id()?;
                let start = r.u64("start offset")?;
                let end = r.u64("end offset")?;
                let max_ts = r.i64("max timestamp")?;
                let broker = r.i32("broker id")?;
                let event_ts = r.i64("event timestamp")?;
                let size = r.u64("segment size")?;
                let state = r.state()?;
                let count = r.u32("epoch count")?;
                let mut epochs = BTreeMap::new();
                for _ in 0..count {
                    let epoch = r.i32("leader epoch")?;
                    let offset = r.u64("leader epoch start offset")?;
                    epochs.insert(epoch, offset);
                }
                let custom = r.custom()?;
                let writer_epoch = if version == EVENT_VERSION_WRITER_EPOCH {
                    match r.u64("writer epoch")? {
                        0 => {
                            return Err(EventDecodeError::Metadata(
                                "a version 2 event with writer epoch 0".to_owned(),
                            ));
                        }
                        e => e,
                    }
                } else {
                    0
                };
                let m = RemoteLogSegmentMetadata::builder(id, start, end)
                    .writer_epoch(writer_epoch)
                    .max_timestamp_ms(max_ts)
                    .broker_id(broker)
                    .event_timestamp_ms(event_ts)
                    .segment_size_in_bytes(size)
                    .state(state)
                    .segment_leader_epochs(epochs)
                    .custom_metadata(custom)
                    .build_strict()
                    .map_err(|e| EventDecodeError::Metadata(e.to_string()))?;
                if kind == KIND_ADD {
                    Self::Add(m)
                } else {
                    Self::Snapshot(m)
                }
            }
            KIND_UPDATE => {
                let id = r.segment_id()?;
                let event_ts = r.i64("event timestamp")?;
                let broker = r.i32("broker id")?;
                let state = r.state()?;
                let custom = r.custom()?;
                Self::Update(RemoteLogSegmentMetadataUpdate::new(
                    id, event_ts, custom, state, broker,
                ))
            }
            other => return Err(EventDecodeError::Kind(other)),
        };
        let left = content.len().saturating_sub(r.pos);
        if left != 0 {
            return Err(EventDecodeError::Trailing(left));
        }
        Ok(event)
    }
}

/// Lengths written by the encoder come from in-memory collections far below `u32::MAX`
/// (topic names ≤ 249 bytes once validated, custom metadata capped); saturate rather than
/// panic, so an absurd value yields an event that fails to decode instead of a crash.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn put_segment_id(out: &mut Vec<u8>, id: &RemoteLogSegmentId) {
    let tp = id.topic_id_partition();
    out.extend_from_slice(tp.topic_id().as_bytes());
    out.extend_from_slice(&tp.partition().to_le_bytes());
    let name = tp.topic().as_bytes();
    out.extend_from_slice(&len_u32(name.len()).to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(id.id().as_bytes());
}

fn put_custom(out: &mut Vec<u8>, custom: Option<&CustomMetadata>) {
    match custom {
        None => out.push(0),
        Some(cm) => {
            out.push(1);
            out.extend_from_slice(&len_u32(cm.len()).to_le_bytes());
            out.extend_from_slice(cm.value());
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], EventDecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let Some(out) = rest.get(..n) else {
            return Err(EventDecodeError::Truncated {
                field,
                needed: n,
                at: self.pos,
                available: rest.len(),
            });
        };
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], EventDecodeError> {
        let bytes = self.take(field, N)?;
        // `take` returned exactly N bytes; the conversion cannot fail, but stays checked.
        bytes.try_into().map_err(|_| EventDecodeError::Truncated {
            field,
            needed: N,
            at: self.pos,
            available: bytes.len(),
        })
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, EventDecodeError> {
        let [b] = self.array::<1>(field)?;
        Ok(b)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, EventDecodeError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, EventDecodeError> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, EventDecodeError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, EventDecodeError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    fn len(&mut self, field: &'static str) -> Result<usize, EventDecodeError> {
        let n = self.u32(field)?;
        // A length that does not fit usize cannot fit the remaining bytes either.
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn state(&mut self) -> Result<RemoteLogSegmentState, EventDecodeError> {
        let code = self.u8("state")?;
        RemoteLogSegmentState::from_code(code).ok_or(EventDecodeError::State(code))
    }

    fn segment_id(&mut self) -> Result<RemoteLogSegmentId, EventDecodeError> {
        let topic_id = Uuid::from_bytes(self.array("topic id")?);
        let partition = self.i32("partition")?;
        let name_len = self.len("topic name length")?;
        let name = std::str::from_utf8(self.take("topic name", name_len)?)
            .map_err(|_| EventDecodeError::TopicName)?;
        let id = Uuid::from_bytes(self.array("segment id")?);
        Ok(RemoteLogSegmentId::new(
            TopicIdPartition::new(topic_id, name, partition),
            id,
        ))
    }

    fn custom(&mut self) -> Result<Option<CustomMetadata>, EventDecodeError> {
        match self.u8("custom metadata flag")? {
            0 => Ok(None),
            1 => {
                let len = self.len("custom metadata length")?;
                let bytes = self.take("custom metadata", len)?;
                Ok(Some(CustomMetadata::new(bytes.to_vec())))
            }
            value => Err(EventDecodeError::Flag {
                field: "custom metadata",
                value,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_add() -> MetadataEvent {
        let tp = TopicIdPartition::new(Uuid::new_v4(), "orders.eu_1", 7);
        MetadataEvent::Add(
            RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 100, 250)
                .max_timestamp_ms(-5)
                .broker_id(3)
                .event_timestamp_ms(1_700_000_000_000)
                .segment_size_in_bytes(4096)
                .segment_leader_epochs(BTreeMap::from([(1, 100), (4, 180)]))
                .custom_metadata(Some(CustomMetadata::new(b"key/v1".to_vec())))
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn add_and_update_round_trip() {
        let add = sample_add();
        assert_eq!(MetadataEvent::decode(&add.encode()).unwrap(), add);
        let update = MetadataEvent::Update(RemoteLogSegmentMetadataUpdate::new(
            add.segment_id().clone(),
            42,
            Some(CustomMetadata::new(vec![9u8; 3])),
            RemoteLogSegmentState::DeleteSegmentStarted,
            -1,
        ));
        assert_eq!(MetadataEvent::decode(&update.encode()).unwrap(), update);
        let MetadataEvent::Add(m) = add else {
            unreachable!()
        };
        let snap = MetadataEvent::Snapshot(
            m.apply(&RemoteLogSegmentMetadataUpdate::to_state(
                m.remote_log_segment_id().clone(),
                RemoteLogSegmentState::CopySegmentFinished,
                5,
            ))
            .unwrap(),
        );
        let bytes = snap.encode();
        assert_eq!(bytes.get(1), Some(&KIND_SNAPSHOT));
        assert_eq!(MetadataEvent::decode(&bytes).unwrap(), snap);
    }

    #[test]
    fn every_flipped_bit_is_a_checksum_error() {
        let bytes = sample_add().encode();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            let got = MetadataEvent::decode(&bad);
            assert!(
                matches!(got, Err(EventDecodeError::Checksum { .. })),
                "flip at {i}: {got:?}"
            );
        }
    }

    /// Re-seals a body with a valid CRC, to reach the decoder's field checks.
    fn seal(mut content: Vec<u8>) -> Vec<u8> {
        let crc = crc32fast::hash(&content);
        content.extend_from_slice(&crc.to_le_bytes());
        content
    }

    #[test]
    fn a_writer_epoch_round_trips_as_version_2_and_none_stays_version_1() {
        let m = match sample_add() {
            MetadataEvent::Add(m) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(MetadataEvent::Add(m.clone()).encode()[0], EVENT_VERSION);
        let with = RemoteLogSegmentMetadata::builder(
            m.remote_log_segment_id().clone(),
            m.start_offset(),
            m.end_offset(),
        )
        .writer_epoch(7)
        .build()
        .unwrap();
        for event in [
            MetadataEvent::Add(with.clone()),
            MetadataEvent::Snapshot(with),
        ] {
            let bytes = event.encode();
            assert_eq!(bytes[0], EVENT_VERSION_WRITER_EPOCH);
            let read = MetadataEvent::decode(&bytes).unwrap();
            assert_eq!(read, event);
        }
    }

    #[test]
    fn well_sealed_but_malformed_events_get_typed_errors() {
        let bytes = sample_add().encode();
        let content = bytes[..bytes.len() - 4].to_vec();
        let mut v = content.clone();
        v[0] = 3;
        assert_eq!(
            MetadataEvent::decode(&seal(v)),
            Err(EventDecodeError::Version(3))
        );
        // Version 2 needs the writer epoch after the custom metadata, and never 0.
        let mut v = content.clone();
        v[0] = 2;
        assert!(matches!(
            MetadataEvent::decode(&seal(v.clone())),
            Err(EventDecodeError::Truncated {
                field: "writer epoch",
                ..
            })
        ));
        v.extend_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            MetadataEvent::decode(&seal(v)),
            Err(EventDecodeError::Metadata(_))
        ));
        let mut v = content.clone();
        v[1] = 9;
        assert_eq!(
            MetadataEvent::decode(&seal(v)),
            Err(EventDecodeError::Kind(9))
        );
        let mut v = content.clone();
        v.push(0);
        assert_eq!(
            MetadataEvent::decode(&seal(v)),
            Err(EventDecodeError::Trailing(1))
        );
        let v = content[..content.len() - 3].to_vec();
        assert!(matches!(
            MetadataEvent::decode(&seal(v)),
            Err(EventDecodeError::Truncated { .. })
        ));
        assert_eq!(
            MetadataEvent::decode(&[1, 1, 0]),
            Err(EventDecodeError::TooShort { len: 3 })
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = MetadataEvent::decode(&bytes);
            let _ = MetadataEvent::decode(&seal(bytes));
        }

        #[test]
        fn arbitrary_updates_round_trip(
            ts in any::<i64>(), broker in any::<i32>(), code in 0u8..4,
            custom in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..128)),
            partition in any::<i32>(), name in "[a-z]{1,20}",
        ) {
            let tp = TopicIdPartition::new(Uuid::new_v4(), name, partition);
            let state = RemoteLogSegmentState::from_code(code).unwrap();
            let e = MetadataEvent::Update(RemoteLogSegmentMetadataUpdate::new(
                RemoteLogSegmentId::generate(tp), ts, custom.map(CustomMetadata::new), state, broker));
            prop_assert_eq!(MetadataEvent::decode(&e.encode()).unwrap(), e);
        }
    }
}
