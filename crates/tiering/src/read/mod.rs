//! Reads from the remote tier: offset index once (validated, then cached), then aligned chunks
//! through the cache, with every record's seq checked; time indexes (validated, cached) for
//! timestamp lookups. The index formats are read through `krabka_storage::index` views.
//!
//! A segment is a run of record batches; an index or chunk-map entry names a batch by its
//! first seq and position, and a record inside a batch is found by decoding the batch. A batch
//! cut by a chunk boundary is joined with the chunks after it before it is decoded.
//!
//! `fetch.rs` is the fetch path (chunks through the cache, single-flight, read-ahead) and the
//! walk over a segment's bytes that both the decoded read here and the timestamp search
//! (`time.rs`, which reads batches as stored, never as messages) step along.

use bytes::Bytes;
use krabka_remote_storage::{IndexType, LOG_SUFFIX, RemoteLogSegmentMetadata, layout};
use krabka_storage::Record;
use krabka_storage::segment::{DecodedRecords, decode_records_at, decode_records_skipping};

use std::sync::Arc;

use krabka_remote_storage::metadata::RemoteLogMetadataManager;
use krabka_remote_storage::{RemoteStorageManager, TopicIdPartition};

use crate::cache::{Part, RemoteReadCache};
use crate::config::TieringConfig;
use crate::error::Error;
use crate::stats::Counters;

pub(crate) mod chunkmap;
pub(crate) mod cold;
pub(crate) mod engine;
mod fetch;
pub(crate) mod hints;
pub(crate) mod holes;
mod index;
mod job;
pub(crate) mod readahead;
mod streams;
#[cfg(test)]
mod tests;
mod time;

use fetch::Walk;
use readahead::ReadAhead;

/// The key of a segment's object in the shared layout: its `.log` (`None`) or an index.
pub(crate) fn object_key(meta: &RemoteLogSegmentMetadata, index: Option<IndexType>) -> String {
    let key = match index {
        None => layout::log_key(meta),
        Some(t) => layout::index_key(meta, t),
    };
    key.unwrap_or_else(|_| {
        let suffix = index.map_or(LOG_SUFFIX, IndexType::suffix);
        format!("{}{suffix}", meta.remote_log_segment_id())
    })
}

/// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) for one of the segment's objects (its `.log` for `None`), met while
/// reading (or searching) from `seq`.
fn object_corrupt(
    meta: &RemoteLogSegmentMetadata,
    index: Option<IndexType>,
    seq: u64,
    position: Option<u64>,
    reason: String,
) -> Error {
    Error::Read(crate::error::ReadError::CorruptRemote {
        segment: Box::new(meta.remote_log_segment_id().clone()),
        object: object_key(meta, index),
        position,
        seq,
        reason,
    })
}

/// [`object_corrupt`] for the segment's `.log` object.
fn log_corrupt(
    meta: &RemoteLogSegmentMetadata,
    seq: u64,
    position: Option<u64>,
    reason: String,
) -> Error {
    object_corrupt(meta, None, seq, position, reason)
}

/// The byte position and reason of a storage decoding error (positions relative to the
/// decoded buffer).
fn position_and_reason(e: &krabka_storage::Error) -> (Option<u64>, String) {
    match e {
        krabka_storage::Error::Corrupt {
            position, reason, ..
        } => (Some(*position), reason.clone()),
        other => (None, other.to_string()),
    }
}

/// A decoding of the batches at the start of a buffer: `(buf, expected_first_seq, from_seq,
/// max)`, [`decode_records_at`] or [`decode_records_skipping`].
type Decode = fn(&Bytes, u64, u64, usize) -> Result<DecodedRecords, krabka_storage::Error>;

/// Where a remote read starts decoding: `(first seq, byte position)` of a batch.
enum Start {
    /// An offset-index entry (or the segment's first batch, at byte 0).
    Index((u64, u64)),
    /// The batch a sequential reader's last read of the segment stopped at (read from the
    /// offset index when it fails).
    Resume((u64, u64)),
    /// A chunk-map entry whose batch hints are not known yet; `until`: the next entry's
    /// position (or the segment's end), where the batch holding the seq ends at the latest.
    Map { entry: (u64, u64), until: u64 },
    /// A batch hint after the chunk-map entry `entry` (read from `entry` when it fails).
    Hint {
        hint: (u64, u64),
        entry: (u64, u64),
        until: u64,
    },
}

