//! [`Message`]s as the records of a batch: the encoder the log's appends use, and the exact
//! conversion back.

use super::encode::{
    ATTRIBUTES_AT, CRC_AT, LAST_OFFSET_DELTA_AT, MAX_TIMESTAMP_AT, RECORD_COUNT_AT,
};
use super::{
    BatchError, Compression, HEADER_LEN, LOG_OVERHEAD, MAGIC, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, RecordRef, codec,
};
use crate::{Header, Message};

mod size;

pub use size::record_size;
use size::{SHORT_LIMIT, body_len, short_len, short_uvarint, varint_len, zigzag};

/// Most bytes of the fields a record starts with, up to its key: length (5), attributes (1),
/// timestampDelta (10), offsetDelta (5), keyLength (5); and, for a null key, valueLength (5).
/// Room this large past a record's bytes is kept zeroed, so that fixed-size writes never
/// need a check of their own.
const HEAD_MAX: usize = 32;

/// Writes a record into zeroed room of a buffer, at a position held in a register (not in a
/// `Vec`'s length, which an append through the `Vec` stores and loads again after every copy).
/// The caller has made room for what is written, so no check here ever fails.
struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
    /// Whether a write found no room (never, when the caller's sizes are right): the record
    /// is then refused, never left with bytes missing.
    short_of_room: bool,
}

impl Writer<'_> {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        match self.buf.get_mut(self.at) {
            Some(slot) => *slot = b,
            None => self.short_of_room = true,
        }
        self.at += 1;
    }

    /// Unsigned LEB128: 7 bits a byte, the high bit set on every byte but the last.
    #[inline(always)]
    fn uvarint(&mut self, mut z: u64) {
        while z >= 0x80 {
            self.byte(z as u8 | 0x80);
            z >>= 7;
        }
        self.byte(z as u8);
    }

    #[inline(always)]
    fn bytes(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.at..self.at + bytes.len()) {
            Some(slot) => slot.copy_from_slice(bytes),
            None => self.short_of_room = true,
        }
        self.at += bytes.len();
    }

    /// A varint of at most 3 bytes ([`short_uvarint`]) as one 4-byte store; the byte past it
    /// is overwritten by what follows, or lies in the zeroed room past the record.
    #[inline(always)]
    fn short(&mut self, short: u64) {
        match self.buf.get_mut(self.at..self.at + 4) {
            Some(slot) => slot.copy_from_slice(&(short as u32).to_le_bytes()),
            None => self.short_of_room = true,
        }
        self.at += short_len(short);
    }

    /// A length-prefixed run.
    #[inline]
    fn run(&mut self, bytes: &[u8]) {
        self.uvarint(zigzag(bytes.len() as i64));
        self.bytes(bytes);
    }

    /// One record of any shape whose body (after its length varint) is `body` bytes long;
    /// with `skip_value`, everything but the value's bytes, returning where they belong.
    #[inline]
    fn record(
        &mut self,
        msg: &Message,
        body: i32,
        timestamp_delta: i64,
        offset_delta: i32,
        skip_value: bool,
    ) -> Option<usize> {
        self.uvarint(zigzag(i64::from(body)));
        self.byte(0); // Record attributes: unused.
        self.uvarint(zigzag(timestamp_delta));
        self.uvarint(zigzag(i64::from(offset_delta)));
        match &msg.key {
            None => self.byte(1), // keyLength -1: null.
            Some(k) => self.run(k),
        }
        self.uvarint(zigzag(msg.value.len() as i64));
        let value_at = if skip_value {
            Some(self.at)
        } else {
            self.bytes(&msg.value);
            None
        };
        self.uvarint(zigzag(msg.headers.len() as i64));
        for h in &msg.headers {
            self.run(h.key.as_bytes());
            self.run(&h.value);
        }
        value_at
    }

    /// A record of the common shape ([`Plain`]); as [`record`](Self::record).
    #[inline(always)]
    fn plain(&mut self, p: &Plain, msg: &Message, skip_value: bool) -> Option<usize> {
        self.short(p.len);
        self.byte(0); // Record attributes: unused.
        self.short(p.ts);
        self.short(p.off);
        self.byte(1); // keyLength -1: null.
        self.short(p.value);
        let value_at = if skip_value {
            Some(self.at)
        } else {
            self.bytes(&msg.value);
            None
        };
        self.byte(0); // headerCount 0.
        value_at
    }
}

