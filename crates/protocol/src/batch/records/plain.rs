//! Many records of the common shape in one loop (see [`RecordIter::plain_messages`]).

use std::borrow::Borrow;

use bytes::Bytes;

use super::RecordIter;
use crate::Message;
use crate::batch::TimestampType;

impl<D: Borrow<Bytes>> RecordIter<D> {
    /// Reads up to `max` records of the common shape (a value, no headers) in one loop and
    /// hands each to `each` as a [`Message`] with its offset; stops before the first record
    /// of another shape, after the last record, or after `max`. Returns how many it handed
    /// out.
    ///
    /// Each record gets exactly the checks [`next_message`](Self::next_message) makes, and
    /// the records it stops before are left for `next_message`, which reads them (or names
    /// their fault) and checks the header against all the records after the last: a caller
    /// drives this loop, then `next_message`, until `next_message` says the batch ended.
    /// What it saves is a `Result` and a move of each record through memory.
    ///
    /// ```
    /// use krabka_protocol::batch::{encode_batch, BatchSpec, BatchView, RecordSpec};
    ///
    /// let specs: Vec<_> = (0..3).map(|i| RecordSpec::new(i, format!("v{i}"))).collect();
    /// let bytes = encode_batch(&BatchSpec::new(10), &specs)?;
    /// let mut records = BatchView::parse(&bytes)?.records(1 << 20)?;
    /// let mut got = Vec::new();
    /// assert_eq!(records.plain_messages(2, |offset, m| got.push((offset, m.value))), 2);
    /// assert_eq!(records.plain_messages(5, |offset, m| got.push((offset, m.value))), 1);
    /// assert_eq!(got[2], (12, "v2".into()));
    /// // The end of the batch, with the header checked against every record.
    /// assert!(records.next_message().is_none());
    /// # Ok::<(), krabka_protocol::batch::BatchError>(())
    /// ```
    #[inline]
    pub fn plain_messages(&mut self, max: usize, mut each: impl FnMut(i64, Message)) -> usize {
        if self.walk.done {
            return 0;
        }
        let data: &Bytes = self.data.borrow();
        let (start, end) = (self.start, self.end);
        let section = data.get(start..end).unwrap_or_default();
        let append_time = self.walk.header.timestamp_type() == TimestampType::LogAppendTime;
        let max_timestamp = self.walk.header.max_timestamp;
        let mut n = 0;
        while n < max && self.walk.index < self.walk.header.record_count {
            let Some(plain) = self.walk.plain_record(section) else {
                break;
            };
            self.walk.pass(&plain);
            let view = |r: std::ops::Range<usize>| data.slice(start + r.start..start + r.end);
            each(
                plain.offset,
                Message {
                    timestamp: if append_time {
                        max_timestamp
                    } else {
                        plain.timestamp
                    },
                    key: plain.key.map(view),
                    value: view(plain.value),
                    headers: Vec::new(),
                },
            );
            n += 1;
        }
        n
    }
}