/// The records one remote read has accepted so far, and the checks each batch passes.
struct RemoteRead<'a> {
    meta: &'a RemoteLogSegmentMetadata,
    /// The seq asked for: the first record returned must carry it.
    seq: u64,
    out: Vec<Record>,
}

impl RemoteRead<'_> {
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) for the segment's `.log` object.
    fn corrupt(&self, position: Option<u64>, reason: String) -> Error {
        log_corrupt(self.meta, self.seq, position, reason)
    }

    /// Checks decoded records (the first record is the seq asked for, none lies past the
    /// segment's last seq) and moves them to `out`.
    fn accept(&mut self, records: Vec<Record>) -> Result<(), Error> {
        if let (true, Some(first)) = (self.out.is_empty(), records.first())
            && first.seq != self.seq
        {
            return Err(self.corrupt(
                None,
                format!(
                    "the first record found is seq {}, not the seq asked for",
                    first.seq
                ),
            ));
        }
        let end = self.meta.end_offset();
        if let Some(past) = records.iter().find(|r| r.seq > end) {
            return Err(self.corrupt(
                None,
                format!("holds seq {} past the segment's last seq {end}", past.seq),
            ));
        }
        // The first batch is taken as it is (no second buffer, no copy).
        if self.out.is_empty() {
            self.out = records;
        } else {
            self.out.extend(records);
        }
        Ok(())
    }

    /// Ends the read at a batch `buf` (starting at byte `buf_start` of the segment, with the
    /// batch of seq `expect`, decoded by `decode`) fails to decode with `e`: the valid records
    /// before it are delivered first (a short read): those of the batches before the bad one,
    /// and for a valid batch holding a record that is not a message, its records before that
    /// one. With none, the error: [`ReadError::RemoteNotAMessage`](crate::ReadError::RemoteNotAMessage) for such a record,
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) otherwise.
    fn short_read(
        mut self,
        buf: &Bytes,
        buf_start: u64,
        (expect, want, decode): (u64, usize, Decode),
        e: &krabka_storage::Error,
    ) -> Result<Vec<Record>, Error> {
        // The first record the decoding returns is `self.seq`, or `expect` past it.
        let first = self.seq.max(expect);
        // The error, and the bytes and number of records to decode again for the short read.
        let (error, good, max) = match e {
            krabka_storage::Error::NotAMessage {
                position,
                seq,
                reason,
                ..
            } => {
                let error = Error::Read(crate::error::ReadError::RemoteNotAMessage {
                    segment: Box::new(self.meta.remote_log_segment_id().clone()),
                    object: object_key(self.meta, None),
                    position: buf_start + position,
                    record_seq: *seq,
                    seq: self.seq,
                    reason: reason.clone(),
                });
                let before = usize::try_from(seq.saturating_sub(first)).unwrap_or(usize::MAX);
                (error, Some(buf.clone()), before.min(want))
            }
            other => {
                let (at, why) = position_and_reason(other);
                let error = self.corrupt(
                    Some(buf_start + at.unwrap_or(0)),
                    format!("expected the batch of seq {expect} or a later one: {why}"),
                );
                let upto = at.and_then(|a| usize::try_from(a).ok()).unwrap_or(0);
                let good = (upto > 0).then(|| buf.slice(..upto.min(buf.len())));
                (error, good, want)
            }
        };
        if let Some(good) = good
            && max > 0
            && let Ok(d) = decode(&good, expect, self.seq, max)
        {
            self.accept(d.records)?;
        }
        if self.out.is_empty() {
            return Err(error);
        }
        tracing::debug!(error = %error, "short remote read before a bad batch");
        Ok(self.out)
    }
}

/// The reader of finished remote segments one partition's readers share: the tiered log's reads
/// below its local log and a read replica's reads (`crate::replica`) go through it, so both use
/// the same checks, chunk cache, single-flight fetches and read-ahead. Borrowed from its owner
/// for one call.
pub(crate) struct RemoteReader<'a> {
    pub(crate) rsm: &'a Arc<dyn RemoteStorageManager>,
    pub(crate) rlmm: &'a dyn RemoteLogMetadataManager,
    pub(crate) tp: &'a TopicIdPartition,
    pub(crate) config: &'a TieringConfig,
    pub(crate) cache: &'a RemoteReadCache,
    pub(crate) counters: &'a Counters,
    pub(crate) readahead: &'a ReadAhead,
    /// The read-ahead goes on into the next remote segment only below this seq (where the
    /// local log starts; `u64::MAX` without one).
    pub(crate) remote_below: u64,
    /// Serve only what the cache holds: no fetch, no wait for another's fetch. A read meeting
    /// an entry not cached returns the records before it, or, with none,
    /// [`not_cached`]'s error (the service's reads then take a reader slot and read again).
    pub(crate) cached_only: bool,
    /// A cached-only read that awaits its fetches without a thread (`crate::read::cold`):
    /// the entries fetched for it are taken before the cache's, and its first miss is noted.
    pub(crate) cold: Option<&'a cold::ColdRead>,
}

