//! Decoding batches into records: the seq-checked decoding of a buffer of consecutive batches.

use std::path::Path;

use bytes::Bytes;
use krabka_protocol::batch::StoredHeader;

use super::batch::{BadBytes, Checked, CheckedHeader, check_v2_batch_at, peek_batch};
use super::format::old_frame_reason;
use super::old::is_old_frame;
use crate::{Error, Record};

mod records;

pub(crate) use self::records::batch_records;
use self::records::decode_batch;

/// Records decoded from the front of a buffer by [`decode_records`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecords {
    /// The decoded records with `seq >= from_seq`, in order.
    pub records: Vec<Record>,
    /// Bytes of complete batches consumed from the start of the buffer (including skipped
    /// batches): a chunked reader continues at this offset. A batch that `max` stopped inside
    /// is not counted: its records after the last one returned are read from it again.
    pub consumed: usize,
    /// The seq the batch at `consumed` must start with (the seq after the last consumed batch,
    /// or the first seq of the batch `max` stopped inside); `None` when no batch was consumed
    /// or entered.
    pub next_seq: Option<u64>,
}

/// Decodes consecutive record batches from the start of `buf`.
///
/// Records with `seq < from_seq` are checked and skipped; decoding stops after `max` records
/// or at an incomplete trailing batch. An incomplete trailing batch is not an error:
/// [`DecodedRecords::consumed`] tells where the complete batches end, so a chunked reader
/// fetches more bytes and continues there. The records share `buf` (no copy).
///
/// Seqs are checked across the buffer: every complete batch must start at the seq after the
/// previous batch's last (a buffer spliced from two places of a segment, or from two segments, is
/// rejected). The first batch's seq is not checked; use [`decode_records_at`] when the caller
/// knows which seq the buffer must start with (for example bytes fetched from a remote store
/// at a position an index gave for a seq).
///
/// # Errors
/// [`Error::Corrupt`] (with an empty `path` and `position` relative to `buf`: the start of the
/// offending batch) when a complete batch has a bad length, magic, CRC or record, or its seq
/// does not follow the previous batch's; [`Error::NotAMessage`] at a record a `Message`
/// cannot hold (a null value, a control or transactional batch).
pub fn decode_records(buf: &Bytes, from_seq: u64, max: usize) -> Result<DecodedRecords, Error> {
    decode_with(buf, None, from_seq, max, false)
}

/// [`decode_records`] that also requires the first batch of `buf` to start at
/// `expected_first_seq` (when `buf` holds a complete batch and `max > 0`).
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{decode_records_at, encode_batch_of_one};
///
/// let mut buf = Vec::new();
/// encode_batch_of_one(7, &Message::new("a"), &mut buf)?;
/// let buf = Bytes::from(buf);
/// assert_eq!(decode_records_at(&buf, 7, 7, 10)?.records.len(), 1);
/// // The bytes do not start at seq 6.
/// let wrong = decode_records_at(&buf, 6, 6, 10);
/// assert!(matches!(wrong, Err(krabka_storage::Error::Corrupt { position: 0, .. })), "{wrong:?}");
/// # Ok::<(), krabka_storage::Error>(())
/// ```
///
/// # Errors
/// As [`decode_records`], and [`Error::Corrupt`] at position 0 when the first batch's seq is
/// not `expected_first_seq`.
pub fn decode_records_at(
    buf: &Bytes,
    expected_first_seq: u64,
    from_seq: u64,
    max: usize,
) -> Result<DecodedRecords, Error> {
    decode_with(buf, Some(expected_first_seq), from_seq, max, false)
}

/// [`decode_records_at`] for a caller that wants records from `from_seq` deep inside `buf`
/// (a point read in a cached chunk): batches wholly before `from_seq`, other than the first,
/// are stepped over by their header alone, without a CRC check, the way `Log::read` steps
/// from an index entry to the seq asked for. Nothing of a skipped batch is returned; every
/// record returned is checked (CRC, seq) as by [`decode_records_at`], and a damaged length
/// among the skipped batches lands on bytes that fail the seq or CRC check.
///
/// ```
/// use krabka_protocol::{Bytes, Message};
/// use krabka_storage::segment::{decode_records_skipping, encode_batch_of_one};
///
/// let mut buf = Vec::new();
/// for seq in 1..=100 {
///     encode_batch_of_one(seq, &Message::new(format!("r{seq}")), &mut buf)?;
/// }
/// let buf = Bytes::from(buf);
/// let got = decode_records_skipping(&buf, 1, 90, 1)?;
/// assert_eq!(got.records[0].seq, 90);
/// # Ok::<(), krabka_storage::Error>(())
/// ```
///
/// # Errors
/// As [`decode_records_at`].
pub fn decode_records_skipping(
    buf: &Bytes,
    expected_first_seq: u64,
    from_seq: u64,
    max: usize,
) -> Result<DecodedRecords, Error> {
    decode_with(buf, Some(expected_first_seq), from_seq, max, true)
}

