//! Decoding: seq checks, resumption, fast skipping, the end of a closed segment.

use super::*;
use krabka_protocol::Message;
use proptest::prelude::*;

use crate::segment::batch::encode_batch_from;
use crate::segment::batch_len;
use crate::segment::test_batches as batches;
use krabka_protocol::batch::Compression;

const HEADER: usize = crate::segment::BATCH_HEADER_LEN;

fn arb_message() -> impl Strategy<Value = Message> {
    (
        any::<i64>(),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        proptest::collection::vec(any::<u8>(), 0..40),
        proptest::collection::vec(
            ("[a-z]{0,3}", proptest::collection::vec(any::<u8>(), 0..4)),
            0..2,
        ),
    )
        .prop_map(|(ts, key, value, headers)| {
            let mut m = Message::new(value).with_timestamp(ts);
            m.key = key.map(Bytes::from);
            for (k, v) in headers {
                m = m.with_header(k, v);
            }
            m
        })
}

#[test]
fn a_batch_past_the_last_allowed_seq_gives_no_record_whether_read_or_stepped_over() {
    let buf = Bytes::from(batches(1..=6));
    let fifth = {
        let mut pos = 0;
        for _ in 0..4 {
            pos += batch_len(&buf[pos..]).unwrap();
        }
        pos
    };
    for (from, fast) in [(1, false), (1, true), (6, true)] {
        let mut out = Vec::new();
        let e = decode_chunk(&buf, from, 10, Some(1), 4, fast, &mut out).unwrap_err();
        assert_eq!(e.position, fifth, "from {from}, fast {fast}");
        assert!(e.reason.contains("beyond the end"), "{}", e.reason);
        assert!(out.iter().all(|r| r.seq <= 4), "from {from}, fast {fast}");
    }
    let mut out = Vec::new();
    assert!(decode_chunk(&buf, 1, 10, Some(1), 6, false, &mut out).is_ok());
    assert_eq!(out.len(), 6);
}

#[test]
fn fast_skip_steps_over_batches_it_does_not_return_but_checks_every_one_it_returns() {
    let good = batches(1..=6);
    let second = batch_len(&good).unwrap();
    let third = second + batch_len(&good[second..]).unwrap();
    let decode = |bytes: &[u8], fast: bool| {
        let mut out = Vec::new();
        decode_chunk(
            &Bytes::copy_from_slice(bytes),
            4,
            10,
            Some(1),
            u64::MAX,
            fast,
            &mut out,
        )
        .map(|end| (out.iter().map(|r| r.seq).collect::<Vec<_>>(), end.next_seq))
    };
    assert_eq!(decode(&good, true), decode(&good, false));
    // A flipped record byte of a skipped batch: the records asked for are intact.
    let mut payload = good.clone();
    payload[second + HEADER + 3] ^= 1;
    assert_eq!(decode(&payload, true).unwrap(), (vec![4, 5, 6], Some(7)));
    let checked = decode(&payload, false);
    assert!(
        matches!(&checked, Err(BadBytes { position, reason, .. })
            if *position == second && reason.starts_with("CRC mismatch")),
        "{checked:?}"
    );
    // A wrong length in a skipped batch never yields a record.
    for delta in [1u32, 8, 40] {
        let mut len = good.clone();
        let at = second + 8..second + 12;
        let v = u32::from_be_bytes(len[at.clone()].try_into().unwrap()) + delta;
        len[at].copy_from_slice(&v.to_be_bytes());
        let got = decode(&len, true);
        assert!(
            got.as_ref().map_or(true, |(seqs, _)| seqs.is_empty()),
            "delta {delta}: {got:?}"
        );
    }
    // The first batch is always checked.
    let mut first = good.clone();
    first[HEADER + 2] ^= 1;
    let got = decode(&first, true);
    assert!(
        matches!(&got, Err(BadBytes { position: 0, reason, .. }) if reason.starts_with("CRC mismatch")),
        "{got:?}"
    );
    // A batch holding the wrong seq is refused even when skipped.
    let mut seq = good;
    seq[third + 7] ^= 1;
    let got = decode(&seq, true);
    assert_eq!(
        got,
        Err(BadBytes::bad(third, "batch starts at seq 2, expected 3"))
    );
}

proptest! {
    /// Any messages, in batches of any size, decode to exactly what was encoded, from any
    /// seq, with any `max`, resuming where `consumed` and `next_seq` say.
    #[test]
    fn batches_round_trip_from_any_seq_with_any_max(
        msgs in proptest::collection::vec(arb_message(), 1..30),
        cap in 1usize..400,
        from in 0usize..30,
        max in 1usize..7,
    ) {
        let mut buf = Vec::new();
        let mut at = 0;
        while at < msgs.len() {
            at += encode_batch_from(100 + at as u64, &msgs[at..], Compression::None, cap, &mut buf).unwrap();
        }
        let buf = Bytes::from(buf);
        let from_seq = 100 + from.min(msgs.len()) as u64;
        let (mut pos, mut expect, mut got) = (0usize, 100u64, Vec::new());
        for _ in 0..100 {
            let d = decode_records_at(&buf.slice(pos..), expect, from_seq + got.len() as u64, max).unwrap();
            let n = d.records.len();
            got.extend(d.records);
            pos += d.consumed;
            if let Some(next) = d.next_seq { expect = next; }
            if n == 0 { break; }
        }
        prop_assert_eq!(pos, buf.len());
        let want: Vec<Record> = msgs.iter().enumerate().skip(from.min(msgs.len()))
            .map(|(i, m)| Record { seq: 100 + i as u64, message: m.clone() }).collect();
        prop_assert_eq!(got, want);
    }
}

