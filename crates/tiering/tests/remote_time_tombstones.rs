//! Timestamp lookups over remote segments holding records a `Message` cannot hold (tombstones,
//! a control batch, a transactional batch, appended as producers' batches): the search walks
//! the batches as stored, so every lookup gives the exact seq the local log's lookup would,
//! through the tiered log and a read replica, under chunk sizes from the minimum up; decoded
//! reads of those records still refuse them; and a damaged batch the search must walk is
//! `CorruptRemote` naming the segment and the batch's byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use krabka_protocol::Message;
use krabka_protocol::batch::{BatchSpec, RecordSpec, encode_batch};
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{RemoteLogSegmentMetadata, layout};
use krabka_storage::segment::BATCH_HEADER_LEN;
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::metadata::DurableRemoteLogMetadataManager;
use krabka_tiering::replica::{ReadReplica, ReplicaConfig};
use krabka_tiering::{Error, RemoteOwnership, TieredLog, TieringConfig};

use common::tp;

/// The last seq copied to the remote tier; the local log holds the seqs after it.
const REMOTE_LAST: u64 = 90;
/// The last seq written.
const LAST: u64 = 95;
/// The seqs of the batch holding a tombstone between two ordinary records.
const MIXED: std::ops::RangeInclusive<u64> = 42..=44;

/// The timestamp of the record at `seq`: ten times the seq, but for the raw batches'
/// records (41..=47), whose timestamps are out of order inside the mixed batch.
fn ts_of(seq: u64) -> i64 {
    match seq {
        43 => 435,
        44 => 425,
        s => i64::try_from(s).unwrap() * 10,
    }
}

/// What the local log's lookup answers for `ts` over every seq written: the first record in
/// seq order whose timestamp is `>= ts`, among the seqs `1..=last`.
fn expected(ts: i64, last: u64) -> Option<u64> {
    (1..=last).find(|&s| ts_of(s) >= ts)
}

/// The shared remote tier, the writer's directory and its remote metadata.
struct World {
    dir: tempfile::TempDir,
    fs: Arc<FsRemoteStorage>,
    rlmm: Arc<DurableRemoteLogMetadataManager>,
}

impl World {
    fn location(&self) -> String {
        format!("fs://{}", self.dir.path().join("remote").display())
    }

    fn config(chunk_bytes: u32) -> TieringConfig {
        TieringConfig {
            local_retention_bytes: Some(0),
            local_retention_ms: None,
            retention_ms: None,
            chunk_bytes,
            ..TieringConfig::default()
        }
    }

    /// The partition's one writer, reading remote chunks of `chunk_bytes` (a fresh cache).
    fn writer(&self, chunk_bytes: u32) -> TieredLog {
        TieredLog::open_owned(
            self.dir.path().join("local"),
            Options {
                max_bytes: 64 << 10,
                index_interval_bytes: 256,
                sync: SyncPolicy::Never,
                ..Options::default()
            },
            self.fs.clone(),
            self.rlmm.clone(),
            tp(),
            Self::config(chunk_bytes),
            &RemoteOwnership::new(self.fs.clone(), self.location()),
        )
        .unwrap()
    }

    /// A read replica of the partition, reading remote chunks of `chunk_bytes`.
    fn replica(&self, chunk_bytes: u32) -> ReadReplica {
        ReadReplica::open(
            self.fs.clone(),
            self.fs.clone(),
            tp(),
            Self::config(chunk_bytes),
            ReplicaConfig::default(),
        )
        .unwrap()
    }

    fn log_object(&self, meta: &RemoteLogSegmentMetadata) -> PathBuf {
        self.dir
            .path()
            .join("remote")
            .join(layout::log_key(meta).unwrap())
    }
}

/// Ordinary records `seqs`, appended in batches of four.
fn append_messages(log: &TieredLog, seqs: std::ops::RangeInclusive<u64>) {
    let msgs: Vec<Message> = seqs
        .clone()
        .map(|s| {
            Message::new(format!("value {s}"))
                .with_key(format!("k{s}"))
                .with_timestamp(ts_of(s))
        })
        .collect();
    let mut next = *seqs.start();
    for batch in msgs.chunks(4) {
        let got = log.append_batch(batch).unwrap();
        assert_eq!(got, next..=next + batch.len() as u64 - 1);
        next += batch.len() as u64;
    }
}