fn decode_with(
    buf: &Bytes,
    expect: Option<u64>,
    from_seq: u64,
    max: usize,
    fast_skip: bool,
) -> Result<DecodedRecords, Error> {
    decode_within(buf, expect, from_seq, max, u64::MAX, fast_skip)
}

/// Which batches wholly before the first seq asked for a decode steps over by their header
/// alone (see [`decode_chunk`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Every batch is checked whole.
    Never,
    /// Every batch but the buffer's first.
    AfterFirst,
    /// Every batch, the first included.
    All,
}

impl From<bool> for Skip {
    /// `true` is [`Skip::AfterFirst`], `false` [`Skip::Never`].
    fn from(fast_skip: bool) -> Self {
        if fast_skip {
            Skip::AfterFirst
        } else {
            Skip::Never
        }
    }
}

/// [`decode_records_at`] (or, `expect` `None`, [`decode_records`]) that gives no record of a
/// batch reaching past `last_allowed` (see [`decode_chunk`]).
pub(crate) fn decode_within(
    buf: &Bytes,
    expect: Option<u64>,
    from_seq: u64,
    max: usize,
    last_allowed: u64,
    fast_skip: bool,
) -> Result<DecodedRecords, Error> {
    let mut records = Vec::new();
    let end = decode_chunk(
        buf,
        from_seq,
        max,
        expect,
        last_allowed,
        fast_skip,
        &mut records,
    )
    .map_err(|e| e.into_error(Path::new(""), 0))?;
    Ok(DecodedRecords {
        records,
        consumed: end.consumed,
        next_seq: end.next_seq,
    })
}

/// Where a buffer's first batch stands for [`decode_chunk`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum First {
    /// Any seq (the seqs of the batches after it are still checked).
    Any,
    /// It must start at this seq.
    Seq(u64),
    /// It is the batch an earlier decode checked whole, [`ChunkEnd::inside`], in this very
    /// buffer: its length, CRC and header checks are not made again (its records are read and
    /// checked as any batch's). Honoured only when the buffer starts at the address that batch
    /// was checked at (the holder of the buffer keeps that memory alive and unchanged) and
    /// every field of the header there is the checked one; else the batch is checked.
    Checked(CheckedAt),
}

/// A batch an earlier [`decode_chunk`] checked whole, and where it lay.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckedAt {
    /// The batch's checked header.
    pub(crate) batch: CheckedHeader,
    /// The address of its first byte in the buffer that decode read.
    pub(crate) addr: usize,
}

impl From<Option<u64>> for First {
    /// `Some(seq)` is [`First::Seq`], `None` [`First::Any`].
    fn from(expect: Option<u64>) -> Self {
        expect.map_or(Self::Any, Self::Seq)
    }
}

/// Where [`decode_chunk`] stopped.
#[derive(Debug)]
pub(crate) struct ChunkEnd {
    /// Bytes of whole batches consumed (see [`DecodedRecords::consumed`]).
    pub(crate) consumed: usize,
    /// The seq the batch at `consumed` must start with (see [`DecodedRecords::next_seq`]).
    pub(crate) next_seq: Option<u64>,
    /// When `max` stopped inside the batch at `consumed`: that batch, checked whole (its CRC,
    /// by this decode or the one it was told of, its header and every record), so that a
    /// decode of the same buffer from there can skip the batch's checks ([`First::Checked`]).
    pub(crate) inside: Option<CheckedAt>,
}

