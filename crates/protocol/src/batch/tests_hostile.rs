//! Batches with a valid CRC whose contents lie, hostile lengths and decompression bombs.

use bytes::Bytes;

use super::tests::{enabled_codecs, read_all, reseal, sample_records};
use super::varint::{put_varint, put_varlong};
use super::*;

/// A batch around `payload` with the given header fields and a valid CRC.
fn raw_batch(attributes: i16, count: i32, last_delta: i32, max_ts: i64, payload: &[u8]) -> Bytes {
    let mut out = Vec::new();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((HEADER_LEN - LOG_OVERHEAD + payload.len()) as i32).to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&last_delta.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes()); // baseTimestamp
    out.extend_from_slice(&max_ts.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(payload);
    reseal(&mut out);
    Bytes::from(out)
}

/// A record whose body is given raw, with a correct length prefix.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i32);
    out.extend_from_slice(body);
    out
}

/// A well-formed record body: timestamp delta 0, the given offset delta, key "k", value "v".
fn body(offset_delta: i32) -> Vec<u8> {
    let mut b = vec![0];
    put_varlong(&mut b, 0);
    put_varint(&mut b, offset_delta);
    b.extend_from_slice(&[2, b'k', 2, b'v', 0]);
    b
}

fn read_err(bytes: &Bytes) -> BatchError {
    read_all(bytes).unwrap_err()
}

#[test]
fn raw_batches_built_here_are_valid() {
    let payload = [framed(&body(0)), framed(&body(1))].concat();
    let (_, read) = read_all(&raw_batch(0, 2, 1, 0, &payload)).unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(read[1].key.as_deref(), Some(&b"k"[..]));
}

#[test]
fn lying_header_counts_are_caught() {
    for codec in enabled_codecs() {
        let spec = BatchSpec {
            compression: codec,
            ..BatchSpec::new(0)
        };
        let bytes = encode_batch(&spec, &sample_records(false)).unwrap();
        let n = sample_records(false).len();
        let edit = |at: usize, value: i32| {
            let mut buf = bytes.to_vec();
            buf[at..at + 4].copy_from_slice(&value.to_be_bytes());
            reseal(&mut buf);
            read_err(&Bytes::from(buf))
        };
        let count = n as i32;
        assert_eq!(
            edit(57, count + 1),
            BatchError::RecordCount {
                header: count + 1,
                found: n
            }
        );
        assert_eq!(
            edit(57, count - 1),
            BatchError::RecordCount {
                header: count - 1,
                found: n
            }
        );
        assert_eq!(
            edit(57, i32::MAX),
            BatchError::RecordCount {
                header: i32::MAX,
                found: n
            }
        );
        assert!(matches!(
            edit(57, -1),
            BatchError::Length {
                field: "recordCount",
                at: 57,
                ..
            }
        ));
        assert_eq!(
            edit(23, count + 3),
            BatchError::LastOffsetDelta {
                header: count + 3,
                found: count - 1
            }
        );
        assert_eq!(
            edit(23, -1),
            BatchError::LastOffsetDelta {
                header: -1,
                found: count - 1
            }
        );
        // maxTimestamp's low four bytes.
        let mut buf = bytes.to_vec();
        buf[42] ^= 1;
        reseal(&mut buf);
        assert!(matches!(
            read_err(&Bytes::from(buf)),
            BatchError::Timestamp { .. }
        ));
    }
}

#[test]
fn offset_deltas_must_run_in_order() {
    let payload = [framed(&body(0)), framed(&body(2)), framed(&body(1))].concat();
    let second_at = HEADER_LEN + framed(&body(0)).len() + 3; // length, attributes, timestamp
    assert_eq!(
        read_err(&raw_batch(0, 3, 2, 0, &payload)),
        BatchError::OffsetDelta {
            expected: 1,
            found: 2,
            at: second_at
        }
    );
}

