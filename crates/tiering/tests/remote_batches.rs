//! Remote reads of segments written as large record batches: batches of 100 records that cross
//! chunk boundaries (under chunk sizes from the minimum up), read back from the remote tier
//! alone, every seq by point reads and by scans; and a damaged batch ending reads exactly before
//! it, with an error naming the segment and the batch's byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use krabka_protocol::Message;
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{RemoteLogSegmentMetadata, layout};
use krabka_storage::segment::{BATCH_HEADER_LEN, dump_batches};
use krabka_tiering::metadata::InMemoryRemoteLogMetadataManager;
use krabka_tiering::{Error, TieredLog, TieringConfig};

/// Records per `append_batch` call: each call is one batch (unless a segment roll splits it).
const BATCH: u64 = 100;
/// Records written.
const RECORDS: u64 = 3000;
/// Local segment size: a few batches each.
const SEGMENT: u64 = 16 << 10;

/// A filesystem remote and in-memory metadata shared by the logs a test opens in turn.
struct World {
    dir: tempfile::TempDir,
    fs: Arc<FsRemoteStorage>,
    rlmm: Arc<InMemoryRemoteLogMetadataManager>,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
        World {
            dir,
            fs,
            rlmm: Arc::new(InMemoryRemoteLogMetadataManager::new()),
        }
    }

    /// The tiered log over the world, reading remote chunks of `chunk_bytes` (a fresh cache).
    fn open(&self, chunk_bytes: u32) -> TieredLog {
        let config = TieringConfig {
            local_retention_bytes: Some(0),
            retention_ms: None,
            chunk_bytes,
            ..TieringConfig::default()
        };
        TieredLog::open(
            self.dir.path().join("local"),
            options(SEGMENT),
            self.fs.clone(),
            self.rlmm.clone(),
            tp(),
            config,
        )
        .unwrap()
    }

    fn finished(&self) -> Vec<RemoteLogSegmentMetadata> {
        common::setup::finished(self.rlmm.as_ref())
    }

    fn log_object(&self, meta: &RemoteLogSegmentMetadata) -> std::path::PathBuf {
        self.dir
            .path()
            .join("remote")
            .join(layout::log_key(meta).unwrap())
    }
}

/// Writes [`RECORDS`] records in batches of [`BATCH`] (copied with `copy_chunk`-byte chunks
/// in the chunk map), copies every segment and deletes it locally: every seq is remote only.
fn world(copy_chunk: u32) -> World {
    let w = World::new();
    let log = w.open(copy_chunk);
    for from in (1..=RECORDS).step_by(BATCH as usize) {
        let msgs: Vec<Message> = (from..from + BATCH).map(message).collect();
        assert_eq!(log.append_batch(&msgs).unwrap(), from..=from + BATCH - 1);
    }
    log.roll().unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(log.local_first_seq(), RECORDS + 1, "{report:?}");
    let segs = w.finished();
    assert!(segs.len() >= 5, "{} remote segments", segs.len());
    assert_eq!(segs.last().unwrap().end_offset(), RECORDS);
    // The segments hold batches of many records, longer than the chunks read below.
    let batches = common::setup::log_batches(&w.log_object(&segs[1]));
    assert!(batches.len() >= 3, "{batches:?}");
    assert!(
        batches
            .iter()
            .any(|b| b.2 - b.1 + 1 == BATCH && b.3 > 2 * 1000),
        "{batches:?}"
    );
    w
}

/// Checks that `records` are `from, from + 1, ...` (at least one) with the values written.
fn check(records: &[krabka_storage::Record], from: u64, what: &str) {
    assert!(!records.is_empty(), "{what}: no record from {from}");
    for (r, seq) in records.iter().zip(from..) {
        let want = message(seq);
        assert_eq!(r.seq, seq, "{what}: records out of order");
        assert_eq!(
            (&r.message.key, &r.message.value),
            (&want.key, &want.value),
            "{what}: wrong record at {seq}"
        );
    }
}

