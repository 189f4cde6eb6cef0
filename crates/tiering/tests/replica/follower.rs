//! A follower: a local log kept equal to the writer's (the test appends the same records to
//! both) that learns from the bucket which of its segments are safely remote.

use std::sync::Arc;
use std::time::Duration;

use krabka_remote_storage::layout;
use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_storage::Log;
use krabka_tiering::replica::ReadReplica;
use krabka_tiering::{Error, TieredLog, TieringConfig};

use super::backend::{Backend, Gate};
use super::util::{
    assert_values, config, dir_key, manifests, messages, open_writer, options, replica_config,
    round, tp, value,
};

/// Reads `log` from its first seq to its last, checking every value.
fn assert_reads_all(log: &TieredLog, what: &str) {
    let (first, last) = (log.first_seq().unwrap(), log.last_seq());
    let mut out = Vec::new();
    let mut seq = first;
    for _ in 0..10_000 {
        if seq > last {
            break;
        }
        let got = log
            .read(seq, 50)
            .unwrap_or_else(|e| panic!("{what}: reading {seq} of {first}..={last}: {e:?}"));
        assert!(!got.is_empty(), "{what}: an empty page at {seq}");
        for r in got {
            seq = r.seq + 1;
            out.push((r.seq, String::from_utf8(r.message.value.to_vec()).unwrap()));
        }
    }
    assert_values(&out, first..=last, |s| value("v", s));
}

/// Appends the same `n` records to the writer and the follower.
fn append_both(w: &TieredLog, f: &TieredLog, n: u64) {
    let next = w.last_seq() + 1;
    assert_eq!(
        f.last_seq() + 1,
        next,
        "the follower is not level with the writer"
    );
    let msgs = messages("v", next, n);
    assert_eq!(w.append_batch(&msgs).unwrap(), next..=next + n - 1);
    assert_eq!(f.append_batch(&msgs).unwrap(), next..=next + n - 1);
}

fn open_follower(b: &Backend, dir: &std::path::Path) -> TieredLog {
    let replica = Arc::new(
        ReadReplica::open(
            b.rsm.clone(),
            b.store.clone(),
            tp(),
            TieringConfig::default(),
            replica_config(Duration::from_secs(3600)),
        )
        .unwrap(),
    );
    let log = Log::open(dir, options()).unwrap();
    TieredLog::open_follower(log, replica, config()).unwrap()
}

