//! Reading on over seqs no tier holds: each hole a recovery reported
//! ([`ReadError::RemoteHole`]) or a repair left locally with no remote copy
//! (`krabka_storage::Error::Quarantined`) is named and stepped over, never filled. One rule for
//! the tiered log and the read replica.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use krabka_storage::Record;

use crate::error::{Error, ReadError};

/// Holes one read steps over at most before it returns.
const MAX_HOLES_PER_READ: usize = 1024;

/// Seqs a read stepped over because no tier holds them: a hole a recovery reported, or one a
/// repair left locally that no remote segment covers. Never filled with other records.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostSeqs {
    /// The seqs.
    pub seqs: RangeInclusive<u64>,
    /// Where a repair moved them aside (a local hole), if it was one.
    pub quarantined: Option<PathBuf>,
    /// The objects of the lost remote segment(s) that are missing or damaged, when known.
    pub objects: Vec<String>,
    /// Why they are lost, when more is known than that no tier holds them.
    pub reason: Option<String>,
}

/// What a read over holes read.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct HoleRead {
    /// The records, in seq order (none of a lost seq).
    pub records: Vec<Record>,
    /// The holes stepped over before the records, in order.
    pub lost: Vec<LostSeqs>,
    /// The seq to read from next.
    pub next: u64,
}

/// Reads with `read` from `from_seq`, stepping over each hole it fails on (at most 1,024, then
/// it returns what it has, `next` past the last hole): the first records read, or none.
///
/// # Errors
/// `read`'s error, holes aside.
pub(crate) fn read_over_holes(
    from_seq: u64,
    mut read: impl FnMut(u64) -> Result<Vec<Record>, Error>,
) -> Result<HoleRead, Error> {
    let mut out = HoleRead {
        next: from_seq,
        ..HoleRead::default()
    };
    for _ in 0..MAX_HOLES_PER_READ {
        match read(out.next) {
            Err(Error::Read(ReadError::RemoteHole {
                from,
                to,
                objects,
                reason,
                ..
            })) if to >= out.next => {
                out.lost.push(LostSeqs {
                    // Only what this read steps over: seqs before `next` were delivered.
                    seqs: from.max(out.next)..=to,
                    quarantined: None,
                    objects,
                    reason,
                });
                out.next = to.saturating_add(1);
            }
            Err(Error::Storage { source, .. })
                if matches!(&*source, krabka_storage::Error::Quarantined { last_seq, .. }
                    if *last_seq >= out.next) =>
            {
                if let krabka_storage::Error::Quarantined {
                    first_seq,
                    last_seq,
                    path,
                } = *source
                {
                    out.lost.push(LostSeqs {
                        seqs: first_seq.max(out.next)..=last_seq,
                        quarantined: Some(path),
                        objects: Vec::new(),
                        reason: None,
                    });
                    out.next = last_seq.saturating_add(1);
                }
            }
            Err(e) => return Err(e),
            Ok(records) => {
                if let Some(last) = records.last() {
                    out.next = last.seq.saturating_add(1);
                }
                out.records = records;
                return Ok(out);
            }
        }
    }
    Ok(out)
}
