//! The segment age bound: `Options::roll_after` at appends, `Log::roll_if_older` on a quiet log,
//! `Log::active_segment_age`, and the age of an active segment found at open.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use krabka_protocol::Message;
use krabka_protocol::batch::{BatchSpec, RecordSpec, encode_batch};
use krabka_storage::{Error, Log, MAX_ROLL_AFTER, MIN_ROLL_AFTER, Options, SyncPolicy};

fn opts(roll_after: Option<Duration>) -> Options {
    Options {
        sync: SyncPolicy::Never,
        roll_after,
        ..Options::default()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn value(seq: u64) -> String {
    format!("value-{seq}")
}

fn append_values(log: &Log, n: u64) {
    for _ in 0..n {
        let seq = log.next_seq();
        assert_eq!(log.append(&Message::new(value(seq))).unwrap(), seq);
    }
}

/// Every record from 1 to `last` reads back with its value, in seq order, and the segments
/// tile the seqs without a gap.
fn check_contiguous(log: &Log, last: u64) {
    assert_eq!((log.first_seq(), log.last_seq()), (1, last));
    let recs = log.read(1, usize::MAX).unwrap();
    assert_eq!(recs.len() as u64, last);
    for (i, r) in recs.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(r.seq, seq);
        assert_eq!(r.message.value, value(seq).as_bytes());
    }
    let segs = log.segments();
    for pair in segs.windows(2) {
        assert_eq!(pair[1].base_seq, pair[0].last_seq + 1, "{segs:?}");
    }
}

#[test]
fn an_append_after_the_age_bound_rolls_first_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bound = Duration::from_millis(200);
    let log = Log::open(dir.path(), opts(Some(bound))).unwrap();
    let started = Instant::now();
    append_values(&log, 3);
    if started.elapsed() < bound {
        assert_eq!(log.segments().len(), 1, "rolled before the bound");
    }
    std::thread::sleep(bound + Duration::from_millis(20));
    // A batch after the bound goes whole into a new segment.
    let batch: Vec<Message> = (4..=5).map(|s| Message::new(value(s))).collect();
    assert_eq!(log.append_batch(&batch).unwrap(), 4..=5);
    let segs = log.segments();
    assert_eq!(segs.len(), 2);
    assert_eq!((segs[0].base_seq, segs[0].last_seq), (1, 3));
    assert_eq!((segs[1].base_seq, segs[1].last_seq), (4, 5));
    assert_eq!(log.stats().rolls, 1);
    // A raw batch after the bound rolls too.
    std::thread::sleep(bound + Duration::from_millis(20));
    let raw = encode_batch(
        &BatchSpec::new(0),
        &[RecordSpec::new(now_ms(), value(6).into_bytes())],
    )
    .unwrap();
    assert_eq!(log.append_raw_batch(&raw).unwrap(), 6..=6);
    assert_eq!(log.segments().len(), 3);
    assert_eq!(log.segments()[2].base_seq, 6);
    check_contiguous(&log, 6);
    log.close().unwrap();
    let log = Log::open(dir.path(), opts(None)).unwrap();
    check_contiguous(&log, 6);
}

#[test]
fn roll_if_older_rolls_a_quiet_log_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(None)).unwrap();
    append_values(&log, 3);
    assert!(!log.roll_if_older(Duration::from_secs(3600)).unwrap());
    std::thread::sleep(Duration::from_millis(30));
    assert!(log.active_segment_age().unwrap() >= Duration::from_millis(30));
    assert!(log.roll_if_older(Duration::from_millis(20)).unwrap());
    for _ in 0..3 {
        assert!(!log.roll_if_older(Duration::ZERO).unwrap());
    }
    assert_eq!(log.segments().len(), 2);
    assert_eq!(log.stats().rolls, 1);
    append_values(&log, 2);
    let segs = log.segments();
    assert_eq!((segs[1].base_seq, segs[1].last_seq), (4, 5));
    check_contiguous(&log, 5);
}

#[test]
fn an_empty_active_segment_never_rolls_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(Some(MIN_ROLL_AFTER))).unwrap();
    std::thread::sleep(MIN_ROLL_AFTER * 2);
    assert_eq!(log.active_segment_age(), None);
    assert!(!log.roll_if_older(Duration::ZERO).unwrap());
    // The first append goes into the empty active segment: nothing to roll before it.
    append_values(&log, 1);
    assert_eq!(log.segments().len(), 1);
    log.roll().unwrap();
    std::thread::sleep(MIN_ROLL_AFTER * 2);
    assert_eq!(log.active_segment_age(), None);
    assert!(!log.roll_if_older(Duration::ZERO).unwrap());
    log.close().unwrap();
    // Reopened, the empty active segment has no age either, however old its file.
    let log = Log::open(dir.path(), opts(Some(MIN_ROLL_AFTER))).unwrap();
    assert_eq!(log.active_segment_age(), None);
    assert!(!log.roll_if_older(Duration::ZERO).unwrap());
    append_values(&log, 1);
    assert_eq!(log.segments().len(), 2);
    assert_eq!(log.stats().rolls, 0);
    check_contiguous(&log, 2);
}