#[test]
fn hostile_lengths_are_refused() {
    let with_key_len = |len: i32| {
        let mut b = vec![0, 0, 0];
        put_varint(&mut b, len);
        b.extend_from_slice(&[2, b'v', 0]);
        raw_batch(0, 1, 0, 0, &framed(&b))
    };
    // The key length sits after length (1), attributes, timestamp and offset deltas.
    let key_at = HEADER_LEN + 4;
    assert_eq!(
        read_err(&with_key_len(i32::MAX)),
        BatchError::Length {
            field: "keyLength",
            value: i64::from(i32::MAX),
            at: key_at
        }
    );
    assert_eq!(
        read_err(&with_key_len(-2)),
        BatchError::Length {
            field: "keyLength",
            value: -2,
            at: key_at
        }
    );

    // A record length past the end of the records.
    let mut long = Vec::new();
    put_varint(&mut long, 1_000_000);
    long.extend_from_slice(&body(0));
    assert!(matches!(
        read_err(&raw_batch(0, 1, 0, 0, &long)),
        BatchError::Length {
            field: "length",
            value: 1_000_000,
            at: 61
        }
    ));
    // A record length one byte short of its fields, and one byte past them.
    let mut short = Vec::new();
    put_varint(&mut short, body(0).len() as i32 - 1);
    short.extend_from_slice(&body(0));
    assert!(matches!(
        read_err(&raw_batch(0, 1, 0, 0, &short)),
        BatchError::Truncated { .. } | BatchError::Length { .. }
    ));
    let padded = framed(&[body(0), vec![0]].concat());
    assert!(matches!(
        read_err(&raw_batch(0, 1, 0, 0, &padded)),
        BatchError::Length {
            field: "length",
            at: 61,
            ..
        }
    ));

    // An over-long varint for the offset delta.
    let mut b = vec![0, 0];
    b.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]);
    b.extend_from_slice(&[1, 1, 0]);
    assert_eq!(
        read_err(&raw_batch(0, 1, 0, 0, &framed(&b))),
        BatchError::Varint { at: 63 + 1 }
    );

    // A header count no record could hold, a null header name, a name that is not UTF-8.
    let with_headers = |headers: &[u8]| {
        let mut b = vec![0, 0, 0, 1, 1];
        b.extend_from_slice(headers);
        raw_batch(0, 1, 0, 0, &framed(&b))
    };
    let mut many = Vec::new();
    put_varint(&mut many, 1_000_000);
    assert!(matches!(
        read_err(&with_headers(&many)),
        BatchError::Length {
            field: "headerCount",
            value: 1_000_000,
            ..
        }
    ));
    assert!(matches!(
        read_err(&with_headers(&[2, 1, 1])),
        BatchError::Length {
            field: "headerKeyLength",
            value: -1,
            ..
        }
    ));
    assert_eq!(
        read_err(&with_headers(&[2, 4, 0xff, 0xfe, 1])),
        BatchError::Utf8 { at: 61 + 1 + 7 }
    );
}

#[test]
fn hostile_headers_are_refused() {
    let good = raw_batch(0, 1, 0, 0, &framed(&body(0)));
    let edit = |at: usize, bytes: &[u8], seal: bool| {
        let mut buf = good.to_vec();
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        if seal {
            reseal(&mut buf);
        }
        read_err(&Bytes::from(buf))
    };
    assert_eq!(edit(16, &[1], false), BatchError::BadMagic { found: 1 });
    assert_eq!(
        edit(8, &40i32.to_be_bytes(), false),
        BatchError::Length {
            field: "batchLength",
            value: 40,
            at: 8
        }
    );
    assert!(matches!(
        edit(8, &(-5i32).to_be_bytes(), false),
        BatchError::Length {
            field: "batchLength",
            ..
        }
    ));
    assert_eq!(
        edit(8, &i32::MAX.to_be_bytes(), false),
        BatchError::Truncated {
            needed: i32::MAX as usize + 12,
            at: 0
        }
    );
    assert_eq!(
        edit(22, &[5], true),
        BatchError::UnsupportedCompression { code: 5 }
    );
    let mut near_max = good.to_vec();
    set_base_offset(&mut near_max, i64::MAX).unwrap();
    assert!(read_all(&Bytes::from(near_max)).is_ok());
    let payload = [framed(&body(0)), framed(&body(1))].concat();
    let mut overflow = raw_batch(0, 2, 1, 0, &payload).to_vec();
    set_base_offset(&mut overflow, i64::MAX).unwrap();
    assert!(matches!(
        read_err(&Bytes::from(overflow)),
        BatchError::Length {
            field: "lastOffsetDelta",
            at: 23,
            ..
        }
    ));
}