/// The error of a cached-only read ([`RemoteReader::cached_only`]) whose first entry is not
/// cached: [`ReadError::FetchWaitExceeded`](crate::ReadError::FetchWaitExceeded) having waited
/// nothing. Never handed to a caller: the read is made again, fetching.
fn not_cached(meta: &RemoteLogSegmentMetadata, part: Part, seq: u64) -> Error {
    Error::Read(crate::error::ReadError::FetchWaitExceeded {
        segment: Box::new(meta.remote_log_segment_id().clone()),
        object: object_key(meta, part.index_type()),
        seq,
        waited: std::time::Duration::ZERO,
    })
}

impl RemoteReader<'_> {
    /// Up to `max` records from `seq` within one finished remote segment.
    ///
    /// Every record's seq is checked: the batch the index points at must start with the
    /// entry's seq, and each batch (across chunk boundaries too) with the seq after the
    /// previous one's last; a record inside a batch is found by decoding the batch (its CRC
    /// checked first); the first record returned is `seq` itself, and none lies past the
    /// segment's last seq. Anything else is [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) naming the object and
    /// byte ([`ReadError::RemoteNotAMessage`](crate::ReadError::RemoteNotAMessage) for a valid record a `Message` cannot hold). Records
    /// decoded before a bad batch (or such a record) are returned first (a short read); a read
    /// starting in the bad batch (at such a record) gets the error.
    ///
    /// Costs, with a cold cache: one ranged fetch per chunk touched (a point read touches one
    /// chunk unless its batch straddles a chunk boundary), and one index fetch unless the read
    /// starts at the segment's first seq, continues a sequential reader's last read, or is a
    /// point read the chunk map places. With a warm cache: nothing.
    pub(crate) fn read_remote(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seq: u64,
        max: usize,
    ) -> Result<Vec<Record>, Error> {
        match self.start_point(meta, seq, max)? {
            Start::Index(at) => self.read_from(meta, seq, max, at, None),
            Start::Resume(at) => match self.read_from(meta, seq, max, at, None) {
                Err(e @ Error::Read(crate::error::ReadError::CorruptRemote { .. })) => {
                    tracing::debug!(error = %e, "resumed read failed; reading from the index");
                    // Damage the read from the index meets too is reported where it lies; an
                    // index that cannot be had reports the damage the resumed read met (a
                    // cached-only read's miss of the index is passed on: it is fetched, and
                    // the read made again).
                    match self.index_floor(meta, seq) {
                        Ok(at) => self.read_from(meta, seq, max, at, None),
                        Err(miss) if self.cached_only => Err(miss),
                        Err(_) => Err(e),
                    }
                }
                other => other,
            },
            Start::Map { entry, until } => {
                let out = self.read_from(meta, seq, max, entry, Some(until))?;
                self.learn_hints(meta, entry);
                Ok(out)
            }
            Start::Hint { hint, entry, until } => {
                match self.read_from(meta, seq, max, hint, Some(until)) {
                    Err(e @ Error::Read(crate::error::ReadError::CorruptRemote { .. })) => {
                        tracing::debug!(error = %e, "hinted start failed; reading from the map entry");
                        self.read_from(meta, seq, max, entry, Some(until))
                    }
                    other => other,
                }
            }
        }
    }

    /// [`read_remote`](Self::read_remote) decoding from the batch starting with seq `at.0` at
    /// byte `at.1`; a point read whose batch is known to end by byte `until` fetches its first
    /// chunk with the bytes up to there (one request, however far the batch crosses the chunk's
    /// end).
    fn read_from(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seq: u64,
        max: usize,
        at: (u64, u64),
        until: Option<u64>,
    ) -> Result<Vec<Record>, Error> {
        let mut read = RemoteRead {
            meta,
            seq,
            out: Vec::new(),
        };
        let (mut expect, start) = at;
        // The batch boundary decoding stopped at: where a read continuing this one starts.
        let mut resume = None;
        let point = (max == 1).then_some(until);
        let mut walk = Walk::new(self, meta, seq, start, point)?.wanting(max);
        while read.out.len() < max {
            let next = match walk.next() {
                // A cached-only read ends at the first chunk not cached, with what it has.
                Err(_) if self.cached_only && !read.out.is_empty() => break,
                other => other?,
            };
            let Some((buf, buf_start)) = next else {
                break;
            };
            // The bytes start at the batch starting with `expect` (the index entry's seq, then
            // the seq after the last decoded batch), and seqs are contiguous from there.
            let want = max - read.out.len();
            // Until the batch holding the first record asked for, the batches before it (after
            // the first one, checked in full where the index or chunk map points) are stepped
            // over by length and seq, as `Log::read` does from an index entry; every record
            // returned is still fully checked, its batch's CRC included.
            let decode: Decode = if expect < seq {
                decode_records_skipping
            } else {
                decode_records_at
            };
            let decoded = match decode(&buf, expect, seq, want) {
                Ok(d) => d,
                Err(e) => {
                    return read.short_read(&buf, buf_start, (expect, want, decode), &e);
                }
            };
            if let Some(next) = decoded.next_seq {
                expect = next;
                resume = Some((next, buf_start + decoded.consumed as u64));
            }
            let done = decoded.next_seq.is_some_and(|s| s > meta.end_offset());
            read.accept(decoded.records)?;
            // Go on after the last batch decoded. (A batch `max` stopped inside is not
            // consumed, but the read is then complete.)
            walk.advance(&buf, buf_start, decoded.consumed);
            if done {
                break;
            }
        }
        if read.out.is_empty() && max > 0 {
            let size = meta.segment_size_in_bytes();
            return Err(read.corrupt(
                Some(start),
                format!("no record at or after seq {seq} in {size} bytes (from byte {start})"),
            ));
        }
        if let Some(last) = read.out.last() {
            let segment = meta.remote_log_segment_id().id();
            self.readahead.record(segment, seq, last.seq + 1, resume);
        }
        Ok(read.out)
    }

    /// Where to start decoding for `seq`. A point read (`max == 1`) of a segment whose offset
    /// index is not cached uses the chunk map recorded in its metadata when there is one (and
    /// the entry's batch hints once learnt), so its only request is the data chunk (and a
    /// repeated one none); other reads fetch (once, then cached) and validate the offset index.
    fn start_point(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seq: u64,
        max: usize,
    ) -> Result<Start, Error> {
        let id = meta.remote_log_segment_id().id();
        if max == 1
            && !self.cache.lru().contains(&(id, Part::OffsetIndex))
            && let Some((entry, above)) = chunkmap::bounds_of(meta, seq)
        {
            // Without a map entry above `seq`, its batch ends by the segment's end.
            let until = above.unwrap_or(meta.segment_size_in_bytes());
            let hint = self
                .cache
                .lru()
                .peek(&(id, Part::Hints(entry.1)))
                .and_then(|h| hints::floor(&h, seq))
                .filter(|h| h.0 > entry.0 && h.0 <= seq);
            return Ok(match hint {
                Some(hint) => Start::Hint { hint, entry, until },
                None => Start::Map { entry, until },
            });
        }
        if max > 1 {
            // A read from the segment's first seq starts at its first batch, and a read that
            // continues another where that one stopped: no index needed for either.
            if seq == meta.start_offset() {
                return Ok(Start::Index((seq, 0)));
            }
            if let Some(at) = self.readahead.resume_point(id, seq) {
                return Ok(Start::Resume(at));
            }
        }
        self.index_floor(meta, seq).map(Start::Index)
    }

    /// The offset-index entry at or below `seq` (the segment's first batch when none is).
    fn index_floor(&self, meta: &RemoteLogSegmentMetadata, seq: u64) -> Result<(u64, u64), Error> {
        let index = self.remote_index(meta, seq)?;
        Ok(index.floor(seq).unwrap_or((meta.start_offset(), 0)))
    }

    /// Learns the batch hints after the chunk-map entry `entry` from its chunk, once cached.
    fn learn_hints(&self, meta: &RemoteLogSegmentMetadata, entry: (u64, u64)) {
        let id = meta.remote_log_segment_id().id();
        let key = (id, Part::Hints(entry.1));
        let chunk = u64::from(self.config.chunk_bytes);
        let n = entry.1 / chunk;
        if self.cache.lru().contains(&key) {
            return;
        }
        let Some(data) = self.cache.lru().peek(&(id, Part::Chunk(n))) else {
            return;
        };
        let found = hints::build(&data, n * chunk, entry, meta.end_offset());
        if !found.is_empty() {
            self.cache.lru().insert(key, found);
        }
    }
}
