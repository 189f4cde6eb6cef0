//! Accepting explicit holes: the user's durable decision that a hole's seqs are lost, so that
//! whatever waits for them (tiering) may go on past it.

use std::ops::RangeInclusive;

use super::Log;
use crate::layout::accepted::write_accepted_holes;
use crate::{AcceptedHole, Error};

impl Log {
    /// The holes accepted with [`accept_holes`](Self::accept_holes) (by this or an earlier
    /// handle; read from [`ACCEPTED_HOLES_FILE_NAME`](crate::ACCEPTED_HOLES_FILE_NAME) at open),
    /// sorted by first seq. Retention may have dropped some of them from the log since.
    pub fn accepted_holes(&self) -> Vec<AcceptedHole> {
        self.inner.accepted.lock().clone()
    }

    /// Accepts the explicit holes ([`Log::holes`]) that hold `seqs` as lost: records
    /// each of them whole, with the time, in
    /// [`ACCEPTED_HOLES_FILE_NAME`](crate::ACCEPTED_HOLES_FILE_NAME) (replaced atomically and
    /// synced before this returns). Reads of their seqs still fail with
    /// [`Error::Quarantined`]; tiering no longer waits for them. Returns the acceptance of
    /// every hole `seqs` touches (an earlier one is kept, with its time).
    ///
    /// ```
    /// # use krabka_storage::{Error, Log, Options};
    /// # let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options::default())?;
    /// // A log without holes has nothing to accept.
    /// assert!(matches!(log.accept_holes(1..=1), Err(Error::NotAHole { seq: 1, .. })));
    /// assert!(log.accepted_holes().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotAHole`] naming the first seq of `seqs` that no hole holds (nothing is
    /// recorded then); [`Error::Io`] when the file cannot be written.
    pub fn accept_holes(&self, seqs: RangeInclusive<u64>) -> Result<Vec<AcceptedHole>, Error> {
        let holes = self.inner.state.read().holes();
        let (mut next, end) = (*seqs.start(), *seqs.end());
        let mut touched = Vec::new();
        for hole in &holes {
            if next > end || hole.first_seq > next {
                break;
            }
            if hole.last_seq >= next {
                touched.push((hole.first_seq, hole.last_seq));
                next = hole.last_seq.saturating_add(1);
            }
        }
        if next <= end || touched.is_empty() {
            let listed: Vec<String> = holes
                .iter()
                .map(|h| format!("{}..={}", h.first_seq, h.last_seq))
                .collect();
            return Err(Error::NotAHole {
                dir: self.dir().to_path_buf(),
                seq: next,
                reason: if listed.is_empty() {
                    "the log has no hole".to_owned()
                } else {
                    format!("its holes are seq {}", listed.join(", "))
                },
            });
        }
        let now = krabka_protocol::now_ms();
        let mut accepted = self.inner.accepted.lock();
        let mut all = accepted.clone();
        let mut out = Vec::new();
        for (first, last) in touched {
            match all.iter().find(|a| a.covers(first, last)) {
                Some(a) => out.push(*a),
                None => {
                    let a = AcceptedHole {
                        first_seq: first,
                        last_seq: last,
                        accepted_at_ms: now,
                    };
                    all.push(a);
                    out.push(a);
                }
            }
        }
        if all.len() != accepted.len() {
            all.sort();
            write_accepted_holes(self.dir(), &all)?;
            *accepted = all;
        }
        Ok(out)
    }
}
