//! `Log` throughput against plain-file baselines measured in the same run. The baselines
//! write and read the same bytes the log stores (Kafka v2 record batches).
//!
//! Data size: `KRABKA_BENCH_BYTES` (default 64 MiB) for the read and open logs.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use krabka_protocol::Message;
use krabka_protocol::batch::{Compression, encode_messages};
use krabka_storage::segment::{encode_batch_of_one, peek_batch};
use krabka_storage::{Log, Options, SyncPolicy};

const VALUE: usize = 1024;
/// Keep files bounded while appending: trim/truncate (untimed) above this size.
const KEEP: u64 = 256 << 20;

fn data_bytes() -> u64 {
    std::env::var("KRABKA_BENCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64 << 20)
}

fn message(i: u64) -> Message {
    Message::new(vec![(i % 251) as u8; VALUE])
        .with_key(format!("key-{i}"))
        .with_timestamp(i as i64)
}

/// Record 0 as the log stores it: a batch of one.
fn batch_of_one() -> Vec<u8> {
    let mut buf = Vec::new();
    encode_batch_of_one(1, &message(0), &mut buf).unwrap();
    buf
}

/// `msgs` as one batch (base offset 0), as a producer sends it and as the log stores them.
fn one_batch(msgs: &[Message]) -> Vec<u8> {
    let mut buf = Vec::new();
    let taken = encode_messages(&mut buf, 0, msgs, Compression::None, usize::MAX).unwrap();
    assert_eq!(taken, msgs.len());
    buf
}

fn opts(sync: SyncPolicy) -> Options {
    Options {
        sync,
        ..Options::default()
    }
}

fn raw_file(dir: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("raw.bin"))
        .unwrap()
}

fn append(c: &mut Criterion) {
    let one = message(1);
    let one_batch_bytes = batch_of_one();
    let batch: Vec<Message> = (0..100).map(message).collect();
    let batch_bytes = one_batch(&batch);
    let mut g = c.benchmark_group("append");
    for (name, n) in [("1KiB", 1u64), ("batch100", 100)] {
        let data = if n == 1 {
            &one_batch_bytes
        } else {
            &batch_bytes
        };
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_function(BenchmarkId::new("krabka", name), |b| {
            let dir = tempfile::tempdir().unwrap();
            let log = Log::open(dir.path(), opts(SyncPolicy::Never)).unwrap();
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    if n == 1 {
                        black_box(log.append(&one).unwrap());
                    } else {
                        black_box(log.append_batch(&batch).unwrap());
                    }
                }
                let e = t.elapsed();
                if log.bytes() > KEEP {
                    log.trim_over_bytes(0).unwrap();
                }
                e
            })
        });
        if n > 1 {
            // The same batch as a producer sent it: checked and stored without re-encoding.
            g.bench_function(BenchmarkId::new("krabka_raw_batch", name), |b| {
                let dir = tempfile::tempdir().unwrap();
                let log = Log::open(dir.path(), opts(SyncPolicy::Never)).unwrap();
                b.iter_custom(|iters| {
                    let t = Instant::now();
                    for _ in 0..iters {
                        black_box(log.append_raw_batch(&batch_bytes).unwrap());
                    }
                    let e = t.elapsed();
                    if log.bytes() > KEEP {
                        log.trim_over_bytes(0).unwrap();
                    }
                    e
                })
            });
        }
        g.bench_function(BenchmarkId::new("raw_write", name), |b| {
            let dir = tempfile::tempdir().unwrap();
            let mut f = raw_file(dir.path());
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    f.write_all(black_box(data)).unwrap();
                }
                let e = t.elapsed();
                if f.metadata().unwrap().len() > KEEP {
                    f.set_len(0).unwrap();
                }
                e
            })
        });
    }
    g.finish();
}

fn append_sync(c: &mut Criterion) {
    let one_batch_bytes = batch_of_one();
    let mut g = c.benchmark_group("append_sync");
    g.throughput(Throughput::Elements(1));
    for threads in [1usize, 4] {
        g.bench_function(BenchmarkId::new("krabka_every_append", threads), |b| {
            let dir = tempfile::tempdir().unwrap();
            let log = Arc::new(Log::open(dir.path(), opts(SyncPolicy::EveryAppend)).unwrap());
            b.iter_custom(|iters| {
                let per = iters.div_ceil(threads as u64);
                let t = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        let log = Arc::clone(&log);
                        s.spawn(move || {
                            let m = message(7);
                            for _ in 0..per {
                                log.append(&m).unwrap();
                            }
                        });
                    }
                });
                t.elapsed()
                    .mul_f64(iters as f64 / (per * threads as u64) as f64)
            })
        });
    }
    g.bench_function(BenchmarkId::new("raw_write_fdatasync", 1), |b| {
        let dir = tempfile::tempdir().unwrap();
        let mut f = raw_file(dir.path());
        b.iter(|| {
            f.write_all(&one_batch_bytes).unwrap();
            f.sync_data().unwrap();
        })
    });
    g.finish();
}

/// A log of about `bytes` of 1 KiB records, and its record count.
fn build_log(dir: &Path, bytes: u64, max_bytes: u64) -> (Log, u64) {
    build_log_with(
        dir,
        bytes,
        max_bytes,
        Options::default().index_interval_bytes,
    )
}

fn build_log_with(dir: &Path, bytes: u64, max_bytes: u64, interval: u64) -> (Log, u64) {
    let log = Log::open(
        dir,
        Options {
            max_bytes,
            index_interval_bytes: interval,
            ..opts(SyncPolicy::Never)
        },
    )
    .unwrap();
    let batch: Vec<Message> = (0..100).map(message).collect();
    while log.bytes() < bytes {
        log.append_batch(&batch).unwrap();
    }
    let n = log.last_seq();
    (log, n)
}

