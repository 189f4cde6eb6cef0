//! A served segment's object missing while the head is missing too: a read cannot learn
//! cheaply whether retention deleted it, so it refreshes only when the view is due. Fifty reads
//! cost no listing, each fails naming the object, and no read returns a wrong record.

use std::time::Duration;

use krabka_remote_storage::{LOG_SUFFIX, layout};
use krabka_tiering::replica::{HeadStatus, ReadReplica, RefreshOutcome};
use krabka_tiering::{Error, TieringConfig};

use crate::backend::Backend;
use crate::probe::{Probe, assert_records};
use crate::util::{
    append, assert_values, config, dir_key, open_writer, read_replica, replica_config, round, tp,
    value,
};

/// Reads of the missing object.
const READS: usize = 50;
/// The replica's refresh interval: no refresh is due during the reads.
const INTERVAL: Duration = Duration::from_secs(10);

/// The head deleted (the view now from a full listing, head missing), then one served
/// segment's `.log`: fifty reads of a seq in it each fail with the object's not-found, naming
/// the segment, and send no listing and no head read (no refresh is due); the next refresh
/// drops the segment (a hole); every other segment is still served exactly.
pub fn missing_object_under_a_missing_head(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, "m", 120);
    round(&w);
    let end = w.local_first_seq() - 1;
    drop(w);
    let probe = Probe::new(b, Duration::ZERO);
    // Uncached: every read fetches (a cold reader's cost).
    let uncached = TieringConfig {
        cache_bytes: 0,
        prefetch: false,
        ..TieringConfig::default()
    };
    let r = ReadReplica::open(
        b.rsm.clone(),
        probe.clone(),
        tp(),
        uncached,
        replica_config(INTERVAL),
    )
    .unwrap();
    assert_eq!(r.stats().head, HeadStatus::Current);
    b.store
        .delete_object(&layout::head_key(&dir_key()))
        .unwrap();
    assert_eq!(r.refresh().unwrap(), RefreshOutcome::FullListing);
    assert_eq!(r.stats().head, HeadStatus::Missing);
    assert_values(&read_replica(&r, 50), 1..=end, |s| value("m", s));

    let segments = r.segments();
    assert!(segments.len() >= 4, "{} segments", segments.len());
    let victim = &segments[2];
    let id = victim.remote_log_segment_id().id();
    let log_key = layout::segment_object_key(&dir_key(), victim.start_offset(), id, LOG_SUFFIX);
    b.store.delete_object(&log_key).unwrap();

    let (listings, calls) = (probe.count("list_partition"), probe.calls());
    let since = r.stats().since_refresh;
    let seq = victim.start_offset() + 1;
    for i in 0..READS {
        match r.read(seq, 10) {
            Err(e @ Error::Remote { .. }) => {
                assert!(e.is_remote_not_found(), "read {i}: {e:?}");
                match &e {
                    Error::Remote {
                        segment: Some(s), ..
                    } => assert_eq!(s.id(), id, "read {i} names another segment: {e:?}"),
                    other => panic!("read {i} names no segment: {other:?}"),
                }
            }
            Ok(records) => panic!("read {i} of a missing object returned {records:?}"),
            Err(e) => panic!("read {i}: {e:?}"),
        }
    }
    // No refresh was due (the interval is 10 s): not one listing, not one head read. (Were a
    // refresh due, it would list once, drop the segment, and the next reads find a hole.)
    assert!(
        r.stats().since_refresh - since < INTERVAL,
        "the reads took too long"
    );
    assert_eq!(
        (
            probe.count("list_partition") - listings,
            probe.count("read_if_changed") - calls.get("read_if_changed").copied().unwrap_or(0)
        ),
        (0, 0),
        "{READS} reads: {calls:?} -> {:?}",
        probe.calls()
    );
    // The next refresh lists and drops the segment: its seqs are a hole from then on.
    assert_eq!(r.refresh().unwrap(), RefreshOutcome::FullListing);
    match r.read(seq, 10) {
        Err(Error::Read(krabka_tiering::ReadError::RemoteHole { from, to, .. })) => {
            assert_eq!(from..=to, victim.start_offset()..=victim.end_offset());
        }
        other => panic!("{other:?}"),
    }
    // Every other segment still served exactly.
    for m in segments
        .iter()
        .filter(|m| m.remote_log_segment_id().id() != id)
    {
        let n = usize::try_from(m.end_offset() - m.start_offset() + 1).unwrap();
        let got = r.read(m.start_offset(), n).unwrap();
        assert_eq!(got.len(), n, "segment from seq {}", m.start_offset());
        assert_records(&got, m.start_offset(), "m");
    }
}
