//! Every header field of a batch flipped, zeroed, and cut through (the file ends inside it), in
//! a batch of 100 records in the middle of a closed segment, in the middle of the active
//! segment and at the end of the active segment; each case goes through every check of
//! [`engine`](super::engine).
//!
//! `partitionLeaderEpoch` is outside Kafka's CRC, and krabka checks only that it is -1 or more
//! (a log's batches may carry any such epochs, in any order: a log starts again at -1 at every
//! open). Its flip here turns -1 into -91, which every check refuses; zeroed, it is 0, a valid
//! epoch that nothing can detect and that changes no record (see
//! `outside_crc::leader_epoch_made_positive_is_undetectable_and_harmless`).

use std::fs;
use std::ops::Range;

use krabka_storage::{RecoveryMode, testkit};

use super::common::Batch;
use super::engine::{Case, Expect, MODES, PLACES, Place, make_case, run_in};

/// The fields of a batch header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    BaseOffset,
    BatchLength,
    PartitionLeaderEpoch,
    Magic,
    Crc,
    Attributes,
    LastOffsetDelta,
    BaseTimestamp,
    MaxTimestamp,
    ProducerId,
    ProducerEpoch,
    BaseSequence,
    RecordCount,
}

impl Field {
    /// The field's bytes in the batch header (Kafka's v2 layout, big-endian).
    fn bytes(self) -> Range<usize> {
        match self {
            Field::BaseOffset => 0..8,
            Field::BatchLength => 8..12,
            Field::PartitionLeaderEpoch => 12..16,
            Field::Magic => 16..17,
            Field::Crc => 17..21,
            Field::Attributes => 21..23,
            Field::LastOffsetDelta => 23..27,
            Field::BaseTimestamp => 27..35,
            Field::MaxTimestamp => 35..43,
            Field::ProducerId => 43..51,
            Field::ProducerEpoch => 51..53,
            Field::BaseSequence => 53..57,
            Field::RecordCount => 57..61,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// The field's last (least significant) byte XORed with 0x5a.
    Flip,
    /// Every byte of the field set to 0.
    Zero,
    /// The file cut in the middle of the field (before it, for the one-byte magic).
    Cut,
}

fn apply(field: Field, damage: Damage, b: &Batch) -> bool {
    let r = field.bytes();
    let at = |i: usize| b.position + i as u64;
    match damage {
        Damage::Flip => testkit::xor_byte(&b.path, at(r.end - 1), 0x5a).unwrap(),
        Damage::Cut => testkit::set_len(&b.path, at(r.start + r.len() / 2)).unwrap(),
        Damage::Zero => {
            let mut bytes = fs::read(&b.path).unwrap();
            let slot = &mut bytes[at(r.start) as usize..at(r.end) as usize];
            if slot.iter().all(|&x| x == 0) {
                return false;
            }
            slot.fill(0);
            fs::write(&b.path, bytes).unwrap();
        }
    }
    true
}

/// The cases of `field`: each damage in each place.
fn cases(field: Field) -> Vec<(Field, Damage, Place)> {
    let mut out = Vec::new();
    for place in PLACES {
        for damage in [Damage::Flip, Damage::Zero, Damage::Cut] {
            out.push((field, damage, place));
        }
    }
    out
}

fn to_cases(cases: Vec<(Field, Damage, Place)>) -> Vec<Case> {
    cases
        .into_iter()
        .map(|(field, damage, place)| {
            let case = format!("{field:?} {damage:?} in {place:?}");
            let check = move |b: &Batch| expect_of(field, damage, apply(field, damage, b));
            make_case(case, place, check)
        })
        .collect()
}

/// What the damage did: `changed` says whether it changed a byte.
fn expect_of(field: Field, damage: Damage, changed: bool) -> Expect {
    if !changed {
        // Only the attributes of an uncompressed batch, not compacted, are 0 already.
        assert_eq!((field, damage), (Field::Attributes, Damage::Zero));
        return Expect::Unseen;
    }
    if field == Field::PartitionLeaderEpoch && damage == Damage::Zero {
        // -1 becomes 0: a valid epoch (see the module docs).
        return Expect::Unseen;
    }
    Expect::Bad
}

/// Cases a repair gets wrong (a storage bug): the main test of their field opens them in the
/// other modes, the ignored tests below repair them.
const KNOWN_BUGS: [(Field, Damage, Place); 1] =
    [(Field::BaseOffset, Damage::Flip, Place::ClosedMiddle)];

fn run_field(field: Field) {
    let (bugs, good): (Vec<_>, Vec<_>) = cases(field)
        .into_iter()
        .partition(|c| KNOWN_BUGS.contains(c));
    run_in(to_cases(good), &MODES);
    run_in(
        to_cases(bugs),
        &[RecoveryMode::TolerateTornTail, RecoveryMode::Strict],
    );
}

#[test]
fn base_offset() {
    run_field(Field::BaseOffset);
}

/// baseOffset 3 with its low byte flipped is 89: ahead of the expected seq, within what the
/// segment's bytes could hold (see `outside_crc::base_offset_ahead_then_repaired`).
#[test]
#[ignore = "storage bug: a repair keeps a batch whose baseOffset was flipped ahead, serving its records under wrong seqs, and quarantines the intact batches after it"]
fn base_offset_flipped_ahead_then_repaired() {
    run_in(to_cases(vec![KNOWN_BUGS[0]]), &[RecoveryMode::Repair]);
}

#[test]
fn batch_length() {
    run_field(Field::BatchLength);
}

#[test]
fn partition_leader_epoch() {
    run_field(Field::PartitionLeaderEpoch);
}

#[test]
fn magic() {
    run_field(Field::Magic);
}

#[test]
fn crc() {
    run_field(Field::Crc);
}

#[test]
fn attributes() {
    run_field(Field::Attributes);
}

#[test]
fn last_offset_delta() {
    run_field(Field::LastOffsetDelta);
}

#[test]
fn base_timestamp() {
    run_field(Field::BaseTimestamp);
}

#[test]
fn max_timestamp() {
    run_field(Field::MaxTimestamp);
}

#[test]
fn producer_id() {
    run_field(Field::ProducerId);
}

#[test]
fn producer_epoch() {
    run_field(Field::ProducerEpoch);
}

#[test]
fn base_sequence() {
    run_field(Field::BaseSequence);
}

#[test]
fn record_count() {
    run_field(Field::RecordCount);
}
