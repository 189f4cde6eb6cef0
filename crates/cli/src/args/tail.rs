//! The tail flags `produce` and `tier` share, and `produce --durability`.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse::{parse_ack_deadline, parse_tail_bytes, parse_tail_grace, parse_tail_interval};

/// The tail in the bucket, shared by `produce` and `tier`: while a segment is active, its new
/// records go to the remote as small tail objects, so that they outlive the local disk. Any of
/// these flags (or `produce --durability bucket`) turns it on; the others keep their defaults.
#[derive(Debug, Clone, Default, Args)]
pub struct TailArgs {
    /// Write the active segment's new records to the remote as a tail object at most this long
    /// after they are appended, e.g. 200ms (the default once the tail is on); from 10ms to 60s.
    #[arg(long, value_name = "DURATION", value_parser = parse_tail_interval, requires = "remote")]
    pub tail_interval: Option<Duration>,
    /// The most bytes of record batches in one tail object (one is written as soon as this
    /// many wait); from 4KiB to 32MiB, default 8MiB. Accepts units.
    #[arg(long, value_name = "SIZE", value_parser = parse_tail_bytes, requires = "remote")]
    pub tail_bytes: Option<usize>,
    /// How long a tail object stays in the remote after finished segments hold its records,
    /// for read replicas that read the partition's head before; from 1s to 1 day, default 60s.
    #[arg(long, value_name = "DURATION", value_parser = parse_tail_grace, requires = "remote")]
    pub tail_grace: Option<Duration>,
    /// How long records may wait for their tail object: `produce --durability bucket` fails
    /// an append not in the remote by then, `tier` fails when the log's records are not all
    /// in the remote by then after its round; from 10ms to 1 day, default 10s.
    #[arg(long, value_name = "DURATION", value_parser = parse_ack_deadline, requires = "remote")]
    pub ack_deadline: Option<Duration>,
}

impl TailArgs {
    /// Whether any tail flag was given.
    pub fn given(&self) -> bool {
        self.tail_interval.is_some()
            || self.tail_bytes.is_some()
            || self.tail_grace.is_some()
            || self.ack_deadline.is_some()
    }

    /// The tail these flags ask for: the library's defaults for the flags not given. Every
    /// value was range-checked when the command line was read.
    pub fn config(&self) -> krabka_tiering::TailConfig {
        let d = krabka_tiering::TailConfig::default();
        krabka_tiering::TailConfig {
            interval: self.tail_interval.unwrap_or(d.interval),
            max_bytes: self.tail_bytes.unwrap_or(d.max_bytes),
            grace: self.tail_grace.unwrap_or(d.grace),
            ack_deadline: self.ack_deadline.unwrap_or(d.ack_deadline),
            verify_interval: d.verify_interval,
        }
    }
}

/// When `produce` counts a record as written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    /// Once the local log has it (synced to disk once, at the end).
    #[default]
    Local,
    /// Once it is in a tail object in the remote too (needs --remote).
    Bucket,
}
