//! Integrity across the tiers, at the remote edge: remote reads are exact or an error (the
//! corruption matrix), and the edges of the tiered read and its settings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::setup::*;
use common::*;
use krabka_protocol::Message;
use krabka_remote_storage::{
    IndexType, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState,
    TopicIdPartition, Uuid, layout,
};
use krabka_tiering::metadata::RemoteLogMetadataManager;
use krabka_tiering::{Error, TieredLog, TieringConfig};

// ---- I2 and the corruption matrix: remote reads are exact or an error ----

fn object_path(root: &Path, meta: &RemoteLogSegmentMetadata, index: Option<IndexType>) -> PathBuf {
    root.join(match index {
        None => layout::log_key(meta).unwrap(),
        Some(t) => layout::index_key(meta, t).unwrap(),
    })
}

#[test]
fn records_before_a_bad_remote_frame_are_delivered_first() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    append(&log, 300);
    log.run_once().unwrap();
    let remote = s.finished();
    assert!(remote.len() >= 4);
    let target = &remote[2];
    let path = object_path(&s.remote_root(), target, None);
    let (bad_seq, bad_pos) = flip_third_frame(&path);
    // One read from the segment before: its records, then the bad segment's up to the frame.
    let from = remote[1].start_offset();
    let got = log.read(from, 1000).unwrap();
    assert_eq!(got.len() as u64, bad_seq - from);
    for (r, seq) in got.iter().zip(from..) {
        assert_eq!((r.seq, &r.message.value), (seq, &message(seq).value));
    }
    match log.read(bad_seq, 10) {
        Err(Error::Read(krabka_tiering::ReadError::CorruptRemote {
            object, position, ..
        })) => {
            assert_eq!(object, layout::log_key(target).unwrap());
            assert_eq!(position, Some(bad_pos));
        }
        other => panic!("expected CorruptRemote, got {other:?}"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Flip,
    Truncate,
    Delete,
}

#[test]
fn remote_corruption_matrix_gives_exact_records_or_typed_errors() {
    for object in [None, Some(IndexType::Offset), Some(IndexType::Timestamp)] {
        for damage in [Damage::Flip, Damage::Truncate, Damage::Delete] {
            let s = Setup::new();
            let log = s.open(keep_nothing_locally());
            // Increasing timestamps, so a lookup of the target's newest one reaches it.
            let msgs: Vec<Message> = (1..=300u64)
                .map(|seq| message(seq).with_timestamp(1_600_000_000_000 + seq as i64))
                .collect();
            log.append_batch(&msgs).unwrap();
            log.run_once().unwrap();
            let remote = s.finished();
            let target = remote[2].clone();
            let path = object_path(&s.remote_root(), &target, object);
            let bytes = std::fs::read(&path).unwrap();
            match damage {
                Damage::Flip => {
                    let mut b = bytes.clone();
                    let at = b.len() / 2;
                    b[at] ^= 0x55;
                    std::fs::write(&path, b).unwrap();
                }
                Damage::Truncate => std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap(),
                Damage::Delete => std::fs::remove_file(&path).unwrap(),
            }
            let case = format!("{object:?} {damage:?}");
            let (stopped, err) = read_until_error(&log, 1);
            let ts = target.max_timestamp_ms();
            match object {
                Some(IndexType::Timestamp) => {
                    // Reads do not use the time index; the timestamp lookup does.
                    assert!(err.is_none(), "{case}: {err:?}");
                    assert_eq!(stopped, log.last_seq() + 1);
                    let r = log.seq_for_timestamp(ts);
                    assert!(
                        matches!(
                            r,
                            Err(Error::Read(krabka_tiering::ReadError::CorruptRemote { .. })
                                | Error::Remote { .. })
                        ),
                        "{case}: {r:?}"
                    );
                }
                _ => {
                    let err = if object.is_some() {
                        // A scan reads no offset index: each read starts at a segment's first
                        // batch or where the read before it stopped. A read from inside the
                        // segment that continues none (the scan's reads start at 1 + 37k)
                        // needs it, and names what is wrong with it.
                        assert!(err.is_none(), "{case}: {err:?}");
                        assert_eq!(stopped, log.last_seq() + 1);
                        let mut mid = target.start_offset() + 7;
                        if (mid - 1).is_multiple_of(37) {
                            mid += 1;
                        }
                        assert!(mid <= target.end_offset());
                        let r = log.read(mid, 5);
                        r.err()
                            .unwrap_or_else(|| panic!("{case}: no error from seq {mid}"))
                    } else {
                        let err = err.unwrap_or_else(|| panic!("{case}: no error"));
                        assert!(
                            stopped >= target.start_offset() && stopped <= target.end_offset(),
                            "{case}: stopped at {stopped}"
                        );
                        err
                    };
                    match &err {
                        Error::Read(krabka_tiering::ReadError::CorruptRemote {
                            segment,
                            object: o,
                            ..
                        }) => {
                            assert_eq!(&**segment, target.remote_log_segment_id(), "{case}");
                            let key = match object {
                                None => layout::log_key(&target).unwrap(),
                                Some(t) => layout::index_key(&target, t).unwrap(),
                            };
                            assert_eq!(o, &key, "{case}");
                        }
                        Error::Remote { segment, .. } => {
                            assert_eq!(segment.as_ref(), Some(target.remote_log_segment_id()));
                        }
                        other => panic!("{case}: untyped error {other}"),
                    }
                }
            }
        }
    }
}

// ---- the edges of the tiered read and its settings ----

#[test]
fn read_zero_is_out_of_range_like_log_read() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    append(&log, 300);
    assert!(matches!(
        log.log().read(0, 0),
        Err(krabka_storage::Error::OutOfRange { .. })
    ));
    assert!(matches!(
        log.read(0, 0),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));
    log.run_once().unwrap();
    assert!(log.local_first_seq() > 100);
    // Seq 1 is remote: a read of none of it is fine, as a read of one is.
    assert_eq!(log.read(1, 0).unwrap(), []);
    assert_eq!(log.read(1, 1).unwrap().len(), 1);
    assert!(matches!(
        log.read(0, 0),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));
    assert_eq!(log.read(log.last_seq() + 1, 0).unwrap(), []);
    assert!(matches!(
        log.read(log.last_seq() + 2, 0),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));

    // The first remote segment disappears from the metadata (another process's retention,
    // no checkpoint here): seq 1 is in neither tier, for a read of 0 as for a read of 1.
    let first = s.finished().remove(0);
    for state in [
        RemoteLogSegmentState::DeleteSegmentStarted,
        RemoteLogSegmentState::DeleteSegmentFinished,
    ] {
        s.rlmm
            .update_remote_log_segment_metadata(&RemoteLogSegmentMetadataUpdate::to_state(
                first.remote_log_segment_id().clone(),
                state,
                0,
            ))
            .unwrap();
    }
    assert!(matches!(
        log.read(1, 1),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));
    assert!(matches!(
        log.read(1, 0),
        Err(Error::Read(krabka_tiering::ReadError::OutOfRange { .. }))
    ));
    let next = first.end_offset() + 1;
    assert_eq!(log.read(next, 0).unwrap(), []);
}