/// The follower deletes its local segments below the writer's finished copies, keeps the one
/// whose copy is in flight (and everything after it), reads both tiers, copies nothing; a
/// follower opened on an empty directory continues after the remote end.
pub fn follower_trims_only_what_the_writer_finished(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let gate = Gate::new(b.rsm.clone(), b.store.clone());
    let w = Arc::new(open_writer(b, &root.path().join("w"), gate.clone(), config()).unwrap());
    let f = open_follower(b, &root.path().join("f"));
    assert!(f.is_follower() && !w.is_follower());

    // The writer copies; the follower's round learns it and trims to the same point.
    append_both(&w, &f, 100);
    let before = f.log().segments().len();
    let report = f.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(
        f.log().segments().len(),
        before,
        "trimmed before anything was remote"
    );
    round(&w);
    let copied = w.local_first_seq() - 1;
    assert!(copied > 40);
    let report = f.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.local_segments_deleted > 0);
    assert_eq!(f.local_first_seq(), copied + 1);
    assert_reads_all(&f, "follower");

    // A copy in flight: the follower's round keeps its segment and every later one.
    append_both(&w, &f, 100);
    gate.hold_after(1);
    let copying = {
        let w = w.clone();
        std::thread::spawn(move || w.run_once())
    };
    let held = gate.wait_held();
    let report = f.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    // The writer finished nothing new this round yet (its head is written at the round's
    // end): the follower is where it was, and never past the held copy.
    assert_eq!(f.local_first_seq(), copied + 1);
    assert!(f.local_first_seq() <= held.start_offset());
    assert!(
        f.log()
            .segments()
            .iter()
            .any(|s| s.base_seq == held.start_offset()),
        "the segment whose copy is in flight was deleted"
    );
    assert_reads_all(&f, "follower during the copy");
    gate.release();
    let report = copying.join().unwrap().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.segments_copied >= 2);
    let copied = w.local_first_seq() - 1;
    assert!(copied >= held.end_offset());
    let report = f.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(f.local_first_seq(), copied + 1);
    assert_reads_all(&f, "follower after the copy");
    assert_eq!(f.first_seq().unwrap(), 1);
    assert_eq!(f.last_seq(), w.last_seq());

    // The head lost: the follower's full listing shows the writer's new copies, but it trims
    // only by a current head; the idle writer writes its head again within a few rounds.
    append_both(&w, &f, 60);
    round(&w);
    let copied = w.local_first_seq() - 1;
    let key = layout::head_key(&dir_key());
    RemoteSegmentLister::delete_object(&*b.store, &key).unwrap();
    let kept = f.local_first_seq();
    round(&f);
    assert!(copied >= kept, "the writer copied nothing new");
    assert_eq!(f.local_first_seq(), kept, "trimmed without a current head");
    assert_reads_all(&f, "follower without a head");
    let healed = (0..30).any(|_| {
        round(&w);
        round(&f);
        f.local_first_seq() == copied + 1
    });
    assert!(healed, "the follower never trimmed again");

    // A copy complete in the bucket that the writer has not recorded finished: kept, and an
    // empty follower opened meanwhile starts after what the head lists, not after it.
    append_both(&w, &f, 60);
    gate.hold_uploaded_after(0);
    let copying = {
        let w = w.clone();
        std::thread::spawn(move || w.run_once())
    };
    let held = gate.wait_held();
    assert_eq!(held.start_offset(), copied + 1);
    round(&f);
    assert_eq!(
        f.local_first_seq(),
        copied + 1,
        "trimmed by an unrecorded copy"
    );
    let early = open_follower(b, &root.path().join("early"));
    assert_eq!(
        early.last_seq(),
        copied,
        "an empty follower starts after an unrecorded copy"
    );
    drop(early);
    gate.release();
    let report = copying.join().unwrap().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let copied = w.local_first_seq() - 1;
    assert!(copied >= held.end_offset());
    round(&f);
    assert_eq!(f.local_first_seq(), copied + 1);
    assert_reads_all(&f, "follower after the uploaded copy");

    // The follower copied nothing and wrote nothing to the bucket.
    assert_eq!(f.stats().segments_copied, 0);
    let writer_copies = w.stats().segments_copied;
    assert_eq!(manifests(&*b.store).len() as u64, writer_copies);

    // A follower opened on an empty directory continues after the remote end.
    let empty = open_follower(b, &root.path().join("empty"));
    assert_eq!(empty.last_seq(), copied);
    assert_eq!(empty.log().next_seq(), copied + 1);
    assert_eq!(empty.first_seq().unwrap(), 1);
    assert_reads_all(&empty, "empty follower");
    let msgs = messages("v", copied + 1, 5);
    assert_eq!(empty.append_batch(&msgs).unwrap(), copied + 1..=copied + 5);
    // A local log that does not continue the remote tier is refused.
    let behind = Log::open(root.path().join("behind"), options()).unwrap();
    behind.append_batch(&messages("v", 1, 5)).unwrap();
    let replica = Arc::new(
        ReadReplica::open(
            b.rsm.clone(),
            b.store.clone(),
            tp(),
            TieringConfig::default(),
            replica_config(Duration::from_secs(3600)),
        )
        .unwrap(),
    );
    match TieredLog::open_follower(behind, replica, config()) {
        Err(Error::LocalLogMismatch { .. }) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// The writer's whole-log retention deletes remote segments: the follower takes its retention
/// point from the head and drops the same local records, never more.
pub fn follower_follows_the_writers_retention(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w_config = TieringConfig {
        retention_bytes: Some(10 * 1024),
        ..config()
    };
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), w_config).unwrap();
    // Local retention off: only the writer's retention point trims the follower.
    let replica = Arc::new(
        ReadReplica::open(
            b.rsm.clone(),
            b.store.clone(),
            tp(),
            TieringConfig::default(),
            replica_config(Duration::from_secs(3600)),
        )
        .unwrap(),
    );
    let f_config = TieringConfig {
        local_retention_bytes: None,
        ..config()
    };
    let f = TieredLog::open_follower(
        Log::open(root.path().join("f"), options()).unwrap(),
        replica,
        f_config,
    )
    .unwrap();
    for _ in 0..6 {
        append_both(&w, &f, 50);
        round(&w);
        round(&f);
        assert_eq!(f.first_seq().unwrap(), w.first_seq().unwrap());
        assert_reads_all(&f, "follower under the writer's retention");
    }
    let first = w.first_seq().unwrap();
    assert!(first > 100, "the writer's retention deleted nothing");
    // Its local log holds nothing below the writer's first seq, and everything from there.
    assert!(f.local_first_seq() <= w.local_first_seq());
    assert!(
        f.log()
            .segments()
            .iter()
            .all(|s| s.last_seq >= first || s.active)
    );
    assert_eq!(f.stats().segments_copied, 0);
}