/// [`decode_records`] that also insists the first batch starts where `first` says and appends
/// the records to `out`; returns the bytes consumed, the seq the batch there must start with
/// (see [`DecodedRecords`]) and whether `max` stopped inside that batch ([`ChunkEnd`]).
///
/// With `skip` ([`Skip`]), batches wholly before `from_seq` are stepped over by their header
/// alone (base offset, length, last offset), without a CRC check: nothing of them is returned,
/// every record returned is still checked, and a wrong length lands on bytes that fail the
/// seq or CRC check of a later batch. [`Skip::AfterFirst`] checks the buffer's first batch
/// whole, so that a reader positioned by an index entry learns at that entry's position when
/// the entry does not point at a batch; [`Skip::All`] steps over it too, for a caller that
/// reads again from a trusted position whenever a read from an entry fails anywhere.
///
/// No batch reaching past `last_allowed` (the last seq of a closed segment: the next segment
/// starts after it) gives a record: it is damage at its position. Checked once per batch, from
/// its header.
pub(crate) fn decode_chunk(
    buf: &Bytes,
    from_seq: u64,
    max: usize,
    first: impl Into<First>,
    last_allowed: u64,
    skip: impl Into<Skip>,
    out: &mut Vec<Record>,
) -> Result<ChunkEnd, BadBytes> {
    let skip = skip.into();
    let (mut expect, mut checked) = match first.into() {
        First::Any => (None, None),
        First::Seq(seq) => (Some(seq), None),
        First::Checked(c) => (Some(c.batch.seq), Some(c).filter(|c| describes(c, buf))),
    };
    let mut pos = 0usize;
    let mut next_seq = None;
    let mut left = max;
    while left > 0 && pos < buf.len() {
        if skip != Skip::Never
            && (pos > 0 || skip == Skip::All)
            && let Some(e) = expect.filter(|&e| e < from_seq)
        {
            let (at, after) = step_over(buf, pos, e, from_seq, last_allowed)?;
            if at != pos {
                pos = at;
                expect = Some(after);
                next_seq = expect;
                continue;
            }
        }
        let rest = buf.get(pos..).unwrap_or(&[]);
        // Checked in place: the records are read from `buf` without a handle per batch.
        let known = checked.take().filter(|_| pos == 0).map(|c| c.batch);
        let batch = match known.map_or_else(|| check_v2_batch_at(buf, pos), Checked::Batch) {
            Checked::Incomplete => break,
            Checked::Bad(_) if is_old_frame(rest, expect) || is_old_frame(rest, None) => {
                return Err(BadBytes::bad(pos, old_frame_reason()));
            }
            Checked::Bad(reason) => return Err(BadBytes::bad(pos, reason)),
            Checked::Batch(f) => f,
        };
        if let Some(e) = expect
            && batch.seq != e
        {
            return Err(BadBytes::bad(
                pos,
                format!("batch starts at seq {}, expected {e}", batch.seq),
            ));
        }
        if batch.last > last_allowed {
            return Err(beyond_end(pos, batch.seq, batch.last, last_allowed));
        }
        let after = batch
            .last
            .checked_add(1)
            .ok_or_else(|| BadBytes::bad(pos, "seq overflows u64"))?;
        let (seq, len) = (batch.seq, batch.len);
        if batch.last >= from_seq && !decode_batch(buf, &batch, pos, from_seq, &mut left, out)? {
            // `max` stopped inside this batch: it is read again from its start.
            return Ok(ChunkEnd {
                consumed: pos,
                next_seq: Some(seq),
                inside: Some(CheckedAt {
                    batch,
                    addr: buf.as_ptr().addr().saturating_add(pos),
                }),
            });
        }
        pos += len;
        expect = Some(after);
        next_seq = Some(after);
    }
    Ok(ChunkEnd {
        consumed: pos,
        next_seq,
        inside: None,
    })
}

/// Whether `c` is the batch at the start of `buf`: `buf` starts where it was checked, and
/// the header there is the checked one, field by field (its seqs, length and stored CRC among
/// them). A [`First::Checked`] batch that is not is ignored, and the batch checked.
fn describes(checked: &CheckedAt, buf: &[u8]) -> bool {
    let (h, c) = (&checked.batch, &checked.batch.header);
    buf.as_ptr().addr() == checked.addr
        && peek_batch(buf) == Some((h.seq, h.last, h.len))
        && StoredHeader::read(buf).is_some_and(|s| {
            (
                s.base_offset,
                s.batch_length,
                s.partition_leader_epoch,
                s.crc,
            ) == (
                c.base_offset,
                c.batch_length,
                c.partition_leader_epoch,
                c.crc,
            ) && (
                s.attributes,
                s.last_offset_delta,
                s.base_timestamp,
                s.max_timestamp,
            ) == (
                c.attributes,
                c.last_offset_delta,
                c.base_timestamp,
                c.max_timestamp,
            ) && (
                s.producer_id,
                s.producer_epoch,
                s.base_sequence,
                s.record_count,
            ) == (
                c.producer_id,
                c.producer_epoch,
                c.base_sequence,
                c.record_count,
            )
        })
}

/// Steps over the batches of `buf` from `pos` (the first one starting at seq `expect`) that
/// end before `from_seq`, by their headers alone (see [`decode_chunk`]); returns where the
/// first batch not stepped over starts, and its seq. Stops at a header [`peek_batch`] cannot
/// read (the decoding that follows names what is wrong there).
fn step_over(
    buf: &[u8],
    mut pos: usize,
    mut expect: u64,
    from_seq: u64,
    last_allowed: u64,
) -> Result<(usize, u64), BadBytes> {
    while let Some((seq, last, len)) = buf.get(pos..).and_then(peek_batch) {
        if last >= from_seq {
            break;
        }
        if seq != expect {
            return Err(BadBytes::bad(
                pos,
                format!("batch starts at seq {seq}, expected {expect}"),
            ));
        }
        if last > last_allowed {
            return Err(beyond_end(pos, seq, last, last_allowed));
        }
        pos += len;
        expect = last + 1;
    }
    Ok((pos, expect))
}

/// What the reason of [`beyond_end`] says, for a reader that adds which file follows.
pub(crate) const BEYOND_END: &str = "lies beyond the end of the closed segment";

/// The error for a batch of seqs `seq..=last` at `pos` that runs past `last_allowed`, the last
/// seq its closed segment may hold.
pub(crate) fn beyond_end(pos: usize, seq: u64, last: u64, last_allowed: u64) -> BadBytes {
    BadBytes::bad(
        pos,
        format!(
            "a batch of seqs {seq}..={last} {BEYOND_END}, whose last seq is {last_allowed} (the \
             next segment starts at seq {})",
            last_allowed.saturating_add(1)
        ),
    )
}

#[cfg(test)]
mod tests;
