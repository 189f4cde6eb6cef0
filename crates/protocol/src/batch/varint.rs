//! Kafka's varints: zigzag-encoded (`(n << 1) ^ (n >> 31)`, so small negatives stay short) then
//! unsigned LEB128, 7 bits a byte, least significant first, the high bit set on every byte but
//! the last. A varint (i32) takes at most 5 bytes, a varlong (i64) at most 10; like Kafka's
//! `ByteUtils`, a longer run is an error, and so (stricter than Kafka, which drops them) are
//! bits past 32 or 64 in the last byte.

use super::BatchError;

/// Reads an unsigned LEB128 value of at most `max_bytes` bytes whose last byte may use only
/// `last_bits` bits; returns it and the position after it.
fn read_unsigned(
    buf: &[u8],
    at: usize,
    max_bytes: usize,
    last_bits: u32,
) -> Result<(u64, usize), BatchError> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let pos = at + i;
        let byte = *buf
            .get(pos)
            .ok_or(BatchError::Truncated { needed: 1, at: pos })?;
        let bits = u64::from(byte & 0x7f);
        if i + 1 == max_bytes && (byte & 0x80 != 0 || bits >> last_bits != 0) {
            return Err(BatchError::Varint { at });
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, pos + 1));
        }
    }
    Err(BatchError::Varint { at })
}

/// An unsigned LEB128 value of one or two bytes at `at` (always within both a varint's and a
/// varlong's bounds) and the position after it; `None` for a longer one, or none.
#[inline]
fn short_unsigned(buf: &[u8], at: usize) -> Option<(u32, usize)> {
    let first = *buf.get(at)?;
    if first < 0x80 {
        return Some((u32::from(first), at + 1));
    }
    let second = *buf.get(at + 1)?;
    (second < 0x80).then(|| (u32::from(first & 0x7f) | (u32::from(second) << 7), at + 2))
}

/// Reads a varint (zigzag i32) at `at`; returns it and the position after it.
#[inline]
pub(crate) fn read_varint(buf: &[u8], at: usize) -> Result<(i32, usize), BatchError> {
    // Most varints of a record are one byte (deltas, counts, short lengths) or two (the
    // lengths of records and values up to 8 KiB).
    if let Some((raw, next)) = short_unsigned(buf, at) {
        let raw = raw as i32;
        return Ok(((raw >> 1) ^ -(raw & 1), next));
    }
    read_long_varint(buf, at)
}

/// [`read_varint`] of a varint of more than one byte (or of none).
fn read_long_varint(buf: &[u8], at: usize) -> Result<(i32, usize), BatchError> {
    let (raw, next) = read_unsigned(buf, at, 5, 4)?;
    let raw = u32::try_from(raw).map_err(|_| BatchError::Varint { at })?;
    Ok((((raw >> 1) as i32) ^ -((raw & 1) as i32), next))
}

/// Reads a varlong (zigzag i64) at `at`; returns it and the position after it.
#[inline]
pub(crate) fn read_varlong(buf: &[u8], at: usize) -> Result<(i64, usize), BatchError> {
    if let Some((raw, next)) = short_unsigned(buf, at) {
        let raw = i64::from(raw);
        return Ok(((raw >> 1) ^ -(raw & 1), next));
    }
    read_long_varlong(buf, at)
}

/// [`read_varlong`] of a varlong of more than one byte (or of none).
fn read_long_varlong(buf: &[u8], at: usize) -> Result<(i64, usize), BatchError> {
    let (raw, next) = read_unsigned(buf, at, 10, 1)?;
    Ok((((raw >> 1) as i64) ^ -((raw & 1) as i64), next))
}

/// Appends `v` as unsigned LEB128.
#[inline]
fn put_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a varint.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_unsigned(out, u64::from(((v << 1) ^ (v >> 31)) as u32));
}

/// Appends a varlong.
#[inline]
pub(crate) fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_unsigned(out, ((v << 1) ^ (v >> 63)) as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(v: i32) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        out
    }

    #[test]
    fn kafka_examples() {
        // Values from Kafka's ByteUtilsTest.
        assert_eq!(varint(0), [0x00]);
        assert_eq!(varint(-1), [0x01]);
        assert_eq!(varint(1), [0x02]);
        assert_eq!(varint(63), [0x7e]);
        assert_eq!(varint(-64), [0x7f]);
        assert_eq!(varint(64), [0x80, 0x01]);
        assert_eq!(varint(i32::MAX), [0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(varint(i32::MIN), [0xff, 0xff, 0xff, 0xff, 0x0f]);
        let mut out = Vec::new();
        put_varlong(&mut out, i64::MIN);
        assert_eq!(out.len(), 10);
        assert_eq!(read_varlong(&out, 0).unwrap(), (i64::MIN, 10));
    }

    #[test]
    fn one_and_two_byte_varints_read_as_the_general_path_reads_them() {
        for first in 0..=u8::MAX {
            for second in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let buf = [0x55, first, second, 0x00];
                let what = format!("{first:#x} {second:#x}");
                assert_eq!(read_varint(&buf, 1), read_long_varint(&buf, 1), "{what}");
                assert_eq!(read_varlong(&buf, 1), read_long_varlong(&buf, 1), "{what}");
                // Cut after the first byte.
                let cut = &buf[..2];
                assert_eq!(read_varint(cut, 1), read_long_varint(cut, 1), "{what}");
                assert_eq!(read_varlong(cut, 1), read_long_varlong(cut, 1), "{what}");
            }
        }
        assert_eq!(read_varint(&[0x55], 1), read_long_varint(&[0x55], 1));
        assert_eq!(read_varlong(&[], 0), read_long_varlong(&[], 0));
    }

    #[test]
    fn round_trips_edges() {
        for v in [0, 1, -1, 63, -64, 64, -65, 8191, -8192, i32::MAX, i32::MIN] {
            let b = varint(v);
            assert_eq!(read_varint(&b, 0).unwrap(), (v, b.len()));
        }
        for v in [0, -1, 1 << 40, -(1 << 40), i64::MAX, i64::MIN] {
            let mut b = Vec::new();
            put_varlong(&mut b, v);
            assert_eq!(read_varlong(&b, 0).unwrap(), (v, b.len()));
        }
    }

    #[test]
    fn refuses_long_overflowing_and_truncated() {
        // Six bytes: too long for a varint.
        let long = [0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(read_varint(&long, 0), Err(BatchError::Varint { at: 0 }));
        // Five bytes whose last carries bits past 32.
        let wide = [0xff, 0xff, 0xff, 0xff, 0x1f];
        assert_eq!(read_varint(&wide, 0), Err(BatchError::Varint { at: 0 }));
        // Ten bytes whose last carries bits past 64.
        let wide_long = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03];
        assert_eq!(
            read_varlong(&wide_long, 0),
            Err(BatchError::Varint { at: 0 })
        );
        // Runs off the end.
        assert_eq!(
            read_varint(&[0x80, 0x80], 0),
            Err(BatchError::Truncated { needed: 1, at: 2 })
        );
        assert_eq!(
            read_varint(&[], 0),
            Err(BatchError::Truncated { needed: 1, at: 0 })
        );
    }
}
