//! Message types of the krabka tiered log and their binary encoding.
//!
//! A [`Message`] is what a user appends: a timestamp, an optional key, a value and a list of
//! [`Header`]s. Its encoding is versioned (the first byte) and documented byte by byte in
//! `docs/format.md` of the repository.
//!
//! Decoding is written for untrusted input: it never panics, never reads out of bounds and never
//! allocates more than the input holds — a length field claiming 4 GiB in a 20-byte buffer is a
//! [`DecodeError::LengthOutOfRange`], not an allocation.
//!
//! ```
//! use krabka_protocol::Message;
//!
//! let msg = Message::new("value")
//!     .with_key("key")
//!     .with_timestamp(1_700_000_000_000)
//!     .with_header("trace-id", "abc");
//! let mut buf = Vec::with_capacity(msg.encoded_len());
//! msg.encode(&mut buf);
//! assert_eq!(buf.len(), msg.encoded_len());
//!
//! let (decoded, used) = Message::decode(&buf)?;
//! assert_eq!(decoded, msg);
//! assert_eq!(used, buf.len());
//! # Ok::<(), krabka_protocol::DecodeError>(())
//! ```
//!
//! The [`batch`] module reads and writes Kafka's v2 record batches (magic 2) byte for byte.

pub mod batch;

use std::fmt;
use std::ops::Range;

use bytes::BufMut;
pub use bytes::Bytes;

/// The encoding version written by [`Message::encode`] (the first byte of every encoded message).
pub const VERSION: u8 = 1;

/// Flag bit set when the message carries a key.
const FLAG_HAS_KEY: u8 = 0b0000_0001;
/// All flag bits this version defines; any other bit set is an error.
const KNOWN_FLAGS: u8 = FLAG_HAS_KEY;

/// Size of the fixed prefix: version (1) + flags (1) + timestamp (8).
const FIXED_PREFIX: usize = 1 + 1 + 8;
/// Smallest possible encoded header: key length (4) + value length (4).
const MIN_HEADER_LEN: usize = 4 + 4;

/// One header of a [`Message`]: a UTF-8 key and opaque bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Header name (UTF-8).
    pub key: String,
    /// Header value (opaque bytes).
    pub value: Bytes,
}

impl Header {
    /// Creates a header.
    pub fn new(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// Milliseconds since the Unix epoch now, by the system's wall clock (negative before 1970;
/// saturating at the ends of `i64`): the stamp of [`Message::new`], and the wall clock of every
/// crate built on this one (storage's accepted holes among them). The SPI, which depends on no
/// krabka crate, reads the same clock as `krabka_remote_storage::now_ms`.
pub fn now_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// A message as stored in the log.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Message {
    /// Milliseconds since the Unix epoch (may be negative for instants before 1970).
    pub timestamp: i64,
    /// Optional key (opaque bytes); `None` and an empty key are distinct.
    pub key: Option<Bytes>,
    /// The payload (opaque bytes; may be empty).
    pub value: Bytes,
    /// Application headers, in order; duplicate keys are allowed.
    pub headers: Vec<Header>,
}

impl Message {
    /// Creates a message with the given value, stamped with the current wall-clock time
    /// (milliseconds since the Unix epoch), no key and no headers. [`with_timestamp`](Self::with_timestamp) overrides
    /// the stamp (for example with an event time); a caller that always sets its own
    /// timestamps can skip the clock read with a literal:
    /// `Message { timestamp, value, ..Message::default() }`.
    ///
    /// ```
    /// use std::time::{SystemTime, UNIX_EPOCH};
    /// use krabka_protocol::Message;
    /// let now = || SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64);
    /// let before = now().unwrap();
    /// let m = Message::new("v");
    /// assert!(m.timestamp >= before && m.timestamp <= now().unwrap());
    /// assert_eq!(Message::new("v").with_timestamp(7).timestamp, 7);
    /// ```
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self {
            timestamp: now_ms(),
            key: None,
            value: value.into(),
            headers: Vec::new(),
        }
    }

