//! Round trips, damage and truncation of encoded batches.

use bytes::Bytes;
use proptest::prelude::*;

use super::encode::{ATTRIBUTES_AT, CRC_AT};
use super::*;

/// The codecs this build has.
pub(super) fn enabled_codecs() -> Vec<Compression> {
    Compression::ALL
        .into_iter()
        .filter(|c| c.is_enabled())
        .collect()
}

/// Records with every shape: null and empty keys and values, null header values, repeated
/// header names, a non-ASCII name, timestamps out of order, and (when `big`) a value large
/// enough to span several snappy (32 KiB) and LZ4 (64 KiB) blocks.
pub(super) fn sample_records(big: bool) -> Vec<RecordSpec> {
    let mut records = vec![
        RecordSpec::new(1_700_000_000_000, "first").with_key("k1"),
        RecordSpec::tombstone(1_700_000_000_010).with_key("k1"),
        RecordSpec::new(1_699_999_999_990, Bytes::new()).with_key(Bytes::new()),
        RecordSpec {
            timestamp: 1_700_000_000_005,
            key: None,
            value: None,
            headers: vec![],
        },
        RecordSpec::new(1_700_000_000_020, "with headers")
            .with_header("trace", Some(Bytes::from_static(b"abc")))
            .with_header("trace", None)
            .with_header("ñame-✓", Some(Bytes::new())),
    ];
    if big {
        let value: Vec<u8> = (0..150_000u32)
            .map(|i| (i % 251) as u8 ^ (i / 4096) as u8)
            .collect();
        records.push(RecordSpec::new(1_700_000_000_030, value).with_key("big"));
    }
    records
}

/// What reading `records` back from a batch at `base_offset` gives.
pub(super) fn expected(base_offset: i64, records: &[RecordSpec]) -> Vec<RecordRef> {
    records
        .iter()
        .zip(base_offset..)
        .map(|(r, offset)| RecordRef {
            offset,
            timestamp: r.timestamp,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
        })
        .collect()
}

/// Parses a batch and reads all its records.
/// Every record of the batch in `bytes`, read through its view; checks on the way that the
/// in-place check (`BatchView::check`) agrees with the reading, so every batch a test builds,
/// valid or hostile, tests both.
pub(super) fn read_all(bytes: &Bytes) -> Result<(BatchHeader, Vec<RecordRef>), BatchError> {
    let read: Result<(BatchHeader, Vec<RecordRef>), BatchError> = (|| {
        let view = BatchView::parse(bytes)?;
        let records = view.records(64 << 20)?.collect::<Result<Vec<_>, _>>()?;
        Ok((*view.header(), records))
    })();
    let checked = BatchView::check(bytes, 64 << 20);
    match (&read, &checked) {
        (Ok((header, records)), Ok((checked_header, count))) => {
            assert_eq!((header, records.len()), (checked_header, *count));
        }
        (Err(e), Err(c)) => assert_eq!(e.to_string(), c.to_string()),
        _ => panic!("the in-place check {checked:?} disagrees with reading: {read:?}"),
    }
    // The batch read in place in a larger buffer (bytes before and after it, which must not
    // be read as its records) through `records_in` gives the same records or the same error,
    // when the batch's length field says it ends within `bytes` (else the bytes after it
    // would complete it).
    let declared = bytes
        .get(8..12)
        .map(|l| i32::from_be_bytes([l[0], l[1], l[2], l[3]]));
    if declared.is_some_and(|l| usize::try_from(l).is_ok_and(|l| l + 12 <= bytes.len())) {
        let mut padded = vec![0xAB; 7];
        padded.extend_from_slice(bytes);
        padded.extend_from_slice(&[0x02; 9]);
        let padded = Bytes::from(padded);
        let in_place: Result<Vec<RecordRef>, BatchError> = (|| {
            let header = BatchView::check_header(&padded[7..])?;
            match BatchView::records_in(&padded, 7, &header) {
                Some(records) => records.collect(),
                None => BatchView::parse_at(&padded, 7)?
                    .records(64 << 20)?
                    .collect(),
            }
        })();
        match (&read, &in_place) {
            (Ok((_, records)), Ok(found)) => assert_eq!(records, found),
            (Err(e), Err(f)) => assert_eq!(e.to_string(), f.to_string()),
            _ => panic!("reading in place {in_place:?} disagrees with reading: {read:?}"),
        }
    }
    read
}

