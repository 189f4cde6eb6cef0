//! The partition head: what refreshes cost (counted at the store, and at the S3 server), and
//! replicas serving exactly the right records while the head is lost, damaged, names another
//! partition or goes back in time.

use std::sync::Arc;
use std::time::Duration;

use krabka_remote_storage::head::PartitionHead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::RemoteSegmentLister;
use krabka_remote_storage::{TopicIdPartition, Uuid, layout};
use krabka_tiering::TieredLog;
use krabka_tiering::replica::{
    HeadStatus, ReadReplica, RefreshOutcome, ReplicaGroup, ReplicaGroupConfig,
};

use super::backend::{Backend, CountingStore, requests_between};
use super::util::{
    append, assert_values, config, dir_key, open_replica, open_writer, read_replica,
    replica_config, round, tp, value,
};

const HOUR: Duration = Duration::from_secs(3600);

/// Requests one call of `f` sends: at the counting store, in the replica's own count, and at
/// the S3 server (all operations; `None` on other backends).
fn cost<T>(
    b: &Backend,
    counting: &CountingStore,
    r: &ReadReplica,
    f: impl FnOnce() -> T,
) -> (
    T,
    u64,
    u64,
    Option<std::collections::BTreeMap<String, usize>>,
) {
    let (c0, s0, h0) = (counting.total(), r.stats(), b.server_requests());
    let out = f();
    let (c1, s1, h1) = (counting.total(), r.stats(), b.server_requests());
    let http = h0.zip(h1).map(|(h0, h1)| requests_between(&h0, &h1));
    (
        out,
        c1 - c0,
        s1.refresh_requests - s0.refresh_requests,
        http,
    )
}

/// An idle refresh: one conditional read of the head, nothing else.
fn assert_idle_is_one_request(b: &Backend, counting: &CountingStore, r: &ReadReplica) {
    let idle = r.stats().idle_refreshes;
    let (outcome, store, own, http) = cost(b, counting, r, || r.refresh().unwrap());
    assert_eq!(outcome, RefreshOutcome::Unchanged);
    assert_eq!(
        (store, own),
        (1, 1),
        "an idle refresh: {:?}",
        counting.calls()
    );
    if let Some(http) = http {
        assert_eq!(http, [("GetObject".to_owned(), 1)].into(), "HTTP requests");
    }
    assert_eq!(r.stats().idle_refreshes, idle + 1);
}

