//! Segment files as plain bytes: record batches, file names, decoding and verification.
//!
//! Everything here works on byte slices (or reads one file start to end), so a segment fetched
//! back from a remote store can be decoded without a [`Log`](crate::Log) or a local directory.
//!
//! A `.log` file is a run of Kafka v2 record batches (magic 2), byte for byte as Kafka writes
//! them ([`krabka_protocol::batch`] owns the encoding; `docs/format.md` specifies it): a
//! 61-byte big-endian header whose `baseOffset` is the krabka seq of the batch's first record,
//! then the records. Batches follow each other without gaps: each starts at the seq after the
//! previous one's last. ("Frame" means only the per-record unit of krabka's old format,
//! [`OLD_FORMAT_NAME`].)
//!
//! ```
//! use krabka_protocol::{Bytes, Message};
//! use krabka_storage::segment::{decode_records, encode_batch_of_one};
//!
//! let mut buf = Vec::new();
//! encode_batch_of_one(7, &Message::new("a"), &mut buf)?;
//! encode_batch_of_one(8, &Message::new("b"), &mut buf)?;
//! let whole = buf.len();
//! buf.extend_from_slice(&[1, 2, 3]); // a torn batch at the tail is not an error
//! let decoded = decode_records(&Bytes::from(buf), 8, 10)?;
//! assert_eq!(decoded.records.len(), 1);
//! assert_eq!(decoded.records[0].seq, 8);
//! assert_eq!(decoded.consumed, whole);
//! assert_eq!(decoded.next_seq, Some(9));
//! # Ok::<(), krabka_storage::Error>(())
//! ```

mod batch;
mod decode;
mod dump;
mod dump_file;
mod format;
mod name;
mod old;
mod problem;
pub(crate) mod raw;
mod renamed;
mod scan;
mod verify;

pub use self::batch::{
    BATCH_HEADER_LEN, FORMAT_NAME, MAX_BATCH_RECORD_BYTES, MAX_UNCOMPRESSED_BATCH, MIN_BATCH_LEN,
    MIN_RECORD_LEN, batch_len, encode_batch_of_one, peek_batch, read_chunk,
};
pub(crate) use self::batch::{BadBytes, Parsed, encode_batch_from, encode_batch_from_split};
pub(crate) use self::decode::{
    BEYOND_END, CheckedAt, First, Skip, beyond_end, decode_chunk, decode_within,
};
pub use self::decode::{
    DecodedRecords, decode_records, decode_records_at, decode_records_skipping,
};
pub use self::dump::{DumpBatches, DumpedBatch, dump_batches, read_segment_file};
pub use self::dump_file::{DUMP_DECODE_LIMIT, DumpFile};
pub use self::format::is_old_format_file;
pub(crate) use self::format::parse_batch;
pub(crate) use self::name::segment_paths;
pub use self::name::{
    HOLE_SUFFIX, INDEX_EXTENSION, LOG_EXTENSION, QUARANTINE_DIR, TIME_INDEX_EXTENSION,
    hole_file_name, is_segment_file_name, parse_hole_file_name, parse_segment_file_name,
    segment_file_name,
};
pub use self::old::OLD_FORMAT_NAME;
pub(crate) use self::old::{decode_old_chunk, is_old_frame, old_frame_len};
pub use self::problem::SegmentProblem;
pub use self::raw::{BatchRecords, Batches};
#[allow(deprecated)]
pub use self::renamed::{
    DumpFrames, DumpedFrame, FRAME_HEADER_LEN, MIN_FRAME_LEN, dump_frames, encode_frame, frame_len,
    peek_frame,
};
#[doc(hidden)]
pub(crate) use self::scan::{
    ValidRun, find_valid_batch_after, first_nonzero, last_seq_allowed, nonzero_end, scan_file,
    scan_file_from,
};
pub use self::verify::{
    SegmentVerification, verify_segment, verify_segment_files, verify_segment_in_log,
};
pub use crate::index::{
    IndexSummary, TimeIndexSummary, lookup_position, lookup_time, verify_index, verify_time_index,
};
/// The unchecked header of a stored batch, as its bytes hold it (the protocol crate's reading).
pub use krabka_protocol::batch::StoredHeader;

/// Batches of one record each, seqs `seqs` (value `v<seq>`, timestamp `seq`), for tests.
#[cfg(test)]
pub(crate) fn test_batches(seqs: std::ops::RangeInclusive<u64>) -> Vec<u8> {
    let mut buf = Vec::new();
    for s in seqs {
        encode_batch_of_one(
            s,
            &krabka_protocol::Message::new(format!("v{s}")).with_timestamp(s as i64),
            &mut buf,
        )
        .expect("a small test record encodes");
    }
    buf
}
