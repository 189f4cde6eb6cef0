//! Batches whose CRC-32C is valid (recomputed over bytes 21 to the end after the edit) but
//! whose header or records lie: a record's varint length, `recordCount` and `lastOffsetDelta`
//! (each alone, and both together so that they agree with each other), `maxTimestamp`, a
//! record's `offsetDelta`. Only reading the records finds them.

use krabka_storage::Compression;

use super::common::{Batch, rewrite_batch};
use super::engine::{Case, Checks, Expect, MODES, PLACES, make_case, run_all, run_with};

/// A zigzag varint at `at` of `buf`: its value and its length in bytes.
fn varint(buf: &[u8], at: usize) -> (i64, usize) {
    let mut raw = 0u64;
    for (i, &b) in buf[at..].iter().enumerate().take(10) {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return (((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1);
        }
    }
    panic!("no varint at {at}");
}

/// The byte position (in the batch) of record `index`'s length varint.
fn record_at(batch: &[u8], index: usize) -> usize {
    let mut at = 61;
    for _ in 0..index {
        let (len, n) = varint(batch, at);
        at += n + len as usize;
    }
    at
}

fn add_i32(batch: &mut [u8], at: usize, delta: i32) {
    let v = i32::from_be_bytes(batch[at..at + 4].try_into().unwrap()) + delta;
    batch[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[derive(Clone, Copy, Debug)]
enum Lie {
    /// The length varint of the 50th record one byte longer (bit 1 of its zigzag value).
    RecordLength,
    /// The `offsetDelta` of the 50th record one more (bit 1 of its zigzag value).
    OffsetDelta,
    /// `recordCount` one less, `lastOffsetDelta` as it was (they disagree).
    RecordCountAlone,
    /// `lastOffsetDelta` one more, `recordCount` as it was (they disagree).
    LastOffsetDeltaAlone,
    /// Both one less: the header claims 99 records, and agrees with itself.
    BothFewer,
    /// Both one more: the header claims 101 records, and agrees with itself.
    BothMore,
    /// `maxTimestamp` one more than the largest record timestamp.
    MaxTimestamp,
}

/// Lies the header checks find before any record is read.
const HEADER_LIES: [Lie; 2] = [Lie::RecordCountAlone, Lie::LastOffsetDeltaAlone];

fn tell(lie: Lie, batch: &mut [u8]) {
    match lie {
        Lie::RecordLength => {
            let at = record_at(batch, 50);
            batch[at] ^= 0x02;
        }
        Lie::OffsetDelta => {
            let at = record_at(batch, 50);
            let (_, len_bytes) = varint(batch, at);
            // length, attributes, timestampDelta, then offsetDelta.
            let ts = at + len_bytes + 1;
            let (_, ts_bytes) = varint(batch, ts);
            batch[ts + ts_bytes] ^= 0x02;
        }
        Lie::RecordCountAlone => add_i32(batch, 57, -1),
        Lie::LastOffsetDeltaAlone => add_i32(batch, 23, 1),
        Lie::BothFewer => {
            add_i32(batch, 57, -1);
            add_i32(batch, 23, -1);
        }
        Lie::BothMore => {
            add_i32(batch, 57, 1);
            add_i32(batch, 23, 1);
        }
        Lie::MaxTimestamp => {
            let v = i64::from_be_bytes(batch[35..43].try_into().unwrap()) + 1;
            batch[35..43].copy_from_slice(&v.to_be_bytes());
        }
    }
}

fn cases(lies: &[Lie]) -> Vec<Case> {
    let mut out = Vec::new();
    for &lie in lies {
        for place in PLACES {
            let damage = move |b: &Batch| {
                rewrite_batch(b, |batch| tell(lie, batch));
                Expect::Bad
            };
            let case = format!("{lie:?} under a valid CRC in {place:?}");
            out.push(make_case(case, place, damage));
        }
    }
    out
}

/// Lies found before any record is read: `recordCount` and `lastOffsetDelta` disagree.
#[test]
fn header_lies_under_a_valid_crc() {
    run_all(cases(&HEADER_LIES));
}

fn found_by_verify_and_open(lies: &[Lie]) {
    run_with(
        cases(lies),
        Checks {
            reads: false,
            modes: &MODES,
            compression: Compression::None,
        },
    );
}

/// Lies found only by reading the records: the scans of `verify_segment` and `Log::open` read
/// every record of a batch before they take it, so they name the batch, refuse it, cut it as a
/// torn tail, or repair it away.
#[test]
fn record_lies_under_a_valid_crc_are_found_by_verify_and_open() {
    found_by_verify_and_open(&[Lie::RecordLength, Lie::OffsetDelta]);
}

/// As above, for lies found after the last record.
#[test]
fn count_and_timestamp_lies_under_a_valid_crc_are_found_by_verify_and_open() {
    found_by_verify_and_open(&[Lie::BothFewer, Lie::BothMore, Lie::MaxTimestamp]);
}

fn through_reads(lies: &[Lie]) {
    run_with(
        cases(lies),
        Checks {
            reads: true,
            modes: &[],
            compression: Compression::None,
        },
    );
}

/// The lies found after the last record, through reads: a read should return exactly the
/// records before the batch (the batch is what the CRC vouches for, what `verify_segment`
/// names and what a repair moves aside), then fail naming its file and byte. But `Log::read`
/// hands out each record as it reads it and checks the batch against them only after its last
/// one: for a `maxTimestamp`, or a `recordCount` and `lastOffsetDelta` that claim one record
/// more, it returns every record of the batch, the error is dropped with them, and the next
/// read starts after the batch, so no read ever fails (reads of 64 from seq 1 serve all 406
/// records); claiming one record less, it serves 99 of them and the next read fails naming the
/// next batch ("batch starts at seq 103, expected 102"). A read whose `max` ends inside a batch does not check the rest of it at all: a
/// point read of seq 3 serves it, and `LogReader::poll(64)` serves seqs 3..=64 of batch
/// 3..=102 before its next call fails.
#[test]
#[ignore = "storage bug: Log::read serves every record of a batch whose check after its last record fails, and never reports the damage"]
fn a_batch_whose_count_or_timestamp_lies_fails_reads_before_it() {
    through_reads(&[Lie::BothFewer, Lie::BothMore, Lie::MaxTimestamp]);
}

/// The record lies through reads: `Log::read` returns the records of the batch before the
/// damaged one (seqs 3..=52 of batch 3..=102), then fails naming the batch. The batch is the
/// unit the CRC vouches for, that `verify_segment` names, that `LogReader::poll` drops whole
/// (when its `max` does not stop inside it) and that a repair moves aside: a read should serve
/// none of it.
#[test]
#[ignore = "storage bug: Log::read serves the records of a batch before its first bad record"]
fn a_batch_with_a_lying_record_serves_none_of_its_records() {
    through_reads(&[Lie::RecordLength, Lie::OffsetDelta]);
}
