//! Property and edge tests of the message encoding.

use krabka_protocol::{Bytes, DecodeError, Field, Header, Message};
use proptest::prelude::*;

fn arb_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn arb_message() -> impl Strategy<Value = Message> {
    (
        any::<i64>(),
        prop::option::of(arb_bytes(64)),
        arb_bytes(2048),
        prop::collection::vec((".{0,16}", arb_bytes(32)), 0..40),
    )
        .prop_map(|(timestamp, key, value, headers)| Message {
            timestamp,
            key,
            value,
            headers: headers
                .into_iter()
                .map(|(k, v)| Header::new(k, v))
                .collect(),
        })
}

proptest! {
    #[test]
    fn round_trip_any_message(m in arb_message(), trailing in arb_bytes(16)) {
        let mut buf = Vec::new();
        m.encode(&mut buf);
        prop_assert_eq!(buf.len(), m.encoded_len());
        let encoded_len = buf.len();
        buf.extend_from_slice(&trailing);
        let (d, used) = Message::decode(&buf).unwrap();
        prop_assert_eq!(used, encoded_len);
        prop_assert_eq!(&d, &m);
        let (z, used_z) = Message::decode_bytes(&Bytes::from(buf)).unwrap();
        prop_assert_eq!(used_z, encoded_len);
        prop_assert_eq!(z, m);
    }

    #[test]
    fn arbitrary_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok((_, used)) = Message::decode(&buf) {
            prop_assert!(used <= buf.len());
        }
    }

    #[test]
    fn mutated_encodings_never_panic(m in arb_message(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut buf = m.to_vec();
        for (i, b) in flips {
            let i = i.index(buf.len());
            buf[i] ^= b;
        }
        if let Ok((_, used)) = Message::decode(&buf) {
            prop_assert!(used <= buf.len());
        }
    }

    #[test]
    fn every_strict_prefix_is_an_error(m in arb_message()) {
        let buf = m.to_vec();
        for cut in [0, 1, buf.len() / 2, buf.len() - 1] {
            // The bytes kept are valid, so only a length can run past the cut: never a bad
            // version, flag or header key.
            let got = Message::decode(&buf[..cut]);
            prop_assert!(
                matches!(&got, Err(DecodeError::Truncated { at, .. } | DecodeError::LengthOutOfRange { at, .. })
                    if *at <= cut),
                "cut {}: {:?}", cut, got
            );
        }
    }
}

#[test]
fn negative_timestamp_binary_key_many_headers() {
    let mut m = Message::new(Bytes::new())
        .with_key(vec![0u8, 255, 0, 128])
        .with_timestamp(-1_234_567);
    for i in 0..1000 {
        m = m.with_header(format!("h{i}"), vec![i as u8; i % 7]);
    }
    let buf = m.to_vec();
    assert_eq!(Message::decode(&buf).unwrap(), (m, buf.len()));
}

#[test]
fn truncated_is_reported_with_position() {
    let err = Message::decode(&[1, 0, 1, 2]).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Truncated {
            field: Field::Timestamp,
            at: 2,
            needed: 8,
            available: 2
        }
    );
    assert!(matches!(
        Message::decode(&[]).unwrap_err(),
        DecodeError::Truncated {
            field: Field::Version,
            at: 0,
            ..
        }
    ));
}

#[test]
fn bad_version_is_reported() {
    let mut buf = Message::new("x").to_vec();
    buf[0] = 9;
    assert_eq!(
        Message::decode(&buf).unwrap_err(),
        DecodeError::UnsupportedVersion { at: 0, version: 9 }
    );
}

#[test]
fn unknown_flags_are_reported() {
    let mut buf = Message::new("x").to_vec();
    buf[1] = 0x80;
    assert!(matches!(
        Message::decode(&buf).unwrap_err(),
        DecodeError::UnknownFlags { at: 1, flags: 0x80 }
    ));
}

#[test]
fn huge_length_in_small_input_is_out_of_range_not_an_allocation() {
    // version, flags (no key), timestamp, then a value length of u32::MAX in a 20-byte input.
    let mut buf = vec![1u8, 0];
    buf.extend_from_slice(&0i64.to_le_bytes());
    buf.extend_from_slice(&u32::MAX.to_le_bytes());
    buf.extend_from_slice(&[0; 6]);
    assert_eq!(buf.len(), 20);
    assert_eq!(
        Message::decode(&buf).unwrap_err(),
        DecodeError::LengthOutOfRange {
            field: Field::Value,
            at: 10,
            len: u64::from(u32::MAX),
            remaining: 6
        }
    );
}

#[test]
fn huge_header_count_is_out_of_range() {
    let mut buf = Message::new("v").to_vec();
    let n = buf.len();
    buf[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Message::decode(&buf).unwrap_err(),
        DecodeError::LengthOutOfRange {
            field: Field::HeaderCount,
            ..
        }
    ));
}

#[test]
fn non_utf8_header_key_is_reported() {
    let m = Message::new("v").with_header("ab", "x");
    let mut buf = m.to_vec();
    // Header key bytes sit after: prefix(10) + value len(4) + value(1) + count(4) + key len(4).
    let at = 10 + 4 + 1 + 4 + 4;
    assert_eq!(&buf[at..at + 2], b"ab");
    buf[at] = 0xff;
    assert_eq!(
        Message::decode(&buf).unwrap_err(),
        DecodeError::HeaderKeyNotUtf8 { index: 0, at }
    );
}

#[test]
fn errors_display_the_position() {
    let e = Message::decode(&[1, 0]).unwrap_err().to_string();
    assert!(e.contains("byte 2"), "{e}");
}