#[test]
fn local_retention_bytes_counts_every_segment_file() {
    let s = Setup::new();
    let limit = 8 << 10;
    let log = s.open(TieringConfig {
        local_retention_bytes: Some(limit),
        ..keep_everything()
    });
    append(&log, 500);
    log.run_once().unwrap();
    let log_bytes: u64 = log.log().segments().iter().map(|s| s.size).sum();
    let all_bytes = log.log().bytes();
    assert!(all_bytes > log_bytes, "index files count too");
    assert!(
        all_bytes <= limit,
        "{all_bytes} bytes kept locally (.log only: {log_bytes}) over a {limit}-byte limit"
    );
    // And no more than needed went: one more segment would not have fit.
    let first = &closed_segments(&log)[0];
    assert!(log.local_first_seq() == first.base_seq);
}

#[test]
fn open_rejects_a_bad_topic_before_creating_files() {
    let s = Setup::new();
    for bad in ["a/b", "..", "", &"x".repeat(250)] {
        let tp = TopicIdPartition::new(Uuid::from_u128(1), bad, 0);
        let e = TieredLog::open(
            s.local(),
            options(1024),
            s.fs.clone(),
            s.rlmm.clone(),
            tp,
            keep_everything(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidConfig(_)), "{bad:?}: {e}");
        assert!(
            !s.local().exists(),
            "{bad:?}: the local directory was created"
        );
    }
    let e = s
        .open_with(
            options(1024),
            TieringConfig {
                copy_concurrency: 0,
                ..keep_everything()
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    assert!(!s.local().exists());
}

#[test]
fn long_topic_name_tiers_on_fs() {
    let s = Setup::new();
    let topic = format!("{}-{}", "t".repeat(200), "u".repeat(48));
    assert_eq!(topic.len(), 249);
    let tp = TopicIdPartition::new(Uuid::from_u128(9), topic, 17);
    let log = TieredLog::open(
        s.local(),
        options(1024),
        s.fs.clone(),
        s.rlmm.clone(),
        tp.clone(),
        keep_nothing_locally(),
    )
    .unwrap();
    let msgs: Vec<Message> = (1..=300u64).map(message).collect();
    log.append_batch(&msgs).unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.segments_copied > 5);
    assert!(log.local_first_seq() > 100);
    let all = log.read(1, 1000).unwrap();
    assert_eq!(all.len(), 300);
    assert!(
        all.iter()
            .zip(1..)
            .all(|(r, seq)| r.seq == seq && r.message.value == message(seq).value)
    );
}

#[test]
fn default_config_keeps_fresh_records() {
    let s = Setup::new();
    let log = s.open(TieringConfig::default());
    // Messages as a user builds them: `Message::new` stamps the current time.
    let msgs: Vec<Message> = (0..600)
        .map(|i| Message::new(format!("fresh {i}")))
        .collect();
    log.append_batch(&msgs).unwrap();
    let report = log.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.segments_copied > 5, "{report:?}");
    assert_eq!(report.remote_segments_deleted, 0, "{report:?}");
    assert_eq!(report.local_segments_deleted, 0, "{report:?}");
    assert_eq!(log.first_seq().unwrap(), 1);
    let all = log.read(1, 1000).unwrap();
    assert_eq!(all.len(), 600);
    assert_eq!(all[599].message.value, "fresh 599");
}