/// A producer's batch, appended as it came at `seqs`.
fn append_raw(log: &TieredLog, spec: &BatchSpec, records: &[RecordSpec], seqs: (u64, u64)) {
    let raw = encode_batch(spec, records).unwrap();
    assert_eq!(log.append_raw_batch(&raw).unwrap(), seqs.0..=seqs.1);
}

/// Three remote segments, `1..=20`, `21..=60` (ordinary records around tombstones, a control
/// and a transactional batch) and `61..=90`, deleted locally; `91..=95` local only.
fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(dir.path().join("remote")).unwrap());
    let rlmm = DurableRemoteLogMetadataManager::open(dir.path().join("metadata")).unwrap();
    let w = World {
        dir,
        fs,
        rlmm: Arc::new(rlmm),
    };
    let log = w.writer(64 << 10);
    append_messages(&log, 1..=20);
    log.roll().unwrap();
    append_messages(&log, 21..=40);
    let tombstone = |s: u64| RecordSpec::tombstone(ts_of(s)).with_key(format!("gone {s}"));
    append_raw(&log, &BatchSpec::new(0), &[tombstone(41)], (41, 41));
    let mixed: Vec<RecordSpec> = vec![
        RecordSpec::new(ts_of(42), "value 42"),
        tombstone(43),
        RecordSpec::new(ts_of(44), "value 44"),
    ];
    append_raw(&log, &BatchSpec::new(0), &mixed, (42, 44));
    let producer = |control| BatchSpec {
        transactional: true,
        control,
        producer_id: 7,
        producer_epoch: 0,
        ..BatchSpec::new(0)
    };
    let marker = RecordSpec::new(ts_of(45), vec![0u8, 0, 0, 0, 0, 0]).with_key(vec![0u8, 0, 0, 1]);
    append_raw(&log, &producer(true), &[marker], (45, 45));
    let txn: Vec<RecordSpec> = (46..=47)
        .map(|s| RecordSpec::new(ts_of(s), format!("txn {s}")))
        .collect();
    append_raw(&log, &producer(false), &txn, (46, 47));
    append_messages(&log, 48..=60);
    log.roll().unwrap();
    append_messages(&log, 61..=REMOTE_LAST);
    log.roll().unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(log.local_first_seq(), REMOTE_LAST + 1, "{report:?}");
    append_messages(&log, REMOTE_LAST + 1..=LAST);
    let segs = w.finished();
    let bounds: Vec<(u64, u64)> = segs
        .iter()
        .map(|m| (m.start_offset(), m.end_offset()))
        .collect();
    assert_eq!(bounds, [(1, 20), (21, 60), (61, REMOTE_LAST)]);
    log.close().unwrap();
    w
}

impl World {
    fn finished(&self) -> Vec<RemoteLogSegmentMetadata> {
        common::setup::finished(self.rlmm.as_ref())
    }
}

/// Chunk sizes from the minimum (every batch crosses a boundary) to one chunk per segment.
const CHUNKS: [u32; 3] = [64, 1000, 1 << 20];

