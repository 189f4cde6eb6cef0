//! Decoding batches into records: the seq-checked decoding of a buffer of consecutive batches.

use std::path::Path;

use bytes::Bytes;
use krabka_protocol::batch::{BatchError, RecordIter};

use super::frame::{
    FORMAT_NAME, Fault, FrameError, MAX_UNCOMPRESSED_BATCH, Parsed, RawFrame, parse_frame,
    peek_frame,
};
use super::old::{OLD_FORMAT_NAME, is_old_frame};
use crate::{Error, Record};

/// Records decoded from the front of a buffer by [`decode_records`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecords {
    /// The decoded records with `seq >= from_seq`, in order.
    pub records: Vec<Record>,
    /// Bytes of complete batches consumed from the start of the buffer (including skipped
    /// batches): a chunked reader continues at this offset. A batch that `max` stopped inside
    /// is not counted: its records after the last one returned are read from it again.
    pub consumed: usize,
    /// The seq the batch at `consumed` must start with (the seq after the last consumed batch,
    /// or the first seq of the batch `max` stopped inside); `None` when no batch was consumed
    /// or entered.
    pub next_seq: Option<u64>,
}

/// Decodes consecutive record batches from the start of `buf`.
///
/// Records with `seq < from_seq` are checked and skipped; decoding stops after `max` records
/// or at an incomplete trailing batch. An incomplete trailing batch is not an error:
/// [`DecodedRecords::consumed`] tells where the complete batches end, so a chunked reader
/// fetches more bytes and continues there. The records share `buf` (no copy).
///
/// Seqs are checked across the buffer: every complete batch must start at the seq after the
/// previous batch's last (a buffer spliced from two places of a segment, or from two segments, is
/// rejected). The first batch's seq is not checked; use [`decode_records_at`] when the caller
/// knows which seq the buffer must start with (for example bytes fetched from a remote store
/// at a position an index gave for a seq).
///
/// # Errors
/// [`Error::Corrupt`] (with an empty `path` and `position` relative to `buf`: the start of the
/// offending batch) when a complete batch has a bad length, magic, CRC or record, or its seq
/// does not follow the previous batch's; [`Error::NotAMessage`] at a record a `Message`
/// cannot hold (a null value, a control or transactional batch).
pub fn decode_records(buf: &Bytes, from_seq: u64, max: usize) -> Result<DecodedRecords, Error> {
    decode_with(buf, None, from_seq, max, false)
}

/// [`decode_records`] that also requires the first batch of `buf` to start at
/// `expected_first_seq` (when `buf` holds a complete batch and `max > 0`).
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{decode_records_at, encode_frame};
///
/// let mut buf = Vec::new();
/// encode_frame(7, &Message::new("a"), &mut buf)?;
/// let buf = Bytes::from(buf);
/// assert_eq!(decode_records_at(&buf, 7, 7, 10)?.records.len(), 1);
/// // The bytes do not start at seq 6.
/// let wrong = decode_records_at(&buf, 6, 6, 10);
/// assert!(matches!(wrong, Err(krabka_storage::Error::Corrupt { position: 0, .. })), "{wrong:?}");
/// # Ok::<(), krabka_storage::Error>(())
/// ```
///
/// # Errors
/// As [`decode_records`], and [`Error::Corrupt`] at position 0 when the first frame's seq is
/// not `expected_first_seq`.
pub fn decode_records_at(
    buf: &Bytes,
    expected_first_seq: u64,
    from_seq: u64,
    max: usize,
) -> Result<DecodedRecords, Error> {
    decode_with(buf, Some(expected_first_seq), from_seq, max, false)
}

/// [`decode_records_at`] for a caller that wants records from `from_seq` deep inside `buf`
/// (a point read in a cached chunk): batches wholly before `from_seq`, other than the first,
/// are stepped over by their header alone, without a CRC check, the way `Log::read` steps
/// from an index entry to the seq asked for. Nothing of a skipped batch is returned; every
/// record returned is checked (CRC, seq) as by [`decode_records_at`], and a damaged length
/// among the skipped batches lands on bytes that fail the seq or CRC check.
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{decode_records_skipping, encode_frame};
///
/// let mut buf = Vec::new();
/// for seq in 1..=100 {
///     encode_frame(seq, &Message::new(format!("r{seq}")), &mut buf)?;
/// }
/// let buf = Bytes::from(buf);
/// let got = decode_records_skipping(&buf, 1, 90, 1)?;
/// assert_eq!(got.records[0].seq, 90);
/// # Ok::<(), krabka_storage::Error>(())
/// ```
///
/// # Errors
/// As [`decode_records_at`].
pub fn decode_records_skipping(
    buf: &Bytes,
    expected_first_seq: u64,
    from_seq: u64,
    max: usize,
) -> Result<DecodedRecords, Error> {
    decode_with(buf, Some(expected_first_seq), from_seq, max, true)
}

