//! What the replica's segment map refused: each segment the transforming layer could not open
//! for good (its seqs and why) and the keys that were missing, for the messages that name them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageError, layout};
use krabka_remote_transform::{KeyId, Transforming};
use krabka_tiering::partition::open_transformed_segment;
use krabka_tiering::replica::SegmentMap;

use crate::remote;

/// A segment the transforming layer could not open: its seqs and why.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) reason: String,
}

/// What the segment map saw: segments it refused, by the key of their `.log` object, and the
/// ids of the keys that were missing.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    pub(super) segments: BTreeMap<String, Refused>,
    pub(super) missing_keys: Vec<KeyId>,
}

/// The segment map the replica passes every segment through: recovery's
/// [`open_transformed_segment`] (the transforming layer's metadata, the key
/// checked), with each segment it refuses for good remembered in `refusals`.
pub(super) fn segment_map(
    transforming: Arc<Transforming>,
    refusals: Arc<Mutex<Refusals>>,
) -> SegmentMap {
    let missing = Arc::new(Mutex::new(Vec::new()));
    Arc::new(move |m: &RemoteLogSegmentMetadata| {
        let outcome = open_transformed_segment(&transforming, m, &missing);
        if let Err(e) = &outcome
            && !e.is_retriable()
            && let Ok(mut refusals) = refusals.lock()
        {
            let key = layout::log_key(m).unwrap_or_else(|_| m.remote_log_segment_id().to_string());
            refusals.segments.insert(
                key,
                Refused {
                    start: m.start_offset(),
                    end: m.end_offset(),
                    reason: reason(e),
                },
            );
            if let Ok(mut missing) = missing.lock() {
                refusals.missing_keys.append(&mut missing);
            }
        }
        outcome
    })
}

/// `ranges` (by start) with those that touch or overlap joined.
pub(super) fn merged(ranges: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut sorted: Vec<(u64, u64)> = ranges.collect();
    sorted.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (a, b) in sorted {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// What a refused segment's error says, without the generic frame of a backend failure.
pub(super) fn reason(e: &RemoteStorageError) -> String {
    match e {
        RemoteStorageError::Backend { message, .. } => message.clone(),
        other => remote::brief(&other.to_string()).to_owned(),
    }
}
