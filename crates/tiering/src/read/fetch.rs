//! The fetch path of remote reads: a segment's bytes chunk by chunk through the cache (each
//! fetch single-flight, the next chunks read ahead for a sequential walk), a batch cut by a
//! chunk boundary joined with the chunks after it, and [`Walk`], the cursor over those bytes
//! that both the decoded read and the timestamp search step along.

use bytes::{Bytes, BytesMut};
use krabka_remote_storage::RemoteLogSegmentMetadata;
use krabka_storage::segment::{MAX_BATCH_RECORD_BYTES, batch_len};

use super::{RemoteReader, log_corrupt, not_cached, object_key};
use crate::cache::{FetchError, Part};
use crate::error::Error;
use crate::read::chunkmap::backend_view;
use crate::read::engine::Permit;
use crate::stats::bump;

/// How much of the next chunk a read that starts afresh fetches with its first chunk (at most a
/// chunk; 6 % more bytes on the default 1 MiB chunk): a point read of a record that crosses the
/// chunk boundary then costs one request, not two.
pub(crate) const RUN_ON_BYTES: u64 = 64 << 10;

/// The most a point read fetches past its chunk to complete the batch it reads: a batch as
/// large as krabka writes them, and an index interval.
const MAX_RUN_ON_BYTES: u64 = MAX_BATCH_RECORD_BYTES as u64 + (64 << 10);

/// Bytes reserved at once, past the carry, for joining the chunks of a batch cut by a chunk
/// boundary: room for a batch of [`MAX_BATCH_RECORD_BYTES`] of records.
const INITIAL_JOIN_ROOM: usize = MAX_BATCH_RECORD_BYTES + (64 << 10);

/// A walk over one segment's bytes from a batch start to (at most) the segment's end: each
/// [`next`](Self::next) gives the bytes from the first one not consumed yet, to the end of the
/// chunk holding them (with the bytes of a batch cut by that chunk's end joined from the chunks
/// after it), and the walker says through [`advance`](Self::advance) how many it consumed (the
/// complete batches it took); the rest is given again, joined with the next chunk. Fetches go
/// through the cache; from the second buffer on (or when the walk continues an earlier read),
/// the next chunks are read ahead.
pub(super) struct Walk<'r, 'a> {
    reader: &'r RemoteReader<'a>,
    meta: &'r RemoteLogSegmentMetadata,
    /// The seq the read or search starts at: its errors and its read-ahead name it.
    seq: u64,
    /// The next byte of the segment to fetch (a chunk boundary when `carry` is not empty).
    pos: u64,
    /// Bytes left unconsumed before `pos` (a batch cut by the chunk boundary).
    carry: Bytes,
    /// Where the chunks of the last buffer given end (bytes past it were fetched as the run-on
    /// of its last chunk).
    boundary: u64,
    /// Whether the walk is sequential: it continues an earlier read, or has crossed a chunk.
    sequential: bool,
    /// A point read (every chunk is fetched with a little of the next one), and where the
    /// batch it reads ends at the latest, when known: its first chunk is fetched up to there.
    point: Option<Option<u64>>,
    /// The chunk holding the start of the last buffer given: once a sequential walk has gone
    /// past it, it is marked the cache's next to evict.
    last_chunk: Option<u64>,
    /// Whether [`next`](Self::next) has given a buffer yet.
    walked: bool,
    /// The segment byte the read is expected to reach (from the records it wants and the
    /// segment's mean record size), when known: the read-ahead under cache pressure stays
    /// within it.
    extent: Option<u64>,
}

