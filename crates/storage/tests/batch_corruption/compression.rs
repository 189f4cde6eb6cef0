//! Compressed batches (every codec is built into the tests): frames made by hand that hold the
//! true records decode exactly; compressed sections that decompress to garbage or are no batch of their codec,
//! a damaged byte in a batch the log compressed itself (CRC recomputed, so only decompression
//! can tell), and decompression bombs: a read fails with a typed error naming the limit, and
//! the process never allocates what the bomb declares.

use std::fs;

use krabka_protocol::Bytes;
use krabka_storage::segment::{MAX_UNCOMPRESSED_BATCH, decode_records, verify_segment};
use krabka_storage::{Compression, Error, Log, Options, RecoveryMode};

use super::codecs::{self, CODECS};
use super::common::*;
use super::engine::{Case, Checks, Expect, MODES, PLACES, Place, make_case, run_with};

/// Replaces the records section of batch `b` with `payload(records)`, which must be as long
/// (so that every batch after it stays where the log's indexes say), and sets its codec; the
/// CRC is recomputed.
fn recompress(b: &Batch, codec: Compression, payload: &dyn Fn(&[u8]) -> Vec<u8>) {
    rewrite_batch(b, |batch| {
        let records = batch.split_off(61);
        let bytes = payload(&records);
        assert_eq!(
            bytes.len(),
            records.len(),
            "{codec}: the payload changes the length"
        );
        batch.extend(bytes);
        let attributes = i16::from_be_bytes([batch[21], batch[22]]) & !7 | i16::from(codec.code());
        batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    });
}

/// A frame of `codec` holding `n` bytes of 0xa7 (garbage as records: a varint that never
/// ends), `n` chosen so that the batch is `len` bytes.
fn garbage_frame(codec: Compression, len: usize) -> Vec<u8> {
    let mut n = len;
    for _ in 0..10 {
        let batch = codecs::stored(codec, &vec![0xa7; n]);
        if batch.len() == len {
            return batch;
        }
        n = (n + len).checked_sub(batch.len()).unwrap();
    }
    panic!("{codec}: no batch of {len} bytes");
}

fn checks(compression: Compression, reads: bool) -> Checks<'static> {
    Checks {
        reads,
        modes: &MODES,
        compression,
    }
}

type Payload = fn(Compression, &[u8]) -> Vec<u8>;

fn cases(what: &str, codecs: &[Compression], payload: Payload) -> Vec<Case> {
    let mut out = Vec::new();
    for &codec in codecs {
        for place in PLACES {
            let damage = move |b: &Batch| {
                recompress(b, codec, &|records| payload(codec, records));
                Expect::Bad
            };
            let case = format!("{codec} {what} in {place:?}");
            out.push(make_case(case, place, damage));
        }
    }
    out
}

/// The frames made by hand are frames of their codecs: holding the true records, a batch of
/// each decodes to exactly them (so the frames of garbage below are bad for what they hold).
#[test]
fn hand_made_frames_of_the_records_decode_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let built = build(tmp.path());
    let b = &built.closed[2];
    let intact = std::fs::read(&b.path).unwrap()[b.position as usize..b.end() as usize].to_vec();
    for codec in CODECS {
        let mut batch = intact.clone();
        let records = batch.split_off(61);
        batch.extend(codecs::stored(codec, &records));
        batch[22] |= codec.code();
        let len = i32::try_from(batch.len() - 12).unwrap();
        batch[8..12].copy_from_slice(&len.to_be_bytes());
        recrc(&mut batch);
        let decoded = decode_records(&Bytes::from(batch), 1, 1000).unwrap();
        assert_exact(&decoded.records, b.seqs(), &codec.to_string());
    }
}

fn garbage(codecs: &[Compression]) {
    let garbage: Payload = |codec, records| garbage_frame(codec, records.len());
    run_with(
        cases("batch of garbage", codecs, garbage),
        checks(Compression::None, true),
    );
}

