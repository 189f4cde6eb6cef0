//! krabka's old segment format, the one before record batches: recognised (whatever one field of
//! its first frame says) so that no open takes an old file for damaged batches, and decoded
//! read-only so that an old log can be read out and appended to a new one.
//!
//! An old `.log` file is a run of record frames, one per record, all little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | `len`: the bytes after the CRC (8 + the message's) |
//! | 4 | CRC-32 (IEEE) of those `len` bytes |
//! | 8 | the record's seq |
//! | `len - 8` | the message, as [`Message::encode`] writes it (version byte 1) |

use std::ops::Range;

use bytes::Bytes;
use krabka_protocol::Message;

use super::batch::BadBytes;
use crate::Record;

/// The name of the old format, for messages.
pub const OLD_FORMAT_NAME: &str = "krabka's old per-record frame format";

/// Bytes before an old frame's message: length (4), CRC (4), seq (8).
const OLD_HEADER: usize = 16;

/// The smallest `len` of an old frame: the seq and the smallest message (version, flags,
/// timestamp, value length, header count).
const OLD_MIN_BODY: usize = 8 + 18;

fn le_u32(buf: &[u8], r: Range<usize>) -> Option<u32> {
    buf.get(r)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_le_bytes)
}

fn le_u64(buf: &[u8], r: Range<usize>) -> Option<u64> {
    buf.get(r)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_le_bytes)
}

/// The total length of the old frame at the start of `buf` (`8 + len`), from its length field
/// alone; `None` when `buf` is shorter than that field.
pub(crate) fn old_frame_len(buf: &[u8]) -> Option<u64> {
    le_u32(buf, 0..4).map(|len| 8 + u64::from(len))
}

/// Whether the old frame at the start of `buf` is whole and its CRC checks.
fn crc_checks(buf: &[u8]) -> bool {
    let (Some(len), Some(crc)) = (le_u32(buf, 0..4), le_u32(buf, 4..8)) else {
        return false;
    };
    let len = len as usize;
    len >= OLD_MIN_BODY
        && buf.get(OLD_HEADER) == Some(&krabka_protocol::VERSION)
        && buf
            .get(8..8usize.saturating_add(len))
            .is_some_and(|body| crc32fast::hash(body) == crc)
}

/// The length of the message at byte 16 of `buf` when it decodes as a version-1 message, with
/// its version byte taken as 1 and its flags byte as `flags` (so that a flipped bit in either
/// still leaves the rest of its layout to be recognised).
fn message_len_as(buf: &[u8], flags: u8) -> Option<usize> {
    let rest = buf.get(OLD_HEADER..)?;
    // At most what a frame's length field can describe; enough for the layout to be checked.
    let mut copy = rest.get(..rest.len().min(u32::MAX as usize))?.to_vec();
    *copy.first_mut()? = krabka_protocol::VERSION;
    *copy.get_mut(1)? = flags;
    Message::decode(&copy).ok().map(|(_, used)| used)
}

