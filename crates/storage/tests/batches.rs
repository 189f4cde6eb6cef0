//! How appends lay records out in batches: one batch per `append`, `append_batch` split at the
//! documented cap and at the segment's end, compression per batch, timestamps that a batch's
//! deltas cannot hold, and a log written in the old frame format refused, never misread.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;

use krabka_protocol::Message;
use krabka_protocol::batch::{BatchView, Compression};
use krabka_storage::segment::{self, MAX_BATCH_RECORD_BYTES, dump_batches, read_segment_file};
use krabka_storage::{Error, Log, Options, RecoveryMode, SyncPolicy};

fn opts() -> Options {
    Options {
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

/// (first seq, last seq, codec) of every batch of every segment of the log.
fn batches(log: &Log) -> Vec<(u64, u64, Compression)> {
    log.segments()
        .iter()
        .flat_map(|s| dump_batches(read_segment_file(&s.log_path).unwrap()).collect::<Vec<_>>())
        .map(|f| {
            assert!(f.problem.is_none(), "{f:?}");
            let h = *f.batch.as_ref().unwrap().header();
            (f.seq.unwrap(), f.last_seq.unwrap(), h.compression)
        })
        .collect()
}

#[test]
fn append_writes_a_batch_of_one_and_append_batch_one_batch_until_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts()).unwrap();
    log.append(&Message::new("one")).unwrap();
    log.append(&Message::new("two")).unwrap();
    let small: Vec<Message> = (0..100).map(|i| Message::new(vec![i as u8; 100])).collect();
    log.append_batch(&small).unwrap();
    // 3 MiB of 64 KiB values: split at the 1 MiB cap, every batch full but the last.
    let big: Vec<Message> = (0..48)
        .map(|i| Message::new(vec![i as u8; 64 << 10]))
        .collect();
    log.append_batch(&big).unwrap();
    let got = batches(&log);
    assert_eq!(
        got[..3],
        [
            (1, 1, Compression::None),
            (2, 2, Compression::None),
            (3, 102, Compression::None)
        ]
    );
    let sizes: Vec<u64> = got[3..].iter().map(|(a, b, _)| b - a + 1).collect();
    assert_eq!(sizes.iter().sum::<u64>(), 48);
    let per_batch = (MAX_BATCH_RECORD_BYTES / ((64 << 10) + 8)) as u64;
    assert!(
        sizes[..sizes.len() - 1].iter().all(|&n| n == per_batch),
        "{sizes:?}"
    );
    // A record larger than the cap gets a batch of its own.
    log.append_batch(&[Message::new(vec![1u8; 2 << 20]), Message::new("after")])
        .unwrap();
    let got = batches(&log);
    let n = got.len();
    assert_eq!(got[n - 2].0, got[n - 2].1);
    assert_eq!(got[n - 1].0, got[n - 1].1);
    let all = log.read(1, 1_000).unwrap();
    assert_eq!(all.len(), 152);
    assert_eq!(all[2].message, small[0]);
    assert_eq!(all[102].message, big[0]);
}

#[test]
fn append_batch_splits_where_the_segment_ends() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        Options {
            max_bytes: 10_000,
            ..opts()
        },
    )
    .unwrap();
    let msgs: Vec<Message> = (0..500u32)
        .map(|i| Message::new(format!("{i:0>90}")).with_timestamp(i64::from(i)))
        .collect();
    log.append_batch(&msgs).unwrap();
    let segs = log.segments();
    assert!(segs.len() >= 5, "{}", segs.len());
    for s in &segs[..segs.len() - 1] {
        assert!(s.size <= 10_000, "{s:?}");
        assert!(s.size > 9_000, "{s:?}");
    }
    let got = log.read(1, 1_000).unwrap();
    assert!(got.iter().zip(&msgs).all(|(r, m)| &r.message == m));
    // Point reads land inside batches: every seq reads alone, from its own batch.
    for seq in (1..=500).step_by(37) {
        let one = log.read(seq, 1).unwrap();
        assert_eq!((one.len(), one[0].seq), (1, seq));
        assert_eq!(one[0].message, msgs[seq as usize - 1]);
    }
}