/// One piece of a batch [`encode_messages_split`] encoded: the batch is its pieces in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchPiece {
    /// These bytes of the output buffer.
    Bytes(std::ops::Range<usize>),
    /// The value of this message (its index in the caller's messages, see
    /// [`encode_messages_split`]), not copied.
    Value(usize),
}

/// Where a split encoding puts its pieces.
struct Split<'a> {
    pieces: &'a mut Vec<BatchPiece>,
    /// Values at least this long are not copied.
    borrow_at_least: usize,
    /// Added to a message's index in the slice encoded to name it in a piece.
    index_base: usize,
    /// Where the output's bytes not yet in a piece start.
    own_from: usize,
}

/// Appends the records of `msgs` to `out`, in one pass, as long as they stay within
/// `max_bytes` (at least one is taken) and their timestamp deltas from `base_timestamp` hold
/// in a varlong; returns how many it took and their largest timestamp. With `split`, the
/// values it names are left out of `out` and listed as pieces.
fn put_records(
    out: &mut Vec<u8>,
    msgs: &[Message],
    base_timestamp: i64,
    max_bytes: usize,
    mut split: Option<&mut Split<'_>>,
) -> Result<(usize, i64), BatchError> {
    let mut records_len = 0usize;
    let mut max_timestamp = base_timestamp;
    let mut taken = 0usize;
    let borrow_at_least = split.as_ref().map_or(usize::MAX, |s| s.borrow_at_least);
    // Where the next record goes; `out` is longer (zeroed room) until the end.
    let mut at = out.len();
    let mut last = Shape::NONE;
    let result = (|| {
        for (i, msg) in msgs.iter().enumerate() {
            let Ok(delta) = i32::try_from(i) else { break };
            let Some(ts_delta) = msg.timestamp.checked_sub(base_timestamp) else {
                break;
            };
            let plain = Plain::of(msg, ts_delta, delta, &mut last);
            let (body, size) = match &plain {
                Some(p) => (p.body, p.size),
                None => {
                    let body = body_len(msg, ts_delta, delta);
                    (
                        body,
                        varint_len(i64::try_from(body).unwrap_or(i64::MAX)) + body,
                    )
                }
            };
            if i > 0 && records_len.saturating_add(size) > max_bytes {
                break;
            }
            // Every length inside the record is below the record's own: one check covers
            // them all.
            let body = i32::try_from(body).map_err(|_| BatchError::Encode {
                field: "length",
                index: i,
            })?;
            let borrow = msg.value.len() >= borrow_at_least;
            let own = if borrow { size - msg.value.len() } else { size };
            if at + own + HEAD_MAX > out.len() {
                // Zeroed room for this record and, guessed from its size, the rest of the
                // batch: one `resize` for a batch of records of one size.
                let rest = msgs.len() - i;
                let guess = own
                    .saturating_mul(rest)
                    .min(max_bytes.saturating_sub(records_len))
                    .min(16 << 20);
                out.resize(at + own.max(guess) + HEAD_MAX, 0);
            }
            let mut w = Writer {
                buf: out.as_mut_slice(),
                at,
                short_of_room: false,
            };
            let value_at = match &plain {
                Some(p) => w.plain(p, msg, borrow),
                None => w.record(msg, body, ts_delta, delta, borrow),
            };
            if w.short_of_room || w.at - at != own {
                // The record's size was computed wrong: refused rather than written short.
                debug_assert!(
                    false,
                    "record {i}: {} bytes written, {own} sized",
                    w.at - at
                );
                return Err(BatchError::Encode {
                    field: "length",
                    index: i,
                });
            }
            at = w.at;
            if let (Some(s), Some(value_at)) = (split.as_deref_mut(), value_at) {
                s.pieces.push(BatchPiece::Bytes(s.own_from..value_at));
                s.pieces.push(BatchPiece::Value(s.index_base + i));
                s.own_from = value_at;
            }
            records_len += size;
            max_timestamp = max_timestamp.max(msg.timestamp);
            taken += 1;
        }
        Ok(())
    })();
    out.truncate(at);
    result.map(|()| (taken, max_timestamp))
}

