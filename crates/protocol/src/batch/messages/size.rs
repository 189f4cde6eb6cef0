//! The bytes a record takes: Kafka's varints (zigzag, unsigned LEB128), their lengths, the
//! short form the encoder's common path writes, and a record's size.

use crate::Message;

/// Zigzag form of a varint or varlong value (an `i32` widened to `i64` gives the same bits as
/// its 32-bit zigzag, so one function serves both).
#[inline(always)]
pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Bytes of `z` as unsigned LEB128 (7 bits a byte): `ceil(bits / 7)` for its significant bits,
/// at least one, computed as `(9 * bits + 64) / 64`, which equals it for 1 to 64 bits.
#[inline(always)]
pub(super) fn uvarint_len(z: u64) -> usize {
    let bits = 64 - (z | 1).leading_zeros() as usize;
    (9 * bits + 64) / 64
}

/// Bytes of a varint holding `v` (zigzag, then 7 bits a byte).
#[inline(always)]
pub(super) fn varint_len(v: i64) -> usize {
    uvarint_len(zigzag(v))
}

/// Bytes of a length-prefixed byte run of `len` bytes.
#[inline(always)]
pub(super) fn run_len(len: usize) -> usize {
    varint_len(i64::try_from(len).unwrap_or(i64::MAX)) + len
}

/// Bytes of a record's body (after its length varint).
#[inline(always)]
pub(super) fn body_len(msg: &Message, timestamp_delta: i64, offset_delta: i32) -> usize {
    let mut n = 1 + varint_len(timestamp_delta) + varint_len(i64::from(offset_delta));
    n += msg.key.as_ref().map_or(1, |k| run_len(k.len()));
    n += run_len(msg.value.len());
    n += varint_len(i64::try_from(msg.headers.len()).unwrap_or(i64::MAX));
    for h in &msg.headers {
        n += run_len(h.key.len()) + run_len(h.value.len());
    }
    n
}

/// Bytes `msg` takes as a record of a batch (its length varint included), at the given
/// deltas. A batch of one is [`HEADER_LEN`](super::super::HEADER_LEN) more.
///
/// ```
/// use krabka_protocol::batch::record_size;
/// use krabka_protocol::Message;
///
/// // length (2), attributes, two deltas, null key, value length (2), the value, no headers
/// assert_eq!(record_size(&Message::new(vec![0u8; 100]), 0, 0), 2 + 1 + 1 + 1 + 1 + 2 + 100 + 1);
/// ```
pub fn record_size(msg: &Message, timestamp_delta: i64, offset_delta: i32) -> usize {
    let body = body_len(msg, timestamp_delta, offset_delta);
    varint_len(i64::try_from(body).unwrap_or(i64::MAX)) + body
}

/// `z`, below [`SHORT_LIMIT`], as unsigned LEB128 (1 to 3 bytes) in the low bytes of a
/// word, its length in the bits from 32 up ([`short_len`]): one branch (a single byte), the
/// rest computed without one. One word, so a record's four stay in registers.
#[inline(always)]
pub(super) fn short_uvarint(z: u64) -> u64 {
    if z < 1 << 7 {
        return z | 1 << 32;
    }
    let three = u64::from(z >= 1 << 14);
    let spread = (z & 0x7f) | ((z << 1) & 0x7f00) | ((z << 2) & 0x7f_0000);
    // The continuation bit of every byte but the last.
    let more = 0x80 | (three << 15);
    spread | more | (2 + three) << 32
}

/// The length of a [`short_uvarint`].
#[inline(always)]
pub(super) fn short_len(short: u64) -> usize {
    (short >> 32) as usize
}

/// Zigzag values below this take at most 3 varint bytes (21 bits).
pub(super) const SHORT_LIMIT: u64 = 1 << 21;

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's varint bytes of `z` (unsigned LEB128), the plain loop.
    fn leb128(mut z: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while z >= 0x80 {
            out.push(z as u8 | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
        out
    }

    /// Values on both sides of every byte boundary, and every power of two.
    fn edges() -> impl Iterator<Item = u64> {
        (0..64)
            .flat_map(|b| {
                let p = 1u64 << b;
                [p - 1, p, p + 1]
            })
            .chain((1..10).flat_map(|k| {
                let p = 1u64.checked_shl(7 * k).unwrap_or(0);
                [p.wrapping_sub(1), p]
            }))
            .chain([u64::MAX])
    }

    #[test]
    fn the_varint_length_is_the_leb128_length_at_every_edge() {
        for z in edges() {
            assert_eq!(uvarint_len(z), leb128(z).len(), "{z}");
        }
    }

    #[test]
    fn short_varints_are_the_leb128_bytes_below_the_limit() {
        for z in edges().filter(|&z| z < SHORT_LIMIT).chain(0..20_000) {
            let short = short_uvarint(z);
            let (word, n) = (short as u32, short_len(short));
            let bytes = leb128(z);
            assert_eq!(n, bytes.len(), "{z}");
            assert_eq!(&word.to_le_bytes()[..n], &bytes[..], "{z}");
            // Nothing past the varint: the word's other bytes are zeros.
            assert_eq!(u64::from(word) >> (8 * n), 0, "{z}");
        }
    }
}
