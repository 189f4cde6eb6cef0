//! The bare aws-sdk-s3 baselines: the same files uploaded and the same bytes fetched with plain
//! SDK calls (krabka's own client settings, no krabka code in between) on a runtime of their own.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use krabka_remote_s3::S3Config;
use md5::Digest as _;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

use super::mbps;
use crate::Result;

/// The ranged GET size of the scan baselines: krabka's default chunk.
pub const GET_BYTES: u64 = krabka_tiering::DEFAULT_CHUNK_BYTES as u64;

/// How krabka's S3 backend splits an upload; the baseline splits it the same way.
#[derive(Clone, Copy)]
struct Split {
    threshold: u64,
    part: u64,
    parts_in_flight: usize,
}

/// How the bare SDK sends a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// The SDK's default: the SigV4 signature covers the body's SHA-256, nothing else.
    Signed,
    /// With the body's Content-MD5 (the store rejects a body that does not match it) and as an
    /// unsigned payload, the signature covering the header: the requests krabka's S3 backend
    /// sends for its bodies, whose stored MD5 (the ETag) its verification compares. The floor
    /// of a client that verifies what the store kept, on a store (Ceph 16) whose only digest
    /// of a stored object is that MD5.
    Md5Unsigned,
}

/// The body of one request as `body` says: the bytes, and their Content-MD5 when sent with one
/// (hashed on the blocking pool, as krabka hashes a body, so the runtime's 2 threads keep
/// driving the other requests).
async fn md5_of(data: &bytes::Bytes, body: Body) -> Result<Option<String>> {
    match body {
        Body::Signed => Ok(None),
        Body::Md5Unsigned => {
            let data = data.clone();
            let digest: [u8; 16] =
                tokio::task::spawn_blocking(move || md5::Md5::digest(&data).into()).await?;
            Ok(Some(aws_smithy_types::base64::encode(digest)))
        }
    }
}

/// A bare SDK client on its own 2-thread runtime (krabka's S3 backend also runs 2).
pub struct Bare {
    rt: Runtime,
    client: Client,
    bucket: String,
    /// Key prefix of everything this run writes (`""` or `"p/"`).
    prefix: String,
    split: Split,
}

