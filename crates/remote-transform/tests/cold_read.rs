//! What a cold read costs: requests and bytes that reach the inner store, counted by
//! `testkit::Counting` underneath the decorator. A 1-record read is one index request plus one chunk request, or,
//! straight to the data, one small header request plus one chunk request.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::sync::Arc;

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit::Counting;
use krabka_remote_storage::{IndexType, RemoteStorageManager};
use krabka_remote_transform::Transforming;
use support::*;

const CHUNK: u32 = 1 << 20;
const TAG: u64 = 16;

fn setup(
    mode: Mode,
    text: bool,
) -> (
    tempfile::TempDir,
    Arc<Counting<Arc<FsRemoteStorage>>>,
    Segment,
    krabka_remote_storage::RemoteLogSegmentMetadata,
) {
    let root = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(root.path()).unwrap());
    let counting = Arc::new(Counting::new(fs));
    let s = segment_of(
        &tp(),
        None,
        payload(7, 8 * CHUNK as usize + 1234, text),
        true,
    );
    let m = copy(&Transforming::new(counting.clone(), config(mode)), &s);
    counting.take();
    (root, counting, s, m)
}

#[test]
fn one_record_after_the_offset_index_is_one_chunk_request() {
    for mode in MODES {
        for text in [true, false] {
            let (_root, counting, s, m) = setup(mode, text);
            // A fresh decorator: nothing cached.
            let t = Transforming::new(counting.clone(), config(mode));
            let info = t.inspect(&m).unwrap().unwrap();
            counting.take();
            let index = t.fetch_index(&m, IndexType::Offset).unwrap();
            assert_eq!(index, s.indexes[0].1);
            let c = counting.take();
            assert_eq!((c.fetch_index, c.fetch_log), (1, 0), "{mode:?}");
            // The index object is the header plus the index body.
            assert!(c.fetch_index_bytes <= u64::from(info.header_bytes) + index.len() as u64 + TAG);

            // One 120-byte "record" in chunk 5.
            let at = 5 * CHUNK + 4321;
            let got = t.fetch_log_segment(&m, at, Some(at + 119)).unwrap();
            assert_eq!(got, s.log[at as usize..at as usize + 120]);
            let c = counting.take();
            assert_eq!(c.fetch_log, 1, "{mode:?} text={text}: {c:?}");
            assert!(
                c.fetch_log_bytes <= u64::from(CHUNK) + TAG,
                "{mode:?} text={text}: fetched {} bytes for one record",
                c.fetch_log_bytes
            );
            if text && !matches!(mode, Mode::Encrypted) {
                assert!(c.fetch_log_bytes < u64::from(CHUNK) / 2, "{mode:?}: {c:?}");
            }
        }
    }
}

#[test]
fn one_record_straight_from_the_log_is_header_plus_one_chunk() {
    for mode in MODES {
        let (_root, counting, s, m) = setup(mode, false);
        let t = Transforming::new(counting.clone(), config(mode));
        let at = 3 * CHUNK + 17;
        assert_eq!(
            t.fetch_log_segment(&m, at, Some(at + 99)).unwrap(),
            s.log[at as usize..at as usize + 100]
        );
        let c = counting.take();
        let info = t.inspect(&m).unwrap().unwrap();
        counting.take();
        assert_eq!(c.fetch_log, 2, "{mode:?}: {c:?}");
        assert!(c.fetch_log_bytes <= u64::from(info.header_bytes) + u64::from(CHUNK) + TAG);
        // Later reads reuse the cached header: one request each.
        t.fetch_log_segment(&m, 10, Some(20)).unwrap();
        assert_eq!(counting.take().fetch_log, 1);
        // A range over chunks 2..=4 is one request for the contiguous run.
        let got = t
            .fetch_log_segment(&m, 2 * CHUNK + 5, Some(4 * CHUNK + 5))
            .unwrap();
        assert_eq!(
            got,
            s.log[(2 * CHUNK + 5) as usize..=(4 * CHUNK + 5) as usize]
        );
        let c = counting.take();
        assert_eq!(c.fetch_log, 1, "{mode:?}: {c:?}");
        assert!(c.fetch_log_bytes <= 3 * (u64::from(CHUNK) + TAG));
        // A whole-segment read is split into runs of at most the fetch-run cap (8 MiB).
        assert_eq!(t.fetch_log_segment(&m, 0, None).unwrap(), s.log);
        let c = counting.take();
        assert_eq!(c.fetch_log, 2, "{mode:?}: {c:?}");
    }
}

#[test]
fn compressible_segments_are_stored_small() {
    let (root, _counting, s, m) = setup(Mode::Both, true);
    assert!(Transforming::is_transformed(&m).unwrap());
    let t = Transforming::new(
        Arc::new(FsRemoteStorage::new(root.path()).unwrap()),
        config(Mode::Both),
    );
    let info = t.inspect(&m).unwrap().unwrap();
    let ratio = f64::from(info.stored_bytes) / s.log.len() as f64;
    assert!(
        ratio < 0.35,
        "text-like data stored at {ratio:.3} of its size"
    );
    assert_eq!(info.chunks, 9);
    assert!(info.compressed);
}