/// A record of the common shape (no key, no headers, every varint of its head at most 3
/// bytes: a value below 1 MiB, deltas below 2^20), its varints ([`short_uvarint`]) computed
/// without a branch.
struct Plain {
    len: u64,
    ts: u64,
    off: u64,
    value: u64,
    /// Bytes of its body (after its length varint).
    body: usize,
    /// Bytes of the whole record.
    size: usize,
}

/// The value and record lengths of the last record of the common shape: records of one value
/// size share them (the record length changes only with a delta's width), so they are not
/// encoded again.
struct Shape {
    value_len: usize,
    value: u64,
    body: usize,
    len: u64,
}

impl Shape {
    /// Matches no record (no value is `usize::MAX` bytes long, no body 0 bytes).
    const NONE: Shape = Shape {
        value_len: usize::MAX,
        value: 0,
        body: 0,
        len: 0,
    };
}

impl Plain {
    /// `msg` as a record of the common shape, or `None`.
    #[inline(always)]
    fn of(
        msg: &Message,
        timestamp_delta: i64,
        offset_delta: i32,
        last: &mut Shape,
    ) -> Option<Plain> {
        if msg.key.is_some() || !msg.headers.is_empty() {
            return None;
        }
        let (ts, off) = (zigzag(timestamp_delta), zigzag(i64::from(offset_delta)));
        if (ts | off) >= SHORT_LIMIT {
            return None;
        }
        let value_len = msg.value.len();
        if value_len != last.value_len {
            let value = zigzag(i64::try_from(value_len).ok()?);
            if value >= SHORT_LIMIT {
                return None;
            }
            last.value_len = value_len;
            last.value = short_uvarint(value);
        }
        let (ts, off, value) = (short_uvarint(ts), short_uvarint(off), last.value);
        // attributes, the deltas, keyLength -1, valueLength, the value, headerCount 0.
        let body = 1 + short_len(ts) + short_len(off) + 1 + short_len(value) + value_len + 1;
        if body != last.body {
            let len = zigzag(i64::try_from(body).ok()?);
            if len >= SHORT_LIMIT {
                return None;
            }
            last.body = body;
            last.len = short_uvarint(len);
        }
        Some(Plain {
            len: last.len,
            ts,
            off,
            value,
            body,
            size: short_len(last.len) + body,
        })
    }
}

/// Appends to `out` one v2 batch at `base_offset` holding the first messages of `msgs`, and
/// returns how many it took: as many as keep the batch's records within `max_bytes`
/// (uncompressed; always at least one) and whose timestamps differ from the first one's by an
/// amount a varlong holds. The batch is what Kafka's producer writes for them without an
/// idempotent producer: create-time timestamps (`baseTimestamp` the first record's,
/// `maxTimestamp` the largest), producer id, epoch and sequence -1, partition leader epoch -1,
/// offset deltas 0..n-1, each message's key, value and headers as they are. Nothing is written
/// to `out` on error, and nothing for an empty `msgs` (which returns 0).
///
/// ```
/// use krabka_protocol::batch::{encode_messages, BatchView, Compression};
/// use krabka_protocol::{Bytes, Message};
///
/// let msgs = [Message::new("a").with_timestamp(10), Message::new("b").with_timestamp(12)];
/// let mut out = Vec::new();
/// assert_eq!(encode_messages(&mut out, 7, &msgs, Compression::None, 1 << 20)?, 2);
/// let view = BatchView::parse(&Bytes::from(out))?;
/// assert_eq!((view.header().base_offset, view.header().last_offset()), (7, 8));
/// let back: Vec<Message> = view
///     .records(1 << 20)?
///     .map(|r| Message::try_from(r?))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(back, msgs);
/// # Ok::<(), krabka_protocol::batch::BatchError>(())
/// ```
///
/// # Errors
/// [`BatchError::Encode`] when a length does not fit its field (a value over 2 GiB) or the
/// batch's last offset passes `i64::MAX`; [`BatchError::CodecDisabled`] or
/// [`BatchError::Compress`] from the codec.
pub fn encode_messages(
    out: &mut Vec<u8>,
    base_offset: i64,
    msgs: &[Message],
    compression: Compression,
    max_bytes: usize,
) -> Result<usize, BatchError> {
    encode(out, None, base_offset, msgs, compression, max_bytes)
}

