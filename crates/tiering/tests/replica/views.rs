//! What a replica's view holds while the bucket changes under it: a copy in flight, a writer
//! fenced and replaced, a segment deleted between a refresh and a read.

use std::sync::Arc;
use std::time::Duration;

use krabka_remote_storage::head::{HeadRead, HeadSegment, read_head};
use krabka_remote_storage::manifest::ManifestState;
use krabka_remote_storage::{
    LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, Uuid, layout,
};
use krabka_tiering::replica::{HeadStatus, RefreshOutcome};
use krabka_tiering::{Error, TieredLog, TieringConfig};

use super::backend::{Backend, Gate};
use super::util::{
    append, assert_values, config, dir_key, eventually, manifests, open_replica, open_writer,
    read_replica, recover_into, round, tp, value,
};

const HOUR: Duration = Duration::from_secs(3600);

/// A replica opened while a copy is in flight (its in-progress manifest in the bucket) does
/// not serve it; it serves it after the copy finished and the next refresh.
pub fn replica_opened_while_a_copy_is_in_flight(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let gate = Gate::new(b.rsm.clone(), b.store.clone());
    let w = Arc::new(open_writer(b, &root.path().join("w"), gate.clone(), config()).unwrap());
    append(&w, "v", 80);
    round(&w);
    let end = w.local_first_seq() - 1;
    assert!(end > 20, "nothing was copied");
    append(&w, "v", 60);
    gate.hold_after(0);
    let copying = {
        let w = w.clone();
        std::thread::spawn(move || w.run_once())
    };
    let held = gate.wait_held();
    assert_eq!(held.start_offset(), end + 1);
    assert!(
        manifests(&*b.store)
            .iter()
            .any(
                |m| m.remote_log_segment_id() == held.remote_log_segment_id()
                    && ManifestState::of(m) == ManifestState::InProgress
            ),
        "the held copy's in-progress manifest is not in the bucket"
    );

    let r = open_replica(b, b.store.clone(), Duration::from_millis(50));
    assert_eq!(r.last_seq().unwrap(), end, "a copy in flight is served");
    assert_values(&read_replica(&r, 37), 1..=end, |s| value("v", s));
    assert_eq!(r.read(end + 1, 10).unwrap(), Vec::new());
    // Refreshes while it is in flight change nothing.
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(r.refresh().unwrap(), RefreshOutcome::Unchanged);
    assert_eq!(r.last_seq().unwrap(), end);

    gate.release();
    let report = copying.join().unwrap().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.segments_copied >= 1);
    let end2 = w.local_first_seq() - 1;
    assert!(end2 >= held.end_offset());
    // Served from the next refresh on (the reads' own, once the interval passed).
    assert!(
        eventually(Duration::from_secs(10), || r.last_seq().unwrap() == end2),
        "the finished copy is not served: last {} of {end2}",
        r.last_seq().unwrap()
    );
    assert_values(&read_replica(&r, 37), 1..=end2, |s| value("v", s));
    assert_eq!(r.stats().head, HeadStatus::Current);

    // A copy complete in the bucket that the writer has not recorded finished (it may still
    // discard it): a replica opened now, whose first view is a full listing, does not serve
    // it either.
    append(&w, "v", 40);
    gate.hold_uploaded_after(0);
    let copying = {
        let w = w.clone();
        std::thread::spawn(move || w.run_once())
    };
    let held = gate.wait_held();
    assert_eq!(held.start_offset(), end2 + 1);
    assert!(
        manifests(&*b.store)
            .iter()
            .any(
                |m| m.remote_log_segment_id() == held.remote_log_segment_id()
                    && ManifestState::of(m) == ManifestState::Complete
            ),
        "the held copy is not complete in the bucket"
    );
    let late = open_replica(b, b.store.clone(), Duration::from_millis(50));
    assert_eq!(
        late.last_seq().unwrap(),
        end2,
        "an unrecorded copy is served"
    );
    assert_values(&read_replica(&late, 37), 1..=end2, |s| value("v", s));
    gate.release();
    round_ok(copying.join().unwrap());
    let end3 = w.local_first_seq() - 1;
    assert!(end3 >= held.end_offset());
    for rep in [&r, &late] {
        assert!(
            eventually(Duration::from_secs(10), || rep.last_seq().unwrap() == end3),
            "the finished copy is not served"
        );
        assert_values(&read_replica(rep, 37), 1..=end3, |s| value("v", s));
    }
}