/// An idle refresh costs one request; a head naming `k` new segments costs the head, the next
/// epoch record and `k` manifests. Counted at a counting store, in the replica's stats, and as
/// HTTP requests at the in-process S3 server.
pub fn refresh_costs(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, "v", 80);
    round(&w);
    let counting = CountingStore::new(b.store.clone());
    let r = open_replica(b, counting.clone(), HOUR);
    for _ in 0..3 {
        assert_idle_is_one_request(b, &counting, &r);
    }
    // The writer's rounds with nothing new write no head (they read it back now and then):
    // still idle.
    let before = b.server_requests();
    for _ in 0..25 {
        assert_eq!(round(&w).segments_copied, 0);
    }
    if let Some((before, after)) = before.zip(b.server_requests()) {
        let sent = requests_between(&before, &after);
        assert!(
            !sent.contains_key("PutObject"),
            "idle rounds wrote: {sent:?}"
        );
    }
    assert_idle_is_one_request(b, &counting, &r);

    append(&w, "v", 70);
    let report = w.run_once().unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let k = report.segments_copied;
    assert!(k >= 2, "{report:?}");
    let calls = counting.calls();
    let (outcome, store, own, http) = cost(b, &counting, &r, || r.refresh().unwrap());
    assert_eq!(
        outcome,
        RefreshOutcome::Applied {
            read: usize::try_from(k).unwrap()
        }
    );
    let after = counting.calls();
    assert_eq!((store, own), (k + 2, k + 2), "{calls:?} -> {after:?}");
    assert_eq!(after["read_if_changed"] - calls["read_if_changed"], 1);
    assert_eq!(
        after["read_object"] - calls.get("read_object").copied().unwrap_or(0),
        k + 1
    );
    if let Some(http) = http {
        let gets = usize::try_from(k + 2).unwrap();
        assert_eq!(
            http,
            [("GetObject".to_owned(), gets)].into(),
            "HTTP requests"
        );
    }
    assert_values(&read_replica(&r, 50), 1..=w.local_first_seq() - 1, |s| {
        value("v", s)
    });
    assert_idle_is_one_request(b, &counting, &r);

    // A read once the interval passed refreshes first: one request when idle.
    let quick = ReadReplica::open(
        b.rsm.clone(),
        counting.clone(),
        tp(),
        krabka_tiering::TieringConfig::default(),
        replica_config(Duration::from_millis(20)),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let (last, store, own, _) = cost(b, &counting, &quick, || quick.last_seq().unwrap());
    assert_eq!(last, w.local_first_seq() - 1);
    assert_eq!((store, own), (1, 1));
    assert_eq!(quick.stats().idle_refreshes, 1);

    // A group refreshes the replicas that are due, each idle one with one request.
    let group = ReplicaGroup::new(ReplicaGroupConfig::default()).unwrap();
    let member = group
        .open(
            b.rsm.clone(),
            counting.clone(),
            tp(),
            krabka_tiering::TieringConfig::default(),
            replica_config(Duration::from_millis(20)),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let (done, store, own, _) = cost(b, &counting, &member, || group.refresh_due());
    assert_eq!((done.refreshed, done.failed), (1, 0));
    assert_eq!((store, own), (1, 1));
}

/// How the test spoils the head.
enum Spoil {
    Delete,
    FlipByte,
    Garbage,
    Truncate,
    OtherPartition,
    /// A well-formed head of the partition by an epoch no record holds.
    UnknownEpoch,
    /// A well-formed head of the writer's epoch by another incarnation.
    OtherIncarnation,
    /// An older head put back.
    Stale(Vec<u8>),
}

/// The head lost, damaged, naming another partition or writer, or older than one applied:
/// the replica serves exactly the right records, says what it found, and once the writer's
/// next round rewrites the head it is current again with one-request idle refreshes.
pub fn head_lost_or_damaged(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, "v", 80);
    round(&w);
    let key = layout::head_key(&dir_key());
    let old_head = b.store.read_object(&key).unwrap();
    let old_end = PartitionHead::decode(&old_head, &key)
        .unwrap()
        .end_seq()
        .unwrap();
    append(&w, "v", 40);
    round(&w);
    let counting = CountingStore::new(b.store.clone());
    let r = open_replica(b, counting.clone(), HOUR);
    assert_eq!(r.stats().head, HeadStatus::Current);
    assert_idle_is_one_request(b, &counting, &r);
    let store: Arc<dyn OwnershipStore> = b.store.clone();
    let all = |r: &ReadReplica, w: &TieredLog, what: &str| {
        let end = w.local_first_seq() - 1;
        assert_eq!(r.last_seq().unwrap(), end, "{what} head");
        assert_values(&read_replica(r, 50), 1..=end, |s| value("v", s));
    };

    for spoil in [
        Spoil::Delete,
        Spoil::FlipByte,
        Spoil::Garbage,
        Spoil::Truncate,
        Spoil::OtherPartition,
        Spoil::UnknownEpoch,
        Spoil::OtherIncarnation,
        Spoil::Stale(old_head),
    ] {
        let current = store.read_object(&key).unwrap();
        let decoded = PartitionHead::decode(&current, &key).unwrap();
        let (what, bytes) = match &spoil {
            Spoil::Delete => ("lost", None),
            Spoil::FlipByte => {
                let mut b = current.clone();
                b[40] ^= 0x10;
                ("a flipped byte", Some(b))
            }
            Spoil::Garbage => ("garbage", Some(b"not a head at all".to_vec())),
            Spoil::Truncate => ("truncated", Some(current[..current.len() - 7].to_vec())),
            Spoil::OtherPartition => {
                let mut h = decoded.clone();
                h.partition = TopicIdPartition::new(Uuid::from_u128(7), "orders", 0);
                ("another partition's", Some(h.encode()))
            }
            Spoil::UnknownEpoch => {
                let mut h = decoded.clone();
                h.writer_epoch += 5;
                ("an unknown epoch's", Some(h.encode()))
            }
            Spoil::OtherIncarnation => {
                let mut h = decoded.clone();
                h.incarnation = Uuid::new_v4();
                h.serial += 1;
                ("another incarnation's", Some(h.encode()))
            }
            Spoil::Stale(old) => ("an older", Some(old.clone())),
        };
        match bytes {
            None => RemoteSegmentLister::delete_object(&*store, &key).unwrap(),
            Some(bytes) => store.put_object(&key, &bytes).unwrap(),
        }
        let full = r.stats().full_listings;
        assert_eq!(
            r.refresh().unwrap(),
            RefreshOutcome::FullListing,
            "{what} head"
        );
        let status = r.stats().head;
        match &spoil {
            Spoil::Delete => assert_eq!(status, HeadStatus::Missing),
            Spoil::Stale(_) => assert_eq!(status, HeadStatus::Stale),
            // Not the writer's: taken for a late head of a fenced claimant, or for damage.
            Spoil::OtherIncarnation => assert!(
                matches!(status, HeadStatus::Stale | HeadStatus::Damaged(_)),
                "{what}: {status:?}"
            ),
            _ => assert!(
                matches!(status, HeadStatus::Damaged(_)),
                "{what}: {status:?}"
            ),
        }
        all(&r, &w, what);
        if status == HeadStatus::Stale {
            // A stale head is read again only when it changes.
            assert_idle_is_one_request(b, &counting, &r);
            assert_eq!(r.stats().full_listings, full + 1);
        } else {
            // Every refresh lists in full until the writer writes the head again.
            assert_eq!(
                r.refresh().unwrap(),
                RefreshOutcome::FullListing,
                "{what} head"
            );
            assert_eq!(r.stats().full_listings, full + 2);
        }
        all(&r, &w, what);
        // A replica opened now serves the right records too: all of them, or, under an
        // older head it cannot tell from the current one, what that head lists.
        let fresh = open_replica(b, b.store.clone(), HOUR);
        let end = w.local_first_seq() - 1;
        let last = fresh.last_seq().unwrap();
        assert!(
            last == end || (matches!(spoil, Spoil::Stale(_)) && last == old_end),
            "{what} head: a new replica serves ..={last}"
        );
        assert_values(&read_replica(&fresh, 50), 1..=last, |s| value("v", s));
        // An idle writer finds its head is not in the bucket within a few rounds and writes
        // it again: current again, idle refreshes cheap.
        let rounds = idle_rounds_until_rewritten(&w, &*store, &decoded);
        assert!(
            rounds <= 12,
            "{what} head: written again after {rounds} idle rounds"
        );
        assert_eq!(
            r.refresh().unwrap(),
            RefreshOutcome::Applied { read: 0 },
            "{what} head, then the writer's again"
        );
        assert_eq!(r.stats().head, HeadStatus::Current);
        assert_idle_is_one_request(b, &counting, &r);
        // The writer's next round with new records: applied as ever.
        append(&w, "v", 30);
        round(&w);
        assert!(
            matches!(r.refresh().unwrap(), RefreshOutcome::Applied { .. }),
            "{what} head, then the writer's head"
        );
        assert_eq!(r.stats().head, HeadStatus::Current);
        all(&r, &w, what);
        assert_idle_is_one_request(b, &counting, &r);
        fresh.refresh().unwrap();
        all(&fresh, &w, what);
    }
}