/// [`encode_messages`] without compression, leaving the values of at least `borrow_at_least`
/// bytes out of `out`: for a writer that hands the batch to a vectored write (`pwritev`)
/// instead of copying large values into one buffer first. `pieces` gets, in order, the pieces
/// the batch is made of: ranges of `out` and the values left out, each named by its index in
/// `msgs` plus `index_base`. The header (CRC included) is complete in `out`; concatenated, the
/// pieces are byte for byte what [`encode_messages`] writes. Nothing is added to `out` or
/// `pieces` on error.
///
/// ```
/// use krabka_protocol::batch::{encode_messages, encode_messages_split, BatchPiece, Compression};
/// use krabka_protocol::Message;
///
/// let msgs = [Message::new(vec![1u8; 4096]), Message::new("small")];
/// let (mut out, mut pieces) = (Vec::new(), Vec::new());
/// assert_eq!(encode_messages_split(&mut out, &mut pieces, 0, &msgs, 0, 1 << 20, 1024)?, 2);
/// let joined: Vec<u8> = pieces
///     .iter()
///     .flat_map(|p| match p {
///         BatchPiece::Bytes(r) => out[r.clone()].to_vec(),
///         BatchPiece::Value(i) => msgs[*i].value.to_vec(),
///     })
///     .collect();
/// let mut whole = Vec::new();
/// encode_messages(&mut whole, 0, &msgs, Compression::None, 1 << 20)?;
/// assert_eq!(joined, whole);
/// # Ok::<(), krabka_protocol::batch::BatchError>(())
/// ```
///
/// # Errors
/// As [`encode_messages`].
pub fn encode_messages_split(
    out: &mut Vec<u8>,
    pieces: &mut Vec<BatchPiece>,
    base_offset: i64,
    msgs: &[Message],
    index_base: usize,
    max_bytes: usize,
    borrow_at_least: usize,
) -> Result<usize, BatchError> {
    let pieces_from = pieces.len();
    let mut split = Split {
        pieces,
        borrow_at_least: borrow_at_least.max(1),
        index_base,
        own_from: out.len(),
    };
    let result = encode(
        out,
        Some(&mut split),
        base_offset,
        msgs,
        Compression::None,
        max_bytes,
    );
    if result.is_err() {
        split.pieces.truncate(pieces_from);
    }
    result
}