#[test]
fn seq_for_timestamp_spans_both_tiers() {
    let s = Setup::new();
    let log = s.open(keep_nothing_locally());
    let ts = |seq: u64| 1_600_000_000_000 + 10 * seq as i64;
    let msgs: Vec<Message> = (1..=400u64)
        .map(|seq| message(seq).with_timestamp(ts(seq)))
        .collect();
    log.append_batch(&msgs).unwrap();
    log.run_once().unwrap();
    let local_first = log.local_first_seq();
    assert!(local_first > 300);
    // The local log alone answers from local data: wrong once the prefix is remote.
    assert_eq!(
        log.log().seq_for_timestamp(ts(1)).unwrap(),
        Some(local_first)
    );

    assert_eq!(log.seq_for_timestamp(i64::MIN).unwrap(), Some(1));
    for seq in [1, 2, 57, 100, 250, local_first - 1, local_first, 399, 400] {
        assert_eq!(
            log.seq_for_timestamp(ts(seq)).unwrap(),
            Some(seq),
            "ts of {seq}"
        );
        assert_eq!(log.seq_for_timestamp(ts(seq) - 5).unwrap(), Some(seq));
    }
    assert_eq!(log.seq_for_timestamp(ts(400) + 1).unwrap(), None);
    // A repeated lookup fetches nothing: the time index and chunks are cached.
    let before = log.stats().requests.total();
    assert_eq!(log.seq_for_timestamp(ts(57)).unwrap(), Some(57));
    assert_eq!(log.stats().requests.total(), before);
}
