//! The chunk map a copy records in the segment's custom metadata: for (up to) every aligned
//! data chunk, the first offset-index entry `(seq, byte position)` in it. A point read then
//! finds the frame to start decoding at without fetching the offset index, so its first remote
//! request is the data chunk itself.
//!
//! The backend's own custom metadata is kept inside, whole: the recorded value is
//! `MAGIC | varint(len(inner) + 1, or 0 for none) | inner | varint(n) | n × (varint position
//! delta, varint seq delta)`, deltas from `(0, start seq)`. Every call to the backend gets its
//! own custom metadata back ([`backend_view`]). A map that does not fit
//! `custom_metadata_max_bytes` is thinned (every second entry dropped, and so on); a map that
//! fails its checks is ignored (reads fetch the offset index, as for segments copied without
//! one). Positions and seqs from the map are only where decoding starts: every frame's CRC and
//! seq are checked as with the index.

use std::borrow::Cow;

use krabka_remote_storage::{CustomMetadata, RemoteLogSegmentMetadata};
use krabka_storage::index::OffsetIndexView;

/// Marks custom metadata holding a chunk map.
const MAGIC: &[u8; 4] = b"KCM1";

/// Start points of a segment, ascending in both seq and position: `(seq, position)`.
pub(crate) type ChunkMap = Vec<(u64, u64)>;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The first index entry in each `chunk`-byte chunk after the first (chunk 0 starts at the
/// segment's first frame), from the segment's verified offset index.
pub(crate) fn from_index(index: &OffsetIndexView, chunk: u64) -> ChunkMap {
    let mut map = ChunkMap::new();
    let mut next_chunk = 1u64;
    for i in 0..index.len() {
        let Some((seq, pos)) = index.entry(i) else {
            break;
        };
        if pos >= next_chunk.saturating_mul(chunk) {
            map.push((seq, pos));
            next_chunk = pos / chunk + 1;
        }
    }
    map
}

fn encode(inner: Option<&CustomMetadata>, start_seq: u64, map: &[(u64, u64)]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    match inner {
        Some(cm) => {
            put_varint(&mut out, cm.value().len() as u64 + 1);
            out.extend_from_slice(cm.value());
        }
        None => put_varint(&mut out, 0),
    }
    put_varint(&mut out, map.len() as u64);
    let (mut last_seq, mut last_pos) = (start_seq, 0);
    for &(seq, pos) in map {
        put_varint(&mut out, pos - last_pos);
        put_varint(&mut out, seq - last_seq);
        (last_seq, last_pos) = (seq, pos);
    }
    out
}

/// The custom metadata to record: the backend's `inner` with `map` around it, thinned to fit
/// `max_bytes` (an empty map, for a segment whose index entries all lie in its first chunk,
/// says "start at the first frame"); `inner` unchanged when not even one entry fits.
pub(crate) fn wrap(
    inner: Option<CustomMetadata>,
    start_seq: u64,
    map: &[(u64, u64)],
    max_bytes: usize,
) -> Option<CustomMetadata> {
    let mut step = 1;
    while step <= map.len().max(1) {
        let thinned: ChunkMap = map.iter().copied().step_by(step).collect();
        let bytes = encode(inner.as_ref(), start_seq, &thinned);
        if bytes.len() <= max_bytes {
            return Some(CustomMetadata::new(bytes));
        }
        step *= 2;
    }
    inner
}

/// Splits recorded custom metadata into the backend's part and the chunk map; `None` when it
/// holds no (well-formed) map.
fn split(cm: &CustomMetadata) -> Option<(Option<CustomMetadata>, &[u8])> {
    let v = cm.value().as_ref();
    let rest = v.strip_prefix(MAGIC)?;
    let mut at = 0;
    let inner = match get_varint(rest, &mut at)? {
        0 => None,
        n => {
            let len = usize::try_from(n - 1).ok()?;
            let end = at.checked_add(len)?;
            let bytes = rest.get(at..end)?;
            at = end;
            Some(CustomMetadata::new(bytes.to_vec()))
        }
    };
    Some((inner, rest.get(at..)?))
}

/// `meta` as the backend recorded it: without the chunk map around its custom metadata.
pub(crate) fn backend_view(meta: &RemoteLogSegmentMetadata) -> Cow<'_, RemoteLogSegmentMetadata> {
    match meta.custom_metadata().and_then(split) {
        Some((inner, _)) => Cow::Owned(meta.with_custom_metadata(inner)),
        None => Cow::Borrowed(meta),
    }
}

/// The chunk map recorded on `meta`, checked: ascending seqs within the segment's and
/// positions within its size. `None` without one or when it fails a check.
pub(crate) fn of(meta: &RemoteLogSegmentMetadata) -> Option<ChunkMap> {
    let (_, body) = split(meta.custom_metadata()?)?;
    let mut at = 0;
    let n = get_varint(body, &mut at)?;
    let mut map = ChunkMap::with_capacity(usize::try_from(n.min(4096)).ok()?);
    let (mut seq, mut pos) = (meta.start_offset(), 0u64);
    for _ in 0..n {
        let dpos = get_varint(body, &mut at)?;
        let dseq = get_varint(body, &mut at)?;
        if dpos == 0 || dseq == 0 {
            return None;
        }
        pos = pos.checked_add(dpos)?;
        seq = seq.checked_add(dseq)?;
        if pos >= meta.segment_size_in_bytes() || seq > meta.end_offset() {
            return None;
        }
        map.push((seq, pos));
    }
    (at == body.len()).then_some(map)
}

/// Where to start decoding for `seq`: the last map entry at or below it, else the segment's
/// first frame.
pub(crate) fn floor(map: &[(u64, u64)], start_seq: u64, seq: u64) -> (u64, u64) {
    let i = map.partition_point(|&(s, _)| s <= seq);
    match i.checked_sub(1).and_then(|i| map.get(i)) {
        Some(&entry) => entry,
        None => (start_seq, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_thins_to_fit_and_keeps_the_backend_part() {
        let map: ChunkMap = (1..=64u64)
            .map(|c| (10 + c * 1000, c * (1 << 20) + 17))
            .collect();
        let inner = Some(CustomMetadata::new(
            b"s3v1\x01\x02\x03\x04\x05\x06\x07\x08".to_vec(),
        ));
        let cm = wrap(inner.clone(), 10, &map, 128).unwrap();
        assert!(cm.value().len() <= 128);
        let (back, body) = split(&cm).unwrap();
        assert_eq!(back, inner);
        assert!(!body.is_empty());
        assert_eq!(wrap(inner.clone(), 10, &map, 10), inner);
        let empty = wrap(None, 10, &[], 128).unwrap();
        assert_eq!(split(&empty).unwrap().0, None);
    }

    #[test]
    fn varints_round_trip_and_floor_picks_the_entry_below() {
        let mut out = Vec::new();
        for v in [0, 1, 127, 128, 1 << 40, u64::MAX] {
            put_varint(&mut out, v);
        }
        let mut at = 0;
        for v in [0, 1, 127, 128, 1 << 40, u64::MAX] {
            assert_eq!(get_varint(&out, &mut at), Some(v));
        }
        let map = vec![(100, 4096), (200, 8192)];
        assert_eq!(floor(&map, 1, 50), (1, 0));
        assert_eq!(floor(&map, 1, 100), (100, 4096));
        assert_eq!(floor(&map, 1, 250), (200, 8192));
    }
}
