//! `FsRemoteStorage` against the raw filesystem calls it is built on:
//! - copy of a 64 MiB segment (plus its indexes) vs `std::fs::copy` of the same files (with and
//!   without the fsyncs the backend does for atomicity);
//! - fetch of 1 MiB from a 64 MiB segment vs a raw positioned read.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::*;

const SEGMENT: usize = 64 * 1024 * 1024;
const FETCH: usize = 1024 * 1024;

struct Fixture {
    _local: tempfile::TempDir,
    _remote: tempfile::TempDir,
    copies: tempfile::TempDir,
    data: LogSegmentData,
    metadata: RemoteLogSegmentMetadata,
    rsm: FsRemoteStorage,
}

fn fixture() -> Fixture {
    // Next to the target dir, on the same filesystem a deployment would use, not /tmp.
    let base = std::env::var_os("KRABKA_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let local = tempfile::tempdir_in(&base).unwrap();
    let remote = tempfile::tempdir_in(&base).unwrap();
    let copies = tempfile::tempdir_in(&base).unwrap();
    let mut bytes = vec![0u8; SEGMENT];
    testkit_fill(&mut bytes);
    let p = |n: &str| local.path().join(n);
    std::fs::write(p("s.log"), &bytes).unwrap();
    std::fs::write(p("s.index"), vec![1u8; 10 * 1024 * 1024 / 1024]).unwrap();
    std::fs::write(p("s.timeindex"), vec![2u8; 15 * 1024 * 1024 / 1024]).unwrap();
    let mut data = LogSegmentData::new(p("s.log"), p("s.index"), p("s.timeindex"));
    data.leader_epoch_index = bytes::Bytes::from_static(b"0\n1\n0 0\n");
    let tp = TopicIdPartition::new(Uuid::new_v4(), "bench", 0);
    let metadata = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 99_999)
        .segment_size_in_bytes(SEGMENT as u64)
        .build()
        .unwrap();
    let rsm = FsRemoteStorage::new(remote.path()).unwrap();
    Fixture {
        _local: local,
        _remote: remote,
        copies,
        data,
        metadata,
        rsm,
    }
}

fn testkit_fill(buf: &mut [u8]) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

fn copy(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group("copy_64MiB_segment");
    g.throughput(Throughput::Bytes(SEGMENT as u64));
    g.sample_size(10);
    g.bench_function("FsRemoteStorage::copy_log_segment_data", |b| {
        b.iter(|| f.rsm.copy_log_segment_data(&f.metadata, &f.data).unwrap())
    });
    let files = [
        &f.data.log_segment,
        &f.data.offset_index,
        &f.data.time_index,
    ];
    g.bench_function("std::fs::copy", |b| {
        b.iter(|| {
            for (i, src) in files.iter().enumerate() {
                std::fs::copy(src, f.copies.path().join(i.to_string())).unwrap();
            }
        })
    });
    g.bench_function("std::fs::copy+fsync", |b| {
        b.iter(|| {
            for (i, src) in files.iter().enumerate() {
                let dst = f.copies.path().join(i.to_string());
                std::fs::copy(src, &dst).unwrap();
                File::open(&dst).unwrap().sync_all().unwrap();
            }
        })
    });
    g.finish();
}

fn fetch(c: &mut Criterion) {
    let f = fixture();
    f.rsm.copy_log_segment_data(&f.metadata, &f.data).unwrap();
    let start = (SEGMENT / 2) as u32;
    let end = start + FETCH as u32 - 1;
    let remote_log = f.rsm.root().join(layout::log_key(&f.metadata).unwrap());
    let mut g = c.benchmark_group("fetch_1MiB_of_64MiB");
    g.throughput(Throughput::Bytes(FETCH as u64));
    g.bench_function("FsRemoteStorage::fetch_log_segment", |b| {
        b.iter(|| {
            black_box(
                f.rsm
                    .fetch_log_segment(&f.metadata, start, Some(end))
                    .unwrap(),
            )
        })
    });
    let open = File::open(&remote_log).unwrap();
    g.bench_function("pread (file already open)", |b| {
        b.iter(|| {
            let mut buf = vec![0u8; FETCH];
            open.read_exact_at(&mut buf, u64::from(start)).unwrap();
            black_box(buf)
        })
    });
    g.bench_function("open+pread", |b| {
        b.iter(|| {
            let file = File::open(&remote_log).unwrap();
            let mut buf = vec![0u8; FETCH];
            file.read_exact_at(&mut buf, u64::from(start)).unwrap();
            black_box(buf)
        })
    });
    g.finish();
}

fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! { name = benches; config = short(); targets = copy, fetch }
criterion_main!(benches);
