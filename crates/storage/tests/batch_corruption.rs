//! The corruption matrix of the record-batch segment format: every header field of a batch
//! damaged, a record that lies under a valid CRC, a base offset out of sequence, compressed
//! records that decompress to garbage or to far more than a batch may hold, and a segment in
//! krabka's old frame format. Each case is checked through the public API on real files written
//! by a real `Log`: `verify_segment` names the batch's byte, a read returns exactly the records
//! before the damage and then fails naming the file and the byte, and `Log::open` cuts only a
//! torn tail (saving it), refuses other damage without changing a byte, and under a repair
//! keeps every intact batch.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "batch_corruption/beyond_end.rs"]
mod beyond_end;
#[path = "batch_corruption/codecs.rs"]
mod codecs;
#[path = "batch_corruption/common.rs"]
mod common;
#[path = "batch_corruption/compression.rs"]
mod compression;
#[path = "batch_corruption/engine.rs"]
mod engine;
#[path = "batch_corruption/header.rs"]
mod header;
#[path = "batch_corruption/lies.rs"]
mod lies;
#[path = "batch_corruption/old_format.rs"]
mod old_format;
#[path = "batch_corruption/outside_crc.rs"]
mod outside_crc;
