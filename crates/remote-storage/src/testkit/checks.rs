//! The conformance checks (see [`CHECKS`](super::CHECKS)).

use std::fs::File;
use std::io::{BufWriter, Write};

use uuid::Uuid;

use super::fixtures::*;
use crate::manager::RemoteStorageManager;
use crate::model::{
    IndexType, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState,
    TopicIdPartition,
};

/// Copy, then fetch the whole segment, the first byte, an inclusive range, the last byte, an
/// open-ended tail and an empty tail at the end.
pub fn copy_then_fetch_whole_segment_and_ranges(rsm: &dyn RemoteStorageManager) {
    const C: &str = "copy_then_fetch_whole_segment_and_ranges";
    let s = segment(C, &fresh_tp(0), None, 1000, DEFAULT_SIZE, 11, true);
    let m = copy(C, rsm, &s);
    verify_all(C, rsm, &m, &s);
    let n = s.log.len();
    let last = pos(C, n - 1);
    let first = must(C, "fetch first byte", rsm.fetch_log_segment(&m, 0, Some(0)));
    check_eq(C, "first byte (0..=0)", &first, &s.log[..1]);
    let mid = must(
        C,
        "fetch 100..=4195",
        rsm.fetch_log_segment(&m, 100, Some(4195)),
    );
    check_eq(C, "inclusive range 100..=4195", &mid, &s.log[100..4196]);
    let lastb = must(
        C,
        "fetch last byte",
        rsm.fetch_log_segment(&m, last, Some(last)),
    );
    check_eq(C, "last byte", &lastb, &s.log[n - 1..]);
    let to_end = must(
        C,
        "fetch last..=last",
        rsm.fetch_log_segment(&m, last, Some(last)),
    );
    check_eq(
        C,
        "inclusive end at the last byte",
        &to_end,
        &s.log[n - 1..],
    );
    let tail = must(C, "fetch 5000..", rsm.fetch_log_segment(&m, 5000, None));
    check_eq(C, "open-ended tail 5000..", &tail, &s.log[5000..]);
    let upto_last = must(
        C,
        "fetch 0..=last",
        rsm.fetch_log_segment(&m, 0, Some(last)),
    );
    check_eq(C, "0..=last", &upto_last, &s.log);
    let empty = must(C, "fetch len..", rsm.fetch_log_segment(&m, pos(C, n), None));
    check_eq(C, "empty tail at the end", &empty, &[]);
    delete(C, rsm, &m);
}

/// A range starting past the segment's end (for an inclusive range: past its last byte), or
/// with its end before its start, is `InvalidArgument`.
pub fn range_starting_past_the_end_is_invalid_argument(rsm: &dyn RemoteStorageManager) {
    const C: &str = "range_starting_past_the_end_is_invalid_argument";
    let s = segment(C, &fresh_tp(0), None, 0, 4096, 12, false);
    let m = copy(C, rsm, &s);
    expect_invalid_argument(
        C,
        "start and end past the end",
        rsm.fetch_log_segment(&m, 5000, Some(6000)),
    );
    expect_invalid_argument(
        C,
        "inclusive range starting at the size",
        rsm.fetch_log_segment(&m, 4096, Some(4096)),
    );
    expect_invalid_argument(
        C,
        "start past the end, open end",
        rsm.fetch_log_segment(&m, 4097, None),
    );
    expect_invalid_argument(
        C,
        "end before start",
        rsm.fetch_log_segment(&m, 10, Some(9)),
    );
    delete(C, rsm, &m);
}

/// An inclusive end at or past the segment's size reads to the end, as an HTTP or S3 range
/// does: a caller sizing a fetch from an estimate (an index entry, a batch size) may ask for
/// more bytes than are left.
pub fn inclusive_end_past_the_last_byte_reads_to_the_end(rsm: &dyn RemoteStorageManager) {
    const C: &str = "inclusive_end_past_the_last_byte_reads_to_the_end";
    let s = segment(C, &fresh_tp(0), None, 0, 70_001, 27, false);
    let m = copy(C, rsm, &s);
    let n = s.log.len();
    for (start, end, what) in [
        (0, pos(C, n), "0..=size"),
        (0, pos(C, n + 1), "0..=size+1"),
        (1000, pos(C, n + 70_000), "1000..=size+70000"),
        (pos(C, n - 1), pos(C, n + 5), "last byte..=past it"),
        (65_536, u32::MAX, "65536..=u32::MAX"),
        (0, u32::MAX, "0..=u32::MAX"),
    ] {
        let got = must(C, what, rsm.fetch_log_segment(&m, start, Some(end)));
        check_eq(C, what, &got, &s.log[start as usize..]);
    }
    delete(C, rsm, &m);
    expect_not_found(
        C,
        "an over-long range of a deleted segment",
        rsm.fetch_log_segment(&m, 0, Some(u32::MAX)),
    );
}

