//! Deleting tail objects no head needs any more (T4 in docs/ARCHITECTURE.md).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use krabka_remote_storage::{Uuid, layout};

use super::part::PartitionTail;
use super::writer::{PartKey, Shared, key_of};

/// Deletes of unneeded tail objects per window at most.
const MAX_DELETES_PER_WINDOW: usize = 64;

/// An object to delete, and the partitions that held records in it.
type Victim = ((Uuid, u64), Vec<Arc<PartitionTail>>);

/// Deletes data objects every partition of which is in finished segments a head listed at
/// least the grace ago. The newest object of the current chain stays (a later writer of the
/// chain's next number must find the chain still going), and so does every object holding a
/// partition this writer no longer serves.
pub(crate) fn collect(shared: &Shared) {
    let now = Instant::now();
    let grace = shared.config.grace;
    let victims = {
        let s = shared.state.lock();
        let by_tp: HashMap<PartKey, &Arc<PartitionTail>> =
            s.parts.iter().map(|p| (key_of(&p.tp), p)).collect();
        let tip = (s.chain, s.next.saturating_sub(1));
        let victims: Vec<Victim> = s
            .objects
            .iter()
            .filter(|(k, _)| **k != tip)
            .filter_map(|(k, entries)| {
                let mut parts = Vec::with_capacity(entries.len());
                for (tp, last) in entries {
                    let p = by_tp.get(tp)?;
                    if !p.covered(*last, grace, now) {
                        return None;
                    }
                    parts.push((*p).clone());
                }
                Some((*k, parts))
            })
            .take(MAX_DELETES_PER_WINDOW)
            .collect();
        victims
    };
    for ((chain_id, number), parts) in victims {
        let key = layout::tail_object_key(chain_id, number);
        match shared.store.delete_object(&key) {
            Ok(()) => {
                shared.state.lock().objects.remove(&(chain_id, number));
                for p in parts {
                    p.forget(chain_id, number);
                }
                shared
                    .counters
                    .objects_deleted
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "deleting an unneeded tail object failed; retried later");
            }
        }
    }
}