fn decode_with(
    buf: &Bytes,
    expect: Option<u64>,
    from_seq: u64,
    max: usize,
    fast_skip: bool,
) -> Result<DecodedRecords, Error> {
    decode_within(buf, expect, from_seq, max, u64::MAX, fast_skip)
}

/// [`decode_records_at`] (or, `expect` `None`, [`decode_records`]) that gives no record of a
/// batch reaching past `last_allowed` (see [`decode_chunk`]).
pub(crate) fn decode_within(
    buf: &Bytes,
    expect: Option<u64>,
    from_seq: u64,
    max: usize,
    last_allowed: u64,
    fast_skip: bool,
) -> Result<DecodedRecords, Error> {
    let mut records = Vec::new();
    let (consumed, next_seq) = decode_chunk(
        buf,
        from_seq,
        max,
        expect,
        last_allowed,
        fast_skip,
        &mut records,
    )
    .map_err(|e| e.into_error(Path::new(""), 0))?;
    Ok(DecodedRecords {
        records,
        consumed,
        next_seq,
    })
}

/// [`decode_records`] that also insists the first batch starts at `expect` (when given) and
/// appends the records to `out`; returns the bytes consumed and the seq the batch there must
/// start with (see [`DecodedRecords`]).
///
/// With `fast_skip`, batches wholly before `from_seq` other than the buffer's first are
/// stepped over by their header alone, without a CRC check: nothing of them is returned,
/// every record returned is still checked, and a wrong length lands on bytes that fail the
/// seq or CRC check of a later batch. The first batch is always checked, so that a reader
/// positioned by an index entry learns at once when the entry does not point at a batch.
///
/// No batch reaching past `last_allowed` (the last seq of a closed segment: the next segment
/// starts after it) gives a record: it is damage at its position. Checked once per batch, from
/// its header.
pub(crate) fn decode_chunk(
    buf: &Bytes,
    from_seq: u64,
    max: usize,
    mut expect: Option<u64>,
    last_allowed: u64,
    fast_skip: bool,
    out: &mut Vec<Record>,
) -> Result<(usize, Option<u64>), FrameError> {
    let mut pos = 0usize;
    let mut next_seq = None;
    let mut left = max;
    while left > 0 && pos < buf.len() {
        let rest = buf.get(pos..).unwrap_or(&[]);
        if fast_skip
            && pos > 0
            && expect.is_some_and(|e| e < from_seq)
            && let Some((seq, last, len)) = peek_frame(rest)
            && last < from_seq
        {
            if let Some(e) = expect
                && seq != e
            {
                return Err(FrameError::bad(
                    pos,
                    format!("batch starts at seq {seq}, expected {e}"),
                ));
            }
            if last > last_allowed {
                return Err(beyond_end(pos, seq, last, last_allowed));
            }
            pos += len;
            expect = Some(last + 1);
            next_seq = expect;
            continue;
        }
        let frame = match parse_frame(&buf.slice(pos..)) {
            Parsed::Incomplete => break,
            Parsed::Bad(_) if is_old_frame(rest, expect) => {
                return Err(FrameError::bad(
                    pos,
                    format!("a record frame of {OLD_FORMAT_NAME}, not {FORMAT_NAME}"),
                ));
            }
            Parsed::Bad(reason) => return Err(FrameError::bad(pos, reason)),
            Parsed::Frame(f) => f,
        };
        if let Some(e) = expect
            && frame.seq != e
        {
            return Err(FrameError::bad(
                pos,
                format!("batch starts at seq {}, expected {e}", frame.seq),
            ));
        }
        if frame.last > last_allowed {
            return Err(beyond_end(pos, frame.seq, frame.last, last_allowed));
        }
        let after = frame
            .last
            .checked_add(1)
            .ok_or_else(|| FrameError::bad(pos, "seq overflows u64"))?;
        if frame.last >= from_seq && !decode_batch(&frame, pos, from_seq, &mut left, out)? {
            // `max` stopped inside this batch: it is read again from its start.
            return Ok((pos, Some(frame.seq)));
        }
        pos += frame.len;
        expect = Some(after);
        next_seq = Some(after);
    }
    Ok((pos, next_seq))
}