/// Recomputes the CRC of the batch in `buf` after an edit.
pub(super) fn reseal(buf: &mut [u8]) {
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_AT..]);
    buf[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn round_trips_every_codec() {
    let records = sample_records(true);
    for codec in enabled_codecs() {
        let spec = BatchSpec {
            base_offset: 1_000,
            partition_leader_epoch: 7,
            producer_id: 42,
            producer_epoch: 3,
            base_sequence: 17,
            compression: codec,
            ..BatchSpec::default()
        };
        let bytes = encode_batch(&spec, &records).unwrap();
        let (header, read) = read_all(&bytes).unwrap();
        assert_eq!(read, expected(1_000, &records), "{codec}");
        assert_eq!(header.compression, codec);
        assert_eq!(header.size(), bytes.len());
        assert_eq!(header.record_count, records.len() as i32);
        assert_eq!(header.last_offset_delta, records.len() as i32 - 1);
        assert_eq!(header.last_offset(), 1_000 + records.len() as i64 - 1);
        assert_eq!(header.base_timestamp, records[0].timestamp);
        assert_eq!(header.max_timestamp, 1_700_000_000_030);
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (42, 3, 17)
        );
        assert_eq!(header.partition_leader_epoch, 7);
        assert_eq!(header.timestamp_type(), TimestampType::CreateTime);
        assert!(!header.is_transactional() && !header.is_control());
        if codec != Compression::None {
            assert!(bytes.len() < 100_000, "{codec} did not compress");
        }
    }
}

#[test]
fn uncompressed_records_are_views_of_the_batch() {
    let records = sample_records(true);
    let bytes = encode_batch(&BatchSpec::new(0), &records).unwrap();
    let view = BatchView::parse(&bytes).unwrap();
    let start = bytes.as_ptr() as usize;
    for r in view.records(0).unwrap() {
        let r = r.unwrap();
        if let Some(v) = r.value.as_ref().filter(|v| !v.is_empty()) {
            let p = v.as_ptr() as usize;
            assert!(p >= start && p + v.len() <= start + bytes.len());
        }
    }
}

