//! Raw record batches: a producer's batch appended as it came and read back as file bytes, and
//! every segment krabka writes decoded by kafka-protocol, a Kafka implementation written by
//! others. Every codec is covered (the tests build the crate with all four).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as KpCompression, Record as KpRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType as KpTimestampType,
};
use krabka_protocol::Message;
use krabka_protocol::batch::{BatchSpec, Compression, RecordSpec, encode_batch};
use krabka_storage::{Error, Log, Options, SyncPolicy};

fn opts() -> Options {
    Options {
        sync: SyncPolicy::Never,
        max_bytes: 256 << 10,
        ..Options::default()
    }
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

/// A producer's records: null keys, a tombstone, headers (one with a null value), base offset 0.
fn kp_records(n: i64) -> Vec<KpRecord> {
    (0..n)
        .map(|i| KpRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 42,
            producer_epoch: 1,
            timestamp_type: KpTimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 1_700_000_000_000 + i,
            key: (i % 3 != 0).then(|| Bytes::from(format!("key-{i}"))),
            value: (i % 5 != 4)
                .then(|| Bytes::from(format!("value-{i}-{}", "v".repeat(i as usize)))),
            headers: if i % 2 == 0 {
                let mut h: kafka_protocol::indexmap::IndexMap<_, _> = [(
                    StrBytes::from_static_str("trace"),
                    Some(Bytes::from(format!("t{i}"))),
                )]
                .into_iter()
                .collect();
                if i == 10 {
                    h.insert(StrBytes::from_static_str("none"), None);
                }
                h
            } else {
                Default::default()
            },
        })
        .collect()
}

fn kp_encode(records: &[KpRecord], codec: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: kp_codec(codec),
    };
    RecordBatchEncoder::encode(&mut buf, records, &options).unwrap();
    buf.freeze()
}

/// Every batch of every `.log` file of the log in `dir`, decoded by kafka-protocol.
fn kp_decode_dir(dir: &std::path::Path) -> Vec<KpRecord> {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let mut out = Vec::new();
    let newest = logs.last().cloned();
    for path in logs {
        let mut bytes = Bytes::from(fs::read(&path).unwrap());
        // The newest segment's preallocated space (`Options::preallocate`): zeros to the end.
        let is_newest = Some(&path) == newest.as_ref();
        while !bytes.is_empty() {
            if is_newest && bytes.iter().all(|&b| b == 0) {
                break;
            }
            let set = RecordBatchDecoder::decode(&mut bytes)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.extend(set.records);
        }
    }
    out
}

#[test]
fn batches_kafka_protocol_encodes_are_stored_as_they_came_and_read_back_exactly() {
    for codec in Compression::ALL {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), opts()).unwrap();
        log.append(&Message::new("before")).unwrap();
        let records = kp_records(30);
        let batch = kp_encode(&records, codec);
        assert_eq!(log.append_raw_batch(&batch).unwrap(), 2..=31, "{codec}");
        log.append(&Message::new("after")).unwrap();

        // The raw read gives the batch back byte for byte, its base offset rewritten.
        let got = log.read_batches(10, batch.len()).unwrap();
        assert_eq!((got.len(), got.first_seq(), got.last_seq()), (1, 2, 31));
        let mut want = batch.to_vec();
        want[..8].copy_from_slice(&2i64.to_be_bytes());
        assert_eq!(got.bytes()[..], want[..], "{codec}");
        // Its records, lazily, exactly as the producer gave them (null values included).
        let back: Vec<_> = got.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(back.len(), records.len());
        for (r, k) in back.iter().zip(&records) {
            assert_eq!(r.offset, k.offset + 2);
            assert_eq!(
                (r.timestamp, &r.key, &r.value),
                (k.timestamp, &k.key, &k.value)
            );
            let headers: Vec<_> = k
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.clone()))
                .collect();
            assert_eq!(r.headers, headers);
        }
        // The decoded read serves the records before the first null value, then refuses it.
        let decoded = log.read(2, 10).unwrap();
        assert_eq!(decoded.len(), 4);
        assert_eq!(decoded[0].message.value, "value-0-");
        assert_eq!(decoded[0].message.key, None);
        let refused = log.read(6, 10);
        assert!(
            matches!(&refused, Err(Error::NotAMessage { seq: 6, .. })),
            "{codec}: {refused:?}"
        );
        // And kafka-protocol reads the whole log, krabka's own batches included.
        let all = kp_decode_dir(dir.path());
        assert_eq!(all.len(), 32);
        assert_eq!(all[0].value.as_deref(), Some(&b"before"[..]));
        assert_eq!(all[31].offset, 32);
        drop(log);
        // Reopened (a scan of every batch): the same.
        let log = Log::open(dir.path(), opts()).unwrap();
        assert_eq!(log.last_seq(), 32);
        assert_eq!(log.read_batches(2, 1).unwrap().bytes()[..], want[..]);
    }
}

