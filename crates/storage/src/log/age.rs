//! The active segment's age and the rolls it drives: [`Options::roll_after`](crate::Options::roll_after) at appends,
//! [`Log::roll_if_older`] for a quiet log, [`Log::active_segment_age`].
//!
//! The age is kept under the append lock as a monotonic [`Instant`] plus what the segment was
//! already worth at that instant, so the append path reads the clock once (no system call) and
//! never stats the file. A segment found non-empty at open gets its age from the file's evidence
//! the first time it is needed.

use std::time::{Duration, Instant};

use super::append::Appender;
use super::segment_age::{SegmentAge, found_age};
use super::{Inner, Log};
use crate::Error;

impl Inner {
    /// The active segment's age (under the append lock); `None` when it is empty.
    fn active_age(&self, ap: &mut Appender) -> Option<Duration> {
        if ap.age == SegmentAge::Found {
            let before = found_age(&ap.file);
            ap.age = SegmentAge::Known {
                at: Instant::now(),
                before,
            };
        }
        ap.age.known()
    }

    /// Before an append: rolls the active segment when [`Options::roll_after`](crate::Options::roll_after)
    /// is set and its first record is at least that old.
    pub(super) fn roll_if_due(&self, ap: &mut Appender) -> Result<(), Error> {
        let Some(limit) = self.opts.roll_after else {
            return Ok(());
        };
        match self.active_age(ap) {
            Some(age) if age >= limit => {
                tracing::debug!(dir = %self.dir.display(), ?age, "rolling a segment by age");
                self.roll_locked(ap)
            }
            _ => Ok(()),
        }
    }
}

impl Log {
    /// Rolls the active segment (as [`Log::roll`] does) when it holds records and its first
    /// record is at least `age` old ([`Log::active_segment_age`]); returns whether it rolled.
    /// Tiering calls it on a quiet log so that no record stays in the active segment, which is
    /// never copied to the remote tier, much longer than `age`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use krabka_protocol::Message;
    /// use krabka_storage::{Log, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options::default())?;
    /// assert!(!log.roll_if_older(Duration::ZERO)?); // empty: nothing to roll
    /// log.append(&Message::new("a"))?;
    /// assert!(!log.roll_if_older(Duration::from_secs(3600))?); // not an hour old
    /// assert!(log.roll_if_older(Duration::ZERO)?);
    /// assert_eq!(log.segments().len(), 2);
    /// assert!(!log.roll_if_older(Duration::ZERO)?); // the new active segment is empty
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Log::roll`]: [`Error::Poisoned`], [`Error::Io`].
    pub fn roll_if_older(&self, age: Duration) -> Result<bool, Error> {
        let mut ap = self.inner.appender.lock();
        self.inner.check_poisoned()?;
        match self.inner.active_age(&mut ap) {
            Some(a) if a >= age => self.inner.roll_locked(&mut ap).map(|()| true),
            _ => Ok(false),
        }
    }

    /// How long ago the first record of the active segment was appended; `None` when the active
    /// segment holds no record. For a segment found non-empty at open, counted from the earliest
    /// evidence its file gives (see [`Options::roll_after`](crate::Options::roll_after)).
    /// Waits for an append in progress (it reads the age under the append lock).
    ///
    /// ```
    /// use std::time::Duration;
    /// use krabka_protocol::Message;
    /// use krabka_storage::{Log, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let log = Log::open(dir.path(), Options::default())?;
    /// assert_eq!(log.active_segment_age(), None);
    /// log.append(&Message::new("a"))?;
    /// std::thread::sleep(Duration::from_millis(5));
    /// assert!(log.active_segment_age().is_some_and(|a| a >= Duration::from_millis(5)));
    /// log.roll()?;
    /// assert_eq!(log.active_segment_age(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn active_segment_age(&self) -> Option<Duration> {
        let mut ap = self.inner.appender.lock();
        self.inner.active_age(&mut ap)
    }
}
