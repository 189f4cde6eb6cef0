//! A deterministic generator of realistic records, so a reader can check every record it gets
//! back without keeping a copy: record `i` of seed `s` is always the same message.
//!
//! The shape imitates a clickstream topic: keys are user ids drawn with a skew (a few busy users,
//! a long tail), values are JSON-like events whose sizes follow a mix of small (most), medium and
//! large (a few percent) payloads, timestamps advance by a few milliseconds per record, and one
//! record in eight carries a `trace-id` header.

use bytes::Bytes;
use krabka_protocol::Message;

/// Timestamp of record 0: 2024-01-01T00:00:00Z in milliseconds.
pub const EPOCH_MS: i64 = 1_704_067_200_000;

const EVENTS: [&str; 6] = [
    "page_view",
    "click",
    "add_to_cart",
    "checkout",
    "search",
    "login",
];
const ALPHABET: &[u8; 64] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";

/// Generates record `i` of a seeded stream; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generator {
    seed: u64,
}

/// SplitMix64: a fast, well-mixed hash of one `u64`, good enough to drive the shape of test data.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Generator {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self { seed }
    }

    fn rand(&self, i: u64, stream: u64) -> u64 {
        mix(self.seed ^ mix(i.wrapping_mul(8).wrapping_add(stream)))
    }

    /// Size of record `i`'s payload filler: 75% 32–383 bytes, 22% 384–1535, 3% 1536–8191
    /// (about 500 bytes on average).
    fn payload_len(&self, i: u64) -> usize {
        let r = self.rand(i, 1);
        let bucket = r % 100;
        let within = (r >> 8) as usize;
        if bucket < 75 {
            32 + within % 352
        } else if bucket < 97 {
            384 + within % 1152
        } else {
            1536 + within % 6656
        }
    }

    /// Timestamp of record `i`: [`EPOCH_MS`] plus 0–3 ms per record, non-decreasing in `i`.
    pub fn timestamp(&self, i: u64) -> i64 {
        // i * 1.5 ms on average plus jitter below 1.5 ms keeps the order without storing state.
        let base = i.saturating_mul(3) / 2;
        let jitter = self.rand(i, 2) % 2;
        EPOCH_MS.saturating_add(i64::try_from(base + jitter).unwrap_or(i64::MAX))
    }

    /// Key of record `i`: `user-NNNNNN`, skewed so that low ids are much busier.
    pub fn key(&self, i: u64) -> String {
        let r = self.rand(i, 3);
        // Squaring a uniform fraction gives a skewed draw over 0..100_000.
        let f = (r >> 11) as f64 / (1u64 << 53) as f64;
        let user = (f * f * 100_000.0) as u64;
        format!("user-{user:06}")
    }

    /// Record `i` of the stream.
    pub fn message(&self, i: u64) -> Message {
        let key = self.key(i);
        let event = EVENTS
            .get((self.rand(i, 4) % EVENTS.len() as u64) as usize)
            .copied()
            .unwrap_or("page_view");
        let len = self.payload_len(i);
        let mut value = Vec::with_capacity(len + 96);
        value.extend_from_slice(
            format!(r#"{{"event":"{event}","user":"{key}","n":{i},"payload":""#).as_bytes(),
        );
        let mut state = self.rand(i, 5);
        let mut left = len;
        while left > 0 {
            state = mix(state);
            for b in state.to_le_bytes().iter().take(left) {
                value.push(ALPHABET[(b & 63) as usize]);
            }
            left = left.saturating_sub(8);
        }
        value.extend_from_slice(b"\"}");
        let mut msg = Message::new(Bytes::from(value))
            .with_key(key)
            .with_timestamp(self.timestamp(i));
        if self.rand(i, 6).is_multiple_of(8) {
            msg = msg.with_header("trace-id", format!("{:016x}", self.rand(i, 7)));
        }
        msg
    }

    /// Whether `msg` is exactly record `i` of the stream.
    pub fn matches(&self, i: u64, msg: &Message) -> bool {
        *msg == self.message(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_index_always_gives_the_same_message() {
        let g = Generator::new(7);
        assert_eq!(g.message(12345), g.message(12345));
        assert!(g.matches(3, &g.message(3)));
        assert!(!g.matches(4, &g.message(3)));
        assert_ne!(Generator::new(8).message(3), g.message(3));
    }

    #[test]
    fn sizes_keys_and_timestamps_look_like_real_traffic() {
        let g = Generator::new(1);
        let n = 20_000u64;
        let total: usize = (0..n).map(|i| g.message(i).value.len()).sum();
        let avg = total as u64 / n;
        assert!((350..800).contains(&avg), "average value size {avg}");
        let max = (0..n).map(|i| g.message(i).value.len()).max().unwrap_or(0);
        assert!(max > 4000, "some large records: {max}");
        let mut ts = g.timestamp(0);
        for i in 1..n {
            assert!(g.timestamp(i) >= ts);
            ts = g.timestamp(i);
        }
        let distinct: std::collections::HashSet<String> = (0..n).map(|i| g.key(i)).collect();
        assert!(distinct.len() > 1000 && distinct.len() < n as usize);
    }
}