#[test]
fn every_seq_of_batches_crossing_chunk_boundaries_reads_back_from_the_remote_tier() {
    let w = world(1000);
    for chunk in [64u32, 1000, 4096, 1 << 20] {
        // Point reads of every seq, cold then warm (chunk map, batch hints, cached chunks).
        let log = w.open(chunk);
        assert_eq!(log.first_seq().unwrap(), 1);
        for seq in 1..=RECORDS {
            let got = log.read(seq, 1).unwrap();
            assert_eq!(got.len(), 1, "chunk {chunk}: point read of {seq}");
            check(&got, seq, &format!("chunk {chunk}: point read"));
        }
        // Backwards, so that no read continues the one before it.
        for seq in (1..=RECORDS).rev().step_by(13) {
            check(
                &log.read(seq, 1).unwrap(),
                seq,
                &format!("chunk {chunk}: back"),
            );
        }
        assert!(
            log.stats().requests.fetch_log > 0,
            "nothing was read remotely"
        );
        drop(log);

        // Scans from every 7th seq, each on a cold cache's first touch of its chunks or not:
        // pages crossing batch, chunk and segment boundaries.
        let log = w.open(chunk);
        for from in (1..=RECORDS).step_by(7) {
            let want = usize::try_from((RECORDS + 1 - from).min(2 * BATCH + 17)).unwrap();
            let got = log.read(from, want).unwrap();
            assert!(!got.is_empty(), "chunk {chunk}: empty scan from {from}");
            check(&got, from, &format!("chunk {chunk}: scan from {from}"));
            // A remote read stops at its segment's end at the latest.
            let mut seq = from + got.len() as u64;
            while seq < from + want as u64 {
                let more = log.read(seq, usize::try_from(from + want as u64 - seq).unwrap());
                let more = more.unwrap();
                assert!(!more.is_empty(), "chunk {chunk}: no progress at {seq}");
                check(&more, seq, &format!("chunk {chunk}: scan from {from}"));
                seq += more.len() as u64;
            }
        }
        // One scan of everything.
        assert_eq!(read_all_and_check(&log, 1), RECORDS, "chunk {chunk}");
    }
}

#[test]
fn a_flipped_byte_in_a_remote_batch_ends_reads_exactly_before_it() {
    for chunk in [64u32, 1000, 1 << 20] {
        let w = world(chunk);
        let segs = w.finished();
        let target = segs[segs.len() / 2].clone();
        let path = w.log_object(&target);
        let all = common::setup::log_batches(&path);
        // The second batch of the segment, damaged in the middle of its records.
        let (pos, first, last, len) = all[1];
        assert!(last > first + 10, "{all:?}");
        let mut bytes = std::fs::read(&path).unwrap();
        let at = usize::try_from(pos + BATCH_HEADER_LEN as u64 + (len - 61) / 2).unwrap();
        bytes[at] ^= 0x10;
        std::fs::write(&path, bytes).unwrap();

        let log = w.open(chunk);
        let id = target.remote_log_segment_id();
        let key = layout::log_key(&target).unwrap();
        let names_the_batch = |e: &Error, seq: u64| match e {
            Error::Read(krabka_tiering::ReadError::CorruptRemote {
                segment,
                object,
                position,
                seq: s,
                ..
            }) => {
                assert_eq!(&**segment, id, "chunk {chunk}: {e}");
                assert_eq!(object, &key, "chunk {chunk}: {e}");
                assert_eq!(*position, Some(pos), "chunk {chunk}: {e}");
                assert_eq!(*s, seq, "chunk {chunk}: {e}");
                let text = e.to_string();
                assert!(text.contains(&id.to_string()), "{text}");
                assert!(text.contains(&format!("at byte {pos}")), "{text}");
            }
            other => panic!("chunk {chunk}: expected CorruptRemote, got {other:?}"),
        };
        // A read from the segment before: everything up to the damaged batch, then nothing.
        let from = segs[segs.len() / 2 - 1].start_offset();
        let got = log.read(from, 100_000).unwrap();
        assert_eq!(got.len() as u64, first - from, "chunk {chunk}");
        check(&got, from, &format!("chunk {chunk}: short read"));
        // From inside the batch before the damaged one: the same end.
        let before = (first - 5).max(all[0].1);
        let got = log.read(before, 100).unwrap();
        assert_eq!(got.len() as u64, first - before, "chunk {chunk}");
        check(&got, before, &format!("chunk {chunk}: short read"));
        // Reads starting in the damaged batch (at its first record, inside it, as point reads
        // and as scans) fail naming the segment and the batch's byte.
        for seq in [first, first + 1, (first + last) / 2, last] {
            for max in [1, 10, 1000] {
                let e = log.read(seq, max).unwrap_err();
                names_the_batch(&e, seq);
            }
        }
        // The batch after it reads as ever.
        let got = log.read(last + 1, 20).unwrap();
        check(&got, last + 1, &format!("chunk {chunk}: after the damage"));
        assert!(!got.is_empty());
        // A scan from the start stops exactly at the damaged batch, with the error.
        let (stopped, err) = scan_until_error(&log, 1);
        assert_eq!(stopped, first, "chunk {chunk}");
        names_the_batch(&err.expect("the damaged batch is an error"), first);
    }
}

