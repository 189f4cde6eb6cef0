//! The bare aws-sdk-s3 baselines of the tail rows: small PutObjects and GetObjects with plain
//! SDK calls (krabka's own client settings, no krabka code in between) on a runtime of their
//! own, under `sdk-tail/` of the run's prefix.

use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use krabka_remote_s3::S3Config;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

use crate::Result;
use crate::report::Histogram;

/// A bare SDK client on its own 2-thread runtime (krabka's S3 backend also runs 2).
pub struct Bare {
    rt: Runtime,
    client: Client,
    bucket: String,
    /// Key prefix of everything it writes (`"sdk-tail/"` under the run's prefix).
    prefix: String,
}

/// What `n` PUTs in flight did for a while.
pub struct InFlight {
    pub latency: Histogram,
    pub bytes: u64,
    pub secs: f64,
}

impl Bare {
    /// A baseline client for the bucket and prefix of `config`.
    pub fn new(client: Client, config: &S3Config) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let prefix = if config.prefix.is_empty() {
            "sdk-tail/".to_owned()
        } else {
            format!("{}/sdk-tail/", config.prefix)
        };
        Ok(Self {
            rt,
            client,
            bucket: config.bucket.clone(),
            prefix,
        })
    }

    /// The key of baseline object `name`.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// One PutObject of `body` under `name`, timed.
    pub fn put(&self, name: &str, body: Bytes) -> Result<Duration> {
        let key = self.key(name);
        self.rt.block_on(async {
            let t = Instant::now();
            put(&self.client, &self.bucket, &key, body).await?;
            Ok(t.elapsed())
        })
    }

    /// One GetObject of the whole of `name`, timed; fails unless it holds `len` bytes.
    pub fn get(&self, name: &str, len: usize) -> Result<Duration> {
        let key = self.key(name);
        self.rt.block_on(async {
            let t = Instant::now();
            let out = self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(&key)
                .send()
                .await?;
            let got = out.body.collect().await?.into_bytes();
            let took = t.elapsed();
            if got.len() != len {
                return Err(format!("GET {key} returned {} bytes, not {len}", got.len()).into());
            }
            Ok(took)
        })
    }

    /// PutObjects of `body` under fresh names `tag-<i>`, `in_flight` at a time, for `secs`
    /// (each started before the end counts).
    pub fn put_for(
        &self,
        tag: &str,
        body: &Bytes,
        in_flight: usize,
        secs: Duration,
    ) -> Result<InFlight> {
        let start = Instant::now();
        let (latency, bytes) = self.rt.block_on(async {
            let mut set = JoinSet::new();
            let mut latency = Histogram::default();
            let mut bytes = 0u64;
            let mut i = 0u64;
            while start.elapsed() < secs {
                let (client, bucket) = (self.client.clone(), self.bucket.clone());
                let (key, body) = (self.key(&format!("{tag}-{i}")), body.clone());
                i += 1;
                set.spawn(async move {
                    let t = Instant::now();
                    let n = body.len() as u64;
                    put(&client, &bucket, &key, body).await?;
                    Ok::<(Duration, u64), crate::BoxError>((t.elapsed(), n))
                });
                while set.len() >= in_flight.max(1) {
                    if let Some(r) = set.join_next().await {
                        let (d, n) = r??;
                        latency.record(d);
                        bytes += n;
                    }
                }
            }
            while let Some(r) = set.join_next().await {
                let (d, n) = r??;
                latency.record(d);
                bytes += n;
            }
            Ok::<(Histogram, u64), crate::BoxError>((latency, bytes))
        })?;
        Ok(InFlight {
            latency,
            bytes,
            secs: start.elapsed().as_secs_f64(),
        })
    }
}

async fn put(client: &Client, bucket: &str, key: &str, body: Bytes) -> Result<()> {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await?;
    Ok(())
}
