//! Decoding frames into records: the message decoder (with a fast path for the common shape)
//! and the seq-checked decoding of a buffer of consecutive frames.

use std::ops::Range;
use std::path::Path;

use bytes::Bytes;
use krabka_protocol::Message;

use super::frame::{FrameError, MIN_BODY_LEN, Parsed, parse_frame};
use crate::{Error, Record};

/// Records decoded from the front of a buffer by [`decode_records`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecords {
    /// The decoded records with `seq >= from_seq`, in order.
    pub records: Vec<Record>,
    /// Bytes of complete frames consumed from the start of the buffer (including skipped
    /// frames); a chunked reader continues at this offset.
    pub consumed: usize,
    /// The seq following the last consumed frame; `None` when no frame was consumed.
    pub next_seq: Option<u64>,
}

/// Decodes the message of a checked frame (zero-copy) and insists it fills the frame exactly.
pub(crate) fn decode_message(chunk: &Bytes, range: Range<usize>) -> Result<Message, String> {
    if range.end > chunk.len() || range.start > range.end {
        return Err("frame extends past the buffer".to_owned());
    }
    if let Some(msg) = decode_plain_message(chunk, range.clone()) {
        return Ok(msg);
    }
    let bytes = chunk.slice(range.clone());
    let (msg, used) = Message::decode_bytes(&bytes).map_err(|e| format!("bad message: {e}"))?;
    if used != bytes.len() {
        return Err(format!(
            "message uses {used} of the frame's {} message bytes",
            bytes.len()
        ));
    }
    Ok(msg)
}

/// The message encoding version the fast path of [`decode_plain_message`] reads.
const PLAIN_VERSION: u8 = 1;

/// The "has key" flag of that version (`docs/format.md`).
const PLAIN_FLAG_HAS_KEY: u8 = 1;

/// Fast path of [`decode_message`] for the common shape: a version-1 message without headers
/// that fills `range` exactly. Its key and value are sliced straight from `chunk` (no
/// intermediate slice, no header bookkeeping). Returns `None` for anything else (headers,
/// another version, any malformation), which then goes through [`Message::decode_bytes`] — the
/// reference decoder, which also produces the error.
fn decode_plain_message(chunk: &Bytes, range: Range<usize>) -> Option<Message> {
    fn u32_at(b: &[u8], at: usize) -> Option<usize> {
        let s = b.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(<[u8; 4]>::try_from(s).ok()?) as usize)
    }
    let base = range.start;
    let b = chunk.get(range)?;
    let (&version, &flags) = (b.first()?, b.get(1)?);
    if version != PLAIN_VERSION {
        return None;
    }
    let timestamp = i64::from_le_bytes(<[u8; 8]>::try_from(b.get(2..10)?).ok()?);
    let mut at = 10usize;
    let key = match flags {
        0 => None,
        PLAIN_FLAG_HAS_KEY => {
            let start = at.checked_add(4)?;
            let end = start.checked_add(u32_at(b, at)?)?;
            at = end;
            Some(start..end)
        }
        _ => return None,
    };
    let value_start = at.checked_add(4)?;
    let value_end = value_start.checked_add(u32_at(b, at)?)?;
    // No headers, and nothing after the header count.
    if u32_at(b, value_end)? != 0 || value_end.checked_add(4)? != b.len() {
        return None;
    }
    Some(Message {
        timestamp,
        key: key.map(|k| chunk.slice(base + k.start..base + k.end)),
        value: chunk.slice(base + value_start..base + value_end),
        headers: Vec::new(),
    })
}

/// Decodes consecutive framed records from the start of `buf`.
///
/// Records with `seq < from_seq` are checked and skipped; decoding stops after `max` records
/// or at an incomplete trailing frame. An incomplete trailing frame is not an error:
/// [`DecodedRecords::consumed`] tells where the complete frames end, so a chunked reader
/// fetches more bytes and continues there. The records share `buf` (no copy).
///
/// Seqs are checked across the buffer: every complete frame must carry the seq after the
/// previous frame's (a buffer spliced from two places of a segment, or from two segments, is
/// rejected). The first frame's seq is not checked; use [`decode_records_at`] when the caller
/// knows which seq the buffer must start with (for example bytes fetched from a remote store
/// at a position an index gave for a seq).
///
/// # Errors
/// [`Error::Corrupt`] (with an empty `path` and `position` relative to `buf`: the start of the
/// offending frame) when a complete frame has a bad length, CRC or message, or its seq does not
/// follow the previous frame's.
pub fn decode_records(buf: &Bytes, from_seq: u64, max: usize) -> Result<DecodedRecords, Error> {
    decode_with(buf, None, from_seq, max, false)
}

