//! The finish order of a round's copies: seq order, and nothing above a failure.
//!
//! A round runs several copies at once, and they complete in any order. [`FinishOrder`] holds
//! them in the order they were launched (the plan's, oldest segment first) and hands each back
//! only once every older one was handed back, saying whether it may be recorded or must be
//! discarded. So the highest finished seq only grows, and the finished segments never leave
//! an unfinished one below them.

use std::collections::VecDeque;

/// What a round does with a copy [`FinishOrder::pop_ready`] hands back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// Every older copy of the round was recorded: record this one (finish it, or report its
    /// failure and [`stop`](FinishOrder::stop)).
    InOrder,
    /// The round stopped at an older copy's failure: this one is not finished (its attempt is
    /// deleted and the segment copied again next round), so no finished segment lies above the
    /// failed one.
    Discard,
}

/// How many copies per slot of the width may be launched and not handed back: the running ones
/// and those completed behind an older running copy ([`FinishOrder::can_launch`]).
pub const WAITING_PER_SLOT: usize = 2;

/// The copies of one round in launch (seq) order, each with its outcome once it completed.
///
/// ```
/// use krabka_tiering::policy::{FinishOrder, Settle};
///
/// let mut order = FinishOrder::new();
/// for base in [0, 10, 20] {
///     order.launch(base);
/// }
/// order.complete(20, "uploaded");
/// assert_eq!(order.pop_ready(), None); // 0 and 10 are still running
/// order.complete(0, "uploaded");
/// assert_eq!(order.pop_ready(), Some((0, "uploaded", Settle::InOrder)));
/// order.complete(10, "failed");
/// assert_eq!(order.pop_ready(), Some((10, "failed", Settle::InOrder)));
/// order.stop(); // the round reports the failure and stops there
/// assert_eq!(order.pop_ready(), Some((20, "uploaded", Settle::Discard)));
/// assert!(!order.can_launch(3));
/// ```
#[derive(Debug)]
pub struct FinishOrder<T> {
    /// Launched copies not handed back yet: base seq and outcome (once completed).
    window: VecDeque<(u64, Option<T>)>,
    stopped: bool,
}

impl<T> Default for FinishOrder<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> FinishOrder<T> {
    /// An empty round.
    pub fn new() -> Self {
        Self {
            window: VecDeque::new(),
            stopped: false,
        }
    }

    /// Whether another copy may start with at most `width` copies running: never once the
    /// round stopped.
    ///
    /// A sliding window over the running copies, not over the copies not handed back: a copy
    /// that completed behind a slower older one frees its slot at once, so one slow segment
    /// does not idle the other `width - 1` slots. The completed copies waiting behind it are
    /// bounded too (at most [`WAITING_PER_SLOT`] × `width` launched and not handed back), so a
    /// stalled oldest copy does not let the round upload arbitrarily far above it what a failure
    /// there would discard.
    pub fn can_launch(&self, width: usize) -> bool {
        let width = width.max(1);
        !self.stopped
            && self.running() < width
            && self.window.len() < width.saturating_mul(WAITING_PER_SLOT)
    }

    /// Copies launched whose outcome is not in yet.
    pub fn running(&self) -> usize {
        self.window.iter().filter(|(_, o)| o.is_none()).count()
    }

    /// Records that the copy of the segment starting at `base_seq` started. Launch in plan
    /// order (increasing base seqs).
    pub fn launch(&mut self, base_seq: u64) {
        self.window.push_back((base_seq, None));
    }

    /// Records the outcome of the copy of `base_seq`; `false` when no copy of it is waiting
    /// for one (nothing is recorded then).
    pub fn complete(&mut self, base_seq: u64, outcome: T) -> bool {
        match self
            .window
            .iter_mut()
            .find(|(b, o)| *b == base_seq && o.is_none())
        {
            Some((_, slot)) => {
                *slot = Some(outcome);
                true
            }
            None => false,
        }
    }

    /// The oldest copy, when it has completed, with what to do with it; `None` while the
    /// oldest is still running (or nothing is left).
    pub fn pop_ready(&mut self) -> Option<(u64, T, Settle)> {
        if !matches!(self.window.front(), Some((_, Some(_)))) {
            return None;
        }
        let (base, outcome) = self.window.pop_front()?;
        let settle = if self.stopped {
            Settle::Discard
        } else {
            Settle::InOrder
        };
        outcome.map(|o| (base, o, settle))
    }

