//! Batch hints for point reads through the chunk map: where the batches after a map entry
//! start, one every [`SPACING`] bytes, learnt by walking the entry's chunk once it is cached.
//!
//! The chunk map holds one entry per chunk, so a point read positioned by it would step over
//! up to a chunk's worth of frames. The hints give a nearer start, as the offset index does
//! for `Log::read`. A hint is only a start: the frame it points at is decoded and checked in
//! full (length, CRC, and the seq it must carry) before anything is returned, and a read
//! whose hinted start fails is read again from the map entry itself.

use bytes::Bytes;
use krabka_storage::segment::peek_batch;

/// Bytes between two hints (the local offset index's spacing).
pub(crate) const SPACING: u64 = 4096;

/// One hint: 8 bytes of seq, 8 of position, little-endian.
const HINT_LEN: usize = 16;

/// The hints for the batches from the map entry `(seq, pos)` to the end of `data`, the bytes
/// of the chunk starting at segment byte `chunk_start`; batches after `last_seq` are not
/// hinted. Walks batch headers only (nothing is decoded, no CRC checked): a wrong header gives
/// hints that fail their batch's check when used. A hint is a batch's first seq and position.
pub(crate) fn build(data: &[u8], chunk_start: u64, entry: (u64, u64), last_seq: u64) -> Bytes {
    let (mut seq, pos) = entry;
    let mut out = Vec::new();
    let Some(mut off) = pos
        .checked_sub(chunk_start)
        .and_then(|o| usize::try_from(o).ok())
    else {
        return Bytes::new();
    };
    let mut last_hint = pos;
    while seq <= last_seq {
        let Some((base, last, len)) = data.get(off..).and_then(peek_batch) else {
            break;
        };
        if base != seq {
            break;
        }
        let at = chunk_start + off as u64;
        if at >= last_hint + SPACING {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
            last_hint = at;
        }
        off += len;
        seq = last + 1;
    }
    Bytes::from(out)
}

/// The last hint at or below `seq`, as `(seq, position)`.
pub(crate) fn floor(hints: &[u8], seq: u64) -> Option<(u64, u64)> {
    let n = hints.len() / HINT_LEN;
    let at = |i: usize| -> Option<(u64, u64)> {
        let h = hints.get(i * HINT_LEN..(i + 1) * HINT_LEN)?;
        let s = u64::from_le_bytes(h.get(..8)?.try_into().ok()?);
        let p = u64::from_le_bytes(h.get(8..)?.try_into().ok()?);
        Some((s, p))
    };
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at(mid)?.0 <= seq {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo.checked_sub(1).and_then(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use krabka_protocol::Message;
    use krabka_storage::segment::encode_batch_of_one;

    #[test]
    fn hints_point_at_frame_starts_and_floor_picks_the_one_below() {
        let mut buf = Vec::new();
        let mut starts = Vec::new();
        for seq in 10..=200u64 {
            starts.push((seq, buf.len() as u64));
            encode_batch_of_one(seq, &Message::new(vec![7u8; 300]), &mut buf).unwrap();
        }
        let hints = build(&buf, 0, (10, 0), 200);
        assert!(!hints.is_empty());
        for h in hints.chunks(HINT_LEN) {
            let s = u64::from_le_bytes(h[..8].try_into().unwrap());
            let p = u64::from_le_bytes(h[8..].try_into().unwrap());
            assert!(starts.contains(&(s, p)), "{s} at {p}");
        }
        assert_eq!(floor(&hints, 10), None);
        let (s, p) = floor(&hints, 150).unwrap();
        assert!(s <= 150 && starts.contains(&(s, p)));
        assert!(150 - s < SPACING / 300 + 2);
        // A chunk starting later: positions are segment positions.
        let tail = &buf[starts[50].1 as usize..];
        let hints = build(tail, starts[50].1, starts[50], 120);
        let (s, p) = floor(&hints, 200).unwrap();
        assert!(s <= 120 && starts.contains(&(s, p)));
    }
}