#[test]
fn timestamps_that_overflow_are_refused() {
    let mut b = vec![0];
    put_varlong(&mut b, i64::MAX);
    b.extend_from_slice(&[0, 1, 1, 0]);
    let mut buf = raw_batch(0, 1, 0, 0, &framed(&b)).to_vec();
    buf[27..35].copy_from_slice(&1i64.to_be_bytes()); // baseTimestamp 1
    reseal(&mut buf);
    assert!(matches!(
        read_err(&Bytes::from(buf)),
        BatchError::Length {
            field: "timestampDelta",
            at: 63,
            ..
        }
    ));
}

#[cfg(not(feature = "gzip"))]
#[test]
fn a_codec_not_built_in_is_named() {
    let spec = BatchSpec {
        compression: Compression::Gzip,
        ..BatchSpec::new(0)
    };
    assert_eq!(
        encode_batch(&spec, &[]),
        Err(BatchError::CodecDisabled {
            codec: Compression::Gzip
        })
    );
    let bytes = raw_batch(1, 0, -1, -1, &[0x1f, 0x8b]);
    let view = BatchView::parse(&bytes).unwrap();
    assert_eq!(view.header().compression, Compression::Gzip);
    assert!(matches!(
        view.records(1 << 20),
        Err(BatchError::CodecDisabled {
            codec: Compression::Gzip
        })
    ));
}

/// The process's peak resident memory, in bytes.
#[cfg(any(
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A batch of `count` copies of `member` as its compressed records, holding `total` bytes
/// once decompressed; reading it under a 1 MiB limit is `TooLarge`, and memory stays far below
/// what the records would take.
#[cfg(any(
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
fn assert_bomb_refused(codec: Compression, prefix: &[u8], member: &[u8], count: usize) {
    let mut payload = prefix.to_vec();
    for _ in 0..count {
        payload.extend_from_slice(member);
    }
    let bytes = raw_batch(i16::from(codec.code()), 1, 0, 0, &payload);
    let view = BatchView::parse(&bytes).unwrap();
    let limit = 1 << 20;
    assert_eq!(
        view.records(limit).unwrap_err(),
        BatchError::TooLarge { limit },
        "{codec}"
    );
    // Nothing near the decompressed size was ever resident.
    assert!(peak_rss() < 512 << 20, "{codec}: peak RSS {}", peak_rss());
}

#[cfg(feature = "zstd")]
#[test]
fn zstd_bomb_is_refused() {
    // 1024 frames of 1 MiB of zeros: 1 GiB.
    let member = ::zstd::bulk::compress(&vec![0u8; 1 << 20], 3).unwrap();
    assert_bomb_refused(Compression::Zstd, &[], &member, 1024);
}

#[cfg(feature = "gzip")]
#[test]
fn gzip_bomb_is_refused() {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&vec![0u8; 1 << 20]).unwrap();
    let member = enc.finish().unwrap();
    // 1024 members of 1 MiB of zeros: 1 GiB.
    assert_bomb_refused(Compression::Gzip, &[], &member, 1024);
    let garbage = raw_batch(1, 1, 0, 0, b"not gzip at all");
    assert!(matches!(
        read_err(&garbage),
        BatchError::Decompress {
            codec: Compression::Gzip,
            ..
        }
    ));
}

#[cfg(feature = "lz4")]
#[test]
fn lz4_bomb_is_refused() {
    use std::io::Write;
    let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
    enc.write_all(&vec![0u8; 1 << 20]).unwrap();
    let member = enc.finish().unwrap();
    assert_bomb_refused(Compression::Lz4, &[], &member, 1024);
}