/// Every batch of the segment files, from their headers: `(first seq, file index, position,
/// length)`.
fn batch_positions(files: &[(File, u64)]) -> Vec<(u64, usize, u64, usize)> {
    let mut out = Vec::new();
    for (fi, (f, size)) in files.iter().enumerate() {
        let mut data = vec![0u8; *size as usize];
        f.read_exact_at(&mut data, 0).unwrap();
        let mut pos = 0usize;
        while let Some((first, _, len)) = data.get(pos..).and_then(peek_batch) {
            out.push((first, fi, pos as u64, len));
            pos += len;
        }
        assert_eq!(pos as u64, *size, "batches of segment {fi}");
    }
    out
}

fn reads(c: &mut Criterion) {
    let bytes = data_bytes();
    let dir = tempfile::tempdir().unwrap();
    let (log, n) = build_log(dir.path(), bytes, (bytes / 4).max(1 << 20));
    let files: Vec<(File, u64)> = log
        .segments()
        .iter()
        .filter(|s| s.size > 0)
        .map(|s| (File::open(&s.log_path).unwrap(), s.size))
        .collect();
    let batches = batch_positions(&files);
    let total: u64 = files.iter().map(|(_, size)| size).sum();
    // Stored bytes per record (batch header shared by the batch's records).
    let per_record = total as f64 / n as f64;
    let chunk = 1000usize;
    let budget = 1usize << 20;

    let mut g = c.benchmark_group("read_seq");
    g.throughput(Throughput::Bytes((chunk as f64 * per_record) as u64));
    g.bench_function("krabka", |b| {
        let mut seq = 1;
        b.iter(|| {
            if seq + chunk as u64 > n {
                seq = 1;
            }
            let r = log.read(seq, chunk).unwrap();
            seq += r.len() as u64;
            black_box(r)
        })
    });
    g.throughput(Throughput::Bytes(budget as u64));
    g.bench_function("krabka_read_batches_1MiB", |b| {
        let mut seq = 1;
        b.iter(|| {
            let got = log.read_batches(seq, budget).unwrap();
            seq = got.next_seq();
            if seq > n {
                seq = 1;
            }
            black_box(got)
        })
    });
    g.bench_function("raw_pread_1MiB", |b| {
        let mut buf = vec![0u8; budget];
        let (mut fi, mut pos) = (0usize, 0u64);
        b.iter(|| {
            if pos >= files[fi].1 {
                fi = (fi + 1) % files.len();
                pos = 0;
            }
            let want = (buf.len() as u64).min(files[fi].1 - pos) as usize;
            files[fi].0.read_exact_at(&mut buf[..want], pos).unwrap();
            pos += want as u64;
            black_box(&buf);
        })
    });
    g.finish();

    // A point read against a bare `pread` of the whole batch holding the record, at a position
    // known in advance: the least a reader that checks the batch's CRC reads.
    let mut g = c.benchmark_group("read_random");
    g.throughput(Throughput::Elements(1));
    g.bench_function("krabka", |b| {
        let mut x = 88172645463325252u64;
        b.iter(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            black_box(log.read(1 + x % n, 1).unwrap())
        })
    });
    g.bench_function("raw_pread_batch", |b| {
        let mut x = 88172645463325252u64;
        let mut buf = vec![0u8; batches.iter().map(|b| b.3).max().unwrap()];
        b.iter(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let seq = 1 + x % n;
            let i = batches.partition_point(|b| b.0 <= seq) - 1;
            let (_, fi, pos, len) = batches[i];
            files[fi].0.read_exact_at(&mut buf[..len], pos).unwrap();
            black_box(&buf);
        })
    });
    g.finish();
}

fn open(c: &mut Criterion) {
    let bytes = data_bytes();
    let seg = (bytes / 32).max(1 << 20);
    let many = tempfile::tempdir().unwrap();
    let one = tempfile::tempdir().unwrap();
    drop(build_log(many.path(), seg * 32, seg));
    drop(build_log(one.path(), seg, seg * 2));
    let mut g = c.benchmark_group("open");
    g.bench_function("krabka_32_segments", |b| {
        b.iter(|| Log::open(many.path(), opts(SyncPolicy::Never)).unwrap())
    });
    g.bench_function("krabka_1_segment", |b| {
        b.iter(|| Log::open(one.path(), opts(SyncPolicy::Never)).unwrap())
    });
    g.finish();
}

/// `verify_segment_files` (every batch's CRC and records, both indexes against the batches) of
/// one closed segment, with the default and a dense index, against reading its `.log`.
fn verify(c: &mut Criterion) {
    let bytes = (data_bytes() / 4).max(1 << 20);
    let mut g = c.benchmark_group("verify_segment");
    g.throughput(Throughput::Bytes(bytes));
    for (name, interval) in [("krabka_default_index", 4096), ("krabka_dense_index", 1)] {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = build_log_with(dir.path(), bytes, bytes, interval);
        log.roll().unwrap();
        let seg = log.segments()[0].clone();
        drop(log);
        g.bench_function(name, |b| {
            b.iter(|| {
                let v = krabka_storage::segment::verify_segment_files(
                    &seg.log_path,
                    Some(&seg.index_path),
                    Some(&seg.time_index_path),
                )
                .unwrap();
                assert!(v.problem.is_none(), "{:?}", v.problem);
                black_box(v)
            })
        });
        if interval == 1 {
            g.bench_function("raw_read", |b| {
                b.iter(|| black_box(std::fs::read(&seg.log_path).unwrap()))
            });
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! { name = benches; config = config(); targets = append, append_sync, reads, open, verify }
criterion_main!(benches);