#[test]
fn kafka_protocol_decodes_every_segment_krabka_writes() {
    for codec in [Compression::None, Compression::Zstd, Compression::Lz4] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(
            dir.path(),
            Options {
                compression: codec,
                max_bytes: 64 << 10,
                ..opts()
            },
        )
        .unwrap();
        let msg = |s: u64| {
            // Every fifth value large enough that an uncompressed append writes it from where
            // it lies (a vectored write) rather than copying it.
            let pad = if s.is_multiple_of(5) {
                4_000 + s * 37 % 2_500
            } else {
                s % 300
            };
            let mut m = Message::new(format!("value {s} {}", "x".repeat(pad as usize)))
                .with_timestamp(1_000 + s as i64);
            if s.is_multiple_of(2) {
                m = m.with_key(format!("k{s}"));
            }
            if s.is_multiple_of(7) {
                m = m.with_header("h", format!("{s}")).with_header("h", "dup");
            }
            m
        };
        for s in 1..=50 {
            log.append(&msg(s)).unwrap();
        }
        let batch: Vec<Message> = (51..=1_000).map(msg).collect();
        log.append_batch(&batch).unwrap();
        log.roll().unwrap();
        let all = kp_decode_dir(dir.path());
        assert_eq!(all.len(), 1_000, "{codec}");
        for (r, s) in all.iter().zip(1u64..) {
            let m = msg(s);
            assert_eq!(r.offset, s as i64);
            assert_eq!(r.timestamp, m.timestamp);
            assert_eq!(r.key, m.key);
            assert_eq!(r.value.as_ref(), Some(&m.value));
            assert_eq!(r.timestamp_type, KpTimestampType::Creation);
            assert_eq!((r.producer_id, r.partition_leader_epoch), (-1, -1));
            // kafka-protocol keeps headers in a map: a repeated name keeps its last value.
            if let Some(h) = m.headers.last() {
                assert_eq!(
                    r.headers.get(h.key.as_bytes()),
                    Some(&Some(h.value.clone()))
                );
            }
        }
        // And krabka reads them back the same way.
        let got = log.read(1, 2_000).unwrap();
        assert_eq!(got.len(), 1_000);
        assert!(
            got.iter()
                .zip(1u64..)
                .all(|(r, s)| r.seq == s && r.message == msg(s))
        );
    }
}

#[test]
fn an_invalid_raw_batch_is_refused_naming_its_field_and_nothing_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts()).unwrap();
    log.append(&Message::new("kept")).unwrap();
    let good = encode_batch(
        &BatchSpec::new(0),
        &[RecordSpec::new(5, "a"), RecordSpec::new(6, "b")],
    )
    .unwrap();
    let resign = |b: &mut Vec<u8>| {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("magic", {
            let mut b = good.to_vec();
            b[16] = 1;
            b
        }),
        ("crc", {
            let mut b = good.to_vec();
            b[70] ^= 1;
            b
        }),
        ("batchLength", good[..good.len() - 1].to_vec()),
        ("batchLength", [&good[..], &good[..]].concat()),
        ("recordCount", {
            let mut b = good.to_vec();
            b[60] = 3;
            resign(&mut b);
            b
        }),
        ("lastOffsetDelta", {
            let mut b = good.to_vec();
            b[26] = 0;
            resign(&mut b);
            b
        }),
        ("maxTimestamp", {
            let mut b = good.to_vec();
            b[42] = 99;
            resign(&mut b);
            b
        }),
        ("offsetDelta", {
            // The second record's offset delta (1, zigzag 2) made 2 (zigzag 4).
            let mut b = good.to_vec();
            let second = 61 + 1 + usize::from(b[61] / 2);
            assert_eq!(b[second + 3], 2);
            b[second + 3] = 4;
            resign(&mut b);
            b
        }),
        ("partitionLeaderEpoch", {
            let mut b = good.to_vec();
            b[12..16].copy_from_slice(&(-7i32).to_be_bytes());
            b
        }),
        (
            "recordCount",
            encode_batch(&BatchSpec::new(0), &[]).unwrap().to_vec(),
        ),
    ];
    let size = fs::metadata(&log.segments()[0].log_path).unwrap().len();
    for (field, bytes) in cases {
        let got = log.append_raw_batch(&bytes);
        assert!(
            matches!(&got, Err(Error::InvalidBatch { field: f, .. }) if *f == field),
            "{field}: {got:?}"
        );
        assert_eq!(log.next_seq(), 2, "{field}");
        assert_eq!(
            fs::metadata(&log.segments()[0].log_path).unwrap().len(),
            size
        );
    }
    // Too large for max_message_bytes.
    let small = Log::open(
        tempfile::tempdir().unwrap().path(),
        Options {
            max_message_bytes: 100,
            ..opts()
        },
    )
    .unwrap();
    let big = encode_batch(&BatchSpec::new(0), &[RecordSpec::new(1, vec![0u8; 200])]).unwrap();
    assert!(matches!(
        small.append_raw_batch(&big),
        Err(Error::MessageTooLarge { .. })
    ));
    assert_eq!(log.read(1, 10).unwrap().len(), 1);
}

