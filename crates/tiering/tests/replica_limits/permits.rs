//! A group's refresh permits: however many replicas and reader threads, at most
//! `refresh_threads` refreshes (so head reads) run at once: the group's refresher, opens and
//! reads on any thread together. Without a group nothing bounds them (the check can fail).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krabka_remote_storage::TopicIdPartition;
use krabka_tiering::TieringConfig;
use krabka_tiering::replica::{ReadReplica, ReplicaGroup, ReplicaGroupConfig};

use crate::backend::Backend;
use crate::probe::{Probe, assert_records, open_writer_of, partition};
use crate::util::{append, replica_config, round};

/// Partitions, one replica each.
const PARTITIONS: i32 = 8;
/// Reader threads.
const READERS: usize = 16;
/// Refreshes a group lets run at once.
const PERMITS: usize = 2;
/// How long the readers read.
const LOAD: Duration = Duration::from_millis(600);
/// How long each head read is held at the store: long enough for refreshes to overlap.
const HEAD_DELAY: Duration = Duration::from_millis(4);
/// The refresh interval: every call finds its view due.
const INTERVAL: Duration = Duration::from_millis(1);

/// Writes the partitions (a few segments each); their last finished seqs.
fn write_partitions(b: &Backend) -> Vec<(TopicIdPartition, u64)> {
    let root = tempfile::tempdir().unwrap();
    (0..PARTITIONS)
        .map(|n| {
            let tp = partition("permits", n);
            let w = open_writer_of(b, &root.path().join(format!("w{n}")), &tp);
            append(&w, "p", 70);
            round(&w);
            (tp, w.local_first_seq() - 1)
        })
        .collect()
}

/// `READERS` threads reading (and asking the last seq of) the replicas for [`LOAD`], checking
/// every record; the reads and refreshes they made.
fn read_under_load(replicas: &[(Arc<ReadReplica>, u64)]) -> u64 {
    let reads = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..READERS {
            let reads = &reads;
            s.spawn(move || {
                for i in 0..100_000usize {
                    if started.elapsed() >= LOAD {
                        break;
                    }
                    let (r, end) = &replicas[(t + i) % replicas.len()];
                    let last = r.last_seq().unwrap();
                    assert_eq!(last, *end);
                    let from = 1 + (t * 7 + i * 13) as u64 % *end;
                    let got = r
                        .read(from, 5)
                        .unwrap_or_else(|e| panic!("reading seq {from}: {e:?}"));
                    assert!(!got.is_empty(), "an empty read at {from}");
                    assert_records(&got, from, "p");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    reads.into_inner()
}

/// Eight replicas of one group with two permits, opened at once and read by sixteen threads
/// while the group's refresher runs: never more than two head reads at once. Eight standalone
/// replicas under the same load: more.
pub fn group_permits_bound_concurrent_refreshes(b: &Backend) {
    let partitions = write_partitions(b);

    let probe = Probe::new(b, HEAD_DELAY);
    let mut config = ReplicaGroupConfig::default();
    config.refresh_threads = PERMITS;
    let group = ReplicaGroup::new(config).unwrap();
    // Opened from as many threads at once: each first view is a refresh too.
    let replicas: Vec<(Arc<ReadReplica>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = partitions
            .iter()
            .map(|(tp, end)| {
                let (group, probe) = (&group, probe.clone());
                s.spawn(move || {
                    let r = group
                        .open(
                            b.rsm.clone(),
                            probe,
                            tp.clone(),
                            TieringConfig::default(),
                            replica_config(INTERVAL),
                        )
                        .unwrap();
                    (r, *end)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    group.start();
    let reads = read_under_load(&replicas);
    group.stop();
    let heads = probe.count("read_if_changed");
    let max = probe.max_concurrent_head_reads();
    assert!(
        max <= PERMITS,
        "{max} head reads at once in a group of {PERMITS} permits ({heads} head reads, {reads} reads)"
    );
    // Not vacuous: the refreshes overlapped up to the bound, and there were many.
    assert_eq!(max, PERMITS, "{heads} head reads, {reads} reads");
    assert!(heads >= 10, "only {heads} head reads");
    drop(replicas);

    let probe = Probe::new(b, HEAD_DELAY);
    let standalone: Vec<(Arc<ReadReplica>, u64)> = partitions
        .iter()
        .map(|(tp, end)| {
            let r = ReadReplica::open(
                b.rsm.clone(),
                probe.clone(),
                tp.clone(),
                TieringConfig::default(),
                replica_config(INTERVAL),
            )
            .unwrap();
            (Arc::new(r), *end)
        })
        .collect();
    read_under_load(&standalone);
    let max = probe.max_concurrent_head_reads();
    assert!(
        max > PERMITS,
        "standalone replicas never refreshed more than {PERMITS} at once ({max}): the check \
         cannot tell"
    );
}