/// Every index type comes back byte for byte, the optional ones when given.
pub fn each_index_type_round_trips(rsm: &dyn RemoteStorageManager) {
    const C: &str = "each_index_type_round_trips";
    let s = segment(C, &fresh_tp(0), None, 0, 2048, 13, true);
    let m = copy(C, rsm, &s);
    for t in IndexType::ALL {
        let want = &s.indexes[&t];
        let got = must(C, &format!("fetch {t} index"), rsm.fetch_index(&m, t));
        check_eq(C, &format!("{t} index"), &got, want);
    }
    delete(C, rsm, &m);
}

/// An optional index that was not given is `SegmentNotFound`, the others still fetch.
pub fn missing_optional_index_is_segment_not_found(rsm: &dyn RemoteStorageManager) {
    const C: &str = "missing_optional_index_is_segment_not_found";
    let s = segment(C, &fresh_tp(0), None, 0, 2048, 14, false);
    let m = copy(C, rsm, &s);
    expect_not_found(
        C,
        "transaction index not given",
        rsm.fetch_index(&m, IndexType::Transaction),
    );
    expect_not_found(
        C,
        "producer snapshot not given",
        rsm.fetch_index(&m, IndexType::ProducerSnapshot),
    );
    verify_all(C, rsm, &m, &s);
    delete(C, rsm, &m);
}

/// Fetching a segment that was never copied is `SegmentNotFound`, for the data and every index.
pub fn fetch_of_unknown_segment_is_segment_not_found(rsm: &dyn RemoteStorageManager) {
    const C: &str = "fetch_of_unknown_segment_is_segment_not_found";
    let s = segment(C, &fresh_tp(0), None, 0, 16, 15, true);
    expect_not_found(
        C,
        "fetch of a never-copied segment",
        rsm.fetch_log_segment(&s.metadata, 0, None),
    );
    for t in IndexType::ALL {
        expect_not_found(
            C,
            &format!("{t} index of a never-copied segment"),
            rsm.fetch_index(&s.metadata, t),
        );
    }
}

/// After a delete, the data and every index are `SegmentNotFound`.
pub fn delete_then_fetch_is_segment_not_found(rsm: &dyn RemoteStorageManager) {
    const C: &str = "delete_then_fetch_is_segment_not_found";
    let s = segment(C, &fresh_tp(0), None, 0, 8192, 16, true);
    let m = copy(C, rsm, &s);
    delete(C, rsm, &m);
    expect_not_found(C, "fetch after delete", rsm.fetch_log_segment(&m, 0, None));
    expect_not_found(
        C,
        "ranged fetch after delete",
        rsm.fetch_log_segment(&m, 0, Some(0)),
    );
    for t in IndexType::ALL {
        expect_not_found(
            C,
            &format!("{t} index after delete"),
            rsm.fetch_index(&m, t),
        );
    }
}

/// Deleting twice, and deleting a segment never copied, succeed.
pub fn delete_twice_is_ok(rsm: &dyn RemoteStorageManager) {
    const C: &str = "delete_twice_is_ok";
    let s = segment(C, &fresh_tp(0), None, 0, 1024, 17, true);
    let m = copy(C, rsm, &s);
    delete(C, rsm, &m);
    must(C, "second delete", rsm.delete_log_segment_data(&m));
    let never = segment(C, &fresh_tp(0), None, 0, 16, 18, false);
    must(
        C,
        "delete of a never-copied segment",
        rsm.delete_log_segment_data(&never.metadata),
    );
}

