//! Timestamp lookups within one finished remote segment: its time index, then the records
//! from the floor it gives.

use krabka_remote_storage::RemoteLogSegmentMetadata;

use super::RemoteReader;
use crate::error::Error;

impl RemoteReader<'_> {
    /// The first record with a timestamp `>= ts` in one finished remote segment, at or after
    /// `from` and below `below` (where the next tier or reader's range starts): the time index
    /// gives the floor, then records are read from there (cached like every remote read).
    pub(crate) fn search_time(
        &self,
        meta: &RemoteLogSegmentMetadata,
        ts: i64,
        from: u64,
        below: u64,
    ) -> Result<Option<u64>, Error> {
        let Some(floor) = self.remote_time_floor(meta, ts)? else {
            return Ok(None);
        };
        let mut seq = floor.max(from);
        let end = meta.end_offset().min(below.saturating_sub(1));
        while seq <= end {
            let want = usize::try_from(end - seq + 1)
                .unwrap_or(usize::MAX)
                .min(256);
            let batch = self.read_remote(meta, seq, want)?;
            if let Some(r) = batch.iter().find(|r| r.message.timestamp >= ts) {
                return Ok(Some(r.seq));
            }
            let Some(next) = batch.last().map(|r| r.seq + 1) else {
                break;
            };
            seq = next;
        }
        Ok(None)
    }
}
