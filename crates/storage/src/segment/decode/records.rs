//! The records of one checked batch: every record checked, and the header against all of them,
//! before any is handed out.

use std::borrow::Borrow;

use bytes::Bytes;
use krabka_protocol::batch::{BatchError, BatchView, RecordIter};

use crate::Record;
use crate::segment::batch::{BadBytes, CheckedBatch, CheckedHeader, Fault, MAX_UNCOMPRESSED_BATCH};

/// The records of a checked batch, each checked as it is read.
pub(crate) fn batch_records(batch: &CheckedBatch, pos: usize) -> Result<RecordIter, BadBytes> {
    batch
        .view
        .records(MAX_UNCOMPRESSED_BATCH)
        .map_err(|e| BadBytes::of_batch(pos, &e))
}

/// Appends the records `>= from_seq` of the batch at `pos` to `out` as messages, at most
/// `left` of them (counting it down). Returns whether the batch was read to its end (false
/// when `left` ran out before its last record).
///
/// Every record of the batch is checked, and the header against all of them, before any of
/// them is returned: a batch that fails a check anywhere gives none of its records (they are
/// taken back off `out`). A record a `Message` cannot hold in an otherwise valid batch gives
/// the records before it, then [`Fault::NotAMessage`].
pub(super) fn decode_batch(
    buf: &Bytes,
    batch: &CheckedHeader,
    pos: usize,
    from_seq: u64,
    left: &mut usize,
    out: &mut Vec<Record>,
) -> Result<bool, BadBytes> {
    let header = batch.header;
    let refuse = |reason: &str| BadBytes {
        position: pos,
        reason: reason.to_owned(),
        fault: Fault::NotAMessage(batch.seq.max(from_seq)),
    };
    if header.is_control() {
        return Err(refuse("a control batch (transaction markers)"));
    }
    if header.is_transactional() {
        return Err(refuse(
            "a transactional batch, whose records may belong to an aborted transaction",
        ));
    }
    // An uncompressed batch's records are read where they lie in `buf`, with no handle on
    // the batch (only one per value handed out); a compressed one's from its decompressed
    // bytes.
    if let Some(mut records) = BatchView::records_in(buf, pos, &header) {
        return decode_records(&mut records, batch.seq, pos, from_seq, left, out);
    }
    let mut records = BatchView::parse_at(buf, pos)
        .and_then(|view| view.into_records(MAX_UNCOMPRESSED_BATCH))
        .map_err(|e| BadBytes::of_batch(pos, &e))?;
    decode_records(&mut records, batch.seq, pos, from_seq, left, out)
}

/// The records `>= from_seq` of a batch through `records` (see [`decode_batch`]): none of
/// them when the batch fails a check anywhere.
fn decode_records<D: Borrow<Bytes>>(
    records: &mut RecordIter<D>,
    seq: u64,
    pos: usize,
    from_seq: u64,
    left: &mut usize,
    out: &mut Vec<Record>,
) -> Result<bool, BadBytes> {
    let before = out.len();
    let result = read_batch(records, seq, pos, from_seq, left, out);
    match &result {
        Err(e) if matches!(e.fault, Fault::NotAMessage(_)) => {
            // Valid records before it stand only if the whole batch is valid.
            if let Err(damage) = records.check_rest() {
                out.truncate(before);
                return Err(BadBytes::of_batch(pos, &damage));
            }
        }
        Err(_) => out.truncate(before),
        Ok(_) => {}
    }
    result
}

/// The loop of [`decode_batch`]: skips the records before `from_seq` (checking them), then
/// reads messages until the batch or `left` ends; when `left` ends first, checks the rest.
fn read_batch<D: Borrow<Bytes>>(
    records: &mut RecordIter<D>,
    base: u64,
    pos: usize,
    from_seq: u64,
    left: &mut usize,
    out: &mut Vec<Record>,
) -> Result<bool, BadBytes> {
    let fail = |e: BatchError| BadBytes::of_batch(pos, &e);
    for _ in 0..from_seq.saturating_sub(base) {
        match records.skip_record() {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(fail(e)),
            None => return Ok(true),
        }
    }
    loop {
        // The common records in one loop; `next_message` reads the rest (and the end).
        *left -= records.plain_messages(*left, |offset, message| {
            let seq = u64::try_from(offset).unwrap_or(0);
            out.push(Record { seq, message });
        });
        if *left == 0 {
            return records.check_rest().map(|rest| rest == 0).map_err(fail);
        }
        let (offset, message) = match records.next_message() {
            None => return Ok(true),
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(fail(e)),
        };
        let seq = u64::try_from(offset).unwrap_or(0);
        out.push(Record { seq, message });
        *left -= 1;
    }
}