/// A second copy under the same id replaces the first entirely: new data, new indexes, and
/// optional indexes the second copy lacks are gone.
pub fn recopy_under_the_same_id_replaces_cleanly(rsm: &dyn RemoteStorageManager) {
    const C: &str = "recopy_under_the_same_id_replaces_cleanly";
    let tp = fresh_tp(0);
    let first = segment(C, &tp, None, 500, 30_000, 19, true);
    let uuid = first.metadata.remote_log_segment_id().id();
    let m1 = copy(C, rsm, &first);
    verify_all(C, rsm, &m1, &first);
    let second = segment(C, &tp, Some(uuid), 500, 12_345, 20, false);
    let m2 = copy(C, rsm, &second);
    verify_all(C, rsm, &m2, &second);
    expect_not_found(
        C,
        "stale transaction index after re-copy",
        rsm.fetch_index(&m2, IndexType::Transaction),
    );
    expect_not_found(
        C,
        "stale producer snapshot after re-copy",
        rsm.fetch_index(&m2, IndexType::ProducerSnapshot),
    );
    let over_long = must(
        C,
        "fetch 0..=20000 (the old, longer data's range)",
        rsm.fetch_log_segment(&m2, 0, Some(20_000)),
    );
    check_eq(
        C,
        "0..=20000 after re-copy: the new data only",
        &over_long,
        &second.log,
    );
    delete(C, rsm, &m2);
}

/// Segments of two partitions of a topic, and of two topics with the same name, sharing start
/// offset and segment uuid, never see each other's data; deleting one leaves the others.
pub fn partitions_and_topics_never_collide(rsm: &dyn RemoteStorageManager) {
    const C: &str = "partitions_and_topics_never_collide";
    let p0 = fresh_tp(0);
    let p1 = TopicIdPartition::new(p0.topic_id(), p0.topic(), 1);
    let other_topic = TopicIdPartition::new(Uuid::new_v4(), p0.topic(), 0);
    let shared = Uuid::new_v4();
    let segs = [
        segment(C, &p0, Some(shared), 0, 3000, 21, true),
        segment(C, &p1, Some(shared), 0, 3001, 22, true),
        segment(C, &other_topic, Some(shared), 0, 3002, 23, true),
    ];
    let ms: Vec<_> = segs.iter().map(|s| copy(C, rsm, s)).collect();
    for (m, s) in ms.iter().zip(&segs) {
        verify_all(C, rsm, m, s);
    }
    delete(C, rsm, &ms[0]);
    expect_not_found(
        C,
        "deleted partition 0",
        rsm.fetch_log_segment(&ms[0], 0, None),
    );
    verify_all(C, rsm, &ms[1], &segs[1]);
    verify_all(C, rsm, &ms[2], &segs[2]);
    delete(C, rsm, &ms[1]);
    delete(C, rsm, &ms[2]);
}

/// A 0-byte segment copies; its whole fetch is empty; any inclusive range is invalid (it has
/// no first byte).
pub fn zero_byte_segment(rsm: &dyn RemoteStorageManager) {
    const C: &str = "zero_byte_segment";
    let s = segment(C, &fresh_tp(0), None, 7, 0, 24, false);
    let m = copy(C, rsm, &s);
    verify_all(C, rsm, &m, &s);
    expect_invalid_argument(
        C,
        "0..=0 of an empty segment",
        rsm.fetch_log_segment(&m, 0, Some(0)),
    );
    expect_invalid_argument(
        C,
        "0..=u32::MAX of an empty segment",
        rsm.fetch_log_segment(&m, 0, Some(u32::MAX)),
    );
    expect_invalid_argument(
        C,
        "1.. of an empty segment",
        rsm.fetch_log_segment(&m, 1, None),
    );
    delete(C, rsm, &m);
    expect_not_found(
        C,
        "empty segment after delete",
        rsm.fetch_log_segment(&m, 0, None),
    );
}

