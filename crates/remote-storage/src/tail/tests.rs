#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use uuid::Uuid;

use super::*;
use crate::error::RemoteStorageError;
use crate::layout;
use crate::model::TopicIdPartition;
use crate::ownership::{ConditionalRead, OwnershipStore};
use crate::recovery::{self, ListedObject, RemoteSegmentLister};
use crate::testkit::InMemoryRemoteStorage;

const CHAIN: Uuid = Uuid::from_u128(0xc4a1);
const WRITER: Uuid = Uuid::from_u128(0x1111);
const FENCER: Uuid = Uuid::from_u128(0x2222);

fn header(topic: u128, partition: i32, first: u64, last: u64) -> TailEntryHeader {
    TailEntryHeader {
        topic_id: Uuid::from_u128(topic),
        partition,
        writer_epoch: 4,
        first_seq: first,
        last_seq: last,
        max_timestamp: 1_700_000_000_000 + i64::try_from(last).unwrap(),
    }
}

/// A data object of `CHAIN` holding three partitions' bytes.
fn three(number: u64) -> TailObject {
    TailObject::data_object(
        CHAIN,
        number,
        WRITER,
        1_700_000_000_000,
        &[
            (header(1, 0, 10, 12), b"batches of p0".as_slice()),
            (header(1, 1, 0, 0), b"b".as_slice()),
            (header(2, 0, 7, 9), b"batches of topic 2".as_slice()),
        ],
    )
    .unwrap()
}

fn one(chain: Uuid, number: u64, writer: Uuid) -> TailObject {
    let bytes = format!("batches {number}");
    TailObject::data_object(
        chain,
        number,
        writer,
        1_700_000_000_000,
        &[(header(1, 0, number, number), bytes.as_bytes())],
    )
    .unwrap()
}

fn corrupt_reason(r: Result<TailObject, RemoteStorageError>, key: &str) -> String {
    match r {
        Err(RemoteStorageError::Corrupt { location, reason }) => {
            assert_eq!(location, key);
            assert!(reason.starts_with("tail object: "), "{reason}");
            reason
        }
        other => panic!("expected Corrupt at {key}, got {other:?}"),
    }
}

/// Where the data starts in an encoded object with `entries` entries.
fn header_len(entries: usize) -> usize {
    60 + 68 * entries + 4
}