/// A round's report, which must hold no failure.
fn round_ok(r: Result<krabka_tiering::TieringReport, Error>) {
    let report = r.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
}

/// Writer A is fenced by B's takeover while a copy of A is in flight; the copy lands after
/// B's claim. Replicas never serve A's fenced-out records, and serve B's after a refresh.
pub fn writer_fenced_and_replaced_while_replicas_read(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let gate = Gate::new(b.rsm.clone(), b.store.clone());
    let a = Arc::new(open_writer(b, &root.path().join("a"), gate.clone(), config()).unwrap());
    assert_eq!(a.writer_epoch(), Some(1));
    append(&a, "a", 80);
    round(&a);
    let k = a.local_first_seq() - 1;
    let r = open_replica(b, b.store.clone(), HOUR);
    assert_values(&read_replica(&r, 50), 1..=k, |s| value("a", s));
    let a_head = match read_head(&*b.store, &dir_key(), None).unwrap() {
        HeadRead::Fresh { head, .. } => head,
        other => panic!("{other:?}"),
    };

    // A's next copy passed its epoch check and is in flight when B takes over.
    append(&a, "a", 60);
    gate.hold_after(0);
    let a_thread = {
        let a = a.clone();
        std::thread::spawn(move || a.run_once())
    };
    let held = gate.wait_held();
    assert_eq!((held.start_offset(), held.writer_epoch()), (k + 1, 1));
    // The recovery begins after the held copy did (a copy begun since would stop the claim).
    std::thread::sleep(Duration::from_millis(10));
    let report = recover_into(b, &root.path().join("b"));
    assert_eq!(report.seq_range, Some(1..=k));
    let bl = open_writer(b, &root.path().join("b"), b.rsm.clone(), config()).unwrap();
    assert_eq!(bl.writer_epoch(), Some(2));
    gate.release();
    let a_round = a_thread.join().unwrap();
    eprintln!("{}: A's round after the takeover: {a_round:?}", b.name);
    // The bucket holds a complete copy by epoch 1 of k+1.. (A's records there): A's own, or,
    // when A removed it, the same local segment copied again as A's zombie would.
    let fenced_out = manifests(&*b.store).into_iter().any(|m| {
        m.remote_log_segment_id() == held.remote_log_segment_id()
            && ManifestState::of(&m) == ManifestState::Complete
    });
    let fenced_copy = if fenced_out {
        held.remote_log_segment_id().id()
    } else {
        zombie_copy(b, &a, k + 1)
    };
    let fenced_copy = manifests(&*b.store)
        .into_iter()
        .find(|m| m.remote_log_segment_id().id() == fenced_copy)
        .unwrap();

    // A's late head naming it, as a round of A that passed its check just before the takeover
    // would write it (over B's): the replica, which applied A's heads, learns epoch 2 from it
    // and drops the copy; a replica opened under it drops it by the lineage.
    let key = layout::head_key(&dir_key());
    let b_head = b.store.read_object(&key).unwrap();
    let mut late = a_head.clone();
    late.serial += 1;
    late.segments.push(HeadSegment {
        id: fenced_copy.remote_log_segment_id().id(),
        start_seq: fenced_copy.start_offset(),
        end_seq: fenced_copy.end_offset(),
        writer_epoch: 1,
    });
    b.store.put_object(&key, &late.encode()).unwrap();
    assert!(matches!(
        r.refresh().unwrap(),
        RefreshOutcome::Applied { read: 1 }
    ));
    assert_eq!(r.stats().head, HeadStatus::Current);
    assert_eq!(r.last_seq().unwrap(), k, "a fenced-out copy is served");
    let under_late = open_replica(b, b.store.clone(), HOUR);
    assert_eq!(
        under_late.last_seq().unwrap(),
        k,
        "a fenced-out copy is served"
    );
    assert_values(&read_replica(&under_late, 50), 1..=k, |s| value("a", s));
    b.store.put_object(&key, &b_head).unwrap();

    // The replica never serves it: B's head (written at its open) names epoch 2.
    r.refresh().unwrap();
    assert_eq!(r.last_seq().unwrap(), k, "a fenced-out copy is served");
    assert_values(&read_replica(&r, 50), 1..=k, |s| value("a", s));
    let fresh = open_replica(b, b.store.clone(), HOUR);
    assert_eq!(fresh.last_seq().unwrap(), k, "a fenced-out copy is served");
    let head_epoch = || match read_head(&*b.store, &dir_key(), None).unwrap() {
        HeadRead::Fresh { head, .. } => head.writer_epoch,
        other => panic!("{other:?}"),
    };
    assert_eq!(head_epoch(), 2);

    // B's records, after a refresh, on both.
    append(&bl, "b", 80);
    round(&bl);
    let end = bl.local_first_seq() - 1;
    assert!(end > k + 20);
    let expect = |s: u64| value(if s <= k { "a" } else { "b" }, s);
    for rep in [&r, &fresh] {
        assert!(matches!(
            rep.refresh().unwrap(),
            RefreshOutcome::Applied { .. }
        ));
        assert_eq!(rep.stats().head, HeadStatus::Current);
        assert_values(&read_replica(rep, 50), 1..=end, expect);
    }
    // A stays fenced: its rounds copy nothing and write no head.
    let copied = a.stats().segments_copied;
    assert!(matches!(
        a.run_once(),
        Err(Error::Ownership(
            krabka_tiering::OwnershipError::Fenced { .. }
        ))
    ));
    assert_eq!(a.stats().segments_copied, copied);
    assert_eq!(head_epoch(), 2);
    let late = open_replica(b, b.store.clone(), HOUR);
    assert_values(&read_replica(&late, 50), 1..=end, expect);
}