/// What the reason of [`beyond_end`] says, for a reader that adds which file follows.
pub(crate) const BEYOND_END: &str = "lies beyond the end of the closed segment";

/// The error for a batch of seqs `seq..=last` at `pos` that runs past `last_allowed`, the last
/// seq its closed segment may hold.
pub(crate) fn beyond_end(pos: usize, seq: u64, last: u64, last_allowed: u64) -> FrameError {
    FrameError::bad(
        pos,
        format!(
            "a batch of seqs {seq}..={last} {BEYOND_END}, whose last seq is {last_allowed} (the \
             next segment starts at seq {})",
            last_allowed.saturating_add(1)
        ),
    )
}

/// The records of a checked batch, each checked as it is read.
pub(crate) fn batch_records(frame: &RawFrame, pos: usize) -> Result<RecordIter, FrameError> {
    frame
        .view
        .records(MAX_UNCOMPRESSED_BATCH)
        .map_err(|e| FrameError::of_batch(pos, &e))
}

/// Appends the records `>= from_seq` of the batch at `pos` to `out` as messages, at most
/// `left` of them (counting it down). Returns whether the batch was read to its end (false
/// when `left` ran out before its last record).
///
/// Every record of the batch is checked, and the header against all of them, before any of
/// them is returned: a batch that fails a check anywhere gives none of its records (they are
/// taken back off `out`). A record a `Message` cannot hold in an otherwise valid batch gives
/// the records before it, then [`Fault::NotAMessage`].
fn decode_batch(
    frame: &RawFrame,
    pos: usize,
    from_seq: u64,
    left: &mut usize,
    out: &mut Vec<Record>,
) -> Result<bool, FrameError> {
    let header = frame.view.header();
    let refuse = |reason: &str| FrameError {
        position: pos,
        reason: reason.to_owned(),
        fault: Fault::NotAMessage(frame.seq.max(from_seq)),
    };
    if header.is_control() {
        return Err(refuse("a control batch (transaction markers)"));
    }
    if header.is_transactional() {
        return Err(refuse(
            "a transactional batch, whose records may belong to an aborted transaction",
        ));
    }
    let before = out.len();
    let mut records = batch_records(frame, pos)?;
    let result = read_batch(&mut records, frame.seq, pos, from_seq, left, out);
    match &result {
        Err(e) if matches!(e.fault, Fault::NotAMessage(_)) => {
            // Valid records before it stand only if the whole batch is valid.
            if let Err(damage) = records.check_rest() {
                out.truncate(before);
                return Err(FrameError::of_batch(pos, &damage));
            }
        }
        Err(_) => out.truncate(before),
        Ok(_) => {}
    }
    result
}

