//! What recovery does with the record of accepted holes (`layout::accepted`): under a repair, a
//! file that does not decode is moved aside.

use super::Recoverer;
use crate::Error;
use crate::layout::accepted::{ACCEPTED_HOLES_FILE_NAME, read_accepted_holes};

impl Recoverer<'_> {
    /// Under a repair, an accepted-holes file that does not decode is moved aside into the
    /// quarantine directory (the holes it named are then no longer accepted); otherwise it is
    /// left for [`Log::open`](crate::Log::open) to refuse.
    pub(super) fn check_accepted_holes(&mut self) -> Result<(), Error> {
        if !self.repair() {
            return Ok(());
        }
        match read_accepted_holes(self.dir) {
            Err(Error::Corrupt { .. }) => self.move_path_aside(
                &self.dir.join(ACCEPTED_HOLES_FILE_NAME),
                "accepted-holes file that does not decode",
            ),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }
}
