//! The message encoder the log's appends use against the reference encoder, at every varint
//! width and split into pieces.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

fn arb_message() -> impl Strategy<Value = crate::Message> {
    (
        any::<i64>(),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..40)),
        0usize..3_000,
        prop::collection::vec(
            ("[a-z]{0,6}", prop::collection::vec(any::<u8>(), 0..20)),
            0..3,
        ),
    )
        .prop_map(|(timestamp, key, value_len, headers)| crate::Message {
            timestamp: timestamp >> 2,
            key: key.map(Bytes::from),
            value: Bytes::from(
                (0..value_len)
                    .map(|i| (i * 31 % 251) as u8)
                    .collect::<Vec<u8>>(),
            ),
            headers: headers
                .into_iter()
                .map(|(key, value)| crate::Header {
                    key,
                    value: Bytes::from(value),
                })
                .collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// The pieces of a split encoding, joined, are byte for byte the batches `encode_messages`
    /// writes for the same messages, whatever is borrowed and wherever the size cap splits.
    #[test]
    fn split_encoding_joins_to_the_whole_encoding(
        msgs in prop::collection::vec(arb_message(), 1..20),
        borrow_at_least in 0usize..4_000,
        max_bytes in 1usize..40_000,
        base in 0i64..(1 << 40),
        index_base in 0usize..5,
        prefix in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut whole = Vec::new();
        let mut out = prefix.clone();
        let mut pieces = Vec::new();
        let mut at = 0;
        // Every batch of the messages, one call each, into the same buffers.
        while at < msgs.len() {
            let offset = base + at as i64;
            let a = encode_messages(&mut whole, offset, &msgs[at..], Compression::None, max_bytes)
                .unwrap();
            let b = encode_messages_split(
                &mut out, &mut pieces, offset, &msgs[at..], index_base + at, max_bytes, borrow_at_least,
            )
            .unwrap();
            prop_assert_eq!(a, b);
            at += a;
        }
        let mut joined = prefix.clone();
        for p in &pieces {
            match p {
                BatchPiece::Bytes(r) => joined.extend_from_slice(&out[r.clone()]),
                BatchPiece::Value(i) => joined.extend_from_slice(&msgs[*i - index_base].value),
            }
        }
        prop_assert_eq!(&joined[prefix.len()..], &whole[..]);
        // And a second implementation reads them: every batch parses with a valid CRC.
        let mut rest = Bytes::from(whole);
        while !rest.is_empty() {
            let view = BatchView::parse(&rest).unwrap();
            prop_assert!(view.records(1 << 24).unwrap().all(|r| r.is_ok()));
            rest = rest.slice(view.size()..);
        }
    }
}

/// Messages whose varints sit on every width boundary the message encoder's fast path tells
/// apart: value lengths and timestamp deltas of 1, 2, 3 and more bytes (zigzag 63/64,
/// 8191/8192, 2^20 - 1/2^20; a value whose record's length alone passes 3 bytes), keys and headers (the general path) between records of the
/// common shape, and runs of equal sizes (whose lengths the encoder reuses).
fn boundary_messages() -> Vec<crate::Message> {
    let value = |n: usize| Bytes::from((0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let base = 1_700_000_000_000i64;
    let mut msgs = Vec::new();
    for (i, len) in [
        0usize, 1, 63, 64, 100, 100, 100, 8191, 8192, 8192, 70_000, 1_048_570, 1_100_000, 100,
    ]
    .into_iter()
    .enumerate()
    {
        let mut m = crate::Message::new(value(len)).with_timestamp(base + i as i64);
        if i == 5 {
            m = m.with_key("k");
        }
        if i == 9 {
            m = m.with_header("h", "v");
        }
        msgs.push(m);
    }
    for delta in [
        -1i64,
        63,
        64,
        -65,
        8191,
        8192,
        (1 << 20) - 1,
        1 << 20,
        -(1 << 20),
        1 << 40,
    ] {
        msgs.push(crate::Message::new(value(100)).with_timestamp(base + delta));
    }
    msgs
}

/// `encode_batch`'s batch of the same records: the second, independent encoder.
fn reference_batch(base_offset: i64, msgs: &[crate::Message]) -> Bytes {
    let records: Vec<RecordSpec> = msgs
        .iter()
        .map(|m| RecordSpec {
            timestamp: m.timestamp,
            key: m.key.clone(),
            value: Some(m.value.clone()),
            headers: m
                .headers
                .iter()
                .map(|h| (h.key.clone(), Some(h.value.clone())))
                .collect(),
        })
        .collect();
    encode_batch(&BatchSpec::new(base_offset), &records).unwrap()
}

#[test]
fn the_message_encoder_writes_what_encode_batch_writes_at_every_varint_width() {
    let msgs = boundary_messages();
    // Every suffix: each record in turn is the first, whose timestamp the deltas count from.
    for from in 0..msgs.len() {
        let rest = &msgs[from..];
        let mut out = vec![0xAA; 3]; // Bytes before the batch stay as they are.
        let taken = encode_messages(&mut out, 77, rest, Compression::None, usize::MAX).unwrap();
        assert_eq!(taken, rest.len(), "from {from}");
        assert_eq!(&out[..3], &[0xAA; 3]);
        assert_eq!(out[3..], reference_batch(77, rest)[..], "from {from}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Byte for byte the batch `encode_batch` (a second encoder, record by record through
    /// the varint module) writes for the same records, whatever their shapes and sizes.
    #[test]
    fn the_message_encoder_agrees_with_encode_batch(
        msgs in prop::collection::vec(arb_message(), 1..30),
        base in 0i64..(1 << 40),
    ) {
        let mut out = Vec::new();
        let taken = encode_messages(&mut out, base, &msgs, Compression::None, usize::MAX).unwrap();
        prop_assert_eq!(taken, msgs.len());
        prop_assert_eq!(&out[..], &reference_batch(base, &msgs)[..]);
    }
}