    /// Sets the key.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the timestamp (milliseconds since the Unix epoch).
    #[must_use]
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Appends a header.
    #[must_use]
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push(Header::new(key, value));
        self
    }

    /// The exact number of bytes [`Message::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        let key = self.key.as_ref().map_or(0, |k| 4 + k.len());
        let headers: usize = self
            .headers
            .iter()
            .map(|h| MIN_HEADER_LEN + h.key.len() + h.value.len())
            .sum();
        FIXED_PREFIX + key + 4 + self.value.len() + 4 + headers
    }

    /// Appends the encoding of this message (version [`VERSION`]) to `buf`.
    ///
    /// Lengths are written as `u32`; a key, value, header or header count larger than
    /// `u32::MAX` cannot be represented. Such a message is far beyond any log's message size
    /// limit; the length is saturated, and decoding the result fails rather than returning
    /// different data.
    pub fn encode(&self, buf: &mut impl BufMut) {
        buf.put_u8(VERSION);
        buf.put_u8(if self.key.is_some() { FLAG_HAS_KEY } else { 0 });
        buf.put_i64_le(self.timestamp);
        if let Some(key) = &self.key {
            put_len(buf, key.len());
            buf.put_slice(key);
        }
        put_len(buf, self.value.len());
        buf.put_slice(&self.value);
        put_len(buf, self.headers.len());
        for h in &self.headers {
            put_len(buf, h.key.len());
            buf.put_slice(h.key.as_bytes());
            put_len(buf, h.value.len());
            buf.put_slice(&h.value);
        }
    }

    /// Encodes the message into a new `Vec`.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v);
        v
    }

    /// Decodes one message from the front of `buf`, copying its fields.
    ///
    /// Returns the message and the number of bytes consumed; bytes after it are left alone.
    ///
    /// # Errors
    /// A [`DecodeError`] naming the byte position of the first problem.
    pub fn decode(buf: &[u8]) -> Result<(Message, usize), DecodeError> {
        let layout = Layout::parse(buf)?;
        let copy = |r: &Range<usize>| Bytes::copy_from_slice(buf.get(r.clone()).unwrap_or(&[]));
        Ok((layout.build(copy), layout.len))
    }

    /// Decodes one message from the front of `buf` without copying: the key, value and header
    /// values are slices of `buf` (cheap reference-counted views).
    ///
    /// # Errors
    /// The same as [`Message::decode`].
    pub fn decode_bytes(buf: &Bytes) -> Result<(Message, usize), DecodeError> {
        let layout = Layout::parse(buf)?;
        let slice = |r: &Range<usize>| buf.slice(r.clone());
        Ok((layout.build(slice), layout.len))
    }
}

fn put_len(buf: &mut impl BufMut, len: usize) {
    buf.put_u32_le(u32::try_from(len).unwrap_or(u32::MAX));
}

/// A field of the encoding, as named in a [`DecodeError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// The version byte.
    Version,
    /// The flags byte.
    Flags,
    /// The timestamp.
    Timestamp,
    /// The key (length or bytes).
    Key,
    /// The value (length or bytes).
    Value,
    /// The header count.
    HeaderCount,
    /// A header key (length or bytes).
    HeaderKey,
    /// A header value (length or bytes).
    HeaderValue,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Version => "version",
            Field::Flags => "flags",
            Field::Timestamp => "timestamp",
            Field::Key => "key",
            Field::Value => "value",
            Field::HeaderCount => "header count",
            Field::HeaderKey => "header key",
            Field::HeaderValue => "header value",
        })
    }
}

/// Why bytes could not be decoded into a [`Message`]; every variant names the byte position
/// (`at`, counted from the start of the buffer given to `decode`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ends inside a fixed-size field.
    #[error("truncated message: {field} at byte {at} needs {needed} bytes, {available} available")]
    Truncated {
        /// Field being read.
        field: Field,
        /// Byte position of the field.
        at: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the input.
        available: usize,
    },
    /// The version byte is not one this crate can read.
    #[error(
        "unsupported message version {version} at byte {at} (this build reads version {VERSION})"
    )]
    UnsupportedVersion {
        /// Byte position of the version byte.
        at: usize,
        /// The version found.
        version: u8,
    },
    /// The flags byte has bits set that this version does not define.
    #[error("unknown flag bits {flags:#010b} at byte {at}")]
    UnknownFlags {
        /// Byte position of the flags byte.
        at: usize,
        /// The flags found.
        flags: u8,
    },
    /// A length (or count) field claims more bytes than the input holds.
    #[error("{field} length {len} at byte {at} is out of range: only {remaining} bytes remain")]
    LengthOutOfRange {
        /// Field whose length is wrong.
        field: Field,
        /// Byte position of the length field.
        at: usize,
        /// The length (or count) found.
        len: u64,
        /// Bytes left in the input after the length field.
        remaining: usize,
    },
    /// A header key is not valid UTF-8.
    #[error("header {index} key at byte {at} is not valid UTF-8")]
    HeaderKeyNotUtf8 {
        /// Index of the header within the message.
        index: usize,
        /// Byte position of the key's first byte.
        at: usize,
    },
}