impl Bare {
    /// A baseline client for the bucket, prefix and multipart split of `config`.
    pub fn new(client: Client, config: &S3Config) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let prefix = if config.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", config.prefix)
        };
        Ok(Self {
            rt,
            client,
            bucket: config.bucket.clone(),
            prefix,
            split: Split {
                threshold: config.multipart_threshold,
                part: config.part_size,
                parts_in_flight: config.upload_concurrency.max(1),
            },
        })
    }

    /// Uploads `files` under `sdk-<tag>/`, `in_flight` files at a time (each one PutObject
    /// below the multipart threshold, else multipart as krabka splits it); returns the MB/s and
    /// each file's key, in order.
    pub fn upload(
        &self,
        files: &[(PathBuf, u64)],
        tag: &str,
        in_flight: usize,
    ) -> Result<(f64, Vec<String>)> {
        self.upload_as(files, tag, in_flight, Body::Signed)
    }

    /// As [`upload`](Self::upload), each body sent as `body` says.
    pub fn upload_as(
        &self,
        files: &[(PathBuf, u64)],
        tag: &str,
        in_flight: usize,
        body: Body,
    ) -> Result<(f64, Vec<String>)> {
        let keys: Vec<String> = (0..files.len())
            .map(|i| format!("{}sdk-{tag}/{i}", self.prefix))
            .collect();
        let bytes: u64 = files.iter().map(|(_, n)| n).sum();
        super::settle();
        let start = Instant::now();
        self.rt.block_on(async {
            let mut set = JoinSet::new();
            for ((path, size), key) in files.iter().zip(&keys) {
                let job = put_file(
                    self.client.clone(),
                    self.bucket.clone(),
                    key.clone(),
                    path.clone(),
                    *size,
                    self.split,
                    body,
                );
                set.spawn(job);
                while set.len() >= in_flight.max(1) {
                    if let Some(r) = set.join_next().await {
                        r??;
                    }
                }
            }
            while let Some(r) = set.join_next().await {
                r??;
            }
            Ok::<(), crate::BoxError>(())
        })?;
        Ok((mbps(bytes, start.elapsed().as_secs_f64()), keys))
    }

    /// One ranged GET of `from..to` of `key`, timed.
    pub fn get(&self, key: &str, from: u64, to: u64) -> Result<Duration> {
        self.rt.block_on(async {
            let t = Instant::now();
            let got = get_range(&self.client, &self.bucket, key, from, to).await?;
            let took = t.elapsed();
            if got != to - from {
                return Err(format!("GET {key} {from}..{to} returned {got} bytes").into());
            }
            Ok(took)
        })
    }

    /// Fetches every object of `objects` (key, size) whole in [`GET_BYTES`] ranged GETs,
    /// `in_flight` at a time; returns MB/s.
    pub fn scan(&self, objects: &[(String, u64)], in_flight: usize) -> Result<f64> {
        let ranges: Vec<(String, u64, u64)> = objects
            .iter()
            .flat_map(|(key, size)| {
                (0..*size)
                    .step_by(GET_BYTES as usize)
                    .map(|from| (key.clone(), from, (from + GET_BYTES).min(*size)))
            })
            .collect();
        let start = Instant::now();
        let bytes = self.rt.block_on(async {
            let mut set = JoinSet::new();
            let mut bytes = 0u64;
            for (key, from, to) in ranges {
                let (client, bucket) = (self.client.clone(), self.bucket.clone());
                set.spawn(async move { get_range(&client, &bucket, &key, from, to).await });
                while set.len() >= in_flight.max(1) {
                    if let Some(r) = set.join_next().await {
                        bytes += r??;
                    }
                }
            }
            while let Some(r) = set.join_next().await {
                bytes += r??;
            }
            Ok::<u64, crate::BoxError>(bytes)
        })?;
        Ok(mbps(bytes, start.elapsed().as_secs_f64()))
    }

    /// Fetches `streams` at once, each stream its objects (key, size) in order in
    /// [`GET_BYTES`] ranged GETs, one GET in flight per stream (as many lagging consumers, each
    /// scanning its own partition); returns the bytes, the wall seconds and each stream's bytes and seconds.
    pub fn scan_streams(&self, streams: &[Vec<(String, u64)>]) -> Result<StreamScan> {
        let start = Instant::now();
        let (bytes, each) = self.rt.block_on(async {
            let mut set = JoinSet::new();
            for (i, objects) in streams.iter().enumerate() {
                let (client, bucket) = (self.client.clone(), self.bucket.clone());
                let objects = objects.clone();
                set.spawn(async move {
                    let mut bytes = 0u64;
                    for (key, size) in objects {
                        for from in (0..size).step_by(GET_BYTES as usize) {
                            let to = (from + GET_BYTES).min(size);
                            let got = get_range(&client, &bucket, &key, from, to).await?;
                            if got != to - from {
                                return Err(
                                    format!("GET {key} {from}..{to} returned {got} bytes").into()
                                );
                            }
                            bytes += got;
                        }
                    }
                    Ok::<_, crate::BoxError>((i, bytes, start.elapsed().as_secs_f64()))
                });
            }
            let mut each = vec![(0, 0.0); streams.len()];
            let mut total = 0u64;
            while let Some(r) = set.join_next().await {
                let (i, bytes, secs) = r??;
                total += bytes;
                if let Some(slot) = each.get_mut(i) {
                    *slot = (bytes, secs);
                }
            }
            Ok::<_, crate::BoxError>((total, each))
        })?;
        Ok(StreamScan {
            bytes,
            secs: start.elapsed().as_secs_f64(),
            each,
        })
    }

    /// Deletes every object under this run's prefix; returns how many.
    pub fn delete_all(&self) -> Result<usize> {
        self.rt.block_on(async {
            let mut deleted = 0;
            loop {
                let page = self
                    .client
                    .list_objects_v2()
                    .bucket(&self.bucket)
                    .prefix(&self.prefix)
                    .send()
                    .await?;
                let ids = page
                    .contents()
                    .iter()
                    .filter_map(|o| o.key())
                    .map(|k| ObjectIdentifier::builder().key(k).build())
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                if ids.is_empty() {
                    return Ok(deleted);
                }
                deleted += ids.len();
                let delete = Delete::builder().set_objects(Some(ids)).build()?;
                self.client
                    .delete_objects()
                    .bucket(&self.bucket)
                    .delete(delete)
                    .send()
                    .await?;
            }
        })
    }
}