#[test]
fn gzip_and_snappy_records_that_decompress_to_garbage() {
    garbage(&[Compression::Gzip, Compression::Snappy]);
}

#[test]
fn lz4_and_zstd_records_that_decompress_to_garbage() {
    garbage(&[Compression::Lz4, Compression::Zstd]);
}

#[test]
fn compressed_records_that_are_no_frame_of_their_codec() {
    let junk: Payload = |_, records| vec![0xa7; records.len()];
    run_with(
        cases("junk", &CODECS, junk),
        checks(Compression::None, true),
    );
}

fn flipped(codec: Compression) -> Vec<Case> {
    PLACES
        .iter()
        .map(|&place| {
            let damage = |b: &Batch| {
                rewrite_batch(b, |batch| {
                    let mid = 61 + (batch.len() - 61) / 2;
                    batch[mid] ^= 0x5a;
                });
                Expect::Bad
            };
            let case = format!("{codec}: a flipped byte of the compressed records in {place:?}");
            make_case(case, place, damage)
        })
        .collect()
}

/// A byte in the middle of the compressed section of a batch the log compressed itself, with
/// the batch's CRC recomputed, so that only the codec can tell. Gzip's own CRC-32 fails. Snappy
/// (no checksum) decompresses to records that fail to read from the damage on. (LZ4 and zstd
/// batches as Kafka writes them carry no checksum either: a flipped byte of a literal changes a
/// value that every check then takes as written, which is what a recomputed CRC claims.)
#[test]
fn a_damaged_byte_in_a_batch_the_log_compressed() {
    run_with(flipped(Compression::Gzip), checks(Compression::Gzip, true));
    run_with(
        flipped(Compression::Snappy),
        checks(Compression::Snappy, false),
    );
}

/// The snappy case through reads: the flipped byte decompresses to records that read up to the
/// damage, and `Log::read` serves those records of the bad batch before it fails (see
/// `lies::a_batch_with_a_lying_record_serves_none_of_its_records`).
#[test]
#[ignore = "storage bug: Log::read serves the records of a batch before its first bad record"]
fn a_damaged_byte_in_a_batch_the_log_compressed_with_snappy_stops_reads_before_it() {
    let reads_only = Checks {
        modes: &[],
        ..checks(Compression::Snappy, true)
    };
    run_with(flipped(Compression::Snappy), reads_only);
}

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// Asserts that `text` says the decompressed records passed the limit.
#[track_caller]
fn names_the_limit(text: &str, case: &str) {
    assert!(
        text.contains(&format!("{MAX_UNCOMPRESSED_BATCH}-byte limit")),
        "{case}: {text}"
    );
}

/// The value of the one-record batches the bombs replace: room for the largest bomb.
const ROOM: usize = (4 << 20) + (64 << 10);

/// A log for the bombs: the closed segment holds seqs 1 to 4, the active one 5 to 7, each in a
/// batch of its own; the record of seq `big` has a header of [`ROOM`] bytes.
fn bomb_log(dir: &std::path::Path, big: u64) -> (Log, Vec<Batch>, Vec<Batch>) {
    let room = Options {
        max_bytes: 16 << 20,
        ..opts(RecoveryMode::TolerateTornTail)
    };
    let log = Log::open(dir, room).unwrap();
    for seq in 1..=7 {
        let m = if seq == big {
            msg(seq).with_header("room", vec![0u8; ROOM])
        } else {
            msg(seq)
        };
        assert_eq!(log.append(&m).unwrap(), seq);
        if seq == 4 {
            log.roll().unwrap();
        }
    }
    let segs = log.segments();
    let (closed, active) = (batches(&segs[0].log_path), batches(&segs[1].log_path));
    (log, closed, active)
}

