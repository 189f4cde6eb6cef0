//! Timestamp lookups: the first seq whose timestamp reaches a given one.

use super::super::Inner;
use crate::Error;

impl Inner {
    /// The first seq with a timestamp `>= ts` (see
    /// [`Log::seq_for_timestamp`](crate::Log::seq_for_timestamp)).
    pub(in crate::log) fn seq_for_timestamp(&self, ts: i64) -> Result<Option<u64>, Error> {
        // Segments whose largest timestamp reaches `ts`, oldest first; index entries not loaded
        // yet are loaded outside the state lock, and only for segments the search reaches.
        let bases: Vec<u64> = {
            let st = self.state.read();
            st.segs
                .iter()
                .filter(|s| s.max_timestamp >= ts && s.hole.is_none())
                .map(|s| s.base_seq)
                .collect()
        };
        for base in bases {
            let Some((from, last)) = self.time_floor_of(base, ts)? else {
                continue;
            };
            if let Some(seq) = self.first_at_or_after(from, last, ts)? {
                return Ok(Some(seq));
            }
        }
        Ok(None)
    }

    /// The seq to scan from in segment `base` for the first timestamp `>= ts`, and its last
    /// seq; `None` when it holds none or is gone. Loads lazy entries outside the state lock (as
    /// [`plan_read`](Self::plan_read) does, this ends).
    fn time_floor_of(&self, base: u64, ts: i64) -> Result<Option<(u64, u64)>, Error> {
        loop {
            let lazy = {
                let st = self.state.read();
                let Ok(i) = st.segs.binary_search_by_key(&base, |s| s.base_seq) else {
                    return Ok(None);
                };
                let Some(seg) = st.segs.get(i) else {
                    return Ok(None);
                };
                match seg.time_floor(ts) {
                    Ok(floor) => return Ok(floor.map(|f| (f, seg.last_seq))),
                    Err(lazy) => lazy,
                }
            };
            if let Err(e) = lazy.load() {
                // Retention drops a segment from the published state before it deletes its
                // files: a load that failed on a segment no longer there found it deleted, and
                // a deleted segment holds no timestamp.
                let gone = self
                    .state
                    .read()
                    .segs
                    .binary_search_by_key(&base, |s| s.base_seq)
                    .is_err();
                if gone {
                    return Ok(None);
                }
                return Err(e);
            }
        }
    }
}