/// Copies A's local segment starting at `base` to the bucket under a new id as epoch 1: what
/// a zombie that passed its check just before the takeover leaves. The copy's id.
fn zombie_copy(b: &Backend, a: &TieredLog, base: u64) -> Uuid {
    let seg = a
        .log()
        .segments()
        .into_iter()
        .find(|s| s.base_seq == base && !s.active)
        .expect("A's local segment is gone");
    let m = RemoteLogSegmentMetadata::builder(
        RemoteLogSegmentId::generate(tp()),
        seg.base_seq,
        seg.last_seq,
    )
    .segment_size_in_bytes(seg.size)
    .max_timestamp_ms(seg.max_timestamp)
    .writer_epoch(1)
    .build()
    .unwrap();
    let data = LogSegmentData::new(&seg.log_path, &seg.index_path, &seg.time_index_path);
    b.rsm.copy_log_segment_data(&m, &data).unwrap();
    m.remote_log_segment_id().id()
}

/// A segment retention deleted after the replica's last refresh: the read refreshes once and
/// fails with `OutOfRange`, never other data.
pub fn segment_deleted_between_refresh_and_read(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let config = TieringConfig {
        retention_bytes: Some(10 * 1024),
        ..config()
    };
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config).unwrap();
    append(&w, "v", 60);
    round(&w);
    assert_eq!(w.first_seq().unwrap(), 1, "retention deleted too early");
    let r = open_replica(b, b.store.clone(), HOUR);
    let by_time = open_replica(b, b.store.clone(), HOUR);
    let old_last = r.last_seq().unwrap();
    assert!(old_last > 20);

    append(&w, "v", 200);
    let report = w.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.remote_segments_deleted > 0);
    let first = w.first_seq().unwrap();
    assert!(first > old_last, "retention left {first}..");
    // The view still names the deleted segments: no refresh since.
    assert_eq!(r.segments()[0].start_offset(), 1);
    let before = r.stats();
    for seq in [1, old_last - 3] {
        match r.read(seq, 10) {
            Err(Error::Read(krabka_tiering::ReadError::OutOfRange {
                seq: s, first: f, ..
            })) => assert_eq!((s, f), (seq, first)),
            other => panic!("reading deleted seq {seq}: {other:?}"),
        }
    }
    let after = r.stats();
    assert_eq!(after.refreshes, before.refreshes + 1, "{after:?}");
    assert!(after.refresh_requests > before.refresh_requests);
    assert_eq!(after.first_seq, first);
    let end = w.local_first_seq() - 1;
    assert_values(&read_replica(&r, 50), first..=end, |s| value("v", s));
    // A timestamp lookup meeting the deleted segments refreshes and answers from what is
    // served now: the first record at or after the time, never a deleted one, never none.
    assert_eq!(by_time.segments()[0].start_offset(), 1);
    assert_eq!(by_time.seq_for_timestamp(0).unwrap(), Some(first));
    assert_eq!(by_time.stats().first_seq, first);
    let last_ts = by_time.read(end, 1).unwrap()[0].message.timestamp;
    assert_eq!(by_time.seq_for_timestamp(last_ts).unwrap(), Some(end));
    assert_eq!(by_time.seq_for_timestamp(last_ts + 1).unwrap(), None);
}
