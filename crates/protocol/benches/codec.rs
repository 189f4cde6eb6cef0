//! Encode/decode throughput of a typical message (1 KiB value, 3 headers).
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
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

criterion_group!(benches, codec);
criterion_main!(benches);