#[cfg(feature = "snappy")]
#[test]
fn snappy_bombs_and_damage_are_refused() {
    let block = snap::raw::Encoder::new()
        .compress_vec(&[0u8; 32 * 1024])
        .unwrap();
    let mut member = (block.len() as u32).to_be_bytes().to_vec();
    member.extend_from_slice(&block);
    let header = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    // 4096 blocks of 32 KiB: 128 MiB.
    assert_bomb_refused(Compression::Snappy, header, &member, 4096);
    // A plain block that declares 1 GiB is refused before anything is allocated for it.
    let mut plain = Vec::new();
    put_varint(&mut plain, 1 << 29); // zigzag doubles: the varint holds 2^30
    plain.extend_from_slice(&[0; 8]);
    assert_bomb_refused(Compression::Snappy, &[], &plain, 1);
    // A xerial stream cut inside a block, or inside a block length.
    let mut cut = header.to_vec();
    cut.extend_from_slice(&member[..member.len() - 1]);
    let damaged = |payload: &[u8]| read_err(&raw_batch(2, 1, 0, 0, payload));
    assert!(matches!(
        damaged(&cut),
        BatchError::Decompress {
            codec: Compression::Snappy,
            ..
        }
    ));
    assert!(matches!(
        damaged(&[header.as_slice(), &[0, 0]].concat()),
        BatchError::Decompress { .. }
    ));
    // A plain (unframed) block of records reads like a framed one.
    let records = super::tests::sample_records(true);
    let framed = encode_batch(
        &BatchSpec {
            compression: Compression::Snappy,
            ..BatchSpec::new(0)
        },
        &records,
    )
    .unwrap();
    let plain_records = snap::raw::Encoder::new()
        .compress_vec(&encode_batch(&BatchSpec::new(0), &records).unwrap()[HEADER_LEN..])
        .unwrap();
    let mut plain_batch = framed[..HEADER_LEN].to_vec();
    plain_batch.extend_from_slice(&plain_records);
    let len = (plain_batch.len() - LOG_OVERHEAD) as i32;
    plain_batch[8..12].copy_from_slice(&len.to_be_bytes());
    reseal(&mut plain_batch);
    assert_eq!(
        read_all(&Bytes::from(plain_batch)).unwrap().1,
        read_all(&framed).unwrap().1
    );
}

/// Each decompressor reads whole streams only: a stream cut anywhere is an error (snappy's
/// xerial framing has no end mark, so a cut between its blocks reads the blocks before it),
/// streams concatenated read in turn, and bytes after the last stream are an error.
#[test]
fn cut_and_concatenated_streams() {
    use super::codec::{compress, decompress};
    let body = encode_batch(&BatchSpec::new(0), &sample_records(true))
        .unwrap()
        .slice(HEADER_LEN..);
    for codec in enabled_codecs() {
        if codec == Compression::None {
            continue;
        }
        let full = compress(codec, &body).unwrap();
        assert_eq!(decompress(codec, &full, 1 << 20).unwrap(), body, "{codec}");
        let step = (full.len() / 300).max(1);
        for cut in (0..full.len()).step_by(step).chain([full.len() - 1]) {
            match decompress(codec, &full[..cut], 1 << 20) {
                Err(BatchError::Decompress { codec: c, .. }) => assert_eq!(c, codec),
                Err(other) => panic!("{codec} cut at {cut}: {other}"),
                Ok(prefix) => {
                    assert_eq!(codec, Compression::Snappy, "{codec} cut at {cut} read");
                    assert!(body.starts_with(&prefix) && prefix.len() % (32 * 1024) == 0);
                }
            }
        }
        let mut junk = full.clone();
        junk.extend_from_slice(b"junk");
        assert!(
            matches!(
                decompress(codec, &junk, 1 << 20),
                Err(BatchError::Decompress { .. })
            ),
            "{codec} with trailing junk"
        );
        if codec != Compression::Snappy {
            let twice = [full.as_slice(), &full].concat();
            let read = decompress(codec, &twice, 1 << 20).unwrap();
            assert_eq!(
                read,
                [body.as_ref(), &body].concat(),
                "{codec} concatenated"
            );
        }
    }
}