#[test]
fn header_layout_is_kafkas() {
    let spec = BatchSpec {
        base_offset: 0x0102_0304_0506_0708,
        partition_leader_epoch: 9,
        transactional: true,
        control: true,
        log_append_time: Some(77),
        ..BatchSpec::default()
    };
    let bytes = encode_batch(&spec, &[RecordSpec::new(5, "v")]).unwrap();
    assert_eq!(&bytes[0..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize,
        bytes.len() - 12
    );
    assert_eq!(&bytes[12..16], &[0, 0, 0, 9]);
    assert_eq!(bytes[16], 2);
    // attributes: log append time | transactional | control.
    assert_eq!(&bytes[21..23], &[0, 0x38]);
    assert_eq!(&bytes[23..27], &[0, 0, 0, 0]); // lastOffsetDelta
    assert_eq!(i64::from_be_bytes(bytes[27..35].try_into().unwrap()), 5);
    assert_eq!(i64::from_be_bytes(bytes[35..43].try_into().unwrap()), 77);
    assert_eq!(&bytes[43..51], &[0xff; 8]); // producerId -1
    assert_eq!(&bytes[51..53], &[0xff; 2]);
    assert_eq!(&bytes[53..57], &[0xff; 4]);
    assert_eq!(&bytes[57..61], &[0, 0, 0, 1]);
    // length 7 | attributes 0 | timestampDelta 0 | offsetDelta 0 | key null | value "v" | 0 headers
    assert_eq!(&bytes[61..], &[14, 0, 0, 0, 1, 2, b'v', 0]);
    let (header, read) = read_all(&bytes).unwrap();
    assert_eq!(header.timestamp_type(), TimestampType::LogAppendTime);
    assert!(header.is_transactional() && header.is_control() && !header.has_delete_horizon());
    // A log-append-time batch reports maxTimestamp for every record.
    assert_eq!(read[0].timestamp, 77);
}

#[test]
fn empty_batch_round_trips() {
    let bytes = encode_batch(&BatchSpec::new(5), &[]).unwrap();
    assert_eq!(bytes.len(), HEADER_LEN);
    let (header, read) = read_all(&bytes).unwrap();
    assert!(read.is_empty());
    assert_eq!((header.last_offset_delta, header.record_count), (-1, 0));
    assert_eq!(header.base_timestamp, NO_TIMESTAMP);
}

#[test]
fn rewrites_outside_the_crc_keep_the_batch_valid() {
    let records = sample_records(false);
    let mut buf = encode_batch(&BatchSpec::new(0), &records).unwrap().to_vec();
    set_base_offset(&mut buf, 5_000).unwrap();
    set_partition_leader_epoch(&mut buf, 12).unwrap();
    let (header, read) = read_all(&Bytes::from(buf)).unwrap();
    assert_eq!(read, expected(5_000, &records));
    assert_eq!(header.partition_leader_epoch, 12);
    let mut short = vec![0u8; 20];
    short[16] = 2;
    assert_eq!(
        set_base_offset(&mut short, 1),
        Err(BatchError::Truncated { needed: 61, at: 0 })
    );
    let mut v1 = vec![0u8; 80];
    v1[16] = 1;
    assert_eq!(
        set_partition_leader_epoch(&mut v1, 1),
        Err(BatchError::BadMagic { found: 1 })
    );
    assert!(v1.iter().all(|&b| b == 0 || b == 1));
}

#[test]
fn trailing_bytes_are_left_to_the_next_batch() {
    let a = encode_batch(&BatchSpec::new(0), &sample_records(false)).unwrap();
    let b = encode_batch(&BatchSpec::new(5), &[RecordSpec::new(1, "x")]).unwrap();
    let both = Bytes::from([a.as_ref(), b.as_ref()].concat());
    let first = BatchView::parse(&both).unwrap();
    assert_eq!(first.as_bytes(), &a);
    let second = BatchView::parse(&both.slice(first.size()..)).unwrap();
    assert_eq!(second.header().base_offset, 5);
}

#[test]
fn encode_refuses_what_does_not_fit() {
    let far = [
        RecordSpec::new(i64::MIN, "a"),
        RecordSpec::new(i64::MAX, "b"),
    ];
    assert_eq!(
        encode_batch(&BatchSpec::new(0), &far),
        Err(BatchError::Encode {
            field: "timestampDelta",
            index: 1
        })
    );
    let two = [RecordSpec::new(0, "a"), RecordSpec::new(0, "b")];
    assert_eq!(
        encode_batch(&BatchSpec::new(i64::MAX), &two),
        Err(BatchError::Encode {
            field: "baseOffset",
            index: 2
        })
    );
}

/// Every single-byte change of a batch is refused or reads the same records: only a change of
/// `baseOffset` or `partitionLeaderEpoch` (outside the CRC) may read differently, and then only
/// in those fields.
#[test]
fn every_byte_flip_is_caught_or_harmless() {
    let records = sample_records(false);
    for codec in enabled_codecs() {
        let spec = BatchSpec {
            compression: codec,
            ..BatchSpec::new(100)
        };
        let bytes = encode_batch(&spec, &records).unwrap();
        let (orig_header, _) = read_all(&bytes).unwrap();
        for at in 0..bytes.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut buf = bytes.to_vec();
                buf[at] ^= mask;
                let Ok((header, read)) = read_all(&Bytes::from(buf)) else {
                    continue;
                };
                assert!(
                    at < 8 || (12..16).contains(&at),
                    "{codec}: flip at {at} read"
                );
                assert_eq!(read, expected(header.base_offset, &records));
                let mut same = header;
                same.base_offset = orig_header.base_offset;
                same.partition_leader_epoch = orig_header.partition_leader_epoch;
                assert_eq!(same, orig_header, "{codec}: flip at {at}");
            }
        }
    }
}