/// A 100 MiB segment round-trips; compared chunk by chunk against a regenerated stream, so
/// only the fetched copy is held in memory.
pub fn large_segment_100_mib(rsm: &dyn RemoteStorageManager) {
    const C: &str = "large_segment_100_mib";
    const SIZE: usize = 100 * 1024 * 1024;
    const CHUNK: usize = 1024 * 1024;
    const SEED: u64 = 25;
    let tp = fresh_tp(0);
    let small = segment(C, &tp, None, 0, 0, SEED, false);
    let dir = must_io(C, "tempdir", tempfile::tempdir());
    let log_path = dir.path().join("big.log");
    {
        let mut w = BufWriter::new(must_io(C, "create", File::create(&log_path)));
        let mut rng = fastrand::Rng::with_seed(SEED);
        let mut chunk = vec![0u8; CHUNK];
        for _ in 0..SIZE / CHUNK {
            rng.fill(&mut chunk);
            must_io(C, "write", w.write_all(&chunk));
        }
        must_io(C, "flush", w.flush());
    }
    let mut data = small.data.clone();
    data.log_segment = log_path;
    let metadata = must(
        C,
        "building metadata",
        RemoteLogSegmentMetadata::builder(
            small.metadata.remote_log_segment_id().clone(),
            0,
            99_999,
        )
        .segment_size_in_bytes(SIZE as u64)
        .build(),
    );
    let cm = must(
        C,
        "copy of 100 MiB",
        rsm.copy_log_segment_data(&metadata, &data),
    );
    let m = metadata.with_custom_metadata(cm);
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut want = vec![0u8; CHUNK];
    {
        let whole = must(C, "fetch of 100 MiB", rsm.fetch_log_segment(&m, 0, None));
        if whole.len() != SIZE {
            panic!(
                "conformance check `{C}`: whole fetch is {} bytes, want {SIZE}",
                whole.len()
            );
        }
        for (i, got) in whole.chunks(CHUNK).enumerate() {
            rng.fill(&mut want);
            check_eq(C, &format!("MiB {i} of the whole fetch"), got, &want);
        }
    }
    // A range straddling the 64 MiB mark, and the last MiB, by positioned fetches.
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut expected = Vec::with_capacity(2 * CHUNK);
    for i in 0..SIZE / CHUNK {
        rng.fill(&mut want);
        if i == 63 || i == 64 {
            expected.extend_from_slice(&want);
        }
    }
    let start = 63 * CHUNK;
    let got = must(
        C,
        "fetch across 64 MiB",
        rsm.fetch_log_segment(&m, pos(C, start), Some(pos(C, start + 2 * CHUNK - 1))),
    );
    check_eq(C, "2 MiB across the 64 MiB mark", &got, &expected);
    let got = must(
        C,
        "fetch of the last MiB",
        rsm.fetch_log_segment(&m, pos(C, SIZE - CHUNK), None),
    );
    check_eq(C, "last MiB", &got, &want);
    delete(C, rsm, &m);
}

/// Eight threads each copy, fetch (whole, ranged, an index) and delete their own segments of
/// one shared partition at once; nobody sees another's bytes.
pub fn eight_threads_copy_and_fetch_at_once(rsm: &dyn RemoteStorageManager) {
    const C: &str = "eight_threads_copy_and_fetch_at_once";
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 4;
    let tp = fresh_tp(0);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let tp = tp.clone();
            scope.spawn(move || {
                for r in 0..ROUNDS {
                    let seed = 1000 + t * ROUNDS + r;
                    let size = 20_000 + (seed as usize * 977) % 40_000;
                    let s = segment(C, &tp, None, (t * ROUNDS + r) * 100, size, seed, r % 2 == 0);
                    let m = copy(C, rsm, &s);
                    verify_all(C, rsm, &m, &s);
                    let (a, b) = (size / 3, size / 2);
                    let got = must(
                        C,
                        "ranged fetch",
                        rsm.fetch_log_segment(&m, pos(C, a), Some(pos(C, b))),
                    );
                    check_eq(
                        C,
                        &format!("thread {t} round {r} range"),
                        &got,
                        &s.log[a..=b],
                    );
                    delete(C, rsm, &m);
                }
            });
        }
    });
}

/// The custom metadata a copy returns is what later calls carry: fetches and delete with it
/// work, and it survives the metadata's state changes.
pub fn custom_metadata_is_passed_back(rsm: &dyn RemoteStorageManager) {
    const C: &str = "custom_metadata_is_passed_back";
    let s = segment(C, &fresh_tp(0), None, 0, 5000, 26, true);
    let m = copy(C, rsm, &s);
    let finished = must(
        C,
        "state change",
        m.apply(&RemoteLogSegmentMetadataUpdate::to_state(
            m.remote_log_segment_id().clone(),
            RemoteLogSegmentState::CopySegmentFinished,
            0,
        )),
    );
    if finished.custom_metadata() != m.custom_metadata() {
        panic!("conformance check `{C}`: custom metadata lost by a state change");
    }
    verify_all(C, rsm, &finished, &s);
    let got = must(
        C,
        "ranged fetch",
        rsm.fetch_log_segment(&finished, 10, Some(19)),
    );
    check_eq(C, "range with custom metadata", &got, &s.log[10..20]);
    delete(C, rsm, &finished);
    expect_not_found(
        C,
        "fetch after delete with custom metadata",
        rsm.fetch_log_segment(&finished, 0, None),
    );
}