/// Reads from `from` in pages of 97, checking every record; returns the seq the reads stopped
/// at and the error that stopped them.
fn scan_until_error(log: &TieredLog, from: u64) -> (u64, Option<Error>) {
    let mut seq = from;
    while seq <= log.last_seq() {
        match log.read(seq, 97) {
            Ok(page) => {
                assert!(!page.is_empty(), "an empty page at {seq}");
                check(&page, seq, "scan");
                seq += page.len() as u64;
            }
            Err(e) => return (seq, Some(e)),
        }
    }
    (seq, None)
}

#[test]
fn a_remote_record_that_is_not_a_message_ends_reads_exactly_before_it() {
    use krabka_protocol::batch::{BatchSpec, RecordSpec, encode_batch};
    let w = World::new();
    let local = w.dir.path().join("local");
    let log = krabka_storage::Log::open(&local, options(SEGMENT)).unwrap();
    let msgs: Vec<Message> = (1..=250).map(message).collect();
    log.append_batch(&msgs).unwrap();
    // A producer's batch holding a tombstone, stored as it came.
    let raw = encode_batch(
        &BatchSpec::new(0),
        &[RecordSpec::tombstone(6).with_key("gone")],
    );
    assert_eq!(log.append_raw_batch(&raw.unwrap()).unwrap(), 251..=251);
    let msgs: Vec<Message> = (252..=400).map(message).collect();
    log.append_batch(&msgs).unwrap();
    log.roll().unwrap();
    let log = TieredLog::new(
        log,
        w.fs.clone(),
        w.rlmm.clone(),
        tp(),
        TieringConfig {
            local_retention_bytes: Some(0),
            retention_ms: None,
            chunk_bytes: 1000,
            ..TieringConfig::default()
        },
    )
    .unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(log.local_first_seq(), 401);
    let target = w
        .finished()
        .into_iter()
        .find(|m| m.start_offset() <= 251 && m.end_offset() >= 251)
        .unwrap();
    let batch_at = common::setup::log_batches(&w.log_object(&target))
        .into_iter()
        .find(|b| b.1 == 251)
        .unwrap()
        .0;

    // Up to the tombstone: a short read.
    let got = log.read(200, 1000).unwrap();
    assert_eq!(got.len(), 51);
    check(&got, 200, "before the tombstone");
    // At it: the record is named, and it is not called damage.
    for max in [1, 5] {
        match log.read(251, max) {
            Err(Error::Read(krabka_tiering::ReadError::RemoteNotAMessage {
                segment,
                position,
                record_seq,
                seq,
                ..
            })) => {
                assert_eq!(&*segment, target.remote_log_segment_id());
                assert_eq!((position, record_seq, seq), (batch_at, 251, 251));
            }
            other => panic!("expected RemoteNotAMessage, got {other:?}"),
        }
    }
    // The records after it read as ever.
    check(&log.read(252, 10).unwrap(), 252, "after the tombstone");
}

/// The tiered log stamps its leader epoch on every batch it appends, raw ones included, and
/// a producer's batch appended raw reads back from the remote tier once copied.
#[test]
fn batches_carry_the_leader_epoch_and_raw_batches_tier_like_any_other() {
    use krabka_protocol::batch::{BatchSpec, RecordSpec, encode_batch};
    let world = World::new();
    let log = world.open(64 << 10);
    log.append(&Message::new("first").with_timestamp(1))
        .unwrap();
    log.set_leader_epoch(4, 2).unwrap();
    let raw = encode_batch(
        &BatchSpec::new(0),
        &(0..50)
            .map(|i| RecordSpec::new(10 + i, format!("raw {i}")).with_key("k"))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert_eq!(log.append_raw_batch(&raw).unwrap(), 2..=51);
    log.append(&Message::new("last").with_timestamp(99))
        .unwrap();
    let local = log.log().segments()[0].log_path.clone();
    let epochs: Vec<i32> = dump_batches(std::fs::read(&local).unwrap().into())
        .map(|f| f.batch.unwrap().header().partition_leader_epoch)
        .collect();
    assert_eq!(epochs, [0, 4, 4]);
    // A damaged raw batch is refused before anything is written.
    let mut bad = raw.to_vec();
    bad[70] ^= 1;
    assert!(matches!(
        log.append_raw_batch(&bad),
        Err(Error::Storage { .. })
    ));
    log.roll().unwrap();
    log.run_once().unwrap();
    assert!(!world.finished().is_empty());
    assert_eq!(log.log().first_seq(), 53, "copied and dropped locally");
    let got = log.read(1, 100).unwrap();
    assert_eq!(got.len(), 52);
    assert_eq!(got[1].message.value, "raw 0");
    assert_eq!(got[50].message.value, "raw 49");
    assert_eq!(got[51].message.value, "last");
}