/// [`encode_messages`], and with `split` [`encode_messages_split`].
fn encode(
    out: &mut Vec<u8>,
    mut split: Option<&mut Split<'_>>,
    base_offset: i64,
    msgs: &[Message],
    compression: Compression,
    max_bytes: usize,
) -> Result<usize, BatchError> {
    let Some(first) = msgs.first() else {
        return Ok(0);
    };
    let base_timestamp = first.timestamp;
    let start = out.len();
    let pieces_from = split.as_ref().map_or(0, |s| s.pieces.len());
    let result = (|| {
        // The header, with the fields that depend on the records taken patched in after them.
        out.reserve(HEADER_LEN);
        out.extend_from_slice(&base_offset.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // batchLength
        out.extend_from_slice(&NO_PARTITION_LEADER_EPOCH.to_be_bytes());
        out.extend_from_slice(&MAGIC.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // crc
        out.extend_from_slice(&i16::from(compression.code()).to_be_bytes());
        out.extend_from_slice(&[0; 4]); // lastOffsetDelta
        out.extend_from_slice(&base_timestamp.to_be_bytes());
        out.extend_from_slice(&[0; 8]); // maxTimestamp
        out.extend_from_slice(&NO_PRODUCER_ID.to_be_bytes());
        out.extend_from_slice(&NO_PRODUCER_EPOCH.to_be_bytes());
        out.extend_from_slice(&NO_SEQUENCE.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // recordCount
        let (taken, max_timestamp) = if compression == Compression::None {
            put_records(out, msgs, base_timestamp, max_bytes, split.as_deref_mut())?
        } else {
            let mut plain = Vec::new();
            let put = put_records(&mut plain, msgs, base_timestamp, max_bytes, None)?;
            out.extend_from_slice(&codec::compress(compression, &plain)?);
            put
        };
        // The values left out of `out`, and the last run of its bytes as a piece.
        let mut borrowed = 0usize;
        if let Some(s) = split.as_deref_mut() {
            if s.own_from < out.len() {
                s.pieces.push(BatchPiece::Bytes(s.own_from..out.len()));
            }
            s.own_from = out.len();
            for p in s.pieces.get(pieces_from..).unwrap_or_default() {
                if let BatchPiece::Value(i) = p {
                    let msg = i.checked_sub(s.index_base).and_then(|j| msgs.get(j));
                    borrowed += msg.map_or(0, |m| m.value.len());
                }
            }
        }
        let count = i32::try_from(taken).map_err(|_| BatchError::Encode {
            field: "recordCount",
            index: taken,
        })?;
        base_offset
            .checked_add(i64::from(count - 1))
            .ok_or(BatchError::Encode {
                field: "baseOffset",
                index: taken,
            })?;
        let batch_length =
            i32::try_from(out.len() - start + borrowed - LOG_OVERHEAD).map_err(|_| {
                BatchError::Encode {
                    field: "batchLength",
                    index: taken,
                }
            })?;
        let header = out
            .get_mut(start..start + HEADER_LEN)
            .ok_or(BatchError::Encode {
                field: "batchLength",
                index: taken,
            })?;
        header[8..12].copy_from_slice(&batch_length.to_be_bytes());
        header[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
            .copy_from_slice(&(count - 1).to_be_bytes());
        header[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8]
            .copy_from_slice(&max_timestamp.to_be_bytes());
        header[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&count.to_be_bytes());
        let crc = match split.as_deref() {
            None => super::crc32c(out.get(start + ATTRIBUTES_AT..).unwrap_or_default()),
            Some(s) => pieces_crc(out, s, msgs, pieces_from, start + ATTRIBUTES_AT),
        };
        if let Some(slot) = out.get_mut(start + CRC_AT..start + ATTRIBUTES_AT) {
            slot.copy_from_slice(&crc.to_be_bytes());
        }
        Ok(taken)
    })();
    if result.is_err() {
        out.truncate(start);
        if let Some(s) = split {
            s.own_from = start;
        }
    }
    result
}

/// The CRC-32C of a split batch's pieces from `pieces_from` on, its bytes in `out` counted
/// from `crc_from` (the batch's attributes).
fn pieces_crc(
    out: &[u8],
    split: &Split<'_>,
    msgs: &[Message],
    pieces_from: usize,
    crc_from: usize,
) -> u32 {
    let mut crc = super::Crc32c::new();
    for p in split.pieces.get(pieces_from..).unwrap_or_default() {
        match p {
            BatchPiece::Bytes(r) => {
                let from = r.start.max(crc_from);
                crc.update(out.get(from..r.end.max(from)).unwrap_or_default());
            }
            BatchPiece::Value(i) => {
                let msg = i.checked_sub(split.index_base).and_then(|j| msgs.get(j));
                crc.update(msg.map_or(&[][..], |m| &m.value[..]));
            }
        }
    }
    crc.finish()
}

impl TryFrom<RecordRef> for Message {
    type Error = BatchError;

    /// The message a record holds, exactly: its timestamp, key, value and headers. A record a
    /// [`Message`] cannot hold (a null value, a header with a null value) is
    /// [`BatchError::NotAMessage`], never a changed message.
    fn try_from(r: RecordRef) -> Result<Message, BatchError> {
        let value = r.value.ok_or(BatchError::NotAMessage {
            offset: r.offset,
            what: "a null value",
        })?;
        let mut headers = Vec::with_capacity(r.headers.len());
        for (key, value) in r.headers {
            let value = value.ok_or(BatchError::NotAMessage {
                offset: r.offset,
                what: "a header with a null value",
            })?;
            headers.push(Header { key, value });
        }
        Ok(Message {
            timestamp: r.timestamp,
            key: r.key,
            value,
            headers,
        })
    }
}
