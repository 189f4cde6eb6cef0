//! Which tail objects no head needs any more (T4 in docs/ARCHITECTURE.md): pure policy over
//! what the writer knows; the writer deletes them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::Uuid;

use super::part::{PartKey, PartitionTail, key_of};

/// Deletes of unneeded tail objects per window at most.
pub(crate) const MAX_DELETES_PER_WINDOW: usize = 64;

/// An object to delete, and the partitions that held records in it.
pub(crate) type Victim = ((Uuid, u64), Vec<Arc<PartitionTail>>);

/// The data objects every partition of which is in finished segments a head listed at least
/// `grace` before `now`, at most [`MAX_DELETES_PER_WINDOW`]. `tip`, the newest object of the
/// current chain, stays (a later writer of the chain's next number must find the chain still
/// going), and so does every object holding a partition not in `parts` (this writer no longer
/// serves it).
pub(crate) fn unneeded(
    objects: &BTreeMap<(Uuid, u64), Vec<(PartKey, u64)>>,
    parts: &[Arc<PartitionTail>],
    tip: (Uuid, u64),
    grace: Duration,
    now: Instant,
) -> Vec<Victim> {
    let by_tp: HashMap<PartKey, &Arc<PartitionTail>> =
        parts.iter().map(|p| (key_of(&p.tp), p)).collect();
    objects
        .iter()
        .filter(|(k, _)| **k != tip)
        .filter_map(|(k, entries)| {
            let mut holders = Vec::with_capacity(entries.len());
            for (tp, last) in entries {
                let p = by_tp.get(tp)?;
                if !p.covered(*last, grace, now) {
                    return None;
                }
                holders.push(Arc::clone(p));
            }
            Some((*k, holders))
        })
        .take(MAX_DELETES_PER_WINDOW)
        .collect()
}
