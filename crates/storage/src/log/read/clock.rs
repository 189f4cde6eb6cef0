//! The bound on open descriptors of closed segments: a clock (second chance) over the slots
//! holding one, run only when a read opens a file.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::super::SegFile;

/// The segments whose slots hold a descriptor, in the order the hand passes them.
#[derive(Debug)]
pub(super) struct Clock {
    cap: usize,
    files: Vec<Arc<SegFile>>,
    /// The next slot the hand looks at; a new one goes just behind it (the last it reaches).
    hand: usize,
}

impl Clock {
    /// A clock over at most `cap` descriptors (at least one).
    pub(super) fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            files: Vec::new(),
            hand: 0,
        }
    }

    /// Takes `seg`, whose slot was just given a descriptor, just behind the hand (the last
    /// one it reaches), and closes others while more than `cap` are open.
    pub(super) fn admit(&mut self, seg: &Arc<SegFile>) {
        seg.read_fd.used.store(false, Ordering::Relaxed);
        let at = self.hand.min(self.files.len());
        self.files.insert(at, Arc::clone(seg));
        self.hand = at + 1;
        while self.files.len() > self.cap {
            self.evict_one();
        }
    }

    /// Stops tracking `seg` (its descriptor is being closed by the caller).
    pub(super) fn forget(&mut self, seg: &Arc<SegFile>) {
        if let Some(i) = self.files.iter().position(|f| Arc::ptr_eq(f, seg)) {
            self.files.remove(i);
            if self.hand > i {
                self.hand -= 1;
            }
        }
    }

    /// The segments whose descriptors are open.
    #[cfg(test)]
    pub(super) fn open_files(&self) -> &[Arc<SegFile>] {
        &self.files
    }

    /// How many descriptors are open.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.files.len()
    }

    /// Closes one descriptor: the first one from the hand on not used since the hand last
    /// passed it (every bit cleared by one turn, so this ends within two).
    fn evict_one(&mut self) {
        for _ in 0..=2 * self.files.len() {
            if self.hand >= self.files.len() {
                self.hand = 0;
            }
            let Some(seg) = self.files.get(self.hand) else {
                return;
            };
            if seg.read_fd.used.swap(false, Ordering::Relaxed) {
                self.hand += 1;
                continue;
            }
            let seg = self.files.remove(self.hand);
            // Readers holding it keep their `Arc` until their read ends.
            seg.read_fd.file.write().take();
            return;
        }
    }
}