#[test]
fn lookups_step_over_and_land_on_records_a_message_cannot_hold() {
    let w = world();
    // The middle segment's batches: the raw ones among the ordinary ones.
    let middle = w.finished()[1].clone();
    let seqs: Vec<(u64, u64)> = common::setup::log_batches(&w.log_object(&middle))
        .iter()
        .map(|b| (b.1, b.2))
        .collect();
    for raw in [(41, 41), (42, 44), (45, 45), (46, 47)] {
        assert!(seqs.contains(&raw), "{seqs:?}");
    }
    // Every lookup in the tiered log is the exact answer, from a cold cache and a warm one.
    for chunk in CHUNKS {
        let log = w.writer(chunk);
        assert_eq!(log.local_first_seq(), REMOTE_LAST + 1);
        let named = [
            (i64::MIN, Some(1)), // before every record
            (0, Some(1)),
            (10, Some(1)),   // on the first
            (405, Some(41)), // between 40 and the tombstone: the tombstone
            (410, Some(41)), // on the tombstone
            (411, Some(42)), // between the tombstone and the mixed batch
            (421, Some(43)), // the tombstone inside the mixed batch, not its later record
            (426, Some(43)),
            (435, Some(43)), // on it
            (436, Some(45)), // past the mixed batch: the control batch's record
            (450, Some(45)),
            (451, Some(46)), // the transactional batch
            (471, Some(48)), // the first ordinary record after them
            (REMOTE_LAST as i64 * 10, Some(REMOTE_LAST)),
            (REMOTE_LAST as i64 * 10 + 1, Some(REMOTE_LAST + 1)), // the local log's answer
            (LAST as i64 * 10, Some(LAST)),
            (LAST as i64 * 10 + 1, None), // past every record
            (i64::MAX, None),
        ];
        for (ts, want) in named {
            assert_eq!(expected(ts, LAST), want, "the table at {ts}");
            assert_eq!(
                log.seq_for_timestamp(ts).unwrap(),
                want,
                "chunk {chunk}: ts {ts}"
            );
        }
        for ts in -5..=(LAST as i64 * 10 + 5) {
            let got = log.seq_for_timestamp(ts).unwrap();
            assert_eq!(got, expected(ts, LAST), "chunk {chunk}: ts {ts}");
        }
        assert!(
            log.stats().requests.fetch_log > 0,
            "nothing was read remotely"
        );
        // Decoded reads still refuse the records a Message cannot hold.
        for seq in [41, 43, 45, 46] {
            match log.read(seq, 1) {
                Err(Error::Read(krabka_tiering::ReadError::RemoteNotAMessage {
                    segment,
                    record_seq,
                    seq: s,
                    ..
                })) => {
                    assert_eq!(&*segment, middle.remote_log_segment_id());
                    assert_eq!((record_seq, s), (seq, seq));
                }
                other => panic!("chunk {chunk}: read of {seq}: {other:?}"),
            }
        }
        let got = log.read(48, 5).unwrap();
        assert_eq!(got.first().map(|r| r.seq), Some(48));
        drop(log);

        // A replica serves the remote seqs alone: the same answers up to them, then none.
        let replica = w.replica(chunk);
        for ts in (-5..=(LAST as i64 * 10 + 5)).step_by(3) {
            let got = replica.seq_for_timestamp(ts).unwrap();
            assert_eq!(
                got,
                expected(ts, REMOTE_LAST),
                "replica, chunk {chunk}: ts {ts}"
            );
        }
        assert_eq!(replica.seq_for_timestamp(421).unwrap(), Some(43));
        assert_eq!(replica.seq_for_timestamp(436).unwrap(), Some(45));
        assert_eq!(
            replica
                .seq_for_timestamp(REMOTE_LAST as i64 * 10 + 1)
                .unwrap(),
            None
        );
    }
}

#[test]
fn a_damaged_batch_the_lookup_must_walk_is_corrupt_remote_naming_it() {
    let w = world();
    let middle = w.finished()[1].clone();
    let path = w.log_object(&middle);
    let (pos, first, last, len) = common::setup::log_batches(&path)
        .into_iter()
        .find(|b| (b.1, b.2) == (*MIXED.start(), *MIXED.end()))
        .unwrap();
    assert_eq!((first, last), (42, 44));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = usize::try_from(pos + BATCH_HEADER_LEN as u64 + (len - 61) / 2).unwrap();
    bytes[at] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();

    let key = layout::log_key(&middle).unwrap();
    let names_the_batch = |e: Error, what: &str| match e {
        Error::Read(krabka_tiering::ReadError::CorruptRemote {
            segment,
            object,
            position,
            ..
        }) => {
            assert_eq!(&*segment, middle.remote_log_segment_id(), "{what}");
            assert_eq!(object, key, "{what}");
            assert_eq!(position, Some(pos), "{what}");
        }
        other => panic!("{what}: expected CorruptRemote, got {other:?}"),
    };
    for chunk in CHUNKS {
        let log = w.writer(chunk);
        // The answer lies in the damaged batch: the search must walk it.
        for ts in [415, 421, 435] {
            let e = log.seq_for_timestamp(ts).unwrap_err();
            names_the_batch(e, &format!("chunk {chunk}: ts {ts}"));
        }
        // Answers before it, and in the other segments, stand.
        assert_eq!(log.seq_for_timestamp(405).unwrap(), Some(41));
        assert_eq!(log.seq_for_timestamp(100).unwrap(), Some(10));
        assert_eq!(log.seq_for_timestamp(615).unwrap(), Some(62));
        assert_eq!(log.seq_for_timestamp(905).unwrap(), Some(91));
        drop(log);

        let replica = w.replica(chunk);
        let e = replica.seq_for_timestamp(421).unwrap_err();
        names_the_batch(e, &format!("replica, chunk {chunk}"));
        assert_eq!(replica.seq_for_timestamp(405).unwrap(), Some(41));
    }
}
