//! How a log's tail goes to the bucket ([`TailConfig`]) and when an append is acknowledged
//! ([`Durability`]).

use std::time::Duration;

use crate::error::Error;

/// Shortest [`TailConfig::interval`]: 10 ms.
pub const MIN_TAIL_INTERVAL: Duration = Duration::from_millis(10);
/// Longest [`TailConfig::interval`]: 60 s.
pub const MAX_TAIL_INTERVAL: Duration = Duration::from_secs(60);
/// Smallest [`TailConfig::max_bytes`]: 4 KiB.
pub const MIN_TAIL_BYTES: usize = 4 << 10;
/// Largest [`TailConfig::max_bytes`]: 32 MiB (a tail object is one PUT, never a multipart
/// upload, and readers hold it whole).
pub const MAX_TAIL_BYTES: usize = 32 << 20;
/// Shortest [`TailConfig::grace`]: 1 s.
pub const MIN_TAIL_GRACE: Duration = Duration::from_secs(1);
/// Longest [`TailConfig::grace`] and [`TailConfig::ack_deadline`]: one day.
pub const MAX_TAIL_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Shortest [`TailConfig::verify_interval`]: 1 s.
pub const MIN_VERIFY_INTERVAL: Duration = Duration::from_secs(1);
/// Shortest [`TailConfig::ack_deadline`]: 10 ms.
pub const MIN_ACK_DEADLINE: Duration = Duration::from_millis(10);

/// Uploads of the active segment's records as **tail objects** (`docs/tiering.md`, "The tail
/// in the bucket"): at most every `interval`, or sooner once `max_bytes` wait, a log's new
/// whole record batches go to the bucket in one create-only object, shared by every partition
/// of one [`TailWriter`](crate::TailWriter).
///
/// ```
/// use std::time::Duration;
/// use krabka_tiering::TailConfig;
///
/// let tail = TailConfig { interval: Duration::from_millis(250), ..TailConfig::default() };
/// tail.validate()?;
/// assert!(TailConfig { interval: Duration::ZERO, ..tail }.validate().is_err());
/// # Ok::<(), krabka_tiering::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailConfig {
    /// The window: records wait at most this long before their object is written (default
    /// 200 ms; [`MIN_TAIL_INTERVAL`]..=[`MAX_TAIL_INTERVAL`]).
    pub interval: Duration,
    /// An object is written as soon as this many bytes wait, and holds at most this many
    /// bytes of batches, a single larger batch excepted (default 8 MiB;
    /// [`MIN_TAIL_BYTES`]..=[`MAX_TAIL_BYTES`]).
    pub max_bytes: usize,
    /// How long a tail object stays after the partition's head stopped needing it, so that a
    /// replica that read the head before can still read it (default 60 s; at least
    /// [`MIN_TAIL_GRACE`]). Keep it above the replicas' refresh interval.
    pub grace: Duration,
    /// How long a bucket-durable append ([`Durability::Bucket`]) waits for its object before
    /// it fails with [`TailError::NotAcknowledged`](crate::TailError::NotAcknowledged)
    /// (default 10 s; [`MIN_ACK_DEADLINE`]..=[`MAX_TAIL_DURATION`]).
    pub ack_deadline: Duration,
    /// How often the writer checks, for each partition it wrote since, that what its
    /// acknowledgements rest on is still in the bucket: its epoch record (written again when
    /// lost) and its head listing the chain (a head deleted or overwritten is written again
    /// before anything more is acknowledged). Three small reads per partition (default 30 s;
    /// [`MIN_VERIFY_INTERVAL`]..=[`MAX_TAIL_DURATION`]).
    pub verify_interval: Duration,
}

impl Default for TailConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(200),
            max_bytes: 8 << 20,
            grace: Duration::from_secs(60),
            ack_deadline: Duration::from_secs(10),
            verify_interval: Duration::from_secs(30),
        }
    }
}

impl TailConfig {
    /// Checks every field against its bounds.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the field, its value and its bounds.
    pub fn validate(&self) -> Result<(), Error> {
        let bad =
            |field: &str, reason: String| Err(Error::InvalidConfig(format!("{field}: {reason}")));
        if !(MIN_TAIL_INTERVAL..=MAX_TAIL_INTERVAL).contains(&self.interval) {
            return bad(
                "tail.interval",
                format!(
                    "{:?} is outside {MIN_TAIL_INTERVAL:?}..={MAX_TAIL_INTERVAL:?}",
                    self.interval
                ),
            );
        }
        if !(MIN_TAIL_BYTES..=MAX_TAIL_BYTES).contains(&self.max_bytes) {
            return bad(
                "tail.max_bytes",
                format!(
                    "{} is outside {MIN_TAIL_BYTES}..={MAX_TAIL_BYTES}",
                    self.max_bytes
                ),
            );
        }
        if !(MIN_TAIL_GRACE..=MAX_TAIL_DURATION).contains(&self.grace) {
            return bad(
                "tail.grace",
                format!(
                    "{:?} is outside {MIN_TAIL_GRACE:?}..={MAX_TAIL_DURATION:?}",
                    self.grace
                ),
            );
        }
        if !(MIN_ACK_DEADLINE..=MAX_TAIL_DURATION).contains(&self.ack_deadline) {
            return bad(
                "tail.ack_deadline",
                format!(
                    "{:?} is outside {MIN_ACK_DEADLINE:?}..={MAX_TAIL_DURATION:?}",
                    self.ack_deadline
                ),
            );
        }
        if !(MIN_VERIFY_INTERVAL..=MAX_TAIL_DURATION).contains(&self.verify_interval) {
            return bad(
                "tail.verify_interval",
                format!(
                    "{:?} is outside {MIN_VERIFY_INTERVAL:?}..={MAX_TAIL_DURATION:?}",
                    self.verify_interval
                ),
            );
        }
        Ok(())
    }
}

/// When an append returns: once the local log has the records (as its `SyncPolicy` says), or
/// only once they are in a tail object in the bucket too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// The local log's acknowledgement: a lost disk loses what is not in the bucket yet (at
    /// most one tail interval with a [`TailConfig`], else the active segment).
    #[default]
    Local,
    /// An append returns once its records are in a tail object in the bucket, written under
    /// the partition's writer epoch; concurrent appenders share one object per window. Needs
    /// [`TieringConfig::tail`](crate::TieringConfig::tail).
    Bucket,
}