/// Whether `buf` starts with a record frame of krabka's old format, judged by several
/// independent signals of its layout so that one damaged field leaves it recognised: its CRC
/// checks; or its message (read with the version byte as 1 and either flags value) has exactly
/// the length its `len` field gives; or the CRC checks over the message as its layout bounds it
/// (a damaged `len`); or the frame after it, where `len` or the message's own length puts it,
/// is an intact old frame; or, when the seq the file must start with is known (`expect`, a
/// segment's base seq), the seq field carries it before a version-1 message of a plausible
/// length. A record batch's bytes meet none of these: its first four bytes are the high bytes
/// of a big-endian base offset (zero for any seq below 2^32), and byte 16 is its magic, 2.
pub(crate) fn is_old_frame(buf: &[u8], expect: Option<u64>) -> bool {
    let Some(len) = le_u32(buf, 0..4).map(|l| l as usize) else {
        return false;
    };
    if crc_checks(buf) {
        return true;
    }
    let plausible = len >= OLD_MIN_BODY;
    let version = buf.get(OLD_HEADER) == Some(&krabka_protocol::VERSION);
    if plausible && version && expect.is_some() && le_u64(buf, 8..16) == expect {
        return true;
    }
    // The message's own length, however its version or flags byte was damaged.
    let flags = buf.get(OLD_HEADER + 1).copied().unwrap_or(0);
    let message = [flags & 1, (flags & 1) ^ 1]
        .into_iter()
        .find_map(|f| message_len_as(buf, f));
    if let Some(m) = message {
        if plausible && 8 + m == len {
            return true;
        }
        // A damaged `len`: the CRC over the message as its layout bounds it, or the frame
        // after it.
        let end = OLD_HEADER + m;
        let crc = le_u32(buf, 4..8);
        if buf
            .get(8..end)
            .is_some_and(|body| Some(crc32fast::hash(body)) == crc)
        {
            return true;
        }
        if buf.get(end..).is_some_and(crc_checks) {
            return true;
        }
    }
    plausible
        && buf
            .get(8usize.saturating_add(len)..)
            .is_some_and(crc_checks)
}

/// Where [`decode_old_chunk`] stopped.
#[derive(Debug)]
pub(crate) struct OldDecoded {
    /// Bytes of whole frames consumed (a frame `max` stopped before is not counted).
    pub(crate) consumed: usize,
    /// The seq the frame at `consumed` must carry.
    pub(crate) next_seq: u64,
}

