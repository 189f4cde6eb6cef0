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

/// Bytes of a varint holding `v` (zigzag, then 7 bits a byte).
#[inline]
fn varint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    let bits = 64 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Bytes of a length-prefixed byte run of `len` bytes.
#[inline]
fn run_len(len: usize) -> usize {
    varint_len(i64::try_from(len).unwrap_or(i64::MAX)) + len
}

/// Bytes of a record's body (after its length varint).
#[inline]
fn body_len(msg: &Message, timestamp_delta: i64, offset_delta: i32) -> usize {
    let mut n = 1 + varint_len(timestamp_delta) + varint_len(i64::from(offset_delta));
    n += msg.key.as_ref().map_or(1, |k| run_len(k.len()));
    n += run_len(msg.value.len());
    n += varint_len(i64::try_from(msg.headers.len()).unwrap_or(i64::MAX));
    for h in &msg.headers {
        n += run_len(h.key.len()) + run_len(h.value.len());
    }
    n
}

/// Bytes `msg` takes as a record of a batch (its length varint included), at the given
/// deltas. A batch of one is [`HEADER_LEN`] more.
///
/// ```
/// use krabka_protocol::batch::record_size;
/// use krabka_protocol::Message;
///
/// // length (2), attributes, two deltas, null key, value length (2), the value, no headers
/// assert_eq!(record_size(&Message::new(vec![0u8; 100]), 0, 0), 2 + 1 + 1 + 1 + 1 + 2 + 100 + 1);
/// ```
pub fn record_size(msg: &Message, timestamp_delta: i64, offset_delta: i32) -> usize {
    let body = body_len(msg, timestamp_delta, offset_delta);
    varint_len(i64::try_from(body).unwrap_or(i64::MAX)) + body
}

/// Writes into a slice sized exactly for what is written (no capacity checks per byte).
struct Cursor<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    #[inline]
    fn byte(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.at) {
            *slot = b;
        }
        self.at += 1;
    }

    #[inline]
    fn unsigned(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    #[inline]
    fn varlong(&mut self, v: i64) {
        self.unsigned(((v << 1) ^ (v >> 63)) as u64);
    }

    #[inline]
    fn bytes(&mut self, bytes: &[u8]) {
        if let Some(slot) = self.buf.get_mut(self.at..self.at + bytes.len()) {
            slot.copy_from_slice(bytes);
        }
        self.at += bytes.len();
    }

    /// A length-prefixed run (its length fits an `i32`: the record's does).
    #[inline]
    fn run(&mut self, bytes: &[u8]) {
        self.varlong(bytes.len() as i64);
        self.bytes(bytes);
    }
}

/// Appends one record whose body (after its length varint) is `body` bytes long; with
/// `skip_value`, everything but the value's bytes, and returns where they belong in `out`.
fn put_record(
    out: &mut Vec<u8>,
    msg: &Message,
    body: usize,
    timestamp_delta: i64,
    offset_delta: i32,
    index: usize,
    skip_value: bool,
) -> Result<Option<usize>, BatchError> {
    // Every length inside the record is below the record's own: one check covers them all.
    let len = i32::try_from(body).map_err(|_| BatchError::Encode {
        field: "length",
        index,
    })?;
    let start = out.len();
    let skipped = if skip_value { msg.value.len() } else { 0 };
    let size = varint_len(i64::from(len)) + body - skipped;
    out.resize(start + size, 0);
    let mut w = Cursor {
        buf: out.get_mut(start..).unwrap_or_default(),
        at: 0,
    };
    w.varlong(i64::from(len));
    w.byte(0);
    w.varlong(timestamp_delta);
    w.varlong(i64::from(offset_delta));
    match &msg.key {
        None => w.varlong(-1),
        Some(k) => w.run(k),
    }
    let value_at = if skip_value {
        w.varlong(msg.value.len() as i64);
        Some(start + w.at)
    } else {
        w.run(&msg.value);
        None
    };
    w.varlong(msg.headers.len() as i64);
    for h in &msg.headers {
        w.run(h.key.as_bytes());
        w.run(&h.value);
    }
    debug_assert_eq!(w.at, size, "record size");
    Ok(value_at)
}

/// Bytes reserved up front for a batch's records: a guess from the first record's size, never
/// more than `max_bytes` or 16 MiB (the buffer grows past a wrong guess).
fn records_guess(first_size: usize, count: usize, max_bytes: usize) -> usize {
    first_size
        .saturating_mul(count)
        .min(max_bytes)
        .min(16 << 20)
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
    for (i, msg) in msgs.iter().enumerate() {
        let Ok(delta) = i32::try_from(i) else { break };
        let Some(ts_delta) = msg.timestamp.checked_sub(base_timestamp) else {
            break;
        };
        let body = body_len(msg, ts_delta, delta);
        let size = varint_len(i64::try_from(body).unwrap_or(i64::MAX)) + body;
        if i == 0 {
            if split.is_none() {
                out.reserve(records_guess(size, msgs.len(), max_bytes));
            }
        } else if records_len.saturating_add(size) > max_bytes {
            break;
        }
        let borrow = split
            .as_ref()
            .is_some_and(|s| msg.value.len() >= s.borrow_at_least);
        let value_at = put_record(out, msg, body, ts_delta, delta, i, borrow)?;
        if let (Some(s), Some(at)) = (split.as_deref_mut(), value_at) {
            s.pieces.push(BatchPiece::Bytes(s.own_from..at));
            s.pieces.push(BatchPiece::Value(s.index_base + i));
            s.own_from = at;
        }
        records_len += size;
        max_timestamp = max_timestamp.max(msg.timestamp);
        taken += 1;
    }
    Ok((taken, max_timestamp))
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
