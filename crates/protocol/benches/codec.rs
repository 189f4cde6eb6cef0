//! Encode/decode throughput of a typical message (1 KiB value, 3 headers), and the encoding of
//! a log append's batch of 100 records as `Log::append_batch` does it.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use krabka_protocol::batch::{Compression, crc32c, encode_messages, encode_messages_split};
use krabka_protocol::{Bytes, Message};
use std::hint::black_box;

fn message() -> Message {
    Message::new(vec![0x5au8; 1024])
        .with_key("user-000042")
        .with_timestamp(1_700_000_000_000)
        .with_header("trace-id", "4bf92f3577b34da6a3ce929d0e0e4736")
        .with_header("content-type", "application/json")
        .with_header("source", "bench")
}

fn codec(c: &mut Criterion) {
    let m = message();
    let encoded = m.to_vec();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Bytes(encoded.len() as u64));
    g.bench_function("encode", |b| {
        let mut buf = Vec::with_capacity(encoded.len());
        b.iter(|| {
            buf.clear();
            black_box(&m).encode(&mut buf);
            black_box(buf.len())
        })
    });
    g.bench_function("decode_copy", |b| {
        b.iter(|| Message::decode(black_box(&encoded)))
    });
    let shared = Bytes::from(encoded.clone());
    g.bench_function("decode_zero_copy", |b| {
        b.iter(|| Message::decode_bytes(black_box(&shared)))
    });
    g.finish();
}

/// 100 records of `vlen`-byte values, no key or headers, timestamps 1 ms apart: the bench's
/// `append_batch` workload.
fn batch_of(vlen: usize) -> Vec<Message> {
    (0..100u8)
        .map(|i| Message::new(vec![i; vlen]).with_timestamp(1_700_000_000_000 + i64::from(i)))
        .collect()
}

fn batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch_of_100");
    for vlen in [100usize, 1024, 16 * 1024] {
        let msgs = batch_of(vlen);
        g.throughput(Throughput::Bytes((vlen * msgs.len()) as u64));
        // As the log appends them uncompressed: values of 4 KiB or more left out of the buffer.
        g.bench_function(format!("encode_split/{vlen}"), |b| {
            let (mut buf, mut pieces) = (Vec::new(), Vec::new());
            b.iter(|| {
                buf.clear();
                pieces.clear();
                let n = encode_messages_split(
                    &mut buf,
                    &mut pieces,
                    0,
                    black_box(&msgs),
                    0,
                    1 << 24,
                    4096,
                );
                black_box((n, buf.len()))
            })
        });
        g.bench_function(format!("encode/{vlen}"), |b| {
            let mut buf = Vec::new();
            b.iter(|| {
                buf.clear();
                let n = encode_messages(&mut buf, 0, black_box(&msgs), Compression::None, 1 << 24);
                black_box((n, buf.len()))
            })
        });
        // The least any encoder of these records does: copy their values into one buffer.
        g.bench_function(format!("copy_values_only/{vlen}"), |b| {
            let mut buf = Vec::new();
            b.iter(|| {
                buf.clear();
                for m in black_box(&msgs) {
                    buf.extend_from_slice(&m.value);
                }
                black_box(buf.len())
            })
        });
        // The format floor's own work on the same batch: its CRC-32C alone.
        let mut whole = Vec::new();
        let _ = encode_messages(&mut whole, 0, &msgs, Compression::None, 1 << 24);
        g.bench_function(format!("crc_only/{vlen}"), |b| {
            b.iter(|| crc32c(black_box(whole.get(21..).unwrap_or_default())))
        });
    }
    g.finish();
}

criterion_group!(benches, codec, batch);
criterion_main!(benches);