/// Positions of every field of one encoded message, found without allocating for the payload.
struct Layout {
    timestamp: i64,
    key: Option<Range<usize>>,
    value: Range<usize>,
    headers: Vec<(String, Range<usize>)>,
    len: usize,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn fixed<const N: usize>(&mut self, field: Field) -> Result<[u8; N], DecodeError> {
        let at = self.pos;
        let bytes = self
            .buf
            .get(at..)
            .and_then(|rest| rest.get(..N))
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or(DecodeError::Truncated {
                field,
                at,
                needed: N,
                available: self.remaining(),
            })?;
        self.pos += N;
        Ok(bytes)
    }

    /// Reads a `u32` length and returns it with the position of the length field.
    fn len(&mut self, field: Field) -> Result<(usize, usize), DecodeError> {
        let at = self.pos;
        let len = u32::from_le_bytes(self.fixed::<4>(field)?);
        let len = usize::try_from(len).map_err(|_| DecodeError::LengthOutOfRange {
            field,
            at,
            len: u64::from(len),
            remaining: self.remaining(),
        })?;
        Ok((len, at))
    }

    /// Reads a length-prefixed byte run and returns its range in the buffer.
    fn run(&mut self, field: Field) -> Result<Range<usize>, DecodeError> {
        let (len, at) = self.len(field)?;
        if len > self.remaining() {
            return Err(DecodeError::LengthOutOfRange {
                field,
                at,
                len: len as u64,
                remaining: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += len;
        Ok(start..self.pos)
    }

    fn slice(&self, r: &Range<usize>) -> &'a [u8] {
        self.buf.get(r.clone()).unwrap_or(&[])
    }
}

impl Layout {
    fn parse(buf: &[u8]) -> Result<Layout, DecodeError> {
        let mut r = Reader { buf, pos: 0 };
        let [version] = r.fixed::<1>(Field::Version)?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion { at: 0, version });
        }
        let [flags] = r.fixed::<1>(Field::Flags)?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(DecodeError::UnknownFlags { at: 1, flags });
        }
        let timestamp = i64::from_le_bytes(r.fixed::<8>(Field::Timestamp)?);
        let key = if flags & FLAG_HAS_KEY != 0 {
            Some(r.run(Field::Key)?)
        } else {
            None
        };
        let value = r.run(Field::Value)?;
        let (count, at) = r.len(Field::HeaderCount)?;
        // Each header takes at least MIN_HEADER_LEN bytes, so a count the input cannot hold is
        // rejected before anything is allocated for it.
        if count > r.remaining() / MIN_HEADER_LEN {
            return Err(DecodeError::LengthOutOfRange {
                field: Field::HeaderCount,
                at,
                len: count as u64,
                remaining: r.remaining(),
            });
        }
        let mut headers = Vec::with_capacity(count);
        for index in 0..count {
            let key_range = r.run(Field::HeaderKey)?;
            let key = std::str::from_utf8(r.slice(&key_range))
                .map_err(|_| DecodeError::HeaderKeyNotUtf8 {
                    index,
                    at: key_range.start,
                })?
                .to_owned();
            let value = r.run(Field::HeaderValue)?;
            headers.push((key, value));
        }
        Ok(Layout {
            timestamp,
            key,
            value,
            headers,
            len: r.pos,
        })
    }

    fn build(&self, bytes: impl Fn(&Range<usize>) -> Bytes) -> Message {
        Message {
            timestamp: self.timestamp,
            key: self.key.as_ref().map(&bytes),
            value: bytes(&self.value),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| Header {
                    key: k.clone(),
                    value: bytes(v),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_message_round_trips() {
        let m = Message::new(Bytes::new());
        let buf = m.to_vec();
        assert_eq!(buf.len(), FIXED_PREFIX + 8);
        assert_eq!(Message::decode(&buf).unwrap(), (m, buf.len()));
    }

    #[test]
    fn empty_key_differs_from_no_key() {
        let with_empty = Message::new("v").with_key(Bytes::new());
        let without = Message::new("v");
        let a = Message::decode(&with_empty.to_vec()).unwrap().0;
        let b = Message::decode(&without.to_vec()).unwrap().0;
        assert_eq!(a.key, Some(Bytes::new()));
        assert_eq!(b.key, None);
    }

    #[test]
    fn decode_bytes_shares_the_buffer() {
        let m = Message::new(vec![7u8; 100])
            .with_key("k")
            .with_header("h", "x");
        let buf = Bytes::from(m.to_vec());
        let (d, n) = Message::decode_bytes(&buf).unwrap();
        assert_eq!(d, m);
        assert_eq!(n, buf.len());
        // The value is a view into `buf`, not a copy.
        let start = buf.as_ptr() as usize;
        let v = d.value.as_ptr() as usize;
        assert!(v >= start && v < start + buf.len());
    }
}
