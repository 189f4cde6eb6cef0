#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Mutex;

use proptest::prelude::*;

use super::*;
use crate::recovery::{ListedObject, RemoteSegmentLister};

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(7), "orders", 3)
}

fn seg(n: u128, start: u64, end: u64) -> HeadSegment {
    HeadSegment {
        id: Uuid::from_u128(n),
        start_seq: start,
        end_seq: end,
        writer_epoch: 2,
    }
}

fn head(segments: Vec<HeadSegment>) -> PartitionHead {
    PartitionHead {
        partition: tp(),
        writer_epoch: 3,
        incarnation: Uuid::from_u128(99),
        serial: 12,
        written_ms: 1_700_000_000_123,
        writer_last_seq: 420,
        retention_point: 5,
        segments,
        tail: Vec::new(),
    }
}

fn two() -> PartitionHead {
    head(vec![seg(1, 5, 99), seg(2, 100, 299)])
}

/// A frame around `body` with a correct length and CRC, so checks past them are reached.
fn reframe(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(HEAD_MAGIC);
    out.push(HEAD_VERSION);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The body of an encoded head.
fn body_of(bytes: &[u8]) -> Vec<u8> {
    bytes[HEADER_LEN..bytes.len() - 4].to_vec()
}

fn reason(r: Result<PartitionHead, RemoteStorageError>) -> String {
    match r {
        Err(RemoteStorageError::Corrupt { location, reason }) => {
            assert_eq!(location, "key-x");
            reason
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn heads_round_trip() {
    for h in [head(Vec::new()), two(), head(vec![seg(3, 0, 0)])] {
        let bytes = h.encode();
        assert_eq!(&bytes[..4], HEAD_MAGIC);
        assert_eq!(PartitionHead::decode(&bytes, "k").unwrap(), h);
    }
    assert_eq!(head(Vec::new()).end_seq(), None);
    assert_eq!(two().end_seq(), Some(299));
    let long = PartitionHead {
        partition: TopicIdPartition::new(Uuid::from_u128(1), "t".repeat(249), i32::MAX),
        incarnation: Uuid::nil(),
        writer_epoch: 0,
        ..two()
    };
    assert_eq!(PartitionHead::decode(&long.encode(), "k").unwrap(), long);
}

#[test]
fn every_flipped_byte_is_a_corrupt_error_naming_the_key() {
    let bytes = two().encode();
    for i in 0..bytes.len() {
        for mask in [0x01, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= mask;
            let why = reason(PartitionHead::decode(&b, "key-x"));
            assert!(why.starts_with("partition head: "), "byte {i}: {why}");
        }
    }
}

#[test]
fn every_truncation_is_a_corrupt_error() {
    let bytes = two().encode();
    for len in 0..bytes.len() {
        reason(PartitionHead::decode(&bytes[..len], "key-x"));
    }
}

#[test]
fn a_huge_segment_count_in_a_short_buffer_is_refused_before_allocating() {
    let mut body = body_of(&head(Vec::new()).encode());
    let at = body.len() - 4;
    for count in [u32::MAX, 1 << 20, 1] {
        body[at..].copy_from_slice(&count.to_le_bytes());
        let why = reason(PartitionHead::decode(&reframe(&body), "key-x"));
        assert!(why.contains(&format!("segment count {count}")), "{why}");
    }
    // A count one short of the entries present: the extra entry is trailing bytes.
    let mut body = body_of(&two().encode());
    let at = body.len() - 2 * SEGMENT_LEN - 4;
    body[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    let why = reason(PartitionHead::decode(&reframe(&body), "key-x"));
    assert!(why.contains("40 trailing bytes"), "{why}");
}

#[test]
fn overlapping_unordered_and_inverted_segments_are_refused() {
    for (segments, want) in [
        (
            vec![seg(1, 0, 99), seg(2, 50, 150)],
            "not after the end seq 99",
        ),
        (
            vec![seg(1, 0, 99), seg(2, 99, 150)],
            "not after the end seq 99",
        ),
        (
            vec![seg(1, 100, 199), seg(2, 0, 99)],
            "not after the end seq 199",
        ),
        (vec![seg(1, 0, 9), seg(1, 0, 9)], "not after the end seq 9"),
        (vec![seg(1, 10, 9)], "after its end seq 9"),
    ] {
        let why = reason(PartitionHead::decode(&head(segments).encode(), "key-x"));
        assert!(why.contains(want), "{why}");
    }
    // Adjacent, with or without a gap between them, is fine.
    for segments in [
        vec![seg(1, 0, 99), seg(2, 100, 150)],
        vec![seg(1, 0, 99), seg(2, 200, 250)],
    ] {
        let h = head(segments);
        assert_eq!(PartitionHead::decode(&h.encode(), "k").unwrap(), h);
    }
}

#[test]
fn frame_fields_are_checked_even_with_a_matching_checksum() {
    let body = body_of(&two().encode());
    let good = reframe(&body);
    let fix_crc = |mut b: Vec<u8>| {
        let n = b.len() - 4;
        let crc = crc32fast::hash(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    for (byte, value, want) in [
        (0, b'X', "bad magic"),
        (4, 3, "unsupported version 3"),
        (4, 0, "unsupported version 0"),
        (6, 1, "reserved bytes"),
        (8, 0, "body length"),
    ] {
        let mut b = good.clone();
        b[byte] = value;
        let why = reason(PartitionHead::decode(&fix_crc(b), "key-x"));
        assert!(why.contains(want), "byte {byte}: {why}");
    }
    let mut trailing = body.clone();
    trailing.push(0);
    let why = reason(PartitionHead::decode(&reframe(&trailing), "key-x"));
    assert!(why.contains("1 trailing bytes"), "{why}");
    // A hostile topic name in an otherwise well-formed head.
    let bad = PartitionHead {
        partition: TopicIdPartition::new(Uuid::from_u128(1), "../x", 0),
        ..two()
    };
    let why = reason(PartitionHead::decode(&bad.encode(), "key-x"));
    assert!(why.contains("invalid partition"), "{why}");
    let huge = vec![0u8; MAX_HEAD_LEN + 1];
    let why = reason(PartitionHead::decode(&huge, "key-x"));
    assert!(why.contains("over the"), "{why}");
}

#[test]
fn the_head_key_is_an_ownership_name() {
    let key = layout::head_key("d");
    assert_eq!(key, "d/_head");
    assert!(layout::is_ownership_name(layout::HEAD_NAME));
    assert!(layout::is_ownership_name("_head.tmp-12-0"));
    assert_eq!(layout::parse_epoch_name(layout::HEAD_NAME), None);
    assert_eq!(layout::parse_segment_object_name(layout::HEAD_NAME), None);
}

/// A store in memory whose versions count the writes.
#[derive(Default)]
struct Memory {
    objects: Mutex<BTreeMap<String, (Vec<u8>, u64)>>,
    writes: Mutex<u64>,
}

impl RemoteSegmentLister for Memory {
    fn list_partition(
        &self,
        dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        let listed: Vec<ListedObject> = self
            .objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{dir}/")))
            .map(|(k, (b, _))| ListedObject {
                key: k.clone(),
                size: b.len() as u64,
            })
            .collect();
        listed.into_iter().try_for_each(visit)
    }
    fn list_partition_dirs(
        &self,
        _: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        Ok(())
    }
    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        let objects = self.objects.lock().unwrap();
        let found = objects.get(key).map(|(b, _)| b.clone());
        found.ok_or_else(|| {
            RemoteStorageError::io(key, std::io::Error::from(std::io::ErrorKind::NotFound))
        })
    }
    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        self.objects.lock().unwrap().remove(key);
        Ok(())
    }
}

impl OwnershipStore for Memory {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        if self.objects.lock().unwrap().contains_key(key) {
            return Ok(false);
        }
        self.put_object(key, bytes).map(|()| true)
    }
    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        let mut writes = self.writes.lock().unwrap();
        *writes += 1;
        let entry = (bytes.to_vec(), *writes);
        self.objects.lock().unwrap().insert(key.to_owned(), entry);
        Ok(())
    }
    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        let objects = self.objects.lock().unwrap();
        let Some((bytes, version)) = objects.get(key) else {
            return Ok(ConditionalRead::Absent);
        };
        let version = version.to_string();
        if known == Some(version.as_str()) {
            return Ok(ConditionalRead::Unchanged);
        }
        if bytes.len() > max_len {
            return Err(RemoteStorageError::Corrupt {
                location: key.to_owned(),
                reason: "too large".to_owned(),
            });
        }
        Ok(ConditionalRead::Changed {
            bytes: bytes.clone(),
            version,
        })
    }
}

#[test]
fn read_head_finds_absent_fresh_unchanged_and_damaged_heads() {
    let store = Memory::default();
    let dir = layout::partition_dir(&tp()).unwrap();
    assert!(matches!(
        read_head(&store, &dir, None).unwrap(),
        HeadRead::Absent
    ));
    write_head(&store, &dir, &two()).unwrap();
    let HeadRead::Fresh { head, version } = read_head(&store, &dir, None).unwrap() else {
        panic!("expected a fresh head");
    };
    assert_eq!(head, two());
    assert!(matches!(
        read_head(&store, &dir, Some(&version)).unwrap(),
        HeadRead::Unchanged
    ));
    // Rewritten: read again under a new version.
    let next = PartitionHead {
        serial: 13,
        ..two()
    };
    write_head(&store, &dir, &next).unwrap();
    let HeadRead::Fresh { head, version: v2 } = read_head(&store, &dir, Some(&version)).unwrap()
    else {
        panic!("expected a fresh head");
    };
    assert_eq!(head, next);
    assert_ne!(v2, version);
    // Garbage under the key: damaged, with its version, not an error.
    store.put_object(&layout::head_key(&dir), b"junk").unwrap();
    match read_head(&store, &dir, Some(&v2)).unwrap() {
        HeadRead::Damaged { version, error } => {
            assert_ne!(version, v2);
            assert!(
                matches!(&error, RemoteStorageError::Corrupt { location, .. } if location.ends_with("/_head")),
                "{error:?}"
            );
        }
        other => panic!("expected a damaged head, got {other:?}"),
    }
    // Another partition's head under this directory: damaged.
    let other = PartitionHead {
        partition: TopicIdPartition::new(Uuid::from_u128(8), "orders", 3),
        ..two()
    };
    store
        .put_object(&layout::head_key(&dir), &other.encode())
        .unwrap();
    assert!(matches!(
        read_head(&store, &dir, None).unwrap(),
        HeadRead::Damaged {
            error: RemoteStorageError::Corrupt { .. },
            ..
        }
    ));
    // And a writer never puts one there.
    assert!(matches!(
        write_head(&store, &dir, &other),
        Err(RemoteStorageError::InvalidArgument { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn arbitrary_heads_round_trip(
        name in "[a-zA-Z0-9._-]{1,40}", partition in 0..i32::MAX,
        epoch in any::<u64>(), serial in any::<u64>(), written in any::<i64>(),
        last in any::<u64>(), retention in any::<u64>(),
        lens in proptest::collection::vec((0u64..1000, 0u64..1000, any::<u64>()), 0..20),
        chains in proptest::collection::btree_map(any::<u128>(), 1u64.., 0..6),
    ) {
        prop_assume!(name != "." && name != "..");
        let mut next = 0u64;
        let segments = lens.iter().enumerate().map(|(i, (gap, len, we))| {
            let start = next + gap;
            next = start + len + 1;
            HeadSegment { id: Uuid::from_u128(i as u128), start_seq: start, end_seq: start + len, writer_epoch: *we }
        }).collect();
        let h = PartitionHead {
            partition: TopicIdPartition::new(Uuid::from_u128(5), name, partition),
            writer_epoch: epoch, incarnation: Uuid::from_u128(6), serial,
            written_ms: written, writer_last_seq: last, retention_point: retention, segments,
            tail: chains.into_iter().map(|(c, from)| TailRef { chain: Uuid::from_u128(c), from }).collect(),
        };
        prop_assert_eq!(PartitionHead::decode(&h.encode(), "k").unwrap(), h);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = PartitionHead::decode(&bytes, "k");
        let _ = PartitionHead::decode(&reframe(&bytes), "k");
    }
}

fn with_tail(tail: Vec<TailRef>) -> PartitionHead {
    PartitionHead { tail, ..two() }
}

fn tail_ref(n: u128, from: u64) -> TailRef {
    TailRef {
        chain: Uuid::from_u128(n),
        from,
    }
}

#[test]
fn a_head_without_tail_is_written_in_version_1_and_one_with_tail_in_version_2() {
    let v1 = two().encode();
    assert_eq!(v1[4], HEAD_VERSION);
    let h = with_tail(vec![tail_ref(10, 1), tail_ref(11, 57)]);
    let v2 = h.encode();
    assert_eq!(v2[4], HEAD_VERSION_TAIL);
    // The same head but its tail: version 2 adds only the tail count and references.
    assert_eq!(v2.len(), v1.len() + 4 + 2 * TAIL_REF_LEN);
    assert_eq!(PartitionHead::decode(&v2, "k").unwrap(), h);
    assert!(PartitionHead::decode(&v1, "k").unwrap().tail.is_empty());
}

#[test]
fn every_flipped_byte_and_truncation_of_a_version_2_head_is_refused() {
    let bytes = with_tail(vec![tail_ref(10, 1), tail_ref(11, 57)]).encode();
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x40;
        let why = reason(PartitionHead::decode(&b, "key-x"));
        assert!(why.starts_with("partition head: "), "byte {i}: {why}");
        let why = reason(PartitionHead::decode(&bytes[..i], "key-x"));
        assert!(why.starts_with("partition head: "), "length {i}: {why}");
    }
}

/// A version 2 frame around `body`, with a correct length and CRC.
fn reframe_v2(body: &[u8]) -> Vec<u8> {
    let mut out = reframe(body);
    out[4] = HEAD_VERSION_TAIL;
    let at = out.len() - 4;
    let crc = crc32fast::hash(&out[..at]);
    out[at..].copy_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn a_version_2_head_with_a_bad_tail_is_refused_naming_it() {
    // A version 1 body framed as version 2: its tail count is missing.
    let v1_body = body_of(&two().encode());
    let why = reason(PartitionHead::decode(&reframe_v2(&v1_body), "key-x"));
    assert!(why.contains("tail count"), "{why}");
    let cases: [(Vec<u8>, &str); 3] = [
        // A count no body can hold: refused before anything is allocated.
        (
            u32::MAX.to_le_bytes().to_vec(),
            "tail count 4294967295 needs",
        ),
        (
            [
                &1u32.to_le_bytes()[..],
                Uuid::from_u128(3).as_bytes(),
                &0u64.to_le_bytes(),
            ]
            .concat(),
            "starts at object 0",
        ),
        (
            [
                &2u32.to_le_bytes()[..],
                Uuid::from_u128(3).as_bytes(),
                &1u64.to_le_bytes(),
                Uuid::from_u128(3).as_bytes(),
                &9u64.to_le_bytes(),
            ]
            .concat(),
            "listed twice",
        ),
    ];
    for (tail, words) in cases {
        let body = [v1_body.clone(), tail].concat();
        let why = reason(PartitionHead::decode(&reframe_v2(&body), "key-x"));
        assert!(why.contains(words), "{words}: {why}");
    }
    // And a count that claims fewer references than follow leaves trailing bytes.
    let body = [
        v1_body,
        [
            &0u32.to_le_bytes()[..],
            Uuid::from_u128(3).as_bytes(),
            &1u64.to_le_bytes(),
        ]
        .concat(),
    ]
    .concat();
    let why = reason(PartitionHead::decode(&reframe_v2(&body), "key-x"));
    assert!(why.contains("trailing"), "{why}");
}
