//! Upload of a 64 MiB segment through the backend vs a bare aws-sdk-s3 put/multipart of the
//! same bytes, and a 1 MiB ranged GET, against s3s-fs in-process on 127.0.0.1.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_storage::{
    IndexType, LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageManager,
    TopicIdPartition,
};

const SIZE: usize = 64 << 20;
const PART: usize = 8 << 20;
const CONCURRENCY: usize = 4;

/// The bare SDK baseline: the same multipart shape (8 MiB parts, 4 at once), bytes already in
/// memory, no verification.
async fn bare_multipart(client: &aws_sdk_s3::Client, key: &str, data: &bytes::Bytes) {
    let id = client
        .create_multipart_upload()
        .bucket(support::BUCKET)
        .key(key)
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_owned();
    let mut parts = Vec::new();
    for chunk in (0..SIZE.div_ceil(PART))
        .collect::<Vec<_>>()
        .chunks(CONCURRENCY)
    {
        let futs = chunk.iter().map(|&i| {
            let body = data.slice(i * PART..((i + 1) * PART).min(SIZE));
            let n = i as i32 + 1;
            let id = id.clone();
            async move {
                let out = client
                    .upload_part()
                    .bucket(support::BUCKET)
                    .key(key)
                    .upload_id(id)
                    .part_number(n)
                    .body(ByteStream::from(body))
                    .send()
                    .await
                    .unwrap();
                CompletedPart::builder()
                    .part_number(n)
                    .e_tag(out.e_tag().unwrap())
                    .build()
            }
        });
        let mut handles = Vec::new();
        for f in futs {
            handles.push(f);
        }
        parts.extend(futures_join(handles).await);
    }
    client
        .complete_multipart_upload()
        .bucket(support::BUCKET)
        .key(key)
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .unwrap();
}

/// Joins futures concurrently on the current task without extra dependencies.
async fn futures_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.unwrap()).collect()
}

fn bench(c: &mut Criterion) {
    let server = support::start_server();
    let config = server
        .config()
        .with_multipart(16 << 20, PART as u64)
        .with_upload_concurrency(CONCURRENCY);
    let storage = S3RemoteStorage::new(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    let paths = ["s.log", "s.index", "s.timeindex"].map(|n| dir.path().join(n));
    std::fs::write(&paths[0], &data).unwrap();
    std::fs::write(&paths[1], b"i").unwrap();
    std::fs::write(&paths[2], b"t").unwrap();
    let [l, o, t] = paths;
    let seg = LogSegmentData::new(l, o, t);
    let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "bench", 0);
    let metadata = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 1)
        .segment_size_in_bytes(SIZE as u64)
        .build()
        .unwrap();
    let bytes = bytes::Bytes::from(data);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = storage.client().clone();

    let mut g = c.benchmark_group("upload_64mib");
    g.throughput(Throughput::Bytes(SIZE as u64)).sample_size(10);
    g.bench_function("backend_copy_log_segment_data", |b| {
        b.iter(|| storage.copy_log_segment_data(&metadata, &seg).unwrap())
    });
    g.bench_function("bare_sdk_multipart", |b| {
        b.iter(|| rt.block_on(bare_multipart(&client, "bare/segment.log", &bytes)))
    });
    g.bench_function("bare_sdk_put_object", |b| {
        b.iter(|| {
            rt.block_on(
                client
                    .put_object()
                    .bucket(support::BUCKET)
                    .key("bare/put.log")
                    .body(ByteStream::from(bytes.clone()))
                    .send(),
            )
            .unwrap()
        })
    });
    g.finish();

    // A 16 MiB segment with 1 MiB indexes under the default configuration.
    let small = support::start_server();
    let small_storage = S3RemoteStorage::new(small.config()).unwrap();
    let small_seg = segment_files(dir.path(), "d", 16 << 20, 1 << 20);
    let small_meta = metadata_of(16 << 20);
    let mut g = c.benchmark_group("upload_16mib_default_config");
    g.throughput(Throughput::Bytes(16 << 20)).sample_size(10);
    g.bench_function("backend_copy_log_segment_data", |b| {
        b.iter(|| {
            small_storage
                .copy_log_segment_data(&small_meta, &small_seg)
                .unwrap()
        })
    });
    g.finish();

    // Whole-object GETs: a 4 MiB segment fetched from its start, and a 1 MiB index.
    let small_meta = small_meta.with_custom_metadata(
        small_storage
            .copy_log_segment_data(&small_meta, &small_seg)
            .unwrap(),
    );
    let mut g = c.benchmark_group("get_whole_object");
    g.throughput(Throughput::Bytes(1 << 20)).sample_size(20);
    g.bench_function("backend_fetch_index_1mib", |b| {
        b.iter(|| {
            small_storage
                .fetch_index(&small_meta, IndexType::Offset)
                .unwrap()
        })
    });
    g.throughput(Throughput::Bytes(4 << 20));
    g.bench_function("backend_fetch_log_segment_4mib", |b| {
        b.iter(|| {
            small_storage
                .fetch_log_segment(&small_meta, 0, Some((4 << 20) - 1))
                .unwrap()
        })
    });
    g.finish();

    let m = metadata.with_custom_metadata(storage.copy_log_segment_data(&metadata, &seg).unwrap());
    let mut g = c.benchmark_group("ranged_get_1mib");
    g.throughput(Throughput::Bytes(1 << 20)).sample_size(20);
    g.bench_function("backend_fetch_log_segment", |b| {
        b.iter(|| {
            storage
                .fetch_log_segment(&m, 5 << 20, Some((6 << 20) - 1))
                .unwrap()
        })
    });
    g.finish();
}

/// A segment of `log_len` bytes with two indexes of `index_len` bytes each, under `dir`.
fn segment_files(
    dir: &std::path::Path,
    stem: &str,
    log_len: usize,
    index_len: usize,
) -> LogSegmentData {
    let paths = ["log", "index", "timeindex"].map(|ext| dir.join(format!("{stem}.{ext}")));
    for (i, p) in paths.iter().enumerate() {
        let len = if i == 0 { log_len } else { index_len };
        let bytes: Vec<u8> = (0..len).map(|j| ((j * 13 + i) % 251) as u8).collect();
        std::fs::write(p, bytes).unwrap();
    }
    let [l, o, t] = paths;
    LogSegmentData::new(l, o, t)
}

fn metadata_of(size: u64) -> RemoteLogSegmentMetadata {
    let tp = TopicIdPartition::new(uuid::Uuid::new_v4(), "bench", 0);
    RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 1)
        .segment_size_in_bytes(size)
        .build()
        .unwrap()
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
