//! Losses a replica must never pass off as lag, and heads it must never call current: one
//! object of the newest or of a middle finished segment deleted (its `.log`, manifest, each
//! index) or its `.log` truncated, read by a fresh replica; an old head put back after the
//! writer tiered more, read by a fresh replica and by one that applied the newer head.

use krabka_remote_storage::{IndexType, LOG_SUFFIX, RemoteLogSegmentMetadata, layout};
use krabka_tiering::Error;
use krabka_tiering::replica::{HeadStatus, ReadReplica};

use super::backend::Backend;
use super::util::{append, config, dir_key, open_replica, open_writer, round, value};

const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

/// What is done to one object of a segment.
#[derive(Clone, Copy, Debug)]
enum Damage {
    Delete(&'static str),
    Truncate,
}

/// Every damage the scenario tries: each object deleted, and the `.log` cut short.
fn damages() -> Vec<Damage> {
    let mut out = vec![
        Damage::Delete(LOG_SUFFIX),
        Damage::Truncate,
        Damage::Delete(layout::MANIFEST_SUFFIX),
    ];
    out.extend(
        [
            IndexType::Offset,
            IndexType::Timestamp,
            IndexType::LeaderEpoch,
        ]
        .into_iter()
        .map(|t| Damage::Delete(t.suffix())),
    );
    out
}

/// Reads everything `r` serves in pages of 25, skipping holes: the records (each checked
/// against the writer's value and against the seq order) and the holes met.
fn read_all(r: &ReadReplica) -> (Vec<u64>, Vec<Error>) {
    let (first, last) = (r.first_seq().unwrap(), r.last_seq().unwrap());
    let (mut seqs, mut holes) = (Vec::new(), Vec::new());
    let mut seq = first;
    for _ in 0..10_000 {
        if seq > last {
            return (seqs, holes);
        }
        match r.read(seq, 25) {
            Ok(got) => {
                assert!(!got.is_empty(), "an empty page at seq {seq}");
                for rec in got {
                    assert_eq!(rec.seq, seq, "a record out of seq order");
                    assert_eq!(rec.message.value.as_ref(), value("l", seq).as_bytes());
                    seqs.push(seq);
                    seq += 1;
                }
            }
            Err(e @ Error::Read(krabka_tiering::ReadError::RemoteHole { to, .. })) => {
                seq = to + 1;
                holes.push(e);
            }
            Err(e) => panic!("reading seq {seq}: {e:?}"),
        }
    }
    panic!("the read did not end");
}

/// For the newest and a middle finished segment, each damage in turn (the object restored
/// after): a fresh replica's view still ends at the newest finished seq, a read of the
/// damaged segment's seqs is a [`ReadError::RemoteHole`](krabka_tiering::ReadError::RemoteHole) naming exactly those seqs and the
/// object, and every other record is served (none of the damaged one).
pub fn a_lost_object_of_a_finished_segment_is_named_never_lag(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, "l", 150);
    round(&w);
    let end = w.local_first_seq() - 1;
    drop(w);
    let clean = open_replica(b, b.store.clone(), HOUR);
    let segments: Vec<RemoteLogSegmentMetadata> = clean.segments();
    assert!(segments.len() >= 5, "{} segments", segments.len());
    assert_eq!(clean.last_seq().unwrap(), end);
    let victims = [
        ("newest", segments[segments.len() - 1].clone()),
        ("middle", segments[segments.len() / 2].clone()),
    ];
    for (which, victim) in &victims {
        let (from, to) = (victim.start_offset(), victim.end_offset());
        let id = victim.remote_log_segment_id().id();
        for damage in damages() {
            let suffix = match damage {
                Damage::Delete(s) => s,
                Damage::Truncate => LOG_SUFFIX,
            };
            let key = layout::segment_object_key(&dir_key(), from, id, suffix);
            let bytes = b.store.read_object(&key).unwrap();
            match damage {
                Damage::Delete(_) => b.store.delete_object(&key).unwrap(),
                Damage::Truncate => b.store.put_object(&key, &bytes[..bytes.len() / 3]).unwrap(),
            }
            let r = open_replica(b, b.store.clone(), HOUR);
            let what = format!("{which} segment {from}..={to}, {damage:?}");
            assert_eq!(r.stats().head, HeadStatus::Current, "{what}");
            assert_eq!(
                r.last_seq().unwrap(),
                end,
                "{what}: the view ends before the lost segment"
            );
            assert_eq!(r.missing().len(), 1, "{what}: {:?}", r.missing());
            let (seqs, holes) = read_all(&r);
            let expected: Vec<u64> = (1..=end).filter(|s| *s < from || *s > to).collect();
            assert_eq!(seqs, expected, "{what}");
            match holes.as_slice() {
                [
                    Error::Read(krabka_tiering::ReadError::RemoteHole {
                        from: f,
                        to: t,
                        objects,
                        reason: Some(reason),
                        ..
                    }),
                ] => {
                    assert_eq!((*f, *t), (from, to), "{what}");
                    assert_eq!(objects, &vec![key.clone()], "{what}");
                    assert!(
                        reason.contains("the partition head lists segment")
                            && reason.contains(&key),
                        "{what}: {reason}"
                    );
                }
                other => panic!("{what}: {other:?}"),
            }
            // A read starting in the lost seqs is the same named hole.
            assert!(
                matches!(r.read(to, 5), Err(Error::Read(krabka_tiering::ReadError::RemoteHole { from: f, .. })) if f == from),
                "{what}"
            );
            b.store.put_object(&key, &bytes).unwrap();
        }
    }
}

/// An old head put back after the writer tiered more: a replica opened under it reports the
/// head behind the bucket (never current), serves what it lists and no more; a replica that
/// applied the newer head reports it stale and keeps serving everything finished.
pub fn a_rolled_back_head_is_reported_never_current(b: &Backend) {
    let root = tempfile::tempdir().unwrap();
    let w = open_writer(b, &root.path().join("w"), b.rsm.clone(), config()).unwrap();
    append(&w, "l", 60);
    round(&w);
    let early_end = w.local_first_seq() - 1;
    let key = layout::head_key(&dir_key());
    let early = b.store.read_object(&key).unwrap();
    append(&w, "l", 120);
    round(&w);
    let end = w.local_first_seq() - 1;
    assert!(end > early_end + 20);
    let following = open_replica(b, b.store.clone(), HOUR);
    assert_eq!(following.last_seq().unwrap(), end);
    assert_eq!(following.stats().head, HeadStatus::Current);

    b.store.put_object(&key, &early).unwrap();
    let fresh = open_replica(b, b.store.clone(), HOUR);
    match fresh.stats().head {
        HeadStatus::Behind {
            listed_to,
            bucket_to,
            unlisted,
            ..
        } => {
            assert_eq!((listed_to, bucket_to), (Some(early_end), end));
            assert!(unlisted >= 1);
        }
        other => panic!("a fresh replica under a rolled-back head: {other:?}"),
    }
    assert_eq!(fresh.last_seq().unwrap(), early_end);
    let (seqs, holes) = read_all(&fresh);
    assert_eq!(seqs, (1..=early_end).collect::<Vec<_>>());
    assert!(holes.is_empty(), "{holes:?}");

    following.refresh().unwrap();
    assert_eq!(following.stats().head, HeadStatus::Stale);
    assert_eq!(following.last_seq().unwrap(), end);
    let (seqs, _) = read_all(&following);
    assert_eq!(seqs, (1..=end).collect::<Vec<_>>());
    drop(w);
}
