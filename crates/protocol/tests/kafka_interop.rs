//! krabka's v2 record batches against kafka-protocol's, an implementation of the same bytes
//! written by others: what krabka encodes, kafka-protocol decodes (checking the CRC) to the same
//! records and batch fields, and what kafka-protocol encodes, krabka parses to the same records.
//! Every codec this build of krabka has is covered (all of them under `--all-features`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as KpCompression, Record as KpRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType as KpTimestampType,
};
use krabka_protocol::batch::{
    BatchSpec, BatchView, Compression, RecordRef, RecordSpec, TimestampType, encode_batch,
};

fn codecs() -> Vec<Compression> {
    Compression::ALL
        .into_iter()
        .filter(|c| c.is_enabled())
        .collect()
}

fn kp_codec(c: Compression) -> KpCompression {
    match c {
        Compression::Gzip => KpCompression::Gzip,
        Compression::Snappy => KpCompression::Snappy,
        Compression::Lz4 => KpCompression::Lz4,
        Compression::Zstd => KpCompression::Zstd,
        _ => KpCompression::None,
    }
}

/// Records with null keys, null and empty values, headers with null values, timestamps out of
/// order and one value of several compression blocks. Header names are unique within a record:
/// kafka-protocol keeps headers in a map.
fn records() -> Vec<RecordSpec> {
    let big: Vec<u8> = (0..200_000u32)
        .map(|i| (i % 97) as u8 ^ (i >> 12) as u8)
        .collect();
    vec![
        RecordSpec::new(1_700_000_000_000, "first").with_key("key-1"),
        RecordSpec::tombstone(1_700_000_000_009).with_key("key-1"),
        RecordSpec::new(1_699_999_999_000, Bytes::new()),
        RecordSpec {
            timestamp: 1_700_000_000_001,
            key: None,
            value: None,
            headers: vec![("only-header".into(), Some(Bytes::from_static(b"x")))],
        },
        RecordSpec::new(1_700_000_000_002, "headers")
            .with_key(Bytes::new())
            .with_header("trace-id", Some(Bytes::from_static(b"abc")))
            .with_header("null-value", None)
            .with_header("empty", Some(Bytes::new()))
            .with_header("ünïcode", Some(Bytes::from_static(b"\x00\xff"))),
        RecordSpec::new(1_700_000_000_003, big).with_key("big"),
    ]
}

fn kp_headers(headers: &IndexMap<StrBytes, Option<Bytes>>) -> Vec<(String, Option<Bytes>)> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
        .collect()
}

/// (a) krabka writes, kafka-protocol reads.
#[test]
fn kafka_protocol_decodes_what_krabka_encodes() {
    let records = records();
    let flag_sets = [
        (false, false, None),
        (true, false, None),
        (true, true, None),
        (false, false, Some(1_800_000_000_000)),
    ];
    for codec in codecs() {
        for (transactional, control, log_append_time) in flag_sets {
            let spec = BatchSpec {
                base_offset: 4_000,
                partition_leader_epoch: 11,
                producer_id: 9_001,
                producer_epoch: 4,
                base_sequence: 300,
                compression: codec,
                transactional,
                control,
                log_append_time,
            };
            let what = format!("{codec} transactional={transactional} control={control}");
            let bytes = encode_batch(&spec, &records).unwrap();
            let mut buf = bytes.clone();
            let set =
                RecordBatchDecoder::decode(&mut buf).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(buf.is_empty(), "{what}: bytes left after the batch");
            assert_eq!(set.version, 2);
            assert_eq!(set.compression, kp_codec(codec), "{what}");
            assert_eq!(set.records.len(), records.len(), "{what}");
            for ((i, got), want) in set.records.iter().enumerate().zip(&records) {
                assert_eq!(got.offset, 4_000 + i as i64, "{what}");
                assert_eq!(got.sequence, 300 + i as i32, "{what}");
                // kafka-protocol reports the stored timestamps, whatever their type.
                assert_eq!(got.timestamp, want.timestamp, "{what}");
                assert_eq!(got.key, want.key, "{what}");
                assert_eq!(got.value, want.value, "{what}");
                assert_eq!(kp_headers(&got.headers), want.headers, "{what}");
                assert_eq!((got.transactional, got.control), (transactional, control));
                assert!(!got.delete_horizon);
                assert_eq!((got.producer_id, got.producer_epoch), (9_001, 4));
                assert_eq!(got.partition_leader_epoch, 11);
                let want_type = if log_append_time.is_some() {
                    KpTimestampType::LogAppend
                } else {
                    KpTimestampType::Creation
                };
                assert_eq!(got.timestamp_type, want_type, "{what}");
            }
            // kafka-protocol checks the CRC: one flipped bit in the records is refused.
            let mut damaged = bytes.to_vec();
            let last = damaged.len() - 1;
            damaged[last] ^= 0x04;
            assert!(RecordBatchDecoder::decode(&mut Bytes::from(damaged)).is_err());
        }
    }
}