    /// Stops the round (a copy failed): every copy handed back from now on is
    /// [`Settle::Discard`], and none may start.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Copies launched and not handed back yet (running, or completed behind an older one).
    pub fn pending(&self) -> usize {
        self.window.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_younger_completion_waits_for_the_older_ones() {
        let mut order = FinishOrder::new();
        order.launch(1);
        order.launch(11);
        assert!(order.complete(11, true));
        assert_eq!(order.pop_ready(), None);
        assert!(!order.complete(11, true), "completed twice");
        assert!(!order.complete(99, true), "never launched");
        assert!(order.complete(1, true));
        assert_eq!(order.pop_ready(), Some((1, true, Settle::InOrder)));
        assert_eq!(order.pop_ready(), Some((11, true, Settle::InOrder)));
        assert_eq!(order.pop_ready(), None);
        assert_eq!(order.pending(), 0);
    }

    #[test]
    fn width_bounds_the_running_copies() {
        let mut order: FinishOrder<()> = FinishOrder::new();
        assert!(order.can_launch(0), "a width of 0 still runs one copy");
        order.launch(1);
        assert!(!order.can_launch(1));
        assert!(order.can_launch(2));
        order.stop();
        assert!(!order.can_launch(2));
    }

    #[test]
    fn a_copy_completed_behind_a_slow_older_one_frees_its_slot() {
        let mut order: FinishOrder<()> = FinishOrder::new();
        order.launch(0);
        order.launch(10);
        assert!(!order.can_launch(2), "both slots run");
        assert!(order.complete(10, ()));
        assert_eq!(order.pop_ready(), None, "0 still runs");
        assert_eq!(order.running(), 1);
        assert!(
            order.can_launch(2),
            "10 waits for 0 but no longer holds a slot"
        );
        order.launch(20);
        order.complete(20, ());
        order.launch(30);
        order.complete(30, ());
        // 0 still runs, 10, 20 and 30 wait behind it: 4 = WAITING_PER_SLOT × 2 not handed back.
        assert_eq!(order.running(), 1);
        assert!(
            !order.can_launch(2),
            "the copies waiting behind a stalled one are bounded"
        );
        order.complete(0, ());
        for base in [0, 10, 20, 30] {
            assert_eq!(order.pop_ready(), Some((base, (), Settle::InOrder)));
        }
        assert!(order.can_launch(2));
    }

    proptest! {
        /// Whatever order copies complete in and whichever fail, the copies recorded finished
        /// are exactly the launched ones below the first failure handed back in order: a
        /// prefix of the plan. Every launched copy is handed back once.
        #[test]
        fn finished_copies_are_always_a_prefix_of_the_plan(
            n in 1usize..12,
            completion in proptest::collection::vec(any::<prop::sample::Index>(), 12),
            fails in proptest::collection::vec(any::<bool>(), 12),
            width in 1usize..5,
        ) {
            let mut order = FinishOrder::new();
            let mut next_launch = 0usize;
            let mut running: Vec<usize> = Vec::new();
            let mut finished: Vec<usize> = Vec::new();
            let mut handed = vec![0u32; n];
            let mut step = 0;
            loop {
                while next_launch < n && order.can_launch(width) {
                    order.launch(next_launch as u64);
                    running.push(next_launch);
                    next_launch += 1;
                }
                if running.is_empty() {
                    break;
                }
                let pick = completion[step % completion.len()].index(running.len());
                step += 1;
                let done = running.swap_remove(pick);
                prop_assert!(order.complete(done as u64, !fails[done]));
                while let Some((base, ok, settle)) = order.pop_ready() {
                    handed[base as usize] += 1;
                    match settle {
                        Settle::InOrder if ok => {
                            // Everything below it is finished already.
                            prop_assert_eq!(finished.len(), base as usize);
                            finished.push(base as usize);
                        }
                        Settle::InOrder => order.stop(),
                        Settle::Discard => prop_assert!(order.is_stopped()),
                    }
                }
            }
            let first_fail = (0..n).find(|&i| fails[i]);
            let expected: Vec<usize> = (0..first_fail.unwrap_or(n)).collect();
            prop_assert_eq!(finished, expected);
            // Launched copies are handed back once; after a failure nothing more launches.
            for (i, h) in handed.iter().enumerate() {
                prop_assert!(*h <= 1, "copy {} handed back {} times", i, h);
                prop_assert_eq!(*h == 1, i < next_launch);
            }
            prop_assert_eq!(order.pending(), 0);
        }
    }
}