/// A bomb in place of the big batch of seq 3 in the closed segment (one batch follows it), or
/// of seq 7, the last batch of the active one: verify, a decoded read, a read-only view and an open (a repair, and the
/// cut of a torn tail) meet it once or twice each.
fn bomb(codec: Compression, declared: u64, places: &[Place], payload: &dyn Fn() -> Vec<u8>) {
    for &place in places {
        let case = format!("{codec} bomb of {declared} bytes in {place:?}");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (log, b) = match place {
            Place::ClosedMiddle => {
                let (log, closed, _) = bomb_log(&dir, 3);
                (log, closed[2].clone())
            }
            _ => {
                let (log, _, active) = bomb_log(&dir, 7);
                (log, active[2].clone())
            }
        };
        let bomb = payload();
        recompress(&b, codec, &|records| {
            assert!(bomb.len() <= records.len(), "{case}: {} bytes", bomb.len());
            let mut padded = bomb.clone();
            padded.resize(records.len(), 0);
            padded
        });

        let v = verify_segment(&b.path).unwrap();
        let problem = v.problem.unwrap();
        assert_eq!(problem.position, b.position, "{case}");
        names_the_limit(&problem.reason, &case);

        let (recs, err) = read_on(&log, 1);
        assert_exact(&recs, 1..=b.first - 1, &case);
        let err = err.unwrap_or_else(|| panic!("{case}: the read ends"));
        assert!(matches!(err, Error::Corrupt { .. }), "{case}: {err}");
        assert_names(&err, &b.path, b.position, &case);
        names_the_limit(&err.to_string(), &case);

        let (recs, err, _) = poll_on(&dir, 1);
        assert_exact(&recs, 1..=b.first - 1, &case);
        let err = err.unwrap_or_else(|| panic!("{case}: the poll ends"));
        assert!(matches!(err, Error::BadBatch { .. }), "{case}: {err}");
        assert_names(&err, &b.path, b.position, &case);
        names_the_limit(&err.to_string(), &case);
        drop(log);

        if place == Place::ClosedMiddle {
            let log = Log::open(&dir, opts(RecoveryMode::Repair)).unwrap();
            assert!(
                matches!(
                    log.read(3, 1),
                    Err(Error::Quarantined {
                        first_seq: 3,
                        last_seq: 3,
                        ..
                    })
                ),
                "{case}: {}",
                log.recovery_report()
            );
            assert_exact(&log.read(4, 3).unwrap(), 4..=6, &case);
        } else {
            let log = Log::open(&dir, opts(RecoveryMode::TolerateTornTail)).unwrap();
            let cut = log.recovery_report().truncated.clone().unwrap();
            assert_eq!(cut.position, b.position, "{case}");
            names_the_limit(&cut.reason, &case);
            assert_eq!(log.last_seq(), 6, "{case}");
        }
    }
    // What the bombs declare was never allocated: a bomb read through would need `declared`
    // bytes at once (tests run side by side in this process: the bound leaves room for them).
    let peak = peak_rss();
    assert!(
        declared >= 1 << 30 && peak < 512 << 20,
        "{codec}: peak RSS {peak}"
    );
}

const BOTH: [Place; 2] = [Place::ClosedMiddle, Place::ActiveLast];

#[test]
fn a_zstd_bomb_of_4_gib_fails_reads_with_a_typed_error_and_bounded_memory() {
    // 32768 RLE blocks of 128 KiB: 4 GiB from 128 KiB.
    bomb(Compression::Zstd, 4 << 30, &BOTH, &|| {
        codecs::zstd_bomb(32 << 10)
    });
}

#[test]
fn an_lz4_bomb_of_1_gib_fails_reads_with_a_typed_error_and_bounded_memory() {
    // 256 blocks of about 4 MiB: 1 GiB from 4 MiB. (Once: lz4 is slow to decompress without
    // optimizations, and the codec's path is the same in both places.)
    let bomb_of = || codecs::lz4_bomb(256);
    bomb(Compression::Lz4, 1 << 30, &[Place::ClosedMiddle], &bomb_of);
}

#[test]
fn a_snappy_block_declaring_2_gib_fails_reads_with_a_typed_error_and_bounded_memory() {
    bomb(Compression::Snappy, 2 << 30, &BOTH, &|| {
        codecs::snappy_bomb(2 << 30)
    });
}