#[test]
fn a_first_batch_stamped_long_ago_rolls_at_the_first_append_after_reopen() {
    for clean_close in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let hour = Duration::from_secs(3600);
        let log = Log::open(dir.path(), opts(Some(hour))).unwrap();
        let two_hours_ago = now_ms() - 2 * 3600 * 1000;
        for seq in 1..=3 {
            let m = Message::new(value(seq)).with_timestamp(two_hours_ago);
            assert_eq!(log.append(&m).unwrap(), seq);
        }
        // In this process the age counts from the first append, not the timestamps.
        assert!(log.active_segment_age().unwrap() < hour);
        if clean_close {
            log.close().unwrap();
        } else {
            drop(log);
        }
        let log = Log::open(dir.path(), opts(Some(hour))).unwrap();
        let age = log.active_segment_age().unwrap();
        assert!(age >= 2 * hour - Duration::from_secs(60), "{age:?}");
        append_values(&log, 1);
        let segs = log.segments();
        assert_eq!(segs.len(), 2, "clean close {clean_close}");
        assert_eq!((segs[1].base_seq, segs[1].last_seq), (4, 4));
        check_contiguous(&log, 4);
    }
}

#[test]
fn a_raw_batch_stamped_long_ago_gives_the_reopened_segment_its_age() {
    let dir = tempfile::tempdir().unwrap();
    let hour = Duration::from_secs(3600);
    let log = Log::open(dir.path(), opts(Some(hour))).unwrap();
    let three_hours_ago = now_ms() - 3 * 3600 * 1000;
    let raw = encode_batch(
        &BatchSpec::new(0),
        &[
            RecordSpec::new(three_hours_ago, value(1).into_bytes()),
            RecordSpec::new(three_hours_ago + 1, value(2).into_bytes()),
        ],
    )
    .unwrap();
    assert_eq!(log.append_raw_batch(&raw).unwrap(), 1..=2);
    log.close().unwrap();
    let log = Log::open(dir.path(), opts(None)).unwrap();
    assert!(log.active_segment_age().unwrap() >= 3 * hour - Duration::from_secs(60));
    // Without `roll_after` an append never rolls by age; `roll_if_older` does.
    append_values(&log, 1);
    assert_eq!(log.segments().len(), 1);
    assert!(log.roll_if_older(hour).unwrap());
    assert_eq!(log.segments().len(), 2);
    check_contiguous(&log, 3);
}

#[test]
fn a_fresh_segment_keeps_a_small_age_across_a_reopen_and_a_quiet_one_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let bound = Duration::from_millis(150);
    let log = Log::open(dir.path(), opts(Some(bound))).unwrap();
    append_values(&log, 2);
    log.close().unwrap();
    // Reopened at once: the age comes from the file (its birth time, the first batch's
    // timestamp), which is recent: not taken for an ancient segment.
    let log = Log::open(dir.path(), opts(Some(Duration::from_secs(3600)))).unwrap();
    let age = log.active_segment_age().unwrap();
    assert!(age < Duration::from_secs(60), "{age:?}");
    append_values(&log, 1);
    assert_eq!(log.segments().len(), 1);
    log.close().unwrap();
    // Left alone longer than the bound, the segment rolls at the first append after reopen.
    std::thread::sleep(bound + Duration::from_millis(50));
    let log = Log::open(dir.path(), opts(Some(bound))).unwrap();
    assert!(log.active_segment_age().unwrap() >= bound);
    append_values(&log, 1);
    let segs = log.segments();
    assert_eq!(segs.len(), 2);
    assert_eq!((segs[1].base_seq, segs[1].last_seq), (4, 4));
    check_contiguous(&log, 4);
}

#[test]
fn a_roll_after_out_of_bounds_is_invalid_options_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        Duration::ZERO,
        MIN_ROLL_AFTER - Duration::from_nanos(1),
        MAX_ROLL_AFTER + Duration::from_nanos(1),
        Duration::MAX,
    ] {
        match Log::open(dir.path(), opts(Some(bad))) {
            Err(Error::InvalidOptions { field, reason }) => {
                assert_eq!(field, "roll_after");
                assert!(reason.contains("must be in"), "{reason}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    for good in [MIN_ROLL_AFTER, MAX_ROLL_AFTER] {
        let log = Log::open(dir.path(), opts(Some(good))).unwrap();
        assert_eq!(log.options().roll_after, Some(good));
        append_values(&log, 1);
    }
    assert_eq!(
        Log::open(dir.path(), opts(None)).unwrap().last_seq(),
        2,
        "valid bounds append"
    );
}

#[test]
fn a_first_batch_stamped_in_the_future_does_not_make_a_reopened_segment_young() {
    let dir = tempfile::tempdir().unwrap();
    let bound = Duration::from_millis(100);
    let log = Log::open(dir.path(), opts(Some(bound))).unwrap();
    let in_a_day = now_ms() + 24 * 3600 * 1000;
    for seq in 1..=2 {
        let m = Message::new(value(seq)).with_timestamp(in_a_day);
        assert_eq!(log.append(&m).unwrap(), seq);
    }
    drop(log);
    std::thread::sleep(bound + Duration::from_millis(50));
    // The timestamp is later than the clock: the file's times give the age.
    let log = Log::open(dir.path(), opts(Some(bound))).unwrap();
    assert!(log.active_segment_age().unwrap() >= bound);
    append_values(&log, 1);
    assert_eq!(log.segments().len(), 2);
    check_contiguous(&log, 3);
}