impl<'r, 'a> Walk<'r, 'a> {
    /// A walk of `meta`'s `.log` from byte `start` (where a batch starts), for a read or search
    /// from `seq`; `point` for a point read, with where its batch ends at the latest when known.
    ///
    /// # Errors
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote) when `start` is not inside the segment.
    pub(super) fn new(
        reader: &'r RemoteReader<'a>,
        meta: &'r RemoteLogSegmentMetadata,
        seq: u64,
        start: u64,
        point: Option<Option<u64>>,
    ) -> Result<Self, Error> {
        let size = meta.segment_size_in_bytes();
        if start >= size {
            return Err(log_corrupt(
                meta,
                seq,
                None,
                format!("offset index points at byte {start} of a {size}-byte segment"),
            ));
        }
        Ok(Walk {
            reader,
            meta,
            seq,
            pos: start,
            carry: Bytes::new(),
            boundary: start,
            sequential: reader.readahead.continues(seq),
            point,
            last_chunk: None,
            walked: false,
            extent: None,
        })
    }

    /// Notes that the walk serves a read of `records` records: where it is expected to end.
    pub(super) fn wanting(mut self, records: usize) -> Self {
        let meta = self.meta;
        let count = meta
            .end_offset()
            .saturating_sub(meta.start_offset())
            .saturating_add(1);
        let mean = meta.segment_size_in_bytes().div_ceil(count.max(1));
        let records = u64::try_from(records).unwrap_or(u64::MAX);
        self.extent = Some(self.pos.saturating_add(records.saturating_mul(mean)));
        self
    }

    /// The segment's bytes from the first not consumed yet, and the segment byte where they
    /// start; `None` once the walk has passed the segment's end.
    pub(super) fn next(&mut self) -> Result<Option<(Bytes, u64)>, Error> {
        let reader = self.reader;
        let meta = self.meta;
        if self.pos >= meta.segment_size_in_bytes() {
            return Ok(None);
        }
        let chunk = u64::from(reader.config.chunk_bytes);
        let at = self.pos / chunk;
        if self.sequential
            && let Some(passed) = self.last_chunk
        {
            // The chunks this walk has gone past are not read again by it: they go before any
            // chunk read ahead for a reader that has not got there yet.
            let segment = meta.remote_log_segment_id().id();
            for n in passed..at {
                reader.cache.lru().demote(&(segment, Part::Chunk(n)));
            }
        }
        self.last_chunk = Some(at);
        if self.sequential && reader.config.prefetch {
            let next = || reader.next_remote(meta);
            reader.readahead.schedule(
                reader.rsm,
                reader.cache,
                meta,
                self.seq,
                (at, self.extent.map(|e| e / chunk)),
                chunk,
                next,
            );
        }
        let buf_start = self.pos - self.carry.len() as u64;
        // A point read, or one that does not continue another, fetches its chunk with a little
        // of the next one, so that a batch crossing the boundary costs no second request.
        let run_on = match self.point {
            // As far as the batch's known end, beyond the chunk holding `pos`.
            Some(until) => {
                let chunk_end = (self.pos / chunk + 1) * chunk;
                let past = until.map_or(0, |u| u.saturating_sub(chunk_end));
                RUN_ON_BYTES.min(chunk).max(past).min(MAX_RUN_ON_BYTES)
            }
            None if !self.sequential => RUN_ON_BYTES.min(chunk),
            None => 0,
        };
        let segment = meta.remote_log_segment_id().id();
        let resumes = self.sequential
            && self.point.is_none()
            && self.carry.is_empty()
            && !self.walked
            && !self.pos.is_multiple_of(chunk)
            && !reader.cache.lru().contains(&(segment, Part::Chunk(at)));
        self.walked = true;
        if resumes {
            // A read resuming where the last one stopped, whose chunk was evicted since: only
            // the rest of the chunk is fetched (its head was read already), and not cached.
            let end = ((at + 1) * chunk).min(meta.segment_size_in_bytes());
            let buf = reader.fetch_range(meta, self.pos, end, self.seq)?;
            self.boundary = end;
            return Ok(Some((buf, buf_start)));
        }
        let (buf, boundary) = reader.bytes_from(meta, self.seq, self.pos, &self.carry, run_on)?;
        self.boundary = boundary;
        Ok(Some((buf, buf_start)))
    }

    /// Goes on after the first `consumed` bytes of `buf`, the buffer [`next`](Self::next) gave
    /// last (starting at segment byte `buf_start`): from there when it is past the chunk
    /// boundary (bytes fetched with the chunk ran on), else from the boundary, carrying the
    /// unconsumed bytes before it.
    pub(super) fn advance(&mut self, buf: &Bytes, buf_start: u64, consumed: usize) {
        let consumed = consumed.min(buf.len());
        let next = buf_start + consumed as u64;
        if next >= self.boundary {
            self.pos = next;
            self.carry = Bytes::new();
        } else {
            self.pos = self.boundary;
            let cut =
                usize::try_from(self.boundary - buf_start).map_or(buf.len(), |c| c.min(buf.len()));
            self.carry = buf.slice(consumed..cut.max(consumed));
        }
        self.sequential = true;
    }
}