#[test]
fn compressed_batches_round_trip_through_a_reopen_and_a_time_lookup() {
    for codec in [
        Compression::Zstd,
        Compression::Lz4,
        Compression::Gzip,
        Compression::Snappy,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            compression: codec,
            max_bytes: 64 << 10,
            ..opts()
        };
        let log = Log::open(dir.path(), o.clone()).unwrap();
        let msgs: Vec<Message> = (0..2_000u32)
            .map(|i| {
                Message::new(format!("record {i} {}", "abc".repeat((i % 50) as usize)))
                    .with_key(format!("k{}", i % 10))
                    .with_timestamp(10_000 + i64::from(i))
            })
            .collect();
        for chunk in msgs.chunks(250) {
            log.append_batch(chunk).unwrap();
        }
        log.append(&Message::new("single").with_timestamp(20_000))
            .unwrap();
        assert!(batches(&log).iter().all(|b| b.2 == codec), "{codec}");
        // Compression pays: far less on disk than the values.
        let on_disk: u64 = log.segments().iter().map(|s| s.size).sum();
        let values: usize = msgs.iter().map(|m| m.value.len()).sum();
        assert!(
            (on_disk as usize) < values / 2,
            "{codec}: {on_disk} for {values}"
        );
        drop(log);
        let log = Log::open(dir.path(), o).unwrap();
        assert!(!log.recovery_report().clean_shutdown);
        let got = log.read(1, 3_000).unwrap();
        assert_eq!(got.len(), 2_001, "{codec}");
        assert!(got.iter().zip(&msgs).all(|(r, m)| &r.message == m));
        assert_eq!(log.read(1_234, 1).unwrap()[0].message, msgs[1_233]);
        assert_eq!(log.seq_for_timestamp(10_777).unwrap(), Some(778));
    }
}

#[test]
fn max_message_bytes_past_what_a_reader_decompresses_is_refused() {
    // Every codec is built into the tests; the option check itself is what is tested here:
    // max_message_bytes past what a reader decompresses is refused.
    let dir = tempfile::tempdir().unwrap();
    let got = Log::open(
        dir.path(),
        Options {
            max_message_bytes: (segment::MAX_UNCOMPRESSED_BATCH as u64) + 1,
            ..opts()
        },
    );
    assert!(matches!(
        got,
        Err(Error::InvalidOptions {
            field: "max_message_bytes",
            ..
        })
    ));
}

#[test]
fn timestamps_a_batch_cannot_hold_together_start_a_new_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts()).unwrap();
    let msgs = [
        Message::new("min").with_timestamp(i64::MIN),
        Message::new("zero").with_timestamp(0),
        Message::new("max").with_timestamp(i64::MAX),
        Message::new("max again").with_timestamp(i64::MAX),
    ];
    log.append_batch(&msgs).unwrap();
    let got = log.read(1, 10).unwrap();
    assert!(got.iter().zip(&msgs).all(|(r, m)| &r.message == m));
    assert_eq!(batches(&log).len(), 2);
    for f in dump_batches(read_segment_file(&log.segments()[0].log_path).unwrap()) {
        let view: &BatchView = f.batch.as_ref().unwrap();
        let max = view
            .records(1 << 20)
            .unwrap()
            .map(|r| r.unwrap().timestamp)
            .max();
        assert_eq!(Some(view.header().max_timestamp), max);
    }
}

#[test]
fn seqs_a_batch_offset_cannot_hold_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts()).unwrap();
    log.start_at(i64::MAX as u64).unwrap();
    assert_eq!(log.append(&Message::new("last")).unwrap(), i64::MAX as u64);
    let got = log.append(&Message::new("past"));
    assert!(matches!(got, Err(Error::SeqOutOfRange { .. })), "{got:?}");
    assert_eq!(log.read(i64::MAX as u64, 5).unwrap().len(), 1);
}

/// The old format: per-record frames (LE length, CRC-32 of the rest, LE seq, a krabka message).
fn old_frames(seqs: std::ops::RangeInclusive<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    for seq in seqs {
        let mut body = seq.to_le_bytes().to_vec();
        Message::new(format!("old {seq}"))
            .with_timestamp(seq as i64)
            .encode(&mut body);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }
    out
}