fn kp_record(offset: i64, sequence: i32, producer_epoch: i16, spec: &RecordSpec) -> KpRecord {
    KpRecord {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 3,
        producer_id: 77,
        producer_epoch,
        timestamp_type: KpTimestampType::Creation,
        offset,
        sequence,
        timestamp: spec.timestamp,
        key: spec.key.clone(),
        value: spec.value.clone(),
        headers: spec
            .headers
            .iter()
            .map(|(k, v)| (StrBytes::from_string(k.clone()), v.clone()))
            .collect(),
    }
}

fn read(view: &BatchView) -> Vec<RecordRef> {
    view.records(16 << 20)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

/// (b) kafka-protocol writes, krabka reads: two batches in one buffer (kafka-protocol starts a
/// new batch when the producer epoch changes).
#[test]
fn krabka_parses_what_kafka_protocol_encodes() {
    let specs = records();
    let kp: Vec<KpRecord> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let epoch = if i < 4 { 5 } else { 6 };
            kp_record(10_000 + i as i64, 50 + i as i32, epoch, s)
        })
        .collect();
    for codec in codecs() {
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: kp_codec(codec),
        };
        RecordBatchEncoder::encode(&mut buf, &kp, &options).unwrap();
        let all = buf.freeze();

        let first = BatchView::parse(&all).unwrap_or_else(|e| panic!("{codec}: {e}"));
        let second = BatchView::parse(&all.slice(first.size()..)).unwrap();
        assert_eq!(first.size() + second.size(), all.len(), "{codec}");
        let mut got = read(&first);
        got.extend(read(&second));
        assert_eq!(got.len(), specs.len());
        for ((i, r), want) in got.iter().enumerate().zip(&specs) {
            assert_eq!(r.offset, 10_000 + i as i64, "{codec}");
            assert_eq!(r.timestamp, want.timestamp, "{codec}");
            assert_eq!(r.key, want.key, "{codec}");
            assert_eq!(r.value, want.value, "{codec}");
            assert_eq!(r.headers, want.headers, "{codec}");
        }
        for (view, base, epoch, seq) in [(&first, 10_000, 5, 50), (&second, 10_004, 6, 54)] {
            let h = view.header();
            assert_eq!(h.compression, codec);
            assert_eq!(h.base_offset, base);
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (77, epoch, seq)
            );
            assert_eq!(h.partition_leader_epoch, 3);
            assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
            assert!(!h.is_transactional() && !h.is_control());
        }
    }
}

/// kafka-protocol's transactional and control batches read with their flags.
#[test]
fn krabka_reads_kafka_protocol_flags() {
    let spec = RecordSpec::new(5, "marker").with_key(Bytes::from_static(&[0, 0, 0, 1]));
    let mut rec = kp_record(0, 0, 1, &spec);
    rec.transactional = true;
    rec.control = true;
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: KpCompression::None,
    };
    RecordBatchEncoder::encode(&mut buf, [&rec], &options).unwrap();
    let view = BatchView::parse(&buf.freeze()).unwrap();
    assert!(view.header().is_transactional() && view.header().is_control());
    assert_eq!(read(&view)[0].key.as_deref(), Some(&[0u8, 0, 0, 1][..]));
}