impl RemoteReader<'_> {
    /// The segment's bytes from `pos` on, after the `carry` left undecoded before `pos`, and
    /// the segment position where the chunks they come from end (bytes past it were fetched
    /// as the run-on of the last chunk). Without a carry that is the rest of the chunk holding
    /// `pos`; with one (`pos` is then a chunk boundary), chunks are joined until they complete
    /// the batch the carry starts (its length read from its header; one chunk when the carry
    /// is too short to tell), so a batch spanning many chunks is joined once, not once per
    /// chunk. The join never reaches past the segment's end, whatever the length says.
    fn bytes_from(
        &self,
        meta: &RemoteLogSegmentMetadata,
        seq: u64,
        pos: u64,
        carry: &Bytes,
        run_on: u64,
    ) -> Result<(Bytes, u64), Error> {
        let chunk = u64::from(self.config.chunk_bytes);
        let size = meta.segment_size_in_bytes();
        // The bytes of the chunk holding `at`, from `at`, and the chunk's end.
        let from_chunk = |at: u64| -> Result<(Bytes, u64), Error> {
            let n = at / chunk;
            let data = self.remote_chunk(meta, n, seq, run_on)?;
            let offset = usize::try_from(at - n * chunk).unwrap_or(usize::MAX);
            let fresh = data.get(offset..).ok_or_else(|| {
                log_corrupt(
                    meta,
                    seq,
                    Some(at),
                    format!("chunk {n} is shorter than expected"),
                )
            })?;
            Ok((data.slice_ref(fresh), (n + 1) * chunk))
        };
        if carry.is_empty() {
            return from_chunk(pos);
        }
        let rest = usize::try_from(size.saturating_sub(pos)).unwrap_or(usize::MAX);
        let need = batch_len(carry)
            .unwrap_or(0)
            .min(carry.len().saturating_add(rest));
        // Room for a batch as large as krabka writes them at once; a length field claiming
        // more (damage) grows the buffer only as bytes arrive.
        let room = need.min(carry.len().saturating_add(INITIAL_JOIN_ROOM));
        let mut joined = BytesMut::with_capacity(room.max(carry.len() + 1));
        joined.extend_from_slice(carry);
        let mut at = pos;
        loop {
            let (fresh, boundary) = from_chunk(at)?;
            let in_chunk = usize::try_from(boundary - at).unwrap_or(usize::MAX);
            if joined.len().saturating_add(in_chunk) >= need || boundary >= size {
                // The last chunk joined: with its run-on bytes.
                joined.extend_from_slice(&fresh);
                return Ok((joined.freeze(), boundary));
            }
            let Some(body) = fresh.get(..in_chunk) else {
                return Err(log_corrupt(
                    meta,
                    seq,
                    Some(at),
                    format!("chunk {} is shorter than expected", at / chunk),
                ));
            };
            joined.extend_from_slice(body);
            at = boundary;
        }
    }

    /// Entry `part` of a segment from the cache, or fetched by `fetch` and cached: the one path
    /// of every remote fetch a read makes. Single-flight with the other readers and the
    /// read-ahead: a fetch of the same entry in progress is waited for, at most
    /// [`TieringConfig::fetch_deadline`](crate::TieringConfig::fetch_deadline)
    /// ([`ReadError::FetchWaitExceeded`](crate::ReadError::FetchWaitExceeded) past it), and its result taken; when it failed, `fetch`
    /// runs here and reports its own error. `fetch` returns only checked bytes. A
    /// [`cached_only`](RemoteReader::cached_only) reader takes the entry only when cached.
    pub(super) fn single_flight(
        &self,
        meta: &RemoteLogSegmentMetadata,
        part: Part,
        seq: u64,
        fetch: impl FnOnce() -> Result<Bytes, Error>,
    ) -> Result<Bytes, Error> {
        let id = meta.remote_log_segment_id();
        if self.cached_only {
            return self
                .cached_entry(meta, part)
                .ok_or_else(|| not_cached(meta, part, seq));
        }
        let wait = self.config.fetch_deadline;
        self.cache
            .lru()
            .get_or_fetch((id.id(), part), wait, fetch)
            .map_err(|e| match e {
                FetchError::Fetch(e) => e,
                FetchError::WaitTimedOut(waited) => {
                    Error::Read(crate::error::ReadError::FetchWaitExceeded {
                        segment: Box::new(id.clone()),
                        object: object_key(meta, part.index_type()),
                        seq,
                        waited,
                    })
                }
            })
    }

    /// A slot on the read engine for one of this reader's own fetches of `bytes` (0 for an
    /// index) of `meta`'s object (`index`: `None` for its `.log`), in this reader's turn, and
    /// its GET token.
    ///
    /// # Errors
    /// [`ReadError::FetchWaitExceeded`](crate::ReadError::FetchWaitExceeded) when no slot came
    /// within [`TieringConfig::fetch_deadline`](crate::TieringConfig::fetch_deadline).
    pub(super) fn fetch_slot(
        &self,
        meta: &RemoteLogSegmentMetadata,
        index: Option<krabka_remote_storage::IndexType>,
        bytes: u64,
        seq: u64,
    ) -> Result<Permit, Error> {
        self.cache
            .engine()
            .admit(self.readahead.id(), bytes, self.config.fetch_deadline)
            .map_err(|waited| {
                Error::Read(crate::error::ReadError::FetchWaitExceeded {
                    segment: Box::new(meta.remote_log_segment_id().clone()),
                    object: object_key(meta, index),
                    seq,
                    waited,
                })
            })
    }

    /// The remote segment after `meta` (starting right after it) when a read would go on to
    /// read it from the remote tier.
    fn next_remote(&self, meta: &RemoteLogSegmentMetadata) -> Option<RemoteLogSegmentMetadata> {
        let seq = meta.end_offset().checked_add(1)?;
        if seq >= self.remote_below {
            return None;
        }
        self.rlmm
            .remote_log_segment_metadata(self.tp, seq)
            .ok()
            .flatten()
            .filter(|m| m.start_offset() == seq)
    }

    /// Chunk `n` of a segment, from the cache or fetched and cached, through
    /// [`single_flight`](Self::single_flight) (a reader reaching a chunk the read-ahead is
    /// fetching waits for it).
    fn remote_chunk(
        &self,
        meta: &RemoteLogSegmentMetadata,
        n: u64,
        seq: u64,
        run_on: u64,
    ) -> Result<Bytes, Error> {
        self.single_flight(meta, Part::Chunk(n), seq, || {
            self.fetch_chunk(meta, n, seq, run_on)
        })
    }

    /// Fetches bytes `start..end` of a segment's `.log` (within one chunk) without caching
    /// them; exactly that range, else [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote).
    fn fetch_range(
        &self,
        meta: &RemoteLogSegmentMetadata,
        start: u64,
        end: u64,
        seq: u64,
    ) -> Result<Bytes, Error> {
        if self.cached_only {
            return self.cached_range(meta, start, end).ok_or_else(|| {
                super::not_cached(
                    meta,
                    Part::Chunk(start / u64::from(self.config.chunk_bytes)),
                    seq,
                )
            });
        }
        self.fetch_exact(meta, start, end, seq, || {
            format!("bytes {start}..{end} lie beyond u32 positions")
        })
    }

    /// Fetches exactly bytes `start..end` of a segment's `.log` in one fetch slot; a range
    /// beyond u32 positions (`beyond` says which) or an object shorter than the metadata's
    /// size is [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote).
    fn fetch_exact(
        &self,
        meta: &RemoteLogSegmentMetadata,
        start: u64,
        end: u64,
        seq: u64,
        beyond: impl FnOnce() -> String,
    ) -> Result<Bytes, Error> {
        let id = meta.remote_log_segment_id();
        let corrupt = |reason: String| log_corrupt(meta, seq, Some(start), reason);
        let (Ok(first), Ok(last)) = (u32::try_from(start), u32::try_from(end.saturating_sub(1)))
        else {
            return Err(corrupt(beyond()));
        };
        let _slot = self.fetch_slot(meta, None, end - start, seq)?;
        bump(&self.counters.fetch_log, 1);
        let bytes = self
            .rsm
            .fetch_log_segment(&backend_view(meta), first, Some(last))
            .map_err(|e| Error::remote("fetch_log_segment", id, Some(seq), e))?;
        if bytes.len() as u64 != end - start {
            return Err(corrupt(format!(
                "fetching bytes {start}..{end} returned {} bytes: the object is shorter than \
                 the segment's {} bytes",
                bytes.len(),
                meta.segment_size_in_bytes()
            )));
        }
        Ok(Bytes::from(bytes))
    }

    /// Fetches chunk `n` of a segment, and also up to `run_on` bytes past it (the cached
    /// chunk is then that much longer). The bytes returned must be exactly
    /// the range asked for: an object shorter than the metadata's size is
    /// [`ReadError::CorruptRemote`](crate::ReadError::CorruptRemote).
    fn fetch_chunk(
        &self,
        meta: &RemoteLogSegmentMetadata,
        n: u64,
        seq: u64,
        run_on: u64,
    ) -> Result<Bytes, Error> {
        let chunk = u64::from(self.config.chunk_bytes);
        let start = n * chunk;
        let end = (start + chunk + run_on).min(meta.segment_size_in_bytes());
        self.fetch_exact(meta, start, end, seq, || {
            format!("chunk {n} lies beyond u32 positions")
        })
    }
}
