//! A group's request budget as a rate bound: every request its replicas send (refresh listings,
//! head, epoch and manifest reads, read fetches) takes a token first, so by any time `t` after
//! the group was made at most `rate × t + burst + 1` were sent, however many threads send them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::RemoteStorageManager;
use krabka_remote_storage::layout;
use krabka_tiering::TieringConfig;
use krabka_tiering::replica::{HeadStatus, ReplicaGroup, ReplicaGroupConfig};

use crate::backend::Backend;
use crate::probe::{Probe, assert_records};
use crate::util::{append, config, dir_key, open_writer, replica_config, round, tp};

/// The group's budget.
const RATE: u64 = 20;
/// What the budget lets through at once: 100 ms of its rate.
const BURST: u64 = 2;
/// How long the replica is refreshed and read.
const LOAD: Duration = Duration::from_millis(2500);
/// Reader threads besides the group's refresher.
const READERS: usize = 4;

/// A partition of about thirty segments whose head is gone (every refresh is a full listing:
/// about thirty-two requests) refreshed by a started group with a 1 ms interval and read by
/// four threads: no prefix of the requests the store and backend saw outruns the budget.
pub fn budget_bounds_the_request_rate(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, "b", 720);
    round(&w);
    let end = w.local_first_seq() - 1;
    drop(w);
    b.store
        .delete_object(&layout::head_key(&dir_key()))
        .unwrap();

    let probe = Probe::new(b, Duration::ZERO);
    let mut group_config = ReplicaGroupConfig::default();
    group_config.requests_per_second = Some(RATE);
    let started = Instant::now();
    let group = ReplicaGroup::new(group_config).unwrap();
    let rsm: Arc<dyn RemoteStorageManager> = probe.clone();
    let r = group
        .open(
            rsm,
            probe.clone(),
            tp(),
            TieringConfig::default(),
            replica_config(Duration::from_millis(1)),
        )
        .unwrap();
    let segments = r.stats().segments;
    assert!(segments >= 28, "{segments} segments");
    assert_eq!(r.stats().head, HeadStatus::Missing);
    group.start();
    std::thread::scope(|s| {
        for t in 0..READERS {
            let r = &r;
            s.spawn(move || {
                for i in 0..10_000u64 {
                    if started.elapsed() >= LOAD {
                        break;
                    }
                    let from = 1 + (t as u64 * 151 + i * 97) % end;
                    let got = r
                        .read(from, 3)
                        .unwrap_or_else(|e| panic!("reading seq {from}: {e:?}"));
                    assert!(!got.is_empty(), "an empty read at {from}");
                    assert_records(&got, from, "b");
                }
            });
        }
    });
    group.stop();

    let times = probe.times();
    let calls = probe.calls();
    for (i, t) in times.iter().enumerate() {
        let sent = i as u64 + 1;
        let elapsed = t.duration_since(started).as_secs_f64();
        let allowed = RATE as f64 * elapsed + (BURST + 1) as f64;
        assert!(
            sent as f64 <= allowed,
            "{sent} requests sent {elapsed:.3} s after the group was made, over the {allowed:.1} \
             the budget allows ({calls:?})"
        );
    }
    // Not vacuous: the budget, not the load, set the pace.
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        times.len() as f64 >= RATE as f64 * elapsed * 0.5,
        "{} requests in {elapsed:.1} s ({calls:?})",
        times.len()
    );
    assert!(r.stats().full_listings >= 2, "{:?}", r.stats());
}
