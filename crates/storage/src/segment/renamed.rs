//! The names this module's items had while a segment's unit, Kafka's record batch, was called
//! a frame here: kept so that code written against them still builds, each pointing at its
//! new name. (Frames proper are the old per-record format's: [`super::OLD_FORMAT_NAME`].)
#![allow(deprecated)]

use bytes::Bytes;
use krabka_protocol::Message;

use super::{BATCH_HEADER_LEN, DumpBatches, DumpedBatch, MIN_BATCH_LEN};
use crate::Error;

/// Renamed [`BATCH_HEADER_LEN`](super::BATCH_HEADER_LEN).
#[deprecated(since = "0.1.0", note = "renamed to `BATCH_HEADER_LEN`")]
pub const FRAME_HEADER_LEN: usize = BATCH_HEADER_LEN;

/// Renamed [`MIN_BATCH_LEN`](super::MIN_BATCH_LEN).
#[deprecated(since = "0.1.0", note = "renamed to `MIN_BATCH_LEN`")]
pub const MIN_FRAME_LEN: usize = MIN_BATCH_LEN;

/// Renamed [`DumpedBatch`](super::DumpedBatch).
#[deprecated(since = "0.1.0", note = "renamed to `DumpedBatch`")]
pub type DumpedFrame = DumpedBatch;

/// Renamed [`DumpBatches`](super::DumpBatches).
#[deprecated(since = "0.1.0", note = "renamed to `DumpBatches`")]
pub type DumpFrames = DumpBatches;

/// Renamed [`batch_len`](super::batch_len).
#[deprecated(since = "0.1.0", note = "renamed to `batch_len`")]
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    super::batch_len(buf)
}

/// Renamed [`peek_batch`](super::peek_batch).
#[deprecated(since = "0.1.0", note = "renamed to `peek_batch`")]
pub fn peek_frame(buf: &[u8]) -> Option<(u64, u64, usize)> {
    super::peek_batch(buf)
}

/// Renamed [`encode_batch_of_one`](super::encode_batch_of_one).
///
/// # Errors
/// As [`encode_batch_of_one`](super::encode_batch_of_one).
#[deprecated(since = "0.1.0", note = "renamed to `encode_batch_of_one`")]
pub fn encode_frame(seq: u64, msg: &Message, buf: &mut Vec<u8>) -> Result<usize, Error> {
    super::encode_batch_of_one(seq, msg, buf)
}

/// Renamed [`dump_batches`](super::dump_batches).
#[deprecated(since = "0.1.0", note = "renamed to `dump_batches`")]
pub fn dump_frames(buf: Bytes) -> DumpBatches {
    super::dump_batches(buf)
}
