//! The header fields Kafka's CRC leaves out, set to values a flip could leave: a `baseOffset`
//! out of sequence, and a `partitionLeaderEpoch` raised from -1 to a positive value (the one
//! damage of a batch header that nothing can detect, and that changes no record).

use std::fs;

use krabka_protocol::batch::{set_base_offset, set_partition_leader_epoch};
use krabka_storage::RecoveryMode;

use super::common::Batch;
use super::engine::{Case, Expect, PLACES, Place, make_case, run_all, run_in};

/// Rewrites the header of `b` in place with `edit` (no CRC to fix: it covers neither field).
fn edit_header(b: &Batch, edit: impl FnOnce(&mut [u8])) {
    let mut bytes = fs::read(&b.path).unwrap();
    edit(&mut bytes[b.position as usize..b.end() as usize]);
    fs::write(&b.path, bytes).unwrap();
}

/// The base offsets a batch is given, from the seqs of the intact batch `b` and the first seq of
/// the batch before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// The first seq of the batch before it (batch 3 claims the seq of batch 2).
    PreviousBatch,
    /// One below its own: it overlaps the batch before by one seq.
    OneBehind,
    /// Ten ahead: a gap of ten seqs, which the bytes after it could hold.
    TenAhead,
    /// A million ahead: more seqs than the rest of the file could hold.
    FarAhead,
    /// Negative.
    Negative,
    /// So high that its last offset passes `i64::MAX`.
    Overflowing,
}

impl Claim {
    fn base(self, b: &Batch, previous: u64) -> i64 {
        let own = b.first as i64;
        match self {
            Claim::PreviousBatch => previous as i64,
            Claim::OneBehind => own - 1,
            Claim::TenAhead => own + 10,
            Claim::FarAhead => own + 1_000_000,
            Claim::Negative => -5,
            Claim::Overflowing => i64::MAX - 5,
        }
    }
}

/// The first seq of the batch before the damaged one of `place`.
fn previous_first(place: Place) -> u64 {
    match place {
        Place::ClosedMiddle => 2,
        Place::ClosedLast => 104,
        Place::ActiveMiddle => 205,
        Place::ActiveLast => 306,
    }
}

fn claim_cases(claims: &[Claim], places: &[Place]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &claim in claims {
        for &place in places {
            let damage = move |b: &Batch| {
                let base = claim.base(b, previous_first(place));
                edit_header(b, |h| set_base_offset(h, base).unwrap());
                Expect::Bad
            };
            let case = format!("baseOffset {claim:?} in {place:?}");
            cases.push(make_case(case, place, damage));
        }
    }
    cases
}

/// Claims a repair gets wrong (see `base_offset_ahead_then_repaired`).
const AHEAD_BUGS: [(Claim, Place); 2] = [
    (Claim::TenAhead, Place::ClosedMiddle),
    (Claim::TenAhead, Place::ActiveMiddle),
];

/// The cases of `claims` in every place, but those a repair gets wrong.
fn claims_in_every_place(claims: &[Claim]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &claim in claims {
        for place in PLACES {
            if !AHEAD_BUGS.contains(&(claim, place)) {
                cases.extend(claim_cases(&[claim], &[place]));
            }
        }
    }
    cases
}

#[test]
fn base_offset_behind_the_expected_seq() {
    run_all(claims_in_every_place(&[
        Claim::PreviousBatch,
        Claim::OneBehind,
        Claim::Negative,
    ]));
}

#[test]
fn base_offset_ahead_of_the_expected_seq() {
    run_all(claims_in_every_place(&[
        Claim::TenAhead,
        Claim::FarAhead,
        Claim::Overflowing,
    ]));
}

fn ahead_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (claim, place) in AHEAD_BUGS {
        cases.extend(claim_cases(&[claim], &[place]));
    }
    cases
}

/// A batch whose baseOffset claims seqs ahead of the expected ones, within what the segment's
/// bytes could hold, followed by intact batches: verify names it, reads stop at it, and open
/// refuses it naming it.
#[test]
fn base_offset_ahead_is_refused_at_open_and_stops_reads() {
    run_in(
        ahead_cases(),
        &[RecoveryMode::TolerateTornTail, RecoveryMode::Strict],
    );
}

/// The same, repaired: the repair takes it for a batch after a gap. It keeps it under the seqs
/// it claims (so reads serve its records under wrong seqs) and moves the intact batches whose
/// seqs it overlaps into the quarantine. Its neighbours say otherwise: the batch before ends
/// right where it should start, and the batch after starts right where it should end.
#[test]
#[ignore = "storage bug: a repair keeps a batch whose baseOffset claims seqs ahead, serving its records under wrong seqs, and quarantines the intact batches after it"]
fn base_offset_ahead_then_repaired() {
    run_in(ahead_cases(), &[RecoveryMode::Repair]);
}

/// `partitionLeaderEpoch` (outside the CRC) turned from -1 into `i32::MAX` (its top bit
/// flipped), in every place: the value is valid, and a log's batches may carry any epochs of -1
/// or more in any order (a log starts again at -1 at every open, see
/// `Log::set_partition_leader_epoch`), so nothing can detect it, in any batch. It is also
/// harmless: the field is in no record. `verify_segment` passes, every open keeps the batch,
/// and every record still reads exactly as written. (A value below -1 is refused: see
/// `header::partition_leader_epoch`, whose flip makes it negative.)
#[test]
fn leader_epoch_made_positive_is_undetectable_and_harmless() {
    let places = [
        Place::ClosedMiddle,
        Place::ClosedLast,
        Place::ActiveMiddle,
        Place::ActiveLast,
    ];
    run_all(
        places
            .iter()
            .map(|&place| {
                let damage = |b: &Batch| {
                    edit_header(b, |h| set_partition_leader_epoch(h, i32::MAX).unwrap());
                    Expect::Unseen
                };
                let case = format!("partitionLeaderEpoch -1 -> i32::MAX in {place:?}");
                make_case(case, place, damage)
            })
            .collect(),
    );
}
