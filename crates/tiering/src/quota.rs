//! [`ByteRateQuota`]: a byte-rate limit shared by every partition (KIP-956's
//! `remote.log.manager.copy.max.bytes.per.second` and `...fetch.max.bytes.per.second`).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How much traffic the bucket lets through at once after an idle spell: 100 ms of the rate.
const BURST: Duration = Duration::from_millis(100);

/// A token bucket in bytes per second, shared by every partition of a service.
///
/// An operation waits until the bucket is not in debt, then takes its bytes, possibly driving
/// the bucket into debt: a segment larger than the burst still passes, and the long-run rate is
/// exactly the configured one (the overshoot is at most one operation per concurrent caller
/// plus 100 ms of burst). Thread safe; share it through an `Arc`.
#[derive(Debug)]
pub struct ByteRateQuota {
    bytes_per_second: u64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Available bytes; negative while in debt.
    tokens: f64,
    refilled: Instant,
}

impl ByteRateQuota {
    /// A quota of `bytes_per_second` (at least 1), starting full (100 ms worth of bytes).
    pub fn new(bytes_per_second: u64) -> Self {
        let rate = bytes_per_second.max(1);
        Self {
            bytes_per_second: rate,
            state: Mutex::new(Bucket {
                tokens: rate as f64 * BURST.as_secs_f64(),
                refilled: Instant::now(),
            }),
        }
    }

    /// The configured rate.
    pub fn bytes_per_second(&self) -> u64 {
        self.bytes_per_second
    }

    fn refill(&self, b: &mut Bucket) {
        let now = Instant::now();
        let rate = self.bytes_per_second as f64;
        let cap = rate * BURST.as_secs_f64();
        b.tokens = (b.tokens + now.duration_since(b.refilled).as_secs_f64() * rate).min(cap);
        b.refilled = now;
    }

    /// How long until the bucket is out of debt (zero when it is not in debt).
    pub fn delay(&self) -> Duration {
        let mut b = self.state.lock();
        self.refill(&mut b);
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / self.bytes_per_second as f64)
        }
    }

    /// Takes `bytes` now, whatever the balance (it may go into debt).
    pub fn charge(&self, bytes: u64) {
        let mut b = self.state.lock();
        self.refill(&mut b);
        b.tokens -= bytes as f64;
    }

    /// Waits (sleeping the thread) until the bucket is out of debt, then charges `bytes`.
    /// Returns the time waited.
    pub fn acquire_blocking(&self, bytes: u64) -> Duration {
        let start = Instant::now();
        // Each sleep ends the debt seen before it; other takers may add more, so loop (bounded:
        // a wait never exceeds the debt, which is finite).
        for _ in 0..10_000 {
            let d = self.delay();
            if d.is_zero() {
                break;
            }
            std::thread::sleep(d);
        }
        self.charge(bytes);
        start.elapsed()
    }

    /// Waits (on the Tokio timer) until the bucket is out of debt, then charges `bytes`.
    /// Returns the time waited.
    pub async fn acquire(&self, bytes: u64) -> Duration {
        let start = Instant::now();
        for _ in 0..10_000 {
            let d = self.delay();
            if d.is_zero() {
                break;
            }
            tokio::time::sleep(d).await;
        }
        self.charge(bytes);
        start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_run_rate_holds() {
        let q = ByteRateQuota::new(100_000);
        let start = Instant::now();
        let mut sent = 0u64;
        while start.elapsed() < Duration::from_millis(500) {
            q.acquire_blocking(10_000);
            sent += 10_000;
        }
        let secs = start.elapsed().as_secs_f64();
        let rate = sent as f64 / secs;
        // Burst (10 KB) plus one overshooting charge over half a second.
        assert!(rate < 100_000.0 * 1.5, "rate {rate}");
        assert!(rate > 100_000.0 * 0.7, "rate {rate}");
    }

    #[test]
    fn debt_delays_the_next_taker() {
        let q = ByteRateQuota::new(1000);
        q.charge(1100);
        let d = q.delay();
        assert!(
            d > Duration::from_millis(900) && d <= Duration::from_millis(1000),
            "{d:?}"
        );
    }
}
