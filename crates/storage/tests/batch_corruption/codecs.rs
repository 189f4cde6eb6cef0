//! Compressed record sections made by hand, byte for byte, for each of Kafka's codecs: a batch
//! that holds given bytes as they are (zstd raw blocks, gzip stored blocks, snappy literals, an
//! LZ4 uncompressed block), a frame that decompresses to far more than it holds (zstd RLE
//! blocks, LZ4 long matches, a snappy length), and bytes that are no batch at all.

use krabka_storage::Compression;

/// A zstd batch (no content size, no checksum, a 128 KiB window) of `blocks`, each a block
/// type (0 raw, 1 RLE), its regenerated size and its content.
fn zstd_frame(blocks: &[(u32, u32, &[u8])]) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 7 << 3];
    for (i, &(kind, size, content)) in blocks.iter().enumerate() {
        let last = u32::from(i + 1 == blocks.len());
        let header = last | kind << 1 | size << 3;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(content);
    }
    out
}

/// A zstd frame holding `data` in raw blocks.
pub fn zstd_raw(data: &[u8]) -> Vec<u8> {
    let blocks: Vec<(u32, u32, &[u8])> = data
        .chunks(128 << 10)
        .map(|c| (0, c.len() as u32, c))
        .collect();
    zstd_frame(&blocks)
}

/// A zstd batch of `blocks` RLE blocks of 128 KiB of zeros: 4 bytes each.
pub fn zstd_bomb(blocks: usize) -> Vec<u8> {
    zstd_frame(&vec![(1, 128 << 10, &[0u8][..]); blocks])
}

/// A gzip member holding `data` in stored deflate blocks.
pub fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let chunks: Vec<&[u8]> = data.chunks(0xffff).collect();
    for (i, c) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = c.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(c);
    }
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A plain snappy block of literals holding `data`, whose preamble declares `declared` bytes.
fn snappy_literals(data: &[u8], declared: u64) -> Vec<u8> {
    let mut out = Vec::new();
    uvarint(&mut out, declared);
    for c in data.chunks(60) {
        out.push(((c.len() - 1) as u8) << 2);
        out.extend_from_slice(c);
    }
    out
}

/// A plain snappy block holding `data`.
pub fn snappy_plain(data: &[u8]) -> Vec<u8> {
    snappy_literals(data, data.len() as u64)
}

/// A plain snappy block that declares `declared` bytes and holds one.
pub fn snappy_bomb(declared: u64) -> Vec<u8> {
    snappy_literals(&[0], declared)
}

/// XXH32 of fewer than 16 bytes (the LZ4 batch's header checksum).
fn xxh32_short(input: &[u8], seed: u32) -> u32 {
    const P1: u32 = 2_654_435_761;
    const P2: u32 = 2_246_822_519;
    const P3: u32 = 3_266_489_917;
    const P4: u32 = 668_265_263;
    const P5: u32 = 374_761_393;
    assert!(input.len() < 16);
    let mut h = seed.wrapping_add(P5).wrapping_add(input.len() as u32);
    let mut words = input.chunks_exact(4);
    for w in &mut words {
        let w = u32::from_le_bytes(w.try_into().unwrap());
        h = h
            .wrapping_add(w.wrapping_mul(P3))
            .rotate_left(17)
            .wrapping_mul(P4);
    }
    for &b in words.remainder() {
        h = h
            .wrapping_add(u32::from(b).wrapping_mul(P5))
            .rotate_left(11)
            .wrapping_mul(P1);
    }
    h ^= h >> 15;
    h = h.wrapping_mul(P2);
    h ^= h >> 13;
    h = h.wrapping_mul(P3);
    h ^ (h >> 16)
}

/// An LZ4 batch (independent blocks of at most 4 MiB, no checksums) of `blocks`, each
/// compressed (`true`) or stored, with its bytes.
fn lz4_frame(blocks: &[(bool, &[u8])]) -> Vec<u8> {
    let descriptor = [0x60, 0x70];
    let mut out = vec![0x04, 0x22, 0x4d, 0x18];
    out.extend_from_slice(&descriptor);
    out.push((xxh32_short(&descriptor, 0) >> 8) as u8);
    for &(compressed, data) in blocks {
        let size = data.len() as u32 | if compressed { 0 } else { 1 << 31 };
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(data);
    }
    out.extend_from_slice(&0u32.to_le_bytes());
    out
}

/// An LZ4 frame holding `data` in one uncompressed block.
pub fn lz4_stored(data: &[u8]) -> Vec<u8> {
    assert!(data.len() <= 4 << 20);
    lz4_frame(&[(false, data)])
}

/// An LZ4 batch of `blocks` compressed blocks of about 4 MiB of zeros each (one literal, one
/// match of offset 1 as long as the block allows, five literals): about 16 KiB each.
pub fn lz4_bomb(blocks: usize) -> Vec<u8> {
    let output = (4 << 20) - 16;
    let match_len = output - 1 - 5;
    let mut block = vec![0x1f, 0, 1, 0];
    let mut ext = match_len - 4 - 15;
    while ext >= 255 {
        block.push(255);
        ext -= 255;
    }
    block.push(ext as u8);
    block.push(5 << 4);
    block.extend_from_slice(&[0; 5]);
    lz4_frame(&vec![(true, &block[..]); blocks])
}

/// A frame of `codec` holding `data` as it is.
pub fn stored(codec: Compression, data: &[u8]) -> Vec<u8> {
    match codec {
        Compression::Gzip => gzip_stored(data),
        Compression::Snappy => snappy_plain(data),
        Compression::Lz4 => lz4_stored(data),
        Compression::Zstd => zstd_raw(data),
        other => panic!("{other}"),
    }
}

/// The codecs a batch may be compressed with.
pub const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];