#[test]
fn a_log_in_the_old_frame_format_is_refused_naming_the_file_and_left_as_it_is() {
    for mode in [
        RecoveryMode::TolerateTornTail,
        RecoveryMode::Strict,
        RecoveryMode::Repair,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(segment::segment_file_name(1, "log"));
        let bytes = old_frames(1..=20);
        // A torn last frame too: still the old format, not a tail to cut.
        fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let got = Log::open(
            dir.path(),
            Options {
                recovery: mode,
                ..opts()
            },
        );
        assert!(
            matches!(&got, Err(Error::OldFormat { path: p }) if *p == path),
            "{mode:?}: {got:?}"
        );
        let text = got.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("old per-record frame format"), "{text}");
        assert_eq!(fs::read(&path).unwrap(), bytes[..bytes.len() - 3]);
        assert!(!dir.path().join(segment::QUARANTINE_DIR).exists());
        // verify says the same.
        let v = segment::verify_segment(&path);
        assert!(matches!(v, Err(Error::OldFormat { .. })), "{v:?}");
    }
}

#[test]
fn appends_stamp_the_leader_epoch_the_log_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts()).unwrap();
    log.append(&Message::new("none")).unwrap();
    log.set_partition_leader_epoch(7).unwrap();
    log.append_batch(&[Message::new("a"), Message::new("b")])
        .unwrap();
    let raw = krabka_protocol::batch::encode_batch(
        &krabka_protocol::batch::BatchSpec {
            partition_leader_epoch: 3,
            ..krabka_protocol::batch::BatchSpec::new(0)
        },
        &[krabka_protocol::batch::RecordSpec::new(1, "raw")],
    )
    .unwrap();
    log.append_raw_batch(&raw).unwrap();
    assert!(matches!(
        log.set_partition_leader_epoch(-2),
        Err(Error::InvalidOptions { .. })
    ));
    let epochs: Vec<i32> = dump_batches(read_segment_file(&log.segments()[0].log_path).unwrap())
        .map(|f| f.batch.unwrap().header().partition_leader_epoch)
        .collect();
    assert_eq!(epochs, [-1, 7, 7]);
    // Reopened: every batch still reads; appends stamp -1 again until told otherwise.
    drop(log);
    let log = Log::open(dir.path(), opts()).unwrap();
    log.append(&Message::new("after")).unwrap();
    assert_eq!(log.read(1, 10).unwrap().len(), 5);
    // The active segment, verified as the newest of its log: a preallocated file
    // (`Options::preallocate`) goes on past its last batch with zeros.
    let active = log.segments().pop().unwrap();
    let v = segment::verify_segment_in_log(&active.log_path, None, None, None).unwrap();
    assert!(v.is_ok(), "{v:?}");
    assert_eq!(v.valid_bytes, active.size);
}

#[test]
fn a_time_lookup_passes_records_a_message_cannot_hold() {
    use krabka_protocol::batch::{BatchSpec, RecordSpec, encode_batch};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        Options {
            index_interval_bytes: 1,
            ..opts()
        },
    )
    .unwrap();
    log.append(&Message::new("a").with_timestamp(10)).unwrap();
    // Tombstones at 20 and 30, then a value at 40, in one producer batch.
    let raw = encode_batch(
        &BatchSpec::new(0),
        &[
            RecordSpec::tombstone(20).with_key("k"),
            RecordSpec::tombstone(30).with_key("k"),
            RecordSpec::new(40, "v"),
        ],
    )
    .unwrap();
    log.append_raw_batch(&raw).unwrap();
    log.append(&Message::new("b").with_timestamp(50)).unwrap();
    for (ts, want) in [
        (5, Some(1)),
        (15, Some(2)),
        (25, Some(3)),
        (35, Some(4)),
        (45, Some(5)),
        (55, None),
    ] {
        assert_eq!(log.seq_for_timestamp(ts).unwrap(), want, "ts {ts}");
    }
    // The decoded read refuses the tombstone, naming it.
    assert!(matches!(
        log.read(2, 1),
        Err(Error::NotAMessage { seq: 2, .. })
    ));
    assert_eq!(log.read(4, 1).unwrap()[0].message.value, "v");
}
