//! Property test: random operations on a `Log` against a simple in-memory model.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use krabka_protocol::Message;
use krabka_storage::{Error, Log, Options, SyncPolicy};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append(usize),
    AppendBatch(Vec<usize>),
    Read(u64, usize),
    DeleteBefore(u64),
    TrimOverBytes(u64),
    Roll,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..300).prop_map(Op::Append),
        2 => proptest::collection::vec(0usize..200, 0..8).prop_map(Op::AppendBatch),
        3 => (0u64..80, 0usize..30).prop_map(|(s, m)| Op::Read(s, m)),
        1 => (0u64..80).prop_map(Op::DeleteBefore),
        1 => (0u64..6000).prop_map(Op::TrimOverBytes),
        1 => Just(Op::Roll),
        1 => Just(Op::Reopen),
    ]
}

fn message(seq: u64, len: usize) -> Message {
    Message::new(vec![(seq % 256) as u8; len]).with_timestamp(seq as i64)
}

fn options() -> Options {
    Options {
        max_bytes: 700,
        index_interval_bytes: 100,
        sync: SyncPolicy::Never,
        ..Options::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_in_memory_model(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), options()).unwrap();
        // Model: every record ever appended (index seq - 1) and the first kept seq.
        let mut records: Vec<Message> = Vec::new();
        let mut first: u64 = 1;
        for op in ops {
            let last = records.len() as u64;
            match op {
                Op::Append(len) => {
                    let m = message(last + 1, len);
                    prop_assert_eq!(log.append(&m).unwrap(), last + 1);
                    records.push(m);
                }
                Op::AppendBatch(lens) => {
                    let batch: Vec<Message> = lens.iter().enumerate()
                        .map(|(i, &l)| message(last + 1 + i as u64, l)).collect();
                    let r = log.append_batch(&batch).unwrap();
                    prop_assert_eq!(*r.start(), last + 1);
                    prop_assert_eq!(*r.end(), last + batch.len() as u64);
                    records.extend(batch);
                }
                Op::Read(from, max) => {
                    let model_first = if last == 0 { 0 } else { first };
                    match log.read(from, max) {
                        Ok(got) => {
                            prop_assert!(from >= model_first && from <= last + 1);
                            let want = (last + 1).saturating_sub(from.max(1)).min(max as u64);
                            prop_assert_eq!(got.len() as u64, want);
                            for (i, r) in got.iter().enumerate() {
                                prop_assert_eq!(r.seq, from + i as u64);
                                prop_assert_eq!(&r.message, &records[(r.seq - 1) as usize]);
                            }
                        }
                        Err(Error::OutOfRange { .. }) => {
                            prop_assert!(from < model_first || from > last + 1);
                        }
                        Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
                    }
                }
                Op::DeleteBefore(keep) => {
                    let segs = log.segments();
                    log.delete_before(keep).unwrap();
                    // Expected: the base of the first segment holding a seq >= keep, or the active one.
                    let expect = segs.iter()
                        .find(|s| s.active || s.last_seq >= keep)
                        .map(|s| s.base_seq).unwrap();
                    first = expect;
                }
                Op::TrimOverBytes(target) => {
                    let before = log.bytes();
                    let freed = log.trim_over_bytes(target).unwrap();
                    prop_assert_eq!(log.bytes(), before - freed);
                    prop_assert!(log.bytes() <= target || log.segments().len() == 1);
                    first = log.segments()[0].base_seq;
                }
                Op::Roll => {
                    log.roll().unwrap();
                    let segs = log.segments();
                    prop_assert_eq!(segs.last().unwrap().size, 0);
                }
                Op::Reopen => {
                    log.close().unwrap();
                    log = Log::open(dir.path(), options()).unwrap();
                    prop_assert!(log.recovery_report().is_clean());
                }
            }
            let last = records.len() as u64;
            prop_assert_eq!(log.last_seq(), last);
            let model_first = if last == 0 { 0 } else { first };
            prop_assert_eq!(log.first_seq(), model_first);
            let segs = log.segments();
            for w in segs.windows(2) {
                prop_assert_eq!(w[0].last_seq + 1, w[1].base_seq);
                prop_assert!(w[0].size <= 700 || w[0].last_seq == w[0].base_seq);
                prop_assert!(w[0].index_path.exists() && w[0].time_index_path.exists());
            }
        }
    }
}