/// Decodes old frames from the start of `buf`, the first carrying `expect`: records with
/// `seq >= from_seq` go to `out`, at most `max` of them, none past `last_allowed` (a closed
/// segment's end). Every frame is proved before its record is handed out: its CRC, its seq
/// (the one after the previous frame's), and a message that fills it exactly. An incomplete
/// frame at the end of `buf` ends the decoding without an error.
pub(crate) fn decode_old_chunk(
    buf: &Bytes,
    expect: u64,
    from_seq: u64,
    max: usize,
    last_allowed: u64,
    out: &mut Vec<Record>,
) -> Result<OldDecoded, BadBytes> {
    let mut pos = 0usize;
    let mut expect = expect;
    let mut left = max;
    let bad = BadBytes::bad;
    while left > 0 {
        let rest = buf.get(pos..).unwrap_or(&[]);
        let (Some(len), Some(crc)) = (le_u32(rest, 0..4), le_u32(rest, 4..8)) else {
            break;
        };
        let len = len as usize;
        if len < OLD_MIN_BODY {
            return Err(bad(
                pos,
                format!("frame length {len} is below the minimum {OLD_MIN_BODY}"),
            ));
        }
        let Some(body) = rest.get(8..8 + len) else {
            break;
        };
        let computed = crc32fast::hash(body);
        if computed != crc {
            return Err(bad(
                pos,
                format!("CRC-32 mismatch: stored {crc:#010x}, computed {computed:#010x}"),
            ));
        }
        let seq = le_u64(body, 0..8).unwrap_or(0);
        if seq != expect {
            return Err(bad(
                pos,
                format!("frame carries seq {seq}, expected {expect}"),
            ));
        }
        if seq > last_allowed {
            return Err(bad(
                pos,
                format!(
                    "frame of seq {seq} lies beyond seq {last_allowed}, the end of the closed segment"
                ),
            ));
        }
        let at = pos + OLD_HEADER;
        let message = buf.slice(at..pos + 8 + len);
        let decoded = Message::decode_bytes(&message)
            .map_err(|e| bad(pos, format!("message of seq {seq}: {e}")))?;
        if decoded.1 != message.len() {
            return Err(bad(
                pos,
                format!(
                    "message of seq {seq} is {} bytes, its frame holds {}",
                    decoded.1,
                    message.len()
                ),
            ));
        }
        if seq >= from_seq {
            out.push(Record {
                seq,
                message: decoded.0,
            });
            left -= 1;
        }
        pos += 8 + len;
        expect = seq
            .checked_add(1)
            .ok_or_else(|| bad(pos, "seq overflows u64".to_owned()))?;
    }
    Ok(OldDecoded {
        consumed: pos,
        next_seq: expect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Old frames of seqs `seqs`, each holding a key, a value, a timestamp and a header.
    fn old_frames(seqs: std::ops::RangeInclusive<u64>) -> Vec<u8> {
        let mut out = Vec::new();
        for seq in seqs {
            let mut body = seq.to_le_bytes().to_vec();
            Message::new(format!("old value {seq}"))
                .with_key(format!("k{seq}"))
                .with_timestamp(seq as i64 * 1000)
                .with_header("h", "x")
                .encode(&mut body);
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            out.extend_from_slice(&body);
        }
        out
    }

    #[test]
    fn an_old_frame_with_any_one_bit_flipped_is_recognised_alone_or_followed() {
        let one = old_frames(1..=1);
        let many = old_frames(1..=3);
        for (what, bytes, expect) in [
            ("a lone frame, base known", &one, Some(1)),
            ("three frames, base unknown", &many, None),
            ("three frames, base known", &many, Some(1)),
        ] {
            for byte in 0..one.len() {
                for bit in 0..8 {
                    let mut b = bytes.clone();
                    b[byte] ^= 1 << bit;
                    assert!(
                        is_old_frame(&b, expect),
                        "{what}: bit {bit} of byte {byte} flipped"
                    );
                }
            }
        }
    }

    #[test]
    fn record_batches_are_not_taken_for_old_frames() {
        let batches = crate::segment::test_batches(1..=5);
        assert!(!is_old_frame(&batches, Some(1)));
        assert!(!is_old_frame(&batches, None));
        for byte in 0..61 {
            let mut b = batches.clone();
            b[byte] ^= 0xff;
            assert!(!is_old_frame(&b, Some(1)), "byte {byte} flipped");
        }
    }

    #[test]
    fn old_frames_decode_to_their_records_and_a_damaged_one_gives_none() {
        let buf = Bytes::from(old_frames(5..=9));
        let mut out = Vec::new();
        let d = decode_old_chunk(&buf, 5, 6, 10, u64::MAX, &mut out).unwrap();
        assert_eq!((d.consumed, d.next_seq), (buf.len(), 10));
        assert_eq!(out.iter().map(|r| r.seq).collect::<Vec<_>>(), [6, 7, 8, 9]);
        assert_eq!(out[0].message.value, "old value 6");
        assert_eq!(out[0].message.key.as_deref(), Some(&b"k6"[..]));
        assert_eq!(out[0].message.timestamp, 6000);
        assert_eq!(out[0].message.headers.len(), 1);
        // Past a closed segment's end: an error at that frame, not its record.
        let mut out = Vec::new();
        let e = decode_old_chunk(&buf, 5, 5, 10, 7, &mut out).unwrap_err();
        assert_eq!(out.len(), 3);
        assert!(e.reason.contains("beyond seq 7"), "{}", e.reason);
        // A flipped value byte of the third frame: its CRC fails.
        let mut bad = old_frames(5..=9);
        let third = bad.len() / 5 * 2;
        bad[third + 30] ^= 1;
        let mut out = Vec::new();
        let e = decode_old_chunk(&Bytes::from(bad), 5, 5, 10, u64::MAX, &mut out).unwrap_err();
        assert_eq!((out.len(), e.position), (2, third));
        assert!(e.reason.contains("CRC-32 mismatch"), "{}", e.reason);
        // Torn: the whole frames only.
        let mut out = Vec::new();
        let d =
            decode_old_chunk(&buf.slice(..buf.len() - 3), 5, 5, 10, u64::MAX, &mut out).unwrap();
        assert_eq!((out.len(), d.next_seq), (4, 9));
    }
}