#[test]
fn control_and_transactional_batches_are_stored_exactly_and_refused_by_the_decoded_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts()).unwrap();
    for (transactional, control) in [(true, false), (true, true)] {
        let spec = BatchSpec {
            transactional,
            control,
            producer_id: 7,
            producer_epoch: 0,
            ..BatchSpec::new(0)
        };
        let batch = encode_batch(&spec, &[RecordSpec::new(1, "x").with_key("k")]).unwrap();
        let seqs = log.append_raw_batch(&batch).unwrap();
        let got = log.read(*seqs.start(), 1);
        assert!(
            matches!(&got, Err(Error::NotAMessage { reason, .. })
                if reason.contains(if control { "control" } else { "transactional" })),
            "{got:?}"
        );
        let raw = log.read_batches(*seqs.start(), 1).unwrap();
        assert_eq!(raw.bytes()[21..], batch[21..]);
    }
}

#[test]
fn raw_reads_return_whole_batches_within_the_budget_and_continue_at_next_seq() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        Options {
            index_interval_bytes: 512,
            ..opts()
        },
    )
    .unwrap();
    for b in 0..40u64 {
        let msgs: Vec<Message> = (0..10)
            .map(|i| Message::new(format!("{}", b * 10 + i + 1)))
            .collect();
        log.append_batch(&msgs).unwrap();
    }
    let one = log.read_batches(1, 0).unwrap();
    assert_eq!((one.len(), one.first_seq(), one.last_seq()), (1, 1, 10));
    let size = one.bytes().len();
    // From a seq inside a batch: that batch, whole.
    let three = log
        .read_batches(151, usize::MAX)
        .unwrap()
        .iter()
        .take(3)
        .map(|b| b.len())
        .sum();
    let mid = log.read_batches(155, three).unwrap();
    assert_eq!((mid.len(), mid.first_seq(), mid.next_seq()), (3, 151, 181));
    assert_eq!(mid.iter().count(), 3);
    assert_eq!(log.read_batches(155, three - 1).unwrap().len(), 2);
    // Walking the log by next_seq gives every record once, in order.
    let (mut seq, mut seen) = (1u64, Vec::new());
    for _ in 0..100 {
        let got = log.read_batches(seq, size * 7 + 5).unwrap();
        if got.is_empty() {
            break;
        }
        assert!(got.bytes().len() <= size * 7 + 5);
        for r in got.records() {
            seen.push(r.unwrap().offset as u64);
        }
        seq = got.next_seq();
    }
    assert_eq!(seen, (1..=400).collect::<Vec<_>>());
    assert!(log.read_batches(401, 10).unwrap().is_empty());
    assert!(matches!(
        log.read_batches(402, 10),
        Err(Error::OutOfRange { .. })
    ));
}

/// A batch `append_batch` wrote is read whole by a small budget even when it is larger than
/// `max_message_bytes` (which bounds each message, not the batch of many).
#[test]
fn raw_reads_with_a_small_budget_read_a_batch_larger_than_max_message_bytes_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        Options {
            max_message_bytes: 200,
            ..opts()
        },
    )
    .unwrap();
    for s in 1..=3 {
        log.append(&Message::new(format!("single {s}"))).unwrap();
    }
    let many: Vec<Message> = (4..=5_003).map(|s| Message::new(format!("v{s}"))).collect();
    assert_eq!(log.append_batch(&many).unwrap(), 4..=5_003);
    for from in [1, 2, 3, 4, 2_000, 5_003] {
        let got = log.read_batches(from, 100).unwrap();
        assert!(got.next_seq() > from, "from {from}");
        let records: Vec<_> = got.records().collect::<Result<_, _>>().unwrap();
        assert!(
            records.iter().any(|r| r.offset as u64 == from),
            "from {from}"
        );
    }
}