/// [`decode_records`] that also requires the first frame of `buf` to carry
/// `expected_first_seq` (when `buf` holds a complete frame and `max > 0`).
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{decode_records_at, encode_frame};
///
/// let mut buf = Vec::new();
/// encode_frame(7, &Message::new("a"), &mut buf);
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
/// (a point read in a cached chunk): frames before `from_seq`, other than the first, are
/// stepped over by their length and seq fields alone, without a CRC check, the way
/// `Log::read` steps from an index entry to the seq asked for. Nothing of a skipped frame is
/// returned; every record returned is checked (CRC, seq) as by [`decode_records_at`], and a
/// damaged length among the skipped frames lands on bytes that fail the seq or CRC check.
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{decode_records_skipping, encode_frame};
///
/// let mut buf = Vec::new();
/// for seq in 1..=100 {
///     encode_frame(seq, &Message::new(format!("r{seq}")), &mut buf);
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
    let mut records = Vec::new();
    let (consumed, next_seq) = decode_chunk(buf, from_seq, max, expect, fast_skip, &mut records)
        .map_err(|e| e.into_error(Path::new(""), 0))?;
    Ok(DecodedRecords {
        records,
        consumed,
        next_seq,
    })
}

/// [`decode_records`] that also insists the first frame carries `expect` (when given) and
/// appends the records to `out`; returns the bytes consumed and the seq after the last
/// consumed frame.
///
/// With `fast_skip`, frames before `from_seq` other than the buffer's first are stepped over
/// by their length and seq fields alone, without a CRC check: nothing of them is returned,
/// every record returned is still checked, and a wrong length lands on bytes that fail the
/// seq or CRC check of a later frame. The first frame is always checked, so that a reader
/// positioned by an index entry learns at once when the entry does not point at a frame.
pub(crate) fn decode_chunk(
    buf: &Bytes,
    from_seq: u64,
    max: usize,
    mut expect: Option<u64>,
    fast_skip: bool,
    out: &mut Vec<Record>,
) -> Result<(usize, Option<u64>), FrameError> {
    let mut pos = 0usize;
    let mut next_seq = None;
    let mut left = max;
    while left > 0 {
        let rest = buf.get(pos..).unwrap_or(&[]);
        if fast_skip
            && pos > 0
            && expect.is_some_and(|e| e < from_seq)
            && let Some((seq, len)) = skippable(rest, from_seq)
        {
            if let Some(e) = expect
                && seq != e
            {
                return Err(FrameError {
                    position: pos,
                    reason: format!("frame holds seq {seq}, expected {e}"),
                });
            }
            pos += len;
            expect = seq.checked_add(1);
            next_seq = expect;
            continue;
        }
        let frame = match parse_frame(rest) {
            Parsed::Incomplete => break,
            Parsed::Bad(reason) => {
                return Err(FrameError {
                    position: pos,
                    reason,
                });
            }
            Parsed::Frame(f) => f,
        };
        if let Some(e) = expect
            && frame.seq != e
        {
            return Err(FrameError {
                position: pos,
                reason: format!("frame holds seq {}, expected {e}", frame.seq),
            });
        }
        let after = frame.seq.checked_add(1).ok_or_else(|| FrameError {
            position: pos,
            reason: "seq overflows u64".to_owned(),
        })?;
        if frame.seq >= from_seq {
            let range = pos + frame.message.start..pos + frame.message.end;
            let message = decode_message(buf, range).map_err(|reason| FrameError {
                position: pos,
                reason,
            })?;
            out.push(Record {
                seq: frame.seq,
                message,
            });
            left -= 1;
        }
        pos += frame.len;
        expect = Some(after);
        next_seq = Some(after);
    }
    Ok((pos, next_seq))
}