#[test]
fn max_stopping_inside_a_batch_consumes_none_of_it() {
    let msgs: Vec<Message> = (0..5).map(|i| Message::new(format!("v{i}"))).collect();
    let mut buf = batches(1..=2);
    let second = buf.len();
    encode_batch_from(3, &msgs, Compression::None, usize::MAX, &mut buf).unwrap();
    let buf = Bytes::from(buf);
    let d = decode_records(&buf, 1, 4).unwrap();
    assert_eq!(
        d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!((d.consumed, d.next_seq), (second, Some(3)));
    // Exactly to the batch's end: consumed.
    let d = decode_records(&buf, 1, 7).unwrap();
    assert_eq!((d.consumed, d.next_seq), (buf.len(), Some(8)));
}

#[test]
fn decode_records_skips_below_from_seq_and_stops_at_max() {
    let buf = Bytes::from(batches(1..=5));
    let d = decode_records(&buf, 3, 2).unwrap();
    assert_eq!(
        d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert_eq!(d.next_seq, Some(5));
}

#[test]
fn torn_tail_is_not_an_error_and_consumed_marks_complete_batches() {
    let full = batches(1..=3);
    let cut = full.len() - 3;
    let d = decode_records(&Bytes::from(full[..cut].to_vec()), 1, 10).unwrap();
    assert_eq!(d.records.len(), 2);
    assert_eq!(
        batch_len(&full[d.consumed..]),
        Some(full.len() - d.consumed)
    );
}

#[test]
fn flipped_byte_in_complete_batch_is_corrupt_with_position() {
    let mut buf = batches(1..=3);
    let second = batch_len(&buf).unwrap();
    buf[second + 63] ^= 0xff;
    match decode_records(&Bytes::from(buf), 1, 10) {
        Err(Error::Corrupt { position, .. }) => assert_eq!(position, second as u64),
        other => panic!("{other:?}"),
    }
}

#[test]
fn non_contiguous_seqs_are_corrupt() {
    let mut buf = batches(1..=1);
    buf.extend(batches(3..=3));
    assert!(matches!(
        decode_records(&Bytes::from(buf), 1, 10),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn seq_gap_between_complete_batches_is_corrupt_at_the_second_batch() {
    let mut buf = batches(5..=6);
    let second_at = buf.len();
    buf.extend(batches(8..=8));
    match decode_records(&Bytes::from(buf.clone()), 1, 10) {
        Err(Error::Corrupt {
            position, reason, ..
        }) => {
            assert_eq!(position, second_at as u64);
            assert!(reason.contains("expected 7"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A backwards step (a duplicated batch) is rejected the same way.
    let mut dup = batches(5..=6);
    dup.extend(batches(6..=6));
    assert!(matches!(
        decode_records(&Bytes::from(dup), 1, 10),
        Err(Error::Corrupt { position, .. }) if position == second_at as u64
    ));
}

#[test]
fn decode_records_at_checks_the_first_seq() {
    let buf = Bytes::from(batches(5..=7));
    let d = decode_records_at(&buf, 5, 6, 10).unwrap();
    assert_eq!(
        d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![6, 7]
    );
    assert_eq!(d.next_seq, Some(8));
    match decode_records_at(&buf, 4, 4, 10) {
        Err(Error::Corrupt {
            position, reason, ..
        }) => {
            assert_eq!(position, 0);
            assert!(reason.contains("expected 4"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A skipped (below from_seq) first batch is still checked.
    let skipped = decode_records_at(&buf, 6, 7, 10);
    assert!(
        matches!(&skipped, Err(Error::Corrupt { position: 0, reason, .. })
            if reason == "batch starts at seq 5, expected 6"),
        "{skipped:?}"
    );
    // A buffer without a complete batch has nothing to check.
    let torn = buf.slice(..10);
    let d = decode_records_at(&torn, 4, 4, 10).unwrap();
    assert_eq!((d.consumed, d.next_seq), (0, None));
}

/// Two batches of ten records, seqs 1..=20, and where the second starts.
fn two_batches_of_ten() -> (Vec<u8>, usize) {
    let msgs: Vec<Message> = (1..=20).map(|i| Message::new(format!("v{i}"))).collect();
    let mut buf = Vec::new();
    encode_batch_from(1, &msgs[..10], Compression::None, usize::MAX, &mut buf).unwrap();
    let second = buf.len();
    encode_batch_from(11, &msgs[10..], Compression::None, usize::MAX, &mut buf).unwrap();
    (buf, second)
}

/// The first batch of [`two_batches_of_ten`] checked by a decode that stopped inside it, then
/// the bytes at `damage` changed in that very buffer: what the carry of a read holds, had its
/// memory been changed after the check.
fn checked_then_changed(damage: &[usize]) -> (Bytes, CheckedAt) {
    let (good, _) = two_batches_of_ten();
    let buf = Bytes::from(good);
    let mut out = Vec::new();
    let end = decode_chunk(&buf, 1, 4, Some(1), u64::MAX, false, &mut out).unwrap();
    let inside = end.inside.expect("max stopped inside the first batch");
    drop(out);
    let at = buf.as_ptr();
    let mut bytes = buf.try_into_mut().expect("no record shares the buffer");
    for &i in damage {
        bytes[i] ^= 1;
    }
    let buf = bytes.freeze();
    assert_eq!(buf.as_ptr(), at, "the same buffer");
    (buf, inside)
}

#[test]
fn a_decode_stopped_inside_a_batch_names_it_and_a_decode_of_it_as_checked_skips_only_its_checks() {
    let (good, second) = two_batches_of_ten();
    let good = Bytes::from(good);
    let mut out = Vec::new();
    let end = decode_chunk(&good, 1, 4, Some(1), u64::MAX, false, &mut out).unwrap();
    assert_eq!((end.consumed, end.next_seq, out.len()), (0, Some(1), 4));
    let inside = end.inside.expect("max stopped inside the first batch");
    let b = inside.batch;
    assert_eq!(
        (b.seq, b.last, b.len, inside.addr),
        (1, 10, second, good.as_ptr().addr())
    );
    // Stopping at a batch's end names no batch.
    let mut out = Vec::new();
    let end = decode_chunk(&good, 1, 10, Some(1), u64::MAX, false, &mut out).unwrap();
    assert_eq!(
        (end.consumed, end.next_seq, end.inside.is_none()),
        (second, Some(11), true)
    );

    let decode = |buf: &Bytes, first: First| {
        let mut out = Vec::new();
        decode_chunk(buf, 5, 100, first, u64::MAX, Skip::All, &mut out).map(|end| {
            let values: Vec<Bytes> = out.iter().map(|r| r.message.value.clone()).collect();
            (
                out.iter().map(|r| r.seq).collect::<Vec<_>>(),
                values,
                end.next_seq,
            )
        })
    };
    // A value byte of the first batch's last record changed in the checked buffer (so its CRC
    // no longer matches): told the batch was checked there, the decode does not check its CRC
    // again; not told, it does.
    let (changed, inside) = checked_then_changed(&[second - 2]);
    let (seqs, values, next) = decode(&changed, First::Checked(inside)).unwrap();
    assert_eq!((seqs, next), ((5..=20).collect::<Vec<_>>(), Some(21)));
    assert_eq!(values[0], "v5");
    let e = decode(&changed, First::Seq(1)).unwrap_err();
    assert!(
        e.position == 0 && e.reason.starts_with("CRC mismatch"),
        "{e:?}"
    );
    // The same bytes in another buffer are checked: the check was made on the first only.
    let copy = Bytes::copy_from_slice(&changed);
    let e = decode(&copy, First::Checked(inside)).unwrap_err();
    assert!(
        e.position == 0 && e.reason.starts_with("CRC mismatch"),
        "{e:?}"
    );
    // Every other batch is still checked.
    let (changed, inside) = checked_then_changed(&[second + HEADER + 3]);
    let e = decode(&changed, First::Checked(inside)).unwrap_err();
    assert!(
        e.position == second && e.reason.starts_with("CRC mismatch"),
        "{e:?}"
    );
    // So is each record of the checked batch: the last record's header count made 1.
    let (changed, inside) = checked_then_changed(&[second - 1]);
    let e = decode(&changed, First::Checked(inside)).unwrap_err();
    assert_eq!(e.position, 0, "{e:?}");
    // A header changed since the check (its stored CRC; its leader epoch, which the CRC
    // does not cover), or another header, is not taken for the bytes: they are checked, and
    // the changed value byte fails their CRC.
    for header_byte in [17, 14, 8 + 3] {
        let (changed, inside) = checked_then_changed(&[header_byte, second - 2]);
        let e = decode(&changed, First::Checked(inside)).unwrap_err();
        assert_eq!(e.position, 0, "header byte {header_byte}: {e:?}");
    }
    let (same, inside) = checked_then_changed(&[]);
    let wrong_seq = CheckedAt {
        batch: CheckedHeader {
            seq: 2,
            ..inside.batch
        },
        ..inside
    };
    let e = decode(&same, First::Checked(wrong_seq)).unwrap_err();
    assert!(e.position == 0 && e.reason.contains("expected 2"), "{e:?}");
    // A batch cut short is not taken for the whole one: no records.
    assert_eq!(
        decode(&same.slice(..second - 1), First::Checked(inside))
            .unwrap()
            .0,
        vec![]
    );
}
