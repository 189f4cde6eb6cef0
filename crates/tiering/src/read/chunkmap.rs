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

/// Splits recorded custom metadata into the backend's part (borrowed: nothing is copied) and
/// the chunk map; `None` when it holds no (well-formed) map.
fn split(cm: &CustomMetadata) -> Option<(Option<&[u8]>, &[u8])> {
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
            Some(bytes)
        }
    };
    Some((inner, rest.get(at..)?))
}

/// `meta` as the backend recorded it: without the chunk map around its custom metadata.
pub(crate) fn backend_view(meta: &RemoteLogSegmentMetadata) -> Cow<'_, RemoteLogSegmentMetadata> {
    match meta.custom_metadata().and_then(split) {
        Some((inner, _)) => {
            Cow::Owned(meta.with_custom_metadata(inner.map(|b| CustomMetadata::new(b.to_vec()))))
        }
        None => Cow::Borrowed(meta),
    }
}

/// Walks the chunk map recorded on `meta` in order, checking it as it goes: ascending seqs
/// within the segment's and positions within its size, and nothing after the last entry.
/// `None` without a map or when it fails a check (after `visit` saw the entries before the
/// failure). Allocates nothing, whatever the backend's part of the custom metadata.
fn walk(meta: &RemoteLogSegmentMetadata, mut visit: impl FnMut(u64, u64)) -> Option<()> {
    let (_, body) = split(meta.custom_metadata()?)?;
    let mut at = 0;
    let n = get_varint(body, &mut at)?;
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
        visit(seq, pos);
    }
    (at == body.len()).then_some(())
}

/// Where to start decoding for `seq` by the chunk map recorded on `meta`: its last entry at or
/// below `seq`, else the segment's first frame. `None` when `meta` has no map or its map fails
/// a check (ascending seqs within the segment's, positions within its size): the whole map is
/// checked, as when it is decoded, but nothing is allocated, so a point read costs the same
/// whatever the backend keeps in its part of the custom metadata.
///
/// With the floor comes the position of the map's first entry above `seq`: the batch holding
/// `seq` ends there at the latest (`None`: no entry above it, the segment's end bounds it).
pub(crate) fn bounds_of(
    meta: &RemoteLogSegmentMetadata,
    seq: u64,
) -> Option<((u64, u64), Option<u64>)> {
    let mut found = (meta.start_offset(), 0);
    let mut above = None;
    walk(meta, |s, p| {
        if s <= seq {
            found = (s, p);
        } else if above.is_none() {
            above = Some(p);
        }
    })?;
    Some((found, above))
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
        assert_eq!(back, inner.as_ref().map(|cm| cm.value().as_ref()));
        assert!(!body.is_empty());
        assert_eq!(wrap(inner.clone(), 10, &map, 10), inner);
        let empty = wrap(None, 10, &[], 128).unwrap();
        assert_eq!(split(&empty).unwrap().0, None);
    }

    #[test]
    fn varints_round_trip() {
        let mut out = Vec::new();
        for v in [0, 1, 127, 128, 1 << 40, u64::MAX] {
            put_varint(&mut out, v);
        }
        let mut at = 0;
        for v in [0, 1, 127, 128, 1 << 40, u64::MAX] {
            assert_eq!(get_varint(&out, &mut at), Some(v));
        }
    }

    /// A segment of seqs 1..=1000 in 10 000 bytes carrying `map` (and `inner`, the backend's
    /// part) in its custom metadata.
    fn meta_with(inner: Option<CustomMetadata>, map: &[(u64, u64)]) -> RemoteLogSegmentMetadata {
        use krabka_remote_storage::{RemoteLogSegmentId, TopicIdPartition, Uuid};
        let id = RemoteLogSegmentId::generate(TopicIdPartition::new(Uuid::new_v4(), "t", 0));
        let meta = RemoteLogSegmentMetadata::builder(id, 1, 1000)
            .segment_size_in_bytes(10_000)
            .build()
            .unwrap();
        meta.with_custom_metadata(wrap(inner, 1, map, 128))
    }

    #[test]
    fn floor_picks_the_entry_below_whatever_the_backend_part() {
        let map = vec![(100, 4096), (200, 8192)];
        for inner in [
            None,
            Some(CustomMetadata::new(b"s3v1\x01\x02\x03\x04".to_vec())),
        ] {
            let meta = meta_with(inner.clone(), &map);
            assert_eq!(bounds_of(&meta, 1), Some(((1, 0), Some(4096))));
            assert_eq!(bounds_of(&meta, 99), Some(((1, 0), Some(4096))));
            assert_eq!(bounds_of(&meta, 100), Some(((100, 4096), Some(8192))));
            assert_eq!(bounds_of(&meta, 199), Some(((100, 4096), Some(8192))));
            assert_eq!(bounds_of(&meta, 250), Some(((200, 8192), None)));
            // The backend still gets its own part back, exactly.
            assert_eq!(backend_view(&meta).custom_metadata(), inner.as_ref());
            // No map: positions come from elsewhere.
            let plain = meta.with_custom_metadata(inner);
            assert_eq!(bounds_of(&plain, 150), None);
        }
        // A map past the segment's end (in seqs or bytes), or not ascending, is ignored whole,
        // also for a seq below the bad entry.
        for bad in [
            vec![(100, 4096), (1001, 8192)],
            vec![(100, 4096), (200, 10_000)],
            vec![(100, 4096), (100, 8192)],
        ] {
            let meta = meta_with(None, &bad);
            assert_eq!(bounds_of(&meta, 150), None, "{bad:?}");
        }
        // Trailing bytes after the map.
        let meta = meta_with(None, &map);
        let mut v = meta.custom_metadata().unwrap().value().to_vec();
        v.push(0);
        let meta = meta.with_custom_metadata(Some(CustomMetadata::new(v)));
        assert_eq!(bounds_of(&meta, 150), None);
    }
}
