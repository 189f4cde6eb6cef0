//! Step 4 of the [module docs](super): every chosen segment passed through the caller's map
//! (a decorator restoring its own metadata and checking that it can open the segment), and
//! the ones it cannot open reported and left out, their seqs a hole.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::scan::RemoteScan;
use super::{HoleCause, IgnoreReason, IgnoredObject};
use crate::error::RemoteStorageError;
use crate::layout;
use crate::model::RemoteLogSegmentMetadata;

/// Turns a chosen segment's metadata (as its manifest holds it) into the metadata readers
/// need, or says why the segment cannot be used: what [`RemoteScan::map_chosen`] calls.
pub type MapChosen<'a> = &'a (
        dyn Fn(&RemoteLogSegmentMetadata) -> Result<RemoteLogSegmentMetadata, RemoteStorageError>
            + Sync
    );

/// One segment's outcome.
type Mapped = Result<RemoteLogSegmentMetadata, RemoteStorageError>;

impl RemoteScan {
    /// Passes every chosen segment through `map`, `concurrency` at a time (at least 1): a
    /// decorator over the backend that changes what it stores (compression, encryption)
    /// restores its own metadata here, and checks it can open the segment. A segment `map`
    /// refuses with an error that is not retriable is left out and reported under its `.log`
    /// object's key ([`IgnoreReason::Unreadable`], with the error's words); its seqs become a
    /// hole (or, at either end, are no longer in the recovered range), as for any damaged
    /// segment. The lineage chosen is not revisited: a segment that cannot be opened still
    /// superseded the copies it superseded. [`holes`](Self::holes) are recomputed.
    ///
    /// # Errors
    /// The first retriable error of `map` (nothing is recorded then: run recovery again).
    pub fn map_chosen(
        mut self,
        concurrency: usize,
        map: MapChosen<'_>,
    ) -> Result<Self, RemoteStorageError> {
        let chosen = std::mem::take(&mut self.chosen);
        let outcomes = map_all(&chosen, concurrency.max(1), map)?;
        let mut kept = Vec::with_capacity(chosen.len());
        let mut causes = std::mem::take(&mut self.causes);
        for (m, outcome) in chosen.into_iter().zip(outcomes) {
            match outcome {
                Ok(mapped) => kept.push(mapped),
                Err(e) => {
                    let manifest = layout::manifest_key(&m)?;
                    self.rebuilt.retain(|k| *k != manifest);
                    let key = layout::log_key(&m)?;
                    let reason = IgnoreReason::Unreadable(words(&e));
                    causes.push(HoleCause {
                        seqs: m.start_offset()..=m.end_offset(),
                        key: key.clone(),
                        reason: format!(
                            "a whole segment held seqs {}..={}, but {key} {reason}",
                            m.start_offset(),
                            m.end_offset()
                        ),
                    });
                    self.ignored.push(IgnoredObject { key, reason });
                }
            }
        }
        kept.sort_by_key(RemoteLogSegmentMetadata::start_offset);
        self.holes = super::choose::holes_of(&kept, self.claimed_end);
        self.causes = super::used::of_holes(causes, &self.holes);
        self.chosen = kept;
        self.ignored.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(self)
    }
}

/// What `e` says, without the generic frame of a backend failure: a decorator's own error
/// already names the segment and the object.
fn words(e: &RemoteStorageError) -> String {
    match e {
        RemoteStorageError::Backend { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// `map` over `chosen` with `workers` threads, in order; stops at the first retriable error.
fn map_all(
    chosen: &[RemoteLogSegmentMetadata],
    workers: usize,
    map: MapChosen<'_>,
) -> Result<Vec<Mapped>, RemoteStorageError> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let workers = workers.min(chosen.len()).max(1);
    let outcomes: Vec<Result<Vec<(usize, Mapped)>, RemoteStorageError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(m) = chosen.get(i) else { break };
                        match map(m) {
                            Err(e) if e.is_retriable() => {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                            outcome => out.push((i, outcome)),
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(RemoteStorageError::invalid_argument(
                        "a recovery worker thread panicked",
                    ))
                })
            })
            .collect()
    });
    let mut results: Vec<Option<Mapped>> = (0..chosen.len()).map(|_| None).collect();
    for outcome in outcomes {
        for (i, r) in outcome? {
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(r);
            }
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(RemoteStorageError::invalid_argument("not mapped"))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RemoteLogSegmentId, TopicIdPartition};
    use uuid::Uuid;

    fn scan_of(segments: &[(u64, u64)]) -> RemoteScan {
        let tp = TopicIdPartition::new(Uuid::from_u128(1), "t", 0);
        let chosen = segments
            .iter()
            .map(|&(a, b)| {
                RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp.clone()), a, b)
                    .build()
                    .unwrap()
            })
            .collect();
        RemoteScan {
            objects_listed: 0,
            manifests_read: 0,
            chosen,
            superseded: Vec::new(),
            orphans: Vec::new(),
            rebuilt: Vec::new(),
            ignored: Vec::new(),
            epochs: Vec::new(),
            max_epoch: 0,
            holes: vec![31..=40],
            causes: Vec::new(),
            claimed_end: segments.last().map(|s| s.1),
        }
    }

    #[test]
    fn a_segment_the_map_cannot_open_is_reported_and_its_seqs_are_a_hole() {
        let scan = scan_of(&[(1, 10), (11, 20), (21, 30), (41, 50), (51, 60)]);
        let refuse = |m: &RemoteLogSegmentMetadata| match m.start_offset() {
            11 | 51 => Err(RemoteStorageError::Backend {
                operation: "transform".into(),
                location: "x".into(),
                message: "segment x: transform header is corrupt: bad magic".into(),
                source: None,
            }),
            _ => Ok(m.clone()),
        };
        let mapped = scan.map_chosen(2, &refuse).unwrap();
        let starts: Vec<u64> = mapped.chosen.iter().map(|m| m.start_offset()).collect();
        assert_eq!(starts, [1, 21, 41]);
        // The old hole stays; the segment in the middle is a new one; the last one's seqs are
        // a hole at the end: the recovered log continues after them (never reusing them).
        assert_eq!(mapped.holes, [11..=20, 31..=40, 51..=60]);
        assert_eq!(mapped.next_seq(), 61);
        assert_eq!(mapped.ignored.len(), 2);
        for i in &mapped.ignored {
            assert!(i.key.ends_with(".log"), "{}", i.key);
            assert_eq!(
                i.reason.to_string(),
                "cannot be opened: segment x: transform header is corrupt: bad magic"
            );
        }
    }

    #[test]
    fn a_retriable_failure_stops_the_recovery() {
        let scan = scan_of(&[(1, 10), (11, 20)]);
        let flaky = |_: &RemoteLogSegmentMetadata| {
            Err(RemoteStorageError::Retriable {
                operation: "GetObject".into(),
                location: "k".into(),
                message: "503".into(),
                source: None,
            })
        };
        let e = scan.map_chosen(4, &flaky).unwrap_err();
        assert!(e.is_retriable(), "{e}");
    }
}