/// Runs idle rounds of `w` until the head in the bucket is again one `w` wrote after `was`;
/// how many it took (at most 30).
fn idle_rounds_until_rewritten(
    w: &TieredLog,
    store: &dyn OwnershipStore,
    was: &PartitionHead,
) -> u32 {
    let key = layout::head_key(&dir_key());
    for n in 1..=30 {
        let report = round(w);
        assert_eq!(report.segments_copied, 0);
        let Ok(bytes) = store.read_object(&key) else {
            continue;
        };
        if let Ok(h) = PartitionHead::decode(&bytes, &key)
            && h.partition == tp()
            && (h.writer_epoch, h.incarnation) == (was.writer_epoch, was.incarnation)
            && h.serial > was.serial
        {
            assert_eq!(h.segments, was.segments);
            return n;
        }
    }
    panic!("an idle writer never wrote its head again");
}

/// The bucket unreachable (the S3 server stopped): a refresh fails with a retriable
/// `ReplicaRefresh` naming the head, the view is kept (reads the cache holds still answer, a
/// read whose refresh is due is served the old view), and once the bucket is back the next
/// refresh is an idle one.
pub fn bucket_unreachable(mut b: Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(&b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, "v", 80);
    round(&w);
    let end = w.local_first_seq() - 1;
    let r = open_replica(&b, b.store.clone(), HOUR);
    let quick = open_replica(&b, b.store.clone(), Duration::from_millis(20));
    assert_values(&read_replica(&r, 50), 1..=end, |s| value("v", s));
    let interval = Duration::from_millis(300);
    let group = ReplicaGroup::new(ReplicaGroupConfig::default()).unwrap();
    let member = group
        .open(
            b.rsm.clone(),
            b.store.clone(),
            tp(),
            krabka_tiering::TieringConfig::default(),
            replica_config(interval),
        )
        .unwrap();

    b.server.as_mut().unwrap().stop();
    // A group asks a failing bucket again once an interval, not at every pass.
    std::thread::sleep(interval);
    let done = group.refresh_due();
    assert_eq!((done.refreshed, done.failed), (0, 1));
    let done = group.refresh_due();
    assert_eq!((done.refreshed, done.failed), (0, 0), "asked again at once");
    assert_eq!(member.stats().refresh_failures, 1);
    match r.refresh() {
        Err(krabka_tiering::Error::Read(krabka_tiering::ReadError::ReplicaRefresh {
            key,
            source,
            ..
        })) => {
            assert_eq!(key, layout::head_key(&dir_key()));
            assert!(source.is_retriable(), "{source:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.stats().refresh_failures, 1);
    assert_values(&read_replica(&r, 50), 1..=end, |s| value("v", s));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(quick.last_seq().unwrap(), end);
    assert_eq!(quick.stats().refresh_failures, 1);

    assert!(
        b.server.as_mut().unwrap().restart().unwrap(),
        "the port changed"
    );
    assert_eq!(r.refresh().unwrap(), RefreshOutcome::Unchanged);
    std::thread::sleep(interval);
    let done = group.refresh_due();
    assert_eq!((done.refreshed, done.failed), (1, 0));
    assert_eq!(member.last_seq().unwrap(), end);
    assert_eq!(r.stats().head, HeadStatus::Current);
    append(&w, "v", 40);
    round(&w);
    assert!(matches!(
        r.refresh().unwrap(),
        RefreshOutcome::Applied { .. }
    ));
    assert_values(&read_replica(&r, 50), 1..=w.local_first_seq() - 1, |s| {
        value("v", s)
    });
}