/// The same flips with the CRC recomputed reach the decompressors and record parser: they may
/// fail or read something else, but never panic.
#[test]
fn resealed_flips_never_panic() {
    let records = sample_records(false);
    for codec in enabled_codecs() {
        let spec = BatchSpec {
            compression: codec,
            ..BatchSpec::new(0)
        };
        let bytes = encode_batch(&spec, &records).unwrap();
        for at in ATTRIBUTES_AT..bytes.len() {
            for mask in [0x01u8, 0x10, 0x80, 0xff] {
                let mut buf = bytes.to_vec();
                buf[at] ^= mask;
                reseal(&mut buf);
                let _ = read_all(&Bytes::from(buf));
            }
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    for codec in enabled_codecs() {
        let spec = BatchSpec {
            compression: codec,
            ..BatchSpec::new(0)
        };
        let bytes = encode_batch(&spec, &sample_records(false)).unwrap();
        for len in 0..bytes.len() {
            let err = read_all(&bytes.slice(..len)).unwrap_err();
            assert!(
                matches!(
                    err,
                    BatchError::Truncated { .. } | BatchError::BadMagic { .. }
                ),
                "{codec} cut at {len}: {err}"
            );
        }
    }
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn arb_record() -> impl Strategy<Value = RecordSpec> {
    (
        -(1i64 << 60)..(1i64 << 60),
        prop::option::of(arb_bytes(40)),
        prop::option::of(arb_bytes(600)),
        prop::collection::vec((".{0,12}", prop::option::of(arb_bytes(24))), 0..6),
    )
        .prop_map(|(timestamp, key, value, headers)| RecordSpec {
            timestamp,
            key,
            value,
            headers,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn any_batch_round_trips(
        records in prop::collection::vec(arb_record(), 0..12),
        codec in prop::sample::select(enabled_codecs()),
        base_offset in 0i64..(1 << 50),
        epoch in any::<i32>(),
        producer in (any::<i64>(), any::<i16>(), any::<i32>()),
        flags in (any::<bool>(), any::<bool>()),
    ) {
        let spec = BatchSpec {
            base_offset,
            partition_leader_epoch: epoch,
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence: producer.2,
            compression: codec,
            transactional: flags.0,
            control: flags.1,
            log_append_time: None,
        };
        let bytes = encode_batch(&spec, &records).unwrap();
        let (header, read) = read_all(&bytes).unwrap();
        prop_assert_eq!(read, expected(base_offset, &records));
        prop_assert_eq!(header.compression, codec);
        prop_assert_eq!(header.is_transactional(), flags.0);
        prop_assert_eq!(header.is_control(), flags.1);
        prop_assert_eq!((header.producer_id, header.producer_epoch, header.base_sequence), producer);
    }
}

/// Records read as messages with their offsets, up to and including the first error.
type Messages = Vec<Result<(i64, crate::Message), BatchError>>;

/// The records of `bytes` by `next_message` and by `next` + `Message::try_from`, each up to
/// and including the first error.
fn messages_both_ways(bytes: &Bytes) -> Option<[Messages; 2]> {
    let view = BatchView::parse(bytes).ok()?;
    let mut fast = Vec::new();
    let mut records = view.records(1 << 20).ok()?;
    while let Some(r) = records.next_message() {
        let stop = r.is_err();
        fast.push(r);
        if stop {
            break;
        }
    }
    let mut slow = Vec::new();
    let mut general = view.records(1 << 20).ok()?;
    for r in std::iter::from_fn(|| general.next_general()) {
        let r = r.and_then(|r| {
            let offset = r.offset;
            crate::Message::try_from(r).map(|m| (offset, m))
        });
        let stop = r.is_err();
        slow.push(r);
        if stop {
            break;
        }
    }
    Some([fast, slow])
}

/// The records of `bytes` by `plain_messages` (at most `step` a call) then `next_message`
/// whenever the loop stops, up to and including the first error.
fn messages_by_loop(bytes: &Bytes, step: usize) -> Option<Messages> {
    let mut records = BatchView::parse(bytes).ok()?.records(1 << 20).ok()?;
    let mut out = Vec::new();
    for _ in 0..10_000 {
        records.plain_messages(step, |offset, m| out.push(Ok((offset, m))));
        match records.next_message() {
            None => return Some(out),
            Some(r) => {
                let stop = r.is_err();
                out.push(r);
                if stop {
                    return Some(out);
                }
            }
        }
    }
    panic!("more than 10,000 rounds for one batch");
}

/// The records of `bytes` read by `next` (with its fast path) and by the general path alone,
/// each up to and including the first error.
fn records_both_ways(bytes: &Bytes) -> Option<[Vec<Result<RecordRef, BatchError>>; 2]> {
    let view = BatchView::parse(bytes).ok()?;
    let upto_error = |mut it: Box<dyn FnMut() -> Option<Result<RecordRef, BatchError>>>| {
        let mut out = Vec::new();
        while let Some(r) = it() {
            let stop = r.is_err();
            out.push(r);
            if stop {
                break;
            }
        }
        out
    };
    let mut fast = view.records(1 << 20).ok()?;
    let mut general = view.records(1 << 20).ok()?;
    Some([
        upto_error(Box::new(move || fast.next())),
        upto_error(Box::new(move || general.next_general())),
    ])
}

/// `next_message`, `plain_messages` and `next` (with their fast path for records without
/// headers) agree with the general path on valid batches of every shape and on every byte flip resealed with a
/// valid CRC.
#[test]
fn next_message_agrees_with_next_and_try_from() {
    let plain: Vec<RecordSpec> = (0..20)
        .map(|i| {
            let r = RecordSpec::new(1_000 - i, vec![i as u8; i as usize * 7]);
            if i % 3 == 0 {
                r
            } else {
                r.with_key(format!("k{i}"))
            }
        })
        .collect();
    let mut shapes = vec![plain.clone(), sample_records(false)];
    shapes.push(
        plain
            .iter()
            .cloned()
            .map(|r| r.with_header("h", None))
            .collect(),
    );
    for records in shapes {
        for log_append_time in [None, Some(77)] {
            let spec = BatchSpec {
                log_append_time,
                ..BatchSpec::new(40)
            };
            let bytes = encode_batch(&spec, &records).unwrap();
            let [fast, slow] = messages_both_ways(&bytes).unwrap();
            for step in [1, 3, 100] {
                assert_eq!(messages_by_loop(&bytes, step).as_ref(), Some(&fast));
            }
            assert_eq!(fast, slow);
            let [fast, slow] = records_both_ways(&bytes).unwrap();
            assert_eq!(fast, slow);
            for at in ATTRIBUTES_AT..bytes.len() {
                for mask in [0x01u8, 0x02, 0x40, 0x80, 0xff] {
                    let mut buf = bytes.to_vec();
                    buf[at] ^= mask;
                    reseal(&mut buf);
                    let buf = Bytes::from(buf);
                    if let Some([fast, slow]) = messages_both_ways(&buf) {
                        let by_loop = messages_by_loop(&buf, 4);
                        assert_eq!(by_loop.as_ref(), Some(&fast), "flip {mask:#x} at {at}");
                        assert_eq!(fast, slow, "flip {mask:#x} at {at}");
                    }
                    if let Some([fast, slow]) = records_both_ways(&buf) {
                        assert_eq!(fast, slow, "flip {mask:#x} at {at}");
                    }
                }
            }
        }
    }
}

/// `skip_record` and `check_rest` find exactly the faults `next` finds, at the same record.
#[test]
fn skipping_checks_what_reading_checks() {
    let bytes = encode_batch(&BatchSpec::new(9), &sample_records(false)).unwrap();
    for at in ATTRIBUTES_AT..bytes.len() {
        for mask in [0x01u8, 0x40, 0xff] {
            let mut buf = bytes.to_vec();
            buf[at] ^= mask;
            reseal(&mut buf);
            let Ok(view) = BatchView::parse(&Bytes::from(buf)) else {
                continue;
            };
            let Ok(records) = view.records(1 << 20) else {
                continue;
            };
            let mut records = records;
            let read: Vec<_> = std::iter::from_fn(|| records.next_general())
                .map(|r| r.map(|r| r.offset))
                .collect();
            let mut skipping = view.records(1 << 20).unwrap();
            let skipped: Vec<_> = std::iter::from_fn(|| skipping.skip_record()).collect();
            assert_eq!(read, skipped, "flip {mask:#x} at {at}");
            let mut rest = view.records(1 << 20).unwrap();
            let first = rest.skip_record();
            let checked = rest.check_rest();
            match read.iter().position(Result::is_err) {
                Some(i) if i > 0 => assert_eq!(checked, Err(read[i].clone().unwrap_err())),
                Some(_) => assert!(matches!(first, Some(Err(_)))),
                None => assert_eq!(checked, Ok(read.len() - 1)),
            }
        }
    }
}