/// The loop of [`decode_batch`]: skips the records before `from_seq` (checking them), then
/// reads messages until the batch or `left` ends; when `left` ends first, checks the rest.
fn read_batch(
    records: &mut RecordIter,
    base: u64,
    pos: usize,
    from_seq: u64,
    left: &mut usize,
    out: &mut Vec<Record>,
) -> Result<bool, FrameError> {
    let fail = |e: BatchError| FrameError::of_batch(pos, &e);
    for _ in 0..from_seq.saturating_sub(base) {
        match records.skip_record() {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(fail(e)),
            None => return Ok(true),
        }
    }
    loop {
        if *left == 0 {
            return records.check_rest().map(|rest| rest == 0).map_err(fail);
        }
        let (offset, message) = match records.next_message() {
            None => return Ok(true),
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(fail(e)),
        };
        let seq = u64::try_from(offset).unwrap_or(0);
        out.push(Record { seq, message });
        *left -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krabka_protocol::Message;
    use proptest::prelude::*;

    use crate::segment::frame::encode_frames;
    use crate::segment::frame_len;
    use crate::segment::test_frames as frames;
    use krabka_protocol::batch::Compression;

    const HEADER: usize = crate::segment::FRAME_HEADER_LEN;

    fn arb_message() -> impl Strategy<Value = Message> {
        (
            any::<i64>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::collection::vec(
                ("[a-z]{0,3}", proptest::collection::vec(any::<u8>(), 0..4)),
                0..2,
            ),
        )
            .prop_map(|(ts, key, value, headers)| {
                let mut m = Message::new(value).with_timestamp(ts);
                m.key = key.map(Bytes::from);
                for (k, v) in headers {
                    m = m.with_header(k, v);
                }
                m
            })
    }

    #[test]
    fn a_batch_past_the_last_allowed_seq_gives_no_record_whether_read_or_stepped_over() {
        let buf = Bytes::from(frames(1..=6));
        let fifth = {
            let mut pos = 0;
            for _ in 0..4 {
                pos += frame_len(&buf[pos..]).unwrap();
            }
            pos
        };
        for (from, fast) in [(1, false), (1, true), (6, true)] {
            let mut out = Vec::new();
            let e = decode_chunk(&buf, from, 10, Some(1), 4, fast, &mut out).unwrap_err();
            assert_eq!(e.position, fifth, "from {from}, fast {fast}");
            assert!(e.reason.contains("beyond the end"), "{}", e.reason);
            assert!(out.iter().all(|r| r.seq <= 4), "from {from}, fast {fast}");
        }
        let mut out = Vec::new();
        assert!(decode_chunk(&buf, 1, 10, Some(1), 6, false, &mut out).is_ok());
        assert_eq!(out.len(), 6);
    }

    #[test]
    fn fast_skip_steps_over_batches_it_does_not_return_but_checks_every_one_it_returns() {
        let good = frames(1..=6);
        let second = frame_len(&good).unwrap();
        let third = second + frame_len(&good[second..]).unwrap();
        let decode = |bytes: &[u8], fast: bool| {
            let mut out = Vec::new();
            decode_chunk(
                &Bytes::copy_from_slice(bytes),
                4,
                10,
                Some(1),
                u64::MAX,
                fast,
                &mut out,
            )
            .map(|(_, next)| (out.iter().map(|r| r.seq).collect::<Vec<_>>(), next))
        };
        assert_eq!(decode(&good, true), decode(&good, false));
        // A flipped record byte of a skipped batch: the records asked for are intact.
        let mut payload = good.clone();
        payload[second + HEADER + 3] ^= 1;
        assert_eq!(decode(&payload, true).unwrap(), (vec![4, 5, 6], Some(7)));
        let checked = decode(&payload, false);
        assert!(
            matches!(&checked, Err(FrameError { position, reason, .. })
                if *position == second && reason.starts_with("CRC mismatch")),
            "{checked:?}"
        );
        // A wrong length in a skipped batch never yields a record.
        for delta in [1u32, 8, 40] {
            let mut len = good.clone();
            let at = second + 8..second + 12;
            let v = u32::from_be_bytes(len[at.clone()].try_into().unwrap()) + delta;
            len[at].copy_from_slice(&v.to_be_bytes());
            let got = decode(&len, true);
            assert!(
                got.as_ref().map_or(true, |(seqs, _)| seqs.is_empty()),
                "delta {delta}: {got:?}"
            );
        }
        // The first batch is always checked.
        let mut first = good.clone();
        first[HEADER + 2] ^= 1;
        let got = decode(&first, true);
        assert!(
            matches!(&got, Err(FrameError { position: 0, reason, .. }) if reason.starts_with("CRC mismatch")),
            "{got:?}"
        );
        // A batch holding the wrong seq is refused even when skipped.
        let mut seq = good;
        seq[third + 7] ^= 1;
        let got = decode(&seq, true);
        assert_eq!(
            got,
            Err(FrameError::bad(third, "batch starts at seq 2, expected 3"))
        );
    }

    proptest! {
        /// Any messages, in batches of any size, decode to exactly what was encoded, from any
        /// seq, with any `max`, resuming where `consumed` and `next_seq` say.
        #[test]
        fn batches_round_trip_from_any_seq_with_any_max(
            msgs in proptest::collection::vec(arb_message(), 1..30),
            cap in 1usize..400,
            from in 0usize..30,
            max in 1usize..7,
        ) {
            let mut buf = Vec::new();
            let mut at = 0;
            while at < msgs.len() {
                at += encode_frames(100 + at as u64, &msgs[at..], Compression::None, cap, &mut buf).unwrap();
            }
            let buf = Bytes::from(buf);
            let from_seq = 100 + from.min(msgs.len()) as u64;
            let (mut pos, mut expect, mut got) = (0usize, 100u64, Vec::new());
            for _ in 0..100 {
                let d = decode_records_at(&buf.slice(pos..), expect, from_seq + got.len() as u64, max).unwrap();
                let n = d.records.len();
                got.extend(d.records);
                pos += d.consumed;
                if let Some(next) = d.next_seq { expect = next; }
                if n == 0 { break; }
            }
            prop_assert_eq!(pos, buf.len());
            let want: Vec<Record> = msgs.iter().enumerate().skip(from.min(msgs.len()))
                .map(|(i, m)| Record { seq: 100 + i as u64, message: m.clone() }).collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn max_stopping_inside_a_batch_consumes_none_of_it() {
        let msgs: Vec<Message> = (0..5).map(|i| Message::new(format!("v{i}"))).collect();
        let mut buf = frames(1..=2);
        let second = buf.len();
        encode_frames(3, &msgs, Compression::None, usize::MAX, &mut buf).unwrap();
        let buf = Bytes::from(buf);
        let d = decode_records(&buf, 1, 4).unwrap();
        assert_eq!(
            d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert_eq!((d.consumed, d.next_seq), (second, Some(3)));
        // Exactly to the batch's end: consumed.
        let d = decode_records(&buf, 1, 7).unwrap();
        assert_eq!((d.consumed, d.next_seq), (buf.len(), Some(8)));
    }

    #[test]
    fn decode_records_skips_below_from_seq_and_stops_at_max() {
        let buf = Bytes::from(frames(1..=5));
        let d = decode_records(&buf, 3, 2).unwrap();
        assert_eq!(
            d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(d.next_seq, Some(5));
    }

    #[test]
    fn torn_tail_is_not_an_error_and_consumed_marks_complete_batches() {
        let full = frames(1..=3);
        let cut = full.len() - 3;
        let d = decode_records(&Bytes::from(full[..cut].to_vec()), 1, 10).unwrap();
        assert_eq!(d.records.len(), 2);
        assert_eq!(
            frame_len(&full[d.consumed..]),
            Some(full.len() - d.consumed)
        );
    }

    #[test]
    fn flipped_byte_in_complete_batch_is_corrupt_with_position() {
        let mut buf = frames(1..=3);
        let second = frame_len(&buf).unwrap();
        buf[second + 63] ^= 0xff;
        match decode_records(&Bytes::from(buf), 1, 10) {
            Err(Error::Corrupt { position, .. }) => assert_eq!(position, second as u64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_contiguous_seqs_are_corrupt() {
        let mut buf = frames(1..=1);
        buf.extend(frames(3..=3));
        assert!(matches!(
            decode_records(&Bytes::from(buf), 1, 10),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn seq_gap_between_complete_batches_is_corrupt_at_the_second_batch() {
        let mut buf = frames(5..=6);
        let second_at = buf.len();
        buf.extend(frames(8..=8));
        match decode_records(&Bytes::from(buf.clone()), 1, 10) {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, second_at as u64);
                assert!(reason.contains("expected 7"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // A backwards step (a duplicated batch) is rejected the same way.
        let mut dup = frames(5..=6);
        dup.extend(frames(6..=6));
        assert!(matches!(
            decode_records(&Bytes::from(dup), 1, 10),
            Err(Error::Corrupt { position, .. }) if position == second_at as u64
        ));
    }

    #[test]
    fn decode_records_at_checks_the_first_seq() {
        let buf = Bytes::from(frames(5..=7));
        let d = decode_records_at(&buf, 5, 6, 10).unwrap();
        assert_eq!(
            d.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![6, 7]
        );
        assert_eq!(d.next_seq, Some(8));
        match decode_records_at(&buf, 4, 4, 10) {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, 0);
                assert!(reason.contains("expected 4"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // A skipped (below from_seq) first batch is still checked.
        let skipped = decode_records_at(&buf, 6, 7, 10);
        assert!(
            matches!(&skipped, Err(Error::Corrupt { position: 0, reason, .. })
                if reason == "batch starts at seq 5, expected 6"),
            "{skipped:?}"
        );
        // A buffer without a complete batch has nothing to check.
        let torn = buf.slice(..10);
        let d = decode_records_at(&torn, 4, 4, 10).unwrap();
        assert_eq!((d.consumed, d.next_seq), (0, None));
    }
}
