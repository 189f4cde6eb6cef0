//! Reads from a resume point that is wrong: read again from the offset index.

use std::sync::Arc;

use krabka_protocol::Message;
use krabka_remote_storage::testkit::InMemoryRemoteStorage;
use krabka_remote_storage::{TopicIdPartition, Uuid};
use krabka_storage::{Options, SyncPolicy};

use crate::metadata::{InMemoryRemoteLogMetadataManager, RemoteLogMetadataManager};
use crate::{TieredLog, TieringConfig};

#[test]
fn a_read_from_a_wrong_resume_point_is_made_again_from_the_offset_index() {
    let dir = tempfile::tempdir().unwrap();
    let rlmm = Arc::new(InMemoryRemoteLogMetadataManager::new());
    let tp = TopicIdPartition::new(Uuid::from_u128(7), "t", 0);
    let log = TieredLog::open(
        dir.path(),
        Options {
            max_bytes: 4096,
            index_interval_bytes: 256,
            sync: SyncPolicy::Never,
            ..Options::default()
        },
        Arc::new(InMemoryRemoteStorage::new()),
        rlmm.clone(),
        tp.clone(),
        TieringConfig {
            local_retention_bytes: Some(0),
            chunk_bytes: 1024,
            ..TieringConfig::default()
        },
    )
    .unwrap();
    let value = |seq: u64| format!("value-{seq:08}");
    let msgs: Vec<Message> = (1..=400).map(|s| Message::new(value(s))).collect();
    for batch in msgs.chunks(4) {
        log.append_batch(batch).unwrap();
    }
    log.run_once().unwrap();
    let first = rlmm.list_remote_log_segments(&tp).unwrap().remove(0);
    assert!(first.end_offset() >= 40, "{first:?}");
    let segment = first.remote_log_segment_id().id();
    let check = |from: u64, n: usize| {
        let got = log.read(from, n).unwrap();
        assert_eq!(got.len(), n);
        for (r, seq) in got.iter().zip(from..) {
            assert_eq!(
                (r.seq, r.message.value.as_ref()),
                (seq, value(seq).as_bytes())
            );
        }
    };
    check(1, 10);
    let before = log.stats().requests.fetch_index;
    // The next read continues this one: a correct resume point needs no index.
    check(11, 10);
    assert_eq!(log.stats().requests.fetch_index, before);
    // A resume point inside a batch (as a bug could leave): the read fails there, and is made
    // again from the offset index, giving exactly the records asked for.
    log.readahead.record(segment, 21, 21, Some((21, 5)));
    check(21, 10);
    assert_eq!(log.stats().requests.fetch_index, before + 1);
    // A resume point naming the wrong seq at a real batch start: the same.
    log.readahead.record(segment, 31, 31, Some((29, 0)));
    check(31, 10);
}