/// The seq and length of the frame at the start of `buf` when it is complete, its length is
/// plausible and its seq is below `from_seq` (a frame a read steps over); `None` otherwise
/// (the frame then goes through the full check).
fn skippable(buf: &[u8], from_seq: u64) -> Option<(u64, usize)> {
    let len = 8 + u32::from_le_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    let seq = u64::from_le_bytes(buf.get(8..16)?.try_into().ok()?);
    (len >= 8 + MIN_BODY_LEN && len <= buf.len() && seq < from_seq && seq < u64::MAX)
        .then_some((seq, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::segment::frame_len;

    const FRAME_LEN_OF_HEADER: usize = crate::segment::FRAME_HEADER_LEN;
    use crate::segment::test_frames as frames;

    /// The reference decoder's verdict on `bytes` as one whole message.
    fn reference(bytes: &Bytes) -> Option<Message> {
        match Message::decode_bytes(bytes) {
            Ok((m, used)) if used == bytes.len() => Some(m),
            _ => None,
        }
    }

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
    fn fast_skip_steps_over_frames_it_does_not_return_but_checks_every_one_it_returns() {
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
                fast,
                &mut out,
            )
            .map(|(_, next)| (out.iter().map(|r| r.seq).collect::<Vec<_>>(), next))
        };
        assert_eq!(decode(&good, true), decode(&good, false));
        // A flipped payload byte of a skipped frame: the records asked for are intact.
        let mut payload = good.clone();
        payload[second + FRAME_LEN_OF_HEADER + 3] ^= 1;
        assert_eq!(decode(&payload, true).unwrap(), (vec![4, 5, 6], Some(7)));
        let checked = decode(&payload, false);
        assert!(
            matches!(&checked, Err(FrameError { position, reason })
                if *position == second && reason.starts_with("CRC mismatch")),
            "{checked:?}"
        );
        // A wrong length in a skipped frame never yields a record.
        for delta in [1u32, 8, 40] {
            let mut len = good.clone();
            let at = second..second + 4;
            let v = u32::from_le_bytes(len[at.clone()].try_into().unwrap()) + delta;
            len[at].copy_from_slice(&v.to_le_bytes());
            // An error, or a stop at what looks like an incomplete frame (the reader then
            // fails reading on), but never a record.
            let got = decode(&len, true);
            assert!(
                got.as_ref().map_or(true, |(seqs, _)| seqs.is_empty()),
                "delta {delta}: {got:?}"
            );
        }
        // The first frame is always checked.
        let mut first = good.clone();
        first[FRAME_LEN_OF_HEADER + 2] ^= 1;
        let got = decode(&first, true);
        assert!(
            matches!(&got, Err(FrameError { position: 0, reason }) if reason.starts_with("CRC mismatch")),
            "{got:?}"
        );
        // A frame holding the wrong seq is refused even when skipped.
        let mut seq = good;
        seq[third + 8] ^= 1;
        let got = decode(&seq, true);
        assert_eq!(
            got,
            Err(FrameError {
                position: third,
                reason: "frame holds seq 2, expected 3".to_owned(),
            })
        );
    }

    proptest! {
        /// The fast path never disagrees with `Message::decode_bytes`: on any bytes (a valid
        /// encoding, or one with a byte changed, cut or extended) it either declines or returns
        /// exactly what the reference decoder returns.
        #[test]
    #[test]
        fn plain_fast_path_agrees_with_reference_decoder(
            msg in arb_message(),
            edit in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
            cut in 0usize..3,
            extra in proptest::collection::vec(any::<u8>(), 0..3),
            prefix in 0usize..3,
        ) {
            let mut enc = vec![0xAA; prefix];
            msg.encode(&mut enc);
            if let Some((i, b)) = edit {
                let i = prefix + i.index(enc.len() - prefix);
                enc[i] = b;
            }
            enc.truncate(enc.len() - cut.min(enc.len() - prefix));
            enc.extend(&extra);
            let chunk = Bytes::from(enc);
            let fast = decode_plain_message(&chunk, prefix..chunk.len());
            let slow = reference(&chunk.slice(prefix..));
            if let Some(f) = fast {
                prop_assert_eq!(Some(f), slow);
            }
            if edit.is_none() && cut == 0 && extra.is_empty() && msg.headers.is_empty() {
                prop_assert_eq!(decode_plain_message(&chunk, prefix..chunk.len()), Some(msg));
            }
        }
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
    fn torn_tail_is_not_an_error_and_consumed_marks_complete_frames() {
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
    fn flipped_byte_in_complete_frame_is_corrupt_with_position() {
        let mut buf = frames(1..=3);
        let second = frame_len(&buf).unwrap();
        buf[second + 20] ^= 0xff;
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
    fn seq_gap_between_complete_frames_is_corrupt_at_the_second_frame() {
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
        // A backwards step (a duplicated frame) is rejected the same way.
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
        // A skipped (below from_seq) first frame is still checked.
        let skipped = decode_records_at(&buf, 6, 7, 10);
        assert!(
            matches!(&skipped, Err(Error::Corrupt { position: 0, reason, .. })
                if reason == "frame holds seq 5, expected 6"),
            "{skipped:?}"
        );
        // A buffer without a complete frame has nothing to check.
        let torn = buf.slice(..10);
        let d = decode_records_at(&torn, 4, 4, 10).unwrap();
        assert_eq!((d.consumed, d.next_seq), (0, None));
    }
}