/// What [`Bare::scan_streams`] measured.
pub struct StreamScan {
    /// Bytes received over every stream.
    pub bytes: u64,
    /// Wall seconds from the start to the last stream's end.
    pub secs: f64,
    /// Each stream's bytes and seconds from the common start to its own end, in stream order.
    pub each: Vec<(u64, f64)>,
}

/// GETs `from..to` of `key`; returns the bytes received (collected without per-byte copies).
async fn get_range(client: &Client, bucket: &str, key: &str, from: u64, to: u64) -> Result<u64> {
    let out = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .range(format!("bytes={from}-{}", to - 1))
        .send()
        .await?;
    let body = out.body.collect().await?.into_bytes();
    Ok(body.len() as u64)
}

async fn put_file(
    client: Client,
    bucket: String,
    key: String,
    path: PathBuf,
    size: u64,
    split: Split,
    body: Body,
) -> Result<()> {
    let data = bytes::Bytes::from(tokio::fs::read(&path).await?);
    if size < split.threshold {
        let md5 = md5_of(&data, body).await?;
        let req = client
            .put_object()
            .bucket(&bucket)
            .key(&key)
            .set_content_md5(md5)
            .body(ByteStream::from(data));
        match body {
            Body::Signed => req.send().await?,
            Body::Md5Unsigned => req.customize().disable_payload_signing().send().await?,
        };
        return Ok(());
    }
    multipart(&client, &bucket, &key, data, (split, body)).await
}

/// Uploads `data` under `key` as a multipart upload: `split.part` parts, `parts_in_flight` at
/// a time.
async fn multipart(
    client: &Client,
    bucket: &str,
    key: &str,
    data: bytes::Bytes,
    (split, body): (Split, Body),
) -> Result<()> {
    let up = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await?;
    let id = up.upload_id().ok_or("no upload id")?.to_owned();
    let part = usize::try_from(split.part)?.max(1);
    let mut set = JoinSet::new();
    let mut parts = Vec::new();
    for (n, start) in (0..data.len()).step_by(part).enumerate() {
        let number = i32::try_from(n + 1)?;
        let chunk = data.slice(start..(start + part).min(data.len()));
        let req = client
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(&id)
            .part_number(number);
        set.spawn(async move {
            let md5 = match md5_of(&chunk, body).await {
                Ok(m) => m,
                Err(e) => return (number, Err(e)),
            };
            let req = req.set_content_md5(md5).body(ByteStream::from(chunk));
            let sent = match body {
                Body::Signed => req.send().await,
                Body::Md5Unsigned => req.customize().disable_payload_signing().send().await,
            };
            (number, sent.map_err(crate::BoxError::from))
        });
        while set.len() >= split.parts_in_flight {
            if let Some(r) = set.join_next().await {
                parts.push(r?);
            }
        }
    }
    while let Some(r) = set.join_next().await {
        parts.push(r?);
    }
    let mut done = Vec::new();
    for (n, r) in parts {
        let out = r?;
        done.push(
            CompletedPart::builder()
                .part_number(n)
                .set_e_tag(out.e_tag().map(str::to_owned))
                .build(),
        );
    }
    done.sort_by_key(|p| p.part_number());
    client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await?;
    Ok(())
}