/// Replaces the header CRC of `bytes` (with `entries` entries) by the right one, so checks
/// past it are reached.
fn recrc(bytes: &mut [u8], entries: usize) {
    let at = header_len(entries) - 4;
    let crc = crc32fast::hash(&bytes[..at]);
    bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn data_objects_and_fences_round_trip() {
    let object = three(5);
    assert_eq!(object.kind(), TailKind::Data);
    assert_eq!(object.key(), layout::tail_object_key(CHAIN, 5));
    let bytes = object.encode();
    assert_eq!(bytes.len(), object.encoded_len());
    assert_eq!(&bytes[..4], TAIL_MAGIC);
    let decoded = TailObject::decode(&bytes, &object.key()).unwrap();
    assert_eq!(decoded, object);
    assert_eq!(TailObject::decode_owned(bytes, "k").unwrap(), object);
    let offsets: Vec<(u64, u32)> = decoded
        .entries()
        .iter()
        .map(|e| (e.data_offset, e.data_len))
        .collect();
    assert_eq!(offsets, [(0, 13), (13, 1), (14, 18)]);
    assert_eq!(decoded.entries()[2].header(), header(2, 0, 7, 9));
    let i = decoded.entry_for(Uuid::from_u128(2), 0).unwrap();
    assert_eq!(decoded.entry_data(i).unwrap(), b"batches of topic 2");
    assert_eq!(decoded.entry_for(Uuid::from_u128(2), 1), None);
    assert!(matches!(
        decoded.entry_data(3),
        Err(RemoteStorageError::InvalidArgument { .. })
    ));

    let fence = TailObject::fence(CHAIN, 6, FENCER, -5);
    let decoded = TailObject::decode(&fence.encode(), "k").unwrap();
    assert_eq!(decoded, fence);
    assert_eq!(
        (decoded.kind(), decoded.incarnation(), decoded.written_ms()),
        (TailKind::Fence, FENCER, -5)
    );
    assert!(decoded.entries().is_empty() && decoded.data().is_empty());
    assert_eq!(fence.encode().len(), header_len(0));
}

#[test]
fn every_flipped_byte_of_a_data_object_is_refused_or_caught_by_entry_data() {
    let object = three(5);
    let key = object.key();
    let bytes = object.encode();
    let data_at = header_len(3);
    for i in 0..bytes.len() {
        for mask in [0x01, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= mask;
            let decoded = TailObject::decode(&b, &key);
            if i < data_at {
                corrupt_reason(decoded, &key);
                continue;
            }
            // A flip in the data: the header still decodes, and only the entry holding the
            // byte is refused, naming the key and its seqs.
            let decoded = decoded.unwrap();
            let offset = (i - data_at) as u64;
            for (j, e) in decoded.entries().iter().enumerate() {
                let holds =
                    offset >= e.data_offset && offset < e.data_offset + u64::from(e.data_len);
                match decoded.entry_data(j) {
                    Err(RemoteStorageError::Corrupt { location, reason }) if holds => {
                        assert_eq!(location, key);
                        let seqs = format!("seqs {}..={}", e.first_seq, e.last_seq);
                        assert!(reason.contains(&seqs), "{reason}");
                    }
                    Ok(data) if !holds => assert_eq!(data, object.entry_data(j).unwrap()),
                    other => panic!("byte {i}, entry {j}: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn every_flipped_byte_and_truncation_of_a_fence_and_every_truncation_of_a_data_object_is_refused() {
    let fence = TailObject::fence(CHAIN, 9, FENCER, 1);
    let bytes = fence.encode();
    for i in 0..bytes.len() {
        for mask in [0x01, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= mask;
            corrupt_reason(TailObject::decode(&b, "key-f"), "key-f");
        }
    }
    for object in [fence, three(5)] {
        let bytes = object.encode();
        for len in 0..bytes.len() {
            corrupt_reason(TailObject::decode(&bytes[..len], "key-t"), "key-t");
            corrupt_reason(
                TailObject::decode_owned(bytes[..len].to_vec(), "key-t"),
                "key-t",
            );
        }
        // And one byte more is a trailing byte.
        let longer = [bytes.clone(), vec![0]].concat();
        corrupt_reason(TailObject::decode(&longer, "key-t"), "key-t");
    }
}

/// Damages an encoded object in place.
type Damage = Box<dyn Fn(&mut Vec<u8>)>;

#[test]
fn absurd_counts_lengths_and_inconsistent_headers_are_refused_naming_them() {
    let base = three(5).encode();
    // An entry count no object can hold: refused from the bytes left, before allocating.
    let mut b = base.clone();
    b[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
    let why = corrupt_reason(TailObject::decode(&b, "k"), "k");
    assert!(why.contains("entry count 4294967295 needs"), "{why}");
    // An object over the limit is refused by its size alone.
    let huge = vec![0u8; MAX_TAIL_OBJECT_LEN + 1];
    let why = corrupt_reason(TailObject::decode(&huge, "k"), "k");
    assert!(why.contains("over the"), "{why}");

    let entry = |i: usize, field: usize| 60 + 68 * i + field;
    let cases: [(&str, Damage); 9] = [
        ("unsupported version 2", Box::new(|b| b[4] = 2)),
        ("unknown kind 3", Box::new(|b| b[5] = 3)),
        ("reserved bytes", Box::new(|b| b[6] = 1)),
        ("number 0", Box::new(|b| b[24..32].fill(0))),
        ("a fence with 3 entries", Box::new(|b| b[5] = 2)),
        (
            "a second entry of that partition",
            Box::new(move |b| b[entry(1, 16)] = 0),
        ),
        (
            "first seq 13 above last seq 12",
            Box::new(move |b| b[entry(0, 28)] = 13),
        ),
        (
            // An absurd data length: the entries overrun the data.
            "where the entries before end at 4294967295",
            Box::new(move |b| b[entry(0, 60)..entry(0, 64)].fill(0xff)),
        ),
        (
            "a negative partition",
            Box::new(move |b| b[entry(2, 16)..entry(2, 20)].fill(0xff)),
        ),
    ];
    for (words, damage) in cases {
        let mut b = base.clone();
        damage(&mut b);
        recrc(&mut b, 3);
        let why = corrupt_reason(TailObject::decode(&b, "k"), "k");
        assert!(why.contains(words), "{words}: {why}");
    }
    // An entry whose data overlaps the one before it.
    let mut b = base.clone();
    b[entry(1, 52)] = 12;
    recrc(&mut b, 3);
    let why = corrupt_reason(TailObject::decode(&b, "k"), "k");
    assert!(
        why.contains("data at offset 12 where the entries before end at 13"),
        "{why}"
    );
    // The last entry shorter than the data: the data holds bytes no entry owns.
    let mut b = base.clone();
    b[entry(2, 60)] = 17;
    recrc(&mut b, 3);
    let why = corrupt_reason(TailObject::decode(&b, "k"), "k");
    assert!(
        why.contains("the entries hold 31 data bytes but 32 follow"),
        "{why}"
    );
    // A data object without entries.
    let mut b = TailObject::fence(CHAIN, 1, FENCER, 0).encode();
    b[5] = 1;
    recrc(&mut b, 0);
    let why = corrupt_reason(TailObject::decode(&b, "k"), "k");
    assert!(why.contains("without entries"), "{why}");
}

#[test]
fn a_data_object_that_breaks_the_rules_is_never_built() {
    let x = |h| (h, b"x".as_slice());
    let refused = [
        (0, vec![x(header(1, 0, 1, 1))], "numbers start at 1"),
        (1, vec![], "at least one entry"),
        (
            1,
            vec![x(header(1, 0, 1, 1)), x(header(1, 0, 2, 2))],
            "entry 1 (00000000-0000-0000-0000-000000000001-0): a second entry",
        ),
        (
            1,
            vec![x(header(1, 0, 2, 1))],
            "first seq 2 above last seq 1",
        ),
        (1, vec![x(header(1, -1, 1, 1))], "a negative partition"),
        (
            1,
            vec![(header(1, 0, 1, 1), b"".as_slice())],
            "no data bytes",
        ),
    ];
    for (number, parts, words) in refused {
        let r = TailObject::data_object(CHAIN, number, WRITER, 0, &parts);
        assert!(
            matches!(&r, Err(RemoteStorageError::InvalidArgument { message })
                if message.contains(&layout::tail_object_key(CHAIN, number))
                    && message.contains(words)),
            "{words}: {r:?}"
        );
    }
    let big = vec![0u8; MAX_TAIL_OBJECT_LEN];
    let r = TailObject::data_object(CHAIN, 1, WRITER, 0, &[(header(1, 0, 1, 1), &big[..])]);
    assert!(
        matches!(&r, Err(RemoteStorageError::InvalidArgument { message }) if message.contains("over the")),
        "{r:?}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    #[test]
    fn arbitrary_objects_round_trip_and_arbitrary_bytes_never_panic(
        parts in proptest::collection::btree_map(
            (0u128..4, 0i32..4),
            (0u64..1000, 0u64..5, proptest::collection::vec(proptest::prelude::any::<u8>(), 1..40)),
            1..6,
        ),
        number in 1u64..,
        noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
    ) {
        let owned: Vec<(TailEntryHeader, Vec<u8>)> = parts
            .into_iter()
            .map(|((t, p), (first, len, bytes))| (header(t, p, first, first + len), bytes))
            .collect();
        let borrowed: Vec<(TailEntryHeader, &[u8])> =
            owned.iter().map(|(h, b)| (*h, b.as_slice())).collect();
        let object = TailObject::data_object(CHAIN, number, WRITER, -1, &borrowed).unwrap();
        let decoded = TailObject::decode(&object.encode(), "k").unwrap();
        proptest::prop_assert_eq!(&decoded, &object);
        for (i, (h, b)) in owned.iter().enumerate() {
            proptest::prop_assert_eq!(decoded.entry_for(h.topic_id, h.partition), Some(i));
            proptest::prop_assert_eq!(decoded.entry_data(i).unwrap(), b.as_slice());
        }
        let _ = TailObject::decode(&noise, "k");
        // Noise behind a valid start: the checks past the magic are reached.
        let mut framed = object.encode()[..8].to_vec();
        framed.extend_from_slice(&noise);
        let _ = TailObject::decode(&framed, "k");
    }
}

mod chain;
